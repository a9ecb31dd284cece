"""``cloaknet demo --mixes 0``: the cloak with an ideal shuffler, in this one process.

Plans the cloak's parameters, runs :func:`cloaknet.pipeline.run_pipeline` (encode → uniform
shuffle → analyze, no network) and prints what happened. Plain ``cloaknet demo`` (``--mixes``
>= 1, the default) runs the networked chain of separate processes instead:
:mod:`cloaknet.netdemo`.
"""

from __future__ import annotations

import json
import time

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from cloaknet.pipeline import run_pipeline
from cloaknet.planner import plan

__all__ = ["run_demo"]


def run_demo(
    *,
    users: int,
    epsilon: float,
    delta: float,
    precision: int | None,
    mode: str,
    data_seed: int | None,
    as_json: bool,
) -> int:
    """Run the demo and print a table (or one JSON object). Returns the exit code (0).

    The demo's *input data* is drawn with numpy's generator (optionally seeded, so a run can
    be repeated); every share, the shuffle and the noise use the OS CSPRNG.
    """
    started = time.perf_counter()
    chosen = plan(users, epsilon, delta, precision, mode)
    values = np.random.default_rng(data_seed).random(users)
    console = Console(stderr=True)
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

        outcome = run_pipeline(values, chosen.params, progress=progress)
    seconds = time.perf_counter() - started
    summary = {
        "users": users,
        "mixes": 0,
        "mode": chosen.mode,
        "messages_per_user": chosen.params.messages,
        "modulus": chosen.params.modulus,
        "precision": chosen.params.precision,
        "epsilon": chosen.epsilon,
        "delta": chosen.delta,
        "true_sum": outcome.true_sum,
        "rounded_sum": float(outcome.rounded_sum),
        "estimate": outcome.estimate,
        "error": outcome.error,
        "expected_rmse": chosen.expected_rmse,
        "noisy_users": outcome.noisy_users,
        "clamped": outcome.result.clamped,
        "seconds": seconds,
        "stage_seconds": outcome.seconds,
    }
    if as_json:
        print(json.dumps(summary, indent=2))
        return 0
    out = Console()
    table = Table(title=f"cloaknet demo — {users:,} users, {chosen.mode}, ideal shuffler")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("messages per user m", str(chosen.params.messages))
    table.add_row("modulus N", f"{chosen.params.modulus} ({chosen.params.bits_per_message} bits)")
    table.add_row("(epsilon, delta)", f"({chosen.epsilon:.4g}, {chosen.delta:.3g})")
    table.add_row("true sum", f"{outcome.true_sum:.6f}")
    table.add_row("rounded sum  Σ⌊x·k⌋/k", f"{float(outcome.rounded_sum):.6f}")
    table.add_row("estimate", f"{outcome.estimate:.6f}")
    table.add_row("error (estimate − true)", f"{outcome.error:+.6f}")
    table.add_row("expected RMSE", f"{chosen.expected_rmse:.4g}")
    table.add_row("users who added noise", str(outcome.noisy_users))
    for stage, secs in outcome.seconds.items():
        table.add_row(f"time: {stage}", f"{secs:.3f} s")
    table.add_row("wall time", f"{seconds:.3f} s")
    out.print(table)
    return 0
