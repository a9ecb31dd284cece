"""The real thing: `cloaknet demo` with every node a separate OS process, and `cloaknet node`
/ `cloaknet keygen` as a user runs them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
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
    try:
        assert processes_mentioning(directory) == []  # every node process was stopped
        logs = sorted(p.name for p in Path(directory).glob("*.log"))
        assert logs == ["analyzer.log", "mix1.log", "mix2.log", "mix3.log"]
        assert "stopped" in (Path(directory) / "mix2.log").read_text()
    finally:  # --keep left it for the checks above
        shutil.rmtree(directory, ignore_errors=True)


def node_children(parent: int) -> dict[int, str]:
    """The ``cloaknet node`` processes whose parent is ``parent``: pid → command line."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == parent and " node " in cmdline:
            found[int(pid)] = cmdline
    return found


def demo_directories(nodes: dict[int, str]) -> set[Path]:
    """The chain directories named by these nodes' ``--chain`` arguments."""
    return {Path(cmd.split("--chain ")[1].split()[0]).parent for cmd in nodes.values()}


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.mark.slow
@pytest.mark.parametrize("after", [0.0, 3.0])  # starting the nodes; driving the round
def test_a_terminated_demo_stops_every_node_it_started(after: float) -> None:
    """SIGTERM to ``cloaknet demo`` (``kill``, a CI timeout, a service manager) stops every
    node process it started and removes its directory, as Ctrl-C does, whether it arrives
    while the nodes start or while the demo's event loop drives the round; before, the demo
    died at once and its nodes, in sessions of their own, ran on."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "cloaknet", "demo", "--users", "20000", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    nodes: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 60
        nodes = node_children(demo.pid)
        while len(nodes) < 4 and time.monotonic() < deadline and demo.poll() is None:
            time.sleep(0.1)
            nodes = node_children(demo.pid)
        assert len(nodes) == 4, nodes
        time.sleep(after)
        demo.send_signal(signal.SIGTERM)
        _, err = demo.communicate(timeout=60)
        left = [pid for pid in nodes if alive(pid)]
        kept = [d for d in demo_directories(nodes) if d.exists()]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        for pid in nodes:  # whatever the outcome, nothing of this test stays behind
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)  # each node leads its own session
        for directory in demo_directories(nodes):
            shutil.rmtree(directory, ignore_errors=True)
    assert demo.returncode == 130, err[-2000:]
    assert "interrupted" in err
    assert "Traceback" not in err and "never retrieved" not in err, err[-2000:]  # as Ctrl-C
    assert not left, "node processes outlived the demo"
    assert not kept, "the demo left its directory"


@pytest.mark.slow
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
    ideal = cloaknet("demo", "--mixes", "0", "--protocol", "bbgn", "--json")
    assert ideal.returncode == 0 and json.loads(ideal.stdout)["noise"] == "polya"


class TwoMixChain:
    """Two mixes and the analyzer as ``cloaknet node`` processes on free 127.0.0.1 ports,
    with a sum-preserving plan for rounds of exactly ``users``; ``node_args`` go to every
    node. For the tests that kill a node and start it again."""

    def __init__(self, directory: Path, users: int, chain_id: str, *node_args: str) -> None:
        from cloaknet.chain_init import free_ports
        from cloaknet.chainfile import generate_node_keys, write_chain_file
        from cloaknet.netdemo import HOST, _Processes
        from cloaknet.planner import plan
        from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy

        self.directory = directory
        self.chosen = plan(users, 1.0, 1e-6, mode="sum-preserving")
        names = ["mix1", "mix2"]
        keys = generate_node_keys(directory, names)
        self.ports = free_ports(HOST, 3)
        config = ChainConfig(
            chain_id=chain_id,
            mixes=tuple(NodeInfo(n, f"ws://127.0.0.1:{p}", keys[n])
                        for n, p in zip(names, self.ports, strict=False)),
            sink=NodeInfo("analyzer", f"ws://127.0.0.1:{self.ports[-1]}", None),
            sink_table="analyzer",
            policy=RoundPolicy(min_users=users, max_users=users, deadline_seconds=600.0),
            sections={},
        )  # fmt: skip
        self.path = directory / "chain.toml"
        write_chain_file(self.path, config, self.chosen.params, self.chosen)
        self.procs = _Processes(directory)
        self.base = ["--chain", str(self.path), *node_args]

    def start(self, name: str) -> None:
        extra = [] if name == "analyzer" else ["--key", str(self.directory / f"{name}.key")]
        self.procs.start(name, [*self.base, "--name", name, *extra])

    def wait_healthy(self) -> None:
        import time

        from cloaknet.netdemo import _healthy

        limit = time.monotonic() + 30
        while not all(_healthy(p) for p in self.ports):
            self.procs.check_alive()
            assert time.monotonic() < limit, "nodes did not come up"
            time.sleep(0.05)

    def start_all(self) -> None:
        for name in ("analyzer", "mix2", "mix1"):
            self.start(name)
        self.wait_healthy()

    async def restart_entry_after_sigkill(self) -> None:
        """SIGKILL the entry mix (no clean shutdown), start it again, wait until it serves."""
        import asyncio
        import signal

        entry = self.procs.procs["mix1"]
        entry.send_signal(signal.SIGKILL)
        await asyncio.to_thread(entry.wait, 10)
        self.start("mix1")
        await asyncio.to_thread(self.wait_healthy)

    def exact(self, values: list[float]) -> Fraction:
        """The rounded sum the analyzer must report for ``values``."""
        from cloaknet.encoding import quantize

        k = self.chosen.params.precision
        return Fraction(sum(quantize(v, k) for v in values), k)


@pytest.mark.slow
def test_entry_mix_killed_with_sigkill_keeps_every_acknowledged_submission(
    tmp_path: Path,
) -> None:
    """SIGKILL the entry mix mid-round (no clean shutdown), start it again: the submissions it
    acknowledged come back from sqlite and the round ends with the exact sum."""
    import asyncio

    from cloaknet.client import connect

    users = 12
    chain = TwoMixChain(tmp_path, users, "kill")
    values = [i / (users + 1) for i in range(users)]

    async def run() -> dict[str, object]:
        async with connect(chain.path, connections=2) as net:
            early = await asyncio.gather(*(net.submit(v) for v in values[: users // 2]))
            await chain.restart_entry_after_sigkill()
            late = await asyncio.gather(*(net.submit(v) for v in values[users // 2 :]))
            assert {r.round for r in early + late} == {early[0].round}
            result = await net.result(early[0].round, timeout=120)
            return result.raw

    try:
        chain.start_all()
        raw = asyncio.run(run())
    finally:
        chain.procs.stop_all()
    assert raw["users"] == users
    assert Fraction(str(raw["estimate_exact"])) == chain.exact(values)


@pytest.mark.slow
def test_entry_mix_killed_with_frames_in_flight_counts_every_user_once(
    tmp_path: Path,
) -> None:
    """SIGKILL the entry mix while a load generator streams ``submit-many`` frames, each
    stored by one write: whether a frame was stored, half-sent or acknowledged when the node
    died, the generator's resends after the restart are exact retries or fresh submissions,
    and the round counts every user exactly once."""
    import asyncio

    import numpy as np

    from cloaknet.chainfile import load_chain
    from cloaknet.client import connect
    from cloaknet.loadgen import LoadGenerator

    users = 400
    chain = TwoMixChain(tmp_path, users, "kill-frames", "--peel-processes", "0")
    values = np.random.default_rng(5).random(users).tolist()

    async def run() -> tuple[dict[str, object], int]:
        async with LoadGenerator(load_chain(chain.path), workers=2, connections=1,
                                 per_frame=4, retry_for=60.0, processes=False) as load:  # fmt: skip
            info = await load.current_round()
            wrapped = await load.wrap(info, values)
            sending = asyncio.create_task(load.send(info, wrapped))
            await asyncio.sleep(0.15)  # some frames acknowledged, one in flight
            await chain.restart_entry_after_sigkill()
            sent = await sending
        async with connect(chain.path, connections=1) as net:
            result = await net.result(info.round_id, timeout=120)
        return result.raw, sent.submissions

    try:
        chain.start_all()
        raw, acknowledged = asyncio.run(run())
    finally:
        chain.procs.stop_all()
    assert acknowledged == users
    assert raw["users"] == users
    assert Fraction(str(raw["estimate_exact"])) == chain.exact(values)
