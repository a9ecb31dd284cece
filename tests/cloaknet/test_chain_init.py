"""Tests for cloaknet.chain_init and the commands built on it (chain init, plan --toml,
submit's arguments, --version)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from cloaknet.chain_init import check_tables, free_ports, init_chain, round_section
from cloaknet.chainfile import ChainFileError, load_chain
from cloaknet.cli import main
from cloaknet.plans import select_plan
from cloaknet.protocol_table import selected_section


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_init_chain_writes_a_chain_that_loads(tmp_path: Path) -> None:
    selected = select_plan(100, 1.0, 1e-6, mode="sum-preserving", max_users=400)
    made = init_chain(tmp_path / "c", selected, mixes=2, chain_id="t1")
    chain = load_chain(made.chain_file)
    assert [m.name for m in chain.config.mixes] == ["mix1", "mix2"]
    assert chain.config.sink.name == "analyzer"
    assert (chain.config.policy.min_users, chain.config.policy.max_users) == (100, 400)
    ports = {m.endpoint[1] for m in (*chain.config.mixes, chain.config.sink)}
    assert len(ports) == 3
    for name, path in made.key_files.items():
        assert path.stat().st_mode & 0o777 == 0o600, name
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o700
    assert made.commands[0].endswith("--name analyzer")
    assert made.commands[1].endswith(f"--name mix2 --key {made.key_files['mix2']}")
    with pytest.raises(ChainFileError, match="already exists"):
        init_chain(tmp_path / "c", selected, mixes=2)


def test_init_chain_removes_its_keys_when_it_fails(tmp_path: Path) -> None:
    selected = select_plan(100, 1.0, 1e-6)
    with pytest.raises(ChainFileError, match=r"chain\.id"):
        init_chain(tmp_path, selected, mixes=2, chain_id="no spaces allowed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError):
        init_chain(tmp_path, selected, mixes=0)


def test_init_chain_never_removes_a_key_file_it_did_not_write(tmp_path: Path) -> None:
    selected = select_plan(100, 1.0, 1e-6)
    kept = tmp_path / "mix2.key"
    kept.write_text("someone's key\n")
    with pytest.raises(ChainFileError, match="already exists"):
        init_chain(tmp_path, selected, mixes=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mix2.key"]
    assert kept.read_text() == "someone's key\n"


def test_round_section_matches_the_plan_and_the_loader_checks_the_pair() -> None:
    selected = select_plan(1000, 1.0, 1e-6, mode="sum-preserving", max_users=10_000)
    rounds = round_section(selected, deadline_seconds=30, below_min="abort")
    assert rounds == {
        "min_users": 1000,
        "max_users": 10_000,
        "deadline_seconds": 30.0,
        "below_min": "abort",
    }
    check_tables(rounds, selected_section(selected))
    # rounds smaller than the plan's users are refused
    with pytest.raises(ChainFileError, match="min_users"):
        check_tables({**rounds, "min_users": 10}, selected_section(selected))
    with pytest.raises(ChainFileError, match="round"):
        round_section(selected, deadline_seconds=-1)


def test_free_ports_are_distinct() -> None:
    ports = free_ports("127.0.0.1", 5)
    assert len(set(ports)) == 5 and all(0 < p < 65536 for p in ports)


def test_cli_chain_init_prints_one_command_per_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "chain dir"
    argv = ["chain", "init", str(d), "--mixes", "3", "--users", "50", "--epsilon", "1",
            "--delta", "1e-6", "--deadline", "20"]  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    commands = [line for line in out.splitlines() if line.startswith("cloaknet node")]
    assert len(commands) == 4
    assert all("'" in c for c in commands)  # the space in the path is quoted
    data = tomllib.loads((d / "chain.toml").read_text())
    assert data["round"]["deadline_seconds"] == 20.0
    code, out, err = run(capsys, *argv)
    assert code == 2 and "already exists" in err and len(err.strip().splitlines()) == 1


def test_plan_toml_appends_round_and_protocol_that_load_together(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(
        capsys, "plan", "--users", "1000", "--max-users", "5000", "--epsilon", "1",
        "--delta", "1e-6", "--mode", "sum-preserving", "--toml",
    )  # fmt: skip
    assert code == 0, err
    data = tomllib.loads(out)
    assert (data["round"]["min_users"], data["round"]["max_users"]) == (1000, 5000)
    check_tables(data["round"], data["protocol"])


def test_plan_toml_serves_a_range_with_split_and_mix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(
        capsys, "plan", "--users", "1000", "--max-users", "2000", "--bound", "bbgn",
        "--epsilon", "1", "--delta", "1e-6", "--toml",
    )  # fmt: skip
    assert code == 0, err
    data = tomllib.loads(out)
    assert (data["round"]["min_users"], data["round"]["max_users"]) == (1000, 2000)
    check_tables(data["round"], data["protocol"])


def test_check_tables_refuses_a_combination_no_chain_loads() -> None:
    """Blanket and Cheu et al. serve exactly their users: a range is refused, naming why."""
    from cloaknet.chainfile import ChainFileError

    with pytest.raises(ChainFileError):
        check_tables(
            {"min_users": 100, "max_users": 200, "deadline_seconds": 600.0, "below_min": "wait"},
            {"name": "blanket", "users": 100, "epsilon": 1.0, "delta": 1e-6},
        )


def test_version_and_submit_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("cloaknet ")
    code, _, err = run(capsys, "submit", "--chain", "x.toml", "1.5")
    assert code == 2 and "[0, 1]" in err
    code, _, err = run(capsys, "submit", "--chain", "x.toml", "nan")
    assert code == 2
