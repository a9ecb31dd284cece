"""``scripts/bench_fl_round.py``: one FL round of vectors through a real chain of node
processes, with the bytes counted on the wire. Real OS processes, hence ``slow``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_fl_round.py"


@pytest.mark.slow
def test_bench_fl_round_reports_measured_costs(tmp_path: Path) -> None:
    out = tmp_path / "fl.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dimension", "20", "--clients", "2", "--mixes", "2",
         "--json", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    (row,) = record["rows"]
    assert row["dimension"] == 20 and row["clients"] == 2 and row["mixes"] == 2
    onions = row["onions_per_client"]
    assert onions == 20 * row["messages_per_coordinate"]
    assert row["payload_bytes_per_client"] == onions * row["bytes_per_message"]
    # every onion crosses the wire: more bytes than the payloads, within sane framing
    assert onions * row["bytes_per_message"] < row["wire_bytes_up_per_client"]
    assert row["wire_bytes_up_per_client"] < onions * 1000 + 100_000
    assert 0 < row["encode_cpu_seconds_per_client"] <= row["client_cpu_seconds_per_client"] + 1
    assert 0 < row["submit_seconds"] <= row["round_seconds"]
    assert set(row["node_cpu_seconds"]) == {"mix1", "mix2", "analyzer"}
    assert row["result_epsilon"] is None  # rounds smaller than the plan claim nothing
    assert "measured" in record["wire_bytes"]
    assert "wire bytes up" in done.stdout
