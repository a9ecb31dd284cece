"""Split-and-mix summation with distributed discrete Laplace noise (Balle, Bell, Gascón, Nissim).

Each user rounds x·k randomly to x̄ ∈ {0..k}, adds Z_i = X_i − Y_i with X_i, Y_i ~
Pólya(1/n_h, exp(−ε/k)) (n_h = n − |C| honest users; their Z_i sum to a discrete Laplace,
pure ε-DP), and splits (x̄ + Z_i) mod q into m uniformly random shares (Ishai, Kushilevitz,
Ostrovsky, Sahai, FOCS 2006). The analyzer sums all shares mod q, reads the sum in the window
[−T, n·k + T] and divides by k. m comes from :func:`cloaknet.accounting.bbgn_messages`
(arXiv 1909.11225 / 2002.00817) for statistical distance 2^−σ, σ = log2((1 + e^ε)/δ);
q = n·k + 2T + 1 with T chosen so that |Z| > T has probability at most ``tail``.

Rounds of ``users`` to ``max_users`` users: the noise shape 1/n_h and the message count are
planned for the smallest round (n_h = users − |C|; in a larger round the honest users' noise
is that discrete Laplace plus independent extra noise, still ε-DP by post-processing, and the
σ that m achieves only grows with the honest count), and q and T for the largest
(q = max_users·k + 2T + 1, T for the noise of max_users users).

The noise is exact: α = exp(−γ) with the rational γ = ε/k (ε's binary64 value read exactly),
and :class:`~cloaknet.protocols.polya.PolyaNoise` samples Pólya(1/n_h, exp(−γ)) with integer
arithmetic and CSPRNG integers only, so the honest users' total is exactly discrete Laplace
and the pure ε of the noise is exactly k·γ = ε.

The derivations, the error formula and what was and was not verified against the papers
(the message bound's constants and the reduction δ0 + (1 + e^ε)·2^−σ could not be checked
against the papers' text; the abstract's example is reproduced): ``docs/protocols.md``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from cloaknet.accounting import BBGN_UNVERIFIED, bbgn_messages
from cloaknet.errors import ParameterError
from cloaknet.protocols.base import (
    SummationProtocol,
    check_epsilon_delta,
    check_int,
    check_message_count,
    flat_messages,
    randomized_round,
)
from cloaknet.protocols.central import default_precision, discrete_laplace_variance
from cloaknet.protocols.fold import MessageFold, SumFold
from cloaknet.protocols.polya import PolyaNoise
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.vectorized import encode_many, sum_mod

__all__ = [
    "BBGN_UNVERIFIED",
    "DEFAULT_TAIL",
    "BBGNPlan",
    "BBGNProtocol",
    "bbgn_messages",
    "bbgn_plan",
]

#: Default bound on the probability that the noise makes the sum leave the decoding window.
DEFAULT_TAIL = 2.0**-40
#: δ is planned as δ·(1 − 10^−9): float rounding in the message bound never pushes the
#: achieved (1 + e^ε)·2^−σ' above the target.
_DELTA_MARGIN = 1 - 1e-9


@dataclass(frozen=True)
class BBGNPlan:
    """Parameters of the split-and-mix protocol (module doc).

    ``noise_gamma`` = γ = ε/k exactly (α = exp(−γ)), ``log_alpha`` = −γ as a float (for
    reports); ``noise_shape`` = 1/n_h exactly; ``tail_bound`` = T; ``noise_variance`` is
    Var(Z) in grid units; errors are in input units, both for a round of ``users`` users.
    ``epsilon`` is the target ε, which the noise meets exactly (:attr:`epsilon_exact` = k·γ).
    Rounds may have ``users`` (privacy is planned for that many, n_h = users − colluders) to
    ``max_users`` users (the modulus and the decoding window are planned for that many).
    """

    users: int
    colluders: int
    honest: int
    epsilon: float
    delta: float
    precision: int
    sensitivity: int
    log_alpha: float
    noise_shape: Fraction
    sigma: float
    statistical_distance: float
    modulus: int
    messages: int
    tail_bound: int
    tail_probability: float
    noise_variance: float
    predicted_rmse: float
    noise_gamma: Fraction
    max_users: int

    @property
    def bits_per_message(self) -> int:
        return (self.modulus - 1).bit_length()

    @property
    def epsilon_exact(self) -> Fraction:
        """The noise's pure ε for sensitivity k, exactly: k·γ (equal to ``epsilon``)."""
        return self.precision * self.noise_gamma

    def noise(self) -> PolyaNoise:
        """The exact sampler of each user's Pólya(1/n_h, exp(−γ)) variables."""
        return PolyaNoise(self.noise_shape, self.noise_gamma)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.modulus >= 1 << 53:
            out["modulus"] = str(self.modulus)
        out["bits_per_message"] = self.bits_per_message
        for key in ("noise_shape", "noise_gamma"):
            value: Fraction = out[key]
            out[key] = f"{value.numerator}/{value.denominator}"
        out["epsilon_exact"] = _fraction_text(self.epsilon_exact)
        out["noise"] = "polya"
        return out


