"""Benchmark: onion peeling throughput at one mix, single thread vs a thread pool.

PyNaCl releases the GIL inside libsodium, so peeling chunks in a ThreadPoolExecutor should scale
with cores. Prints a table and writes JSON (default bench-results/peel.json).

    .venv/bin/python scripts/bench_peel.py [--onions 50000] [--hops 3] [--payload 5]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nacl.public import PrivateKey
from rich.console import Console
from rich.table import Table

from mixnet.onion import onion_length, peel_many, wrap

CHUNK = 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onions", type=int, default=50_000)
    parser.add_argument("--hops", type=int, default=3)
    parser.add_argument("--payload", type=int, default=5, help="payload bytes (share width)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=Path("bench-results/peel.json"))
    args = parser.parse_args()

    keys = [PrivateKey.generate() for _ in range(args.hops)]
    public = [bytes(k.public_key) for k in keys]
    t0 = time.perf_counter()
    onions = [wrap(os.urandom(args.payload), public, chain_id="bench", round_id=1)
              for _ in range(args.onions)]
    wrap_rate = args.onions / (time.perf_counter() - t0)
    length = onion_length(args.payload, args.hops)
    chunks = [onions[i : i + CHUNK] for i in range(0, len(onions), CHUNK)]

    def peel_chunk(chunk: list[bytes]) -> int:
        out = peel_many(chunk, keys[0], chain_id="bench", round_id=1, hop_index=0,
                        expected_length=length)
        return sum(isinstance(o, bytes) for o in out)

    rows = []
    for threads in (1, 2, 4):
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=threads) as pool:
                ok = sum(pool.map(peel_chunk, chunks))
            best = min(best, time.perf_counter() - start)
            assert ok == args.onions
        rows.append({"threads": threads, "seconds": best, "peels_per_second": args.onions / best})
    base = rows[0]["peels_per_second"]
    table = Table(title=f"peel: {args.onions:,} onions, {args.hops} hops, "
                        f"{args.payload}-byte payload ({length}-byte onions), "
                        f"{os.cpu_count()} CPUs")
    for col in ("threads", "best s", "peels/s", "speed-up"):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(str(row["threads"]), f"{row['seconds']:.3f}",
                      f"{row['peels_per_second']:,.0f}", f"{row['peels_per_second'] / base:.2f}×")
    Console().print(table)
    Console().print(f"wrap ({args.hops} layers, one thread): {wrap_rate:,.0f} onions/s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"onions": args.onions, "hops": args.hops,
                                     "payload": args.payload, "wrap_per_second": wrap_rate,
                                     "peel": rows}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
