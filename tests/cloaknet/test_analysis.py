"""analyze_round: the analyzer node's one path for every protocol (count check, decoding,
the protocol's analyzer and its result fields)."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from cloaknet.analysis import analyze_round, decode_messages
from cloaknet.encoding import encode_share, split
from cloaknet.errors import ShareError
from cloaknet.params import CloakParams, share_width
from cloaknet.planner import plan
from cloaknet.protocols import (
    PROTOCOLS,
    BBGNProtocol,
    BlanketProtocol,
    CentralProtocol,
    CheuProtocol,
    CloakProtocol,
    SummationProtocol,
    make_protocol,
)
from cloaknet.randomness import DeterministicRandom
from cloaknet.vectorized import shuffle

USERS = 600
COMMON = {"round", "users", "messages", "protocol", "excluded", "status"}
BIG_N = (1 << 65) + 1  # odd, beyond 64 bits: 9-byte shares


def _values(n: int, seed: int = 3) -> np.ndarray:
    # test data only (never protocol randomness)
    return np.random.default_rng(seed).random(n)


@pytest.fixture(scope="module")
def protocols() -> dict[str, SummationProtocol]:
    return {name: make_protocol(name, USERS, 1.0, 1e-6) for name in PROTOCOLS}


def _payloads(protocol: SummationProtocol, messages: np.ndarray) -> list[bytes]:
    return [encode_share(int(v), protocol.message_modulus) for v in messages.reshape(-1)]


def _round(protocol: SummationProtocol, x: np.ndarray, seed: str) -> list[bytes]:
    """Every user's messages, shuffled, as the analyzer node receives them."""
    rng = DeterministicRandom(seed)
    return _payloads(protocol, shuffle(protocol.encode_many(x, rng), rng))


@pytest.mark.parametrize("name", PROTOCOLS)
def test_result_is_the_protocols_analyzer_on_the_decoded_batch(
    name: str, protocols: dict[str, SummationProtocol]
) -> None:
    protocol = protocols[name]
    x = _values(USERS)
    payloads = _round(protocol, x, f"round-{name}")
    result = analyze_round(protocol, 7, USERS, len(payloads), payloads,
                           rng=DeterministicRandom("curator"))
    assert result["status"] == "ok", result
    assert result["round"] == 7 and result["users"] == USERS
    assert result["messages"] == USERS * int(protocol.messages_per_user) == len(payloads)
    assert result["protocol"] == name
    values = np.array([int.from_bytes(p, "big") for p in payloads], dtype=np.int64)
    direct = protocol.analyze(values, USERS, rng=DeterministicRandom("curator"))
    assert result["estimate"] == direct
    assert isinstance(result["estimate"], float)
    # a sane estimate of the sum (the noise is a few predicted RMSEs at most)
    assert abs(result["estimate"] - float(np.sum(x))) < 8 * protocol.predicted_rmse_for(x) + 1
    json.dumps(result)  # JSON-ready


