"""Tests for mixnet.onion: layered sealed-box onions bound to (chain, round, hop)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.public import PrivateKey, SealedBox

from mixnet.errors import BadLength, BindingMismatch, DecryptionFailed, MixnetError
from mixnet.onion import (
    LAYER_OVERHEAD,
    binding_tag,
    onion_length,
    peel_many,
    wrap,
)
from tests.mixnet.peeling import peel

CHAIN = "test-chain"
ROUND = 7


def make_keys(hops: int) -> list[PrivateKey]:
    return [PrivateKey.generate() for _ in range(hops)]


def publics(keys: list[PrivateKey]) -> list[bytes]:
    return [bytes(key.public_key) for key in keys]


def peel_through(onion: bytes, keys: list[PrivateKey], payload_len: int) -> bytes:
    """Peel every layer in chain order, checking the length at each hop."""
    hops = len(keys)
    for hop, key in enumerate(keys):
        expected = onion_length(payload_len, hops - hop)
        assert len(onion) == expected
        onion = peel(
            onion,
            key,
            chain_id=CHAIN,
            round_id=ROUND,
            hop_index=hop,
            expected_length=expected,
        )
    assert len(onion) == payload_len
    return onion


def test_layer_overhead_is_sealed_box_plus_tag() -> None:
    assert LAYER_OVERHEAD == 64
    assert onion_length(16, 3) == 16 + 3 * 64
    assert onion_length(0, 0) == 0


@pytest.mark.parametrize("bad", [(-1, 1), (1, -1), (True, 1), (1.0, 1), (1, 1 << 17)])
def test_onion_length_rejects_bad_arguments(bad: tuple[object, object]) -> None:
    with pytest.raises((TypeError, ValueError)):
        onion_length(*bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("hops", [1, 3, 5])
def test_wrap_peel_round_trip(hops: int) -> None:
    keys = make_keys(hops)
    payload = b"sixteen byte msg"
    onion = wrap(payload, publics(keys), chain_id=CHAIN, round_id=ROUND)
    assert len(onion) == onion_length(len(payload), hops)
    assert peel_through(onion, keys, len(payload)) == payload


def test_empty_payload_round_trip() -> None:
    keys = make_keys(2)
    onion = wrap(b"", publics(keys), chain_id=CHAIN, round_id=ROUND)
    assert peel_through(onion, keys, 0) == b""


def test_wrapping_is_randomised() -> None:
    pub = publics(make_keys(2))
    first = wrap(b"x" * 16, pub, chain_id=CHAIN, round_id=ROUND)
    second = wrap(b"x" * 16, pub, chain_id=CHAIN, round_id=ROUND)
    assert first != second


def peel_args(hop: int = 0, length: int = 16 + LAYER_OVERHEAD) -> dict[str, object]:
    return {"chain_id": CHAIN, "round_id": ROUND, "hop_index": hop, "expected_length": length}


def test_wrong_key_fails_decryption() -> None:
    keys = make_keys(1)
    onion = wrap(b"p" * 16, publics(keys), chain_id=CHAIN, round_id=ROUND)
    with pytest.raises(DecryptionFailed) as info:
        peel(onion, PrivateKey.generate(), **peel_args())  # type: ignore[arg-type]
    assert info.value.code == "decryption-failed"


@pytest.mark.parametrize(
    ("chain_id", "round_id", "hop_index"),
    [("other-chain", ROUND, 0), (CHAIN, ROUND + 1, 0), (CHAIN, ROUND, 1)],
)
def test_binding_mismatch(chain_id: str, round_id: int, hop_index: int) -> None:
    key = PrivateKey.generate()
    onion = wrap(b"p" * 16, [bytes(key.public_key)], chain_id=CHAIN, round_id=ROUND)
    with pytest.raises(BindingMismatch) as info:
        peel(
            onion,
            key,
            chain_id=chain_id,
            round_id=round_id,
            hop_index=hop_index,
            expected_length=len(onion),
        )
    assert info.value.code == "binding-mismatch"


def test_layers_are_bound_to_their_hop() -> None:
    # The same key at two hops: peeling the outer layer as hop 1 must fail.
    key = PrivateKey.generate()
    onion = wrap(b"p" * 16, [bytes(key.public_key)] * 2, chain_id=CHAIN, round_id=ROUND)
    with pytest.raises(BindingMismatch):
        peel(onion, key, **peel_args(hop=1, length=len(onion)))  # type: ignore[arg-type]


@pytest.mark.parametrize("delta", [-1, 1, -LAYER_OVERHEAD])
def test_wrong_length_is_refused_before_decryption(
    delta: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = PrivateKey.generate()
    onion = wrap(b"p" * 16, [bytes(key.public_key)], chain_id=CHAIN, round_id=ROUND)
    altered = onion[:delta] if delta < 0 else onion + b"\x00" * delta
    calls: list[bytes] = []

    def spy(self: object, ciphertext: bytes, *args: object, **kwargs: object) -> bytes:
        calls.append(ciphertext)
        raise AssertionError("decrypt must not be called")

    monkeypatch.setattr(SealedBox, "decrypt", spy)
    with pytest.raises(BadLength) as info:
        peel(altered, key, **peel_args(length=len(onion)))  # type: ignore[arg-type]
    assert info.value.code == "bad-length"
    assert calls == []


def test_non_bytes_onion_is_bad_length() -> None:
    key = PrivateKey.generate()
    with pytest.raises(BadLength):
        peel(bytearray(80), key, **peel_args())  # type: ignore[arg-type]


@pytest.mark.parametrize("position", [0, 31, 32, 47, 48, 63, 64, 79])
def test_tampered_byte_fails_decryption(position: int) -> None:
    key = PrivateKey.generate()
    onion = bytearray(wrap(b"p" * 16, [bytes(key.public_key)], chain_id=CHAIN, round_id=ROUND))
    onion[position] ^= 0x01
    with pytest.raises(DecryptionFailed):
        peel(bytes(onion), key, **peel_args())  # type: ignore[arg-type]


def test_peel_many_mixes_good_and_bad_items() -> None:
    key = PrivateKey.generate()
    pub = [bytes(key.public_key)]
    good = [wrap(bytes([i]) * 16, pub, chain_id=CHAIN, round_id=ROUND) for i in range(3)]
    wrong_round = wrap(b"w" * 16, pub, chain_id=CHAIN, round_id=ROUND + 1)
    tampered = bytearray(good[0])
    tampered[-1] ^= 0xFF
    items: list[bytes] = [good[0], good[1][:-1], wrong_round, bytes(tampered), good[2]]
    results = peel_many(items, key, **peel_args())  # type: ignore[arg-type]
    assert results[0] == b"\x00" * 16
    assert isinstance(results[1], BadLength)
    assert isinstance(results[2], BindingMismatch)
    assert isinstance(results[3], DecryptionFailed)
    assert results[4] == b"\x02" * 16


def test_peel_many_in_threads_matches_sequential() -> None:
    key = PrivateKey.generate()
    pub = [bytes(key.public_key)]
    onions = [wrap(i.to_bytes(16, "big"), pub, chain_id=CHAIN, round_id=ROUND) for i in range(64)]
    chunks = [onions[i : i + 16] for i in range(0, len(onions), 16)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        parts = pool.map(lambda chunk: peel_many(chunk, key, **peel_args()), chunks)  # type: ignore[arg-type]
        results = [item for part in parts for item in part]
    assert results == [i.to_bytes(16, "big") for i in range(64)]


def test_peel_many_still_raises_for_bad_call_arguments() -> None:
    with pytest.raises(TypeError):
        peel_many([b""], b"not a key", **peel_args())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        peel_many([b""], PrivateKey.generate(), **peel_args(length=LAYER_OVERHEAD - 1))  # type: ignore[arg-type]


def test_peel_many_error_items_are_mixnet_errors() -> None:
    results = peel_many([b"", b"x" * 80], PrivateKey.generate(), **peel_args())  # type: ignore[arg-type]
    assert all(isinstance(item, MixnetError) for item in results)


@pytest.mark.parametrize(
    ("payload", "keys", "kwargs", "error"),
    [
        ("text", [bytes(32)], {}, TypeError),
        (bytearray(4), [bytes(32)], {}, TypeError),
        (b"p", [], {}, ValueError),
        (b"p", bytes(32), {}, TypeError),
        (b"p", [b"short"], {}, ValueError),
        (b"p", ["x" * 32], {}, TypeError),
        (b"p", [bytes(32)], {"round_id": -1}, ValueError),
        (b"p", [bytes(32)], {"round_id": 1 << 64}, ValueError),
        (b"p", [bytes(32)], {"round_id": True}, TypeError),
        (b"p", [bytes(32)], {"chain_id": ""}, ValueError),
        (b"p", [bytes(32)], {"chain_id": b"c"}, TypeError),
    ],
)
def test_wrap_validates_arguments(
    payload: object, keys: object, kwargs: dict[str, object], error: type[Exception]
) -> None:
    args: dict[str, object] = {"chain_id": CHAIN, "round_id": ROUND, **kwargs}
    with pytest.raises(error):
        wrap(payload, keys, **args)  # type: ignore[arg-type]


def test_wrap_refuses_low_order_public_key() -> None:
    # The all-zero point gives an all-zero shared secret, which libsodium refuses.
    with pytest.raises(ValueError, match="hop 1"):
        wrap(b"p", [bytes(PrivateKey.generate().public_key), bytes(32)], chain_id=CHAIN, round_id=1)


def test_binding_tag_separates_fields() -> None:
    tags = {
        binding_tag(chain_id=c, round_id=r, hop_index=h)
        for c in ("a", "ab", "b")
        for r in (0, 1, 1 << 63)
        for h in (0, 1, 65535)
    }
    assert len(tags) == 27
    assert all(len(tag) == 16 for tag in tags)
    with pytest.raises(ValueError):
        binding_tag(chain_id="a", round_id=0, hop_index=1 << 16)


@settings(max_examples=40, deadline=None)
@given(
    payload=st.binary(max_size=200),
    hops=st.integers(min_value=1, max_value=6),
    round_id=st.integers(min_value=0, max_value=(1 << 64) - 1),
)
def test_round_trip_property(payload: bytes, hops: int, round_id: int) -> None:
    keys = make_keys(hops)
    onion = wrap(payload, publics(keys), chain_id=CHAIN, round_id=round_id)
    for hop, key in enumerate(keys):
        expected = onion_length(len(payload), hops - hop)
        assert len(onion) == expected
        onion = peel(
            onion, key, chain_id=CHAIN, round_id=round_id, hop_index=hop, expected_length=expected
        )
    assert onion == payload