def _fraction_text(value: Fraction) -> str:
    """``value`` as ``"num"`` or ``"num/den"``."""
    return str(value.numerator) if value.denominator == 1 else (
        f"{value.numerator}/{value.denominator}"
    )


def _tail_bound(log_alpha: float, total_shape: float, tail: float) -> int:
    """Least T >= 0 with 2·(1+√α)^R·α^((T+1)/2) <= tail, R = total_shape."""
    log_const = math.log(2.0) + total_shape * math.log1p(math.exp(log_alpha / 2.0))
    need = 2.0 * (log_const - math.log(tail)) / -log_alpha  # T + 1 >= need
    return max(0, math.ceil(need) - 1)


def bbgn_plan(
    n: int,
    epsilon: float,
    delta: float,
    colluders: int = 0,
    *,
    precision: int | None = None,
    tail: float = DEFAULT_TAIL,
    max_users: int | None = None,
) -> BBGNPlan:
    """Plan the split-and-mix protocol for rounds of n (the smallest round) to ``max_users``
    (default n) users, |C| colluders and target (ε, δ) (module doc).

    k defaults to ⌈10·√n·max(1, ε)⌉ (as the central reference); γ = ε/k exactly (the noise's
    ε is then exactly the target); σ = log2((1 + e^ε)/δ) since the discrete Laplace gives
    δ0 = 0 (plus a relative margin of 10^−9 on δ against float rounding in the message bound),
    so that (1 + e^ε)·2^−σ' <= δ for the σ' the chosen m achieves; q and m as in the module
    doc.

    :raises ParameterError: invalid arguments, ``max_users`` < n, or fewer than 3 honest
        users.
    """
    users, eps, dlt = check_epsilon_delta(n, epsilon, delta)
    largest = users if max_users is None else check_int("max_users", max_users, users)
    c = check_int("colluders", colluders, 0)
    honest = users - c
    if honest < 3:
        raise ParameterError(
            f"the message bound needs at least 3 honest users, got n - |C| = {honest}"
        )
    k = default_precision(users, eps) if precision is None else check_int(
        "precision", precision, 1
    )
    if k >= 1 << 53:
        raise ParameterError(f"precision must be < 2**53, got {k}")
    if isinstance(tail, bool) or not isinstance(tail, int | float) or not 0.0 < tail < 1.0:
        raise ParameterError(f"tail must lie in (0, 1), got {tail!r}")
    gamma = Fraction(eps) / k
    log_alpha = -eps / k
    total_shape = users / honest
    largest_shape = largest / honest  # every user of the largest round adds noise
    big_t = _tail_bound(log_alpha, largest_shape, float(tail))
    modulus = largest * k + 2 * big_t + 1
    # σ = log2((1 + e^ε)/δ), computed without overflow for large ε.
    sigma = (eps + math.log1p(math.exp(-eps))) / math.log(2.0) - math.log2(dlt * _DELTA_MARGIN)
    messages = bbgn_messages(honest, sigma, modulus)
    alpha = math.exp(log_alpha)
    noise_var = total_shape * discrete_laplace_variance(alpha)
    rmse = math.sqrt(users / (4.0 * k * k) + noise_var / (k * k))
    tail_prob = min(
        1.0,
        2.0 * math.exp(
            largest_shape * math.log1p(math.sqrt(alpha)) + (big_t + 1) * log_alpha / 2
        ),
    )
    return BBGNPlan(
        users=users,
        colluders=c,
        honest=honest,
        epsilon=eps,
        delta=dlt,
        precision=k,
        sensitivity=k,
        log_alpha=log_alpha,
        noise_shape=Fraction(1, honest),
        sigma=sigma,
        statistical_distance=2.0**-sigma,
        modulus=modulus,
        messages=messages,
        tail_bound=big_t,
        tail_probability=tail_prob,
        noise_variance=noise_var,
        predicted_rmse=rmse,
        noise_gamma=gamma,
        max_users=largest,
    )


