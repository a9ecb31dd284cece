#!/usr/bin/env python3
"""Benchmark: what a client's submission journal (:mod:`mixnet.journal`) costs a submission
(a benchmark, not a test).

One in-process chain of 3 mixes (:func:`cloaknet.localchain.local_chain`, real sockets and
stores on 127.0.0.1), two clients: one plain, one with a journal. Each submits ``--values``
values one after another, in ``--blocks`` alternating blocks (so that the machine's drift
falls on both); every submission waits for its receipt. Reported per client: the median and
range of the blocks' mean latency per submission, and the journal's extra time (its two
fsynced sqlite commits: the frame kept before it is sent, erased after the receipt).

Prints a table; ``--json FILE`` writes the record.

Usage::

    .venv/bin/python scripts/bench_journal.py --json results/journal/latency.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cloaknet.client import ChainClient, connect
from cloaknet.localchain import local_chain
from cloaknet.params import CloakParams
from cloaknet.protocols import CloakProtocol
from mixnet.chain import RoundPolicy


async def measure(values: int, blocks: int) -> dict[str, Any]:
    users = 2 * values + 10
    params = CloakParams(modulus=3 * users * 100 + 7, precision=100, messages=4, max_users=users)
    policy = RoundPolicy(min_users=1, max_users=users, deadline_seconds=3600.0)
    per_block = max(1, values // blocks)
    seconds: dict[str, list[float]] = {"plain": [], "journal": []}
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        async with (
            local_chain(tmp, CloakProtocol(params), policy) as chain,
            connect(chain.chain) as plain,
            connect(chain.chain, journal=tmp / "journal.db") as kept,
        ):
            clients: dict[str, ChainClient] = {"plain": plain, "journal": kept}
            for block in range(blocks):
                for name, net in clients.items():
                    start = time.perf_counter()
                    for i in range(per_block):
                        await net.submit(0.5, client_id=f"{name}-{block}-{i}")
                    seconds[name].append((time.perf_counter() - start) / per_block)
    medians = {name: statistics.median(v) for name, v in seconds.items()}
    return {
        "values": per_block * blocks, "blocks": blocks,
        "seconds_per_submission": {name: {"median": medians[name], "min": min(v), "max": max(v)}
                                   for name, v in seconds.items()},
        "journal_extra_seconds": medians["journal"] - medians["plain"],
        "journal_ratio": medians["journal"] / medians["plain"],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average": list(os.getloadavg())},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--values", type=int, default=120,
                        help="values each client submits, one after another (120)")
    parser.add_argument("--blocks", type=int, default=6,
                        help="alternating blocks the values are cut into (6)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write the record here as JSON")
    args = parser.parse_args(argv)
    if args.values < 1 or args.blocks < 1:
        parser.error("--values and --blocks must be >= 1")
    if args.blocks > args.values:
        parser.error("--blocks must be <= --values")
    record = asyncio.run(measure(args.values, args.blocks))
    table = Table(title=f"{record['values']} sequential submissions per client, "
                        f"{record['blocks']} alternating blocks")  # fmt: skip
    for column in ("client", "median ms", "blocks' range ms"):
        table.add_column(column, justify="right")
    for name, stats in record["seconds_per_submission"].items():
        table.add_row(name, f"{stats['median'] * 1e3:.2f}",
                      f"{stats['min'] * 1e3:.2f}–{stats['max'] * 1e3:.2f}")  # fmt: skip
    Console().print(table)
    Console().print(f"journal: {record['journal_extra_seconds'] * 1e3:+.2f} ms a submission "
                    f"({record['journal_ratio']:.2f}×)")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
