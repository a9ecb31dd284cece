#!/usr/bin/env python3
"""Benchmark series: ``scripts/bench_round.py`` run K times, each on a fresh chain, summarized.

One run of the round benchmark is one sample. On a shared machine the crypto floor it
measures moves by several percent from one run to the next (at 10⁵ users over one session:
45.8 to 52.3 s), more than the nodes' CPU does, so one run's ``cpu_over_floor`` says little
about a target a few percent away. This script runs the round benchmark ``--runs`` times in a
row, each a separate ``bench_round.py`` process with its own chain, node processes and floor
measurements, prints every run and the summary, and writes all of it as JSON (``--json``):

* ``runs``: per run the quantities below and the load average before it;
* ``summary``: per quantity its median, mean, minimum, maximum and a 95 % confidence interval
  of the mean (Student's t over the runs, :func:`scipy.stats.t.interval`; ``null`` for one
  run): ``cpu_over_floor`` and ``cpu_over_floor_direct`` (over the floor at direct libsodium
  calls, the stricter), the nodes' CPU and floor, wall time, time submitting, and per node
  ``cpu_over_floor`` (mixes) and ``rss_over_ciphertext``;
* ``pooled_cpu_over_floor``: every run's nodes' CPU over every run's floor;
* with ``--target X``: how many runs had ``cpu_over_floor`` ≤ X and whether the confidence
  interval's upper end is ≤ X;
* ``records``: every run's full ``bench_round.py`` JSON record.

Arguments after ``--`` go to ``bench_round.py`` unchanged (``--json``, ``--dir`` and ``--keep``
are this script's to set). Exits 2 on bad arguments, 1 when a run fails (its error shown),
0 otherwise. Linux only, as ``bench_round.py``. Usage::

    .venv/bin/python scripts/bench_round_series.py --runs 5 --target 1.15 \\
        --json results/bench-round/series-100000.json -- --users 100000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from scipy import stats

ROUND_SCRIPT = Path(__file__).resolve().parent / "bench_round.py"
OWN_OPTIONS = ("--json", "--dir", "--keep")
CONFIDENCE = 0.95
#: the round's quantities summarized over the runs (besides the per-node ones)
QUANTITIES = (
    "cpu_over_floor",
    "cpu_over_floor_direct",
    "cpu_seconds",
    "floor_cpu_seconds",
    "wall_seconds",
    "submit_seconds",
)


class SeriesError(Exception):
    """A run of the round benchmark failed; the message holds its exit code and error."""


def describe(values: Sequence[float]) -> dict[str, Any]:
    """Median, mean, minimum, maximum and a 95 % Student's t confidence interval of the mean
    (``None`` for fewer than two values, or the mean twice when every value is equal) of
    ``values`` (at least one)."""
    if not values:
        raise ValueError("no values to describe")
    mean = statistics.fmean(values)
    interval: list[float] | None = None
    if len(values) >= 2:
        sem = stats.sem(values)
        if sem == 0:
            interval = [mean, mean]
        else:
            low, high = stats.t.interval(CONFIDENCE, len(values) - 1, loc=mean, scale=sem)
            interval = [float(low), float(high)]
    return {
        "n": len(values),
        "median": statistics.median(values),
        "mean": mean,
        "min": min(values),
        "max": max(values),
        "ci95_of_mean": interval,
    }


def run_row(record: dict[str, Any]) -> dict[str, Any]:
    """One run's summarized quantities from its ``bench_round.py`` record."""
    nodes = record["nodes"]
    return {
        "cpu_over_floor": record["cpu_over_floor"],
        "cpu_over_floor_direct": record["cpu_over_floor_direct"],
        "cpu_seconds": record["cpu_seconds"],
        "floor_cpu_seconds": record["crypto_floor_nodes_cpu_seconds"],
        "wall_seconds": record["wall_seconds"],
        "submit_seconds": record["submit_seconds"],
        "node_cpu_over_floor": {
            n["name"]: n["cpu_over_floor"] for n in nodes if n["cpu_over_floor"] is not None
        },
        "rss_over_ciphertext": {n["name"]: n["rss_over_ciphertext"] for n in nodes},
        "exact": record.get("exact"),
        "load_average_before": record["machine"]["load_average_before"][0],
    }


def summarize_series(records: Sequence[dict[str, Any]], target: float | None) -> dict[str, Any]:
    """The series' JSON (without ``records``) from the runs' ``bench_round.py`` records
    (at least one, all of one configuration).

    :raises ValueError: no records, or records of different users, mixes or messages.
    """
    if not records:
        raise ValueError("no runs to summarize")
    shape = {(r["users"], r["mixes"], r["messages"]) for r in records}
    if len(shape) != 1:
        raise ValueError(f"the runs differ in users, mixes or messages: {sorted(shape)}")
    rows = [run_row(r) for r in records]
    summary: dict[str, Any] = {key: describe([row[key] for row in rows]) for key in QUANTITIES}
    for key in ("node_cpu_over_floor", "rss_over_ciphertext"):
        names = rows[0][key]
        summary[key] = {name: describe([row[key][name] for row in rows]) for name in names}
    first = records[0]
    out: dict[str, Any] = {
        "users": first["users"],
        "mixes": first["mixes"],
        "messages": first["messages"],
        "x25519_per_share": first["x25519_per_share"],
        "runs": rows,
        "summary": summary,
        "pooled_cpu_over_floor": math.fsum(row["cpu_seconds"] for row in rows)
        / math.fsum(row["floor_cpu_seconds"] for row in rows),
        "all_exact": None
        if any(row["exact"] is None for row in rows)
        else all(row["exact"] for row in rows),
    }
    if target is not None:
        interval = summary["cpu_over_floor"]["ci95_of_mean"]
        out["target"] = {
            "cpu_over_floor": target,
            "runs_at_or_under": sum(row["cpu_over_floor"] <= target for row in rows),
            "ci95_upper_at_or_under": None if interval is None else interval[1] <= target,
        }
    return out


