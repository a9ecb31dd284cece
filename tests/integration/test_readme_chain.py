"""The README's "Running a chain" block, run exactly as a user would type it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(
    r"<!-- readme-chain:start -->\s*```sh\n(?P<script>.*?)```\s*<!-- readme-chain:end -->", re.S
)


def readme_block() -> str:
    """The shell block between the README's ``readme-chain`` markers."""
    match = _BLOCK.search(README.read_text(encoding="utf-8"))
    assert match is not None, "README.md lost its readme-chain block"
    return match.group("script")


def test_block_is_what_a_user_types() -> None:
    script = readme_block()
    lines = [line for line in script.splitlines() if line.strip()]
    assert lines[0].startswith("cloaknet chain init mychain ")
    assert sum(line.startswith("cloaknet node ") for line in lines) == 4
    assert any(line.startswith("cloaknet submit ") for line in lines)


@pytest.mark.slow
def test_readme_chain_block_completes_a_round(tmp_path: Path) -> None:
    """chain init, four nodes in the background, five submissions, the result: the round
    is complete with the five users, and every node was stopped."""
    cloaknet = shutil.which("cloaknet", path=str(Path(sys.executable).parent))
    assert cloaknet is not None, "the cloaknet console script is not installed"
    env = {**os.environ, "PATH": f"{Path(cloaknet).parent}{os.pathsep}{os.environ['PATH']}"}
    # bash -e runs the block line by line as a terminal would; the trap only cleans up if a
    # line fails before the block's own `kill`
    script = "set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + readme_block()
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    logs = {p.name: p.read_text() for p in (tmp_path / "mychain").glob("*.log")}
    assert done.returncode == 0, (done.stdout, done.stderr, logs)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    receipts = [line for line in lines if "value" in line]
    assert [r["value"] for r in receipts] == [0.1, 0.2, 0.3, 0.4, 0.5]
    (result,) = [line for line in lines if "status" in line]
    assert result["status"] == "ok"
    assert result["users"] == 5
    assert result["round"] == receipts[0]["round"]
    assert (tmp_path / "mychain" / "mix1.key").stat().st_mode & 0o777 == 0o600
    assert set(logs) == {"analyzer.log", "mix1.log", "mix2.log", "mix3.log"}
