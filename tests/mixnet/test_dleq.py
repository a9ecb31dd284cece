"""Tests for mixnet.dleq: Chaum–Pedersen proofs that a revealed X25519 shared secret is right."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl import bindings
from nacl.public import PrivateKey

from mixnet import dleq
from mixnet.dleq import (
    FIELD_PRIME,
    GROUP_ORDER,
    MAX_CONTEXT_LENGTH,
    PROOF_LENGTH,
    SMALL_ORDER_U,
    InvalidPoint,
    InvalidProof,
    SharedSecretProof,
    decode_u,
    edwards_to_montgomery,
    edwards_y_to_montgomery,
    lift_to_edwards,
    montgomery_to_edwards_y,
    prove_shared_secret,
    validate_ephemeral_public,
    validate_public_key,
    verify_shared_secret,
)
from mixnet.errors import BadLength, BadSignature, DecryptionFailed
from mixnet.onion import binding_data, open_layer_with_secret, seal_layer

P = FIELD_PRIME
CTX = b"chain=test;round=7;hop=1;item=3"
IDENTITY = (1).to_bytes(32, "little")


def u_bytes(u: int) -> bytes:
    return u.to_bytes(32, "little")


def keypair() -> tuple[bytes, bytes]:
    k = os.urandom(32)
    return k, bytes(bindings.crypto_scalarmult_base(k))


def ephemeral() -> bytes:
    return bytes(PrivateKey.generate().public_key)


def flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def edwards_mul(n: int, point: bytes) -> bytes:
    """n·point by double-and-add with libsodium's add (works for any curve point)."""
    result, addend = IDENTITY, point
    while n:
        if n & 1:
            result = bytes(bindings.crypto_core_ed25519_add(result, addend))
        addend = bytes(bindings.crypto_core_ed25519_add(addend, addend))
        n >>= 1
    return result


def torsion_point() -> bytes:
    """An Edwards point of order exactly 8, found as ℓ·Q for a random curve point Q."""
    while True:
        try:
            q = lift_to_edwards(os.urandom(32), strict=False)
        except InvalidPoint:
            continue
        t = edwards_mul(GROUP_ORDER, q)
        if edwards_mul(4, t) != IDENTITY:
            return t


@pytest.fixture(scope="module")
def order8() -> bytes:
    return torsion_point()


def small_order_u_values(t8: bytes) -> set[int]:
    """u-coordinates of all 8 points of order dividing 8 (∞ encoded as 0, as X25519 does)."""
    values = set()
    for i in range(8):
        point = edwards_mul(i, t8)
        y = int.from_bytes(point, "little") & ((1 << 255) - 1)
        values.add(0 if y == 1 else edwards_y_to_montgomery(y))
    return values


# --------------------------------------------------------------------------- honest proofs


def test_honest_proof_verifies_and_matches_libsodium() -> None:
    for _ in range(20):
        k, public = keypair()
        e = ephemeral()
        proof = prove_shared_secret(k, e, context=CTX)
        assert proof.shared_secret == bindings.crypto_scalarmult(k, e)
        encoded = proof.to_bytes()
        assert len(encoded) == PROOF_LENGTH
        verify_shared_secret(public, e, proof.shared_secret, encoded, context=CTX)
        validate_public_key(public)
        validate_ephemeral_public(e)


@settings(max_examples=40, deadline=None)
@given(k=st.binary(min_size=32, max_size=32), e=st.binary(min_size=32, max_size=32),
       context=st.binary(max_size=64))  # fmt: skip
def test_property_random_keys(k: bytes, e: bytes, context: bytes) -> None:
    public = bytes(bindings.crypto_scalarmult_base(k))
    ephemeral_public = bytes(bindings.crypto_scalarmult_base(e))
    proof = prove_shared_secret(k, ephemeral_public, context=context)
    assert proof.shared_secret == bindings.crypto_scalarmult(k, ephemeral_public)
    encoded = proof.to_bytes()
    verify_shared_secret(public, ephemeral_public, proof.shared_secret, encoded, context=context)
    with pytest.raises(InvalidProof):
        verify_shared_secret(
            public, ephemeral_public, proof.shared_secret, encoded, context=context + b"x"
        )


