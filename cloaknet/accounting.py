"""Privacy accountant: one function per bound of Ghazi, Pagh and Velingker (arXiv 1906.08320),
plus the Balle–Bell–Gascón–Nissim message bound (arXiv 1909.11225) used by the planner and
by :mod:`cloaknet.protocols.bbgn`.

Lemma numbers follow the full version of arXiv 1906.08320; each docstring also names the
lemma's LaTeX label. ``docs/accounting.md`` lists the lemmas and explains how the planner
uses them.

Contract: every function checks its preconditions and raises
:class:`~cloaknet.errors.ParameterError` naming the offending parameter. Quantities that
contain ``2^(2m)``, ``N^2`` or ``β^(n-1)`` are evaluated in log space, so the functions work
for m in the thousands, N far above 2^64 and n in the millions. Errors are in units of the
input (each x_i in [0, 1]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from cloaknet import certified
from cloaknet.errors import ParameterError
from cloaknet.validation import check_int

__all__ = [
    "BBGN_UNVERIFIED",
    "MAX_COLLUDER_FRACTION",
    "PrivacyBound",
    "bbgn_achieved_sigma",
    "bbgn_messages",
    "expected_rmse",
    "log_smoothness_failure",
    "noise_std",
    "noise_variance_bound",
    "rounding_error_expected",
    "rounding_error_worst",
    "single_user_bound",
    "smoothness_failure",
    "sum_preserving_bound",
    "swap_epsilon",
]

#: Lemma 13 holds for ``|C| <= 0.9 n`` colluders.
MAX_COLLUDER_FRACTION = 0.9

#: What of the BBGN analysis could not be checked against the papers' text (shown by
#: ``cloaknet plan`` and in the protocol's parameters; ``docs/accounting.md``).
BBGN_UNVERIFIED = (
    "not checked against the papers' text: the constants and side conditions of the BBGN "
    "message bound (arXiv 1909.11225; only its abstract's example, n = 10^4, 32-bit inputs, "
    "2^-40, 12 messages, is reproduced, reading q >= n*2^32) and the reduction "
    "delta0 + (1 + e^epsilon)*2^-sigma (arXiv 1906.09116; re-derived in docs/accounting.md)"
)

_LN2 = math.log(2.0)
_LOG2_E = math.log2(math.e)


@dataclass(frozen=True)
class PrivacyBound:
    """An (ε, δ) guarantee and where it comes from.

    ``log_delta`` is ``ln δ`` (``-inf`` for δ = 0); it stays finite when δ underflows.
    ``terms`` breaks ε and δ into the named summands of the lemma (floats, for reading).
    ``epsilon_exact`` is ε as an exact rational, or where ε has transcendental terms a
    certified upper bound within 10^−48 of it (:mod:`cloaknet.certified`); ``epsilon`` is
    then the smallest float not below it, so ``epsilon <= target`` for a float target holds
    exactly when ``epsilon_exact <= target``. ``None`` when not computed.
    """

    epsilon: float
    delta: float
    log_delta: float
    lemma: str
    terms: dict[str, float]
    epsilon_exact: Fraction | None = None


def _check_open_unit(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ParameterError(f"{name} must be a finite number, got {value!r}")
    if not 0.0 < value < 1.0:
        raise ParameterError(f"{name} must lie in (0, 1), got {value}")
    return float(value)


def _check_modulus(modulus: int) -> int:
    check_int("modulus N", modulus, 3)
    if modulus % 2 == 0:
        raise ParameterError(f"modulus N must be odd, got {modulus}")
    return modulus


def _check_messages_gamma(messages: int, gamma: float) -> None:
    """Preconditions shared by Lemmas 1, 5, 6, 11–13: m >= 4 and 6√m / 2^(2m) < γ < 1."""
    check_int("messages per user m", messages, 4)
    _check_open_unit("gamma", gamma)
    log_threshold = math.log(6.0) + 0.5 * math.log(messages) - 2 * messages * _LN2
    if math.log(gamma) <= log_threshold:
        raise ParameterError(
            f"gamma must exceed 6*sqrt(m)/2^(2m) = {math.exp(log_threshold):.3g} "
            f"for m = {messages} (Lemma 1), got {gamma}"
        )


def _logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    hi, lo = (a, b) if a >= b else (b, a)
    return hi + math.log1p(math.exp(lo - hi))


def log_smoothness_failure(messages: int, modulus: int, gamma: float) -> float:
    """``ln η`` where η bounds the probability that two users' 2m shares are not γ-smooth or
    not distinct (Lemma 1, ``lemma:gamma_smooth``)::

        η = 2 m² / N + 18 √m N² / (γ² 2^(2m))

    Requires m >= 4, odd N >= 3 and 6√m/2^(2m) < γ < 1. The value may exceed ``ln 1`` (the
    bound is then vacuous, not an error).
    """
    _check_modulus(modulus)
    _check_messages_gamma(messages, gamma)
    ln_n = math.log(modulus)
    collisions = math.log(2.0 * messages * messages) - ln_n
    non_smooth = (
        math.log(18.0)
        + 0.5 * math.log(messages)
        + 2.0 * ln_n
        - 2.0 * math.log(gamma)
        - 2.0 * messages * _LN2
    )
    return _logaddexp(collisions, non_smooth)


def smoothness_failure(messages: int, modulus: int, gamma: float) -> float:
    """η of Lemma 1 (``lemma:gamma_smooth``) as a float; see :func:`log_smoothness_failure`."""
    return math.exp(log_smoothness_failure(messages, modulus, gamma))


def swap_epsilon(gamma: float) -> float:
    """``ln β`` with ``β = (1+γ)/(1−γ)``: the ε of one sum-preserving swap of a γ-smooth view
    (Lemma 3, ``lemma:pair_pointwise_DP``; Lemma 5, ``lemma:sumpreservingswap_dp``).
    Requires 0 < γ < 1."""
    _check_open_unit("gamma", gamma)
    return math.log1p(gamma) - math.log1p(-gamma)


def sum_preserving_bound(
    messages: int, modulus: int, gamma: float, swaps: int, *, lemma: str = "Lemma 6"
) -> PrivacyBound:
    """(ε, δ) after a series of ``t = swaps`` sum-preserving swaps (Lemma 6,
    ``lemma:sum_swap_series``; t = 1 is Lemma 5)::

        ε = t · ln β,   δ = η · (β^t − 1) / (β − 1),   β = (1+γ)/(1−γ)

    with η of Lemma 1. For differential privacy under sum-preserving changes of n users use
    t = n − 1 (proof of Theorem 2); Lemma 12 (``lemma:resilient_privacy_sum_preserving``)
    states the same bound, with t = n − 1, when a set C of users colludes.
    This is the full expression of Lemma 6, not the theorem proof's shorthand η ≤ δ.
    """
    check_int("swaps t", swaps, 0)
    log_eta = log_smoothness_failure(messages, modulus, gamma)
    ln_beta = swap_epsilon(gamma)
    if swaps == 0:
        return PrivacyBound(
            0.0, 0.0, -math.inf, lemma, {"swap": 0.0, "eta": 0.0}, epsilon_exact=Fraction(0)
        )
    exact = swaps * certified.swap_epsilon_upper(gamma)
    epsilon = certified.float_up(exact)
    # (β^t − 1)/(β − 1) = β^t (1 − β^(−t)) / (β − 1), and β − 1 = 2γ/(1 − γ).
    log_series = (
        epsilon
        + math.log(-math.expm1(-epsilon))
        - (math.log(2.0 * gamma) - math.log1p(-gamma))
    )
    log_delta = log_eta + log_series
    return PrivacyBound(
        epsilon=epsilon,
        delta=_exp_or_inf(log_delta),
        log_delta=log_delta,
        lemma=lemma,
        terms={"epsilon_per_swap": ln_beta, "eta": math.exp(log_eta), "log_series": log_series},
        epsilon_exact=exact,
    )


def _exp_or_inf(x: float) -> float:
    return math.inf if x > 700 else math.exp(x)


def single_user_bound(
    messages: int,
    modulus: int,
    gamma: float,
    precision: int,
    noise_p: float,
    noise_q: float | Fraction,
    users: int,
    colluders: int = 0,
    *,
    noise_scale: Fraction | None = None,
) -> PrivacyBound:
    """(ε, δ) under single-user changes with the pre-randomizer (Lemma 11,
    ``lemma:subset_DP_single_user_changes``; with colluders Lemma 13,
    ``lemma:resilient_privacy_single_user``)::

        ε = ln((1+γ)/(1−γ)) + k·ln(1/p) − ln(1 − e^(−q·h))
        δ = η + e^(−q·h),     h = n − |C| honest users

    Each user adds truncated discrete Laplace noise ``D_{N,p}`` with probability q.
    With ``noise_scale`` t (p = e^(−1/t), as the planner's rational noise), the term
    k·ln(1/p) = k/t is exact and ``noise_p`` is only reported; without it the term is
    bounded from the float p. ``epsilon_exact`` is a certified upper bound of the sum
    (exact k/t, logarithms enclosed; :mod:`cloaknet.certified`), ``epsilon`` the float
    rounded up from it. Requires n >= 1, 0 <= |C| <= 0.9 n (Lemma 13's condition), k >= 1,
    p in (0, 1), q in (0, 1], t > 0, and the preconditions of Lemma 1.
    """
    check_int("users n", users, 1)
    check_int("colluders |C|", colluders, 0)
    check_int("precision k", precision, 1)
    if colluders > MAX_COLLUDER_FRACTION * users:
        raise ParameterError(
            f"colluders |C| = {colluders} exceeds 0.9 n = {MAX_COLLUDER_FRACTION * users:g}; "
            "Lemma 13 does not apply"
        )
    _check_open_unit("noise p", noise_p)
    if isinstance(noise_q, bool) or not (
        isinstance(noise_q, (int, float, Fraction)) and 0 < noise_q <= 1
    ):
        raise ParameterError(f"noise q must lie in (0, 1], got {noise_q!r}")
    if noise_scale is not None and not (isinstance(noise_scale, Fraction) and noise_scale > 0):
        raise ParameterError(f"noise scale t must be a positive Fraction, got {noise_scale!r}")
    honest = users - colluders
    log_eta = log_smoothness_failure(messages, modulus, gamma)
    eps_swap = swap_epsilon(gamma)
    q = float(noise_q)
    if noise_scale is not None:
        noise_exact = precision / noise_scale
        eps_noise = float(noise_exact)
    else:
        noise_exact = -precision * certified.ln_lower(Fraction(noise_p))
        eps_noise = precision * -math.log(noise_p)
    log_tail = -q * honest  # ln e^(−q h)
    eps_tail = -math.log(-math.expm1(log_tail))  # −ln(1 − e^(−q h))
    exact = (
        certified.swap_epsilon_upper(gamma)
        + noise_exact
        + certified.tail_epsilon_upper(Fraction(noise_q), honest)
    )
    log_delta = _logaddexp(log_eta, log_tail)
    lemma = "Lemma 13" if colluders else "Lemma 11"
    return PrivacyBound(
        epsilon=certified.float_up(exact),
        epsilon_exact=exact,
        delta=_exp_or_inf(log_delta),
        log_delta=log_delta,
        lemma=lemma,
        terms={
            "epsilon_swap": eps_swap,
            "epsilon_noise": eps_noise,
            "epsilon_tail": eps_tail,
            "eta": math.exp(log_eta),
            "delta_tail": math.exp(log_tail),
        },
    )


def noise_variance_bound(modulus: int, noise_p: float) -> float:
    """Upper bound on Var[w] for w ~ D_{N,p}, in squared integer units (Lemma 8,
    ``lemma:distribution_mean_variance``; E[w] = 0)::

        Var[w] <= 2p(1+p) / ((1−p)² (1 + p − 2 p^((N+1)/2)))
    """
    _check_modulus(modulus)
    _check_open_unit("noise p", noise_p)
    half = (modulus + 1) // 2
    tail = 2.0 * math.exp(half * math.log(noise_p)) if half * -math.log(noise_p) < 700 else 0.0
    one_minus_p = -math.expm1(math.log(noise_p))
    return 2.0 * noise_p * (1.0 + noise_p) / (one_minus_p**2 * (1.0 + noise_p - tail))


def rounding_error_worst(users: int, precision: int) -> float:
    """Worst-case error of Σ floor(x_i k)/k against Σ x_i: n/k (Algorithm 2; the estimate is
    never above the true sum in the noiseless case)."""
    check_int("users n", users, 1)
    check_int("precision k", precision, 1)
    return users / precision


def rounding_error_expected(users: int, precision: int) -> float:
    """Expected rounding error n/(2k), assuming the fractional parts of x_i·k are uniform
    (floor rounding is biased downwards by 1/(2k) per user on average)."""
    return rounding_error_worst(users, precision) / 2.0


def noise_std(users: int, precision: int, modulus: int, noise_p: float, noise_q: float) -> float:
    """Standard deviation of the pre-randomizer's total noise in units of the input
    (divide integer noise by k): sqrt(n · q · Var_bound) / k, with Var_bound of Lemma 8.
    All n users add noise (colluders too), each with probability q."""
    check_int("users n", users, 1)
    check_int("precision k", precision, 1)
    if not 0.0 < noise_q <= 1.0:
        raise ParameterError(f"noise q must lie in (0, 1], got {noise_q!r}")
    return math.sqrt(users * noise_q * noise_variance_bound(modulus, noise_p)) / precision


def expected_rmse(users: int, precision: int, noise_sd: float = 0.0) -> float:
    """Predicted root-mean-square error of the estimate, in units of the input::

        sqrt( (n/(2k))² + n/(12 k²) + σ_noise² )

    The first two terms are the rounding error's bias and variance when the fractional parts
    of x_i·k are uniform; σ_noise is :func:`noise_std` (0 for sum-preserving mode). The
    analyzer's clamping to [0, n] can only reduce the error, so this is an upper estimate.
    """
    bias = rounding_error_expected(users, precision)
    rounding_var = users / (12.0 * precision * precision)
    return math.sqrt(bias * bias + rounding_var + noise_sd * noise_sd)


# --------------------------------------------------------------------------- BBGN


def bbgn_messages(n: int, sigma: float, modulus: int) -> int:
    """Messages per user for statistical distance 2^−σ over Z_q among n honest users:
    max(3, ⌈(2σ + log2 q)/(log2 n − log2 e) + 1⌉) (Balle, Bell, Gascón, Nissim,
    arXiv 1909.11225; ``docs/protocols.md`` says what was and was not verified).

    :raises ParameterError: n < 3 (log2 n must exceed log2 e), σ not a finite number >= 0,
        or q < 2.
    """
    users = check_int("n", n, 3)
    q = check_int("modulus", modulus, 2)
    if isinstance(sigma, bool) or not isinstance(sigma, int | float) or not (
        math.isfinite(sigma) and sigma >= 0
    ):
        raise ParameterError(f"sigma must be a finite number >= 0, got {sigma!r}")
    bound = (2.0 * float(sigma) + math.log2(q)) / (math.log2(users) - _LOG2_E) + 1.0
    return max(3, math.ceil(bound))


def bbgn_achieved_sigma(messages: int, honest: int, modulus: int) -> float:
    """The σ that ``messages`` achieve in the bound of :func:`bbgn_messages` (its formula
    solved for σ): views of inputs with equal sums mod q are within statistical distance
    2^−σ. May be negative (no guarantee) for too few messages.

    :raises ParameterError: messages < 1, honest < 3 or modulus < 2.
    """
    m = check_int("messages", messages, 1)
    h = check_int("honest", honest, 3)
    q = check_int("modulus", modulus, 2)
    return ((m - 1) * (math.log2(h) - _LOG2_E) - math.log2(q)) / 2
