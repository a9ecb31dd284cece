"""select_plan: every bound, the auto choice, the protocols the plans build, and errors."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import pytest

from cloaknet import accounting as acc
from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.planner import plan
from cloaknet.plans import SelectedPlan, select_plan
from cloaknet.protocol_table import read_protocol_table, selected_section
from cloaknet.protocols import BBGNProtocol, CloakProtocol, bbgn_plan
from mixnet.chain import RoundPolicy
from tests.cloaknet.test_planner import JSON_KEYS


def _fits(selected: SelectedPlan) -> None:
    """The common fields agree with each other and with the protocol the plan builds."""
    protocol = selected.protocol()
    assert protocol.message_count == selected.messages
    assert protocol.message_modulus == selected.modulus
    assert protocol.bytes_per_message == selected.bytes_per_message
    assert selected.bytes_per_user == selected.messages * selected.bytes_per_message
    assert selected.bits_per_message == (selected.modulus - 1).bit_length()
    data = selected.to_json()
    assert data.keys() >= JSON_KEYS
    assert data["messages_per_user"] == selected.messages and data["bound"] == selected.bound
    assert data["epsilon"] == selected.epsilon and data["delta"] == selected.delta
    assert data["evaluated_at_users"] == selected.evaluated_at_users
    assert selected.evaluated_at_users in (selected.users, selected.max_users)
    assert data["bytes_per_user"] == selected.bytes_per_user
    assert data["expected_rmse"] == selected.expected_rmse


@pytest.mark.parametrize("mode", ["single-user", "sum-preserving"])
@pytest.mark.parametrize("bound", ["optimized", "theorem"])
def test_cloak_bounds_are_the_planners_plan(mode: str, bound: str) -> None:
    selected = select_plan(2000, 1.0, 1e-6, mode=mode, bound=bound, colluders=10)
    expected = plan(2000, 1.0, 1e-6, mode=mode, bound=bound, colluders=10)
    assert selected.plan == expected and selected.bbgn is None
    assert selected.protocol_name == "cloak" and selected.bound == bound
    assert selected.noise == ("truncated-laplace" if mode == "single-user" else "none")
    assert (selected.messages, selected.modulus) == (expected.params.messages,
                                                     expected.params.modulus)
    assert (selected.epsilon, selected.delta) == (expected.epsilon, expected.delta)
    assert selected.meets_target == expected.meets_target
    assert selected.to_json() == expected.to_json()
    assert selected.alternatives == ()
    protocol = selected.protocol()
    assert isinstance(protocol, CloakProtocol) and protocol.plan == expected
    _fits(selected)


def test_theorem_constants_may_miss_the_target() -> None:
    selected = select_plan(10_000, 1.0, 1e-6, mode="sum-preserving", bound="theorem")
    assert not selected.meets_target and selected.delta > selected.target_delta


def test_bbgn_single_user_is_split_and_mix_with_polya_noise() -> None:
    selected = select_plan(10_000, 1.0, 1e-6, bound="bbgn", colluders=100, precision=800)
    b = bbgn_plan(10_000, 1.0, 1e-6, 100, precision=800)
    assert selected.bbgn == b and selected.plan is None
    assert (selected.protocol_name, selected.noise, selected.bound) == ("bbgn", "polya", "bbgn")
    assert (selected.messages, selected.modulus, selected.precision) == (b.messages, b.modulus,
                                                                       800)
    assert selected.max_users == selected.users == 10_000
    sigma = acc.bbgn_achieved_sigma(b.messages, b.honest, b.modulus)
    assert selected.delta == pytest.approx((1 + math.exp(1.0)) * 2.0**-sigma, rel=1e-12)
    assert selected.delta <= 1e-6
    assert selected.epsilon == 1.0 and selected.meets_target
    assert selected.to_json()["noise_p"] == pytest.approx(math.exp(-1.0 / 800))
    protocol = selected.protocol()
    assert isinstance(protocol, BBGNProtocol) and protocol.plan == b
    _fits(selected)


def test_bbgn_sum_preserving_is_the_cloaks_encoder() -> None:
    selected = select_plan(10_000, 1.0, 1e-6, mode="sum-preserving", bound="bbgn")
    assert selected.protocol_name == "cloak" and selected.bound == "bbgn"
    assert selected.plan == plan(10_000, 1.0, 1e-6, mode="sum-preserving", bound="bbgn")
    assert selected.epsilon == 0 and selected.delta <= 1e-6
    assert isinstance(selected.protocol(), CloakProtocol)
    _fits(selected)


@pytest.mark.parametrize("mode", ["single-user", "sum-preserving"])
def test_auto_takes_the_fewest_messages_and_keeps_the_other(mode: str) -> None:
    selected = select_plan(10_000, 1.0, 1e-6, mode=mode)
    optimized = select_plan(10_000, 1.0, 1e-6, mode=mode, bound="optimized")
    bbgn = select_plan(10_000, 1.0, 1e-6, mode=mode, bound="bbgn")
    assert bbgn.messages < optimized.messages
    assert selected.request.bound == "auto"
    assert dataclasses.replace(selected, request=bbgn.request) == bbgn
    (other,) = selected.alternatives
    assert dataclasses.replace(other, request=optimized.request) == optimized


def test_bbgn_takes_a_range_of_round_sizes() -> None:
    larger = select_plan(1000, 1.0, 1e-6, max_users=4000)
    assert larger.bound == "bbgn" and larger.max_users == 4000 and larger.bbgn is not None
    assert larger.evaluated_at_users == 1000 and larger.meets_target
    assert larger.bbgn.noise_shape == Fraction(1, 1000)  # planned for the smallest round
    assert larger.modulus > select_plan(1000, 1.0, 1e-6).modulus  # decodes the largest
    (seed,) = larger.alternatives
    assert seed.bound == "optimized" and seed.max_users == 4000
    assert selected_section(larger)["max_users"] == 4000


def test_auto_keeps_the_cloak_where_bbgn_does_not_apply() -> None:
    capped = select_plan(1000, 1.0, 1e-6, max_rmse=20.0)
    assert capped.bound == "optimized" and capped.expected_rmse <= 20.0
    many = select_plan(100, 1.0, 1e-6, colluders=95)  # Lemma 13 needs |C| <= 0.9 n
    assert many.bound == "bbgn" and many.colluders == 95


def test_auto_reports_both_reasons_when_nothing_fits() -> None:
    with pytest.raises(InfeasiblePlanError, match=r"optimized: .*; bbgn: .*3 honest"):
        select_plan(2, 1.0, 1e-6)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"users": 0}, ParameterError, "users"),
        ({"epsilon": float("nan")}, ParameterError, "epsilon"),
        ({"delta": 1.0}, ParameterError, "delta"),
        ({"mode": "both"}, ParameterError, "mode"),
        ({"bound": "best"}, ParameterError, "bound"),
        ({"colluders": 1000}, ParameterError, "fewer than users"),
        ({"colluders": -1}, ParameterError, "colluders"),
        ({"precision": 0}, ParameterError, "precision"),
        ({"max_users": 999}, ParameterError, "max_users"),
        ({"max_messages": 3}, ParameterError, "max_messages"),
        ({"max_rmse": 0.0}, ParameterError, "max_rmse"),
        ({"bound": "bbgn", "max_rmse": 5.0}, ParameterError, "pre-randomizer"),
        ({"bound": "bbgn", "max_messages": 4}, InfeasiblePlanError, "max_messages = 4"),
        ({"bound": "optimized", "max_messages": 4}, InfeasiblePlanError, "at most 4"),
        ({"bound": "optimized", "colluders": 950}, ParameterError, "0.9"),
    ],
)
def test_bad_requests_raise(kwargs: dict[str, object], error: type, match: str) -> None:
    args: dict[str, object] = {"users": 1000, "epsilon": 1.0, "delta": 1e-6}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        select_plan(**args)  # type: ignore[arg-type]


def test_selected_plan_is_frozen() -> None:
    selected = select_plan(1000, 1.0, 1e-6, bound="optimized")
    with pytest.raises(dataclasses.FrozenInstanceError):
        selected.messages = 5  # type: ignore[misc]


@pytest.mark.parametrize("bound", ["optimized", "bbgn"])
def test_the_chain_table_runs_the_same_protocol(bound: str) -> None:
    selected = select_plan(500, 1.0, 1e-6, bound=bound, colluders=3)
    table = selected_section(selected)
    policy = RoundPolicy(min_users=500, max_users=500, deadline_seconds=10.0)
    protocol, made = read_protocol_table(table, policy)
    built = selected.protocol()
    assert type(protocol) is type(built)
    assert made is None  # explicit parameters / a named protocol: nothing to re-plan
    if isinstance(built, CloakProtocol):
        assert isinstance(protocol, CloakProtocol) and protocol.params == built.params
    else:
        assert table["name"] == "bbgn" and table["colluders"] == 3 and "precision" not in table
        assert isinstance(protocol, BBGNProtocol) and isinstance(built, BBGNProtocol)
        assert protocol.plan == built.plan


@pytest.mark.parametrize("mode", ["single-user", "sum-preserving"])
@pytest.mark.parametrize("users", [100, 10**4, 10**6])
@pytest.mark.parametrize("spread", [1, 10])
def test_no_plan_reports_an_epsilon_above_the_target(mode: str, users: int, spread: int) -> None:
    for epsilon in (0.1, 1.0):
        try:
            chosen = select_plan(users, epsilon, 1e-6, mode=mode, max_users=spread * users)
        except InfeasiblePlanError:
            assert users == 100  # too few users for these targets
            continue
        for each in (chosen, *chosen.alternatives):
            assert each.epsilon_exact <= Fraction(epsilon) and each.epsilon <= epsilon
            assert each.delta <= 1e-6 and each.meets_target
            shown = each.to_json()
            assert Fraction(shown["epsilon_exact"]) >= each.epsilon_exact
            assert shown["noise"] == each.noise and shown["bound"] == each.bound


@pytest.mark.parametrize(
    ("mode", "low", "high"),
    [("single-user", 2000, 2000), ("sum-preserving", 2000, 2000), ("single-user", 1000, 4000),
     ("sum-preserving", 1000, 4000)],
)
def test_chain_plan_is_what_cloaknet_plan_selects(mode: str, low: int, high: int) -> None:
    # [protocol] plan = {...} chooses exactly as `cloaknet plan --users <min_users>
    # --max-users <max_users>` does (bound auto unless the table names one)
    policy = RoundPolicy(min_users=low, max_users=high, deadline_seconds=10.0)
    protocol, made = read_protocol_table(
        {"plan": {"epsilon": 1.0, "delta": 1e-6, "mode": mode}}, policy
    )
    selected = select_plan(low, 1.0, 1e-6, mode=mode, max_users=high)
    assert selected.bound == "bbgn"  # auto: the BBGN bound needs fewer messages here
    if selected.plan is None:  # split-and-mix with Pólya noise
        assert made is None and selected.max_users == high
        assert (protocol.min_round_users, protocol.max_round_users) == (low, high)
        assert isinstance(protocol, BBGNProtocol) and protocol.plan == selected.bbgn
    else:
        assert made == selected.plan and isinstance(protocol, CloakProtocol)
    optimized = read_protocol_table(
        {"plan": {"epsilon": 1.0, "delta": 1e-6, "mode": mode, "bound": "optimized"}}, policy
    )[1]
    assert optimized is not None
    assert optimized == select_plan(low, 1.0, 1e-6, mode=mode, max_users=high,
                                    bound="optimized").plan
