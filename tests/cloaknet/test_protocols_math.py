"""Formulas and samplers behind the comparison protocols."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from cloaknet.accounting import bbgn_achieved_sigma
from cloaknet.errors import ParameterError
from cloaknet.protocols import bbgn_messages, bbgn_plan
from cloaknet.protocols.base import randomized_round, round_up_decisions
from cloaknet.protocols.blanket import BlanketProtocol, blanket_worst_mse
from cloaknet.protocols.cheu import binomial_shift_delta, min_blanket_bits
from cloaknet.randomness import DeterministicRandom
from cloaknet.vectorized import quantize

# --------------------------------------------------------------------------- BBGN bound


def test_bbgn_message_count_reproduces_the_papers_example() -> None:
    # arXiv:1909.11225, abstract: 32-bit numbers, n = 10^4 parties, 12 messages each,
    # statistical security 2^-40. The modulus in which the sum of n 32-bit values cannot
    # wrap is q = n·2^32.
    assert bbgn_messages(10**4, 40, 10**4 * 2**32) == 12
    # with q = 2^32 (a wrapping 32-bit sum) the same formula asks for one message fewer
    assert bbgn_messages(10**4, 40, 2**32) == 11
    # and, read backwards, 12 messages achieve 2^-40 there while 11 do not
    assert bbgn_achieved_sigma(12, 10**4, 10**4 * 2**32) >= 40
    assert bbgn_achieved_sigma(11, 10**4, 10**4 * 2**32) < 40


def test_bbgn_message_count_formula() -> None:
    n, sigma, q = 5000, 30.5, 123_457
    expected = math.ceil((2 * sigma + math.log2(q)) / (math.log2(n) - math.log2(math.e)) + 1)
    assert bbgn_messages(n, sigma, q) == max(3, expected)
    assert bbgn_messages(10**9, 1, 2) == 3  # never below 3
    assert bbgn_messages(10**6, 40, 2**40) <= bbgn_messages(10**3, 40, 2**40)
    for bad in ((2, 40, 2**32), (100, -1, 2**32), (100, 40, 1), (100, float("nan"), 8)):
        with pytest.raises(ParameterError):
            bbgn_messages(*bad)


def test_bbgn_plan_splits_delta_into_the_statistical_distance() -> None:
    plan = bbgn_plan(10_000, 1.0, 1e-6)
    # σ = log2((1 + e^ε)/δ), planned with a 10^-9 relative margin on δ
    assert (1 + math.e) * 2**-plan.sigma == pytest.approx(1e-6, rel=2e-9)
    assert (1 + math.e) * 2**-plan.sigma < 1e-6
    achieved = bbgn_achieved_sigma(plan.messages, plan.honest, plan.modulus)
    assert achieved >= plan.sigma and (1 + math.e) * 2**-achieved <= 1e-6
    assert plan.epsilon_exact == Fraction(1) and plan.noise_gamma == Fraction(1, plan.precision)
    assert plan.modulus == 10_000 * plan.precision + 2 * plan.tail_bound + 1
    assert plan.tail_probability <= 2**-40
    assert plan.messages == bbgn_messages(10_000, plan.sigma, plan.modulus)
    assert 5 <= plan.messages <= 12
    big = bbgn_plan(10_000, 40.0, 1e-6)  # large ε: no overflow in σ
    assert math.isfinite(big.sigma)


# --------------------------------------------------------------------------- rounding


def _reference_up(x: float, k: int, u: int) -> bool:
    num, den = x.as_integer_ratio()
    rem = (num * k) % den
    return u * den < rem << 53


def _edge_inputs() -> list[float]:
    rng = np.random.default_rng(3)  # test data only
    values = [0.0, 1.0, 5e-324, 2.0**-1000, 1e-300, 2.0**-60, 0.5, 1 / 3, 0.1, 0.7,
              1 - 2**-53, 0.999999, 2.0**-30]
    values += rng.random(300).tolist()
    values += (rng.random(100) * 1e-12).tolist()
    return values


@pytest.mark.parametrize("k", [1, 3, 10, 1000, 100_000, 2**40 + 3])
def test_round_up_decisions_are_exact(k: int) -> None:
    xs = np.array(_edge_inputs())
    floors = quantize(xs, k)
    rng = np.random.default_rng(k % 1000)  # test data only
    for x, fl in zip(xs.tolist(), floors.tolist(), strict=True):
        num, den = x.as_integer_ratio()
        assert fl == (num * k) // den
        rem = (num * k) % den
        threshold = -((-rem << 53) // den)  # ceil(rho·2^53)
        candidates = {0, (1 << 53) - 1, threshold, threshold - 1, threshold + 1,
                      int(rng.integers(0, 1 << 53))}
        us = [u for u in candidates if 0 <= u < 1 << 53]
        got = round_up_decisions(np.full(len(us), x), k, np.full(len(us), fl, dtype=np.int64),
                                 np.array(us, dtype=np.uint64))
        assert got.tolist() == [_reference_up(x, k, u) for u in us]


def test_randomized_round_is_unbiased() -> None:
    x = np.full(200_000, 0.3)
    rounded = randomized_round(x, 7, DeterministicRandom("rr"))
    assert set(np.unique(rounded).tolist()) == {2, 3}
    assert float(np.mean(rounded)) == pytest.approx(2.1, abs=5 * math.sqrt(0.09 / 200_000))


# --------------------------------------------------------------------------- blanket


def test_blanket_variance_formula_matches_enumeration() -> None:
    proto = BlanketProtocol(5000, 1.0, 1e-6, precision=6)
    k, gamma = proto.precision, proto.gamma_exact
    for x in (0.0, 0.05, 0.31, 0.5, 0.99, 1.0):
        mu = Fraction(x) * k
        low = math.floor(mu)
        rho = mu - low
        law: dict[int, Fraction] = {}
        for value, weight in ((low, 1 - rho), (min(low + 1, k), rho)):
            law[value] = law.get(value, Fraction(0)) + (1 - gamma) * weight
        for value in range(k + 1):
            law[value] = law.get(value, Fraction(0)) + gamma / (k + 1)
        mean = sum(v * w for v, w in law.items())
        var = sum(v * v * w for v, w in law.items()) - mean * mean
        assert mean == (1 - gamma) * mu + gamma * Fraction(k, 2)
        formula = proto._per_user_variance(np.array([x]))[0]
        assert float(var) == pytest.approx(formula, rel=1e-9, abs=1e-12)
    worst = blanket_worst_mse(5000, k, float(gamma))
    assert proto.predicted_rmse() == pytest.approx(math.sqrt(worst))
    assert proto.predicted_rmse_for(np.zeros(5000)) <= proto.predicted_rmse()


# --------------------------------------------------------------------------- cheu


def test_binomial_shift_delta_matches_full_computation() -> None:
    for trials, shift, eps in ((400, 3, 0.5), (2000, 10, 1.0), (50, 1, 0.2)):
        z = np.arange(trials + 1)
        p = stats.binom.pmf(z, trials, 0.5)
        shifted = np.concatenate((np.zeros(shift), p[:-shift]))
        exact = float(np.sum(np.maximum(p - math.exp(eps) * shifted, 0.0)))
        got = binomial_shift_delta(trials, shift, eps)
        assert got == pytest.approx(exact, rel=1e-9, abs=1e-15)


def test_binomial_shift_delta_is_monotone() -> None:
    eps = 0.7
    for shift in (2, 5):
        by_trials = [binomial_shift_delta(m, shift, eps) for m in range(50, 800, 37)]
        assert all(a >= b for a, b in itertools.pairwise(by_trials))
    # the worst shift is the largest (used by the calibration)
    for trials in (300, 3000):
        by_shift = [binomial_shift_delta(trials, s, eps) for s in range(1, 25)]
        assert all(a <= b for a, b in itertools.pairwise(by_shift))


def test_min_blanket_bits_is_minimal() -> None:
    m = min_blanket_bits(8, 1.0, 1e-5)
    assert binomial_shift_delta(m, 8, 1.0) <= 1e-5 < binomial_shift_delta(m - 1, 8, 1.0)
