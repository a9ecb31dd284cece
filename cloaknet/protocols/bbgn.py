"""Split-and-mix summation with distributed discrete Laplace noise (Balle, Bell, Gascón, Nissim).

References
    [IKOS06] Y. Ishai, E. Kushilevitz, R. Ostrovsky, A. Sahai, "Cryptography from Anonymity",
             FOCS 2006: the "split and mix" protocol — each user splits its value in Z_q into
             m uniformly random additive shares and sends them through the shuffler.
    [BBGN19] B. Balle, J. Bell, A. Gascón, K. Nissim, "Improved Summation from Shuffling",
             arXiv:1909.11225 (2019), and the journal/conference version "Private Summation in
             the Multi-Message Shuffle Model", ACM CCS 2020 (arXiv:2002.00817): an improved
             analysis of [IKOS06] in which m = O(1 + σ/log n) messages suffice.

The message bound used here (:func:`bbgn_messages`)::

    m >= max(3, ⌈ (2σ + log2 q) / (log2 n − log2 e) + 1 ⌉)

messages per user make the views of any two inputs in Z_q^n with the same sum mod q at
statistical distance at most 2^−σ, for n >= 3 (honest) users. **Verification status:** the
body of [BBGN19] could not be retrieved with the available search tools, so the theorem
number and its side conditions are not verified; the formula is the one given in the brief,
and it agrees with an independent public implementation of this protocol. The paper's own
worked example (abstract of arXiv:1909.11225, which was retrieved: "summation of 32-bit numbers
from n = 10^4 parties sending 12 messages each provides statistical security 2^−40") is
reproduced by the formula with q = n·2^32, the smallest modulus in which the sum of n 32-bit
numbers cannot wrap (log2 q = 45.3 → m = ⌈11.58⌉ = 12); with q = 2^32 it gives 11. A variant
read as ⌈2 + (2σ + log2 q)/(log2 n − log2 e)⌉ would also give 12 with q = 2^32; the two
readings differ by at most one message.

Reduction to differential privacy ([BBGN19]; as stated in the brief, not verified): if the
noisy sum is (ε, δ0)-DP and the views of inputs with equal sums are within statistical
distance 2^−σ, the shuffled view is (ε, δ0 + (1 + e^ε)·2^−σ)-DP.

Protocol (this module)
    Each user rounds x·k to x̄ ∈ {0..k} (randomized rounding), adds Z_i = X_i − Y_i with
    X_i, Y_i ~ Pólya(1/n_h, α), α = exp(−ε/Δ), Δ = k (the sensitivity in grid units), and
    splits (x̄ + Z_i) mod q into m shares ([IKOS06] via :func:`cloaknet.vectorized.encode_many`).
    The analyzer sums all shares mod q, maps the result into the window [−T, n·k + T]
    (values above n·k + T are read as negative) and divides by k.

Privacy: the sum of the honest users' Z_i is discrete Laplace with parameter α
(:mod:`cloaknet.protocols.polya`), which is pure ε-DP for sensitivity k, so δ0 = 0 and the
whole δ pays for the statistical distance: σ = log2((1 + e^ε)/δ). Colluders (option
``colluders`` = |C|) know their own shares and noise; only the n_h = n − |C| honest users
count, both for the noise (every user uses shape 1/n_h, so the honest ones alone already make
the discrete Laplace) and for the message bound (n_h in place of n). The noise sampler is a
binary64 approximation (see :mod:`cloaknet.protocols.polya`).

Modulus: the noisy sum S = Σ x̄_i + Z, Z = A − B with A, B ~ Pólya(n/n_h, α). For s = α^−1/2,
P[A > T] <= E[s^A]·s^−(T+1) = (1 + √α)^(n/n_h)·α^((T+1)/2) (Chernoff), so
P[|Z| > T] <= 2·(1 + √α)^(n/n_h)·α^((T+1)/2). T is the least integer making this at most
``tail`` (default 2^−40), and q = n·k + 2T + 1, so that S is decoded correctly unless
|Z| > T. Messages are fixed-width integers of ⌈log2 q⌉ bits.

Error: unbiased (up to the decoding-failure event of probability <= ``tail``); MSE =
Σ ρ_i(1−ρ_i)/k² + 2·(n/n_h)·α/((1−α)²k²) <= n/(4k²) + 2(n/n_h)α/((1−α)²k²) (predicted_rmse).
With no colluders the noise is exactly the central discrete Laplace, so the error matches
:mod:`cloaknet.protocols.central` with the same k.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

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
_LOG2_E = math.log2(math.e)


def bbgn_messages(n: int, sigma: float, modulus: int) -> int:
    """Messages per user for statistical distance 2^−σ over Z_q among n honest users:
    max(3, ⌈(2σ + log2 q)/(log2 n − log2 e) + 1⌉) ([BBGN19]; see the module doc for what was
    and was not verified).

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
        self.plan = bbgn_plan(users, epsilon, delta, colluders, precision=precision, tail=tail)
        self.users, self.epsilon, self.delta = self.plan.users, self.plan.epsilon, self.plan.delta

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
