#!/usr/bin/env python3
"""Benchmark: one federated-learning round of vector sums through a real local chain.

For each ``--dimension`` d it plans the vector protocol for a training run exactly as
``cloaknet plan-fl`` does (:func:`cloaknet.fl_accounting.plan_fl`: ``--plan-users`` users,
``--rounds`` rounds, ``--epsilon``/``--delta`` over the training, clip ``--clip``), starts a
chain of ``--mixes`` mix processes and the analyzer (separate OS processes on 127.0.0.1,
:func:`cloaknet.process_chain.process_chain`) running that wire format and noise with rounds
of ``--clients`` clients, and submits one update vector per client (a random direction of
norm C) through the client library, which clips, rounds, adds the client's own Skellam noise,
splits every coordinate into m shares, wraps each in onions and sends the d·m onions in one
submission. The chain is stopped afterwards (also on failure or Ctrl-C).

Per-client costs depend on d, m and the payload width, not on how many clients share the
round, so a few clients suffice; but the round then has fewer users than the plan, so the
chain is given the plan's parameters in the explicit form (no privacy claim: the results say
``epsilon: null``) — the numbers are costs, not a private deployment.

Measured, per client and round (all in the JSON, ``--json FILE``):

* ``wire_bytes_up_per_client`` — bytes the clients sent to the entry mix, **measured on the
  wire**: the client connects through a byte-counting TCP proxy (a separate process, so its
  CPU is not the client's) in front of the entry mix; TCP payload bytes, i.e. websocket
  frames including their headers, the handshakes and the round request, divided by the
  clients; ``payload_bytes_per_client`` is the plaintext d·m·(index + share bytes) for
  comparison;
* ``client_cpu_seconds_per_client`` — CPU time of this process (all threads: encoding in a
  worker thread, onion wrapping in the client's thread pool, framing) from the first
  submission until every client was acknowledged, divided by the clients;
  ``encode_cpu_seconds_per_client`` the encoding alone (clip, round, Skellam noise,
  split-and-mix, payload bytes), timed separately on one vector;
* ``round_seconds`` — wall time from the first submission to the analyzer's published
  result; ``submit_seconds`` until the last acknowledgement;
* ``node_cpu_seconds`` — user + system CPU of every node process over the round
  (``/proc/<pid>/stat``), and ``load_average`` before and after (the machine may be shared).

Linux only (``/proc``). Usage::

    .venv/bin/python scripts/bench_fl_round.py --dimension 100,1000,10000 --clients 5 \\
        --json bench-results/fl_round.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from cloaknet.chain_init import free_ports
from cloaknet.chainfile import CloakChain
from cloaknet.client import ChainClient
from cloaknet.fl_accounting import plan_fl
from cloaknet.process_chain import HOST, ProcessChain, process_chain
from cloaknet.protocols.vector_chain import VectorChainProtocol
from cloaknet.randomness import SYSTEM_RANDOM
from cloaknet.vector_table import vector_section
from mixnet.chain import RoundPolicy

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
READ_SIZE = 1 << 16


# --------------------------------------------------------------------------- counting proxy


async def _proxy(listen: int, target: int) -> None:
    """Forward every connection on 127.0.0.1:``listen`` to 127.0.0.1:``target`` and count
    the bytes each way; ``count`` on stdin prints ``<up> <down>``; stdin's end stops it."""
    counts = {"up": 0, "down": 0}

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: str) -> None:
        try:
            while data := await reader.read(READ_SIZE):
                counts[way] += len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer, "up"), pipe(up_reader, writer, "down"))

    server = await asyncio.start_server(serve, HOST, listen)
    loop = asyncio.get_running_loop()
    print("ready", flush=True)
    async with server:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            if line.strip() == "count":
                print(f"{counts['up']} {counts['down']}", flush=True)


