"""Rényi-DP curves of the Skellam and Gaussian mechanisms, their composition over rounds and
the conversion to (ε, δ), with Google's ``dp-accounting`` cross-checks. The accounting over
training that uses them, and the planner, are :mod:`cloaknet.fl_accounting` (its docstring
cites the papers: arXiv 2110.04995, Theorem 3.5, for the Skellam curve; arXiv 2004.00010,
Proposition 12, for the conversion)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import ParameterError
from cloaknet.validation import check_int

__all__ = [
    "RDP_ORDERS",
    "Orders",
    "check_orders",
    "check_positive",
    "check_probability",
    "compose",
    "epsilon_from_rdp",
    "gaussian_epsilon",
    "gaussian_epsilon_dp_accounting",
    "gaussian_rdp",
    "skellam_epsilon",
    "skellam_epsilon_dp_accounting",
    "skellam_rdp",
]


def _dp_accounting() -> tuple[Any, Any]:
    """dp-accounting's ``dp_event`` and ``rdp_privacy_accountant`` modules, imported on first
    use: ``import dp_accounting`` also loads its PLD accountant and scipy (about 0.65 s of
    CPU and 69 MiB of resident memory on this machine), which neither a node nor
    ``cloaknet plan`` needs."""
    from dp_accounting import dp_event  # type: ignore[import-untyped]
    from dp_accounting.rdp import rdp_privacy_accountant  # type: ignore[import-untyped]

    return dp_event, rdp_privacy_accountant


#: Integer Rényi orders (the Skellam bound is stated for integer α > 1).
RDP_ORDERS: Final[tuple[int, ...]] = (
    *range(2, 65), 72, 80, 96, 112, 128, 160, 192, 256, 320, 384, 512, 768, 1024,
)

Orders = Sequence[int]


def check_orders(orders: Orders) -> NDArray[np.float64]:
    values = [check_int("order", a, 2) for a in orders]
    if not values:
        raise ParameterError("orders must not be empty")
    return np.array(values, dtype=np.float64)


def check_probability(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    out = float(value)
    if not 0.0 < out < 1.0:
        raise ParameterError(f"{name} must lie in (0, 1), got {value!r}")
    return out


def check_positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | Fraction):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    out = float(value)
    if not math.isfinite(out) or out <= 0.0:
        raise ParameterError(f"{name} must be a finite number > 0, got {value!r}")
    return out


def skellam_rdp(
    variance: float | int | Fraction,
    l2_sensitivity_sq: float | int,
    l1_sensitivity: float | int,
    orders: Orders = RDP_ORDERS,
) -> NDArray[np.float64]:
    """The Skellam mechanism's RDP ε(α) at every order (module doc; arXiv 2110.04995,
    Theorem 3.5): noise Skellam of ``variance`` μ per coordinate (X − Y with X, Y ~
    Poisson(μ/2)), integer shifts with ‖v‖₂² <= ``l2_sensitivity_sq`` and ‖v‖₁ <=
    ``l1_sensitivity``, all in integer units. One round; compose with :func:`compose`."""
    mu = check_positive("variance", variance)
    l2sq = float(l2_sensitivity_sq)
    l1 = float(l1_sensitivity)
    if not (math.isfinite(l2sq) and l2sq >= 0 and math.isfinite(l1) and l1 >= 0):
        raise ParameterError("sensitivities must be finite and >= 0")
    alpha = check_orders(orders)
    first = (2.0 * alpha - 1.0) * l2sq / (4.0 * mu * mu) + 6.0 * l1 / (4.0 * mu * mu)
    second = np.full_like(alpha, 3.0 * l1 / (2.0 * mu))
    rdp: NDArray[np.float64] = alpha * l2sq / (2.0 * mu) + np.minimum(first, second)
    return rdp


def gaussian_rdp(noise_multiplier: float, orders: Orders = RDP_ORDERS) -> NDArray[np.float64]:
    """The Gaussian mechanism's RDP α/(2z²), z = σ/Δ₂ (Mironov, arXiv 1702.07476,
    Proposition 7): the Skellam curve's leading term with z² = μ/Δ₂²."""
    z = check_positive("noise_multiplier", noise_multiplier)
    rdp: NDArray[np.float64] = check_orders(orders) / (2.0 * z * z)
    return rdp


def compose(rdp: NDArray[np.float64], rounds: int) -> NDArray[np.float64]:
    """RDP of ``rounds`` adaptive compositions: the curves add (Mironov, arXiv 1702.07476,
    Proposition 1)."""
    t = check_int("rounds", rounds, 1)
    out: NDArray[np.float64] = np.asarray(rdp, dtype=np.float64) * t
    return out


