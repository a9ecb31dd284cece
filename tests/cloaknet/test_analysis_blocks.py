"""The analyzer's block path: payloads decoded from one buffer a block at a time and folded
into the protocol's :class:`~cloaknet.protocols.fold.MessageFold` give exactly what decoding
every payload as its own Python int and running the protocol's ``result_fields`` gives —
the same result fields, and the same error for a bad batch — in memory that does not grow
with the round."""

from __future__ import annotations

import tracemalloc
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from cloaknet.analysis import DECODE_BLOCK, analyze_round, decode_blocks, decode_messages
from cloaknet.encoding import encode_share
from cloaknet.errors import CloakError, ShareError
from cloaknet.params import CloakParams, share_width
from cloaknet.protocols import PROTOCOLS, CloakProtocol, SummationProtocol, make_protocol
from cloaknet.protocols.fold import CoordinateSums, SumFold
from cloaknet.protocols.vector import VectorParams, VectorSumProtocol
from cloaknet.protocols.vector_chain import VectorChainProtocol
from cloaknet.randomness import DeterministicRandom
from cloaknet.vectorized import exact_sum, shuffle
from mixnet.core.items import Items

USERS = 600
BIG_N = (1 << 65) + 1  # 9-byte shares: the object path
VECTOR = VectorParams.noiseless(5, 1.0, 64.0, users=40)


def _reference_decode(payloads: Sequence[bytes], modulus: int, width: int) -> NDArray[Any]:
    """Payload by payload, as the analyzer decoded before it worked in blocks: every length
    first, then every value, one Python int each."""
    for index, payload in enumerate(payloads):
        if len(payload) != width:
            raise ShareError(f"message #{index} must be {width} bytes, got {len(payload)}")
    ints = [int.from_bytes(payload, "big") for payload in payloads]
    for index, value in enumerate(ints):
        if value >= modulus:
            raise ShareError(f"message #{index} is not below the modulus {modulus}")
    if width <= 8:
        return np.array(ints, dtype=np.uint64)
    values = np.empty(len(ints), dtype=object)
    values[:] = ints
    return values


def _reference_round(
    protocol: SummationProtocol, clients: int, payloads: Sequence[bytes], seed: str
) -> dict[str, Any]:
    """What analyze_round returns when the whole batch is decoded first."""
    base: dict[str, Any] = {
        "round": 1,
        "users": clients,
        "messages": len(payloads),
        "excluded": 0,
        "protocol": protocol.name,
    }
    try:
        per_user = protocol.message_count
    except CloakError as exc:
        return {**base, "status": "error", "error": str(exc)}
    if len(payloads) != clients * per_user:
        return {
            **base,
            "status": "error",
            "error": f"expected n·m = {clients}·{per_user} = {clients * per_user} messages, "
            f"got {len(payloads)} (batch count {len(payloads)})",
        }
    try:
        messages = _reference_decode(
            list(payloads), protocol.message_modulus, protocol.bytes_per_message
        )
        fields = protocol.result_fields(messages, clients, rng=DeterministicRandom(seed))
    except CloakError as exc:
        return {**base, "status": "error", "error": str(exc)}
    return {**fields, **base, "status": "ok"}


def _as_items(payloads: Sequence[bytes], width: int) -> Items:
    return Items.from_bytes(b"".join(payloads), width, len(payloads))


@pytest.fixture(scope="module")
def protocols() -> dict[str, SummationProtocol]:
    made: dict[str, SummationProtocol] = {
        name: make_protocol(name, USERS, 1.0, 1e-6) for name in PROTOCOLS
    }
    made["vector"] = VectorChainProtocol.from_params(VECTOR)
    made["cloak-wide"] = CloakProtocol(
        CloakParams(modulus=BIG_N, precision=1000, messages=5, max_users=USERS)
    )
    return made


_ROUNDS: dict[tuple[str, int, str], list[bytes]] = {}


def _round_payloads(protocol: SummationProtocol, users: int, seed: str) -> list[bytes]:
    """Every user's messages, shuffled, as the analyzer receives them (made once per
    protocol and seed: a copy is returned)."""
    key = (repr(protocol), users, seed)
    if key not in _ROUNDS:
        _ROUNDS[key] = _make_round(protocol, users, seed)
    return list(_ROUNDS[key])