class CountingProxy:
    """The proxy process (:func:`_proxy`) in front of the entry mix."""

    def __init__(self, target: int) -> None:
        self.port = free_ports(HOST, 1)[0]
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--proxy", str(self.port), str(target)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the counting proxy did not start")

    def counts(self) -> tuple[int, int]:
        """Bytes forwarded so far: (client → entry mix, entry mix → client)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        up, down = self.proc.stdout.readline().split()
        return int(up), int(down)

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


@contextlib.contextmanager
def counting_proxy(target: int) -> Iterator[CountingProxy]:
    proxy = CountingProxy(target)
    try:
        yield proxy
    finally:
        proxy.close()


# --------------------------------------------------------------------------- one round


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def client_chain(chain: CloakChain, proxy_port: int) -> CloakChain:
    """``chain`` with the entry mix's URL pointing at the proxy (nodes use the real one)."""
    first = chain.config.mixes[0]
    mixes = (dataclasses.replace(first, url=f"ws://{HOST}:{proxy_port}"),
             *chain.config.mixes[1:])
    return CloakChain(dataclasses.replace(chain.config, mixes=mixes), chain.protocol)


async def submit_round(
    chain: CloakChain, vectors: np.ndarray, proxy: CountingProxy, timeout: float
) -> dict[str, Any]:
    async with ChainClient(chain, connections=4, retry_for=timeout) as client:
        up0, down0 = proxy.counts()
        cpu0, t0 = time.process_time(), time.perf_counter()
        receipts = await client.submit_many(vectors, concurrency=len(vectors))
        cpu1, t1 = time.process_time(), time.perf_counter()
        up1, down1 = proxy.counts()
        rounds = sorted({r.round for r in receipts})
        if len(rounds) != 1:
            raise RuntimeError(f"the clients landed in rounds {rounds}")
        result = await client.result(rounds[0], timeout=timeout)
        t2 = time.perf_counter()
    assert result.vector is not None
    return {
        "round": rounds[0], "vector": result.vector, "users": result.users,
        "client_cpu_seconds": cpu1 - cpu0, "submit_seconds": t1 - t0,
        "round_seconds": t2 - t0, "wire_up": up1 - up0, "wire_down": down1 - down0,
        "epsilon": result.raw.get("epsilon"),
    }


def random_updates(clients: int, dimension: int, clip: float) -> np.ndarray:
    """One random direction of norm ``clip`` per client (the data is not secret)."""
    rows = np.random.default_rng().normal(size=(clients, dimension))
    norms: np.ndarray = np.linalg.norm(rows, axis=1, keepdims=True)
    out: np.ndarray = rows / norms * clip
    return out


def run_dimension(args: argparse.Namespace, dimension: int, console: Console) -> dict[str, Any]:
    plan = plan_fl(dimension, args.clip, args.rounds, args.epsilon, args.delta, args.plan_users)
    params = dataclasses.replace(plan.params(), min_users=args.clients, max_users=args.clients)
    protocol = VectorChainProtocol.from_params(params)
    vectors = random_updates(args.clients, dimension, args.clip)
    cpu0 = time.process_time()
    protocol.encode_payloads(vectors[0], SYSTEM_RANDOM)
    encode_cpu = time.process_time() - cpu0
    policy = RoundPolicy(min_users=args.clients, max_users=args.clients,
                         deadline_seconds=args.timeout, below_min="wait")
    load_before = os.getloadavg()
    console.print(f"d = {dimension:,}: m = {plan.messages}, {args.clients} clients, "
                  f"{args.clients * protocol.message_count:,} onions; starting the chain")
    chain_dir = None if args.keep is None else args.keep / f"d{dimension}"
    running: ProcessChain
    with process_chain(vector_section(params), policy, mixes=args.mixes, chain_id="benchfl",
                       directory=chain_dir) as running:
        nodes0 = {name: cpu_seconds(pid) for name, pid in running.pids.items()}
        with counting_proxy(running.ports[0]) as proxy:
            measured = asyncio.run(submit_round(
                client_chain(running.chain(), proxy.port), vectors, proxy, args.timeout
            ))
        nodes = {name: cpu_seconds(pid) - nodes0[name] for name, pid in running.pids.items()}
    load_after = os.getloadavg()
    clipped_sum = vectors.sum(axis=0)
    error = np.asarray(measured["vector"]) - clipped_sum
    n = args.clients
    return {
        "dimension": dimension, "clients": n, "mixes": args.mixes,
        "plan_users": args.plan_users, "rounds_planned": args.rounds,
        "messages_per_coordinate": plan.messages, "bytes_per_message": protocol.bytes_per_message,
        "onions_per_client": protocol.message_count,
        "payload_bytes_per_client": protocol.message_count * protocol.bytes_per_message,
        "wire_bytes_up_per_client": measured["wire_up"] / n,
        "wire_bytes_down_per_client": measured["wire_down"] / n,
        "client_cpu_seconds_per_client": measured["client_cpu_seconds"] / n,
        "encode_cpu_seconds_per_client": encode_cpu,
        "submit_seconds": measured["submit_seconds"],
        "round_seconds": measured["round_seconds"],
        "node_cpu_seconds": nodes,
        "node_cpu_seconds_per_client": sum(nodes.values()) / n,
        "max_abs_error": float(np.max(np.abs(error))),
        "predicted_rmse_per_coordinate": protocol.vector.predicted_rmse(n),
        "result_epsilon": measured["epsilon"],
        "load_average_before": list(load_before), "load_average_after": list(load_after),
    }


