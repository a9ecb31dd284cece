#!/usr/bin/env python3
"""Benchmark: a round with many bad submissions, through a real local chain of node processes.

``--users`` honest users submit values (wrapped on every core by
:class:`cloaknet.loadgen.LoadGenerator`, then sent 64 to a ``submit-many`` frame); ``--bad``
more submit boxes whose first ``--bad-shares`` shares (default: all) are not reduced mod N,
so the last mix's validator refuses them. The chain (``--mixes`` mix processes and the analyzer,
:func:`cloaknet.process_chain.process_chain`) traces every refused payload back to its
submission and excludes it (``docs/protocol.md``, "Trace and exclude"); when one ``accused``
reply or one ``exclude`` frame is not enough, the verdict goes in pages. The round must end
``ok`` with ``excluded = --bad`` and the honest users' exact sum.

Printed as a table and written as JSON (``--json``):

* ``trace_pages`` and ``exclude_pages`` — how many pages the verdict took (from the caps of
  :mod:`mixnet.core.trace_caps` and the number of refused payloads: the last mix's pages; mix
  2 has none of its own here);
* ``trace_seconds`` — at the entry mix, from its batch forwarded to the round confirmed (the
  whole verdict: every page asked and checked, the exclusion sent and applied);
* ``release_seconds`` — at the last mix, from its batch mixed to released (what it waited
  for the verdict);
* ``round_seconds`` — from the last submission acknowledged to the result;
* ``node_cpu_seconds`` — user + system CPU of each node process and its live children
  (peel workers), from the last acknowledgement until every node ended the round
  (``/proc``), and the load average before and after (the machine may be shared);
* ``node_peak_rss_bytes`` — the peak resident set (``VmHWM``) of each node process and its
  live children, summed, since the last acknowledgement (reset then through ``clear_refs``;
  where the kernel refuses that, since the process started).

Linux only (``/proc``). Usage::

    .venv/bin/python scripts/bench_trace.py --users 1000 --bad 1000 \\
        --json results/bench-trace/trace-1000-1000.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cloaknet.client import ChainClient
from cloaknet.encoding import encode_share, quantize
from cloaknet.loadgen import LoadGenerator
from cloaknet.params import CloakParams
from cloaknet.process_chain import ProcessChain, process_chain
from cloaknet.protocol_table import protocol_section
from mixnet.chain import RoundPolicy
from mixnet.client import send_submissions
from mixnet.core.trace_caps import accusation_cap, exclude_cap
from mixnet.frames import Submit
from mixnet.link import Link

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: Submissions per ``submit-many`` frame of bad boxes (the chain's default limit is 256).
PER_FRAME = 128
TERMINAL = ("confirmed", "aborted", "done", "failed")
#: k of the encoding (the values are multiples of 1/100)
PRECISION = 100


def process_table() -> dict[int, tuple[int, float]]:
    """Every process: its parent and its user + system CPU seconds (``/proc``)."""
    table: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        table[int(entry.name)] = (int(fields[1]), cpu)
    return table


def process_tree(pid: int, table: dict[int, tuple[int, float]]) -> list[int]:
    """``pid`` and its live descendants."""
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += [child for child, (parent, _) in table.items() if parent == current]
    return tree


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its live descendants."""
    table = process_table()
    return sum(table.get(p, (0, 0.0))[1] for p in process_tree(pid, table))