@settings(max_examples=40, deadline=None)
@given(k=st.binary(min_size=32, max_size=32), e=st.binary(min_size=32, max_size=32))
def test_property_arbitrary_ephemeral_bytes(k: bytes, e: bytes) -> None:
    """Any 32 bytes: either publicly invalid, or provable with libsodium's exact S."""
    public = bytes(bindings.crypto_scalarmult_base(k))
    try:
        validate_ephemeral_public(e)
    except InvalidPoint:
        with pytest.raises(InvalidPoint):
            prove_shared_secret(k, e, context=CTX)
        return
    proof = prove_shared_secret(k, e, context=CTX)
    assert proof.shared_secret == bindings.crypto_scalarmult(k, e)
    verify_shared_secret(public, e, proof.shared_secret, proof.to_bytes(), context=CTX)


def test_proofs_are_randomized_but_share_the_point() -> None:
    k, _ = keypair()
    e = ephemeral()
    first = prove_shared_secret(k, e, context=CTX)
    second = prove_shared_secret(k, e, context=CTX)
    assert first.shared_point == second.shared_point
    assert first.to_bytes() != second.to_bytes()


def test_encoding_round_trip() -> None:
    k, _ = keypair()
    proof = prove_shared_secret(k, ephemeral(), context=CTX)
    encoded = proof.to_bytes()
    assert encoded == proof.shared_point + proof.challenge + proof.response
    assert SharedSecretProof.from_bytes(encoded) == proof


# --------------------------------------------------------------------------- forgeries


@pytest.fixture
def honest() -> tuple[bytes, bytes, bytes, bytes, bytes]:
    """(k, K, E, S, proof bytes) for a fresh honest proof under CTX."""
    k, public = keypair()
    e = ephemeral()
    proof = prove_shared_secret(k, e, context=CTX)
    return k, public, e, proof.shared_secret, proof.to_bytes()


def test_wrong_shared_secrets_fail(honest: tuple[bytes, bytes, bytes, bytes, bytes]) -> None:
    k, public, e, _, proof = honest
    other_e = bytes(bindings.crypto_scalarmult(k, ephemeral()))
    other_key = bytes(bindings.crypto_scalarmult(os.urandom(32), e))
    for wrong in (other_e, other_key):
        with pytest.raises(InvalidProof):
            verify_shared_secret(public, e, wrong, proof, context=CTX)


def test_proof_of_another_key_or_ephemeral_fails(
    honest: tuple[bytes, bytes, bytes, bytes, bytes],
) -> None:
    _, public, e, s, proof = honest
    k2, public2 = keypair()
    with pytest.raises(InvalidProof):  # K of another mix, everything else as proven
        verify_shared_secret(public2, e, s, proof, context=CTX)
    other = prove_shared_secret(k2, e, context=CTX)  # a valid proof for (K2, E, S2)
    with pytest.raises(InvalidProof):
        verify_shared_secret(public, e, other.shared_secret, other.to_bytes(), context=CTX)
    with pytest.raises(InvalidProof):  # E of another item
        verify_shared_secret(public, ephemeral(), s, proof, context=CTX)


def test_random_proofs_fail(honest: tuple[bytes, bytes, bytes, bytes, bytes]) -> None:
    _, public, e, s, _ = honest
    for _ in range(50):
        with pytest.raises(BadSignature):
            verify_shared_secret(public, e, s, os.urandom(PROOF_LENGTH), context=CTX)


def test_every_flipped_bit_fails(honest: tuple[bytes, bytes, bytes, bytes, bytes]) -> None:
    _, public, e, s, proof = honest
    for bit in range(PROOF_LENGTH * 8):
        with pytest.raises(BadSignature):
            verify_shared_secret(public, e, s, flip(proof, bit), context=CTX)
    for bit in range(256):
        with pytest.raises(BadSignature):
            verify_shared_secret(flip(public, bit), e, s, proof, context=CTX)
        with pytest.raises(BadSignature):
            verify_shared_secret(public, flip(e, bit), s, proof, context=CTX)
        with pytest.raises(BadSignature):
            verify_shared_secret(public, e, flip(s, bit), proof, context=CTX)


