"""A chain spread over Linux network namespaces, with a faulty link between mix1 and mix2.

Every node runs as its own ``python -m cloaknet node`` process in its own network namespace
(:mod:`tests.integration.netns`: one namespace per host, a bridge in a namespace of its own,
addresses of 10.213.7.0/24 that exist only inside those namespaces). The chain file gives
mix2's URL as the address of a fault-injecting TCP proxy (:mod:`tests.integration.faulty_proxy`,
in its own namespace) that forwards to mix2's real address, so everything mix1 sends to mix2
crosses the proxy. A client process in the client's namespace submits a round of the
sum-preserving cloak (exact: the estimate is Σ⌊x·k⌋/k) while the test makes the proxy
delay every segment, then cut every connection in the middle of a batch frame, then drop
mix2's next reply (a chunk stored by mix2 but not acknowledged to mix1, so mix1 resends it),
then partition the link for 5 s (existing connections dropped, new ones blackholed); the
round must still end with the exact sum, every mix having carried every message once.

Needs root and iproute2; skipped otherwise. Run by itself (``python -m
tests.integration.test_netns ...``) the module is the client program.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.integration.netns import NetnsLab, NetnsUnavailable, netns_lab

REPO = Path(__file__).resolve().parents[2]
PROXY_SCRIPT = Path(__file__).resolve().with_name("faulty_proxy.py")
MIXES = ("mix1", "mix2", "mix3")
ROLES = ("client", "proxy", *MIXES, "analyzer")
PORTS = {"mix1": 9001, "mix2": 9002, "mix3": 9003, "analyzer": 9100}
USERS = 16
#: Payloads per batch frame: small, so a batch is many frames (16 users × m ≈ 60 chunks).
CHUNK_SIZE = 16
#: Latency the proxy adds to every segment, each way (seconds).
DELAY = 0.02
#: How long the link mix1 → mix2 is partitioned (seconds).
PARTITION = 5.0
#: Seconds the client waits for the result; the test gives it a little longer.
RESULT_TIMEOUT = 40.0
#: Seconds a node may take to answer /healthz after it was started.
START_TIMEOUT = 20.0


# --------------------------------------------------------------------------- the client


def _emit(out: Path, event: dict[str, Any]) -> None:
    with out.open("a") as f:
        f.write(json.dumps(event) + "\n")


async def _run_client(chain: Path, values: list[float], out: Path, timeout: float) -> int:
    from cloaknet.client import connect

    async with connect(chain, connections=2, retry_for=30.0) as net:
        receipts = await net.submit_many(values, concurrency=len(values))
        rounds = sorted({r.round for r in receipts})
        _emit(out, {"event": "submitted", "rounds": rounds})
        if len(rounds) != 1:
            return 1
        result = await net.result(rounds[0], timeout=timeout)
        _emit(out, {"event": "result", "round": result.round, "raw": result.raw})
    return 0


def client_main(argv: list[str] | None = None) -> int:
    """Submit the values (one user each), wait for the round's result; events go to --out
    as JSON lines (``submitted``, then ``result``, or ``error``)."""
    parser = argparse.ArgumentParser(description="submit a round and wait for its result")
    parser.add_argument("--chain", type=Path, required=True)
    parser.add_argument("--values", required=True, help="JSON list of numbers in [0, 1]")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=RESULT_TIMEOUT)
    args = parser.parse_args(argv)
    try:
        return asyncio.run(
            _run_client(args.chain, json.loads(args.values), args.out, args.timeout)
        )
    except Exception as exc:
        _emit(args.out, {"event": "error", "error": f"{type(exc).__name__}: {exc}"})
        raise


# --------------------------------------------------------------------------- helpers


def _clean_env() -> dict[str, str]:
    """The environment for every process: unbuffered, and no HTTP proxy settings."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class ProxyControl:
    """The faulty proxy's control socket (a Unix socket: reachable from any namespace)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, cmd: str, **fields: Any) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5.0)
            sock.connect(str(self.path))
            sock.sendall(json.dumps({"cmd": cmd, **fields}).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                part = sock.recv(65536)
                if not part:
                    break
                data += part
        answer: dict[str, Any] = json.loads(data)
        assert answer.get("ok"), answer
        return answer

    def ready(self) -> bool:
        try:
            self("status")
        except (OSError, ValueError):
            return False
        return True


def _wait(what: str, check: Callable[[], bool], lab: NetnsLab, timeout: float) -> None:
    """Poll ``check()`` until true; fail if a started process died or time ran out."""
    limit = time.monotonic() + timeout
    while not check():
        for name, proc in lab.procs.items():
            if proc.poll() is not None and name != "client":
                raise AssertionError(f"{name} exited with {proc.returncode} while waiting "
                                     f"for {what}")
        if time.monotonic() > limit:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _reply_type(segment: bytes) -> str:
    """The ``type`` of the frame in the first websocket message of ``segment``, a segment
    from a node's server to its client (unmasked frames, no compression)."""
    from mixnet.wire import decode_frame

    assert segment[0] & 0x0F == 0x2 and not segment[1] & 0x80, segment[:2].hex()
    length, offset = segment[1] & 0x7F, 2
    if length >= 126:
        width = 2 if length == 126 else 8
        length, offset = int.from_bytes(segment[2 : 2 + width], "big"), 2 + width
    assert len(segment) >= offset + length, "the segment does not hold a whole message"
    return str(decode_frame(segment[offset : offset + length], max_size=1 << 20)["type"])