def tree_peak_rss(pid: int, reset: bool = False) -> int:
    """Bytes: the ``VmHWM`` (peak resident set) of process ``pid`` and of each of its live
    descendants, summed; with ``reset``, each is first set back to its current resident set
    (``clear_refs`` 5), so that the peak read later is the peak since then."""
    total = 0
    for process in process_tree(pid, process_table()):
        with contextlib.suppress(OSError):  # ended meanwhile, or the kernel refuses a reset
            if reset:
                Path(f"/proc/{process}/clear_refs").write_text("5")
            for line in Path(f"/proc/{process}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
    return total


def pin(pid: int, cpus: set[int]) -> None:
    """Run process ``pid``, every thread of it and every descendant on ``cpus`` only (the
    threads and processes they start later inherit it)."""
    for process in process_tree(pid, process_table()):
        with contextlib.suppress(OSError):  # a thread or process ended meanwhile
            for thread in os.listdir(f"/proc/{process}/task"):
                os.sched_setaffinity(int(thread), cpus)


def round_entry(running: ProcessChain, name: str, round_id: int) -> dict[str, Any]:
    """Node ``name``'s ``/status`` entry for ``round_id`` (empty if it has none)."""
    for info in running.status(name).get("rounds", []):
        if isinstance(info, dict) and info.get("round") == round_id:
            return info
    return {}


async def wait_ended(running: ProcessChain, round_id: int, timeout: float) -> dict[str, Any]:
    """Every node's ``/status`` entry once the round ended everywhere (or after ``timeout``)."""
    limit = time.monotonic() + timeout
    while True:
        running.check_alive()
        entries = {
            name: await asyncio.to_thread(round_entry, running, name, round_id)
            for name in running.names
        }
        ended = all(e.get("status") in TERMINAL for e in entries.values())
        if ended or time.monotonic() > limit:
            return entries
        await asyncio.sleep(0.2)


async def submit_bad(client: ChainClient, params: CloakParams, bad: int, shares: int,
                     give_up: float) -> float:  # fmt: skip
    """Wrap and send ``bad`` boxes whose first ``shares`` shares the validator refuses;
    returns the seconds spent wrapping them."""
    info = await client.mixnet.current_round()
    width = len(encode_share(0, params.modulus))
    payloads = [b"\xff" * width] * shares + [encode_share(0, params.modulus)] * (
        params.messages - shares
    )
    started = time.perf_counter()
    boxes = await asyncio.to_thread(lambda: [client.mixnet.wrap(payloads, info)
                                             for _ in range(bad)])  # fmt: skip
    wrapping = time.perf_counter() - started
    link = Link(client.chain.config.mixes[0].url, max_size=1 << 21, name="bench-bad",
                retry_for=give_up)  # fmt: skip
    loop = asyncio.get_running_loop()
    try:
        for start in range(0, bad, PER_FRAME):
            frames = [Submit(info.round_id, f"bad{i}", box)
                      for i, box in enumerate(boxes[start:start + PER_FRAME], start)]  # fmt: skip
            outcomes = await send_submissions(link, frames, give_up=loop.time() + give_up)
            refused = [e for e in outcomes if e is not None]
            if refused:
                raise RuntimeError(f"the entry mix refused bad boxes: {refused[0]}")
    finally:
        await link.close()
    return wrapping


async def drive(args: argparse.Namespace, running: ProcessChain, params: CloakParams,
                values: list[float]) -> dict[str, Any]:  # fmt: skip
    async with ChainClient(running.chain(), connections=8, retry_for=args.timeout) as client:
        info = await client.mixnet.current_round()
        wrap_bad = await submit_bad(client, params, args.bad, args.bad_shares, args.timeout)
        # the honest users wrapped on every core, then sent 64 to a frame
        async with LoadGenerator(running.chain(), per_frame=64,
                                 retry_for=args.timeout) as load:  # fmt: skip
            report = await load.run(values)
        if report.round_id != info.round_id:
            raise RuntimeError(f"the users landed in round {report.round_id}, "
                               f"not {info.round_id}")  # fmt: skip
        pids = running.pids
        cpu0 = {name: tree_cpu_seconds(pids[name]) for name in running.names}  # chain order
        for name in running.names:
            tree_peak_rss(pids[name], reset=True)
        t0 = time.perf_counter()
        result = await client.result(info.round_id, timeout=args.timeout)
        round_seconds = time.perf_counter() - t0
    entries = await wait_ended(running, info.round_id, 120.0)
    cpu = {name: tree_cpu_seconds(pids[name]) - cpu0[name] for name in running.names}
    peak = {name: tree_peak_rss(pids[name]) for name in running.names}
    return {"round": info.round_id, "result": result.raw, "round_seconds": round_seconds,
            "entries": entries, "node_cpu_seconds": cpu, "node_peak_rss_bytes": peak,
            "wrap_bad_seconds": wrap_bad}  # fmt: skip


def measure(args: argparse.Namespace) -> dict[str, Any]:
    users = args.users + args.bad
    bound = 3 * users * PRECISION  # the smallest odd N above it (Algorithm 2)
    modulus = args.modulus or bound + 1 + bound % 2
    params = CloakParams(modulus=modulus, precision=PRECISION, messages=args.messages,
                         max_users=users)  # fmt: skip
    policy_kwargs = {} if args.chunk_size is None else {"chunk_size": args.chunk_size}
    policy = RoundPolicy(min_users=args.users, max_users=args.users + args.bad,
                         deadline_seconds=args.timeout, **policy_kwargs)  # fmt: skip
    values = [(i % 100) / 100 for i in range(args.users)]  # the data is not secret
    refused = args.bad * args.bad_shares
    trace_cap = accusation_cap(policy.chunk_size, args.mixes)
    items_cap = exclude_cap(policy.chunk_size, args.messages)
    per_page = max(1, items_cap // args.messages)  # whole submissions per exclude frame
    load_before = os.getloadavg()
    with process_chain(protocol_section(params), policy, mixes=args.mixes,
                       chain_id="benchtrace", keep=args.keep) as running:  # fmt: skip
        if args.pin:  # the entry mix on one core, the later nodes on the other
            pids = running.pids
            for name in running.names:
                pin(pids[name], {0} if name == running.names[0] else {1})
        measured = asyncio.run(drive(args, running, params, values))
    load_after = os.getloadavg()
    names = running.names
    entry, last = measured["entries"][names[0]], measured["entries"][names[-2]]
    forwarded = entry.get("mixed", 0.0) + float(entry.get("forward_seconds", 0.0))
    raw = measured["result"]
    honest = sum(quantize(v, params.precision) for v in values)
    exact = raw.get("status") == "ok" and Fraction(raw["estimate_exact"]) == Fraction(
        honest, params.precision
    )
    return {
        "users": args.users, "bad": args.bad, "bad_shares": args.bad_shares,
        "messages": args.messages, "modulus": params.modulus, "mixes": args.mixes,
        "chunk_size": policy.chunk_size,
        "accusation_cap": trace_cap, "exclude_cap": items_cap,
        "refused_payloads": refused,
        "trace_pages": max(1, math.ceil(refused / trace_cap)),
        "exclude_pages": max(1, math.ceil(args.bad / per_page)),
        "status": raw.get("status"), "excluded": raw.get("excluded"), "exact": exact,
        "trace_seconds": entry.get("finished", math.nan) - forwarded,
        "release_seconds": last.get("released", math.nan) - last.get("mixed", math.nan),
        "round_seconds": measured["round_seconds"],
        "wrap_bad_seconds": measured["wrap_bad_seconds"],
        "node_cpu_seconds": measured["node_cpu_seconds"],
        "node_peak_rss_bytes": measured["node_peak_rss_bytes"],
        "pinned": args.pin,
        "load_average_before": list(load_before), "load_average_after": list(load_after),
    }  # fmt: skip


def print_table(record: dict[str, Any], console: Console) -> None:
    table = Table(title=f"a round of {record['users']:,} users and {record['bad']:,} bad "
                        f"submissions, {record['mixes']} mixes, chunks of "
                        f"{record['chunk_size']:,}")  # fmt: skip
    for column in ("refused", "trace pages", "exclude pages", "result", "excluded",
                   "trace s", "round s", *record["node_cpu_seconds"]):  # fmt: skip
        table.add_column(column, justify="right")
    table.add_row(
        f"{record['refused_payloads']:,}", f"{record['trace_pages']:,}",
        f"{record['exclude_pages']:,}",
        f"{record['status']}{' exact' if record['exact'] else ''}", str(record["excluded"]),
        f"{record['trace_seconds']:.2f}", f"{record['round_seconds']:.2f}",
        *(f"{v:.2f}" for v in record["node_cpu_seconds"].values()),
    )
    console.print(table)
    peaks = ", ".join(f"{name} {v / 2**20:,.0f}"
                      for name, v in record["node_peak_rss_bytes"].items())  # fmt: skip
    console.print("node columns: CPU seconds from the last submission acknowledged until the "
                  "round ended everywhere (the process and its peel workers); peak RSS "
                  f"since then, MiB: {peaks}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=1000, help="honest users (default 1000)")
    p.add_argument("--bad", type=int, default=1000, help="bad submissions (default 1000)")
    p.add_argument("--bad-shares", type=int, default=None,
                   help="shares of each bad submission the validator refuses (default: all)")
    p.add_argument("--messages", type=int, default=6, help="shares per user, m (default 6)")
    p.add_argument("--modulus", type=int, default=None,
                   help="N, odd and above 3·n·k (default: the smallest such, k = 100)")
    p.add_argument("--mixes", type=int, default=3, help="mixes in the chain (default 3)")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="payloads per batch chunk (default: the chain's default)")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds the round may take (default 1800)")
    p.add_argument("--pin", action="store_true",
                   help="run the entry mix on CPU 0 and the other nodes on CPU 1 (every thread "
                   "and worker), as on two hosts: the pages' work then overlaps only as much "
                   "as the protocol lets it")
    p.add_argument("--keep", action="store_true", help="keep the chain directory")
    p.add_argument("--json", type=Path, default=None, help="write the record here")
    args = p.parse_args(argv)
    if args.users < 1 or args.bad < 0 or args.mixes < 2:
        p.error("--users must be >= 1, --bad >= 0 and --mixes >= 2")
    if args.messages < 4:
        p.error("--messages must be >= 4 (Algorithm 1)")
    args.bad_shares = args.messages if args.bad_shares is None else args.bad_shares
    if not 1 <= args.bad_shares <= args.messages:
        p.error("--bad-shares must be in 1..--messages")
    if args.chunk_size is not None and args.chunk_size < 1:
        p.error("--chunk-size must be >= 1")
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        p.error("--pin needs two CPUs")
    record = measure(args)
    print_table(record, Console(width=150))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
            "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                     "python": platform.python_version()},
            **record,
        }
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0 if record["exact"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