def test_other_context_fails(honest: tuple[bytes, bytes, bytes, bytes, bytes]) -> None:
    _, public, e, s, proof = honest
    for context in (b"", CTX[:-1], CTX + b"\x00", b"chain=test;round=7;hop=1;item=4"):
        with pytest.raises(InvalidProof):
            verify_shared_secret(public, e, s, proof, context=context)


def test_swapped_points_fail(honest: tuple[bytes, bytes, bytes, bytes, bytes]) -> None:
    _, public, e, s, proof = honest
    with pytest.raises(BadSignature):
        verify_shared_secret(s, e, public, proof, context=CTX)
    with pytest.raises(BadSignature):
        verify_shared_secret(public, s, e, proof, context=CTX)
    with pytest.raises(BadSignature):
        verify_shared_secret(e, public, s, proof, context=CTX)
    swapped_scalars = proof[:32] + proof[64:] + proof[32:64]
    with pytest.raises(BadSignature):
        verify_shared_secret(public, e, s, swapped_scalars, context=CTX)
    point_as_scalar = proof[32:64] + proof[:32] + proof[64:]
    with pytest.raises(BadSignature):
        verify_shared_secret(public, e, s, point_as_scalar, context=CTX)


def test_malformed_scalars_fail(honest: tuple[bytes, bytes, bytes, bytes, bytes]) -> None:
    _, public, e, s, proof = honest
    c = int.from_bytes(proof[32:64], "little")
    r = int.from_bytes(proof[64:], "little")
    variants = (
        proof[:32] + u_bytes(c + GROUP_ORDER) + proof[64:],  # same c mod ℓ, not canonical
        proof[:64] + u_bytes(r + GROUP_ORDER),
        proof[:32] + bytes(32) + proof[64:],
        proof[:64] + bytes(32),
    )
    for variant in variants:
        with pytest.raises(InvalidProof):
            SharedSecretProof.from_bytes(variant)
        with pytest.raises(InvalidProof):
            verify_shared_secret(public, e, s, variant, context=CTX)


# --------------------------------------------------------------------------- signs and lifts


def clamped_scalar(k: bytes) -> bytes:
    clamped = bytearray(k)
    clamped[0] &= 248
    clamped[31] = (clamped[31] & 127) | 64
    return bytes(bindings.crypto_core_ed25519_scalar_reduce(bytes(clamped) + bytes(32)))


def chaum_pedersen(
    witness: bytes, g2: bytes, p2: bytes, *, public: bytes, e: bytes, s: bytes, p1: bytes,
    e_bar: bytes,
) -> bytes:  # fmt: skip
    """A correctly formed Chaum–Pedersen transcript with free choices of bases and points."""
    r = bytes(bindings.crypto_core_ed25519_scalar_reduce(os.urandom(64)))
    a1 = bindings.crypto_scalarmult_ed25519_base_noclamp(r)
    a2 = bindings.crypto_scalarmult_ed25519_noclamp(r, g2)
    c = dleq._challenge(CTX, public, e, s, p1, e_bar, p2, a1, a2)
    response = bindings.crypto_core_ed25519_scalar_add(
        r, bindings.crypto_core_ed25519_scalar_mul(c, witness)
    )
    return bytes(p2 + c + response)