def test_cloak_keeps_its_fields_and_sum_preserving_is_exact(
    protocols: dict[str, SummationProtocol],
) -> None:
    protocol = protocols["cloak-sum-preserving"]
    assert isinstance(protocol, CloakProtocol)
    x = _values(USERS, seed=9)
    payloads = _round(protocol, x, "exact")
    result = analyze_round(protocol, 1, USERS, len(payloads), payloads)
    k = protocol.params.precision
    rounded = Fraction(sum(math.floor(Fraction(float(v)) * k) for v in x), k)
    assert Fraction(result["estimate_exact"]) == rounded
    assert result["estimate"] == float(rounded)
    assert result["raw_sum"] == str(rounded.numerator * (k // rounded.denominator))
    assert result["clamped"] is None and result["precision"] == k
    assert set(result) == COMMON | {"estimate", "estimate_exact", "raw_sum", "clamped",
                                    "precision"}


def test_cloak_single_user_reports_algorithm_2_of_the_raw_sum(
    protocols: dict[str, SummationProtocol],
) -> None:
    protocol = protocols["cloak-single-user"]
    assert isinstance(protocol, CloakProtocol)
    payloads = _round(protocol, _values(USERS), "single")
    result = analyze_round(protocol, 2, USERS, len(payloads), payloads)
    modulus, k = protocol.params.modulus, protocol.params.precision
    raw = sum(int.from_bytes(p, "big") for p in payloads) % modulus
    assert result["raw_sum"] == str(raw)
    if result["clamped"] is None:
        assert Fraction(result["estimate_exact"]) == Fraction(raw, k)


def test_exact_sums_of_crafted_messages() -> None:
    """Without randomness: messages that sum to a known value give exactly that value."""
    users, rng = 60, DeterministicRandom("crafted")
    bbgn = BBGNProtocol(users, 1.0, 1e-6, precision=50)
    m, q = int(bbgn.messages_per_user), bbgn.message_modulus
    for total in (0, 1234, users * 50, -7):  # -7: noise below zero reads as negative
        shares = split(total, users * m, q, rng)
        result = analyze_round(bbgn, 1, users, len(shares), _payloads(bbgn, np.array(shares)))
        assert result["estimate"] == total / 50
    blanket = BlanketProtocol(10_000, 1.0, 1e-6, precision=4)
    ys = np.array([4] * 30 + [0] * 9_970)
    result = analyze_round(blanket, 1, 10_000, 10_000, _payloads(blanket, ys))
    g = blanket.gamma_exact
    assert result["estimate"] == float((120 - 10_000 * g * 2) / ((1 - g) * 4))
    cheu = CheuProtocol(10_000, 1.0, 1e-6)
    bits = np.zeros(10_000 * cheu.bits, dtype=np.int64)
    bits[:500] = 1
    result = analyze_round(cheu, 1, 10_000, bits.size, _payloads(cheu, bits))
    p = cheu.p_exact
    assert result["estimate"] == float((500 - p * 10_000 * cheu.bits / 2)
                                       / ((1 - p) * cheu.precision))


def test_moduli_beyond_64_bits_are_decoded_exactly() -> None:
    params = CloakParams(modulus=BIG_N, precision=1000, messages=5, max_users=20)
    protocol = CloakProtocol(params)
    x = _values(20, seed=4)
    shares = [y for v in x for y in protocol.encode_value(float(v), DeterministicRandom(1))]
    payloads = [encode_share(y, BIG_N) for y in shares]
    assert {len(p) for p in payloads} == {9}
    result = analyze_round(protocol, 3, 20, 100, payloads)
    rounded = Fraction(sum(math.floor(Fraction(float(v)) * 1000) for v in x), 1000)
    assert result["status"] == "ok" and Fraction(result["estimate_exact"]) == rounded


@pytest.mark.parametrize("name", PROTOCOLS)
def test_count_mismatch_is_an_error_never_a_sum(
    name: str, protocols: dict[str, SummationProtocol]
) -> None:
    protocol = protocols[name]
    m = int(protocol.messages_per_user)
    payloads = _round(protocol, _values(USERS), f"count-{name}")
    for clients, count, batch in (
        (USERS, len(payloads) - 1, payloads[:-1]),  # one message lost
        (USERS - 1, len(payloads), payloads),  # one user too few
        (USERS, len(payloads) + 1, payloads),  # announced count differs
    ):
        result = analyze_round(protocol, 5, clients, count, batch)
        assert result["status"] == "error"
        assert result["error"].startswith(
            f"expected n·m = {clients}·{m} = {clients * m} messages, got {len(batch)}"
        )
        assert "estimate" not in result
        assert result["protocol"] == name and set(result) == COMMON | {"error"}


def test_bad_payloads_and_refused_rounds_are_errors() -> None:
    made = plan(50, 1.0, 1e-6, mode="sum-preserving")
    protocol = CloakProtocol.from_plan(made)
    params = made.params
    payloads = [encode_share(0, params.modulus)] * (50 * params.messages)
    width = share_width(params.modulus)
    short = [*payloads[:-1], b"\x00" * (width - 1)]
    result = analyze_round(protocol, 1, 50, len(short), short)
    assert result["status"] == "error" and f"must be {width} bytes" in result["error"]
    too_big = [*payloads[:-1], (params.modulus).to_bytes(width, "big")]
    result = analyze_round(protocol, 1, 50, len(too_big), too_big)
    assert result["status"] == "error" and "not below the modulus" in result["error"]
    # more users than the modulus allows (N > 3·max_users·k): the analyzer refuses
    many = [encode_share(0, params.modulus)] * (51 * params.messages)
    result = analyze_round(protocol, 1, 51, len(many), many)
    assert result["status"] == "error" and "at most 50" in result["error"]
    assert analyze_round(protocol, 1, 0, 0, [])["status"] == "error"


def test_analysis_is_pure() -> None:
    protocol = make_protocol("blanket", 1000, 1.0, 1e-6)
    payloads = _round(protocol, _values(1000), "pure")
    first = analyze_round(protocol, 4, 1000, len(payloads), payloads)
    assert first == analyze_round(protocol, 4, 1000, len(payloads), list(payloads))


def test_central_curator_noise_comes_from_the_given_rng() -> None:
    protocol = CentralProtocol(100, 1.0, 1e-6)
    payloads = _round(protocol, _values(100), "central")
    a = analyze_round(protocol, 1, 100, 100, payloads, rng=DeterministicRandom("a"))
    b = analyze_round(protocol, 1, 100, 100, payloads, rng=DeterministicRandom("a"))
    assert a == b


@pytest.mark.parametrize("modulus", [2, 255, 256, 257, 2**32 + 1, 2**63 + 1, 2**64, BIG_N])
def test_decode_messages_inverts_encode_share(modulus: int) -> None:
    rng = DeterministicRandom(f"decode-{modulus}")
    values = [0, modulus - 1, *(rng.randbelow(modulus) for _ in range(50))]
    width = share_width(modulus)
    decoded = decode_messages([encode_share(v, modulus) for v in values], modulus, width)
    assert [int(v) for v in decoded] == values
    assert decoded.dtype == (np.uint64 if width <= 8 else object)
    assert decode_messages([], modulus, width).shape == (0,)
    if modulus < 1 << (8 * width):
        with pytest.raises(ShareError, match="#1 is not below"):
            decode_messages([encode_share(0, modulus), modulus.to_bytes(width, "big")],
                            modulus, width)
    with pytest.raises(ShareError, match="#0 must be"):
        decode_messages([b"\x00" * (width + 1)], modulus, width)
