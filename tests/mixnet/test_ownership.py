"""Tests for mixnet.ownership: Schnorr proofs that a layer's maker knew its ephemeral secret."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl import bindings

from mixnet.dleq import GROUP_ORDER, SMALL_ORDER_U, lift_to_edwards
from mixnet.errors import BadLength
from mixnet.ownership import (
    PROOF_LENGTH,
    ciphertext_digest,
    new_ephemeral,
    prove_ownership,
    verify_ownership,
)

CTX = b"binding of chain, round and hop"
DIGEST = ciphertext_digest(b"the layer's ciphertext")


def test_ephemeral_key_is_an_x25519_key_with_its_edwards_witness() -> None:
    for _ in range(20):
        key = new_ephemeral()
        assert key.public == bindings.crypto_scalarmult_base(key.secret)
        assert bindings.crypto_scalarmult_ed25519_base_noclamp(key.witness) == lift_to_edwards(
            key.public, 0
        )


def test_a_proof_verifies_and_is_48_bytes() -> None:
    key = new_ephemeral()
    proof = prove_ownership(key, DIGEST, CTX)
    assert len(proof) == PROOF_LENGTH == 48
    assert verify_ownership(key.public, proof, DIGEST, CTX)
    assert prove_ownership(key, DIGEST, CTX) != proof  # randomised


def test_a_proof_is_bound_to_key_ciphertext_and_context() -> None:
    key, other = new_ephemeral(), new_ephemeral()
    proof = prove_ownership(key, DIGEST, CTX)
    assert not verify_ownership(other.public, proof, DIGEST, CTX)
    assert not verify_ownership(key.public, proof, ciphertext_digest(b"other bytes"), CTX)
    assert not verify_ownership(key.public, proof, DIGEST, CTX + b"!")


@settings(max_examples=60, deadline=None)
@given(position=st.integers(0, PROOF_LENGTH - 1), bit=st.integers(0, 7))
def test_any_flipped_bit_breaks_the_proof(position: int, bit: int) -> None:
    key = new_ephemeral()
    proof = bytearray(prove_ownership(key, DIGEST, CTX))
    proof[position] ^= 1 << bit
    assert not verify_ownership(key.public, bytes(proof), DIGEST, CTX)


def test_a_related_key_cannot_reuse_a_proof() -> None:
    """``-E`` has the same u-coordinate; ``2·E`` is related: neither proof carries over."""
    key = new_ephemeral()
    proof = prove_ownership(key, DIGEST, CTX)
    point = lift_to_edwards(key.public, 0)
    doubled = bindings.crypto_core_ed25519_add(point, point)
    y = int.from_bytes(doubled, "little") & ((1 << 255) - 1)
    p = 2**255 - 19
    u2 = ((1 + y) * pow(1 - y, -1, p) % p).to_bytes(32, "little")
    assert not verify_ownership(u2, proof, DIGEST, CTX)


@pytest.mark.parametrize("u", sorted(SMALL_ORDER_U))
def test_small_order_keys_never_verify(u: int) -> None:
    key = new_ephemeral()
    proof = prove_ownership(key, DIGEST, CTX)
    assert not verify_ownership(u.to_bytes(32, "little"), proof, DIGEST, CTX)


def test_malformed_values_are_false_not_errors() -> None:
    key = new_ephemeral()
    proof = prove_ownership(key, DIGEST, CTX)
    assert not verify_ownership(key.public[:31], proof, DIGEST, CTX)
    assert not verify_ownership(key.public, proof[:47], DIGEST, CTX)
    assert not verify_ownership(key.public, proof, DIGEST[:31], CTX)
    assert not verify_ownership(b"\xff" * 32, proof, DIGEST, CTX)  # not canonical
    zero_c = bytes(16) + proof[16:]
    assert not verify_ownership(key.public, zero_c, DIGEST, CTX)
    big_s = proof[:16] + (GROUP_ORDER + 1).to_bytes(32, "little")
    assert not verify_ownership(key.public, big_s, DIGEST, CTX)
    with pytest.raises(TypeError):
        verify_ownership("E", proof, DIGEST, CTX)  # type: ignore[arg-type]


def test_prove_checks_its_arguments() -> None:
    key = new_ephemeral()
    with pytest.raises(BadLength):
        prove_ownership(key, DIGEST[:31], CTX)
    with pytest.raises(TypeError):
        prove_ownership(key, DIGEST, "ctx")  # type: ignore[arg-type]
