"""Test helpers: peel one onion, raising its error (the nodes peel in batches with
:func:`mixnet.onion.peel_many`), and a reference for one layer built from PyNaCl's checked
bindings, against which ``peel_many``'s inlined loop is tested."""

from __future__ import annotations

from nacl import bindings
from nacl.public import PrivateKey

from mixnet.errors import MixnetError
from mixnet.onion import PUBLIC_KEY_LENGTH, layer_key, peel_many


def peel(
    onion: bytes,
    secret_key: PrivateKey,
    *,
    chain_id: str,
    round_id: int,
    hop_index: int,
    expected_length: int,
) -> bytes:
    """The inner bytes of ``onion``, or raise the :class:`MixnetError` peeling found."""
    (result,) = peel_many(
        [onion],
        secret_key,
        chain_id=chain_id,
        round_id=round_id,
        hop_index=hop_index,
        expected_length=expected_length,
    )
    if isinstance(result, MixnetError):
        raise result
    return result


def open_layer_reference(onion: bytes, key: PrivateKey, binding: bytes, *, skip: int) -> bytes:
    """One layer of ``onion`` opened step by step as ``docs/protocol.md`` describes it —
    X25519, the key derivation (:func:`mixnet.onion.layer_key`), ChaCha20-Poly1305 with the
    binding as associated data — skipping ``skip`` bytes of ownership proof after the
    ephemeral key. Raises PyNaCl's errors for a layer that does not open."""
    ephemeral = onion[:PUBLIC_KEY_LENGTH]
    shared = bindings.crypto_scalarmult(bytes(key), ephemeral)
    aead_key, nonce = layer_key(shared, ephemeral, bytes(key.public_key))
    return bindings.crypto_aead_chacha20poly1305_ietf_decrypt(
        onion[PUBLIC_KEY_LENGTH + skip :], binding, nonce, aead_key
    )
