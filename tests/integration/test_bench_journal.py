"""``scripts/bench_journal.py``: the latency a client's submission journal adds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.script_module import SCRIPTS


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPTS / "bench_journal.py"), *argv],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_a_small_run_writes_its_record(tmp_path: Path) -> None:
    out = tmp_path / "journal.json"
    proc = _run("--values", "4", "--blocks", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert (record["values"], record["blocks"]) == (4, 2)
    for name in ("plain", "journal"):
        stats = record["seconds_per_submission"][name]
        assert 0 < stats["min"] <= stats["median"] <= stats["max"]
    assert record["journal_ratio"] > 0
    assert "ms a submission" in proc.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--values", "0"], "must be >= 1"), (["--values", "2", "--blocks", "3"], "<= --values")],
)
def test_bad_arguments_are_refused(argv: list[str], message: str) -> None:
    proc = _run(*argv)
    assert proc.returncode == 2 and message in proc.stderr