def run_once(bench_args: Sequence[str], json_path: Path, timeout: float) -> dict[str, Any]:
    """One ``bench_round.py`` run writing ``json_path``; returns its record.

    :raises SeriesError: the run exited non-zero or timed out.
    """
    argv = [sys.executable, str(ROUND_SCRIPT), "--quiet", *bench_args, "--json", str(json_path)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise SeriesError(f"bench_round.py did not finish within {timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise SeriesError(f"bench_round.py exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    record: dict[str, Any] = json.loads(json_path.read_text())
    return record


def print_series(series: dict[str, Any], console: Console) -> None:
    table = Table(
        title=f"{len(series['runs'])} runs: {series['users']:,} users, "
        f"{series['messages']:,} messages, {series['mixes']} mixes"
    )
    names = list(series["runs"][0]["node_cpu_over_floor"])
    for col in (
        "run",
        "cpu_over_floor",
        "direct",
        "nodes' CPU s",
        "floor s",
        *names,
        "wall s",
        "load before",
    ):
        table.add_column(col, justify="right")
    for i, row in enumerate(series["runs"], 1):
        table.add_row(
            str(i),
            f"{row['cpu_over_floor']:.3f}",
            f"{row['cpu_over_floor_direct']:.3f}",
            f"{row['cpu_seconds']:.1f}",
            f"{row['floor_cpu_seconds']:.1f}",
            *(f"{row['node_cpu_over_floor'][n]:.2f}" for n in names),
            f"{row['wall_seconds']:.1f}",
            f"{row['load_average_before']:.2f}",
        )
    console.print(table)
    summary = Table(title="summary (95 % CI: Student's t over the runs)")
    for col in ("quantity", "median", "mean", "95 % CI of mean", "min", "max"):
        summary.add_column(col, justify="right")

    def add(label: str, d: dict[str, Any]) -> None:
        ci = d["ci95_of_mean"]
        summary.add_row(
            label,
            f"{d['median']:.3f}",
            f"{d['mean']:.3f}",
            "—" if ci is None else f"{ci[0]:.3f} – {ci[1]:.3f}",
            f"{d['min']:.3f}",
            f"{d['max']:.3f}",
        )

    s = series["summary"]
    for key in QUANTITIES:
        add(key, s[key])
    for name, d in s["node_cpu_over_floor"].items():
        add(f"{name} cpu_over_floor", d)
    for name, d in s["rss_over_ciphertext"].items():
        add(f"{name} rss_over_ciphertext", d)
    console.print(summary)
    console.print(
        f"pooled cpu_over_floor (Σ CPU / Σ floor): {series['pooled_cpu_over_floor']:.3f}"
        f"; X25519 per share {series['x25519_per_share']:.3f}"
        f"; every estimate exact: {series['all_exact']}"
    )
    if "target" in series:
        t = series["target"]
        console.print(
            f"target cpu_over_floor ≤ {t['cpu_over_floor']}: "
            f"{t['runs_at_or_under']} of {len(series['runs'])} runs; "
            f"upper end of the 95 % CI at or under: {t['ci95_upper_at_or_under']}"
        )


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    own, rest = list(argv), []
    if "--" in own:
        i = own.index("--")
        own, rest = own[:i], own[i + 1 :]
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Arguments after -- go to scripts/bench_round.py (see its --help).",
    )
    parser.add_argument("--runs", type=int, default=5, help="rounds to run (default 5)")
    parser.add_argument(
        "--target",
        type=float,
        default=None,
        metavar="X",
        help="report how many runs had cpu_over_floor <= X",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the series (summary, runs, every run's record) here",
    )
    parser.add_argument(
        "--timeout", type=float, default=7200.0, help="seconds one run may take (default 7200)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(own)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    if args.timeout <= 0:
        parser.error("--timeout must be > 0")
    clash = [a for a in rest if a.split("=", 1)[0] in OWN_OPTIONS]
    if clash:
        parser.error(f"{', '.join(clash)}: set by this script for each run; not allowed after --")
    return args, rest


def main(argv: Sequence[str] | None = None) -> int:
    args, bench_args = parse_args(sys.argv[1:] if argv is None else argv)
    console = Console(stderr=True, quiet=args.quiet)
    records = []
    with tempfile.TemporaryDirectory(prefix="cloaknet-series-") as tmp:
        for i in range(1, args.runs + 1):
            console.log(f"run {i} of {args.runs} (load average {os.getloadavg()[0]:.2f})")
            try:
                record = run_once(bench_args, Path(tmp) / f"run-{i}.json", args.timeout)
            except SeriesError as exc:
                Console(stderr=True).print(f"bench_round_series: run {i}: {exc}")
                return 1
            console.log(f"run {i}: cpu_over_floor {record['cpu_over_floor']:.3f}")
            records.append(record)
    series = summarize_series(records, args.target)
    print_series(series, Console(width=140))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {**series, "bench_args": bench_args, "records": records}, indent=2, default=str
            )
        )
        console.log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
