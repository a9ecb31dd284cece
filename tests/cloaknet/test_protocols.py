"""The summation protocols behind one interface: statistics, wire format, argument checks."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from cloaknet import accounting as acc
from cloaknet.encoding import encode
from cloaknet.errors import (
    InfeasiblePlanError,
    InputRangeError,
    ParameterError,
    ShareCountError,
    ShareError,
)
from cloaknet.planner import plan
from cloaknet.protocols import (
    PROTOCOLS,
    BBGNProtocol,
    BlanketProtocol,
    CentralProtocol,
    CheuProtocol,
    CloakProtocol,
    SummationProtocol,
    bbgn_plan,
    make_protocol,
)
from cloaknet.randomness import DeterministicRandom
from cloaknet.vectorized import shuffle

USERS = 1000
EPSILON = 1.0
DELTA = 1e-6
TRIALS = 300


def _values(n: int, seed: int = 11) -> np.ndarray:
    # test data only (never protocol randomness)
    return np.random.default_rng(seed).random(n)


@pytest.fixture(scope="module")
def protocols() -> dict[str, SummationProtocol]:
    return {name: make_protocol(name, USERS, EPSILON, DELTA) for name in PROTOCOLS}


@pytest.fixture(scope="module")
def trials(protocols: dict[str, SummationProtocol]) -> dict[str, np.ndarray]:
    """Estimates of Σ x over TRIALS independent runs, per protocol (seeded, reproducible)."""
    x = _values(USERS)
    out = {}
    for name, proto in protocols.items():
        rng = DeterministicRandom(f"trials-{name}")
        out[name] = np.array(
            [proto.analyze(proto.encode_many(x, rng), USERS, rng=rng) for _ in range(TRIALS)]
        )
    return out


@pytest.mark.parametrize("name", PROTOCOLS)
def test_analyzer_is_unbiased(
    name: str, protocols: dict[str, SummationProtocol], trials: dict[str, np.ndarray]
) -> None:
    proto = protocols[name]
    x = _values(USERS)
    expected = proto.expected_estimate(x)
    bias = expected - float(np.sum(x))
    noise_sd = math.sqrt(max(proto.predicted_rmse_for(x) ** 2 - bias * bias, 0.0))
    mean = float(np.mean(trials[name]))
    if noise_sd == 0.0:  # the sum-preserving cloak is deterministic: Σ floor(x k)/k exactly
        assert mean == pytest.approx(expected, abs=1e-9)
        assert np.all(trials[name] == trials[name][0])
    else:
        assert abs(mean - expected) <= 5 * noise_sd / math.sqrt(TRIALS)
    if name.startswith("cloak"):
        k = proto.describe()["precision"]
        assert isinstance(k, int)
        assert -USERS / k < bias <= 0  # floor rounding: documented bias in (−n/k, 0]
    else:
        assert bias == 0.0


@pytest.mark.parametrize("name", PROTOCOLS)
def test_measured_rmse_matches_prediction(
    name: str, protocols: dict[str, SummationProtocol], trials: dict[str, np.ndarray]
) -> None:
    proto = protocols[name]
    x = _values(USERS)
    errors = trials[name] - float(np.sum(x))
    measured = float(np.sqrt(np.mean(errors**2)))
    assert 0.5 * proto.predicted_rmse() <= measured <= 1.5 * proto.predicted_rmse()
    # the input-specific prediction is tighter
    assert measured == pytest.approx(proto.predicted_rmse_for(x), rel=0.25)


def test_bbgn_is_as_accurate_as_the_central_reference(
    protocols: dict[str, SummationProtocol], trials: dict[str, np.ndarray]
) -> None:
    bbgn, central = protocols["bbgn"], protocols["central"]
    assert bbgn.predicted_rmse() == pytest.approx(central.predicted_rmse(), rel=1e-9)
    x = _values(USERS)
    rmse = {
        name: float(np.sqrt(np.mean((trials[name] - np.sum(x)) ** 2)))
        for name in ("bbgn", "central")
    }
    assert rmse["bbgn"] == pytest.approx(rmse["central"], rel=0.3)


@pytest.mark.parametrize("name", PROTOCOLS)
def test_messages_are_in_range_and_fixed_width(
    name: str, protocols: dict[str, SummationProtocol]
) -> None:
    proto = protocols[name]
    x = _values(400, seed=5)
    messages = proto.encode_many(x, DeterministicRandom(f"range-{name}"))
    m = int(proto.messages_per_user)
    assert messages.shape == (400, m)
    assert messages.dtype.kind in "ui"
    assert int(messages.min()) >= 0
    assert int(messages.max()) < proto.message_modulus
    assert proto.bits_per_message == max(1, (proto.message_modulus - 1).bit_length())
    assert proto.bytes_per_user == m * math.ceil(proto.bits_per_message / 8)


@pytest.mark.parametrize("name", PROTOCOLS)
def test_analyze_depends_only_on_the_multiset(
    name: str, protocols: dict[str, SummationProtocol]
) -> None:
    proto = protocols[name]
    x = _values(300, seed=6)
    messages = proto.encode_many(x, DeterministicRandom(f"order-{name}"))
    mixed = shuffle(messages, DeterministicRandom(f"mix-{name}"))
    reverse = messages.reshape(-1)[::-1].copy()
    results = {
        proto.analyze(arr, 300, rng=DeterministicRandom("analyzer"))
        for arr in (messages, mixed, reverse)
    }
    assert len(results) == 1


@pytest.mark.parametrize("name", PROTOCOLS)
def test_describe_is_json_ready(name: str, protocols: dict[str, SummationProtocol]) -> None:
    info = protocols[name].describe()
    text = json.dumps(info)
    assert json.loads(text)["protocol"] == name
    for key in ("messages_per_user", "bits_per_message", "bytes_per_user", "predicted_rmse"):
        assert key in info


def test_encode_rejects_inputs_outside_the_unit_interval(
    protocols: dict[str, SummationProtocol],
) -> None:
    for proto in protocols.values():
        with pytest.raises(InputRangeError):
            proto.encode_many(np.array([0.5, 1.5]), DeterministicRandom(1))
        with pytest.raises(InputRangeError):
            proto.encode_many(np.array([float("nan")]), DeterministicRandom(1))
        with pytest.raises(ParameterError):
            proto.encode_many(np.zeros((2, 2)), DeterministicRandom(1))


def test_analyze_checks_count_and_range(protocols: dict[str, SummationProtocol]) -> None:
    for proto in protocols.values():
        m = int(proto.messages_per_user)
        good = np.zeros((10, m), dtype=np.int64)
        with pytest.raises(ShareCountError):
            proto.analyze(good, 11)
        bad = good.copy()
        bad[0, 0] = proto.message_modulus
        with pytest.raises(ShareError):
            proto.analyze(bad, 10)
        bad[0, 0] = -1
        with pytest.raises(ShareError):
            proto.analyze(bad, 10)
        with pytest.raises(ParameterError):
            proto.analyze(good.astype(np.float64), 10)
        with pytest.raises(ParameterError):
            proto.analyze(good, 0)


@pytest.mark.parametrize(
    ("args", "options"),
    [
        (("nope", 100, 1.0, 1e-6), {}),
        (("bbgn", 0, 1.0, 1e-6), {}),
        (("bbgn", 100.0, 1.0, 1e-6), {}),
        (("bbgn", True, 1.0, 1e-6), {}),
        (("central", 100, 0.0, 1e-6), {}),
        (("central", 100, -1.0, 1e-6), {}),
        (("central", 100, float("nan"), 1e-6), {}),
        (("central", 100, float("inf"), 1e-6), {}),
        (("blanket", 100, 1.0, 0.0), {}),
        (("blanket", 100, 1.0, 1.0), {}),
        (("cheu", 100, 1.0, 1e-6), {"colluders": 3}),
        (("central", 100, 1.0, 1e-6), {"precision": 0}),
        (("blanket", 100, 1.0, 1e-6), {"precision": 1.5}),
        (("bbgn", 100, 1.0, 1e-6), {"colluders": -1}),
        (("bbgn", 100, 1.0, 1e-6), {"colluders": 98}),
        (("bbgn", 100, 1.0, 1e-6), {"tail": 0.0}),
        (("cheu", 1000, 1.0, 1e-6), {"bits_per_user": 5}),
        (("cloak-single-user", 100, 1.0, 1e-6), {"tail": 1e-9}),
        (("cloak-sum-preserving", 100, 1.0, 1e-6), {"colluders": 100}),
    ],
)
def test_bad_arguments_raise_parameter_error(
    args: tuple[str, int, float, float], options: dict[str, Any]
) -> None:
    with pytest.raises(ParameterError):
        make_protocol(*args, **options)


def test_none_options_are_ignored() -> None:
    proto = make_protocol("central", 100, 1.0, 1e-6, colluders=None, precision=None)
    assert isinstance(proto, CentralProtocol)


def test_blanket_degenerates_for_too_few_users() -> None:
    # 2·max(14 ln(2/δ)/ε², 27/ε) ≈ 406 > n − 1: γ >= 1 for every precision
    with pytest.raises(InfeasiblePlanError, match="degenerates"):
        BlanketProtocol(300, 1.0, 1e-6)
    with pytest.raises(InfeasiblePlanError, match="degenerates"):
        BlanketProtocol(10_000, 1.0, 1e-6, precision=5000)


def test_blanket_gamma_formula() -> None:
    proto = BlanketProtocol(10_000, 1.0, 1e-6, precision=4)
    d = 5  # the domain {0..4}
    expected = max(14 * d * math.log(2 / 1e-6) / 9999, 27 * d / 9999)
    assert expected <= proto.gamma <= expected + 2**-52
    assert (proto.gamma_exact * 2**53).denominator == 1
    assert proto.gamma_exact == Fraction(proto.gamma_numerator, 2**53)


def test_bbgn_uses_honest_users_only() -> None:
    plain = BBGNProtocol(1000, 1.0, 1e-6)
    colluding = BBGNProtocol(1000, 1.0, 1e-6, colluders=500)
    assert colluding.plan.honest == 500
    assert colluding.plan.noise_shape == pytest.approx(1 / 500)
    assert colluding.plan.noise_variance == pytest.approx(2 * plain.plan.noise_variance)
    assert colluding.messages_per_user >= plain.messages_per_user


def test_bbgn_decodes_negative_noisy_sums() -> None:
    proto = BBGNProtocol(500, 1.0, 1e-6, precision=50)
    x = np.zeros(500)
    rng = DeterministicRandom("zeros")
    estimates = [proto.analyze(proto.encode_many(x, rng), 500) for _ in range(200)]
    assert min(estimates) < 0  # noise below zero is read as negative, not wrapped to ~q
    assert max(abs(e) for e in estimates) < 20 * proto.predicted_rmse()


def test_bbgn_rejects_rounds_larger_than_planned() -> None:
    proto = BBGNProtocol(100, 1.0, 1e-6)
    with pytest.raises(ParameterError):
        proto.analyze(np.zeros((101, int(proto.messages_per_user)), dtype=np.int64), 101)


def test_bbgn_serves_a_range_of_round_sizes() -> None:
    exact = BBGNProtocol(1000, 1.0, 1e-6, precision=50)
    ranged = BBGNProtocol(1000, 1.0, 1e-6, precision=50, max_users=4000)
    made = ranged.plan
    assert (ranged.min_round_users, ranged.max_round_users) == (1000, 4000)
    # noise and messages for the smallest round, the modulus for the largest
    assert made.noise_shape == exact.plan.noise_shape == Fraction(1, 1000)
    assert made.modulus == 4000 * 50 + 2 * made.tail_bound + 1 > exact.plan.modulus
    assert made.tail_bound > exact.plan.tail_bound and made.tail_probability <= 2**-40
    assert made.messages >= exact.plan.messages
    assert made.predicted_rmse == exact.plan.predicted_rmse  # for a round of 1000 users
    rng = DeterministicRandom("range")
    for users in (1000, 4000):  # every round size of the range decodes, noise below 0 too
        estimates = [ranged.analyze(ranged.encode_many(np.zeros(users), rng), users)
                     for _ in range(30)]
        assert max(abs(e) for e in estimates) < 40 * ranged.predicted_rmse()
    with pytest.raises(ParameterError):
        ranged.analyze(np.zeros((4001, made.messages), dtype=np.int64), 4001)
    with pytest.raises(ParameterError, match="max_users"):
        BBGNProtocol(1000, 1.0, 1e-6, max_users=999)


def test_cheu_calibration_is_recorded() -> None:
    proto = CheuProtocol(10_000, 1.0, 1e-6)
    assert proto.precision == 100
    assert proto.bits >= proto.precision
    assert 0 < proto.p <= 0.5 + 2**-31
    assert proto.p_threshold % 2 == 0
    fixed = CheuProtocol(10_000, 1.0, 1e-6, bits_per_user=400)
    assert fixed.bits == 400
    assert fixed.p < proto.p
    with pytest.raises(InfeasiblePlanError):
        CheuProtocol(50, 1.0, 1e-6, bits_per_user=8)


def test_central_noise_is_exact_discrete_laplace_scale() -> None:
    proto = CentralProtocol(400, 0.5, 1e-6, precision=7)
    assert proto.scale == 14
    rng = DeterministicRandom("central-noise")
    draws = np.array([proto.sample_noise(rng) for _ in range(4000)])
    alpha = math.exp(-0.5 / 7)
    assert float(np.var(draws)) == pytest.approx(2 * alpha / (1 - alpha) ** 2, rel=0.15)


# --------------------------------------------------------------------------- encode_value


@pytest.mark.parametrize("name", PROTOCOLS)
def test_encode_value_is_one_users_messages(
    name: str, protocols: dict[str, SummationProtocol]
) -> None:
    proto = protocols[name]
    rng = DeterministicRandom(f"value-{name}")
    messages = proto.encode_value(0.37, rng)
    assert len(messages) == int(proto.messages_per_user) == proto.message_count
    assert all(type(v) is int and 0 <= v < proto.message_modulus for v in messages)
    # the same random stream gives the same messages; clip=True clips into [0, 1]
    assert proto.encode_value(0.37, DeterministicRandom(f"value-{name}")) == messages
    for outside, inside in ((1.5, 1.0), (-2.0, 0.0), (float("inf"), 1.0)):
        clipped = proto.encode_value(outside, DeterministicRandom("c"), clip=True)
        assert clipped == proto.encode_value(inside, DeterministicRandom("c"))
    for bad in (float("nan"), 1.5, -0.1, float("inf"), "0.5", True, None):
        with pytest.raises(InputRangeError):
            proto.encode_value(bad, rng)  # type: ignore[arg-type]
    with pytest.raises(InputRangeError):
        proto.encode_value(float("nan"), rng, clip=True)


@pytest.mark.parametrize("name", PROTOCOLS)
def test_encode_value_per_user_sums_correctly(
    name: str, protocols: dict[str, SummationProtocol]
) -> None:
    """A round made of encode_value calls (as the client library makes it) is analyzed like
    one made by encode_many: the estimate is within a few predicted RMSEs of the sum."""
    proto = protocols[name]
    x = _values(USERS, seed=21)
    rng = DeterministicRandom(f"users-{name}")
    rows = np.array([proto.encode_value(float(v), rng) for v in x], dtype=np.int64)
    estimate = proto.analyze(shuffle(rows, rng), USERS, rng=rng)
    assert abs(estimate - float(np.sum(x))) <= 6 * proto.predicted_rmse_for(x) + 1e-9


def test_cloak_encode_value_is_algorithm_1_exactly(
    protocols: dict[str, SummationProtocol],
) -> None:
    for name in ("cloak-single-user", "cloak-sum-preserving"):
        proto = protocols[name]
        assert isinstance(proto, CloakProtocol)
        for x in (0.0, 0.123456789, 1.0, Fraction(1, 3)):
            shares = proto.encode_value(x, DeterministicRandom("alg1"))  # type: ignore[arg-type]
            assert shares == encode(x, proto.params, DeterministicRandom("alg1"))  # type: ignore[arg-type]
    sp = protocols["cloak-sum-preserving"]
    assert isinstance(sp, CloakProtocol)
    k, modulus = sp.params.precision, sp.params.modulus
    # floor(x·k) of the exact value, not of a float rounded to a coarser grid
    tiny = 2.0**-60
    for x in (Fraction(1, 3), 1 - 2.0**-53, tiny, 0.1):
        exact: list[int] = sp.encode_value(x, DeterministicRandom("exact"))  # type: ignore[arg-type]
        total = sum(exact) % modulus
        assert total == math.floor(Fraction(x) * k)


# --------------------------------------------------------------------------- construction


def test_cloak_from_explicit_parameters_claims_no_privacy() -> None:
    made = plan(100, 1.0, 1e-6, mode="single-user", max_users=300)
    explicit = CloakProtocol(made.params)
    assert explicit.plan is None and explicit.name == "cloak-single-user"
    assert math.isnan(explicit.epsilon) and math.isnan(explicit.delta)
    assert explicit.users == 300 and explicit.min_round_users == 1
    assert explicit.max_round_users == 300
    info = explicit.describe()
    assert info["epsilon"] is None and info["privacy_epsilon"] is None
    json.loads(json.dumps(info, allow_nan=False))
    planned = CloakProtocol.from_plan(made)
    assert planned.plan is made and planned.users == 100 and planned.epsilon == 1.0
    assert (planned.min_round_users, planned.max_round_users) == (100, 300)
    assert planned.predicted_rmse() == made.expected_rmse
    # without the plan the planner's model is computed from the parameters, for max_users
    prm = made.params
    assert prm.noise is not None
    sd = acc.noise_std(300, prm.precision, prm.modulus, prm.noise.p, float(prm.noise.q))
    assert explicit.predicted_rmse() == acc.expected_rmse(300, prm.precision, sd)
    assert explicit.predicted_rmse() > planned.predicted_rmse()
    other = plan(100, 1.0, 1e-6, mode="sum-preserving")
    with pytest.raises(ParameterError, match="differ"):
        CloakProtocol(made.params, other)
    with pytest.raises(TypeError):
        CloakProtocol(made)  # type: ignore[arg-type]


def test_bbgn_from_plan_is_the_planned_protocol() -> None:
    built = BBGNProtocol(500, 1.0, 1e-6, colluders=10)
    again = BBGNProtocol.from_plan(bbgn_plan(500, 1.0, 1e-6, 10))
    assert again.plan == built.plan
    assert (again.users, again.epsilon, again.delta) == (built.users, built.epsilon, built.delta)
    assert again.describe() == built.describe()
    with pytest.raises(TypeError):
        BBGNProtocol.from_plan(plan(500, 1.0, 1e-6))  # type: ignore[arg-type]


def test_round_sizes_default_to_the_planned_users(
    protocols: dict[str, SummationProtocol],
) -> None:
    for name in ("blanket", "cheu", "central", "bbgn"):
        proto = protocols[name]
        assert proto.min_round_users == proto.max_round_users == USERS