def epsilon_from_rdp(
    rdp: NDArray[np.float64], delta: float, orders: Orders = RDP_ORDERS
) -> tuple[float, int]:
    """(ε, the order attaining it) for (ε, δ)-DP from an RDP curve: dp-accounting's
    ``compute_epsilon`` (the conversion of Canonne, Kamath, Steinke, arXiv 2004.00010,
    Proposition 12, minimised over the orders)."""
    dlt = check_probability("delta", delta)
    alpha = [check_int("order", a, 2) for a in orders]
    values = [float(v) for v in np.asarray(rdp, dtype=np.float64)]
    if len(values) != len(alpha):
        raise ParameterError("rdp and orders must have the same length")
    _, rdp_privacy_accountant = _dp_accounting()
    eps, order = rdp_privacy_accountant.compute_epsilon(alpha, values, dlt)
    return float(eps), int(order)


def skellam_epsilon(
    variance: float | int | Fraction,
    l2_sensitivity_sq: float | int,
    l1_sensitivity: float | int,
    rounds: int,
    delta: float,
    orders: Orders = RDP_ORDERS,
) -> tuple[float, int]:
    """(ε, order) of ``rounds`` Skellam rounds at δ: :func:`skellam_rdp`, composed, then
    :func:`epsilon_from_rdp`."""
    curve = compose(skellam_rdp(variance, l2_sensitivity_sq, l1_sensitivity, orders), rounds)
    return epsilon_from_rdp(curve, delta, orders)


def skellam_epsilon_dp_accounting(
    variance: float | int | Fraction,
    l2_sensitivity_sq: float | int,
    l1_sensitivity: float | int,
    rounds: int,
    delta: float,
    orders: Orders = RDP_ORDERS,
) -> float:
    """The same ε computed by dp-accounting's ``RdpAccountant`` (cross-check): each branch
    of the Skellam minimum is the (ξ, ρ)-zCDP curve ξ + ρα, composed as a ``ZCDpEvent``
    ``rounds`` times; the per-order minimum of the branches is converted. The first branch
    has ξ = (6Δ₁ − Δ₂²)/(4μ²), which dp-accounting refuses when negative: only the
    branches with ξ >= 0 are used (the result is then an upper bound of
    :func:`skellam_epsilon`'s)."""
    mu = check_positive("variance", variance)
    l2sq, l1 = float(l2_sensitivity_sq), float(l1_sensitivity)
    t = check_int("rounds", rounds, 1)
    dlt = check_probability("delta", delta)
    alpha = [check_int("order", a, 2) for a in orders]
    branches = [
        (l2sq / (2 * mu) + l2sq / (2 * mu * mu), (6 * l1 - l2sq) / (4 * mu * mu)),
        (l2sq / (2 * mu), 3 * l1 / (2 * mu)),
    ]
    dp_event, rdp_privacy_accountant = _dp_accounting()
    curves = []
    for rho, xi in branches:
        if xi < 0:
            continue
        accountant = rdp_privacy_accountant.RdpAccountant(alpha)
        accountant.compose(dp_event.SelfComposedDpEvent(dp_event.ZCDpEvent(rho, xi), t))
        curves.append(np.asarray(accountant.rdp, dtype=np.float64))
    best = np.minimum.reduce(curves)
    eps, _ = rdp_privacy_accountant.compute_epsilon(alpha, [float(v) for v in best], dlt)
    return float(eps)


def gaussian_epsilon(
    noise_multiplier: float, rounds: int, delta: float, orders: Orders = RDP_ORDERS
) -> tuple[float, int]:
    """(ε, order) of ``rounds`` Gaussian rounds with noise multiplier z, composed and
    converted here (:func:`gaussian_rdp`, :func:`compose`, :func:`epsilon_from_rdp`)."""
    return epsilon_from_rdp(compose(gaussian_rdp(noise_multiplier, orders), rounds), delta, orders)


def gaussian_epsilon_dp_accounting(
    noise_multiplier: float, rounds: int, delta: float, orders: Orders | None = None
) -> float:
    """ε of ``rounds`` Gaussian rounds by dp-accounting alone: ``RdpAccountant`` with a
    self-composed ``GaussianDpEvent`` (its default orders unless ``orders`` are given)."""
    z = check_positive("noise_multiplier", noise_multiplier)
    t = check_int("rounds", rounds, 1)
    dlt = check_probability("delta", delta)
    dp_event, rdp_privacy_accountant = _dp_accounting()
    accountant = rdp_privacy_accountant.RdpAccountant(None if orders is None else list(orders))
    accountant.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z), t))
    return float(accountant.get_epsilon(dlt))


