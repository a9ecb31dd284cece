"""Tests for mixnet.onion: 48-byte AEAD layers bound to (chain, round, hop), and the
submission box of the entry layer."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl import bindings
from nacl.public import PrivateKey

import mixnet.onion
from mixnet.errors import BadLength, DecryptionFailed, MixnetError
from mixnet.onion import (
    LAYER_OVERHEAD,
    binding_data,
    layer_key,
    onion_length,
    open_layer_with_secret,
    peel_many,
    seal_layer,
    submission_length,
    wrap,
    wrap_submission,
)
from tests.mixnet.peeling import open_layer_reference, peel

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


def test_layer_overhead_is_ephemeral_key_plus_tag() -> None:
    assert LAYER_OVERHEAD == 48
    assert onion_length(16, 3) == 16 + 3 * 48
    assert onion_length(0, 0) == 0
    # the default plan's submission (7 messages of 3 bytes, 3 mixes): 741 bytes, not 1,365
    assert submission_length(3, 3, 7) == 48 + 7 * (3 + 2 * 48) == 741
    assert submission_length(3, 1, 7) == 48 + 21


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
def test_wrong_binding_fails_authentication(chain_id: str, round_id: int, hop_index: int) -> None:
    key = PrivateKey.generate()
    onion = wrap(b"p" * 16, [bytes(key.public_key)], chain_id=CHAIN, round_id=ROUND)
    with pytest.raises(DecryptionFailed) as info:
        peel(
            onion,
            key,
            chain_id=chain_id,
            round_id=round_id,
            hop_index=hop_index,
            expected_length=len(onion),
        )
    assert info.value.code == "decryption-failed"


def test_layers_are_bound_to_their_hop() -> None:
    # The same key at two hops: peeling the outer layer as hop 1 must fail.
    key = PrivateKey.generate()
    onion = wrap(b"p" * 16, [bytes(key.public_key)] * 2, chain_id=CHAIN, round_id=ROUND)
    with pytest.raises(DecryptionFailed):
        peel(onion, key, **peel_args(hop=1, length=len(onion)))  # type: ignore[arg-type]


@pytest.mark.parametrize("delta", [-1, 1, -LAYER_OVERHEAD])
def test_wrong_length_is_refused_before_decryption(
    delta: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = PrivateKey.generate()
    onion = wrap(b"p" * 16, [bytes(key.public_key)], chain_id=CHAIN, round_id=ROUND)
    altered = onion[:delta] if delta < 0 else onion + b"\x00" * delta
    calls: list[str] = []

    class NoCrypto:
        """Stands in for libsodium: any call is recorded and fails the test."""

        def __getattr__(self, name: str) -> object:
            def refuse(*args: object) -> None:
                calls.append(name)
                raise AssertionError("no cryptography may run on a wrong-length item")

            return refuse

    monkeypatch.setattr(mixnet.onion, "_lib", NoCrypto())
    with pytest.raises(BadLength) as info:
        peel(altered, key, **peel_args(length=len(onion)))  # type: ignore[arg-type]
    assert info.value.code == "bad-length"
    assert calls == []


def test_non_bytes_onion_is_bad_length() -> None:
    key = PrivateKey.generate()
    with pytest.raises(BadLength):
        peel(bytearray(80), key, **peel_args())  # type: ignore[arg-type]


@pytest.mark.parametrize("position", [0, 31, 32, 47, 48, 63])
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
    assert isinstance(results[2], DecryptionFailed)
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


def test_binding_data_separates_fields() -> None:
    data = {
        binding_data(chain_id=c, round_id=r, hop_index=h)
        for c in ("a", "ab", "b")
        for r in (0, 1, 1 << 63)
        for h in (0, 1, 65535)
    }
    assert len(data) == 27
    with pytest.raises(ValueError):
        binding_data(chain_id="a", round_id=0, hop_index=1 << 16)


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


def test_wrap_with_no_keys_is_the_payload() -> None:
    assert wrap(b"p", [], chain_id=CHAIN, round_id=ROUND) == b"p"


def test_layer_is_x25519_blake2b_chacha20poly1305() -> None:
    """An independent opening from the primitives (the format in the module docstring)."""
    key = PrivateKey.generate()
    public = bytes(key.public_key)
    layer = seal_layer(b"inner bytes", public, chain_id=CHAIN, round_id=ROUND, hop_index=2)
    ephemeral = layer[:32]
    shared = bindings.crypto_scalarmult(bytes(key), ephemeral)
    okm = hashlib.blake2b(shared + ephemeral + public, digest_size=44, person=b"mixnet-layer-v2")
    digest = okm.digest()
    ad = binding_data(chain_id=CHAIN, round_id=ROUND, hop_index=2)
    assert layer_key(shared, ephemeral, public) == (digest[:32], digest[32:])
    aead_key, nonce = digest[:32], digest[32:]
    inner = bindings.crypto_aead_chacha20poly1305_ietf_decrypt(layer[32:], ad, nonce, aead_key)
    assert inner == b"inner bytes"
    assert open_layer_with_secret(layer, public, shared, ad) == b"inner bytes"
    with pytest.raises(DecryptionFailed):
        open_layer_with_secret(layer, public, bytes(32), ad)
    wrong_ad = binding_data(chain_id=CHAIN, round_id=ROUND, hop_index=1)
    with pytest.raises(DecryptionFailed):
        open_layer_with_secret(layer, public, shared, wrong_ad)
    with pytest.raises(BadLength):
        open_layer_with_secret(layer[:47], public, shared, ad)


def test_low_order_ephemeral_key_fails_decryption() -> None:
    key = PrivateKey.generate()
    onion = bytes(32) + b"\x00" * 32  # u = 0: X25519 gives all zeros, libsodium refuses
    with pytest.raises(DecryptionFailed):
        peel(onion, key, **peel_args(length=len(onion)))  # type: ignore[arg-type]


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_submission_box_opens_into_the_inner_onions(hops: int) -> None:
    keys = make_keys(hops)
    payloads = [bytes([i]) * 3 for i in range(7)]
    box = wrap_submission(payloads, publics(keys), chain_id=CHAIN, round_id=ROUND)
    assert len(box) == submission_length(3, hops, 7)
    items = peel_many(
        [box], keys[0], chain_id=CHAIN, round_id=ROUND, hop_index=0,
        expected_length=len(box), split=7,
    )  # fmt: skip
    assert len(items) == 7
    for payload, item in zip(payloads, items, strict=True):
        assert isinstance(item, bytes)
        assert len(item) == onion_length(3, hops - 1)
        for hop in range(1, hops):
            item = peel(
                item, keys[hop], chain_id=CHAIN, round_id=ROUND, hop_index=hop,
                expected_length=onion_length(3, hops - hop),
            )  # fmt: skip
        assert item == payload


def test_a_bad_box_fails_as_a_whole() -> None:
    keys = make_keys(2)
    box = wrap_submission([b"abc"] * 4, publics(keys), chain_id=CHAIN, round_id=ROUND)
    tampered = box[:-1] + bytes([box[-1] ^ 1])
    results = peel_many(
        [tampered, box[:-1]], keys[0], chain_id=CHAIN, round_id=ROUND, hop_index=0,
        expected_length=len(box), split=4,
    )  # fmt: skip
    assert len(results) == 8
    assert all(isinstance(r, DecryptionFailed) for r in results[:4])
    assert all(isinstance(r, BadLength) for r in results[4:])


def test_split_must_divide_the_content() -> None:
    with pytest.raises(ValueError):
        peel_many([], PrivateKey.generate(), **peel_args(length=LAYER_OVERHEAD + 10), split=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        peel_many([], PrivateKey.generate(), **peel_args(length=LAYER_OVERHEAD), split=2)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("payloads", "error"),
    [([], ValueError), (b"abc", TypeError), ([b"ab", b"abc"], ValueError), (["abc"], TypeError)],
)
def test_wrap_submission_validates(payloads: object, error: type[Exception]) -> None:
    pub = publics(make_keys(2))
    with pytest.raises(error):
        wrap_submission(payloads, pub, chain_id=CHAIN, round_id=ROUND)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        wrap_submission([b"abc"], [], chain_id=CHAIN, round_id=ROUND)
    with pytest.raises(ValueError, match="hop 0"):
        wrap_submission([b"abc"], [bytes(32)], chain_id=CHAIN, round_id=ROUND)


@pytest.mark.parametrize("split", [1, 2])
@pytest.mark.parametrize("proven", [False, True])
def test_peel_many_agrees_with_peeling_one_by_one(split: int, proven: bool) -> None:
    """``peel_many``'s inlined loop (buffers reused across onions) gives every onion what
    peeling it alone gives, whatever fails before or after it."""
    key = PrivateKey.generate()
    keys = [bytes(key.public_key)]

    def one(payload: bytes) -> bytes:
        return wrap(payload, keys, chain_id=CHAIN, round_id=ROUND, proven=proven)

    good = [one(bytes([i]) * 16) for i in range(3)]
    tampered = good[1][:-1] + bytes([good[1][-1] ^ 1])
    low_order = bytes(32) + good[2][32:]  # an all-zero ephemeral key: X25519 refuses it
    items: list[object] = [good[0], tampered, good[1], low_order, b"short", good[2], "text"]
    args = {**peel_args(length=len(good[0])), "split": split, "proven": proven}
    together = mixnet.onion.peel_many(items, key, **args)  # type: ignore[arg-type]
    alone = [r for i in items for r in mixnet.onion.peel_many([i], key, **args)]  # type: ignore[arg-type, list-item]
    assert len(together) == len(alone) == split * len(items)
    for a, b in zip(together, alone, strict=True):
        assert a == b if isinstance(b, bytes) else (type(a), str(a)) == (type(b), str(b))
    assert b"".join(r for r in together[:split]) == bytes([0]) * 16  # type: ignore[misc]
    assert [type(r) for r in together[split::split]] == [
        DecryptionFailed,
        bytes,
        DecryptionFailed,
        BadLength,
        bytes,
        BadLength,
    ]
    reference = [
        open_layer_reference(i, key, binding_data(chain_id=CHAIN, round_id=ROUND, hop_index=0),
                             skip=48 if proven else 0)
        for i in (good[0], good[1], good[2])
    ]  # fmt: skip
    assert [b"".join(together[i * split : (i + 1) * split]) for i in (0, 2, 5)] == reference  # type: ignore[arg-type]
