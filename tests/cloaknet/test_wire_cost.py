"""Wire bytes per user: the arithmetic, what `cloaknet plan` reports, and
`cloaknet chain init --ownership-proofs`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloaknet.chainfile import load_chain
from cloaknet.cli import main
from cloaknet.wire_cost import wire_cost
from mixnet.onion import wrap_submission


def test_the_default_plan_costs_741_bytes_through_three_mixes() -> None:
    cost = wire_cost(7, 3, 3)
    assert cost.per_hop == (741, 693, 357, 21) and cost.per_user == 741
    proven = wire_cost(7, 3, 3, proven=True)
    assert proven.per_hop == (1413, 1365, 693, 21)
    assert wire_cost(7, 3, 1).per_hop == (69, 21)
    assert cost.to_json()["wire_bytes_per_hop"] == {
        "mix1": 741, "mix2": 693, "mix3": 357, "analyzer": 21,
    }  # fmt: skip


@pytest.mark.parametrize("proven", [False, True])
def test_the_count_is_what_the_client_really_sends(proven: bool) -> None:
    keys = [bytes.fromhex("09" + "00" * 31)] * 3  # the base point: a valid public key
    box = wrap_submission([b"abc"] * 7, keys, chain_id="c", round_id=1, proven=proven)
    assert len(box) == wire_cost(7, 3, 3, proven=proven).per_user


@pytest.mark.parametrize(("bad", "error"), [(0, ValueError), (True, TypeError), (1.0, TypeError)])
def test_counts_are_checked(bad: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        wire_cost(bad, 3, 3)  # type: ignore[arg-type]


def test_plan_reports_wire_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--users", "10000", "--epsilon", "1", "--delta", "1e-6", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    m, w = result["messages_per_user"], result["bytes_per_message"]
    assert result["wire_bytes_per_user"] == wire_cost(m, w, 3).per_user
    assert main([*argv, "--mixes", "2", "--ownership-proofs"]) == 0
    proven = json.loads(capsys.readouterr().out)
    assert proven["ownership_proofs"] is True
    assert proven["wire_bytes_per_user"] == wire_cost(m, w, 2, proven=True).per_user
    assert main(argv[:-1]) == 0
    assert "wire bytes per user" in capsys.readouterr().out


def test_chain_init_with_ownership_proofs(tmp_path: Path) -> None:
    argv = ["chain", "init", str(tmp_path / "c"), "--mixes", "2", "--users", "100",
            "--epsilon", "1", "--delta", "1e-6", "--ownership-proofs"]  # fmt: skip
    assert main(argv) == 0
    chain = load_chain(tmp_path / "c" / "chain.toml")
    assert chain.config.ownership_proofs is True
