"""Benchmark: what a restarted mix after the entry reads back, with and without its inputs.

A relay keeps only its outputs in memory; its inputs and the chunks as signed are in its
store (schema 7), and its recovery reads the chunks without them
(:meth:`mixnet.store.NodeStore.records` with ``inputs=False``). This writes a store shaped
like the middle mix's after a round of ``--users`` users (``--messages`` items per user, in
chunks of ``--chunk-size``: inputs of ``--input-length`` bytes, outputs of
``--output-length``, a replay digest per item and a signature per chunk), then reads it back
in a fresh process for each way — ``records()`` and ``records(inputs=False)`` — and reports
each read's peak RSS growth and wall time. Prints a table and writes JSON (``--json``,
default ``bench-results/recovery.json``)::

    .venv/bin/python scripts/bench_recovery.py [--users 100000] [--messages 6] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mixnet.core.items import Items
from mixnet.core.records import AddChunk, Chunk, NewRound
from mixnet.core.status import RoundStatus
from mixnet.store import NodeStore


def write_store(path: Path, items: int, chunk_size: int, inputs: int, outputs: int) -> None:
    """A store holding one round's chunks as a relay stores them (random bytes: the
    content does not matter to the read)."""
    store = NodeStore(path)
    store.apply([[NewRound(1, RoundStatus.FORWARDED, 0.0, os.urandom(32))]])
    chunks = -(-items // chunk_size)
    for index in range(chunks):
        size = min(chunk_size, items - index * chunk_size)
        chunk = Chunk(
            "mix1", index, chunks, clients=items, count=items, dropped=0,
            payloads=Items.of([os.urandom(outputs) for _ in range(size)]),
            digests=os.urandom(16 * size),
            inputs=Items.of([os.urandom(inputs) for _ in range(size)]),
            signature=os.urandom(64),
        )  # fmt: skip
        store.apply([[AddChunk(1, chunk)]])
    store.close()


def read_once(path: str, inputs: bool) -> dict[str, float]:
    """Read the store's records in this process: peak RSS growth (bytes) and wall time."""
    store = NodeStore(path)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    records = store.records(inputs=inputs)
    seconds = time.perf_counter() - started
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    held = sum(len(c.payloads) for c in records.chunks.get(1, ()))
    store.close()
    return {"peak_rss_growth_bytes": grown, "seconds": seconds, "outputs": held}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000, help="users (default 100000)")
    parser.add_argument("--messages", type=int, default=6, help="items per user (default 6)")
    parser.add_argument("--chunk-size", type=int, default=1000, help="items per chunk")
    parser.add_argument("--input-length", type=int, default=100, help="bytes per input")
    parser.add_argument("--output-length", type=int, default=52, help="bytes per output")
    parser.add_argument("--json", default="bench-results/recovery.json", help="JSON output")
    parser.add_argument("--read", nargs=2, metavar=("DB", "INPUTS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.read:  # the child process of one measurement
        print(json.dumps(read_once(args.read[0], args.read[1] == "1")))
        return 0
    for name in ("users", "messages", "chunk_size", "input_length", "output_length"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    items = args.users * args.messages
    with tempfile.TemporaryDirectory() as directory:
        db = Path(directory) / "relay.db"
        write_store(db, items, args.chunk_size, args.input_length, args.output_length)
        rows = {}
        for label, flag in (("records()", "1"), ("records(inputs=False)", "0")):
            out = subprocess.run(
                [sys.executable, __file__, "--read", str(db), flag],
                check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
            rows[label] = json.loads(out)
    ciphertext = items * args.input_length
    print(f"a relay's store after {args.users:,} users x {args.messages} items "
          f"({ciphertext / 2**20:.0f} MiB of inputs):")  # fmt: skip
    print(f"{'read':<24}{'peak RSS growth':>18}{'seconds':>10}")
    for label, row in rows.items():
        print(f"{label:<24}{row['peak_rss_growth_bytes'] / 2**20:>14.0f} MiB"
              f"{row['seconds']:>10.2f}")  # fmt: skip
    report = {
        "users": args.users, "messages": args.messages, "items": items,
        "chunk_size": args.chunk_size, "input_length": args.input_length,
        "output_length": args.output_length, "input_bytes": ciphertext,
        "reads": rows, "load_average": list(os.getloadavg()),
    }  # fmt: skip
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
