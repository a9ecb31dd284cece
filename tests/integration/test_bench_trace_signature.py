"""``scripts/bench_trace_signature.py``: a trace page's signatures against its DLEQ work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.script_module import SCRIPTS


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPTS / "bench_trace_signature.py"), *argv],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_a_small_run_writes_its_record(tmp_path: Path) -> None:
    out = tmp_path / "page.json"
    proc = _run("--page", "20", "--mixes", "4", "--repeat", "1", "--dleq-sample", "3",
                "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert (record["page"], record["mixes"], record["dleq_sample"]) == (20, 4, 3)
    for key in ("sign_page_seconds", "verify_page_seconds", "evidence_seconds",
                "prove_page_seconds", "verify_steps_seconds"):  # fmt: skip
        assert record[key] > 0, key
    assert 0 < record["overhead"] < 1
    assert "overhead" in proc.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--page", "0"], "--page must be >= 1"), (["--mixes", "2"], "--mixes must be >= 3")],
)
def test_bad_arguments_are_refused(argv: list[str], message: str) -> None:
    proc = _run(*argv)
    assert proc.returncode == 2 and message in proc.stderr
