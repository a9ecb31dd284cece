"""The ``cloaknet`` command line: plan and the in-process demo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cloaknet.cli import main
from cloaknet.protocols import CloakProtocol
from tests.cloaknet.test_planner import JSON_KEYS


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "plan", "--users", "10000", "--epsilon", "1", "--delta", "1e-6", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data.keys() >= JSON_KEYS
    # the default bound is "auto": whichever of the seed lemmas and BBGN needs fewer messages
    assert data["mode"] == "single-user" and data["bound"] == "bbgn"
    assert data["epsilon"] <= 1 and data["delta"] <= 1e-6
    (seed,) = data["alternatives"]
    assert seed["bound"] == "optimized" and seed["precision"] == 100000
    assert seed.keys() >= JSON_KEYS
    assert data["messages_per_user"] < seed["messages_per_user"]


def test_plan_json_sum_preserving_has_null_noise(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "plan",
        "-n",
        "1000",
        "-e",
        "0.5",
        "-d",
        "1e-8",
        "--mode",
        "sum-preserving",
        "--precision",
        "5000",
        "--json",
    )
    data = json.loads(out)
    assert code == 0 and data["noise_p"] is None and data["noise_q"] is None
    assert data["precision"] == 5000


def test_plan_table_mentions_the_theorem_comparison(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--users", "10000", "--epsilon", "1", "--delta", "1e-6")
    assert code == 0
    assert "messages per user" in out and "theorem constants" in out


def test_plan_theorem_bound_warns(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "plan",
        "-n",
        "10000",
        "-e",
        "1",
        "-d",
        "1e-6",
        "--mode",
        "sum-preserving",
        "--bound",
        "theorem",
    )
    assert code == 0 and "do NOT meet" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--users", "-5", "--epsilon", "1", "--delta", "1e-6"],
        ["plan", "--users", "100", "--epsilon", "0", "--delta", "1e-6"],
        ["plan", "--users", "100", "--epsilon", "1", "--delta", "1.5"],
        ["plan", "--users", "100", "--epsilon", "nan", "--delta", "1e-6"],
        ["plan", "--users", "100", "--epsilon", "1"],
        ["plan", "--users", "100", "--epsilon", "1", "--delta", "1e-6", "--mode", "x"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err


def test_parameter_errors_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys, "plan", "-n", "100", "-e", "1", "-d", "1e-6", "--colluders", "95",
        "--bound", "optimized",
    )
    assert code == 2
    assert err.count("\n") == 1 and "0.9" in err


def test_auto_falls_back_to_the_bound_that_applies(capsys: pytest.CaptureFixture[str]) -> None:
    # 95 of 100 colluders: Lemma 13 (<= 0.9 n) does not apply, BBGN (>= 3 honest users) does;
    # the table then shows no comparison with the theorem's constants (which do not apply)
    code, out, err = run(capsys, "plan", "-n", "100", "-e", "1", "-d", "1e-6", "-c", "95")
    assert code == 0, err
    assert "bbgn bound" in out and "theorem constants" not in out
    code, out, _ = run(capsys, "plan", "-n", "100", "-e", "1", "-d", "1e-6", "-c", "95", "--json")
    data = json.loads(out)
    assert code == 0 and data["bound"] == "bbgn" and data["colluders"] == 95
    assert data["alternatives"] == []


def test_bbgn_serves_rounds_of_a_range(capsys: pytest.CaptureFixture[str]) -> None:
    # split-and-mix with Polya noise: noise and messages for n, the modulus for max_users
    code, out, _ = run(
        capsys, "plan", "-n", "1000", "-e", "1", "-d", "1e-6", "--max-users", "5000", "--json"
    )
    data = json.loads(out)
    assert code == 0 and data["bound"] == "bbgn" and data["max_users"] == 5000
    assert data["evaluated_at_users"] == 1000 and data["noise_shape"] == "1/1000"
    assert data["modulus"] > 5000 * data["precision"]


def test_infeasible_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "-n", "5", "-e", "1", "-d", "1e-6", "--bound", "optimized")
    assert code == 3 and "honest users" in err
    code, _, err = run(capsys, "plan", "-n", "2", "-e", "1", "-d", "1e-6")
    assert code in (2, 3) and err.count("\n") == 1


def test_demo_sum_preserving_is_exact(capsys: pytest.CaptureFixture[str]) -> None:
    # --mixes 0: the ideal shuffler in this process (tests/integration runs the networked demo)
    code, out, _ = run(
        capsys, "demo", "--users", "300", "--mode", "sum-preserving", "--mixes", "0", "--json"
    )
    data = json.loads(out)
    assert code == 0
    assert data["estimate"] == data["rounded_sum"]
    assert abs(data["estimate"] - data["true_sum"]) <= 300 / data["precision"]


def test_demo_single_user_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", "--users", "200", "--data-seed", "7", "--mixes", "0")
    assert code == 0 and "estimate" in out and "true sum" in out and "ideal" in out


#: What a demo reports about the plan it ran, equal to ``cloaknet plan --json``'s fields.
PLAN_FIELDS = ("protocol", "mode", "bound", "lemma", "noise", "messages_per_user", "modulus",
               "precision", "epsilon", "epsilon_exact", "delta", "meets_target")


@pytest.mark.parametrize("mode", ["single-user", "sum-preserving"])
def test_demo_runs_what_plan_selects(capsys: pytest.CaptureFixture[str], mode: str) -> None:
    args = ("--users", "1000", "--mode", mode)
    code, out, _ = run(capsys, "plan", *args, "--epsilon", "1", "--delta", "1e-6", "--json")
    assert code == 0
    planned = json.loads(out)
    code, out, _ = run(capsys, "demo", *args, "--mixes", "0", "--json")
    assert code == 0
    ran = json.loads(out)
    assert {key: ran[key] for key in PLAN_FIELDS} == {key: planned[key] for key in PLAN_FIELDS}
    expected = ("bbgn", "polya") if mode == "single-user" else ("cloak", "none")
    assert (ran["protocol"], ran["noise"]) == expected and ran["bound"] == "bbgn"
    assert abs(ran["error"]) < 8 * ran["expected_rmse"] + 1000 / ran["precision"]


def test_demo_protocol_and_bound_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", "--users", "200", "--mixes", "0", "--protocol", "cloak",
                       "--json")
    data = json.loads(out)
    assert code == 0 and (data["protocol"], data["bound"]) == ("cloak", "optimized")
    assert data["noise"] == "truncated-laplace" and data["lemma"] == "Lemma 11"
    code, out, _ = run(capsys, "demo", "--users", "1000", "--mixes", "0", "--protocol",
                       "blanket", "--json")
    data = json.loads(out)
    assert code == 0 and (data["protocol"], data["noise"]) == ("blanket", "uniform-blanket")
    code, _, err = run(capsys, "demo", "--mixes", "0", "--protocol", "cloak", "--bound", "bbgn")
    assert code == 2 and "not the cloak" in err and err.count("\n") == 1


@pytest.mark.slow
def test_networked_demo_without_options_runs_the_default_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "plan", "-n", "1000", "-e", "1", "-d", "1e-6", "--json")
    planned = json.loads(out)
    code, out, _ = run(capsys, "demo", "--json")
    assert code == 0
    ran = json.loads(out)
    assert ran["mixes"] == 3 and ran["users"] == 1000
    assert {key: ran[key] for key in PLAN_FIELDS} == {key: planned[key] for key in PLAN_FIELDS}
    assert (ran["bound"], ran["noise"]) == ("bbgn", "polya")


def test_console_script_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cloaknet", "plan", "-n", "100", "-e", "1", "-d", "1e-6", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["users"] == 100
    helptext = subprocess.run(
        [sys.executable, "-m", "cloaknet", "plan", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    assert "--colluders" in helptext and "--bound" in helptext


def test_plan_toml_is_a_loadable_protocol_table(capsys: pytest.CaptureFixture[str]) -> None:
    import tomllib

    from cloaknet.chainfile import chain_from_config
    from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy
    from mixnet.keys import generate_identity

    code, out, _ = run(
        capsys, "plan", "-n", "200", "-e", "1", "-d", "1e-6", "--toml", "--bound", "optimized"
    )
    assert code == 0
    protocol = tomllib.loads(out)["protocol"]
    assert protocol["messages"] >= 4 and protocol["mode"] == "single-user"
    config = ChainConfig(
        chain_id="t",
        mixes=(NodeInfo("mix1", "ws://127.0.0.1:1", generate_identity().verify_key),),
        sink=NodeInfo("analyzer", "ws://127.0.0.1:2", None),
        sink_table="analyzer",
        policy=RoundPolicy(min_users=200, max_users=200, deadline_seconds=10.0),
        sections={"protocol": protocol},
    )
    chain = chain_from_config(config)
    assert isinstance(chain.protocol, CloakProtocol)
    assert chain.protocol.params.messages == protocol["messages"]
    assert str(chain.protocol.params.modulus) == protocol["modulus"]


def test_plan_auto_toml_for_bbgn_loads_as_a_named_protocol(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import tomllib

    from cloaknet.chainfile import chain_from_config
    from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy
    from mixnet.keys import generate_identity

    code, out, _ = run(capsys, "plan", "-n", "300", "-e", "1", "-d", "1e-6", "--toml")
    assert code == 0
    protocol = tomllib.loads(out)["protocol"]
    assert protocol["name"] == "bbgn"
    config = ChainConfig(
        chain_id="t",
        mixes=(NodeInfo("mix1", "ws://127.0.0.1:1", generate_identity().verify_key),),
        sink=NodeInfo("analyzer", "ws://127.0.0.1:2", None),
        sink_table="analyzer",
        policy=RoundPolicy(min_users=300, max_users=300, deadline_seconds=10.0),
        sections={"protocol": protocol},
    )
    assert chain_from_config(config).protocol is not None


def test_plan_bbgn_sum_preserving(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "plan", "-n", "10000", "-e", "1", "-d", "1e-6", "--mode", "sum-preserving", "--json"
    )
    data = json.loads(out)
    assert code == 0 and data["bound"] == "bbgn" and data["protocol"] == "cloak"
    assert data["epsilon"] == 0 and data["delta"] <= 1e-6
    assert data["messages_per_user"] < data["alternatives"][0]["messages_per_user"]


def test_plan_suggests_what_more_messages_buy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "plan", "-n", "100000", "-e", "1", "-d", "1e-6", "--bound", "optimized"
    )
    assert code == 0
    tip = next(line for line in out.splitlines() if line.startswith("tip:"))
    m_tip = int(tip.split("m = ")[1].split(",")[0])
    assert m_tip > 53  # m-first leaves noise at m = 53; one or two more messages halve it


SCENARIO = ["-n", "1000", "--max-users", "10000", "-e", "1", "-d", "1e-6",
            "--mode", "sum-preserving", "--bound", "optimized"]


def test_plan_reports_the_worst_round_of_the_range(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 11: sum-preserving (Lemma 6) is planned and reported at --max-users."""
    from cloaknet import accounting

    code, out, _ = run(capsys, "plan", *SCENARIO, "--json")
    data = json.loads(out)
    assert code == 0 and data["users"] == 1000 and data["max_users"] == 10_000
    assert data["evaluated_at_users"] == 10_000 and data["lemma"] == "Lemma 6"
    again = accounting.sum_preserving_bound(
        data["messages_per_user"], int(data["modulus"]), data["gamma"], 10_000 - 1
    )
    assert (data["epsilon"], data["delta"]) == (again.epsilon, again.delta)
    assert again.epsilon <= 1 and again.delta <= 1e-6 and data["meets_target"]
    code, out, _ = run(capsys, "plan", *SCENARIO)
    assert code == 0
    row = next(line for line in out.splitlines() if "evaluated at n" in line)
    assert "10,000" in row
    assert f"{data['epsilon']:.6g}" in out
    code, out, _ = run(capsys, "plan", *SCENARIO, "--toml")
    assert code == 0 and "at n = 10000 users" in out.splitlines()[0]
    # single-user changes: still evaluated at the smallest round
    code, out, _ = run(capsys, "plan", "-n", "1000", "--max-users", "10000", "-e", "1", "-d",
                       "1e-6", "--bound", "optimized", "--json")
    assert code == 0 and json.loads(out)["evaluated_at_users"] == 1000


def test_node_refuses_a_chain_whose_rounds_outgrow_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mixnet.chain_render import write_chain_config
    from tests.cloaknet.test_chainfile import PLANNED_FOR_1000, make_config

    path = tmp_path / "chain.toml"
    write_chain_config(path, make_config(dict(PLANNED_FOR_1000), min_users=1000,
                                         max_users=10_000))
    code, _, err = run(capsys, "node", "--chain", str(path), "--name", "analyzer")
    assert code == 2 and err.count("\n") == 1
    assert "protocol.epsilon" in err and "[round].max_users = 10000" in err
