"""The typed results of the compare experiment: one :class:`TrialRow` per round, one
:class:`CellRow` per (row, n, ε). They become dicts only at the CSV/JSON edge
(:meth:`CellRow.as_dict`, :func:`cloaknet.experiments.output.row_dict`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from cloaknet.experiments.output import columns_of, row_dict

__all__ = [
    "ROW_COLUMNS",
    "TRIAL_COLUMNS",
    "CellRow",
    "Measurement",
    "Method",
    "Plan",
    "TrialRow",
]

#: How a trial was simulated: the real encode → shuffle → analyze pipeline, or the exact
#: sampler of the analyzer's sufficient statistic.
Method = Literal["messages", "sufficient-statistic"]


@dataclass(frozen=True)
class TrialRow:
    """One round of row ``protocol`` (:data:`~.lineup.ROWS`): the analyzer's ``estimate`` of
    Σx, the exact ``true_sum`` (both in units of the inputs x ∈ [0, 1)), ``error`` =
    estimate − true_sum, and the wall-clock ``seconds`` of the round."""

    protocol: str
    users: int
    epsilon: float
    delta: float
    trial: int
    method: Method
    estimate: float
    true_sum: float
    error: float
    seconds: float


@dataclass(frozen=True)
class Plan:
    """What a feasible protocol instance runs, sends and predicts: ``runs`` the protocol's
    name (a default row's may differ from the row's: ``bbgn``, ``cloak-sum-preserving``),
    the ``bound`` and ``noise`` it uses (:func:`~.lineup.bound_and_noise`, or the selected
    plan's for a default row), m (float: the blanket's is fractional in expectation),
    message width in bits and bytes, bytes per user, the message ``modulus`` (messages lie in
    [0, modulus)), the precision k (None when the protocol has none), the RMSE predicted on
    the fixed inputs, the generic predicted RMSE and the exact bias E[estimate] − Σx (units
    of x)."""

    runs: str
    bound: str
    noise: str
    messages_per_user: float
    bits_per_message: int
    bytes_per_message: int
    bytes_per_user: float
    modulus: int
    precision: int | None
    predicted_rmse: float
    predicted_rmse_generic: float
    predicted_bias: float


@dataclass(frozen=True)
class Measurement:
    """The statistics of a cell's ``trials`` (>= 1) errors: RMSE with its 95% interval
    (:func:`cloaknet.experiments.stats.rmse_interval`), mean, sample standard deviation
    (0 for one trial), largest |error|, measured/predicted RMSE (None when the prediction is
    0) and the summed seconds of the rounds."""

    measured_rmse: float
    rmse_ci_low: float
    rmse_ci_high: float
    mean_error: float
    std_error: float
    max_abs_error: float
    measured_over_predicted: float | None
    trials: int
    seconds: float


@dataclass(frozen=True)
class CellRow:
    """One (row, n, ε) cell; ``protocol`` is the row's name (:data:`~.lineup.ROWS`). ``plan``
    is None for an infeasible cell (``reason`` says why; ``method`` is then None too);
    ``measurement`` is None when no trial ran."""

    protocol: str
    users: int
    epsilon: float
    delta: float
    reason: str | None
    method: Method | None
    plan: Plan | None = None
    measurement: Measurement | None = None

    @property
    def feasible(self) -> bool:
        """Whether the protocol could be built for this cell."""
        return self.plan is not None

    def as_dict(self) -> dict[str, Any]:
        """The flat, JSON-ready row: the keys of :data:`ROW_COLUMNS` in that order, None
        where not applicable."""
        flat: dict[str, Any] = {
            "protocol": self.protocol,
            "users": self.users,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "feasible": self.feasible,
            "reason": self.reason,
            "method": self.method,
        }
        flat.update(row_dict(self.plan) if self.plan else dict.fromkeys(columns_of(Plan)))
        flat.update(
            row_dict(self.measurement)
            if self.measurement
            else dict.fromkeys(columns_of(Measurement))
        )
        return flat


#: The columns of ``compare.csv`` and the keys of the returned rows.
ROW_COLUMNS: Final[tuple[str, ...]] = (
    "protocol",
    "users",
    "epsilon",
    "delta",
    "feasible",
    "reason",
    "method",
    *columns_of(Plan),
    *columns_of(Measurement),
)
#: The columns of ``trials.csv``.
TRIAL_COLUMNS: Final[tuple[str, ...]] = columns_of(TrialRow)
