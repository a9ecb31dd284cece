"""Tests for cloaknet.noise: exact samplers and the truncated discrete Laplace helpers.

Statistical tests use :class:`DeterministicRandom` with fixed seeds so they are reproducible;
tolerances are 5 binomial / sampling standard deviations, or chi-square p-values > 1e-4.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from cloaknet import noise
from cloaknet.errors import ParameterError
from cloaknet.noise import (
    bernoulli_exp_neg,
    noise_p,
    sample_discrete_laplace,
    sample_truncated_laplace,
    sample_user_noise,
    truncated_laplace_pmf,
    truncated_laplace_variance,
)
from cloaknet.randomness import SYSTEM_RANDOM, DeterministicRandom, RandomSource

P_VALUE_FLOOR = 1e-4
SIGMAS = 5.0


def lemma8_variance_bound(modulus: int, p: float) -> float:
    """Lemma 8 of the paper: Var[X] <= 2p(1+p) / ((1-p)^2 (1+p-2p^((N+1)/2)))."""
    return 2 * p * (1 + p) / ((1 - p) ** 2 * (1 + p - 2 * p ** ((modulus + 1) // 2)))


def mod_interval(value: int, modulus: int) -> int:
    """Map an integer into I = {-(N-1)/2, ..., (N-1)/2} modulo N."""
    half = (modulus - 1) // 2
    return (value + half) % modulus - half


def binomial_tolerance(prob: float, n: int) -> float:
    return SIGMAS * math.sqrt(prob * (1 - prob) / n) + 1e-12


# --------------------------------------------------------------------------------------------
# bernoulli_exp_neg
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), 2])
def test_bernoulli_exp_neg_frequency(gamma: Fraction) -> None:
    rng = DeterministicRandom(f"bexp-{gamma}")
    n = 20_000
    hits = sum(bernoulli_exp_neg(gamma, rng) for _ in range(n))
    expected = math.exp(-float(gamma))
    assert abs(hits / n - expected) <= binomial_tolerance(expected, n)


def test_bernoulli_exp_neg_zero_is_certain() -> None:
    rng = DeterministicRandom(0)
    assert all(bernoulli_exp_neg(Fraction(0), rng) for _ in range(1000))


def test_bernoulli_exp_neg_system_random() -> None:
    n = 5_000
    gamma = Fraction(1, 3)
    hits = sum(bernoulli_exp_neg(gamma, SYSTEM_RANDOM) for _ in range(n))
    expected = math.exp(-1 / 3)
    assert abs(hits / n - expected) <= binomial_tolerance(expected, n)
    # the default source is the system CSPRNG
    assert isinstance(bernoulli_exp_neg(gamma), bool)


def test_bernoulli_exp_neg_huge_gamma_is_cheap_and_rare() -> None:
    rng = DeterministicRandom("huge")
    assert not any(bernoulli_exp_neg(Fraction(10**30, 7), rng) for _ in range(200))


@pytest.mark.parametrize("gamma", [Fraction(-1, 3), -1, 0.5, True, "1", None])
def test_bernoulli_exp_neg_rejects_bad_gamma(gamma: object) -> None:
    with pytest.raises(ParameterError):
        bernoulli_exp_neg(gamma, DeterministicRandom(0))  # type: ignore[arg-type]


@given(num=st.integers(0, 10**6), den=st.integers(1, 10**6), seed=st.integers(0, 2**32))
@settings(max_examples=50)
def test_integer_form_is_the_same_coin(num: int, den: int, seed: int) -> None:
    # bernoulli_exp_neg_ratio(num, den) draws exactly what bernoulli_exp_neg(num/den) draws
    # when num/den is already in lowest terms
    frac = Fraction(num, den)
    first, second = DeterministicRandom(seed), DeterministicRandom(seed)
    a = [noise.bernoulli_exp_neg_ratio(frac.numerator, frac.denominator, first)
         for _ in range(5)]
    b = [bernoulli_exp_neg(frac, second) for _ in range(5)]
    assert a == b


@pytest.mark.parametrize(("num", "den"), [(-1, 2), (1, 0), (1, -3), (True, 2), (1.0, 2)])
def test_integer_form_rejects_bad_arguments(num: object, den: object) -> None:
    with pytest.raises(ParameterError):
        noise.bernoulli_exp_neg_ratio(num, den, DeterministicRandom(0))  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Discrete Laplace
# --------------------------------------------------------------------------------------------


def abs_laplace_probabilities(p: float, cutoff: int) -> list[float]:
    """P[|X| = k] for k = 0..cutoff, then P[|X| > cutoff], for P[x] ∝ p^|x| on Z."""
    c = (1 - p) / (1 + p)
    probs = [c] + [2 * c * p**k for k in range(1, cutoff + 1)]
    probs.append(2 * p ** (cutoff + 1) / (1 + p))
    return probs


@pytest.mark.parametrize("scale", [Fraction(3, 2), Fraction(7)])
def test_discrete_laplace_chi_square(scale: Fraction) -> None:
    rng = DeterministicRandom(f"laplace-{scale}")
    n = 30_000
    samples = [sample_discrete_laplace(scale, rng) for _ in range(n)]
    p = noise_p(scale)
    # last individual bin keeps an expected count >= 20; everything beyond is pooled
    cutoff = 0
    while n * 2 * (1 - p) / (1 + p) * p ** (cutoff + 1) >= 20:
        cutoff += 1
    probs = abs_laplace_probabilities(p, cutoff)
    total = math.fsum(probs)
    expected = [n * q / total for q in probs]
    counts = Counter(min(abs(x), cutoff + 1) for x in samples)
    observed = [counts.get(k, 0) for k in range(cutoff + 2)]
    assert sum(observed) == n
    assert chisquare(observed, expected).pvalue > P_VALUE_FLOOR

    # symmetry: given x != 0 the sign is a fair coin
    positive = sum(1 for x in samples if x > 0)
    nonzero = sum(1 for x in samples if x != 0)
    assert abs(positive / nonzero - 0.5) <= binomial_tolerance(0.5, nonzero)
    # and the signed histogram is symmetric: chi-square of x vs -x counts for |x| <= 3
    signed = Counter(samples)
    for k in range(1, 4):
        pair = signed[k] + signed[-k]
        assert abs(signed[k] / pair - 0.5) <= binomial_tolerance(0.5, pair)


def test_discrete_laplace_mean_and_variance_large_scale() -> None:
    """At scale 1e5 the sampler is fast and has the right spread (Var = 2p/(1-p)^2)."""
    scale = Fraction(10**5)
    rng = DeterministicRandom("big-scale")
    n = 4_000
    samples = [sample_discrete_laplace(scale, rng) for _ in range(n)]
    p = noise_p(scale)
    var = 2 * p / (1 - p) ** 2
    mean = sum(samples) / n
    assert abs(mean) <= SIGMAS * math.sqrt(var / n)
    # E|X| = 2p / (1 - p^2); Var|X| <= E X^2
    mean_abs = sum(abs(x) for x in samples) / n
    assert abs(mean_abs - 2 * p / (1 - p * p)) <= SIGMAS * math.sqrt(var / n)


def test_discrete_laplace_is_reproducible_and_integer() -> None:
    a = [sample_discrete_laplace(Fraction(5, 3), DeterministicRandom(9)) for _ in range(3)]
    b = [sample_discrete_laplace(Fraction(5, 3), DeterministicRandom(9)) for _ in range(3)]
    assert a == b
    assert all(type(x) is int for x in a)
    assert type(sample_discrete_laplace(Fraction(5, 3))) is int  # default SYSTEM_RANDOM


def test_discrete_laplace_tiny_scale_is_almost_always_zero() -> None:
    rng = DeterministicRandom("tiny")
    assert all(sample_discrete_laplace(Fraction(1, 1000), rng) == 0 for _ in range(500))


@pytest.mark.parametrize("scale", [Fraction(0), Fraction(-1, 2), -3, 0, 1.5, "2", None])
def test_discrete_laplace_rejects_bad_scale(scale: object) -> None:
    with pytest.raises(ParameterError):
        sample_discrete_laplace(scale, DeterministicRandom(0))  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        noise_p(scale)  # type: ignore[arg-type]


def test_noise_p() -> None:
    assert noise_p(Fraction(2)) == pytest.approx(math.exp(-0.5), rel=1e-15)
    assert noise_p(4) == pytest.approx(math.exp(-0.25), rel=1e-15)
    assert noise_p(Fraction(10**6)) == pytest.approx(1 - 1e-6, rel=1e-12)


# --------------------------------------------------------------------------------------------
# Truncated discrete Laplace sampling
# --------------------------------------------------------------------------------------------

TruncSampler = Callable[[int, Fraction, RandomSource], int]


def _public_sampler(modulus: int, scale: Fraction, rng: RandomSource) -> int:
    return sample_truncated_laplace(modulus, scale, rng)


def _via_laplace(modulus: int, scale: Fraction, rng: RandomSource) -> int:
    return noise._truncated_by_laplace((modulus - 1) // 2, scale.numerator, scale.denominator, rng)


def _via_uniform(modulus: int, scale: Fraction, rng: RandomSource) -> int:
    return noise._truncated_by_uniform((modulus - 1) // 2, scale.numerator, scale.denominator, rng)


def _truncated_chi_square(
    sampler: TruncSampler, modulus: int, scale: Fraction, seed: str, n: int
) -> None:
    rng = DeterministicRandom(seed)
    half = (modulus - 1) // 2
    counts = Counter(sampler(modulus, scale, rng) for _ in range(n))
    assert set(counts) <= set(range(-half, half + 1)), "sample left the support"
    p = noise_p(scale)
    support = range(-half, half + 1)
    probs = [truncated_laplace_pmf(j, modulus, p) for j in support]
    total = math.fsum(probs)
    expected = [n * q / total for q in probs]
    observed = [counts.get(j, 0) for j in support]
    assert min(expected) >= 5
    assert chisquare(observed, expected).pvalue > P_VALUE_FLOOR


@pytest.mark.parametrize(
    ("sampler", "scale"),
    [
        (_public_sampler, Fraction(4)),  # half-width 10 > scale: Laplace-rejection branch
        (_public_sampler, Fraction(40)),  # half-width 10 <= scale: uniform-proposal branch
        (_public_sampler, Fraction(10)),  # boundary: half-width == scale
        (_via_laplace, Fraction(40)),
        (_via_uniform, Fraction(4)),
    ],
)
def test_truncated_laplace_chi_square(sampler: TruncSampler, scale: Fraction) -> None:
    _truncated_chi_square(sampler, 21, scale, f"trunc-{sampler.__name__}-{scale}", 20_000)


def test_truncated_laplace_stays_in_support() -> None:
    rng = DeterministicRandom("support")
    for modulus, scale in [(3, Fraction(10**6)), (3, Fraction(1, 3)), (5, Fraction(7, 3))]:
        half = (modulus - 1) // 2
        values = {sample_truncated_laplace(modulus, scale, rng) for _ in range(2_000)}
        assert values == set(range(-half, half + 1))


def test_truncated_laplace_huge_modulus() -> None:
    rng = DeterministicRandom("huge-modulus")
    modulus = 2**80 + 1
    for scale in [Fraction(10**5), Fraction(2**79)]:  # both branches
        for _ in range(50):
            x = sample_truncated_laplace(modulus, scale, rng)
            assert type(x) is int
            assert abs(x) <= (modulus - 1) // 2


@pytest.mark.parametrize("modulus", [1, 2, 4, 0, -3, 2**64, 3.0, True])
def test_truncated_laplace_rejects_bad_modulus(modulus: object) -> None:
    with pytest.raises(ParameterError):
        sample_truncated_laplace(modulus, Fraction(2), DeterministicRandom(0))  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        truncated_laplace_pmf(0, modulus, 0.5)  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        truncated_laplace_variance(modulus, 0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("scale", [Fraction(0), Fraction(-2), 0.5])
def test_truncated_laplace_rejects_bad_scale(scale: object) -> None:
    with pytest.raises(ParameterError):
        sample_truncated_laplace(21, scale, DeterministicRandom(0))  # type: ignore[arg-type]


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 1.5, math.nan, math.inf])
def test_pmf_and_variance_reject_bad_p(p: float) -> None:
    with pytest.raises(ParameterError):
        truncated_laplace_pmf(0, 21, p)
    with pytest.raises(ParameterError):
        truncated_laplace_variance(21, p)


# --------------------------------------------------------------------------------------------
# PMF, Lemma 7 and Lemma 8
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("modulus", [3, 5, 21, 101, 1001])
@pytest.mark.parametrize("p", [0.01, 0.3, 0.7788, 0.99, 1 - 1e-6])
def test_pmf_sums_to_one_and_is_zero_outside(modulus: int, p: float) -> None:
    half = (modulus - 1) // 2
    masses = [truncated_laplace_pmf(j, modulus, p) for j in range(-half, half + 1)]
    assert math.fsum(masses) == pytest.approx(1.0, abs=1e-12)
    assert truncated_laplace_pmf(half + 1, modulus, p) == 0.0
    assert truncated_laplace_pmf(-half - 1, modulus, p) == 0.0
    assert truncated_laplace_pmf(10**30, modulus, p) == 0.0


def test_pmf_matches_definition() -> None:
    modulus, p = 21, 0.8
    denominator = 1 + p - 2 * p**11
    for j in range(-10, 11):
        direct = (1 - p) * p ** abs(j) / denominator
        assert truncated_laplace_pmf(j, modulus, p) == pytest.approx(direct, rel=1e-13)


def test_pmf_huge_modulus_and_p_near_one() -> None:
    modulus, p = 2**80 + 1, 1 - 1e-6
    # p^((N+1)/2) underflows to 0: D[0] = (1-p)/(1+p)
    assert truncated_laplace_pmf(0, modulus, p) == pytest.approx((1 - p) / (1 + p), rel=1e-12)
    assert truncated_laplace_pmf(2**79, modulus, p) == 0.0
    # small N, p near 1: nearly uniform, D[0] ~ 1/N
    assert truncated_laplace_pmf(0, 21, p) == pytest.approx(1 / 21, rel=1e-4)


LEMMA8_CASES = [
    (3, 0.5),
    (21, 0.7788007830714049),
    (41, 0.8187307530779818),
    (101, 0.3),
    (1001, 0.999),
    (5001, 1 - 1e-5),
    (2**20 + 1, 1 - 1e-5),
    (2**80 + 1, 1 - 1e-6),
]


@pytest.mark.parametrize(("modulus", "p"), LEMMA8_CASES)
def test_lemma8_mean_zero_and_variance_bound(modulus: int, p: float) -> None:
    variance = truncated_laplace_variance(modulus, p)
    bound = lemma8_variance_bound(modulus, p)
    assert 0 < variance <= bound * (1 + 1e-12)  # slack: float rounding when truncation is nil
    if modulus <= 5001:
        half = (modulus - 1) // 2
        masses = {j: truncated_laplace_pmf(j, modulus, p) for j in range(-half, half + 1)}
        assert all(masses[j] == masses[-j] for j in range(1, half + 1))
        mean = math.fsum(j * m for j, m in masses.items())
        assert abs(mean) <= 1e-12 * math.sqrt(variance)
        second = math.fsum(j * j * m for j, m in masses.items())
        assert variance == pytest.approx(second, rel=1e-11)


def _reference_variance(modulus: int, p: float) -> float:
    half = (modulus - 1) // 2
    log_p = math.log(p)
    weights = [math.exp(j * log_p) for j in range(1, half + 1)]
    second = math.fsum(j * j * w for j, w in zip(range(1, half + 1), weights, strict=True))
    return 2 * second / (1 + 2 * math.fsum(weights))


@pytest.mark.parametrize(
    ("modulus", "p"),
    [
        (4097, 0.99),  # direct-sum limit boundary
        (4099, 0.999),  # closed form, decay ~ 2
        (20001, 0.9999),  # Euler-Maclaurin, decay ~ 1
        (20001, 1 - 1e-6),  # Euler-Maclaurin, decay ~ 0.01
        (200_001, 1 - 1e-5),  # closed form just above decay = 1
        (199_999, 1 - 1e-5),  # Euler-Maclaurin just below decay = 1
    ],
)
def test_variance_matches_direct_sum_in_every_regime(modulus: int, p: float) -> None:
    assert truncated_laplace_variance(modulus, p) == pytest.approx(
        _reference_variance(modulus, p), rel=1e-12
    )


def test_variance_limits() -> None:
    # huge N: the untruncated value 2p/(1-p)^2 (== Lemma 8 bound when p^((N+1)/2) = 0)
    p = 1 - 1e-5
    assert truncated_laplace_variance(2**80 + 1, p) == pytest.approx(
        2 * p / (1 - p) ** 2, rel=1e-12
    )
    # p -> 1 with huge N but tiny decay: discrete uniform on {-M..M}, Var = M(M+1)/3
    half = 2**40
    assert truncated_laplace_variance(2 * half + 1, 1 - 2**-52) == pytest.approx(
        half * (half + 1) / 3, rel=1e-3
    )


def test_lemma8_empirical_variance() -> None:
    modulus, scale = 41, Fraction(5)
    p = noise_p(scale)
    half = (modulus - 1) // 2
    variance = truncated_laplace_variance(modulus, p)
    fourth = 2 * math.fsum(j**4 * truncated_laplace_pmf(j, modulus, p) for j in range(1, half + 1))
    rng = DeterministicRandom("lemma8-empirical")
    n = 20_000
    samples = [sample_truncated_laplace(modulus, scale, rng) for _ in range(n)]
    # the mean is known to be 0, so mean(x^2) is unbiased with Var = (mu4 - sigma^4) / n
    empirical = math.fsum(x * x for x in samples) / n
    assert abs(empirical - variance) <= SIGMAS * math.sqrt((fourth - variance**2) / n)
    assert abs(sum(samples) / n) <= SIGMAS * math.sqrt(variance / n)
    assert empirical <= lemma8_variance_bound(modulus, p) + SIGMAS * math.sqrt(
        (fourth - variance**2) / n
    )


@settings(max_examples=300, deadline=None)
@given(
    half=st.integers(min_value=1, max_value=30),
    p=st.floats(min_value=0.01, max_value=0.99),
    data=st.data(),
)
def test_lemma7_log_lipschitz(half: int, p: float, data: st.DataObject) -> None:
    modulus = 2 * half + 1
    k = data.draw(st.integers(min_value=0, max_value=modulus - 1), label="k")
    t = data.draw(st.integers(min_value=-half, max_value=half), label="t")
    numerator = truncated_laplace_pmf(mod_interval(k + t, modulus), modulus, p)
    denominator = truncated_laplace_pmf(mod_interval(k, modulus), modulus, p)
    ratio = numerator / denominator
    rel = 1e-9
    assert p ** abs(t) * (1 - rel) <= ratio <= p ** (-abs(t)) * (1 + rel)


# --------------------------------------------------------------------------------------------
# Single-user noise
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("q", [Fraction(1, 3), Fraction(1)])
def test_user_noise_zero_frequency(q: Fraction) -> None:
    modulus, scale = 21, Fraction(4)
    rng = DeterministicRandom(f"user-{q}")
    n = 20_000
    samples = [sample_user_noise(modulus, scale, q, rng) for _ in range(n)]
    assert all(abs(x) <= 10 for x in samples)
    d0 = truncated_laplace_pmf(0, modulus, noise_p(scale))
    p_zero = float(1 - q) + float(q) * d0
    zeros = samples.count(0)
    assert abs(zeros / n - p_zero) <= binomial_tolerance(p_zero, n)


def test_user_noise_small_q_is_mostly_zero() -> None:
    rng = DeterministicRandom("small-q")
    n = 10_000
    q = Fraction(1, 100)
    nonzero = sum(1 for _ in range(n) if sample_user_noise(1001, Fraction(3), q, rng) != 0)
    # P[nonzero] = q (1 - D[0]) with D[0] = (1-p)/(1+p-2p^501) ~ 0.165
    p_nonzero = float(q) * (1 - truncated_laplace_pmf(0, 1001, noise_p(Fraction(3))))
    assert abs(nonzero / n - p_nonzero) <= binomial_tolerance(p_nonzero, n)


@pytest.mark.parametrize("q", [Fraction(0), Fraction(-1, 2), Fraction(3, 2), 2, 0, 0.5, None])
def test_user_noise_rejects_bad_q(q: object) -> None:
    with pytest.raises(ParameterError):
        sample_user_noise(21, Fraction(4), q, DeterministicRandom(0))  # type: ignore[arg-type]


def test_user_noise_validates_everything_up_front() -> None:
    # even when the q-coin would say "no noise", bad modulus / scale are reported
    with pytest.raises(ParameterError):
        sample_user_noise(20, Fraction(4), Fraction(1, 10**9), DeterministicRandom(0))
    with pytest.raises(ParameterError):
        sample_user_noise(21, Fraction(0), Fraction(1, 10**9), DeterministicRandom(0))
    assert type(sample_user_noise(21, Fraction(4), Fraction(1, 2))) is int  # SYSTEM_RANDOM
