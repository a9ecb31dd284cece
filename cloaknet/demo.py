"""``cloaknet demo --mixes 0``: the planned protocol with an ideal shuffler, in this one process.

Chooses the parameters exactly as ``cloaknet plan`` does (:func:`cloaknet.demo_plan.choose`,
by default :func:`cloaknet.plans.select_plan` with ``bound="auto"``), runs encode → uniform
shuffle → analyze without a network (the cloak through
:func:`cloaknet.pipeline.run_pipeline`, any other protocol through its own
``encode_many``/``analyze``) and prints what happened, naming the bound and the noise. Plain
``cloaknet demo`` (``--mixes`` >= 1, the default) runs the networked chain of separate
processes instead: :mod:`cloaknet.netdemo`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
from numpy.typing import NDArray
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from cloaknet.demo_plan import choose, summary_rows
from cloaknet.pipeline import Progress as ProgressCallback
from cloaknet.pipeline import run_pipeline
from cloaknet.protocols import SummationProtocol
from cloaknet.randomness import SYSTEM_RANDOM
from cloaknet.vectorized import shuffle

__all__ = ["run_demo"]


def _run_protocol(
    values: NDArray[np.float64], protocol: SummationProtocol, progress: ProgressCallback
) -> tuple[float, dict[str, float]]:
    """Encode every value with ``protocol``, shuffle all messages uniformly and analyze:
    the estimate and the seconds of each stage."""
    n = int(values.size)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    progress("encode", 0, n)
    messages = protocol.encode_many(values, SYSTEM_RANDOM)
    progress("encode", n, n)
    t1 = time.perf_counter()
    seconds["encode"] = t1 - t0
    size = int(np.asarray(messages).size)
    progress("shuffle", 0, size)
    mixed = shuffle(messages, SYSTEM_RANDOM)
    progress("shuffle", size, size)
    t2 = time.perf_counter()
    seconds["shuffle"] = t2 - t1
    progress("analyze", 0, size)
    estimate = float(protocol.analyze(mixed, n))
    progress("analyze", size, size)
    seconds["analyze"] = time.perf_counter() - t2
    return estimate, seconds


def run_demo(
    *,
    users: int,
    epsilon: float,
    delta: float,
    precision: int | None,
    mode: str,
    data_seed: int | None,
    as_json: bool,
    bound: str = "auto",
    protocol: str = "plan",
) -> int:
    """Run the demo and print a table (or one JSON object). Returns the exit code (0).

    ``protocol`` and ``bound`` choose what runs (:func:`cloaknet.demo_plan.choose`: by
    default what ``cloaknet plan`` prints for these arguments). The JSON object has the
    plan's :meth:`~cloaknet.plans.SelectedPlan.summary` (``protocol``, ``bound``, ``lemma``,
    ``noise``, ``messages_per_user``, ``epsilon``, ``epsilon_exact``, ``delta``, …; for a
    comparison protocol run by name, ``bound`` and ``lemma`` name its own analysis) and
    what the run measured (``true_sum``, ``estimate``, ``error``, ``seconds``, …).

    The demo's *input data* is drawn with numpy's generator (optionally seeded, so a run can
    be repeated); every share, the shuffle and the noise use the OS CSPRNG.
    """
    started = time.perf_counter()
    choice = choose(protocol, users, epsilon, delta, mode=mode, bound=bound, precision=precision)
    values = np.random.default_rng(data_seed).random(users)
    console = Console(stderr=True)
    summary: dict[str, Any] = {"users": users, "mixes": 0, **choice.summary}
    with Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,}"),
        TimeElapsedColumn(),
        console=console,
        disable=as_json or not console.is_terminal,
    ) as bars:
        tasks: dict[str, TaskID] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bars.add_task(stage, total=total)
            bars.update(tasks[stage], completed=done, total=total)

        params = choice.cloak_params
        if params is not None:
            outcome = run_pipeline(values, params, progress=progress)
            summary.update(
                {
                    "true_sum": outcome.true_sum,
                    "rounded_sum": float(outcome.rounded_sum),
                    "estimate": outcome.estimate,
                    "error": outcome.error,
                    "noisy_users": outcome.noisy_users,
                    "clamped": outcome.result.clamped,
                    "stage_seconds": outcome.seconds,
                }
            )
        else:
            estimate, stages = _run_protocol(values, choice.protocol, progress)
            true_sum = float(np.sum(values))
            summary.update(
                {
                    "true_sum": true_sum,
                    "rounded_sum": None,  # these protocols round randomly
                    "estimate": estimate,
                    "error": estimate - true_sum,
                    "expected_estimate": choice.protocol.expected_estimate(values),
                    "stage_seconds": stages,
                }
            )
    summary["seconds"] = time.perf_counter() - started
    if as_json:
        print(json.dumps(summary, indent=2))
        return 0
    _print_table(summary)
    return 0


def _print_table(summary: dict[str, Any]) -> None:
    out = Console()
    table = Table(
        title=f"cloaknet demo — {summary['users']:,} users, {summary['protocol']}, "
        f"{summary['mode']}, ideal shuffler"
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for quantity, value in summary_rows(summary, modulus=True):
        table.add_row(quantity, value)
    if "noisy_users" in summary:
        table.add_row("users who added noise", str(summary["noisy_users"]))
    for stage, secs in summary["stage_seconds"].items():
        table.add_row(f"time: {stage}", f"{secs:.3f} s")
    table.add_row("wall time", f"{summary['seconds']:.3f} s")
    out.print(table)
