"""The chaos driver (scripts/chaos.py), quick: SIGKILL each kind of node once — entry mix,
middle mix, last mix, analyzer — at a seeded round phase, restart it, and check that every
acknowledged submission was counted exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.script_module import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "chaos.py"


def processes_mentioning(text: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(pid))
    return found


def run_chaos(*args: str, timeout: float) -> tuple[int, str, str]:
    """Run the driver; on a timeout stop it with SIGTERM (it then stops its nodes)."""
    proc = subprocess.Popen([sys.executable, str(SCRIPT), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the chaos driver did not finish in {timeout:.0f} s:\n{err[-3000:]}")
    return proc.returncode, out, err


def run_points(tmp_path: Path, points: int, *args: str) -> dict[str, Any]:
    """Run the driver for ``points`` points with ``args``: its JSON report, once it exited 0
    and printed that every point recovered (else the failed points' details)."""
    report = tmp_path / "chaos.json"
    limit = 15 * points
    code, out, err = run_chaos("--points", str(points), *args, "--point-timeout", "40",
                               "--time-limit", str(limit), "--json", str(report),
                               timeout=limit + 35)  # fmt: skip
    data: dict[str, Any] = json.loads(report.read_text())
    failures = [
        {k: p[k] for k in ("index", "node", "phase", "stored", "error", "checks", "log_warnings")}
        for p in data["points"] if not p["recovered"]
    ]
    assert code == 0, json.dumps(failures, indent=1)[-6000:] + err[-2000:]
    assert f"{points} of {points} recovered, 0 lost, 0 doubled" in out
    return data


def four_points(tmp_path: Path, *args: str) -> dict[str, Any]:
    """:func:`run_points` for 4 points: on three mixes, one per node."""
    return run_points(tmp_path, 4, *args)


@pytest.mark.slow
def test_sigkill_of_every_node_kind_loses_and_doubles_nothing(tmp_path: Path) -> None:
    data = four_points(tmp_path, "--seed", "7", "--users", "6")
    assert data["summary"] == "4 of 4 recovered, 0 lost, 0 doubled"
    points = data["points"]
    assert [p["node"] for p in points] == ["entry", "middle", "last", "analyzer"]
    for p in points:
        assert p["recovered"] and p["lost"] == 0 and p["doubled"] == 0 and p["error"] is None
        # the probe's identical resend after its reply was lost, at least
        assert p["resent"] >= 1
        assert p["acknowledged"] == 6 + p["fillers"]
        for result in p["results"].values():
            assert result["status"] == "ok"
    assert data["seconds"] < 60
    # every node process the driver started was stopped, and its directory removed
    assert processes_mentioning(data["directory"]) == []
    assert not Path(data["directory"]).exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("poison", "checks", "chunk"),
    [("layer", ["poisoner submits garbage for hop 1", "poisoner submits garbage for hop 2"],
      "1"),
     ("payload", ["poisoner submits 5 shares that are not reduced mod N"], "1"),
     ("twins", ["poisoner submits two onions that collide at hop 1"], "1")],
)  # fmt: skip
def test_sigkill_still_excludes_the_poisoned_submission(
    tmp_path: Path, poison: str, checks: list[str], chunk: str
) -> None:
    """``--poison``: each round carries a submission the trace must exclude — a garbage
    layer at mix 2 or mix 3 (in turn) on a chain with ownership proofs (a mix killed after
    storing its chunks derives that failure from its store), a share the validator refuses,
    or two onions that collide at mix 2 (a restarted middle mix finds them again in its
    stored outputs) — whatever node is killed when."""
    # chunks of one item: the poisoner's m items travel in one exclude frame, a chunk whose
    # only item did not peel is read back for the trace, mix 2's page of its own carries
    # both duplicate accusations, and 5 refused payloads go in 3 pages of 2 accusations
    bad = ("--bad-shares", "5") if poison == "payload" else ()
    data = four_points(tmp_path, "--seed", "5", "--users", "4", "--poison", poison,
                       "--chunk-size", chunk, *bad)  # fmt: skip
    assert data["poison"] == poison
    for index, p in enumerate(data["points"]):
        assert checks[index % len(checks)] in p["checks"]
        poisoned = p["results"][str(p["round"])]
        assert poisoned["status"] == "ok" and poisoned["excluded"] == 1
        assert poisoned["users"] == 3  # the probe and two users; the poisoner left out


