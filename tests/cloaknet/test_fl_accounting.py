"""Accounting over training rounds: the Skellam RDP curve against the exact Rényi divergence,
composition and conversion against dp-accounting, the tail bound, and the planner."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import special, stats

from cloaknet.accounting import bbgn_achieved_sigma
from cloaknet.cli import main
from cloaknet.errors import ParameterError
from cloaknet.fl_accounting import (
    RDP_ORDERS,
    FLPlan,
    calibrate_skellam_variance,
    gaussian_epsilon,
    gaussian_epsilon_dp_accounting,
    gaussian_noise_multiplier,
    gaussian_rdp,
    plan_fl,
    sensitivities,
    skellam_epsilon,
    skellam_epsilon_dp_accounting,
    skellam_rdp,
    skellam_tail_bound,
)
from cloaknet.protocols.vector import VectorSumProtocol
from cloaknet.protocols.vector_rounding import rounding_norm_bound_sq

# --------------------------------------------------------------------------- the RDP curve


def exact_skellam_renyi(mu: float, shifts: list[int], alpha: int) -> float:
    """D_α(Sk(μ) + v ‖ Sk(μ)) for an integer shift vector v, summed over coordinates (the
    coordinates are independent); Sk(μ) has pmf e^{−μ} I_|k|(μ) (scipy's ``ive``)."""
    total = 0.0
    for shift in shifts:
        half = int(30 * math.sqrt(mu) + 30 * alpha * abs(shift) + 60)
        k = np.arange(-half, half + 1)
        with np.errstate(divide="ignore"):
            log_q = np.log(special.ive(np.abs(k), mu))
            log_p = np.log(special.ive(np.abs(k - shift), mu))
        kept = np.isfinite(log_p) & np.isfinite(log_q)  # underflow only far in the tails
        terms = alpha * log_p[kept] + (1 - alpha) * log_q[kept]
        total += float(special.logsumexp(terms)) / (alpha - 1)
    return total


@pytest.mark.parametrize(
    ("mu", "shifts"),
    [(2.0, [1]), (10.0, [3]), (50.0, [5]), (400.0, [20]), (30.0, [2, -3, 1]), (8.0, [4, 4])],
)
def test_skellam_rdp_bounds_the_exact_renyi_divergence(mu: float, shifts: list[int]) -> None:
    orders = [2, 3, 5, 10, 20]
    l2sq = sum(v * v for v in shifts)
    l1 = sum(abs(v) for v in shifts)
    bound = skellam_rdp(mu, l2sq, l1, orders)
    for alpha, value in zip(orders, bound, strict=True):
        exact = exact_skellam_renyi(mu, shifts, alpha)
        assert exact <= value * (1 + 1e-9), (alpha, exact, value)
        if alpha == 2 and mu >= 50:  # and it is tight where the noise is large
            assert exact >= 0.9 * value


def test_skellam_rdp_tends_to_the_gaussian_curve() -> None:
    # same noise multiplier z = sqrt(μ)/Δ₂, growing scale: the discretisation terms vanish
    for scale in (10.0, 100.0, 1000.0):
        l2sq, l1, mu = (2 * scale) ** 2, 2 * scale * 10, (3.5 * 2 * scale) ** 2
        ratio = skellam_rdp(mu, l2sq, l1) / gaussian_rdp(3.5)
        assert np.all(ratio >= 1.0) and np.max(ratio) < 1 + 2 / scale


# --------------------------------------------------------------------------- dp-accounting


@pytest.mark.parametrize(
    ("z", "rounds", "delta"), [(0.8, 1, 1e-5), (1.3, 50, 1e-6), (4.0, 1000, 1e-5), (9.0, 3, 0.01)]
)
def test_gaussian_composition_and_conversion_match_dp_accounting(
    z: float, rounds: int, delta: float
) -> None:
    ours, order = gaussian_epsilon(z, rounds, delta)
    theirs = gaussian_epsilon_dp_accounting(z, rounds, delta, RDP_ORDERS)
    assert ours == pytest.approx(theirs, rel=1e-9)
    assert order in RDP_ORDERS
    # dp-accounting's own orders (fractional ones too) can only do better
    assert gaussian_epsilon_dp_accounting(z, rounds, delta) <= ours * (1 + 1e-12)


@pytest.mark.parametrize(
    ("mu", "l2sq", "l1", "rounds"),
    [
        (40.0, 4, 12, 10),  # both branches valid (ξ >= 0); the first is the smaller one
        (3.0, 4, 12, 7),  # both valid; the second (3Δ₁/(2μ)) is the smaller one
        (5.0e4, 400, 400, 100),  # ξ < 0 for the first branch: only the second is dp-accounting's
    ],
)
def test_skellam_composition_matches_dp_accounting_zcdp_events(
    mu: float, l2sq: int, l1: int, rounds: int
) -> None:
    ours, _ = skellam_epsilon(mu, l2sq, l1, rounds, 1e-5)
    theirs = skellam_epsilon_dp_accounting(mu, l2sq, l1, rounds, 1e-5)
    if 6 * l1 >= l2sq:
        assert ours == pytest.approx(theirs, rel=1e-9)
    else:
        assert ours <= theirs * (1 + 1e-12)


def test_calibrated_variance_is_the_least_integer_meeting_epsilon() -> None:
    mu = calibrate_skellam_variance(40000, 2000, 20, 2.0, 1e-6)
    assert skellam_epsilon(mu, 40000, 2000, 20, 1e-6)[0] <= 2.0
    assert skellam_epsilon(mu - 1, 40000, 2000, 20, 1e-6)[0] > 2.0 * (1 - 1e-9)


def test_gaussian_noise_multiplier_is_calibrated_by_dp_accounting() -> None:
    z = gaussian_noise_multiplier(100, 3.0, 1e-5)
    assert gaussian_epsilon_dp_accounting(z, 100, 1e-5) <= 3.0
    assert gaussian_epsilon_dp_accounting(z * (1 - 1e-5), 100, 1e-5) > 3.0 * (1 - 1e-9)


# --------------------------------------------------------------------------- tail and sensitivity


@pytest.mark.parametrize(("variance", "probability"), [(30.0, 1e-3), (2.5e5, 1e-12), (1.0, 0.1)])
def test_tail_bound_holds_for_the_exact_law(variance: float, probability: float) -> None:
    t = skellam_tail_bound(variance, probability)
    law = stats.skellam(variance / 2, variance / 2)
    assert 2 * float(law.sf(t)) <= probability  # P[|Z| > T]
    assert t >= 1 and 2 * float(law.sf(t // 2)) > probability  # not absurdly loose


def test_sensitivities_bound_every_integer_vector() -> None:
    # brute force in d = 3: every integer vector with ‖v‖² <= B² has ‖v‖₁ <= the bound
    for bound in (1, 2, 5, 10, 26):
        r = math.isqrt(bound)
        vectors = [
            v for v in itertools.product(range(-r, r + 1), repeat=3)
            if sum(x * x for x in v) <= bound
        ]
        l2sq, l1 = sensitivities(bound, 3, "zero-out")
        assert l2sq == bound and max(sum(abs(x) for x in v) for v in vectors) <= l1
        l2sq_r, l1_r = sensitivities(bound, 3, "replace")
        assert l2sq_r == 4 * bound and l1_r == 2 * l1
    with pytest.raises(ParameterError):
        sensitivities(10, 3, "add-remove")


# --------------------------------------------------------------------------- the planner


@pytest.mark.parametrize(
    ("dimension", "rounds", "users", "options"),
    [
        (10, 1, 50, {}),
        (100, 100, 1000, {}),
        (1000, 30, 200, {"neighbouring": "zero-out", "colluders": 20, "max_users": 300}),
        (64, 500, 100, {"scale": 50}),
    ],
)
def test_the_planner_meets_its_target(
    dimension: int, rounds: int, users: int, options: dict[str, object]
) -> None:
    eps, delta = 3.0, 1e-5
    plan = plan_fl(dimension, 1.0, rounds, eps, delta, users, **options)  # type: ignore[arg-type]
    assert plan.meets_target
    assert plan.epsilon_achieved <= eps and plan.delta_achieved <= delta
    # the guarantee, recomputed from the plan's own numbers
    assert plan.norm_bound_sq == rounding_norm_bound_sq(plan.scale * 1.0, dimension, plan.beta)
    assert (plan.l2_sensitivity_sq, plan.l1_sensitivity) == sensitivities(
        plan.norm_bound_sq, dimension, plan.neighbouring
    )
    again, _ = skellam_epsilon(
        plan.noise_variance, plan.l2_sensitivity_sq, plan.l1_sensitivity, rounds, plan.delta_rdp
    )
    assert again == plan.epsilon_achieved
    assert skellam_epsilon_dp_accounting(
        plan.noise_variance, plan.l2_sensitivity_sq, plan.l1_sensitivity, rounds, plan.delta_rdp
    ) >= again * (1 - 1e-12)
    # μ is the least integer that works
    worse, _ = skellam_epsilon(
        plan.noise_variance - 1, plan.l2_sensitivity_sq, plan.l1_sensitivity, rounds,
        plan.delta_rdp,
    )
    assert worse > eps * (1 - 1e-9)
    # split-and-mix: (1 + e^ε)·T·d·2^−σ' with the σ' that m achieves, and m is the least
    sigma = bbgn_achieved_sigma(plan.messages, plan.honest, plan.modulus)
    sm = (1 + math.exp(eps)) * rounds * dimension * 2.0**-sigma
    assert plan.split_and_mix_delta == pytest.approx(sm, rel=1e-9)
    assert plan.delta_rdp + sm <= delta
    if plan.messages > 3:
        fewer = bbgn_achieved_sigma(plan.messages - 1, plan.honest, plan.modulus)
        assert plan.delta_rdp + (1 + math.exp(eps)) * rounds * dimension * 2.0**-fewer > delta
    # the window holds the signal and the noise tail; the modulus is 2W + 1
    top = math.isqrt(plan.norm_bound_sq)
    assert plan.window == plan.max_users * top + plan.tail_bound
    assert plan.modulus == 2 * plan.window + 1
    variance = plan.noise_variance * plan.max_users / plan.honest
    law = stats.skellam(variance / 2, variance / 2)
    assert rounds * dimension * 2 * float(law.sf(plan.tail_bound)) <= 2.0**-40
    # the error: within the overhead of the s → ∞ limit (when s was chosen), near the
    # central Gaussian reference
    if "scale" not in options:
        assert plan.predicted_rmse <= 1.02 * plan.gaussian_limit_rmse
    assert plan.central_gaussian_rmse <= plan.gaussian_limit_rmse
    # the protocol runs with these parameters
    protocol = VectorSumProtocol(plan.params(), plan=plan)
    assert protocol.predicted_rmse() == pytest.approx(plan.predicted_rmse, rel=1e-12)
    assert protocol.bytes_per_user == plan.bytes_per_user


def test_more_rounds_need_more_noise() -> None:
    few = plan_fl(100, 1.0, 10, 3.0, 1e-5, 500)
    many = plan_fl(100, 1.0, 1000, 3.0, 1e-5, 500)
    assert many.predicted_rmse > 5 * few.predicted_rmse


def test_planner_refuses_bad_arguments() -> None:
    with pytest.raises(ParameterError):
        plan_fl(10, 1.0, 10, 3.0, 1e-5, 2)  # fewer than 3 honest users
    with pytest.raises(ParameterError):
        plan_fl(10, 1.0, 10, 3.0, 1e-5, 50, neighbouring="add-remove")
    with pytest.raises(ParameterError):
        plan_fl(10, -1.0, 10, 3.0, 1e-5, 50)
    with pytest.raises(ParameterError):
        plan_fl(10, 1.0, 10, 3.0, 1.5, 50)


# --------------------------------------------------------------------------- the command


def test_plan_fl_command_prints_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan-fl", "--dimension", "100", "--clip", "1", "--rounds", "100",
            "-e", "3", "-d", "1e-5", "-n", "1000"]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["protocol"] == "vector-skellam" and result["meets_target"] is True
    assert result["dimension"] == 100 and result["rounds"] == 100
    expected = plan_fl(100, 1.0, 100, 3.0, 1e-5, 1000)
    assert result["messages"] == expected.messages and result["scale"] == expected.scale
    assert set(result) >= set(FLPlan.__dataclass_fields__)
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "messages m" in table and "expected error" in table
    assert main(["plan-fl", "--dimension", "10", "--clip", "1", "--rounds", "5", "-e", "3",
                 "-d", "1e-5", "-n", "2"]) == 2  # too few honest users: exit code 2
