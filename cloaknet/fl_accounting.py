"""Privacy accounting over training rounds for vector sums with distributed Skellam noise,
and the planner of :class:`~cloaknet.protocols.vector.VectorSumProtocol` (``cloaknet plan-fl``).

**Per round** (the central-equivalent mechanism; ``docs/protocols.md``, "Vector sums"): the
analyzer's view is within statistical distance η = d·2^−σ of a function of
M(x) = Σ_i x̃_i + Z, Z ~ Skellam(μ)^d, where the x̃_i are the conditionally rounded integer
vectors (‖x̃_i‖₂² <= B²). M is the multi-dimensional Skellam mechanism of Agarwal, Kairouz and
Liu, "The Skellam Mechanism for Differentially Private Federated Learning" (NeurIPS 2021,
arXiv 2110.04995), whose Rényi-DP curve for an integer shift with ‖v‖₂ <= Δ₂ and
‖v‖₁ <= Δ₁ is, for integer orders α > 1 (:func:`skellam_rdp`; arXiv 2110.04995,
Theorem 3.5 — see the verification note below),

    ε(α) = α·Δ₂²/(2μ) + min( ((2α − 1)·Δ₂² + 6·Δ₁)/(4μ²),  3·Δ₁/(2μ) ).

**Over T rounds**: RDP adds (ε_T(α) = T·ε(α), also for adaptively chosen inputs); the total
is converted to (ε, δ_RDP) with the improved conversion of Canonne, Kamath and Steinke
(arXiv 2004.00010, Proposition 12) minimised over the orders — Google's ``dp-accounting``
(``dp_accounting.rdp.compute_epsilon``), which has no Skellam event, so the curve is ours and
the conversion theirs. The split-and-mix distance of every coordinate and every round adds
(1 + e^ε)·T·d·2^−σ to δ (the reduction of ``docs/accounting.md``, applied once to the whole
run), so the whole training is (ε, δ_RDP + (1 + e^ε)·T·d·2^−σ)-DP.

**Cross-checks with dp-accounting** (``tests/cloaknet/test_fl_accounting.py``): the Gaussian
mechanism, whose RDP curve α/(2z²) is the Skellam curve's leading term, composed and converted
here equals ``RdpAccountant`` with ``GaussianDpEvent`` (:func:`gaussian_epsilon`,
:func:`gaussian_epsilon_dp_accounting`); each branch of the Skellam minimum is an
(ξ, ρ)-zCDP curve, which dp-accounting composes as ``ZCDpEvent`` where ξ >= 0
(:func:`skellam_epsilon_dp_accounting`).

**Verification note.** The text of arXiv 2110.04995 could not be retrieved here: the theorem
number (3.5; one independent implementation cites it as Corollary 3.6) is as cited by
independent implementations, and the formula agrees with the authors' reference code
(google-research/federated, ``distributed_dp/accounting_utils.py``, in integer units). The
multi-dimensional bound follows from the one-dimensional one (same formula with d = 1) by
additivity of Rényi divergence over independent coordinates and monotonicity of the minimum
(``docs/accounting.md``), and the tests check the one-dimensional bound against the exact
Rényi divergence of two shifted Skellam laws, computed from scipy's pmf.

All quantities here are binary64 (as in dp-accounting); the planner keeps a relative margin
of 10^−9 below the targets. Invalid arguments raise :class:`~cloaknet.errors.ParameterError`;
targets no parameters can meet raise :class:`~cloaknet.errors.InfeasiblePlanError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, Final, Literal

from cloaknet.accounting import bbgn_achieved_sigma, bbgn_messages
from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.protocols.vector import MAX_SCALED_CLIP, VectorParams
from cloaknet.protocols.vector_rounding import rounding_norm_bound_sq
from cloaknet.skellam_rdp import (
    RDP_ORDERS,
    Orders,
    check_orders,
    check_positive,
    check_probability,
    compose,
    epsilon_from_rdp,
    gaussian_epsilon,
    gaussian_epsilon_dp_accounting,
    gaussian_rdp,
    skellam_epsilon,
    skellam_epsilon_dp_accounting,
    skellam_rdp,
)
from cloaknet.validation import check_int

__all__ = [
    "DEFAULT_BETA",
    "DEFAULT_OVERHEAD",
    "DEFAULT_SPLIT_AND_MIX_SHARE",
    "DEFAULT_TAIL",
    "NEIGHBOURING",
    "RDP_ORDERS",
    "FLPlan",
    "calibrate_skellam_variance",
    "compose",
    "epsilon_from_rdp",
    "gaussian_epsilon",
    "gaussian_epsilon_dp_accounting",
    "gaussian_noise_multiplier",
    "gaussian_rdp",
    "plan_fl",
    "sensitivities",
    "skellam_epsilon",
    "skellam_epsilon_dp_accounting",
    "skellam_rdp",
    "skellam_tail_bound",
    "skellam_tail_probability",
]

#: Default probability that one conditional rounding is redrawn (bounds the rounding bias
#: by β/(1 − β) grid units per coordinate).
DEFAULT_BETA: Final[float] = 2.0**-20
#: Default share of δ spent on the split-and-mix statistical distance.
DEFAULT_SPLIT_AND_MIX_SHARE: Final[float] = 0.1
#: Default bound on the probability that any coordinate of any round leaves the window.
DEFAULT_TAIL: Final[float] = 2.0**-40
#: Default error overhead over the s → ∞ limit that the scale s is chosen for.
DEFAULT_OVERHEAD: Final[float] = 0.02
#: The neighbouring relations: ``replace`` one user's vector by another (the project's
#: single-user changes; Δ₂ = 2B), or ``zero-out`` one user's vector (Δ₂ = B).
NEIGHBOURING: Final[tuple[str, ...]] = ("replace", "zero-out")
#: Relative margin kept below the ε and δ targets (float rounding).
_MARGIN: Final[float] = 1e-9
_LARGEST_SCALE: Final[int] = 1 << 26

# --------------------------------------------------------------------------- calibration


def calibrate_skellam_variance(
    l2_sensitivity_sq: int,
    l1_sensitivity: int,
    rounds: int,
    epsilon: float,
    delta: float,
    orders: Orders = RDP_ORDERS,
) -> int:
    """The least integer μ >= 1 for which ``rounds`` Skellam rounds are (ε, δ)-DP
    (:func:`skellam_epsilon` at most ε·(1 − 10^−9); ε(μ) decreases in μ)."""
    eps = check_positive("epsilon", epsilon)
    target = eps * (1.0 - _MARGIN)

    def ok(mu: int) -> bool:
        return skellam_epsilon(mu, l2_sensitivity_sq, l1_sensitivity, rounds, delta, orders)[
            0
        ] <= target

    high = max(1, int(l2_sensitivity_sq))
    while not ok(high):
        high *= 2
        if high > 1 << 80:
            raise InfeasiblePlanError("no Skellam variance below 2^80 meets the target")
    low = 0  # ok(low) is false or low = 0
    while high - low > 1:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid
    return high


def _least_noise_multiplier(epsilon: float, fn: Callable[[float], float]) -> float:
    """The least z (to a relative 10^−6, rounded up) with fn(z) <= ε·(1 − 10^−9)."""
    target = epsilon * (1.0 - _MARGIN)
    low, high = 0.0, 1.0
    while fn(high) > target:
        low, high = high, high * 2.0
        if high > 1e12:
            raise InfeasiblePlanError("no Gaussian noise multiplier below 10^12 meets the target")
    while high - low > 1e-6 * high:
        mid = (low + high) / 2.0
        if fn(mid) <= target:
            high = mid
        else:
            low = mid
    return high


def gaussian_noise_multiplier(
    rounds: int, epsilon: float, delta: float, orders: Orders | None = None
) -> float:
    """The least noise multiplier z of the Gaussian mechanism (σ = z·Δ₂) for ``rounds``
    rounds at (ε, δ), by dp-accounting's ``RdpAccountant`` (its default orders, fractional
    ones included, unless ``orders`` are given): the central DP reference."""
    eps = check_positive("epsilon", epsilon)
    return _least_noise_multiplier(
        eps, lambda z: gaussian_epsilon_dp_accounting(z, rounds, delta, orders)
    )


def skellam_tail_probability(variance: float, x: int) -> float:
    """An upper bound on P[|Z| >= x] for Z symmetric Skellam of the given variance V, by the
    Chernoff bound: E[e^{sZ}] = exp(V(cosh s − 1)), so with u = x/V and s = asinh(u),
    P[Z >= x] <= exp(V(√(1 + u²) − 1) − x·asinh(u)); the two tails give the factor 2."""
    return math.exp(min(0.0, _log_tail(float(variance), x)))


def _log_tail(v: float, x: int) -> float:
    if v == 0:
        return 0.0 if x <= 0 else -math.inf
    u = x / v
    return math.log(2.0) + v * (math.sqrt(1.0 + u * u) - 1.0) - x * math.asinh(u)


def skellam_tail_bound(variance: float, probability: float) -> int:
    """The least T >= 0 with P[|Z| > T] <= ``probability`` by
    :func:`skellam_tail_probability` (Z symmetric Skellam of the given variance)."""
    v = float(variance)
    if not math.isfinite(v) or v < 0:
        raise ParameterError(f"variance must be finite and >= 0, got {variance!r}")
    target = math.log(check_probability("probability", probability))
    if v == 0:
        return 0
    high = max(1, math.ceil(math.sqrt(v)))
    while _log_tail(v, high) > target:
        high *= 2
    low = 0
    while high - low > 1:
        mid = (low + high) // 2
        if _log_tail(v, mid) <= target:
            high = mid
        else:
            low = mid
    return high - 1  # P[|Z| > T] = P[|Z| >= T + 1]


def sensitivities(
    norm_bound_sq: int, dimension: int, neighbouring: str = "replace"
) -> tuple[int, int]:
    """(Δ₂², Δ₁) of Σ_i x̃_i, exact integers, for rounded vectors with ‖x̃‖₂² <= B².

    ``zero-out``: Δ₂² = B² and Δ₁ = min(⌊√(d·B²)⌋, B²) (‖x̃‖₁ <= √d·‖x̃‖₂, and
    ‖x̃‖₁ <= ‖x̃‖₂² for integer vectors). ``replace``: the difference of two such vectors,
    Δ₂² = 4B², Δ₁ = 2·min(⌊√(d·B²)⌋, B²).
    """
    bound = check_int("norm_bound_sq", norm_bound_sq, 0)
    d = check_int("dimension", dimension, 1)
    one_l1 = min(math.isqrt(d * bound), bound)
    if neighbouring == "zero-out":
        return bound, one_l1
    if neighbouring == "replace":
        return 4 * bound, 2 * one_l1
    raise ParameterError(
        f"neighbouring must be one of {', '.join(NEIGHBOURING)}, got {neighbouring!r}"
    )


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class FLPlan:
    """Everything :func:`plan_fl` chose, and the guarantee it computed (module doc).

    Units: ``scale`` s maps inputs to integers; ``norm_bound_sq`` B², sensitivities and
    ``noise_variance`` μ (the honest users' total per coordinate) are in integer units;
    errors (``predicted_rmse`` of the sum, ``predicted_rmse_mean`` of the average over the
    ``users`` users) are per coordinate in input units. ``epsilon_achieved`` is the composed
    RDP's ε at ``delta_rdp``; ``delta_achieved`` = ``delta_rdp`` + ``split_and_mix_delta``
    ((1 + e^ε)·T·d·2^−σ with the σ the m messages achieve). ``wrap_probability`` bounds the
    probability that any coordinate of any of the T rounds leaves the window [−W, W] (an
    accuracy failure; it does not touch privacy: the view is a function of the noisy sums).
    ``gaussian_limit_rmse`` is the error as s → ∞ (Gaussian RDP, same orders and δ split);
    ``central_gaussian_rmse`` the error of a trusted curator adding Gaussian noise for the
    whole (ε, δ) (dp-accounting's orders): the accuracy ceiling.
    """

    users: int
    colluders: int
    honest: int
    max_users: int
    dimension: int
    clip: float
    rounds: int
    epsilon: float
    delta: float
    neighbouring: str
    scale: int
    beta: float
    norm_bound_sq: int
    l2_sensitivity_sq: int
    l1_sensitivity: int
    noise_variance: int
    noise_variance_per_user: Fraction
    epsilon_achieved: float
    rdp_order: int
    delta_rdp: float
    sigma: float
    split_and_mix_delta: float
    delta_achieved: float
    messages: int
    modulus: int
    window: int
    tail_bound: int
    wrap_probability: float
    index_bytes: int
    share_bytes: int
    predicted_rmse: float
    predicted_rmse_mean: float
    gaussian_limit_rmse: float
    central_gaussian_noise_multiplier: float
    central_gaussian_rmse: float

    @property
    def bytes_per_message(self) -> int:
        return self.index_bytes + self.share_bytes

    @property
    def messages_per_user(self) -> int:
        return self.dimension * self.messages

    @property
    def bytes_per_user(self) -> int:
        """Bytes one user sends per round: d·m·(index bytes + share bytes)."""
        return self.messages_per_user * self.bytes_per_message

    @property
    def meets_target(self) -> bool:
        return self.epsilon_achieved <= self.epsilon and self.delta_achieved <= self.delta

    def params(self) -> VectorParams:
        """The protocol's parameters (each user adds Skellam(μ/n_h) per coordinate)."""
        return VectorParams(
            dimension=self.dimension,
            clip=self.clip,
            scale=float(self.scale),
            norm_bound_sq=self.norm_bound_sq,
            noise_variance=self.noise_variance_per_user,
            messages=self.messages,
            modulus=self.modulus,
            window=self.window,
            min_users=self.users,
            max_users=self.max_users,
        )

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        per_user = self.noise_variance_per_user
        out["noise_variance_per_user"] = (
            str(per_user.numerator) if per_user.denominator == 1
            else f"{per_user.numerator}/{per_user.denominator}"
        )
        if self.modulus >= 1 << 53:
            out["modulus"] = str(self.modulus)
        out.update(
            {
                "protocol": "vector-skellam",
                "noise": "skellam",
                "messages_per_user": self.messages_per_user,
                "bytes_per_message": self.bytes_per_message,
                "bytes_per_user": self.bytes_per_user,
                "meets_target": self.meets_target,
                "bound": "Skellam RDP (arXiv 2110.04995) composed over the rounds + "
                "split-and-mix per coordinate (BBGN, arXiv 1909.11225)",
            }
        )
        return out


def _rmse(mu: int, scale: int, users: int, honest: int) -> float:
    """Per-coordinate RMSE of the sum: sqrt(n·μ/n_h + n/4)/s."""
    return math.sqrt(users * mu / honest + users / 4.0) / scale


def plan_fl(
    dimension: int,
    clip: float,
    rounds: int,
    epsilon: float,
    delta: float,
    users: int,
    *,
    colluders: int = 0,
    max_users: int | None = None,
    neighbouring: Literal["replace", "zero-out"] | str = "replace",
    scale: int | None = None,
    overhead: float = DEFAULT_OVERHEAD,
    beta: float = DEFAULT_BETA,
    split_and_mix_share: float = DEFAULT_SPLIT_AND_MIX_SHARE,
    tail: float = DEFAULT_TAIL,
    orders: Orders = RDP_ORDERS,
) -> FLPlan:
    """Plan a whole training run: ``rounds`` rounds of vector sums of dimension d over rounds
    of ``users`` (privacy is planned for this many, n_h = users − colluders honest) to
    ``max_users`` users, each vector clipped to L2 norm ``clip``, at (ε, δ) for the whole run.

    1. δ is split: δ_SM = ``split_and_mix_share``·δ for the split-and-mix distance,
       δ_RDP = δ − δ_SM for the Skellam RDP.
    2. The scale s (``scale``, or the least integer whose predicted error is within
       ``overhead`` of the s → ∞ limit), B² = :func:`rounding_norm_bound_sq` (s·C, d, β),
       the sensitivities (:func:`sensitivities`) and the least integer μ meeting ε at δ_RDP
       over the rounds (:func:`calibrate_skellam_variance`).
    3. The window W = max_users·⌊B⌋ + T with T from :func:`skellam_tail_bound` for the noise
       of ``max_users`` users at probability ``tail``/(T·d); q = 2W + 1.
    4. m = :func:`cloaknet.accounting.bbgn_messages` (n_h, σ, q) with
       σ = log2((1 + e^ε)·T·d/δ_SM) (10^−9 margin), so that the achieved
       (1 + e^ε)·T·d·2^−σ' <= δ_SM.

    :raises ParameterError: invalid arguments (fewer than 3 honest users among them).
    :raises InfeasiblePlanError: no scale up to 2^26 meets the overhead, or the message
        would not fit in 8 bytes.
    """
    d = check_int("dimension", dimension, 1)
    c = check_positive("clip", clip)
    t = check_int("rounds", rounds, 1)
    eps = check_positive("epsilon", epsilon)
    dlt = check_probability("delta", delta)
    n = check_int("users", users, 1)
    largest = n if max_users is None else check_int("max_users", max_users, n)
    coll = check_int("colluders", colluders, 0)
    honest = n - coll
    if honest < 3:
        raise ParameterError(
            f"the split-and-mix bound needs at least 3 honest users, got n - |C| = {honest}"
        )
    if neighbouring not in NEIGHBOURING:
        raise ParameterError(
            f"neighbouring must be one of {', '.join(NEIGHBOURING)}, got {neighbouring!r}"
        )
    over = check_positive("overhead", overhead)
    rounding_beta = check_probability("beta", beta)
    share = check_probability("split_and_mix_share", split_and_mix_share)
    wrap = check_probability("tail", tail)
    check_orders(orders)

    delta_sm_target = share * dlt
    delta_rdp = dlt - delta_sm_target

    def mechanism(s: int) -> tuple[int, int, int, int]:
        bound = rounding_norm_bound_sq(float(s) * c, d, rounding_beta)
        l2sq, l1 = sensitivities(bound, d, neighbouring)
        mu = calibrate_skellam_variance(l2sq, l1, t, eps, delta_rdp, orders)
        return bound, l2sq, l1, mu

    # the s → ∞ limit: the Gaussian RDP with Δ₂ = 2C (replace) or C (zero-out)
    l2_real = (2.0 if neighbouring == "replace" else 1.0) * c
    z_limit = _least_noise_multiplier(
        eps, lambda z: gaussian_epsilon(z, t, delta_rdp, orders)[0]
    )
    limit = math.sqrt(n / honest) * z_limit * l2_real

    if scale is None:
        goal = (1.0 + over) * limit

        def good(s: int) -> bool:
            return _rmse(mechanism(s)[3], s, n, honest) <= goal

        high = 1
        while not good(high):
            high *= 2
            if high > _LARGEST_SCALE or high * c > MAX_SCALED_CLIP:
                raise InfeasiblePlanError(
                    f"no scale up to {min(_LARGEST_SCALE, int(MAX_SCALED_CLIP / c))} brings "
                    f"the error within {over:g} of the limit"
                )
        low = high // 2
        while high - low > 1:
            mid = (low + high) // 2
            if good(mid):
                high = mid
            else:
                low = mid
        s_final = high
    else:
        s_final = check_int("scale", scale, 1)
        if s_final * c > MAX_SCALED_CLIP:
            raise ParameterError(f"scale·clip must be at most 2^26, got {s_final * c}")
    bound, l2sq, l1, mu = mechanism(s_final)
    eps_rdp, order = skellam_epsilon(mu, l2sq, l1, t, delta_rdp, orders)

    # decoding window and modulus
    total_variance = mu * largest / honest
    tail_bound = skellam_tail_bound(total_variance, wrap / (t * d))
    window = largest * math.isqrt(bound) + tail_bound
    modulus = 2 * window + 1
    index_bytes = max(1, ((d - 1).bit_length() + 7) // 8)
    share_bytes = max(1, ((modulus - 1).bit_length() + 7) // 8)
    if index_bytes + share_bytes > 8:
        raise InfeasiblePlanError(
            f"a message needs {index_bytes} + {share_bytes} bytes; at most 8 are supported"
        )

    # messages: (1 + e^ε)·T·d·2^−σ <= δ_SM, computed in log space
    log2_one_plus = (eps + math.log1p(math.exp(-eps))) / math.log(2.0)
    sigma = log2_one_plus + math.log2(t * d) - math.log2(delta_sm_target * (1.0 - _MARGIN))
    messages = bbgn_messages(honest, sigma, modulus)
    achieved = bbgn_achieved_sigma(messages, honest, modulus)
    delta_sm = 2.0 ** (log2_one_plus + math.log2(t * d) - achieved)

    z_central = gaussian_noise_multiplier(t, eps, dlt)
    rmse = _rmse(mu, s_final, n, honest)
    return FLPlan(
        users=n,
        colluders=coll,
        honest=honest,
        max_users=largest,
        dimension=d,
        clip=c,
        rounds=t,
        epsilon=eps,
        delta=dlt,
        neighbouring=str(neighbouring),
        scale=s_final,
        beta=rounding_beta,
        norm_bound_sq=bound,
        l2_sensitivity_sq=l2sq,
        l1_sensitivity=l1,
        noise_variance=mu,
        noise_variance_per_user=Fraction(mu, honest),
        epsilon_achieved=eps_rdp,
        rdp_order=order,
        delta_rdp=delta_rdp,
        sigma=achieved,
        split_and_mix_delta=delta_sm,
        delta_achieved=delta_rdp + delta_sm,
        messages=messages,
        modulus=modulus,
        window=window,
        tail_bound=tail_bound,
        wrap_probability=min(
            1.0, t * d * skellam_tail_probability(total_variance, tail_bound + 1)
        ),
        index_bytes=index_bytes,
        share_bytes=share_bytes,
        predicted_rmse=rmse,
        predicted_rmse_mean=rmse / n,
        gaussian_limit_rmse=limit,
        central_gaussian_noise_multiplier=z_central,
        central_gaussian_rmse=z_central * l2_real,
    )
