"""Split-and-mix summation with distributed discrete Laplace noise (Balle, Bell, Gascón, Nissim).

Each user rounds x·k randomly to x̄ ∈ {0..k}, adds Z_i = X_i − Y_i with X_i, Y_i ~
Pólya(1/n_h, exp(−ε/k)) (n_h = n − |C| honest users; their Z_i sum to a discrete Laplace,
pure ε-DP), and splits (x̄ + Z_i) mod q into m uniformly random shares (Ishai, Kushilevitz,
Ostrovsky, Sahai, FOCS 2006). The analyzer sums all shares mod q, reads the sum in the window
[−T, n·k + T] and divides by k. m comes from :func:`cloaknet.accounting.bbgn_messages`
(arXiv 1909.11225 / 2002.00817) for statistical distance 2^−σ, σ = log2((1 + e^ε)/δ);
q = n·k + 2T + 1 with T chosen so that |Z| > T has probability at most ``tail``.

The derivations, the error formula and what was and was not verified against the papers:
``docs/protocols.md``. The Pólya sampler is a binary64 approximation (:mod:`.polya`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from cloaknet.accounting import bbgn_messages
from cloaknet.errors import ParameterError
from cloaknet.protocols.base import (
    SummationProtocol,
    check_epsilon_delta,
    check_int,
    flat_messages,
    randomized_round,
)
from cloaknet.protocols.central import default_precision, discrete_laplace_variance
from cloaknet.protocols.polya import sample_polya_differences
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.vectorized import encode_many, sum_mod

__all__ = ["DEFAULT_TAIL", "BBGNPlan", "BBGNProtocol", "bbgn_messages", "bbgn_plan"]

#: Default bound on the probability that the noise makes the sum leave the decoding window.
DEFAULT_TAIL = 2.0**-40


@dataclass(frozen=True)
class BBGNPlan:
    """Parameters of the split-and-mix protocol (module doc).

    ``log_alpha`` = ln α = −ε/k; ``noise_shape`` = 1/n_h; ``tail_bound`` = T;
    ``noise_variance`` is Var(Z) in grid units; errors are in input units.
    """

    users: int
    colluders: int
    honest: int
    epsilon: float
    delta: float
    precision: int
    sensitivity: int
    log_alpha: float
    noise_shape: float
    sigma: float
    statistical_distance: float
    modulus: int
    messages: int
    tail_bound: int
    tail_probability: float
    noise_variance: float
    predicted_rmse: float

    @property
    def bits_per_message(self) -> int:
        return (self.modulus - 1).bit_length()

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.modulus >= 1 << 53:
            out["modulus"] = str(self.modulus)
        out["bits_per_message"] = self.bits_per_message
        return out


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
) -> BBGNPlan:
    """Plan the split-and-mix protocol for n users, |C| colluders and target (ε, δ).

    k defaults to ⌈10·√n·max(1, ε)⌉ (as the central reference); σ = log2((1 + e^ε)/δ) since
    the discrete Laplace gives δ0 = 0; q and m as in the module doc.

    :raises ParameterError: invalid arguments, or fewer than 3 honest users.
    """
    users, eps, dlt = check_epsilon_delta(n, epsilon, delta)
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
    log_alpha = -eps / k
    total_shape = users / honest
    big_t = _tail_bound(log_alpha, total_shape, float(tail))
    modulus = users * k + 2 * big_t + 1
    # σ = log2((1 + e^ε)/δ), computed without overflow for large ε.
    sigma = (eps + math.log1p(math.exp(-eps))) / math.log(2.0) - math.log2(dlt)
    messages = bbgn_messages(honest, sigma, modulus)
    alpha = math.exp(log_alpha)
    noise_var = total_shape * discrete_laplace_variance(alpha)
    rmse = math.sqrt(users / (4.0 * k * k) + noise_var / (k * k))
    tail_prob = min(
        1.0,
        2.0 * math.exp(total_shape * math.log1p(math.sqrt(alpha)) + (big_t + 1) * log_alpha / 2),
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
        noise_shape=1.0 / honest,
        sigma=sigma,
        statistical_distance=2.0**-sigma,
        modulus=modulus,
        messages=messages,
        tail_bound=big_t,
        tail_probability=tail_prob,
        noise_variance=noise_var,
        predicted_rmse=rmse,
    )


class BBGNProtocol(SummationProtocol):
    """Split-and-mix with distributed discrete Laplace noise; parameters from :func:`bbgn_plan`.

    Options: ``colluders``, ``precision``, ``tail`` (passed to :func:`bbgn_plan`).
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
    ) -> None:
        self._adopt(bbgn_plan(users, epsilon, delta, colluders, precision=precision, tail=tail))

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
        self.users, self.epsilon, self.delta = made.users, made.epsilon, made.delta

    @property
    def messages_per_user(self) -> float:
        return float(self.plan.messages)

    @property
    def bits_per_message(self) -> int:
        return self.plan.bits_per_message

    @property
    def message_modulus(self) -> int:
        return self.plan.modulus

    def noise_many(self, count: int, rng: RandomSource = SYSTEM_RANDOM) -> NDArray[np.int64]:
        """Each user's noise Z_i = X_i − Y_i, X_i, Y_i ~ Pólya(1/n_h, exp(−ε/k))."""
        return sample_polya_differences(count, self.plan.noise_shape, self.plan.log_alpha, rng)

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
        """Σ shares mod q, decoded into [−T, n'·k + T] (n' = ``users`` <= the planned n),
        divided by k."""
        if isinstance(users, int) and not isinstance(users, bool) and users > self.plan.users:
            raise ParameterError(
                f"round has {users} users but the modulus was planned for {self.plan.users}"
            )
        flat = flat_messages(messages, users, self.plan.messages, self.plan.modulus)
        raw = sum_mod(flat, self.plan.modulus)
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
        return out
