"""``scripts/bench_receipts.py``: receipts kept as a dict against the compact table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.script_module import SCRIPTS


def test_a_small_run_writes_its_record(tmp_path: Path) -> None:
    out = tmp_path / "receipts.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_receipts.py"), "--users", "20000", "--rounds", "3",
         "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "compact" in proc.stdout
    record = json.loads(out.read_text())
    assert (record["users"], record["rounds"], record["id_length"]) == (20000, 3, 36)
    kept, compact = record["results"]["dict"], record["results"]["compact"]
    # a dict entry holds a str and a bytes object; the table a key, a digest and a slot
    assert kept["live_bytes"] > 150 and 52 <= compact["live_bytes"] < 80
    assert compact["compact_seconds"] > 0 and kept["compact_seconds"] == 0
    assert record["restart_peak_bytes"] is None  # not asked for


def test_restart_reads_the_store_back_both_ways(tmp_path: Path) -> None:
    out = tmp_path / "receipts.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_receipts.py"), "--users", "3000", "--rounds", "3",
         "--restart", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "NodeStore.records()" in proc.stdout
    restart = json.loads(out.read_text())["restart_peak_bytes"]
    assert set(restart) == {"dicts", "records"}
    assert all(value > 0 for value in restart.values())


@pytest.mark.parametrize("argv", [["--users", "0"], ["--rounds", "0"], ["--id-length", "4"]])
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPTS / "bench_receipts.py"), *argv],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2 and "bench_receipts.py: error" in proc.stderr