def test_sign_games_do_not_fool_the_verifier() -> None:
    k, public = keypair()
    e = ephemeral()
    honest = prove_shared_secret(k, e, context=CTX)
    s = honest.shared_secret
    p1 = lift_to_edwards(public)
    e_bar = lift_to_edwards(e)  # an honest E is already of prime order
    x0 = clamped_scalar(k)
    x = x0 if bindings.crypto_scalarmult_ed25519_base_noclamp(x0) == p1 else (
        bindings.crypto_core_ed25519_scalar_negate(x0))  # fmt: skip
    minus_x = bindings.crypto_core_ed25519_scalar_negate(x)
    neg_e_bar = lift_to_edwards(e, 1)
    p2 = honest.shared_point
    neg_p2 = bindings.crypto_core_ed25519_sub(IDENTITY, p2)
    kw: dict[str, Any] = {"public": public, "e": e, "s": s, "p1": p1, "e_bar": e_bar}
    # The reference transcript built this way verifies (so the helper is right) ...
    ok = chaum_pedersen(x, e_bar, p2, **kw)
    verify_shared_secret(public, e, s, ok, context=CTX)
    # ... but the negated point, the other lift of E, or the witness of -P1 do not.
    forged = (
        bytes(neg_p2) + honest.to_bytes()[32:],
        chaum_pedersen(x, neg_e_bar, neg_p2, **kw),
        chaum_pedersen(minus_x, e_bar, neg_p2, **kw),
        chaum_pedersen(x, e_bar, neg_p2, **kw),
    )
    for proof in forged:
        with pytest.raises(InvalidProof):
            verify_shared_secret(public, e, s, proof, context=CTX)
    # A wrong S (that of another E), with either lift, cannot be proven with the real k.
    other_e = ephemeral()
    other_p2 = bindings.crypto_scalarmult_ed25519_noclamp(x, lift_to_edwards(other_e))
    wrong_s = edwards_to_montgomery(other_p2)
    assert wrong_s == bindings.crypto_scalarmult(k, other_e)
    kw_wrong = dict(kw, s=wrong_s)
    for point in (other_p2, bindings.crypto_core_ed25519_sub(IDENTITY, other_p2)):
        proof = chaum_pedersen(x, lift_to_edwards(other_e), point, **kw_wrong)
        with pytest.raises(InvalidProof):
            verify_shared_secret(public, e, wrong_s, proof, context=CTX)
    # A true Chaum–Pedersen proof about the real P2, claimed (and hashed) for a wrong S.
    for point in (p2, neg_p2):
        proof = chaum_pedersen(x, e_bar, bytes(point), **kw_wrong)
        with pytest.raises(InvalidProof):
            verify_shared_secret(public, e, wrong_s, proof, context=CTX)


def test_honest_proofs_verify_whatever_the_sign_of_the_ephemeral_lift() -> None:
    k, public = keypair()
    signs = set()
    for _ in range(40):
        e_secret = os.urandom(32)
        e = bytes(bindings.crypto_scalarmult_base(e_secret))
        true_point = bindings.crypto_scalarmult_ed25519_base_noclamp(clamped_scalar(e_secret))
        signs.add(true_point[31] >> 7)
        assert edwards_to_montgomery(true_point) == e
        proof = prove_shared_secret(k, e, context=CTX)
        verify_shared_secret(public, e, proof.shared_secret, proof.to_bytes(), context=CTX)
    assert signs == {0, 1}


def test_ephemeral_with_torsion_component(order8: bytes) -> None:
    """E + T (T of order 8) gives the same S in libsodium; the proof handles it."""
    k, public = keypair()
    e = ephemeral()
    with_torsion = bindings.crypto_core_ed25519_add(lift_to_edwards(e), order8)
    y = int.from_bytes(with_torsion, "little") & ((1 << 255) - 1)
    e_t = u_bytes(edwards_y_to_montgomery(y))
    assert e_t != e
    s = bindings.crypto_scalarmult(k, e_t)
    assert s == bindings.crypto_scalarmult(k, e)
    proof = prove_shared_secret(k, e_t, context=CTX)
    assert proof.shared_secret == s
    verify_shared_secret(public, e_t, s, proof.to_bytes(), context=CTX)
    with pytest.raises(InvalidProof):  # bound to the exact E bytes
        verify_shared_secret(public, e, s, proof.to_bytes(), context=CTX)