def _make_round(protocol: SummationProtocol, users: int, seed: str) -> list[bytes]:
    rng = DeterministicRandom(seed)
    if isinstance(protocol, VectorChainProtocol):
        x = np.random.default_rng(1).random((users, protocol.dimension)) / 4  # test data
        return protocol.payloads(shuffle(protocol.encode_many(x, rng), rng))
    x = np.random.default_rng(2).random(users)  # test data only
    if protocol.message_modulus >= 1 << 63:
        messages = [y for v in x for y in protocol.encode_value(float(v), rng)]
        return [encode_share(y, protocol.message_modulus) for y in messages]
    encoded = shuffle(protocol.encode_many(x, rng), rng)
    return [encode_share(int(v), protocol.message_modulus) for v in encoded]


NAMES = [*PROTOCOLS, "vector", "cloak-wide"]


def _users(protocol: SummationProtocol) -> int:
    return VECTOR.max_users if isinstance(protocol, VectorChainProtocol) else USERS


@pytest.mark.parametrize("name", NAMES)
def test_a_round_in_blocks_is_the_round_decoded_whole(
    name: str, protocols: dict[str, SummationProtocol]
) -> None:
    protocol = protocols[name]
    users = _users(protocol)
    payloads = _round_payloads(protocol, users, f"blocks-{name}")
    expected = _reference_round(protocol, users, payloads, "curator")
    assert expected["status"] == "ok", expected
    width = protocol.bytes_per_message
    for batch in (payloads, _as_items(payloads, width)):
        got = analyze_round(protocol, 1, users, len(batch), batch,
                            rng=DeterministicRandom("curator"))  # fmt: skip
        assert got == expected