def print_table(rows: list[dict[str, Any]], console: Console) -> None:
    table = Table(title=f"one FL round through a {rows[0]['mixes']}-mix chain, "
                        f"{rows[0]['clients']} clients (per client unless noted)")
    for column in ("d", "m", "onions", "payload bytes", "wire bytes up", "client CPU s",
                   "of it encode s", "round wall s", "node CPU s"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            f"{r['dimension']:,}", str(r["messages_per_coordinate"]),
            f"{r['onions_per_client']:,}", f"{r['payload_bytes_per_client']:,}",
            f"{r['wire_bytes_up_per_client']:,.0f}",
            f"{r['client_cpu_seconds_per_client']:.2f}",
            f"{r['encode_cpu_seconds_per_client']:.2f}", f"{r['round_seconds']:.1f}",
            f"{r['node_cpu_seconds_per_client']:.2f}",
        )
    console.print(table)


def dimensions(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("expected comma-separated positive integers")
    return values


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 4 and sys.argv[1] == "--proxy":
        asyncio.run(_proxy(int(sys.argv[2]), int(sys.argv[3])))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dimension", type=dimensions, required=True,
                   help="d, or comma-separated values (one round and chain each)")
    p.add_argument("--clients", type=int, default=5, help="clients in the round (default 5)")
    p.add_argument("--mixes", type=int, default=3, help="mixes in the chain (default 3)")
    p.add_argument("--plan-users", type=int, default=1000,
                   help="users the plan is made for (default 1000)")
    p.add_argument("--rounds", type=int, default=100,
                   help="training rounds the plan covers (default 100)")
    p.add_argument("--epsilon", type=float, default=3.0, help="epsilon of the training (3)")
    p.add_argument("--delta", type=float, default=1e-5, help="delta of the training (1e-5)")
    p.add_argument("--clip", type=float, default=1.0, help="L2 clipping norm C (1)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds a round may take")
    p.add_argument("--keep", type=Path, default=None,
                   help="keep each chain's directory (logs, databases) under this folder")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    args = p.parse_args(argv)
    if args.clients < 1 or args.mixes < 1:
        p.error("--clients and --mixes must be >= 1")
    console = Console(stderr=True)
    rows = [run_dimension(args, d, console) for d in args.dimension]
    print_table(rows, Console(width=150))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
            "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                     "python": platform.python_version()},
            "wire_bytes": "measured: TCP payload bytes through a counting proxy in front of "
                          "the entry mix",
            "rows": rows,
        }
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
