"""``scripts/bench_item_index.py``: one trace page through the index against a scan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.script_module import SCRIPTS


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPTS / "bench_item_index.py"), *argv],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_a_small_run_writes_its_record(tmp_path: Path) -> None:
    out = tmp_path / "index.json"
    proc = _run("--items", "20000", "--page", "50", "--chunk-size", "512", "--repeat", "1",
                "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert (record["items"], record["page"], record["chunk_size"]) == (20000, 50, 512)
    assert record["scan_seconds"] > 0 and record["build_seconds"] > 0
    assert 0 < record["lookup_seconds"] < record["scan_seconds"]
    assert 8.0 <= record["index_bytes_per_item"] < 8.1
    assert "lookup ms" in proc.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--items", "0"], "--items must be >= 1"), (["--width", "50"], "--width must be >= 56")],
)
def test_bad_arguments_are_refused(argv: list[str], message: str) -> None:
    proc = _run(*argv)
    assert proc.returncode == 2 and message in proc.stderr