class BBGNProtocol(SummationProtocol):
    """Split-and-mix with distributed discrete Laplace noise; parameters from :func:`bbgn_plan`.

    Options: ``colluders``, ``precision``, ``tail``, ``max_users`` (passed to
    :func:`bbgn_plan`); rounds may have ``users`` to ``max_users`` users.
    """

    name = "bbgn"

    def __init__(
        self,
        users: int,
        epsilon: float,
        delta: float,
        *,
        colluders: int = 0,
        precision: int | None = None,
        tail: float = DEFAULT_TAIL,
        max_users: int | None = None,
    ) -> None:
        self._adopt(
            bbgn_plan(
                users, epsilon, delta, colluders, precision=precision, tail=tail,
                max_users=max_users,
            )
        )

    @classmethod
    def from_plan(cls, made: BBGNPlan) -> BBGNProtocol:
        """The protocol with the parameters of ``made`` (from :func:`bbgn_plan`); TypeError
        for anything else."""
        if not isinstance(made, BBGNPlan):
            raise TypeError(f"expected a BBGNPlan, not {type(made).__name__}")
        protocol = cls.__new__(cls)
        protocol._adopt(made)
        return protocol

    def _adopt(self, made: BBGNPlan) -> None:
        self.plan = made
        self._noise = made.noise()
        self.users, self.epsilon, self.delta = made.users, made.epsilon, made.delta

    @property
    def messages_per_user(self) -> float:
        return float(self.plan.messages)

    @property
    def max_round_users(self) -> int:
        """The largest round the modulus and decoding window are planned for."""
        return self.plan.max_users

    @property
    def bits_per_message(self) -> int:
        return self.plan.bits_per_message

    @property
    def message_modulus(self) -> int:
        return self.plan.modulus

    def noise_many(self, count: int, rng: RandomSource = SYSTEM_RANDOM) -> NDArray[np.int64]:
        """Each user's noise Z_i = X_i − Y_i, X_i, Y_i ~ Pólya(1/n_h, exp(−γ)), γ = ε/k,
        drawn exactly (:class:`~cloaknet.protocols.polya.PolyaNoise`; no floating point)."""
        return self._noise.differences(count, rng)

    def encode_many(
        self, x: NDArray[np.float64], rng: RandomSource = SYSTEM_RANDOM
    ) -> NDArray[Any]:
        """Rows of m shares in Z_q summing to x̄_i + Z_i mod q."""
        xs = self._check_inputs(x)
        rounded = randomized_round(xs, self.plan.precision, rng)
        values = rounded + self.noise_many(int(xs.shape[0]), rng)
        return encode_many(values, self.plan.messages, self.plan.modulus, rng)

    def analyze(
        self, messages: NDArray[Any], users: int, *, rng: RandomSource = SYSTEM_RANDOM
    ) -> float:
        """Σ shares mod q, decoded into [−T, n'·k + T] (n' = ``users`` <= the planned
        ``max_users``), divided by k."""
        self._check_round_users(users)
        flat = flat_messages(messages, users, self.plan.messages, self.plan.modulus)
        return self._estimate(sum_mod(flat, self.plan.modulus), users)

    def message_fold(self) -> MessageFold:
        """A :class:`~cloaknet.protocols.fold.SumFold`: the estimate needs only Σ shares."""
        return SumFold(self._fields_from_sum)

    def _fields_from_sum(
        self, total: int, count: int, users: int, rng: RandomSource
    ) -> dict[str, object]:
        """``result_fields`` of ``count`` shares summing to ``total`` (checked as
        :meth:`analyze` checks the shares themselves)."""
        self._check_round_users(users)
        check_message_count(users, count, self.plan.messages)
        return {"estimate": float(self._estimate(total % self.plan.modulus, users))}

    def _check_round_users(self, users: int) -> None:
        if isinstance(users, int) and not isinstance(users, bool) and users > self.plan.max_users:
            raise ParameterError(
                f"round has {users} users but the modulus was planned for {self.plan.max_users}"
            )

    def _estimate(self, raw: int, users: int) -> float:
        """The estimate from z̄ = Σ shares mod q."""
        if raw > users * self.plan.precision + self.plan.tail_bound:
            raw -= self.plan.modulus
        return raw / self.plan.precision

    def predicted_rmse(self) -> float:
        """sqrt(n/(4k²) + 2(n/n_h)α/((1−α)²k²)): an upper bound for every input."""
        return self.plan.predicted_rmse

    def predicted_rmse_for(self, x: NDArray[np.float64]) -> float:
        """sqrt(Σ ρ_i(1−ρ_i)/k² + Var(Z)/k²) (decoding failures ignored)."""
        xs = self._check_inputs(x)
        k = self.plan.precision
        mu = xs * k
        rho = mu - np.floor(mu)
        rounding = float(np.sum(rho * (1.0 - rho)))
        return math.sqrt((rounding + self.plan.noise_variance) / (k * k))

    def parameters(self) -> dict[str, object]:
        out: dict[str, object] = dict(self.plan.to_json())
        out["privacy_epsilon"] = self.epsilon
        # (1 + e^ε)·2^−σ, in log space (no overflow for large ε)
        log_one_plus = self.epsilon + math.log1p(math.exp(-self.epsilon))
        out["privacy_delta"] = math.exp(log_one_plus - self.plan.sigma * math.log(2.0))
        out["neighbouring"] = "single-user"
        out["citation"] = (
            "Ishai, Kushilevitz, Ostrovsky, Sahai FOCS 2006 (split and mix); Balle, Bell, "
            "Gascon, Nissim arXiv:1909.11225 / CCS 2020: m >= max(3, ceil((2 sigma + log2 q)"
            "/(log2 n - log2 e) + 1)) messages give statistical distance 2^-sigma"
        )
        out["unverified"] = BBGN_UNVERIFIED
        return out