def test_non_canonical_ephemeral_is_read_like_x25519() -> None:
    k, public = keypair()
    base_plus_p = u_bytes(9 + P)  # the base point, non-canonically
    e = ephemeral()
    high_bit = e[:31] + bytes([e[31] | 0x80])
    for encoded, expected in ((base_plus_p, public), (high_bit, bindings.crypto_scalarmult(k, e))):
        s = bindings.crypto_scalarmult(k, encoded)
        assert s == expected
        proof = prove_shared_secret(k, encoded, context=CTX)
        assert proof.shared_secret == s
        verify_shared_secret(public, encoded, s, proof.to_bytes(), context=CTX)
    with pytest.raises(InvalidPoint):  # K and S must be canonical
        decode_u(base_plus_p, strict=True)


# --------------------------------------------------------------------------- small order, twist


def test_small_order_values_are_exactly_the_torsion(order8: bytes) -> None:
    torsion_u = small_order_u_values(order8)
    assert torsion_u == {0, 1, *dleq._U_ORDER_8}
    assert torsion_u | {P - 1} == SMALL_ORDER_U


def small_order_encodings() -> list[bytes]:
    values = [*sorted(SMALL_ORDER_U), P, P + 1]
    return [u_bytes(v) for v in values] + [u_bytes(v | (1 << 255)) for v in values]


@pytest.mark.parametrize("encoded", small_order_encodings())
def test_small_order_points_are_rejected(encoded: bytes) -> None:
    k, public = keypair()
    with pytest.raises(RuntimeError):  # libsodium: all-zero shared secret
        bindings.crypto_scalarmult(k, encoded)
    honest = prove_shared_secret(k, ephemeral(), context=CTX)
    with pytest.raises(InvalidPoint):
        prove_shared_secret(k, encoded, context=CTX)
    with pytest.raises(InvalidPoint):
        validate_ephemeral_public(encoded)
    with pytest.raises(InvalidPoint):
        validate_public_key(encoded)
    with pytest.raises(InvalidPoint):
        lift_to_edwards(encoded, strict=False)
    e = ephemeral()
    args = [public, e, honest.shared_secret]
    for position in range(3):
        bad = list(args)
        bad[position] = encoded
        with pytest.raises(InvalidPoint):
            verify_shared_secret(bad[0], bad[1], bad[2], honest.to_bytes(), context=CTX)


def test_small_order_and_invalid_edwards_points_in_proof(order8: bytes) -> None:
    k, public = keypair()
    e = ephemeral()
    proof = prove_shared_secret(k, e, context=CTX).to_bytes()
    s = bindings.crypto_scalarmult(k, e)
    p2 = proof[:32]
    not_canonical = u_bytes(P + 1)  # y = p + 1 ≡ 1
    bad_points = [order8, IDENTITY, not_canonical, bindings.crypto_core_ed25519_add(p2, order8)]
    for point in bad_points:
        with pytest.raises(InvalidPoint):
            SharedSecretProof.from_bytes(bytes(point) + proof[32:])
        with pytest.raises(InvalidPoint):
            verify_shared_secret(public, e, s, bytes(point) + proof[32:], context=CTX)


def test_twist_and_torsioned_keys_are_rejected(order8: bytes) -> None:
    twist = next(u for u in range(2, 100) if _on_twist(u))
    k, public = keypair()
    with pytest.raises(InvalidPoint):
        validate_ephemeral_public(u_bytes(twist))
    with pytest.raises(InvalidPoint):
        prove_shared_secret(k, u_bytes(twist), context=CTX)
    torsioned = bindings.crypto_core_ed25519_add(lift_to_edwards(public), order8)
    public_t = u_bytes(edwards_y_to_montgomery(int.from_bytes(torsioned, "little") % (1 << 255)))
    with pytest.raises(InvalidPoint):
        validate_public_key(public_t)
    e = ephemeral()
    proof = prove_shared_secret(k, e, context=CTX)
    for bad_k in (u_bytes(twist), public_t):
        with pytest.raises(InvalidPoint):
            verify_shared_secret(bad_k, e, proof.shared_secret, proof.to_bytes(), context=CTX)


