"""The exact samplers of the experiments: goodness of fit against the binomial law, the
exact-integer fallback, and the stream order of ``bernoulli_any``."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from cloaknet.errors import ParameterError
from cloaknet.experiments.samplers import (
    _binomial_half_rejection,
    bernoulli_any,
    binomial_dyadic,
    binomial_half,
)
from cloaknet.randomness import DeterministicRandom, bernoulli_fraction


def _gof_pvalue(samples: np.ndarray, count: int, p: float) -> float:
    observed = np.bincount(samples, minlength=count + 1)
    expected = stats.binom.pmf(np.arange(count + 1), count, p) * samples.size
    keep = expected >= 5
    scaled = expected[keep] * observed[keep].sum() / expected[keep].sum()
    return float(stats.chisquare(observed[keep], scaled).pvalue)


@pytest.mark.parametrize("count", [1, 2, 7, 40])
def test_binomial_half_rejection_has_the_binomial_law(count: int) -> None:
    rng = DeterministicRandom(f"bin/{count}")
    samples = np.array([binomial_half(count, rng, direct_limit=0) for _ in range(6000)])
    assert samples.min() >= 0 and samples.max() <= count
    assert _gof_pvalue(samples, count, 0.5) > 1e-3


def test_binomial_half_exact_fallback_has_the_binomial_law() -> None:
    rng = DeterministicRandom("exact")
    samples = np.array([_binomial_half_rejection(12, rng, force_exact=True) for _ in range(5000)])
    assert _gof_pvalue(samples, 12, 0.5) > 1e-3


def test_binomial_half_popcount_and_large_counts() -> None:
    rng = DeterministicRandom("large")
    assert binomial_half(0, rng) == 0
    small = np.array([binomial_half(13, rng) for _ in range(4000)])
    assert _gof_pvalue(small, 13, 0.5) > 1e-3
    big = 10**9
    draws = np.array([binomial_half(big, rng) for _ in range(400)], dtype=np.float64)
    sd = math.sqrt(big / 4)
    assert abs(draws.mean() - big / 2) <= 4.5 * sd / math.sqrt(400)
    assert abs(draws.var(ddof=1) / sd**2 - 1) <= 0.35
    with pytest.raises(ParameterError):
        binomial_half(-1, rng)


@pytest.mark.parametrize("direct_limit", [0, 1 << 16])
def test_binomial_dyadic_has_the_binomial_law(direct_limit: int) -> None:
    rng = DeterministicRandom(f"dyadic/{direct_limit}")
    samples = np.array(
        [binomial_dyadic(30, 5, 4, rng, direct_limit=direct_limit) for _ in range(5000)]
    )
    assert _gof_pvalue(samples, 30, 5 / 16) > 1e-3
    assert binomial_dyadic(9, 16, 4, rng) == 9
    assert binomial_dyadic(9, 0, 4, rng) == 0
    with pytest.raises(ParameterError):
        binomial_dyadic(9, 17, 4, rng)


def test_bernoulli_any_edge_cases_and_validation() -> None:
    rng = DeterministicRandom("any/edges")
    assert bernoulli_any(Fraction(1, 2), 0, rng) is False
    assert not any(bernoulli_any(Fraction(0), 50, rng) for _ in range(20))
    assert all(bernoulli_any(Fraction(1), 1, rng) for _ in range(20))
    with pytest.raises(ParameterError):
        bernoulli_any(Fraction(3, 2), 1, rng)
    with pytest.raises(ParameterError):
        bernoulli_any(Fraction(1, 2), -1, rng)


@pytest.mark.parametrize(("q", "count"), [(Fraction(1, 2), 1), (Fraction(1, 10), 3)])
def test_bernoulli_any_has_the_right_probability(q: Fraction, count: int) -> None:
    rng = DeterministicRandom(f"any/{q}/{count}")
    draws = 6000
    hits = sum(bernoulli_any(q, count, rng) for _ in range(draws))
    expected = 1 - (1 - float(q)) ** count
    assert stats.binomtest(hits, draws, expected).pvalue > 1e-3


def test_bernoulli_any_stops_at_the_first_success() -> None:
    """The stream is consumed trial by trial up to the first success (seeded runs depend on
    this order)."""
    q = Fraction(1, 3)
    for seed in range(30):
        fast, slow = DeterministicRandom(f"order/{seed}"), DeterministicRandom(f"order/{seed}")
        result = bernoulli_any(q, 5, fast)
        expected = False
        for _ in range(5):
            if bernoulli_fraction(q.numerator, q.denominator, slow):
                expected = True
                break
        assert result == expected
        assert fast.token_bytes(8) == slow.token_bytes(8)  # both streams at the same place
