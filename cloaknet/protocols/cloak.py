"""The invisibility cloak (Ghazi, Pagh, Velingker, arXiv 1906.08320) as a SummationProtocol.

A :class:`CloakProtocol` holds exact :class:`~cloaknet.params.CloakParams` (``.params``) and,
when they were planned, the :class:`~cloaknet.planner.Plan` (``.plan``). Its name is
``cloak-single-user`` (Algorithm 1 with the pre-randomizer; Lemma 11, or 13 with colluders)
or ``cloak-sum-preserving`` (no noise; Lemma 6, or 12 with colluders). The encoder floors
x·k, so the estimate is biased by −Σ frac(x_i·k)/k ∈ (−n/k, 0]; the analyzer is Algorithm 2
with its clamps to 0 and n. Details: ``docs/protocols.md``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from cloaknet import accounting
from cloaknet.encoding import AnalyzerResult, analyze_sum, encode
from cloaknet.errors import ParameterError
from cloaknet.noise import truncated_laplace_variance
from cloaknet.params import CloakParams, Mode
from cloaknet.pipeline import noise_many
from cloaknet.planner import Plan, plan
from cloaknet.protocols.base import (
    SummationProtocol,
    check_epsilon_delta,
    check_message_count,
    flat_messages,
)
from cloaknet.protocols.fold import MessageFold, SumFold
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.vectorized import encode_many, quantize, sum_mod

__all__ = ["CloakProtocol"]


def _json_int(value: int) -> int | str:
    """Integers that a JSON double cannot hold exactly (>= 2**53) as decimal strings."""
    return str(value) if value >= 1 << 53 else value


class CloakProtocol(SummationProtocol):
    """The invisibility cloak with fixed parameters.

    ``CloakProtocol(params, plan)``: ``params`` are the exact parameters of Algorithms 1 and
    2; ``plan``, if given, is the plan that produced them (``plan.params == params``,
    :class:`~cloaknet.errors.ParameterError` otherwise). With a plan, ``users``,
    ``epsilon`` and ``delta`` are the plan's n and target (ε, δ) and ``predicted_rmse()`` is
    ``plan.expected_rmse``. Without one (a chain file's explicit parameters) nothing is known
    about privacy: ``users`` is ``params.max_users`` (the round size the error prediction
    refers to), ``epsilon`` and ``delta`` are NaN and ``min_round_users`` is 1.
    :meth:`planned` runs the planner. ``TypeError`` for arguments of the wrong type.

    ``predicted_rmse()``: sqrt((n/(2k))² + n/(12k²) + σ²) with σ from the Lemma 8 variance
    bound — the planner's model (uniform fractional parts), not a worst case.
    """

    def __init__(self, params: CloakParams, plan: Plan | None = None) -> None:
        if not isinstance(params, CloakParams):
            raise TypeError(f"params must be CloakParams, not {type(params).__name__}")
        if plan is not None:
            if not isinstance(plan, Plan):
                raise TypeError(f"plan must be a Plan or None, not {type(plan).__name__}")
            if plan.params != params:
                raise ParameterError("the plan's parameters differ from params")
        self.params = params
        self.plan = plan
        self.name = f"cloak-{params.mode}"
        if plan is None:
            self.users, self.epsilon, self.delta = params.max_users, math.nan, math.nan
        else:
            self.users, self.epsilon, self.delta = (
                plan.users,
                float(plan.target_epsilon),
                float(plan.target_delta),
            )

    @classmethod
    def planned(
        cls,
        users: int,
        epsilon: float,
        delta: float,
        mode: Mode = "single-user",
        **planner_options: Any,
    ) -> CloakProtocol:
        """Plan the parameters with :func:`cloaknet.planner.plan` for ``users`` and the
        target (ε, δ); ``planner_options`` (``colluders``, ``precision``, ``bound``,
        ``max_users``, ``max_messages``, ``max_rmse``) are passed on unchanged.

        :raises ParameterError: invalid arguments.
        :raises InfeasiblePlanError: no parameters meet the target.
        """
        n, eps, dlt = check_epsilon_delta(users, epsilon, delta)
        return cls.from_plan(plan(n, eps, dlt, mode=mode, **planner_options))

    @classmethod
    def from_plan(cls, made: Plan) -> CloakProtocol:
        """The cloak with ``made.params``, keeping ``made``."""
        return cls(made.params, made)

    @property
    def messages_per_user(self) -> float:
        return float(self.params.messages)

    @property
    def bits_per_message(self) -> int:
        return self.params.bits_per_message

    @property
    def message_modulus(self) -> int:
        return self.params.modulus

    @property
    def min_round_users(self) -> int:
        """The plan's n (privacy is planned for it); 1 without a plan (no claim)."""
        return 1 if self.plan is None else self.plan.users

    @property
    def max_round_users(self) -> int:
        """``params.max_users``: Algorithm 2 needs N > 3·n·k."""
        return self.params.max_users

    def encode_many(
        self, x: NDArray[np.float64], rng: RandomSource = SYSTEM_RANDOM
    ) -> NDArray[Any]:
        """Algorithm 1 for every user (with the pre-randomizer in single-user mode)."""
        xs = self._check_inputs(x)
        xbar = quantize(xs, self.params.precision)
        values = xbar + noise_many(self.params, int(xs.shape[0]), rng)
        return encode_many(values, self.params.messages, self.params.modulus, rng)

    def encode_value(
        self, x: float, rng: RandomSource = SYSTEM_RANDOM, *, clip: bool = False
    ) -> list[int]:
        """Algorithm 1 for one user, with floor(x·k) computed exactly from x's value (int,
        float or Fraction) and the pre-randomizer in single-user mode:
        :func:`cloaknet.encoding.encode`. Raises as :func:`cloaknet.encoding.check_input`."""
        return encode(x, self.params, rng, clip=clip)

    def _algorithm2(self, messages: NDArray[Any], users: int) -> AnalyzerResult:
        flat = flat_messages(messages, users, self.params.messages, self.params.modulus)
        return analyze_sum(sum_mod(flat, self.params.modulus), users, self.params)

    def analyze(
        self, messages: NDArray[Any], users: int, *, rng: RandomSource = SYSTEM_RANDOM
    ) -> float:
        """Algorithm 2 on the n·m shares (``users`` <= ``params.max_users``, ParameterError
        otherwise)."""
        return self._algorithm2(messages, users).estimate

    def result_fields(
        self, messages: NDArray[Any], users: int, *, rng: RandomSource = SYSTEM_RANDOM
    ) -> dict[str, object]:
        """Algorithm 2's result: ``estimate`` (float), ``estimate_exact`` ("num/den"),
        ``raw_sum`` (z̄ = Σ y mod N, a decimal string), ``clamped`` (None, "low" or "high")
        and ``precision`` (k)."""
        return self._fields(self._algorithm2(messages, users))

    def message_fold(self) -> MessageFold:
        """A :class:`~cloaknet.protocols.fold.SumFold`: Algorithm 2 needs only Σ y."""
        return SumFold(self._fields_from_sum)

    def _fields_from_sum(
        self, total: int, count: int, users: int, rng: RandomSource
    ) -> dict[str, object]:
        """:meth:`result_fields` of ``count`` shares summing to ``total``."""
        check_message_count(users, count, self.params.messages)
        return self._fields(analyze_sum(total % self.params.modulus, users, self.params))

    def _fields(self, result: AnalyzerResult) -> dict[str, object]:
        exact = result.estimate_exact
        return {
            "estimate": result.estimate,
            "estimate_exact": f"{exact.numerator}/{exact.denominator}",
            "raw_sum": str(result.raw_sum),
            "clamped": result.clamped,
            "precision": self.params.precision,
        }

    def _noise_sd(self, users: int) -> float:
        """The planner's bound on the noise's standard deviation in input units (Lemma 8)."""
        noise = self.params.noise
        if noise is None:
            return 0.0
        return accounting.noise_std(
            users, self.params.precision, self.params.modulus, noise.p, float(noise.q)
        )

    def predicted_rmse(self) -> float:
        if self.plan is not None:
            return self.plan.expected_rmse
        return accounting.expected_rmse(
            self.users, self.params.precision, self._noise_sd(self.users)
        )

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
        """The parameters, plus what the plan says (``None`` without a plan)."""
        params, made, noise = self.params, self.plan, self.params.noise
        single = params.mode == "single-user"
        return {
            "mode": params.mode,
            "bound": made.bound if made else None,
            "colluders": made.colluders if made else None,
            "modulus": _json_int(params.modulus),
            "precision": params.precision,
            "gamma": made.gamma if made and made.bound != "bbgn" else None,
            "noise": "truncated-laplace" if noise else "none",
            "noise_p": noise.p if noise else None,
            "noise_q": float(noise.q) if noise else None,
            "noise_scale": str(noise.scale) if noise else None,
            "lemma": made.guarantee.lemma if made else None,
            "max_users": params.max_users,
            "privacy_epsilon": made.epsilon if made else None,
            "privacy_delta": made.delta if made else None,
            "neighbouring": params.mode,
            "citation": (
                "Ghazi, Pagh, Velingker, arXiv 1906.08320, Algorithms 1-2; "
                + ("Lemma 11/13" if single else "Lemma 6/12, Theorem 2")
            ),
        }