def _on_twist(u: int) -> bool:
    try:
        decode_u(u_bytes(u), strict=True)
    except InvalidPoint:
        return u not in SMALL_ORDER_U
    return False


# --------------------------------------------------------------------------- lengths and types


class _NoMath:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"math ({name}) before the length checks")


def _no_decode(*args: object, **kwargs: object) -> int:
    raise AssertionError("decoding before the length checks")


def test_lengths_are_checked_before_any_math(monkeypatch: pytest.MonkeyPatch) -> None:
    k, public = keypair()
    e = ephemeral()
    proof = prove_shared_secret(k, e, context=CTX)
    s, encoded = proof.shared_secret, proof.to_bytes()
    monkeypatch.setattr(dleq, "bindings", _NoMath())
    monkeypatch.setattr(dleq, "decode_u", _no_decode)
    for n in (0, 31, 33, 64):
        bad = os.urandom(n)
        calls: list[tuple[Any, tuple[bytes, ...]]] = [
            (prove_shared_secret, (bad, e)),
            (prove_shared_secret, (k, bad)),
            (verify_shared_secret, (bad, e, s, encoded)),
            (verify_shared_secret, (public, bad, s, encoded)),
            (verify_shared_secret, (public, e, bad, encoded)),
            (verify_shared_secret, (public, e, s, bad)),
        ]
        for function, args in calls:
            with pytest.raises(BadLength):
                function(*args, context=CTX)
        with pytest.raises(BadLength):
            SharedSecretProof.from_bytes(bad)
    too_long = bytes(MAX_CONTEXT_LENGTH + 1)
    with pytest.raises(BadLength):
        prove_shared_secret(k, e, context=too_long)
    with pytest.raises(BadLength):
        verify_shared_secret(public, e, s, encoded[:-1], context=too_long)
    with pytest.raises(BadLength):
        SharedSecretProof(bytes(31), bytes(32), bytes(32))


def test_types_are_checked() -> None:
    k, public = keypair()
    e = ephemeral()
    proof = prove_shared_secret(k, e, context=CTX)
    s, encoded = proof.shared_secret, proof.to_bytes()
    bad: Any = bytearray(32)
    with pytest.raises(TypeError):
        prove_shared_secret(bad, e, context=CTX)
    with pytest.raises(TypeError):
        verify_shared_secret(public, e, s, encoded, context="ctx")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        verify_shared_secret(public, e, s, bytearray(encoded), context=CTX)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        lift_to_edwards(public, 2)
    verify_shared_secret(public, e, s, encoded, context=CTX)
    context = bytes(MAX_CONTEXT_LENGTH)
    at_limit = prove_shared_secret(k, e, context=context)
    verify_shared_secret(public, e, s, at_limit.to_bytes(), context=context)


def test_errors_travel_as_bad_signature() -> None:
    assert issubclass(InvalidPoint, InvalidProof)
    assert issubclass(InvalidProof, BadSignature)
    assert InvalidPoint("x").code == InvalidProof("x").code == "bad-signature"


# --------------------------------------------------------------------------- field helpers


def test_field_maps_match_libsodium() -> None:
    for _ in range(20):
        point = bindings.crypto_scalarmult_ed25519_base_noclamp(
            bindings.crypto_core_ed25519_scalar_reduce(os.urandom(64))
        )
        u = bindings.crypto_sign_ed25519_pk_to_curve25519(point)
        assert edwards_to_montgomery(point) == u
        y = int.from_bytes(point, "little") & ((1 << 255) - 1)
        assert montgomery_to_edwards_y(int.from_bytes(u, "little")) == y
        assert lift_to_edwards(u, point[31] >> 7) == point
        negated = bindings.crypto_core_ed25519_sub(IDENTITY, point)
        assert lift_to_edwards(u, 1 - (point[31] >> 7)) == negated
    assert edwards_to_montgomery(bindings.crypto_scalarmult_ed25519_base_noclamp(
        (1).to_bytes(32, "little"))) == u_bytes(9)  # fmt: skip
    for bad in (-1, P, P - 1):
        with pytest.raises(ValueError):
            montgomery_to_edwards_y(bad)
    for bad in (-1, P, 1):
        with pytest.raises(ValueError):
            edwards_y_to_montgomery(bad)
    with pytest.raises(TypeError):
        montgomery_to_edwards_y(True)


