"""The real thing: `cloaknet demo` with every node a separate OS process, and `cloaknet node`
/ `cloaknet keygen` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from mixnet.keys import parse_public_key, read_key_file


def cloaknet(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cloaknet", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


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


@pytest.mark.slow
def test_multi_process_demo_is_exact_and_cleans_up() -> None:
    proc = cloaknet("demo", "--users", "30", "--mixes", "3", "--mode", "sum-preserving",
                    "--json", "--keep")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["users"] == 30 and data["mixes"] == 3
    assert Fraction(data["estimate_exact"]) == Fraction(data["rounded_sum_exact"])
    assert data["estimate"] == data["rounded_sum"]
    assert len(data["hop_messages_per_second"]) == 4
    assert all(rate > 0 for rate in data["hop_messages_per_second"])
    directory = data["directory"]
    assert processes_mentioning(directory) == []  # every node process was stopped
    logs = sorted(p.name for p in Path(directory).glob("*.log"))
    assert logs == ["analyzer.log", "mix1.log", "mix2.log", "mix3.log"]
    assert "stopped" in (Path(directory) / "mix2.log").read_text()


def test_keygen_and_node_config_errors(tmp_path: Path) -> None:
    key = tmp_path / "mix1.key"
    proc = cloaknet("keygen", "--name", "mix1", "--out", str(key))
    assert proc.returncode == 0, proc.stderr
    public = proc.stdout.split('"')[1]
    assert bytes(parse_public_key(public)) == bytes(read_key_file(key).verify_key)
    assert key.stat().st_mode & 0o777 == 0o600
    again = cloaknet("keygen", "--name", "mix1", "--out", str(key))
    assert again.returncode != 0 and again.stderr.count("\n") == 1

    chain = tmp_path / "chain.toml"
    chain.write_text(f"""
[chain]
id = "t"

[[mix]]
name = "mix1"
url = "ws://127.0.0.1:1"
identity = "{public}"

[analyzer]
name = "analyzer"
url = "ws://127.0.0.1:2"

[round]
min_users = 50
max_users = 50
deadline_seconds = 10.0
below_min = "wait"

[protocol]
plan = {{ users = 50, epsilon = 1.0, delta = 1e-6, mode = "sum-preserving" }}
""")
    bad_name = cloaknet("node", "--chain", str(chain), "--name", "nobody")
    assert bad_name.returncode == 2 and "nobody" in bad_name.stderr
    other_key = tmp_path / "other.key"
    cloaknet("keygen", "--name", "other", "--out", str(other_key))
    wrong_key = cloaknet("node", "--chain", str(chain), "--name", "mix1", "--key",
                         str(other_key))
    assert wrong_key.returncode == 2 and "not the identity" in wrong_key.stderr
    no_key = cloaknet("node", "--chain", str(chain), "--name", "mix1")
    assert no_key.returncode == 2 and "--key" in no_key.stderr
    chain.write_text(chain.read_text().replace("min_users = 50", "min_users = true"))
    broken = cloaknet("node", "--chain", str(chain), "--name", "mix1", "--key", str(key))
    assert broken.returncode == 2 and "round.min_users" in broken.stderr
    assert broken.stderr.count("\n") == 1


@pytest.mark.slow
def test_demo_carries_a_comparison_protocol() -> None:
    proc = cloaknet("demo", "--users", "60", "--mixes", "2", "--protocol", "bbgn", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["protocol"] == "bbgn" and data["rounded_sum"] is None
    assert abs(data["estimate"] - data["true_sum"]) < 8 * data["expected_rmse"]
    ideal = cloaknet("demo", "--mixes", "0", "--protocol", "bbgn")
    assert ideal.returncode == 2 and "cloak only" in ideal.stderr
