"""``scripts/bench_entry.py``: a real in-process chain takes submissions through the entry
mix's request path; the record and its checks."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.script_module import SCRIPTS, load_script

bench = load_script("bench_entry.py", "bench_entry")


def test_a_small_run_writes_its_record(tmp_path: Path) -> None:
    out = tmp_path / "entry.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_entry.py"), "--users", "300", "--per-frame", "64",
         "--runs", "2", "--peel-processes", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "median" in proc.stdout
    record = json.loads(out.read_text())
    assert record["users"] == 300 and record["per_frame"] == 64 and len(record["runs"]) == 2
    for run in record["runs"]:
        assert 0 < run["loop_cpu_us_per_submission"] < run["wall_us_per_submission"] * 2
    cpu = sorted(r["loop_cpu_us_per_submission"] for r in record["runs"])
    assert record["median"]["loop_cpu_us_per_submission"] == pytest.approx(sum(cpu) / 2)


def test_a_refused_submission_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every submission must be accepted: a refusal (here the round takes three fewer users
    than the run submits, so the last two of its frame are refused ``round-closed``) ends
    the run with an error."""

    class Args:
        users, messages, mixes, per_frame, connections, peel_processes = 5, 2, 2, 5, 1, 0

    policy = bench.RoundPolicy

    def three_fewer(*, min_users: int, max_users: int, **rest: object) -> object:
        return policy(min_users=min_users - 3, max_users=max_users - 3, **rest)

    monkeypatch.setattr(bench, "RoundPolicy", three_fewer)
    with pytest.raises(bench.BenchError, match="refused a submission"):
        asyncio.run(bench.one_run(Args()))


@pytest.mark.parametrize(
    "argv",
    [["--users", "0"], ["--mixes", "1"], ["--per-frame", "257"], ["--connections", "0"]],
)
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
