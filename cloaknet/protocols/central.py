"""The central-model reference: a trusted curator adding one exact discrete Laplace noise.

Not a shuffled-model protocol: each user sends x̄_i (randomized rounding of x_i·k) in the
clear to a trusted curator, who releases (Σ x̄_i + Z)/k with P[Z = z] ∝ exp(−ε|z|/k) — (ε, 0)-DP
for single-user changes (the geometric mechanism), sampled exactly by
:func:`cloaknet.noise.sample_discrete_laplace`. It is the accuracy yardstick of the
comparison; the curator's randomness is the ``rng`` passed to
:meth:`CentralProtocol.analyze`. Error analysis: ``docs/protocols.md``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import ParameterError
from cloaknet.noise import sample_discrete_laplace
from cloaknet.protocols.base import (
    SummationProtocol,
    check_epsilon_delta,
    check_int,
    check_message_count,
    flat_messages,
    randomized_round,
)
from cloaknet.protocols.fold import MessageFold, SumFold
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource

__all__ = ["CentralProtocol", "default_precision", "discrete_laplace_variance"]


def default_precision(users: int, epsilon: float) -> int:
    """⌈10·√n·max(1, ε)⌉: rounding variance n/(4k²) <= 1/(400·max(1, ε)²), at most 1/800 of
    the discrete Laplace variance (about 2/ε²)."""
    return max(1, math.ceil(10.0 * math.sqrt(users) * max(1.0, epsilon)))


def discrete_laplace_variance(alpha: float) -> float:
    """Var of the discrete Laplace P[z] ∝ α^|z|: 2α/(1−α)² (computed with expm1 for α ≈ 1)."""
    one_minus = -math.expm1(math.log(alpha))
    return 2.0 * alpha / (one_minus * one_minus)


class CentralProtocol(SummationProtocol):
    """Trusted curator with exact discrete Laplace noise (reference only; see module doc).

    Options: ``precision`` (k; default :func:`default_precision`). δ is accepted for a uniform
    interface and unused (the release is pure ε-DP).
    """

    name = "central"

    def __init__(
        self, users: int, epsilon: float, delta: float, *, precision: int | None = None
    ) -> None:
        n, eps, dlt = check_epsilon_delta(users, epsilon, delta)
        self.users, self.epsilon, self.delta = n, eps, dlt
        k = default_precision(n, eps) if precision is None else check_int(
            "precision", precision, 1
        )
        if k >= 1 << 53:
            raise ParameterError(f"precision must be < 2**53, got {k}")
        self.precision = k
        #: The exact discrete Laplace scale t = k/ε (P[z] ∝ exp(−|z|/t)).
        self.scale = Fraction(k) / Fraction(eps)
        self.alpha = math.exp(-eps / k)

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
        """x̄_i = randomized rounding of x_i·k, sent in the clear (one message per user)."""
        xs = self._check_inputs(x)
        return randomized_round(xs, self.precision, rng).reshape(-1, 1)

    def sample_noise(self, rng: RandomSource = SYSTEM_RANDOM) -> int:
        """One exact discrete Laplace sample with P[z] ∝ exp(−ε|z|/k) (grid units)."""
        return sample_discrete_laplace(self.scale, rng)

    def analyze(
        self, messages: NDArray[Any], users: int, *, rng: RandomSource = SYSTEM_RANDOM
    ) -> float:
        """The curator's release (Σ x̄ + Z)/k; Z is drawn from ``rng``."""
        flat = flat_messages(messages, users, 1, self.precision + 1)
        total = int(np.sum(flat.astype(np.int64), dtype=np.int64))
        return (total + self.sample_noise(rng)) / self.precision

    def message_fold(self) -> MessageFold:
        """A :class:`~cloaknet.protocols.fold.SumFold`: the release needs only Σ x̄."""
        return SumFold(self._fields_from_sum)

    def _fields_from_sum(
        self, total: int, count: int, users: int, rng: RandomSource
    ) -> dict[str, object]:
        """``result_fields`` of ``count`` messages summing to ``total`` (Z drawn from
        ``rng`` as :meth:`analyze` draws it)."""
        check_message_count(users, count, 1)
        return {"estimate": float((total + self.sample_noise(rng)) / self.precision)}

    def noise_variance(self) -> float:
        """Var(Z)/k² in input units."""
        return discrete_laplace_variance(self.alpha) / self.precision**2

    def predicted_rmse(self) -> float:
        """sqrt(n/(4k²) + 2α/((1−α)²k²)): an upper bound for every input."""
        return math.sqrt(self.users / (4.0 * self.precision**2) + self.noise_variance())

    def predicted_rmse_for(self, x: NDArray[np.float64]) -> float:
        """Exact: sqrt(Σ ρ_i(1−ρ_i)/k² + Var(Z)/k²)."""
        xs = self._check_inputs(x)
        mu = xs * self.precision
        rho = mu - np.floor(mu)
        rounding = float(np.sum(rho * (1.0 - rho))) / self.precision**2
        return math.sqrt(rounding + self.noise_variance())

    def parameters(self) -> dict[str, object]:
        return {
            "precision": self.precision,
            "noise_scale": str(self.scale),
            "noise_alpha": self.alpha,
            "privacy_epsilon": self.epsilon,
            "privacy_delta": 0.0,
            "neighbouring": "single-user",
            "trust": "trusted curator sees every x_i (reference only, no privacy in transit)",
            "citation": (
                "geometric mechanism (Ghosh, Roughgarden, Sundararajan 2009); exact sampler: "
                "Canonne, Kamath, Steinke, arXiv:2004.00010, Algorithm 2"
            ),
        }
