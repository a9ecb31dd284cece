"""``scripts/bench_round.py``: one round through a real chain of node processes, measured.

Real OS processes (four nodes and the load generator's workers), hence ``slow``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from nacl import bindings

from mixnet.onion import binding_data, seal_layer
from tests.integration.script_module import SCRIPTS, load_script

SCRIPT = SCRIPTS / "bench_round.py"


def bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--quiet", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def processes_mentioning(text: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(pid))
    return found


@pytest.mark.slow
def test_bench_round_is_exact_and_reports_sane_numbers(tmp_path: Path) -> None:
    out = tmp_path / "round.json"
    chain_dir = tmp_path / "chain"
    proc = bench("--users", "50", "--mode", "sum-preserving", "--crypto-ops", "300",
                 "--json", str(out), "--dir", str(chain_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert processes_mentioning(str(chain_dir)) == []  # every node stopped
    for key in ("users", "messages", "wall_seconds", "cpu_seconds", "loadgen",
                "x25519_per_share", "x25519_counting_rule", "crypto_floor_cpu_seconds",
                "cpu_over_floor", "nodes"):
        assert key in record, key
    m = record["messages_per_user"]
    assert record["users"] == 50 and record["messages"] == 50 * m
    assert record["protocol"] == "cloak" and record["mode"] == "sum-preserving"
    assert record["exact"] is True
    assert record["result"]["estimate_exact"] == record["rounded_sum_exact"]
    # onion format 2: per submission one box (key pair + X25519 to wrap, X25519 to open) and
    # m onions of L - 1 = 2 layers (two and one multiplications per layer)
    assert record["x25519_per_submission"] == 3 * (2 * m + 1)
    assert record["x25519_total"] == 3 * (2 * m + 1) * 50
    assert record["x25519_per_share_v1"] == 9
    assert record["wall_seconds"] > 0 and record["cpu_seconds"] > 0
    assert 0 < record["crypto_floor_nodes_cpu_seconds"] < record["crypto_floor_cpu_seconds"]
    assert record["cpu_over_floor"] > 0
    # the floor prices each layer at the mean of its costs measured before and after the round
    for mean, before, after in zip(record["crypto_rates"], record["crypto_rates_before"],
                                   record["crypto_rates_after"], strict=True):  # fmt: skip
        for key in ("seal_cpu_seconds", "open_cpu_seconds", "open_direct_cpu_seconds"):
            assert before[key] > 0 and after[key] > 0
            assert mean[key] == pytest.approx((before[key] + after[key]) / 2)
    # the stricter floor: the same opens priced at direct libsodium calls
    direct = sum(n["floor_direct_cpu_seconds"] for n in record["nodes"])
    assert direct == pytest.approx(record["crypto_floor_nodes_direct_cpu_seconds"]) and direct > 0
    assert record["cpu_over_floor_direct"] == pytest.approx(record["cpu_seconds"] / direct)
    assert record["nodes"][3]["cpu_over_floor_direct"] is None
    # ... and shows the ratio at each measurement alone; the mean floor's ratio lies between
    at = record["cpu_over_floor_at_rates"]
    low, high = sorted((at["before"], at["after"]))
    assert low * (1 - 1e-9) <= record["cpu_over_floor"] <= high * (1 + 1e-9)
    assert record["quiet_seconds"] >= 0
    assert record["loadgen"]["cpu_seconds"] > 0 and record["loadgen"]["workers"] >= 1
    assert [n["name"] for n in record["nodes"]] == ["mix1", "mix2", "mix3", "analyzer"]
    lengths = [n["item_length"] for n in record["nodes"]]
    width = record["payload_length"]
    assert lengths == [48 + m * (width + 96), width + 96, width + 48, width]
    for node, items in zip(record["nodes"], [50, 50 * m, 50 * m, 50 * m], strict=True):
        assert node["items_in"] == items
        assert node["ciphertext_bytes_in"] == items * node["item_length"]
        assert node["peak_rss_bytes"] > 0 and node["idle_rss_bytes"] > 0
        assert node["rss_over_ciphertext"] >= 0
        assert node["round_status"]["status"] in ("confirmed", "done")
    assert all(n["cpu_over_floor"] > 0 for n in record["nodes"][:3])
    assert record["nodes"][3]["cpu_over_floor"] is None  # the analyzer opens nothing


@pytest.mark.slow
def test_bench_round_stops_every_node_when_the_round_fails(tmp_path: Path) -> None:
    chain_dir = tmp_path / "chain"
    proc = bench("--users", "20", "--crypto-ops", "50", "--timeout", "0.001",
                 "--dir", str(chain_dir))
    assert proc.returncode != 0
    assert "TimeoutError" in proc.stderr
    assert processes_mentioning(str(chain_dir)) == []


def test_the_direct_floor_opens_the_format_and_refuses_a_layer_it_cannot_open() -> None:
    script = load_script("bench_round.py", "bench_round")
    public, secret = bindings.crypto_box_keypair()
    aad = binding_data(chain_id="bench", round_id=1, hop_index=1)
    layer = seal_layer(b"x" * 51, public, chain_id="bench", round_id=1, hop_index=1)
    assert script.direct_open_cpu(layer, public, secret, aad, 20) > 0
    _, other = bindings.crypto_box_keypair()
    with pytest.raises(script.BenchError, match="disagrees"):
        script.direct_open_cpu(layer, public, other, aad, 20)
    wrong = binding_data(chain_id="bench", round_id=2, hop_index=1)
    with pytest.raises(script.BenchError, match="disagrees"):
        script.direct_open_cpu(layer, public, secret, wrong, 20)
