"""Shared plumbing of the experiments: parallel trials with progress bars, CSV and Markdown
output, and a non-interactive matplotlib."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

__all__ = [
    "fmt",
    "markdown_table",
    "pyplot",
    "run_parallel",
    "write_csv",
]

T = TypeVar("T")
R = TypeVar("R")


def pyplot() -> Any:
    """matplotlib.pyplot with the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def run_parallel(
    function: Callable[[T], list[R]],
    tasks: Sequence[T],
    *,
    jobs: int,
    label: str,
    weight: Callable[[T], int] = lambda task: 1,
    console: Console | None = None,
) -> list[R]:
    """Run ``function`` over ``tasks`` in ``jobs`` processes (in this process if ``jobs`` is
    1), with a progress bar advancing by ``weight(task)``; results are concatenated in task
    order. ``function`` must be a picklable top-level function."""
    results: list[list[R]] = [[] for _ in tasks]
    total = sum(weight(t) for t in tasks)
    with Progress(
        TextColumn(f"{label:<28}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console or Console(stderr=True),
    ) as bars:
        bar = bars.add_task(label, total=total)
        if jobs <= 1:
            for i, task in enumerate(tasks):
                results[i] = function(task)
                bars.advance(bar, weight(task))
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                pending: dict[Future[list[R]], int] = {
                    pool.submit(function, task): i for i, task in enumerate(tasks)
                }
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        i = pending.pop(future)
                        results[i] = future.result()
                        bars.advance(bar, weight(tasks[i]))
    return [row for chunk in results for row in chunk]


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)


def write_csv(
    path: Path,
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str] | None = None,
) -> None:
    """Write ``rows`` (dicts) to ``path`` with a header; columns default to the first row's."""
    cols = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c) for c in cols})


def fmt(value: Any, digits: int = 3) -> str:
    """Human formatting for tables: floats with ``digits`` significant digits, ∞, n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if math.isinf(value):
            return "∞" if value > 0 else "−∞"
        if value != 0 and (abs(value) < 10**-(digits) or abs(value) >= 10**6):
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines.extend("| " + " | ".join(fmt(v) for v in row) + " |" for row in rows)
    return "\n".join(lines) + "\n"