# --------------------------------------------------------------------------- onion layers


def test_revealed_secret_opens_the_layer() -> None:
    mix = PrivateKey.generate()
    k, public = bytes(mix), bytes(mix.public_key)
    ad = binding_data(chain_id="test", round_id=7, hop_index=1)
    layer = seal_layer(b"layer plaintext", public, chain_id="test", round_id=7, hop_index=1)
    e = layer[:32]
    proof = prove_shared_secret(k, e, context=CTX)
    verify_shared_secret(public, e, proof.shared_secret, proof.to_bytes(), context=CTX)
    assert open_layer_with_secret(layer, public, proof.shared_secret, ad) == b"layer plaintext"
    # A tampered layer, or one made for another key, provably does not open.
    tampered = layer[:-1] + bytes([layer[-1] ^ 1])
    foreign = seal_layer(
        b"not for this mix", bytes(PrivateKey.generate().public_key),
        chain_id="test", round_id=7, hop_index=1,
    )  # fmt: skip
    for bad in (tampered, foreign):
        e_bad = bad[:32]
        bad_proof = prove_shared_secret(k, e_bad, context=CTX)
        verify_shared_secret(public, e_bad, bad_proof.shared_secret, bad_proof.to_bytes(),
                             context=CTX)  # fmt: skip
        with pytest.raises(DecryptionFailed):
            open_layer_with_secret(bad, public, bad_proof.shared_secret, ad)
    with pytest.raises(BadLength):
        open_layer_with_secret(layer[:47], public, proof.shared_secret, ad)


# --------------------------------------------------------------------------- the ephemeral's point


def _full_checks(data: bytes) -> bytes | None:
    """``Ē`` through every check: decode_u (with its Euler criterion for the twist), then the
    prime-order component; ``None`` where either refuses."""
    from mixnet.dleq import _lift, _prime_component

    try:
        return _prime_component(_lift(decode_u(data, strict=False), 0))
    except InvalidPoint:
        return None


def _fast_checks(data: bytes) -> bytes | None:
    from mixnet.dleq import _ephemeral_point

    try:
        return _ephemeral_point(data)
    except InvalidPoint:
        return None


EDGES = [*SMALL_ORDER_U, P - 2, P, P + 1, P + 2, (1 << 255) - 1, 2, 3, 9]


@settings(max_examples=400, deadline=None)
@given(
    data=st.one_of(
        st.binary(min_size=32, max_size=32),
        st.sampled_from(EDGES).map(lambda u: (u % (1 << 256)).to_bytes(32, "little")),
        st.integers(0, P - 1).map(u_bytes),
        st.integers(0, P - 1).map(lambda u: u_bytes(u | (1 << 255))),  # bit 255 set
    )
)
def test_the_ephemeral_point_skips_the_twist_check_and_decides_the_same(data: bytes) -> None:
    """Without the Euler criterion, every input is refused or mapped exactly as with it: a
    u on the twist lifts to no curve point, which libsodium's decoding refuses."""
    assert _fast_checks(data) == _full_checks(data)


def test_twist_ephemerals_are_refused_by_the_fast_path() -> None:
    twists = [u for u in range(2, 400) if _on_twist(u)]
    assert len(twists) > 100  # about half of all u
    for u in twists:
        assert _fast_checks(u_bytes(u)) is None
    k, public = keypair()
    e = ephemeral()
    proof = prove_shared_secret(k, e, context=CTX)
    with pytest.raises(InvalidPoint):
        verify_shared_secret(public, u_bytes(twists[0]), proof.shared_secret, proof.to_bytes(),
                             context=CTX)  # fmt: skip
