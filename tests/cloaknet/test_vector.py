"""Vector sums: the payload format, exact sums without noise, conditional rounding (norm bound
and unbiasedness), the analyzer's checks, and a planned round end to end."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from cloaknet.errors import InputRangeError, ParameterError, ShareCountError, ShareError
from cloaknet.protocols.vector import VectorParams, VectorSumProtocol
from cloaknet.protocols.vector_round import run_vector_round
from cloaknet.protocols.vector_rounding import (
    clip_vectors,
    conditional_round,
    rounding_norm_bound_sq,
)
from cloaknet.randomness import DeterministicRandom
from cloaknet.vectorized import shuffle


def noiseless(dimension: int, clip: float, scale: float, users: int, messages: int = 3) -> (
    VectorSumProtocol
):
    return VectorSumProtocol(
        VectorParams.noiseless(dimension, clip, scale, users=users, messages=messages)
    )


# --------------------------------------------------------------------------- payload format


def test_message_layout_is_index_bytes_then_share_bytes_big_endian() -> None:
    protocol = noiseless(300, 1.0, 100.0, users=1000)  # d − 1 needs 2 bytes, q − 1 needs 3
    assert protocol.index_bytes == 2
    assert protocol.share_bytes == (protocol.share_modulus - 1).bit_length() // 8 + 1
    message = protocol.join_message(0x012B, 0x00BEEF)
    payload = protocol.message_to_bytes(message)
    assert len(payload) == protocol.bytes_per_message
    assert payload[:2] == bytes([0x01, 0x2B])
    assert payload[2:] == (0xBEEF).to_bytes(protocol.share_bytes, "big")
    assert protocol.bytes_per_user == 300 * 3 * protocol.bytes_per_message


@settings(max_examples=200, deadline=None)
@given(data=st.data(), dimension=st.integers(1, 70000), users=st.integers(1, 5000))
def test_payloads_round_trip(data: st.DataObject, dimension: int, users: int) -> None:
    protocol = noiseless(dimension, 1.0, 50.0, users=users)
    index = data.draw(st.integers(0, dimension - 1))
    share = data.draw(st.integers(0, protocol.share_modulus - 1))
    message = protocol.join_message(index, share)
    payload = protocol.message_to_bytes(message)
    assert protocol.message_from_bytes(payload) == message
    assert protocol.split_message(message) == (index, share)
    assert int.from_bytes(payload[: protocol.index_bytes], "big") == index
    assert int.from_bytes(payload[protocol.index_bytes :], "big") == share


def test_bad_payloads_are_refused() -> None:
    protocol = noiseless(10, 1.0, 10.0, users=5)
    width = protocol.bytes_per_message
    with pytest.raises(ShareError):
        protocol.message_from_bytes(bytes(width - 1))
    with pytest.raises(ShareError):  # index 10 >= d
        protocol.message_from_bytes((10).to_bytes(protocol.index_bytes, "big") + bytes(
            protocol.share_bytes
        ))
    with pytest.raises(ShareError):  # share q
        protocol.message_from_bytes(bytes(protocol.index_bytes) + protocol.share_modulus.to_bytes(
            protocol.share_bytes, "big"
        ))
    with pytest.raises(ShareError):
        protocol.split_message(-1)


# --------------------------------------------------------------------------- exact sums


def edge_vectors() -> NDArray[np.float64]:
    """Inputs whose scaled, clipped coordinates are integers (s = 2, C = 5), so rounding is
    deterministic: norm exactly C, negative coordinates, vectors clipped by an exact factor
    (norm 10 → ×1/2), the zero vector and small half-integer vectors."""
    rows = [
        [3.0, 4.0, 0, 0, 0, 0, 0],  # ‖x‖ = C
        [-3.0, -4.0, 0, 0, 0, 0, 0],  # negative, ‖x‖ = C
        [0, 0, 0, 0, 0, 0, -5.0],  # all of the norm on the last coordinate
        [6.0, 8.0, 0, 0, 0, 0, 0],  # clipped to (3, 4)
        [0, 0, -8.0, 0, 6.0, 0, 0],  # clipped to (−4, 3)
        [0, 0, 0, 0, 0, 0, 0],
        [0.5, -1.5, 2.0, -0.5, 1.0, 0, 2.5],
        [-2.5, 0, 0.5, 3.5, 0, -1.0, 0],
    ]
    return np.array(rows, dtype=np.float64)


@pytest.mark.parametrize("messages", [1, 3, 6])
def test_noiseless_sums_are_exact_in_every_coordinate(messages: int) -> None:
    x = edge_vectors()
    protocol = noiseless(7, 5.0, 2.0, users=x.shape[0], messages=messages)
    rng = DeterministicRandom(f"noiseless-{messages}")
    mixed = shuffle(protocol.encode_many(x, rng), rng)
    expected = clip_vectors(x, 5.0).sum(axis=0)
    assert expected.tolist() == [1.0, 2.5, -1.5, 3.0, 4.0, -1.0, -2.5]
    assert protocol.analyze(mixed, x.shape[0]).tolist() == expected.tolist()
    assert protocol.analyze_integers(mixed, x.shape[0]) == [int(2 * v) for v in expected]


def test_noiseless_sums_of_random_vectors_equal_the_rounded_sums() -> None:
    # fractional inputs: the analyzer returns exactly Σ x̃_i / s for the rounded x̃_i
    rng = DeterministicRandom("random-noiseless")
    x = np.random.default_rng(3).normal(scale=0.7, size=(40, 25))
    protocol = noiseless(25, 1.0, 1000.0, users=40, messages=4)
    quantized = protocol.quantize(x, rng)
    mixed = shuffle(protocol.encode_values(quantized, rng), rng)
    assert protocol.analyze_integers(mixed, 40) == quantized.sum(axis=0).tolist()
    estimate = protocol.analyze(mixed, 40)
    assert np.max(np.abs(estimate - clip_vectors(x, 1.0).sum(axis=0))) < 40 / 1000


def test_sums_at_the_edges_of_the_window_decode_exactly() -> None:
    users = 6
    protocol = noiseless(3, 1.0, 30.0, users=users)
    top = math.isqrt(protocol.params.norm_bound_sq)
    assert protocol.params.window == users * top
    values = np.zeros((users, 3), dtype=np.int64)
    values[:, 0] = top  # Σ = +W
    values[:, 1] = -top  # Σ = −W
    values[:, 2] = [top, -top, 1, -1, 0, 0]
    rng = DeterministicRandom("window")
    mixed = shuffle(protocol.encode_values(values, rng), rng)
    w = protocol.params.window
    assert protocol.analyze_integers(mixed, users) == [w, -w, 0]


def test_one_users_payloads_decode_to_that_users_vector() -> None:
    protocol = noiseless(7, 5.0, 2.0, users=1)
    rng = DeterministicRandom("one")
    x = edge_vectors()[6]
    payloads = protocol.encode_payloads(x, rng)
    assert len(payloads) == protocol.messages_per_user
    assert all(len(p) == protocol.bytes_per_message for p in payloads)
    estimate = protocol.analyze(protocol.decode_payloads(payloads), 1)
    assert estimate.tolist() == x.tolist()


# --------------------------------------------------------------------------- the analyzer


def test_the_analyzer_checks_counts_indices_and_shares() -> None:
    protocol = noiseless(4, 1.0, 10.0, users=5, messages=3)
    rng = DeterministicRandom("checks")
    messages = protocol.encode_many(np.zeros((5, 4)), rng).reshape(-1)
    protocol.analyze(messages, 5)
    with pytest.raises(ShareCountError):
        protocol.analyze(messages[:-1], 5)
    moved = messages.copy()  # one message moved from coordinate 0 to 1: counts 14 and 16
    first = int(np.flatnonzero((moved >> np.uint64(8 * protocol.share_bytes)) == 0)[0])
    moved[first] = protocol.join_message(1, protocol.split_message(int(moved[first]))[1])
    with pytest.raises(ShareCountError, match="coordinate 0"):
        protocol.analyze(moved, 5)
    bad_index = messages.copy()
    bad_index[0] = np.uint64(4) << np.uint64(8 * protocol.share_bytes)
    with pytest.raises(ShareError):
        protocol.analyze(bad_index, 5)
    bad_share = messages.copy()
    bad_share[0] = np.uint64(protocol.share_modulus)
    with pytest.raises(ShareError):
        protocol.analyze(bad_share, 5)
    with pytest.raises(ParameterError):
        protocol.analyze(messages.astype(np.float64), 5)
    with pytest.raises(ParameterError):
        protocol.analyze(np.concatenate([messages, messages]), 10)  # above max_users


def test_inputs_are_checked() -> None:
    protocol = noiseless(3, 1.0, 10.0, users=2)
    with pytest.raises(InputRangeError):
        protocol.encode_many(np.zeros((2, 4)))
    with pytest.raises(InputRangeError):
        protocol.encode_many(np.array([[0.0, math.nan, 0.0]]))
    with pytest.raises(InputRangeError):
        protocol.encode_many(np.array([[0.0, math.inf, 0.0]]))


def test_parameters_are_checked() -> None:
    good = VectorParams.noiseless(8, 1.0, 20.0, users=10)
    fields = {
        "dimension": good.dimension, "clip": good.clip, "scale": good.scale,
        "norm_bound_sq": good.norm_bound_sq, "noise_variance": good.noise_variance,
        "messages": good.messages, "modulus": good.modulus, "window": good.window,
        "min_users": good.min_users, "max_users": good.max_users,
    }
    for change in (
        {"norm_bound_sq": 400},  # below what rounding meets half the time
        {"window": good.window - 1},  # sums could wrap
        {"modulus": 2 * good.window},  # q < 2W + 1
        {"noise_variance": 0.5},  # inexact
        {"scale": -1.0},
        {"dimension": 0},
    ):
        with pytest.raises(ParameterError):
            VectorParams(**{**fields, **change})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- rounding


def edge_rows(count: int, dimension: int, norm: float, seed: int) -> NDArray[np.float64]:
    """``count`` random rows of L2 norm exactly ``norm`` (up to float rounding)."""
    rows = np.random.default_rng(seed).normal(size=(count, dimension))
    out: NDArray[np.float64] = rows / np.linalg.norm(rows, axis=1, keepdims=True) * norm
    return out


def test_conditional_rounding_keeps_the_norm_bound() -> None:
    # a tight bound, met by about half the unconditional roundings: every output meets it
    y = edge_rows(400, 64, 20.0, seed=1)
    bound = 400 + 64 // 4  # ‖y‖² + d/4: just above the mean squared norm
    rng = DeterministicRandom("tight")
    plain = np.floor(y) + (np.random.default_rng(2).random(y.shape) < y - np.floor(y))
    assert np.mean(np.sum(plain * plain, axis=1) > bound) > 0.2  # rejection does happen
    rounded = conditional_round(y, bound, rng)
    assert rounded.dtype == np.int64
    assert int(np.max(np.einsum("ij,ij->i", rounded, rounded))) <= bound
    assert np.all(np.abs(rounded - y) < 1)  # each coordinate is ⌊y⌋ or ⌈y⌉


def test_conditional_rounding_with_the_planned_bound_is_unbiased() -> None:
    # one vector at the clipping edge, rounded 20,000 times with β = 2^−20: every
    # coordinate's mean is within 4.5 standard errors of y (the conditioning moves it by at
    # most β/(1 − β) ≈ 10^−6, far below the 0.0035 standard error)
    y = edge_rows(1, 16, 30.0, seed=4)[0] + 0.0
    bound = rounding_norm_bound_sq(30.0, 16, 2.0**-20)
    draws = conditional_round(np.tile(y, (20000, 1)), bound, DeterministicRandom("unbiased"))
    frac = y - np.floor(y)
    se = np.sqrt(frac * (1 - frac) / 20000)
    z = (draws.mean(axis=0) - y) / np.where(se > 0, se, 1)
    assert np.max(np.abs(z)) < 4.5
    assert int(np.max(np.einsum("ij,ij->i", draws, draws))) <= bound


def test_the_unbiasedness_test_detects_an_over_tight_bound() -> None:
    # the same statistic has power: a bound below the mean squared norm forces short
    # vectors, whose coordinates are biased towards zero
    y = np.full(16, 7.5)  # ‖y‖² = 900, every fractional part 1/2
    bound = 900 + 1  # E‖ỹ‖² = 904
    draws = conditional_round(np.tile(y, (20000, 1)), bound, DeterministicRandom("biased"))
    se = math.sqrt(0.25 / 20000)
    z = (draws.mean(axis=0) - y) / se
    assert np.min(z) < -10


def test_rounding_fails_the_bound_less_often_than_beta() -> None:
    beta = 0.05
    y = edge_rows(4000, 40, 12.0, seed=7)
    bound = rounding_norm_bound_sq(12.0, 40, beta)
    plain = np.floor(y) + (np.random.default_rng(8).random(y.shape) < y - np.floor(y))
    assert np.mean(np.sum(plain * plain, axis=1) > bound) <= beta


def test_clipping_scales_long_rows_only() -> None:
    x = np.array([[0.3, 0.4], [3.0, 4.0], [0.0, 0.0], [-1e200, 1e200]])
    clipped = clip_vectors(x, 1.0)
    assert clipped[0].tolist() == [0.3, 0.4] and clipped[2].tolist() == [0.0, 0.0]
    assert np.allclose(clipped[1], [0.6, 0.8]) and np.allclose(clipped[3], [-(0.5**0.5), 0.5**0.5])
    assert np.all(np.linalg.norm(clipped, axis=1) <= 1.0 + 1e-15)


# --------------------------------------------------------------------------- end to end


def test_a_planned_round_recovers_the_clipped_sum_within_the_predicted_error() -> None:
    # d = 10, n = 50 users, (ε, δ) = (3, 10^−5) for one round: per-user exact Skellam noise,
    # the ideal shuffler, the analyzer
    protocol = VectorSumProtocol.planned(10, 1.0, 1, 3.0, 1e-5, 50)
    plan = protocol.plan
    assert plan is not None and plan.meets_target
    x = np.random.default_rng(11).normal(scale=0.6, size=(50, 10))
    rmse = protocol.predicted_rmse()
    errors = []
    for seed in range(4):
        result = run_vector_round(protocol, x, DeterministicRandom(f"e2e-{seed}"))
        assert result.messages == 50 * protocol.messages_per_user
        assert np.allclose(result.clipped_sum, clip_vectors(x, 1.0).sum(axis=0))
        errors.append(result.error)
    err = np.concatenate(errors)
    assert np.max(np.abs(err)) < 4.5 * rmse
    assert 0.6 * rmse < float(np.sqrt(np.mean(err**2))) < 1.4 * rmse  # 40 errors


def test_aggregate_noise_simulation_has_the_same_error_scale() -> None:
    protocol = VectorSumProtocol.planned(10, 1.0, 1, 3.0, 1e-5, 50)
    x = np.random.default_rng(12).normal(scale=0.6, size=(50, 10))
    errors = np.concatenate(
        [
            run_vector_round(
                protocol, x, DeterministicRandom(f"agg-{seed}"), noise="aggregate"
            ).error
            for seed in range(4)
        ]
    )
    rmse = protocol.predicted_rmse()
    assert 0.6 * rmse < float(np.sqrt(np.mean(errors**2))) < 1.4 * rmse
    with pytest.raises(ParameterError):
        run_vector_round(protocol, x, noise="none")  # type: ignore[arg-type]


def test_describe_reports_the_wire_format_and_the_guarantee() -> None:
    protocol = VectorSumProtocol.planned(10, 1.0, 5, 3.0, 1e-5, 50)
    info = protocol.describe()
    assert info["protocol"] == "vector-skellam"
    assert info["bytes_per_user"] == 10 * protocol.messages_per_coordinate * (
        protocol.bytes_per_message
    )
    assert info["noise"] == "skellam" and info["rounds"] == 5
    assert isinstance(info["epsilon"], float) and info["epsilon"] <= 3.0
    plan = protocol.plan
    assert plan is not None
    assert protocol.params.noise_variance == Fraction(plan.noise_variance, plan.honest)
    fields = protocol.result_fields(
        protocol.encode_many(np.zeros((50, 10)), DeterministicRandom(0)), 50
    )
    vector = fields["vector"]
    assert isinstance(vector, list) and len(vector) == 10 and fields["dimension"] == 10
    assert fields["estimate"] == float(np.sum(vector))
