#!/usr/bin/env python3
"""Benchmark: a trace page's lookups at a relay, with :class:`mixnet.core.item_index.PairIndex`
against the scan of every pair it replaced (a benchmark, not a test).

A relay holds a round's (input, output) pairs in chunks of ``--chunk-size`` compact rows
(:class:`mixnet.core.items.Items`, as read back from its store): ``--items`` random onions
of ``--width`` bytes and their outputs of ``--width`` − 48 bytes. A trace page names
``--page`` accused outputs (the default is the last mix's page at the default chunk size,
:func:`mixnet.core.trace_caps.accusation_cap`). Measured in this process, best of
``--repeat``:

* ``scan_seconds`` — one page by the scan (``{output: input for input, output in pairs if
  output in wanted}``), what every page cost before;
* ``build_seconds`` — the index of the outputs, built once per round;
* ``lookup_seconds`` — one page through the index;
* ``index_bytes_per_item`` — what the index keeps per item (measured on its arrays);
* ``pages_to_break_even`` — ``build / (scan − lookup)``.

Every lookup is checked against the scan. Prints a table; ``--json FILE`` writes it.

Usage::

    .venv/bin/python scripts/bench_item_index.py --items 6000000 --json results/item-index.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mixnet.core.item_index import PairIndex
from mixnet.core.items import Items
from mixnet.core.trace_caps import accusation_cap


def best_of(repeat: int, run: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of ``repeat`` wall-clock timings of ``run()``, and its last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - start)
    return best, out


def chunks_of(count: int, width: int, size: int) -> dict[int, Items]:
    """``count`` random rows of ``width`` bytes in chunks of ``size`` (the OS CSPRNG; the
    data only needs to look like onions)."""
    out: dict[int, Items] = {}
    for index, start in enumerate(range(0, count, size)):
        rows = min(size, count - start)
        out[index] = Items.from_bytes(os.urandom(rows * width), width)
    return out


def measure(items: int, width: int, page: int, chunk_size: int, repeat: int) -> dict[str, Any]:
    inputs = chunks_of(items, width, chunk_size)
    outputs = {i: Items.from_bytes(b"".join(r[48:] for r in part), width - 48)
               for i, part in inputs.items()}  # fmt: skip
    chunk_list = sorted(outputs)
    wanted: set[bytes] = set()
    while len(wanted) < min(page, items):
        chunk = outputs[chunk_list[secrets.randbelow(len(chunk_list))]]
        wanted.add(chunk[secrets.randbelow(len(chunk))])

    def scan() -> dict[bytes, bytes]:
        return {o: i for c in chunk_list for i, o in zip(inputs[c], outputs[c], strict=True)
                if o in wanted}  # fmt: skip

    scan_seconds, expected = best_of(repeat, scan)
    build_seconds, index = best_of(repeat, lambda: _built(inputs, outputs))
    lookup_seconds, found = best_of(repeat, lambda: index.inputs_of(wanted))
    if found != expected:
        raise SystemExit("the index disagrees with the scan")
    kept = index.nbytes  # the output side only: built, and the input side not
    saved = scan_seconds - lookup_seconds
    return {
        "items": items, "width": width, "page": len(wanted), "chunk_size": chunk_size,
        "scan_seconds": scan_seconds, "build_seconds": build_seconds,
        "lookup_seconds": lookup_seconds, "index_bytes_per_item": kept / items,
        "pages_to_break_even": build_seconds / saved if saved > 0 else None,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average": list(os.getloadavg())},
    }  # fmt: skip


def _built(inputs: dict[int, Items], outputs: dict[int, Items]) -> PairIndex:
    """The index with its output side built (a side is built on its first lookup)."""
    index = PairIndex(inputs, outputs)
    index.inputs_of([b""])
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=600_000,
                        help="pairs at the relay (600000: a round of 10^5 users of 6 shares)")
    parser.add_argument("--width", type=int, default=100,
                        help="bytes per input onion (100: mix 2's with the defaults)")
    parser.add_argument("--page", type=int, default=accusation_cap(4096, 3),
                        help="accused outputs looked up (682: one page at the last mix's "
                             "cap with the defaults)")
    parser.add_argument("--chunk-size", type=int, default=4096,
                        help="items per chunk, as the relay holds them (4096: the default)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timings of each measurement; the fastest is kept (3)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write the record here as JSON")
    args = parser.parse_args(argv)
    for name in ("items", "page", "chunk_size", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.width < 56:
        parser.error("--width must be >= 56 (a layer's 48 bytes and an output of 8 or more)")
    record = measure(args.items, args.width, args.page, args.chunk_size, args.repeat)
    table = Table(title=f"one trace page of {record['page']} outputs among "
                        f"{record['items']:,} pairs")  # fmt: skip
    for column in ("scan s", "index build s", "lookup ms", "index B/item", "break-even pages"):
        table.add_column(column, justify="right")
    even = record["pages_to_break_even"]
    table.add_row(f"{record['scan_seconds']:.3f}", f"{record['build_seconds']:.3f}",
                  f"{record['lookup_seconds'] * 1e3:.2f}", f"{record['index_bytes_per_item']:.1f}",
                  "—" if even is None else f"{even:.2f}")  # fmt: skip
    Console().print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
