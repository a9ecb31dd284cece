"""The invisibility cloak (Ghazi, Pagh, Velingker 2019) behind the common protocol interface.

Two modes, as planned by :func:`cloaknet.planner.plan` with the ``optimized`` bound:

``cloak-single-user``
    Single-user neighbouring datasets: Algorithm 1 with the pre-randomizer of Section 2.4
    (each user adds w ~ D_{N,p} to floor(x·k) with probability q; Lemma 11, or Lemma 13 with
    colluders) — the noise is drawn by :func:`cloaknet.pipeline.noise_many`.
``cloak-sum-preserving``
    Sum-preserving neighbouring datasets: Algorithm 1 without noise (Lemma 6 with t = n − 1,
    as in the proof of Theorem 2; Lemma 12 with colluders).

The analyzer is Algorithm 2 (:func:`cloaknet.encoding.analyze_sum`): z̄ = Σ y mod N, then z̄/k
with the clamps to 0 and n. The encoder floors x·k, so the estimate is biased by
−Σ frac(x_i·k)/k ∈ (−n/k, 0] (−n/(2k) on average for uniform fractional parts; 0.05 at the
default k = 10·n); :meth:`CloakProtocol.expected_estimate` reports Σ floor(x_i·k)/k, around
which the estimate is unbiased away from the clamps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from cloaknet.encoding import analyze_sum
from cloaknet.noise import truncated_laplace_variance
from cloaknet.params import Mode
from cloaknet.pipeline import noise_many
from cloaknet.planner import Plan, plan
from cloaknet.protocols.base import SummationProtocol, check_epsilon_delta, flat_messages
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.vectorized import encode_many, quantize, sum_mod

__all__ = ["CloakProtocol"]


class CloakProtocol(SummationProtocol):
    """The invisibility cloak with parameters from :func:`cloaknet.planner.plan`.

    ``mode`` is ``"single-user"`` or ``"sum-preserving"``; the remaining keyword options
    (``colluders``, ``precision``, ``bound``, ``max_users``, ``max_messages``) are passed to
    the planner unchanged (ParameterError / InfeasiblePlanError from there).

    ``predicted_rmse()`` is ``plan.expected_rmse``: sqrt((n/(2k))² + n/(12k²) + σ²) with the
    noise σ from the Lemma 8 variance bound — the planner's model (uniform fractional parts),
    not a worst case.
    """

    def __init__(
        self,
        users: int,
        epsilon: float,
        delta: float,
        mode: Mode = "single-user",
        **planner_options: Any,
    ) -> None:
        n, eps, dlt = check_epsilon_delta(users, epsilon, delta)
        self.users, self.epsilon, self.delta = n, eps, dlt
        self.plan: Plan = plan(n, eps, dlt, mode=mode, **planner_options)
        self.params = self.plan.params
        self.name = f"cloak-{self.plan.mode}"

    @property
    def messages_per_user(self) -> float:
        return float(self.params.messages)

    @property
    def bits_per_message(self) -> int:
        return self.params.bits_per_message

    @property
    def message_modulus(self) -> int:
        return self.params.modulus

    def encode_many(
        self, x: NDArray[np.float64], rng: RandomSource = SYSTEM_RANDOM
    ) -> NDArray[Any]:
        """Algorithm 1 for every user (with the pre-randomizer in single-user mode)."""
        xs = self._check_inputs(x)
        xbar = quantize(xs, self.params.precision)
        values = xbar + noise_many(self.params, int(xs.shape[0]), rng)
        return encode_many(values, self.params.messages, self.params.modulus, rng)

    def analyze(
        self, messages: NDArray[Any], users: int, *, rng: RandomSource = SYSTEM_RANDOM
    ) -> float:
        """Algorithm 2 on the n·m shares (``users`` <= the planned ``max_users``)."""
        flat = flat_messages(messages, users, self.params.messages, self.params.modulus)
        return analyze_sum(sum_mod(flat, self.params.modulus), users, self.params).estimate

    def predicted_rmse(self) -> float:
        return self.plan.expected_rmse

    def _noise_variance(self, users: int) -> float:
        """Exact variance of the summed pre-randomizer noise in grid units: n·q·Var(D_{N,p})."""
        noise = self.params.noise
        if noise is None:
            return 0.0
        var = truncated_laplace_variance(self.params.modulus, noise.p)
        return users * float(noise.q) * var

    def expected_estimate(self, x: NDArray[np.float64]) -> float:
        """Σ floor(x_i·k)/k: the analyzer's mean when no clamp of Algorithm 2 is hit (the
        noise is symmetric)."""
        xs = self._check_inputs(x)
        k = self.params.precision
        return int(np.sum(quantize(xs, k), dtype=np.int64)) / k

    def predicted_rmse_for(self, x: NDArray[np.float64]) -> float:
        """sqrt(bias² + n·q·Var(D_{N,p})/k²) with the exact bias −Σ frac(x_i k)/k and the
        exact truncated-Laplace variance (clamping ignored)."""
        xs = self._check_inputs(x)
        bias = self.expected_estimate(xs) - float(np.sum(xs))
        k = self.params.precision
        return float(np.sqrt(bias * bias + self._noise_variance(int(xs.shape[0])) / (k * k)))

    def parameters(self) -> dict[str, object]:
        info = self.plan.to_json()
        keep = (
            "mode", "bound", "colluders", "modulus", "precision", "gamma", "noise_p",
            "noise_q", "noise_scale", "lemma", "max_users",
        )
        out: dict[str, object] = {key: info[key] for key in keep}
        out["modulus"] = str(self.params.modulus) if self.params.modulus >= 1 << 53 else (
            self.params.modulus
        )
        out["privacy_epsilon"] = self.plan.epsilon
        out["privacy_delta"] = self.plan.delta
        out["neighbouring"] = self.plan.mode
        out["citation"] = (
            "Ghazi, Pagh, Velingker 2019, Algorithms 1-2; "
            + ("Lemma 11/13" if self.plan.mode == "single-user" else "Lemma 6/12, Theorem 2")
        )
        return out
