#!/usr/bin/env python3
"""Benchmark of the vectorized invisibility-cloak encoder (a benchmark, not a test).

For each message count ``m`` it times, end to end, what a simulation of ``n`` users does:
``quantize`` the inputs, then ``encode_many_chunks`` with the OS CSPRNG, consuming every
chunk by folding ``sum_mod(chunk, N)`` into a running sum (so no work can be skipped and
the full ``n x m`` matrix is never held). The folded sum is checked against the sum of the
quantized values. Each ``m`` runs in a fresh child process so that its peak RSS
(``resource.getrusage``) is its own; ``--in-process`` disables that.

Default modulus: with ``k = 10 n`` (``--precision``), the first odd ``N > 3 n k``.

Usage: ``python scripts/bench_encode.py [--users 1000000] [--messages 10,50] ...``
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import platform
import resource
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cloaknet.randomness import DeterministicRandom
from cloaknet.vectorized import (
    FAST_MODULUS_LIMIT,
    encode_many_chunks,
    quantize,
    sum_mod,
)


@dataclass(frozen=True)
class Case:
    users: int
    messages: int
    modulus: int
    precision: int
    repeat: int
    chunk_users: int
    seed: int


def first_odd_above(bound: int) -> int:
    """The smallest odd integer strictly greater than ``bound``."""
    candidate = bound + 1
    return candidate if candidate % 2 else candidate + 1


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
    return peak * scale / 2**20


def make_inputs(users: int, seed: int) -> np.ndarray:
    """Reproducible inputs in [0, 1): 53 random bits each, from a seeded SHAKE stream."""
    words = np.frombuffer(DeterministicRandom(seed).token_bytes(8 * users), dtype="<u8")
    return (words >> np.uint64(11)).astype(np.float64) * 2.0**-53


def run_case(case: Case) -> dict[str, Any]:
    """Time quantize + chunked encoding ``case.repeat`` times; returns a result record."""
    x = make_inputs(case.users, case.seed)
    baseline_rss = peak_rss_mib()
    times: list[float] = []
    quantize_times: list[float] = []
    expected: int | None = None
    for _ in range(case.repeat):
        start = time.perf_counter()
        values = quantize(x, case.precision)
        quantized = time.perf_counter()
        total = 0
        for chunk in encode_many_chunks(
            values, case.messages, case.modulus, chunk_users=case.chunk_users
        ):
            total = (total + sum_mod(chunk, case.modulus)) % case.modulus
        end = time.perf_counter()
        times.append(end - start)
        quantize_times.append(quantized - start)
        if expected is None:
            expected = sum_mod(values, case.modulus)
        if total != expected:
            raise SystemExit(f"m={case.messages}: share sum {total} != value sum {expected}")
        del values
    best = min(times)
    return {
        **asdict(case),
        "modulus_bits": case.modulus.bit_length(),
        "times_s": times,
        "best_s": best,
        "median_s": statistics.median(times),
        "quantize_best_s": min(quantize_times),
        "users_per_s": case.users / best,
        "shares_per_s": case.users * case.messages / best,
        "baseline_rss_mib": baseline_rss,
        "peak_rss_mib": peak_rss_mib(),
        "sum_check": "ok",
    }


def run_isolated(case: Case) -> dict[str, Any]:
    """Run one case in a fresh spawned process (own peak RSS)."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(run_case, case).result()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000, help="n (default 10^6)")
    parser.add_argument(
        "--messages", default="10,50", help="comma-separated message counts m (default 10,50)"
    )
    parser.add_argument("--precision", type=int, default=None, help="k (default 10 n)")
    modulus = parser.add_mutually_exclusive_group()
    modulus.add_argument(
        "--modulus-bits",
        type=int,
        default=None,
        help="use N = 2^B - 1, the largest odd B-bit modulus "
        "(default: the first odd N > 3 n k, as the protocol would)",
    )
    modulus.add_argument("--modulus", type=int, default=None, help="explicit modulus N")
    parser.add_argument("--repeat", type=int, default=3, help="runs per m (best and median)")
    parser.add_argument("--chunk-users", type=int, default=65536, help="users per chunk")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic inputs")
    parser.add_argument(
        "--json", type=Path, default=Path("bench-results/encode.json"), help="output JSON path"
    )
    parser.add_argument(
        "--in-process", action="store_true", help="run every m in this process (shared RSS)"
    )
    args = parser.parse_args(argv)
    if args.users < 1 or args.repeat < 1 or args.chunk_users < 1:
        parser.error("--users, --repeat and --chunk-users must be >= 1")
    try:
        args.message_counts = [int(m) for m in args.messages.split(",") if m.strip()]
    except ValueError:
        parser.error(f"--messages must be comma-separated ints, got {args.messages!r}")
    if not args.message_counts or min(args.message_counts) < 1:
        parser.error("--messages needs at least one count, each >= 1")
    if args.precision is None:
        args.precision = 10 * args.users
    if not 1 <= args.precision < 2**53:
        parser.error("--precision must be in [1, 2^53)")
    if args.modulus is not None:
        if args.modulus < 2:
            parser.error("--modulus must be >= 2")
    elif args.modulus_bits is not None:
        if args.modulus_bits < 2:
            parser.error("--modulus-bits must be >= 2")
        args.modulus = 2**args.modulus_bits - 1
    else:
        args.modulus = first_odd_above(3 * args.users * args.precision)
    return args


def print_table(results: list[dict[str, Any]], title: str) -> None:
    headers = [
        "m",
        "users",
        "best s",
        "median s",
        "quantize s",
        "users/s",
        "shares/s",
        "peak RSS MiB",
        "before MiB",
    ]
    rows = [
        [
            str(r["messages"]),
            f"{r['users']:,}",
            f"{r['best_s']:.3f}",
            f"{r['median_s']:.3f}",
            f"{r['quantize_best_s']:.3f}",
            f"{r['users_per_s']:,.0f}",
            f"{r['shares_per_s']:,.0f}",
            f"{r['peak_rss_mib']:.0f}",
            f"{r['baseline_rss_mib']:.0f}",
        ]
        for r in results
    ]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain-text fallback
        print(title)
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
        for line in [headers, *rows]:
            print("  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)))
        return
    table = Table(title=title)
    for header in headers:
        table.add_column(header, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    # Wide enough for every column even when stdout is not a terminal (rich defaults to 80).
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n, k, modulus = args.users, args.precision, args.modulus
    if modulus <= 3 * n * k:
        print(f"warning: N = {modulus} <= 3nk = {3 * n * k}; the analyzer would wrap around")
    results: list[dict[str, Any]] = []
    for m in args.message_counts:
        case = Case(n, m, modulus, k, args.repeat, args.chunk_users, args.seed)
        results.append(run_case(case) if args.in_process else run_isolated(case))
    path = "uint64" if modulus < FAST_MODULUS_LIMIT else "object (Python ints)"
    title = f"encode: n = {n:,}, k = {k:,}, N = {modulus} ({modulus.bit_length()} bits, {path})"
    print_table(results, title)
    report = {
        "benchmark": "quantize + encode_many_chunks + folded sum_mod, OS CSPRNG",
        "config": {
            "users": n,
            "messages": args.message_counts,
            "precision": k,
            "modulus": str(modulus),
            "modulus_bits": modulus.bit_length(),
            "repeat": args.repeat,
            "chunk_users": args.chunk_users,
            "isolated_processes": not args.in_process,
        },
        "environment": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "machine": platform.machine(),
            "system": platform.platform(),
            "cpu_count": os.cpu_count(),
        },
        "results": [{**r, "modulus": str(r["modulus"])} for r in results],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
