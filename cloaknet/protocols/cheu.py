"""Unary randomized-response summation in the style of Cheu, Smith, Ullman, Zeber, Zhilyaev.

Reference: arXiv 1808.01394 (EUROCRYPT 2019). Each user rounds x randomly to x̄ ∈ {0..k}
(k = ⌈ε√n⌉), writes it in unary as r >= k bits and sends every bit through binary randomized
response (replaced by a uniform bit with probability p); the analyzer counts the ones C and
returns (C − p·n·r/2)/((1 − p)·k), unbiased. The paper's constants were not available, so p
is calibrated here by an exact numerical privacy analysis (:func:`binomial_shift_delta`,
:func:`min_blanket_bits`, :func:`cheu_replacement_probability`); the derivation, which is
ours, and the error formula are in ``docs/protocols.md``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.protocols.base import (
    SummationProtocol,
    check_epsilon_delta,
    check_int,
    check_message_count,
    flat_messages,
    randomized_round,
    uniform_bits,
)
from cloaknet.protocols.fold import MessageFold, SumFold
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource

__all__ = [
    "CheuProtocol",
    "binomial_shift_delta",
    "cheu_replacement_probability",
    "min_blanket_bits",
]

_P_BITS: Final[int] = 32
#: Share of δ spent on the event "too few replaced slots".
_TAIL_SHARE: Final[float] = 0.1
#: Default cap on the replacement probability when r is chosen automatically.
_DEFAULT_P_MAX: Final[float] = 0.5
#: Width of the window around M/2, in units of √M: the mass outside is <= 2·exp(−2·W²) (Hoeffding).
_WINDOW_SIGMAS: Final[float] = 12.0
_CHUNK_SLOTS: Final[int] = 1 << 22


def _log_pmf_window(trials: int, lo: int, hi: int) -> NDArray[np.float64]:
    """ln P[Bin(trials, 1/2) = z] for z = lo..hi (0 <= lo <= hi <= trials)."""
    start = (
        math.lgamma(trials + 1) - math.lgamma(lo + 1) - math.lgamma(trials - lo + 1)
        - trials * math.log(2.0)
    )
    z = np.arange(lo, hi, dtype=np.float64)
    steps = np.log(trials - z) - np.log(z + 1.0)
    out: NDArray[np.float64] = start + np.concatenate(([0.0], np.cumsum(steps)))
    return out


def binomial_shift_delta(trials: int, shift: int, epsilon: float) -> float:
    """δ(ε) of the shift mechanism Z + s, Z ~ Bin(trials, 1/2), |s| = ``shift``:

        δ = Σ_z max(0, P[Z = z] − e^ε·P[Z = z − s])

    (the hockey-stick divergence; the same for +s and −s by the symmetry of Bin(M, 1/2)).
    Computed from the exact pmf on the window M/2 ± 12√M (+ s); the mass outside is added as
    the Hoeffding bound 2·exp(−2·12²), so the result is an upper bound. ``trials = 0`` gives 1.
    """
    m = check_int("trials", trials, 0)
    s = check_int("shift", shift, 0)
    if s == 0:
        return 0.0
    if m == 0:
        return 1.0
    half_width = math.ceil(_WINDOW_SIGMAS * math.sqrt(m)) + s
    lo = max(0, m // 2 - half_width)
    hi = min(m, m // 2 + half_width)
    log_p = _log_pmf_window(m, lo, hi)
    outside = 2.0 * math.exp(-2.0 * _WINDOW_SIGMAS**2)
    # z in [lo, lo + s): P[Z = z − s] lies outside the window: count P[Z = z] in full.
    head = float(np.sum(np.exp(log_p[:s])))
    loss = log_p[s:] - log_p[:-s] if s < log_p.shape[0] else np.zeros(0)
    body = log_p[s:]
    positive = loss > epsilon
    terms = np.exp(body[positive]) * -np.expm1(epsilon - loss[positive])
    return min(1.0, head + float(np.sum(terms)) + outside)


def min_blanket_bits(shift: int, epsilon: float, delta: float) -> int:
    """Least M with :func:`binomial_shift_delta` (M, shift, ε) <= δ (bisection; δ is
    non-increasing in M)."""
    s = check_int("shift", shift, 1)
    low, high = 0, max(16, math.ceil(8.0 * (s / epsilon) ** 2 * math.log(2.0 / delta)))
    while binomial_shift_delta(high, s, epsilon) > delta:
        low, high = high, 2 * high
        if high > 1 << 62:
            raise InfeasiblePlanError("no binomial blanket is large enough")
    while high - low > 1:
        mid = (low + high) // 2
        if binomial_shift_delta(mid, s, epsilon) <= delta:
            high = mid
        else:
            low = mid
    return high


def _kl(a: float, p: float) -> float:
    """KL(Ber(a) ‖ Ber(p)) for 0 < a < p < 1."""
    return a * math.log(a / p) + (1.0 - a) * math.log((1.0 - a) / (1.0 - p))


def cheu_replacement_probability(slots: int, needed: int, tail: float) -> float:
    """Least p (to 1e-12) with P[Bin(slots, p) < needed] <= tail by the Chernoff bound
    exp(−slots·KL(needed/slots ‖ p)); 1.0 if none below 1 works."""
    if needed <= 0:
        return 0.0
    if slots < needed:
        return 1.0
    a = needed / slots
    if a >= 1.0:
        return 1.0
    target = math.log(1.0 / tail) / slots
    low, high = a, 1.0 - 1e-15
    if _kl(a, high) < target:
        return 1.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if _kl(a, mid) >= target:
            high = mid
        else:
            low = mid
        if high - low < 1e-13:
            break
    return high


class CheuProtocol(SummationProtocol):
    """Unary randomized-response summation (module doc; constants calibrated, not the paper's).

    Options: ``precision`` (k, default ⌈ε√n⌉), ``bits_per_user`` (r >= k; default: least r
    with p <= 1/2).
    :raises InfeasiblePlanError: when no p < 1 gives the target (too few users).
    """

    name = "cheu"

    def __init__(
        self,
        users: int,
        epsilon: float,
        delta: float,
        *,
        precision: int | None = None,
        bits_per_user: int | None = None,
    ) -> None:
        n, eps, dlt = check_epsilon_delta(users, epsilon, delta)
        self.users, self.epsilon, self.delta = n, eps, dlt
        if n < 2:
            raise InfeasiblePlanError("the protocol needs at least 2 users")
        k = max(1, math.ceil(eps * math.sqrt(n))) if precision is None else check_int(
            "precision", precision, 1
        )
        if k >= 1 << 40:
            raise ParameterError(f"precision is too large: {k}")
        self.precision = k
        self.delta_tail = _TAIL_SHARE * dlt
        self.delta_binomial = dlt - self.delta_tail
        #: M0: replaced slots of the other users needed for (ε, δ_b) against a shift of k.
        self.blanket_bits = self._checked_blanket(k, eps, self.delta_binomial)
        if bits_per_user is None:
            r = self._auto_bits(n, k)
        else:
            r = check_int("bits_per_user", bits_per_user, 1)
            if r < k:
                raise ParameterError(f"bits_per_user ({r}) must be >= precision ({k})")
        p_real = cheu_replacement_probability((n - 1) * r, self.blanket_bits, self.delta_tail)
        if not p_real < 1.0:
            raise InfeasiblePlanError(
                f"{n} users sending {r} bits each cannot hide a shift of {k}: every bit "
                "would have to be replaced (p >= 1); use more bits per user or fewer levels"
            )
        half = 1 << (_P_BITS - 1)
        self.p_threshold = min(1 << _P_BITS, 2 * math.ceil(p_real * half))
        if self.p_threshold >= 1 << _P_BITS:
            raise InfeasiblePlanError("the replacement probability rounds up to 1")
        self.bits = r
        #: p as used, exactly: p_threshold / 2**32.
        self.p_exact = Fraction(self.p_threshold, 1 << _P_BITS)
        self.p = float(self.p_exact)

    @staticmethod
    def _checked_blanket(shift: int, epsilon: float, delta: float) -> int:
        """:func:`min_blanket_bits` for the largest shift k, then re-checked on the shifts
        1, 2, 4, …, k (δ is non-decreasing in the shift for Bin(M, 1/2) — checked in the tests
        — so this only guards against a numerical surprise; M grows by 1% until all pass)."""
        trials = min_blanket_bits(shift, epsilon, delta)
        ladder = sorted({shift} | {1 << j for j in range(shift.bit_length()) if 1 << j < shift})
        while max(binomial_shift_delta(trials, s, epsilon) for s in ladder) > delta:
            trials = math.ceil(trials * 1.01)
        return trials

    def _auto_bits(self, n: int, k: int) -> int:
        def ok(r: int) -> bool:
            p = cheu_replacement_probability((n - 1) * r, self.blanket_bits, self.delta_tail)
            return p <= _DEFAULT_P_MAX

        if ok(k):
            return k
        low, high = k, 2 * k
        while not ok(high):
            low, high = high, 2 * high
            if high > 1 << 40:
                raise InfeasiblePlanError("no number of bits per user reaches p <= 1/2")
        while high - low > 1:
            mid = (low + high) // 2
            if ok(mid):
                high = mid
            else:
                low = mid
        return high

    @property
    def messages_per_user(self) -> float:
        return float(self.bits)

    @property
    def bits_per_message(self) -> int:
        return 1

    @property
    def message_modulus(self) -> int:
        return 2

    def encode_many(
        self, x: NDArray[np.float64], rng: RandomSource = SYSTEM_RANDOM
    ) -> NDArray[Any]:
        """An ``(n, r)`` uint8 array of bits: unary x̄ through randomized response.
        Consumes 7 bytes per user (rounding) and 4 bytes per bit."""
        xs = self._check_inputs(x)
        rounded = randomized_round(xs, self.precision, rng)
        n, r = int(xs.shape[0]), self.bits
        out = np.empty((n, r), dtype=np.uint8)
        columns = np.arange(r, dtype=np.int64)
        threshold = np.uint64(self.p_threshold)
        step = max(1, _CHUNK_SLOTS // r)
        for start in range(0, n, step):
            stop = min(n, start + step)
            truth = columns[None, :] < rounded[start:stop, None]
            u = uniform_bits((stop - start) * r, _P_BITS, rng).reshape(stop - start, r)
            replaced = u < threshold
            noise_bit = (u & np.uint64(1)).astype(np.bool_)
            out[start:stop] = np.where(replaced, noise_bit, truth).astype(np.uint8)
        return out

    def analyze(
        self, messages: NDArray[Any], users: int, *, rng: RandomSource = SYSTEM_RANDOM
    ) -> float:
        """(C − p·n·r/2) / ((1 − p)·k), C = number of ones, n = ``users``."""
        flat = flat_messages(messages, users, self.bits, 2)
        return self._estimate(int(np.count_nonzero(flat)), users)

    def message_fold(self) -> MessageFold:
        """A :class:`~cloaknet.protocols.fold.SumFold`: the messages are bits, so their
        sum is C, the number of ones."""
        return SumFold(self._fields_from_sum)

    def _fields_from_sum(
        self, total: int, count: int, users: int, rng: RandomSource
    ) -> dict[str, object]:
        """``result_fields`` of ``count`` bits summing to ``total`` ones."""
        n = check_message_count(users, count, self.bits)
        return {"estimate": float(self._estimate(total, n))}

    def _estimate(self, ones: int, users: int) -> float:
        """(C − p·n·r/2) / ((1 − p)·k)."""
        p = self.p_exact
        estimate = (ones - p * users * self.bits / 2) / ((1 - p) * self.precision)
        return float(estimate)

    def noise_variance(self, users: int) -> float:
        """n·r·(p/2)(1−p/2)/((1−p)k)², the randomized-response part of the MSE."""
        p = self.p
        return users * self.bits * (p / 2) * (1 - p / 2) / ((1 - p) * self.precision) ** 2

    def predicted_rmse(self) -> float:
        """sqrt(n/(4k²) + n·r·(p/2)(1−p/2)/((1−p)k)²): an upper bound for every input."""
        return math.sqrt(self.users / (4.0 * self.precision**2) + self.noise_variance(self.users))

    def predicted_rmse_for(self, x: NDArray[np.float64]) -> float:
        """Exact: sqrt(Σ ρ_i(1−ρ_i)/k² + n·r·(p/2)(1−p/2)/((1−p)k)²)."""
        xs = self._check_inputs(x)
        mu = xs * self.precision
        rho = mu - np.floor(mu)
        rounding = float(np.sum(rho * (1.0 - rho))) / self.precision**2
        return math.sqrt(rounding + self.noise_variance(int(xs.shape[0])))

    def parameters(self) -> dict[str, object]:
        return {
            "precision": self.precision,
            "bits_per_user": self.bits,
            "replacement_probability": self.p,
            "blanket_bits": self.blanket_bits,
            "delta_binomial": self.delta_binomial,
            "delta_tail": self.delta_tail,
            "privacy_epsilon": self.epsilon,
            "privacy_delta": self.delta,
            "neighbouring": "single-user",
            "constants": "calibrated numerically (the paper's constants were not verified)",
            "citation": (
                "Cheu, Smith, Ullman, Zeber, Zhilyaev, Distributed Differential Privacy via "
                "Shuffling, EUROCRYPT 2019 (arXiv:1808.01394): real summation by unary "
                "randomized response"
            ),
        }
