"""The single-message "privacy blanket" protocol of Balle, Bell, Gascón, Nissim (arXiv 1903.02837).

Each user sends one message: x̄ (randomized rounding of x·k to {0..k}) or, with probability
γ = max(14·d·ln(2/δ)/((n−1)ε²), 27·d/((n−1)ε)), d = k + 1, a uniform value of {0..k}. The
analyzer returns (Σ y − n·γ·k/2)/((1 − γ)·k), unbiased. γ is rounded up to a multiple of
2^−53 (more blanket only helps privacy); when γ would reach 1 the protocol degenerates and
the constructor raises :class:`~cloaknet.errors.InfeasiblePlanError`. k minimises the
worst-case MSE bound. Derivations and verification status: ``docs/protocols.md``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.protocols.base import (
    UNIFORM_BITS,
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
from cloaknet.vectorized import uniform_residues

__all__ = ["BlanketProtocol", "blanket_gamma", "blanket_worst_mse"]

#: Largest precision the search considers (bounds its memory; far beyond useful values).
_MAX_SEARCH = 10_000_000


def blanket_gamma(users: int, epsilon: float, delta: float, domain: int) -> float:
    """γ = max(14·d·ln(2/δ)/((n−1)ε²), 27·d/((n−1)ε)) for a domain of d values (uncapped;
    ``inf`` for n = 1)."""
    if users < 2:
        return math.inf
    scale = max(14.0 * math.log(2.0 / delta) / epsilon**2, 27.0 / epsilon)
    return domain * scale / (users - 1)


def blanket_worst_mse(users: int, precision: int, gamma: float) -> float:
    """Worst-case MSE bound n·[(1−γ)/4 + γ(k(2k+1)/6 − γk²/4)] / ((1−γ)k)² (module doc)."""
    k = float(precision)
    per_user = (1.0 - gamma) / 4.0 + gamma * (k * (2.0 * k + 1.0) / 6.0 - gamma * k * k / 4.0)
    return users * per_user / ((1.0 - gamma) * k) ** 2


def _best_precision(users: int, epsilon: float, delta: float) -> int:
    """k minimising :func:`blanket_worst_mse` among k with γ(k+1) < 1."""
    per_value = blanket_gamma(users, epsilon, delta, 1)
    if not per_value < 0.5:  # even k = 1 (d = 2) needs γ >= 1
        need = 2.0 * max(14.0 * math.log(2.0 / delta) / epsilon**2, 27.0 / epsilon)
        raise InfeasiblePlanError(
            f"the privacy blanket needs gamma >= 1 for every precision: every message would "
            f"be uniform noise (the protocol degenerates); it needs n - 1 > {need:.1f} users, "
            f"there are {users}"
        )
    # largest k with (k + 1)·per_value < 1
    k_max = min(_MAX_SEARCH, math.ceil(1.0 / per_value) - 2)
    while k_max > 1 and (k_max + 1) * per_value >= 1.0:
        k_max -= 1
    ks = np.arange(1, k_max + 1, dtype=np.float64)
    gammas = (ks + 1.0) * per_value
    per_user = (1.0 - gammas) / 4.0 + gammas * (ks * (2.0 * ks + 1.0) / 6.0 - gammas * ks**2 / 4.0)
    mse = users * per_user / ((1.0 - gammas) * ks) ** 2
    return int(np.argmin(mse)) + 1


class BlanketProtocol(SummationProtocol):
    """Balle–Bell–Gascón–Nissim single-message protocol (arXiv 1903.02837).

    Options: ``precision`` (k; default: the minimiser of the worst-case MSE bound).
    :raises ParameterError: invalid n, ε, δ or precision.
    :raises InfeasiblePlanError: γ >= 1 (the protocol degenerates; see the module doc).
    """

    name = "blanket"

    def __init__(
        self, users: int, epsilon: float, delta: float, *, precision: int | None = None
    ) -> None:
        n, eps, dlt = check_epsilon_delta(users, epsilon, delta)
        self.users, self.epsilon, self.delta = n, eps, dlt
        if n < 2:
            raise InfeasiblePlanError("the privacy blanket needs at least 2 users")
        k = _best_precision(n, eps, dlt) if precision is None else check_int(
            "precision", precision, 1
        )
        if k >= 1 << 53:
            raise ParameterError(f"precision must be < 2**53, got {k}")
        gamma_real = blanket_gamma(n, eps, dlt, k + 1)
        if not gamma_real < 1.0:
            raise InfeasiblePlanError(
                f"precision {k} needs gamma = {gamma_real:.3g} >= 1: every message would be "
                "uniform noise (the protocol degenerates); choose a smaller precision"
            )
        self.precision = k
        self.gamma_numerator = min(1 << UNIFORM_BITS, math.ceil(gamma_real * (1 << UNIFORM_BITS)))
        if self.gamma_numerator >= 1 << UNIFORM_BITS:
            raise InfeasiblePlanError("gamma rounds up to 1: the protocol degenerates")
        #: γ as used, exactly: gamma_numerator / 2**53 (>= the formula's value).
        self.gamma_exact = Fraction(self.gamma_numerator, 1 << UNIFORM_BITS)
        self.gamma = float(self.gamma_exact)

    @property
    def messages_per_user(self) -> float:
        return 1.0

    @property
    def bits_per_message(self) -> int:
        return max(1, self.precision.bit_length())

    @property
    def message_modulus(self) -> int:
        return self.precision + 1

    def encode_many(
        self, x: NDArray[np.float64], rng: RandomSource = SYSTEM_RANDOM
    ) -> NDArray[Any]:
        """One message per user: x̄ (randomized rounding), or with probability γ a uniform
        value of {0..k}. Consumes 14 bytes of ``rng`` per user plus the uniform values."""
        xs = self._check_inputs(x)
        rounded = randomized_round(xs, self.precision, rng)
        n = int(xs.shape[0])
        u = uniform_bits(n, UNIFORM_BITS, rng)
        replaced = np.flatnonzero(u < np.uint64(self.gamma_numerator))
        out = rounded.astype(np.int64)
        if replaced.size:
            noise = uniform_residues(self.precision + 1, (int(replaced.size),), rng)
            out[replaced] = np.asarray(noise, dtype=np.int64)
        return out.reshape(n, 1)

    def analyze(
        self, messages: NDArray[Any], users: int, *, rng: RandomSource = SYSTEM_RANDOM
    ) -> float:
        """(Σ y − n·γ·k/2) / ((1 − γ)·k) with n = ``users`` and the exact γ."""
        flat = flat_messages(messages, users, 1, self.precision + 1)
        total = int(np.sum(flat.astype(np.int64), dtype=np.int64))
        return self._estimate(total, users)

    def message_fold(self) -> MessageFold:
        """A :class:`~cloaknet.protocols.fold.SumFold`: the estimate needs only Σ y."""
        return SumFold(self._fields_from_sum)

    def _fields_from_sum(
        self, total: int, count: int, users: int, rng: RandomSource
    ) -> dict[str, object]:
        """``result_fields`` of ``count`` messages summing to ``total``."""
        n = check_message_count(users, count, 1)
        return {"estimate": float(self._estimate(total, n))}

    def _estimate(self, total: int, users: int) -> float:
        """(Σ y − n·γ·k/2) / ((1 − γ)·k)."""
        k = self.precision
        gamma = self.gamma_exact
        estimate = (total - users * gamma * Fraction(k, 2)) / ((1 - gamma) * k)
        return float(estimate)

    def _per_user_variance(self, xs: NDArray[np.float64]) -> NDArray[np.float64]:
        k = float(self.precision)
        g = self.gamma
        mu = xs * k
        rho = mu - np.floor(mu)
        var: NDArray[np.float64] = (
            (1.0 - g) * rho * (1.0 - rho)
            + g * (1.0 - g) * mu * (mu - k)
            + g * (k * (2.0 * k + 1.0) / 6.0 - g * k * k / 4.0)
        )
        return var

    def predicted_rmse(self) -> float:
        """sqrt of the worst-case MSE bound (module doc); no bias."""
        return math.sqrt(blanket_worst_mse(self.users, self.precision, self.gamma))

    def predicted_rmse_for(self, x: NDArray[np.float64]) -> float:
        """Exact RMSE sqrt(Σ Var(y_i)) / ((1−γ)k) for these inputs (up to 2^-53 rounding)."""
        xs = self._check_inputs(x)
        total = float(np.sum(self._per_user_variance(xs)))
        return math.sqrt(max(total, 0.0)) / ((1.0 - self.gamma) * self.precision)

    def parameters(self) -> dict[str, object]:
        return {
            "precision": self.precision,
            "gamma": self.gamma,
            "gamma_formula": blanket_gamma(self.users, self.epsilon, self.delta,
                                           self.precision + 1),
            "privacy_epsilon": self.epsilon,
            "privacy_delta": self.delta,
            "neighbouring": "single-user",
            "citation": (
                "Balle, Bell, Gascon, Nissim, The Privacy Blanket of the Shuffle Model, "
                "CRYPTO 2019 (arXiv:1903.02837), blanket bound for randomized response "
                "(gamma = max(14 d ln(2/delta)/((n-1) eps^2), 27 d/((n-1) eps)), d = k + 1; "
                "theorem number not verified)"
            ),
        }
