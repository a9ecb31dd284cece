"""``scripts/bench_trace.py``: a round with many bad submissions through real node processes,
its verdict in pages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.script_module import SCRIPTS


@pytest.mark.slow
def test_a_small_run_excludes_every_bad_submission_in_pages(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_trace.py"), "--users", "6", "--bad", "5",
         "--bad-shares", "2", "--chunk-size", "8", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert (record["status"], record["excluded"], record["exact"]) == ("ok", 5, True)
    # chunks of 8: the last mix names 2 accusations a reply (10 refused: 5 pages), an
    # exclude frame carries 12 items (2 submissions of 6: 3 pages)
    assert (record["accusation_cap"], record["exclude_cap"]) == (2, 12)
    assert (record["trace_pages"], record["exclude_pages"]) == (5, 3)
    assert list(record["node_cpu_seconds"]) == ["mix1", "mix2", "mix3", "analyzer"]
    peaks = record["node_peak_rss_bytes"]
    assert list(peaks) == list(record["node_cpu_seconds"])
    assert all(10 * 2**20 < peak < 2**31 for peak in peaks.values())  # a Python process's
    assert record["trace_seconds"] > 0 and record["round_seconds"] >= record["trace_seconds"]
    assert "trace pages" in proc.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--users", "0"], "--users must be >= 1"),
        (["--mixes", "1"], "--mixes >= 2"),
        (["--bad-shares", "7"], "--bad-shares must be in 1..--messages"),
        (["--chunk-size", "0"], "--chunk-size must be >= 1"),
        (["--messages", "3"], "--messages must be >= 4"),
    ],
)
def test_bad_arguments_are_refused(argv: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPTS / "bench_trace.py"), *argv],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2 and message in proc.stderr