def _tails(directory: Path, chars: int = 4000) -> str:
    parts = []
    for log in sorted(directory.glob("*.log")):
        parts.append(f"===== {log.name}\n{log.read_text(errors='replace')[-chars:]}")
    return "\n".join(parts)


@pytest.fixture
def lab() -> Iterator[NetnsLab]:
    """The namespaces of this test; all gone (with what ran in them) when it ends."""
    with contextlib.ExitStack() as stack:
        try:
            made = stack.enter_context(netns_lab(ROLES))
        except NetnsUnavailable as exc:
            pytest.skip(f"no network namespaces here: {exc}")
        yield made


# --------------------------------------------------------------------------- the chain


class NetnsChain:
    """The chain of this test in ``lab``: three mixes and the analyzer, each a process in
    its own namespace, and the faulty proxy in front of mix2. Files go to ``directory``."""

    def __init__(self, lab: NetnsLab, directory: Path) -> None:
        from cloaknet.chainfile import (
            SINK_TABLE,
            generate_node_keys,
            load_chain,
            write_chain_file,
        )
        from cloaknet.encoding import quantize
        from cloaknet.planner import plan
        from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy
        from mixnet.onion import onion_length

        self.lab = lab
        self.directory = directory
        self.addr = {role: lab.address(role) for role in ROLES}
        # Everyone reaches mix2 at the proxy's address; only the proxy knows mix2's own.
        self.url = {n: f"ws://{self.addr[n]}:{PORTS[n]}" for n in (*MIXES, "analyzer")}
        self.url["mix2"] = f"ws://{self.addr['proxy']}:{PORTS['mix2']}"
        chosen = plan(USERS, 1.0, 1e-6, mode="sum-preserving")
        keys = generate_node_keys(directory, MIXES)
        config = ChainConfig(
            chain_id="netns",
            mixes=tuple(NodeInfo(n, self.url[n], keys[n]) for n in MIXES),
            sink=NodeInfo("analyzer", self.url["analyzer"], None),
            sink_table=SINK_TABLE,
            policy=RoundPolicy(
                min_users=USERS, max_users=USERS, deadline_seconds=600.0, chunk_size=CHUNK_SIZE
            ),
            sections={},
        )
        self.chain_path = directory / "chain.toml"
        write_chain_file(self.chain_path, config, chosen.params)  # explicit parameters
        loaded = load_chain(self.chain_path)
        self.messages = loaded.messages
        #: Bytes of the onions of one round's batch from mix1 to mix2 (framing not counted).
        self.batch_bytes = (
            USERS * self.messages * onion_length(loaded.payload_length, len(MIXES) - 1)
        )
        self.values = [(i + 1) / (USERS + 2) for i in range(USERS)]
        k = chosen.params.precision
        #: The cloak's sum-preserving estimate: exactly Σ⌊x·k⌋/k.
        self.expected = Fraction(sum(quantize(v, k) for v in self.values), k)
        socket_path = directory / "proxy.sock"
        self._socket_dir: Path | None = None
        if len(os.fsencode(socket_path)) > 100:  # a Unix socket's path has at most 107 bytes
            self._socket_dir = Path(tempfile.mkdtemp(prefix="cloaknet-netns-"))
            socket_path = self._socket_dir / "proxy.sock"
        self.control = ProxyControl(socket_path)
        self.client_out = directory / "client.jsonl"
        self.env = _clean_env()

    def wait(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        _wait(what, check, self.lab, timeout)

    def close(self) -> None:
        """Stop every process; remove the control socket's own directory if it has one."""
        self.lab.stop_all()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    def _start_node(self, name: str) -> None:
        argv = [sys.executable, "-m", "cloaknet", "node", "--chain", str(self.chain_path),
                "--name", name, "--db", str(self.directory / f"{name}.db")]
        if name != "analyzer":
            argv += ["--key", str(self.directory / f"{name}.key")]
        if name == "mix2":
            argv += ["--listen", self.addr["mix2"]]
        self.lab.start(name, name, argv, log=self.directory / f"{name}.log", cwd=REPO,
                       env=self.env)
        self.wait(f"{name}'s /healthz",
                  lambda: self.lab.healthy(name, self.addr[name], PORTS[name]), START_TIMEOUT)

    def start(self) -> None:
        """Start the analyzer, mix3, mix2, the proxy and mix1, each after the previous one
        answered (``/healthz`` in its own namespace; the proxy's control socket, then mix2
        through the proxy from mix1's namespace)."""
        for name in ("analyzer", "mix3", "mix2"):
            self._start_node(name)
        self.lab.start(
            "proxy", "proxy",
            [sys.executable, str(PROXY_SCRIPT),
             "--listen", f"{self.addr['proxy']}:{PORTS['mix2']}",
             "--target", f"{self.addr['mix2']}:{PORTS['mix2']}",
             "--control", str(self.control.path)],
            log=self.directory / "proxy.log", cwd=REPO, env=self.env,
        )
        self.wait("the proxy's control socket", self.control.ready, START_TIMEOUT)
        self.wait("mix2's /healthz through the proxy",
                  lambda: self.lab.healthy("mix1", self.addr["proxy"], PORTS["mix2"]),
                  START_TIMEOUT)
        self._start_node("mix1")

    def start_client(self) -> None:
        """The users: one client process in the client's namespace submitting every value."""
        self.lab.start(
            "client", "client",
            [sys.executable, "-m", "tests.integration.test_netns",
             "--chain", str(self.chain_path), "--values", json.dumps(self.values),
             "--out", str(self.client_out), "--timeout", str(RESULT_TIMEOUT)],
            log=self.directory / "client.log", cwd=REPO, env=self.env,
        )

    def proxy_events(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.control("status")["events"]
        return events

    def fired(self, kind: str) -> bool:
        return any(e["kind"] == kind for e in self.proxy_events())

    def client_result(self) -> dict[str, Any]:
        """Wait for the client to end; its round's result (asserting it ended well)."""
        client = self.lab.procs["client"]
        self.wait("the client's result", lambda: client.poll() is not None,
                  RESULT_TIMEOUT + 10)
        for name in (*MIXES, "analyzer", "proxy"):
            assert self.lab.procs[name].poll() is None, f"{name} exited during the round"
        events = _events(self.client_out)
        assert client.returncode == 0, f"client failed: {events}"
        assert [e["event"] for e in events] == ["submitted", "result"], events
        result: dict[str, Any] = events[-1]
        return result

    def check_exact(self, result: dict[str, Any]) -> None:
        """The analyzer's result is exact and every mix carried the whole batch."""
        raw = result["raw"]
        assert raw["status"] == "ok" and raw["users"] == USERS, raw
        assert raw["messages"] == USERS * self.messages, raw
        assert Fraction(str(raw["estimate_exact"])) == self.expected, (raw, self.expected)
        for name in MIXES:
            code, body = self.lab.http_get(name, self.addr[name], PORTS[name], "/status")
            assert code == 200, (name, code)
            info = [r for r in json.loads(body)["rounds"] if r["round"] == result["round"]]
            print(f"{name} /status:", json.dumps(info))
            assert len(info) == 1 and info[0]["status"] in ("confirmed", "done"), (name, info)
            assert info[0].get("messages") == USERS * self.messages, (name, info)
            assert not info[0].get("dropped"), (name, info)

    def interrupted_batches(self) -> int:
        """How many times mix1 logged a batch frame to mix2 failing (and being retried)."""
        log = (self.directory / "mix1.log").read_text(errors="replace")
        return len(re.findall(rf"mix1: batch to {re.escape(self.url['mix2'])} failed", log))


@pytest.fixture
def chain(lab: NetnsLab, tmp_path: Path) -> Iterator[NetnsChain]:
    """The chain, not started; on failure the tail of every log is printed."""
    made = NetnsChain(lab, tmp_path)
    passed = False
    try:
        yield made
        passed = True
    finally:
        made.close()
        if not passed:
            print(_tails(tmp_path))


# --------------------------------------------------------------------------- the test


@pytest.mark.slow
def test_round_is_exact_despite_delay_cut_and_partition_between_mixes(
    chain: NetnsChain,
) -> None:
    chain.start()
    control, batch = chain.control, chain.batch_bytes

    def upstream() -> int:
        count: int = control("status")["upstream"]
        return count

    # 1. latency on every segment, both ways; a cut armed 20 % into the batch
    control("delay", seconds=DELAY)
    armed = control("cut", after_bytes=int(0.2 * batch))
    started = time.monotonic()
    chain.start_client()
    # 2. the cut, in the middle of a batch frame from mix1 to mix2
    chain.wait("the cut in the middle of the batch", lambda: chain.fired("cut"), 30)
    cut = chain.proxy_events()[0]
    # 3. once the batch flows again, mix2's next reply is lost (and the connection cut):
    #    mix2 stored the chunk, mix1 does not know and sends it again
    chain.wait("the batch to resume", lambda: upstream() > cut["upstream"] + 0.1 * batch, 30)
    control("cut", after_bytes=0, direction="down")
    chain.wait("the lost reply", lambda: len(chain.proxy_events()) >= 2, 30)
    # 4. a partition 10 % further on: every connection dropped, new ones held for 5 s
    control("partition", seconds=PARTITION, mode="blackhole", after_bytes=int(0.1 * batch))
    chain.wait("the partition", lambda: chain.fired("partition"), 30)
    chain.wait("the end of the partition", lambda: chain.fired("heal"), PARTITION + 5)
    result = chain.client_result()
    status = control("status")
    counters = {k: v for k, v in status.items() if k != "events"}
    print(f"round {result['round']} done {time.monotonic() - started:.1f} s after the "
          f"client started; proxy: {json.dumps(counters)}")
    shown = [{k: v for k, v in e.items() if k != "withheld"} for e in status["events"]]
    print("proxy events:", json.dumps(shown))

    # the faults happened where they were meant to: during the batch, on batch frames
    kinds = [e["kind"] for e in status["events"]]
    assert kinds == ["cut", "cut", "partition", "heal"], kinds
    cut, lost, partition, _ = status["events"]
    assert cut["upstream"] == armed["upstream"] + int(0.2 * batch), cut
    assert lost["downstream"] > cut["downstream"], "no reply went through before the loss"
    assert _reply_type(bytes.fromhex(lost["withheld"])) == "batch-ack", lost
    assert all(e["connections"] >= 1 for e in (cut, lost, partition)), status["events"]
    assert status["held"] >= 1, "mix1 did not try to reconnect during the partition"
    assert status["upstream"] > partition["upstream"] + 0.1 * batch, (
        "the rest of the batch did not cross the proxy after the partition"
    )
    assert chain.interrupted_batches() >= 3, "the faults did not interrupt batch frames"

    # the round is exact: every share arrived once
    chain.check_exact(result)


if __name__ == "__main__":
    raise SystemExit(client_main())
