"""Running ``cloaknet experiment compare``: simulate every cell, then write the files."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from cloaknet.experiments.compare.grid import build_cells, plan_tasks
from cloaknet.experiments.compare.plots import plot_communication, plot_error
from cloaknet.experiments.compare.report import report
from cloaknet.experiments.compare.rows import ROW_COLUMNS, TRIAL_COLUMNS, TrialRow
from cloaknet.experiments.compare.settings import CompareSettings
from cloaknet.experiments.compare.simulate import run_task
from cloaknet.experiments.compare.summary import cell_row
from cloaknet.experiments.output import row_dict, write_csv, write_json
from cloaknet.experiments.parallel import run_parallel

__all__ = ["run_compare_experiment"]


def run_compare_experiment(
    out: Path, settings: CompareSettings, console: Console | None = None
) -> dict[str, Any]:
    """Run the grid of ``settings``; write ``compare.csv``, ``trials.csv``, the PNG plots
    ``error_vs_users.png`` and ``communication_vs_users.png``, ``settings.json`` and
    ``report.md`` into ``out`` (created if needed). Progress goes to ``console`` (default:
    standard error).

    Returns ``{"rows": [...], "seconds": float}``: one JSON-ready dict per (row, n, ε)
    with the keys of :data:`~cloaknet.experiments.compare.rows.ROW_COLUMNS` (None where not
    applicable, e.g. the measurements of an infeasible cell), and the wall-clock time of the
    whole run.

    :raises OSError: ``out`` cannot be created or written.
    """
    console = console or Console(stderr=True)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    cells = build_cells(settings)
    trials = run_parallel(
        run_task,
        plan_tasks(settings, cells),
        jobs=settings.jobs,
        label="protocol rounds",
        weight=lambda t: t.count,
        console=console,
    )
    grouped: dict[tuple[str, int, float], list[TrialRow]] = {}
    for trial in trials:
        grouped.setdefault((trial.protocol, trial.users, trial.epsilon), []).append(trial)
    rows = [
        cell_row(c, settings.delta, grouped.get((c.name, c.users, c.epsilon), [])) for c in cells
    ]
    flat = [r.as_dict() for r in rows]
    write_csv(out / "compare.csv", flat, ROW_COLUMNS)
    write_csv(out / "trials.csv", [row_dict(t) for t in trials], TRIAL_COLUMNS)
    plot_error(out / "error_vs_users.png", settings, rows)
    plot_communication(out / "communication_vs_users.png", settings, rows)
    seconds = time.perf_counter() - started
    write_json(out / "settings.json", asdict(settings))
    (out / "report.md").write_text(report(settings, rows, seconds))
    return {"rows": flat, "seconds": seconds}