@settings(max_examples=25, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("name", NAMES)
def test_a_bad_batch_gives_the_same_error_either_way(
    name: str, protocols: dict[str, SummationProtocol], data: st.DataObject
) -> None:
    """Corrupt a good batch — a value out of range, a payload of another width (only in a
    list: an Items has one width), fewer or more users, or for vectors a bad index — and the
    block path answers exactly as decoding everything first does."""
    protocol = protocols[name]
    users = _users(protocol)
    payloads = _round_payloads(protocol, users, f"bad-{name}")
    width, modulus = protocol.bytes_per_message, protocol.message_modulus
    n = len(payloads)
    clients = users
    for _ in range(data.draw(st.integers(1, 3), label="corruptions")):
        kind = data.draw(st.sampled_from(["value", "width", "users", "word"]), label="kind")
        at = data.draw(st.integers(0, n - 1), label="at")
        if kind == "value" and modulus < 1 << (8 * width):
            too_big = data.draw(st.integers(modulus, (1 << (8 * width)) - 1), label="v")
            payloads[at] = too_big.to_bytes(width, "big")
        elif kind == "width":
            payloads[at] = payloads[at] + b"\x00" if data.draw(st.booleans()) else b""
        elif kind == "users":
            clients = data.draw(st.sampled_from([0, users - 1, users + 1]), label="clients")
        else:  # any word of the right width (for vectors: an index or a share out of range)
            payloads[at] = data.draw(st.binary(min_size=width, max_size=width), label="word")
    expected = _reference_round(protocol, clients, payloads, "c")
    got = analyze_round(protocol, 1, clients, n, payloads, rng=DeterministicRandom("c"))
    assert got == expected
    if all(len(p) == width for p in payloads):
        items = _as_items(payloads, width)
        got = analyze_round(protocol, 1, clients, n, items, rng=DeterministicRandom("c"))
        assert got == expected


@settings(max_examples=80, deadline=None)
@given(
    width=st.integers(1, 10),
    data=st.data(),
)
def test_decode_blocks_is_decode_payload_by_payload(width: int, data: st.DataObject) -> None:
    top = 1 << (8 * width)
    modulus = data.draw(st.integers(2, top), label="modulus")
    count = data.draw(st.integers(0, 3 * DECODE_BLOCK // 1024), label="count")
    values = data.draw(
        st.lists(st.integers(0, top - 1), min_size=count, max_size=count), label="values"
    )
    payloads = [v.to_bytes(width, "big") for v in values]
    try:
        expected: NDArray[Any] | str = _reference_decode(payloads, modulus, width)
    except ShareError as exc:
        expected = str(exc)
    for batch in (payloads, _as_items(payloads, width) if width else payloads):
        try:
            got: NDArray[Any] | str = decode_messages(batch, modulus, width)
        except ShareError as exc:
            got = str(exc)
        if isinstance(expected, str):
            assert got == expected
        else:
            assert not isinstance(got, str)
            assert got.dtype == expected.dtype and got.tolist() == expected.tolist()


def test_blocks_span_the_batch_in_order_and_name_the_global_index() -> None:
    modulus, width = 1000, 2
    values = [i % modulus for i in range(2 * DECODE_BLOCK + 5)]
    items = Items.of([v.to_bytes(width, "big") for v in values])
    blocks = list(decode_blocks(items, modulus, width))
    assert [len(b) for b in blocks] == [DECODE_BLOCK, DECODE_BLOCK, 5]
    assert np.concatenate(blocks).tolist() == values
    bad = [v.to_bytes(width, "big") for v in values]
    bad[DECODE_BLOCK + 3] = modulus.to_bytes(width, "big")
    with pytest.raises(ShareError, match=f"#{DECODE_BLOCK + 3} is not below"):
        list(decode_blocks(Items.of(bad), modulus, width))
    # lengths are checked before any block is yielded
    bad[-1] = b"\x00"
    blocks_of_list = decode_blocks(bad, modulus, width)
    with pytest.raises(ShareError, match=f"#{len(bad) - 1} must be 2 bytes"):
        next(blocks_of_list)
    with pytest.raises(ShareError, match="#0 must be 2 bytes, got 3"):
        next(decode_blocks(Items.of([b"\x00" * 3]), modulus, width))
    assert list(decode_blocks(Items.empty(3), modulus, width)) == []  # no items, no width


def test_indexed_items_are_decoded_in_their_order() -> None:
    items = Items.of([v.to_bytes(2, "big") for v in range(50)])
    perm = np.random.default_rng(5).permutation(50).astype(np.intp)  # test data
    decoded = decode_messages(items.take(perm), 50, 2)
    assert decoded.tolist() == perm.tolist()


def test_sums_are_exact_beyond_64_bits() -> None:
    top = np.full(3 * DECODE_BLOCK, (1 << 64) - 1, dtype=np.uint64)
    fold = SumFold(lambda total, count, users, rng: {"total": total, "count": count})
    fold.add(top)
    fold.add(top[:7])
    expected = ((1 << 64) - 1) * (3 * DECODE_BLOCK + 7)
    assert fold.result_fields(1) == {"total": expected, "count": 3 * DECODE_BLOCK + 7}
    assert exact_sum(np.array([-5, 3], dtype=np.int64)) == -2
    assert exact_sum(np.array([1 << 70, 1], dtype=object)) == (1 << 70) + 1


def test_coordinate_sums_match_a_direct_count() -> None:
    vector = VectorSumProtocol(VECTOR)
    rng = np.random.default_rng(11)  # test data
    index = rng.integers(0, vector.dimension, 200_000).astype(np.uint64)
    share = rng.integers(0, VECTOR.modulus, 200_000).astype(np.uint64)
    sums: CoordinateSums = vector.coordinate_sums()
    sums.add((index << np.uint64(8 * vector.share_bytes)) | share)
    for j in range(vector.dimension):
        mine = share[index == j]
        assert int(sums.counts[j]) == mine.size
        assert (int(sums.high[j]) << 32) + int(sums.low[j]) == sum(int(v) for v in mine)


def test_the_analysis_holds_no_object_per_payload() -> None:
    """Half a million payloads (2 MB of buffer): the analysis allocates a few hundred KiB
    at most, not one Python object per payload or an array of the whole round."""
    protocol = make_protocol("bbgn", 100_000, 1.0, 1e-6)
    m, width = protocol.message_count, protocol.bytes_per_message
    count = 100_000 * m
    rows = np.zeros((count, width), dtype=np.uint8)
    rows[:, -1] = 1  # every share is 1
    items = Items(rows)
    analyze_round(protocol, 1, 100_000, count, items)  # warm up (imports, caches)
    tracemalloc.start()
    try:
        result = analyze_round(protocol, 1, 100_000, count, items)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result["status"] == "ok"
    assert result == _reference_round(protocol, 100_000, items, "unused") | {"round": 1}
    assert peak < 600_000, peak  # vs 2.4 MB of payloads; ~80 MB before the block path


@pytest.mark.parametrize("width", [3, 9])
def test_wide_and_narrow_batches_of_another_width_in_items(width: int) -> None:
    modulus = (1 << (8 * width)) - 1
    items = Items.of([b"\x01" * (width + 1)] * 4)
    with pytest.raises(ShareError, match=f"#0 must be {width} bytes, got {width + 1}"):
        decode_messages(items, modulus, width)
    assert share_width(modulus) == width
