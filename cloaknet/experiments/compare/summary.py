"""From a cell's rounds to its :class:`~cloaknet.experiments.compare.rows.CellRow`: the
error statistics of the compare experiment."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from cloaknet.experiments.compare.grid import Cell
from cloaknet.experiments.compare.rows import CellRow, Measurement, TrialRow
from cloaknet.experiments.stats import rmse_interval

__all__ = ["cell_row", "measure"]


def measure(trials: Sequence[TrialRow], predicted_rmse: float | None) -> Measurement | None:
    """The statistics of the rounds' errors (taken in trial order; units of x), or None for
    no rounds: the RMSE and its 95% interval (:func:`rmse_interval`), the mean error, the
    sample standard deviation (ddof = 1; 0 for one round), the largest |error|,
    RMSE / ``predicted_rmse`` (None when the prediction is None or 0) and the rounds' total
    seconds."""
    ordered = sorted(trials, key=lambda t: t.trial)
    errors = [t.error for t in ordered]
    if not errors:
        return None
    rmse, low, high = rmse_interval(errors)
    return Measurement(
        measured_rmse=rmse,
        rmse_ci_low=low,
        rmse_ci_high=high,
        mean_error=statistics.fmean(errors),
        std_error=statistics.stdev(errors) if len(errors) > 1 else 0.0,
        max_abs_error=max(abs(e) for e in errors),
        measured_over_predicted=rmse / predicted_rmse if predicted_rmse else None,
        trials=len(errors),
        seconds=math.fsum(t.seconds for t in ordered),
    )


def cell_row(cell: Cell, delta: float, trials: Sequence[TrialRow]) -> CellRow:
    """The result row of ``cell`` at ``delta`` from its rounds (ignored for an infeasible
    cell)."""
    if cell.plan is None:
        return CellRow(cell.name, cell.users, cell.epsilon, delta, cell.reason, cell.method)
    return CellRow(
        cell.name,
        cell.users,
        cell.epsilon,
        delta,
        cell.reason,
        cell.method,
        plan=cell.plan,
        measurement=measure(trials, cell.plan.predicted_rmse),
    )
