"""The statistics of the experiments, on scipy and numpy: an interval for an RMSE (χ²),
Wilson intervals for proportions, order-statistic quantiles, means and log-log slopes, and
the two judgements the reports make from intervals (:func:`relation`, :func:`overlap`).

Every function is pure (no randomness) and raises :class:`~cloaknet.errors.ParameterError`
on arguments outside its stated range.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

import numpy as np
from scipy import stats as scipy_stats

from cloaknet.errors import ParameterError

__all__ = [
    "ProportionInterval",
    "Relation",
    "RmseInterval",
    "loglog_slope",
    "mean",
    "order_quantile",
    "overlap",
    "proportion",
    "relation",
    "rmse_interval",
    "wilson_interval",
]

#: Where an interval lies relative to a reference value (:func:`relation`).
Relation = Literal["above", "below", "within"]


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ParameterError(f"level must lie in (0, 1), got {level}")


class RmseInterval(NamedTuple):
    """An RMSE and an interval for the true RMSE, in the units of the errors."""

    rmse: float
    low: float
    high: float


def rmse_interval(errors: Sequence[float], level: float = 0.95) -> RmseInterval:
    """(RMSE, low, high): the RMSE sqrt(Σe²/t) of the t errors and an approximate ``level``
    interval for the true RMSE (same units as the errors; low <= RMSE <= high).

    The interval treats ν·MSE/σ² as χ²_ν with Satterthwaite's effective degrees of freedom
    ν = 2t/(κ − 1), κ = t·Σe⁴/(Σe²)² (so that Var(MSE) matches the sample's), clamped to
    [1, t] (κ <= 3, as for Gaussian errors, gives ν = t); the χ² quantiles are
    :data:`scipy.stats.chi2`'s, for real ν. For Gaussian errors the interval is the exact χ²
    interval; heavy tails (the Laplace-like noise of central and bbgn, κ ≈ 6) widen it, and
    its coverage is then approximate (about 90% for Laplace errors at 50 trials). Identical
    errors (a deterministic estimate) and all-zero errors give the point interval.

    :raises ParameterError: no errors, or ``level`` outside (0, 1).
    """
    t = len(errors)
    if t == 0:
        raise ParameterError("no errors to summarise")
    _check_level(level)
    total = math.fsum(e * e for e in errors)
    rmse = math.sqrt(total / t)
    if len(set(errors)) == 1 or total == 0.0:
        return RmseInterval(rmse, rmse, rmse)
    kurtosis = t * math.fsum(e**4 for e in errors) / (total * total)
    excess = kurtosis - 1.0  # >= 0 by Cauchy–Schwarz
    dof = float(t) if excess <= 2.0 else min(float(t), max(1.0, 2.0 * t / excess))
    mse = total / t
    upper_quantile = float(scipy_stats.chi2.ppf((1.0 + level) / 2.0, dof))
    lower_quantile = float(scipy_stats.chi2.ppf((1.0 - level) / 2.0, dof))
    return RmseInterval(
        rmse, math.sqrt(dof * mse / upper_quantile), math.sqrt(dof * mse / lower_quantile)
    )


class ProportionInterval(NamedTuple):
    """An interval for a probability: 0 <= low <= high <= 1 (both NaN without trials)."""

    low: float
    high: float


def wilson_interval(successes: int, trials: int, level: float = 0.95) -> ProportionInterval:
    """The two-sided Wilson score interval at ``level`` for a binomial proportion
    (:meth:`scipy.stats.binomtest(...).proportion_ci <scipy.stats.binomtest>` with
    ``method="wilson"``, z the exact normal quantile). (NaN, NaN) when ``trials`` is 0.

    :raises ParameterError: ``trials`` < 0, ``successes`` outside [0, trials], or ``level``
        outside (0, 1).
    """
    _check_level(level)
    if trials < 0 or not 0 <= successes <= max(trials, 0):
        raise ParameterError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    if trials == 0:
        return ProportionInterval(math.nan, math.nan)
    ci = scipy_stats.binomtest(successes, trials).proportion_ci(
        confidence_level=level, method="wilson"
    )
    return ProportionInterval(max(0.0, float(ci.low)), min(1.0, float(ci.high)))


def order_quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` as an order statistic, never an interpolation: the
    sorted value at index ⌈q·(t − 1)⌉ (numpy's ``method="higher"``; for q = 1/2 and even t
    the upper of the two middle values). Infinite values are fine (an interpolated median of
    two infinite losses would be NaN). NaN for no values.

    :raises ParameterError: ``q`` outside [0, 1].
    """
    if not 0.0 <= q <= 1.0:
        raise ParameterError(f"q must lie in [0, 1], got {q}")
    if len(values) == 0:
        return math.nan
    return float(np.quantile(np.asarray(values, dtype=np.float64), q, method="higher"))


def proportion(flags: Iterable[bool]) -> float:
    """The fraction of true ``flags`` in [0, 1]; NaN for none."""
    items = [bool(flag) for flag in flags]
    return sum(items) / len(items) if items else math.nan


def mean(values: Iterable[float]) -> float:
    """The arithmetic mean (:func:`statistics.fmean`: exactly summed, rounded once); NaN for
    no values."""
    items = list(values)
    return statistics.fmean(items) if items else math.nan


def loglog_slope(points: Iterable[tuple[float, float]]) -> float | None:
    """The least-squares slope of ln y against ln x (:func:`scipy.stats.linregress`) over the
    points with x > 0 and y > 0; None when fewer than two such points have distinct x."""
    kept = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len({x for x, _ in kept}) < 2:
        return None
    xs, ys = zip(*kept, strict=True)
    return float(scipy_stats.linregress(xs, ys).slope)


def relation(low: float, high: float, value: float) -> Relation:
    """Where the interval [``low``, ``high``] lies relative to ``value``: "above" when
    low > value, "below" when high < value, else "within" — so "above" and "below" claim a
    difference only with the interval's evidence. A NaN bound (no trials) gives "within".

    :raises ParameterError: low > high.
    """
    if low > high:
        raise ParameterError(f"need low <= high, got [{low}, {high}]")
    if low > value:
        return "above"
    if high < value:
        return "below"
    return "within"


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether the intervals ``a`` = (low, high) and ``b`` share a point (closed intervals).
    Two overlapping 95% intervals are the reports' criterion for "within sampling noise"
    (conservative: disjoint intervals imply a significant difference at well below 5%)."""
    return a[0] <= b[1] and b[0] <= a[1]
