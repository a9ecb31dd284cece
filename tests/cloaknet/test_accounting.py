"""The bound functions against the lemmas' formulas, evaluated naively where that is possible."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cloaknet import accounting as acc
from cloaknet.errors import ParameterError
from cloaknet.noise import truncated_laplace_variance


def naive_eta(m: int, n: int, gamma: float) -> float:
    return float(2 * m * m / n + 18 * math.sqrt(m) * n * n / (gamma * gamma * 2 ** (2 * m)))


@given(
    m=st.integers(4, 60),
    modulus=st.integers(1, 10**9).map(lambda v: 2 * v + 1),
    gamma=st.floats(0.05, 0.95),
)
def test_lemma1_eta_matches_formula(m: int, modulus: int, gamma: float) -> None:
    assert acc.smoothness_failure(m, modulus, gamma) == pytest.approx(
        naive_eta(m, modulus, gamma), rel=1e-9
    )


def test_lemma1_log_space_survives_huge_arguments() -> None:
    # 2^(2m) and N^2 overflow floats here; ln η must still be finite and exact in log space.
    m, modulus, gamma = 3000, 2**400 + 1, 1e-6
    smooth = (
        math.log(18) + 0.5 * math.log(m) + 800 * math.log(2) - 2 * math.log(gamma)
        - 6000 * math.log(2)
    )
    collide = math.log(2 * m * m) - 400 * math.log(2)
    expected = max(smooth, collide) + math.log1p(math.exp(-abs(smooth - collide)))
    assert acc.log_smoothness_failure(m, modulus, gamma) == pytest.approx(expected, rel=1e-12)


def test_lemma5_is_lemma6_with_one_swap() -> None:
    m, modulus, gamma = 40, 10**12 + 1, 0.01
    one = acc.sum_preserving_bound(m, modulus, gamma, 1)
    assert one.epsilon == pytest.approx(math.log((1 + gamma) / (1 - gamma)))
    assert one.delta == pytest.approx(acc.smoothness_failure(m, modulus, gamma), rel=1e-12)


@pytest.mark.parametrize("swaps", [2, 7, 100, 999])
def test_lemma6_full_geometric_series(swaps: int) -> None:
    m, modulus, gamma = 50, 10**13 + 1, 1e-3
    beta = (1 + gamma) / (1 - gamma)
    eta = acc.smoothness_failure(m, modulus, gamma)
    bound = acc.sum_preserving_bound(m, modulus, gamma, swaps)
    assert bound.epsilon == pytest.approx(swaps * math.log(beta), rel=1e-12)
    assert bound.delta == pytest.approx(eta * sum(beta**i for i in range(swaps)), rel=1e-9)
    # the full expression is larger than the proof's shorthand "η <= δ"
    assert bound.delta > eta


def test_lemma6_large_n_in_log_space() -> None:
    bound = acc.sum_preserving_bound(200, 2**120 + 1, 1e-9, 10**9 - 1)
    assert math.isfinite(bound.log_delta)
    assert bound.epsilon == pytest.approx((10**9 - 1) * 2e-9, rel=1e-6)


def test_lemma11_formula() -> None:
    m, modulus, gamma, k, p, q, n = 50, 10**11 + 1, 0.2, 10**5, 0.99999, 0.002, 10**4
    b = acc.single_user_bound(m, modulus, gamma, k, p, q, n)
    eps = math.log((1 + gamma) / (1 - gamma)) + k * math.log(1 / p) - math.log(1 - math.exp(-q * n))
    assert b.epsilon == pytest.approx(eps, rel=1e-9)
    assert b.delta == pytest.approx(naive_eta(m, modulus, gamma) + math.exp(-q * n), rel=1e-9)
    assert b.lemma == "Lemma 11"


def test_lemma13_uses_honest_users_only() -> None:
    args = (50, 10**11 + 1, 0.2, 10**5, 0.99999, 0.002, 10**4)
    alone = acc.single_user_bound(*args)
    with_c = acc.single_user_bound(*args, colluders=9000)
    assert with_c.lemma == "Lemma 13"
    assert with_c.terms["delta_tail"] == pytest.approx(math.exp(-0.002 * 1000))
    assert with_c.epsilon > alone.epsilon and with_c.delta > alone.delta


def test_lemma13_refuses_more_than_ninety_percent_colluders() -> None:
    with pytest.raises(ParameterError, match=r"0\.9"):
        acc.single_user_bound(50, 10**11 + 1, 0.2, 10**5, 0.99999, 0.002, 100, colluders=91)
    acc.single_user_bound(50, 10**11 + 1, 0.2, 10**5, 0.99999, 0.002, 100, colluders=90)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: acc.log_smoothness_failure(3, 101, 0.5), "m"),
        (lambda: acc.log_smoothness_failure(10, 100, 0.5), "odd"),
        (lambda: acc.log_smoothness_failure(4, 101, 0.01), r"6\*sqrt"),
        (lambda: acc.log_smoothness_failure(10, 101, 1.0), "gamma"),
        (lambda: acc.log_smoothness_failure(10, 101, 0.0), "gamma"),
        (lambda: acc.sum_preserving_bound(10, 101, 0.5, -1), "swaps"),
        (lambda: acc.single_user_bound(10, 101, 0.5, 10, 1.0, 0.5, 10), "noise p"),
        (lambda: acc.single_user_bound(10, 101, 0.5, 10, 0.5, 0.0, 10), "noise q"),
        (lambda: acc.single_user_bound(10, 101, 0.5, 0, 0.5, 0.5, 10), "precision"),
    ],
)
def test_preconditions_raise(call: object, match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        call()  # type: ignore[operator]


@settings(max_examples=50)
@given(half=st.integers(1, 10**6), p=st.floats(0.01, 0.999999))
def test_lemma8_bound_dominates_exact_variance(half: int, p: float) -> None:
    modulus = 2 * half + 1
    bound = acc.noise_variance_bound(modulus, p)
    assert truncated_laplace_variance(modulus, p) <= bound * (1 + 1e-9)


def test_error_predictions() -> None:
    assert acc.rounding_error_worst(100, 1000) == pytest.approx(0.1)
    assert acc.rounding_error_expected(100, 1000) == pytest.approx(0.05)
    assert acc.expected_rmse(100, 1000) == pytest.approx(math.sqrt(0.05**2 + 100 / 12e6))
    sd = acc.noise_std(100, 1000, 10**9 + 1, 0.999, 0.5)
    assert sd == pytest.approx(math.sqrt(50 * acc.noise_variance_bound(10**9 + 1, 0.999)) / 1000)


@pytest.mark.parametrize(("n", "sigma", "modulus"),
                         [(3, 0.0, 2), (10**4, 40.0, 10**4 * 2**32), (500, 21.5, 10**7 + 1)])
def test_bbgn_achieved_sigma_inverts_the_message_bound(n: int, sigma: float, modulus: int) -> None:
    m = acc.bbgn_messages(n, sigma, modulus)
    assert acc.bbgn_achieved_sigma(m, n, modulus) >= sigma or m == 3
    if m > 3:  # one message fewer would not reach sigma
        assert acc.bbgn_achieved_sigma(m - 1, n, modulus) < sigma


def test_bbgn_worked_example_and_preconditions() -> None:
    # arXiv 1909.11225's abstract: 32-bit numbers, n = 10^4, 12 messages, 2^-40
    assert acc.bbgn_messages(10**4, 40, 10**4 * 2**32) == 12
    with pytest.raises(ParameterError, match="n"):
        acc.bbgn_messages(2, 1.0, 7)
    with pytest.raises(ParameterError, match="sigma"):
        acc.bbgn_messages(10, float("nan"), 7)
    with pytest.raises(ParameterError, match="honest"):
        acc.bbgn_achieved_sigma(5, 2, 7)


# --------------------------------------------------------------------------- exact ε


def test_single_user_epsilon_is_exact_with_the_rational_noise_scale() -> None:
    from fractions import Fraction

    from cloaknet import certified
    from cloaknet.planner import plan

    # n = 10^6, ε = 0.1: p = e^(−1/t) is within 10^−8 of 1, and the binary64 evaluation
    # k·ln(1/p) from the float p lands above the target (the audit's 10^−8 error)
    made = plan(10**6, 0.1, 1e-6)
    prm = made.params
    noise = prm.noise
    assert noise is not None
    from_float_p = (
        acc.swap_epsilon(made.gamma)
        + prm.precision * -math.log(noise.p)
        - math.log(-math.expm1(-float(noise.q) * 10**6))
    )
    assert from_float_p > 0.1
    bound = made.guarantee
    assert bound.epsilon_exact is not None and bound.epsilon_exact <= Fraction(0.1)
    assert made.meets_target and made.epsilon <= 0.1
    # the noise term is exactly k/t, and the logarithms are enclosed from above
    rest = bound.epsilon_exact - Fraction(prm.precision) / noise.scale
    assert rest == certified.swap_epsilon_upper(made.gamma) + certified.tail_epsilon_upper(
        noise.q, 10**6)
    assert bound.epsilon == certified.float_up(bound.epsilon_exact)
    assert made.to_json()["epsilon_exact"].startswith("0.0999999999")


def test_certified_epsilon_encloses_the_float_value() -> None:
    from fractions import Fraction

    m, modulus, gamma, k, q, n = 50, 10**11 + 1, 0.2, 10**5, Fraction(1, 500), 10**4
    scale = Fraction(10**5 + 7, 1)
    b = acc.single_user_bound(m, modulus, gamma, k, math.exp(-1 / float(scale)), q, n,
                              noise_scale=scale)
    eps = math.log((1 + gamma) / (1 - gamma)) + k / float(scale) - math.log(
        1 - math.exp(-float(q) * n))
    assert b.epsilon_exact is not None
    assert float(b.epsilon_exact) == pytest.approx(eps, rel=1e-14)
    assert b.epsilon >= b.epsilon_exact
    swaps = acc.sum_preserving_bound(m, modulus, 1e-3, 999)
    assert swaps.epsilon_exact is not None and swaps.epsilon >= swaps.epsilon_exact
    assert float(swaps.epsilon_exact) == pytest.approx(999 * acc.swap_epsilon(1e-3), rel=1e-14)
    with pytest.raises(ParameterError, match="scale"):
        acc.single_user_bound(m, modulus, gamma, k, 0.5, q, n, noise_scale=Fraction(0))