@pytest.mark.slow
def test_rounds_that_abort_after_their_trace_end_aborted_everywhere(tmp_path: Path) -> None:
    """``--abort``: excluding the poisoner leaves fewer than ``min_users``, so every round
    aborts after its trace, whatever node is killed when. It ends ``aborted`` at the entry
    mix as at the analyzer, and none of its values is counted (a value comes back only if its
    client submitted it again and was acknowledged in a later round)."""
    data = four_points(tmp_path, "--seed", "7", "--users", "4", "--poison", "payload",
                       "--abort", "--chunk-size", "8")  # fmt: skip
    assert data["abort"] is True
    for p in data["points"]:
        assert p["results"][str(p["round"])] == {"error": f"round {p['round']} was aborted"}


@pytest.mark.slow
def test_four_mixes_exclude_onions_that_collide_at_either_middle_mix(tmp_path: Path) -> None:
    """``--mixes 4 --poison twins``: every mix and the analyzer are killed in turn while two
    onions collide at mix 2 or at mix 3 — at mix 3 the pair of ``duplicate`` accusations is
    checked by mix 2, extended with its steps and checked again by the entry mix."""
    data = run_points(tmp_path, 5, "--seed", "11", "--users", "4", "--mixes", "4",
                      "--poison", "twins", "--chunk-size", "12")  # fmt: skip
    assert data["mixes"] == 4
    points = data["points"]
    assert [p["target"] for p in points] == ["mix1", "mix2", "mix3", "mix4", "analyzer"]
    assert [p["node"] for p in points] == ["entry", "middle", "middle", "last", "analyzer"]
    for index, p in enumerate(points):
        assert f"poisoner submits two onions that collide at hop {1 + index % 2}" in p["checks"]
        poisoned = p["results"][str(p["round"])]
        assert poisoned["status"] == "ok" and poisoned["excluded"] == 1


@pytest.mark.slow
def test_sigkill_over_tls_loses_and_doubles_nothing(tmp_path: Path) -> None:
    """``--tls``: every link, the client library and the driver speak wss:// (HTTPS for the
    routes) with a CA made for the chain, through every kill and restart."""
    data = four_points(tmp_path, "--seed", "7", "--users", "4", "--tls")
    assert data["tls"] is True
    assert all(p["resent"] >= 1 for p in data["points"])


@pytest.mark.slow
def test_two_nodes_killed_at_once_lose_and_double_nothing(tmp_path: Path) -> None:
    """``--pairs``: the target and the next node go down together (a host running both), and
    both restart from their databases."""
    data = four_points(tmp_path, "--seed", "23", "--users", "4", "--pairs")
    assert data["pairs"] is True
    assert [p["also"] for p in data["points"]] == ["mix2", "mix3", "analyzer", "mix1"]
    assert all(f"{p['target']} and {p['also']} healthy again" in p["checks"]
               for p in data["points"])  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bad-shares", "3"], "--bad-shares needs --poison payload"),
        (["--poison", "twins", "--bad-shares", "2"], "--bad-shares needs --poison payload"),
        (["--poison", "payload", "--bad-shares", "9"], "--bad-shares must be in 1..--messages"),
        (["--poison", "payload", "--bad-shares", "0"], "--bad-shares must be in 1..--messages"),
    ],
)
def test_bad_shares_are_checked(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    chaos = load_script("chaos.py", "chaos_arguments")
    with pytest.raises(SystemExit) as exit_info:
        chaos.parse_args(args)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    shape = chaos.parse_args(["--poison", "payload", "--bad-shares", "8"])
    assert shape.bad_shares == 8
