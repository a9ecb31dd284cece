"""The statistics of the experiments: RMSE intervals, Wilson intervals, order-statistic
quantiles, means and log-log slopes."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from scipy import stats

from cloaknet.errors import ParameterError
from cloaknet.experiments.stats import (
    loglog_slope,
    mean,
    order_quantile,
    proportion,
    rmse_interval,
    wilson_interval,
)

# --------------------------------------------------------------------------- RMSE interval


def test_rmse_interval_point_and_errors() -> None:
    assert rmse_interval([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)
    assert rmse_interval([0.0, 0.0]) == (0.0, 0.0, 0.0)
    with pytest.raises(ParameterError):
        rmse_interval([])
    with pytest.raises(ParameterError):
        rmse_interval([1.0, 2.0], level=1.0)


def test_rmse_interval_gaussian_is_the_chi2_interval() -> None:
    errors = np.random.default_rng(0).normal(0.0, 2.0, 200).tolist()  # test data only
    rmse, low, high = rmse_interval(errors)
    mse = rmse**2
    assert low == pytest.approx(math.sqrt(200 * mse / stats.chi2.ppf(0.975, 200)), rel=1e-12)
    assert high == pytest.approx(math.sqrt(200 * mse / stats.chi2.ppf(0.025, 200)), rel=1e-12)
    assert low < 2.0 < high


def test_rmse_interval_uses_real_satterthwaite_degrees_of_freedom() -> None:
    """5 of 50 errors equal to a, the rest 0: κ = 10, ν = 2·50/9 = 11.1 (not rounded)."""
    errors = [3.0] * 5 + [0.0] * 45
    rmse, low, high = rmse_interval(errors)
    nu = 100 / 9
    assert rmse == pytest.approx(math.sqrt(0.9))
    assert low == pytest.approx(math.sqrt(nu * 0.9 / stats.chi2.ppf(0.975, nu)), rel=1e-12)
    assert high == pytest.approx(math.sqrt(nu * 0.9 / stats.chi2.ppf(0.025, nu)), rel=1e-12)
    # heavier tails than the Gaussian with the same RMSE: a wider interval
    gaussian = rmse_interval([math.sqrt(0.9)] * 25 + [-math.sqrt(0.9)] * 25)
    assert gaussian.high - gaussian.low < high - low


def test_rmse_interval_covers_gaussian_errors_95_percent_of_the_time() -> None:
    generator = np.random.default_rng(11)  # test data only
    runs, covered = 2000, 0
    for _ in range(runs):
        _, low, high = rmse_interval(generator.normal(0.0, 1.5, 20).tolist())
        covered += low <= 1.5 <= high
    assert stats.binomtest(covered, runs, 0.95).pvalue > 1e-3


# --------------------------------------------------------------------------- Wilson


def _wilson_closed_form(k: int, n: int, level: float) -> tuple[float, float]:
    z = statistics.NormalDist().inv_cdf((1 + level) / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.mark.parametrize(("k", "n"), [(3, 12), (1, 200), (100, 200), (37, 41)])
@pytest.mark.parametrize("level", [0.9, 0.95])
def test_wilson_interval_is_the_score_interval(k: int, n: int, level: float) -> None:
    low, high = wilson_interval(k, n, level)
    expected_low, expected_high = _wilson_closed_form(k, n, level)
    assert low == pytest.approx(expected_low, rel=1e-9)
    assert high == pytest.approx(expected_high, rel=1e-9)


def test_wilson_interval_edges() -> None:
    low, high = wilson_interval(0, 12)
    assert low == 0.0 and 0.24 < high < 0.245
    low, high = wilson_interval(12, 12)
    assert high == 1.0 and 0.755 < low < 0.76
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    for bad in ((-1, 5), (6, 5), (1, -1)):
        with pytest.raises(ParameterError):
            wilson_interval(*bad)


def test_wilson_interval_coverage_is_near_nominal() -> None:
    """Exact coverage at p = 0.3, n = 50: Σ_k P[k] · 1[p inside the interval of k]."""
    n, p = 50, 0.3
    coverage = sum(
        stats.binom.pmf(k, n, p)
        for k in range(n + 1)
        if wilson_interval(k, n).low <= p and p <= wilson_interval(k, n).high
    )
    assert 0.92 <= coverage <= 0.98


# --------------------------------------------------------------------------- quantiles etc.


@pytest.mark.parametrize("n", [1, 2, 3, 10, 11, 199, 200])
def test_order_quantile_is_an_order_statistic(n: int) -> None:
    values = [float(v) for v in np.random.default_rng(n).permutation(n)]  # test data only
    ordered = sorted(values)
    for q in (0.0, 0.5, 0.9, 1.0):
        got = order_quantile(values, q)
        assert got == ordered[math.ceil(q * (n - 1))]
        assert got in values  # never an interpolation
    # the upper median for an even count
    assert order_quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 3.0


def test_order_quantile_with_infinite_losses_and_edges() -> None:
    assert order_quantile([1.0, math.inf, math.inf, math.inf], 0.5) == math.inf
    assert order_quantile([0.0, 1.0, 2.0, math.inf], 0.5) == 2.0
    assert math.isnan(order_quantile([], 0.5))
    with pytest.raises(ParameterError):
        order_quantile([1.0], 1.5)


def test_proportion_and_mean() -> None:
    assert proportion([True, False, True, True]) == 0.75
    assert math.isnan(proportion([]))
    assert mean([0.1] * 10) == 0.1  # exactly summed, rounded once
    assert math.isnan(mean([]))


def test_loglog_slope() -> None:
    points = [(n, 3.0 * n**0.5) for n in (10.0, 100.0, 1000.0, 10_000.0)]
    assert loglog_slope(points) == pytest.approx(0.5, abs=1e-12)
    assert loglog_slope([(10.0, 1.0), (100.0, 10.0), (0.0, 5.0), (1000.0, -1.0)]) == (
        pytest.approx(1.0)
    )
    assert loglog_slope([(10.0, 1.0)]) is None
    assert loglog_slope([(10.0, 1.0), (10.0, 2.0)]) is None
