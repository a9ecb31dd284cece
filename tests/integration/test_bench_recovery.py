"""``scripts/bench_recovery.py``: a relay's store read back with and without its inputs, each
read in a fresh process (real OS processes, hence ``slow``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_recovery.py"


@pytest.mark.slow
def test_recovery_without_inputs_reads_less(tmp_path: Path) -> None:
    out = tmp_path / "recovery.json"
    args = ["--users", "20000", "--messages", "4", "--input-length", "200", "--json", str(out)]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, check=True)  # fmt: skip
    assert "records(inputs=False)" in done.stdout
    report = json.loads(out.read_text())
    assert report["items"] == 80_000 and report["input_bytes"] == 16_000_000
    full, bare = report["reads"]["records()"], report["reads"]["records(inputs=False)"]
    assert full["outputs"] == bare["outputs"] == 80_000  # the outputs are read either way
    # 16 MB of inputs are not read: the peak grows by most of them less
    assert full["peak_rss_growth_bytes"] - bare["peak_rss_growth_bytes"] > 10_000_000


def test_bad_arguments_are_refused_with_a_message() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--users", "0"], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and "--users must be at least 1" in done.stderr
