"""Parallel trials for the experiments: a process pool with a progress bar."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

__all__ = ["default_jobs", "run_parallel"]

T = TypeVar("T")
R = TypeVar("R")


def default_jobs() -> int:
    """The number of CPUs (at least 1): the default process count of every experiment."""
    return max(1, os.cpu_count() or 1)


def run_parallel(
    function: Callable[[T], list[R]],
    tasks: Sequence[T],
    *,
    jobs: int,
    label: str,
    weight: Callable[[T], int] = lambda task: 1,
    console: Console | None = None,
) -> list[R]:
    """Run ``function`` over ``tasks`` in ``jobs`` processes (in this process if ``jobs`` <= 1),
    with a progress bar advancing by ``weight(task)``; the results are concatenated in task
    order, whatever order the processes finish in. ``function`` and the tasks must be
    picklable (a top-level function, frozen dataclasses). An exception in a worker is
    re-raised here."""
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
