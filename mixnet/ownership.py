"""Ownership proofs: whoever made an onion layer shows it knew the layer's ephemeral secret.

Why (``docs/protocol.md``, "Trace and exclude"): a mix that cannot open a layer may reveal the
layer's X25519 shared secret ``S = X25519(k, E)`` to prove it — but only if whoever made the
layer already knew ``S``. Otherwise a garbage item that reuses an honest layer's ``E`` (or
``a·E``) would turn the revealed secret into a Diffie–Hellman oracle. With an ownership proof
the maker shows it knew ``e`` with ``E = X25519(e, 9)``, bound to the layer's ciphertext and
binding; then ``S`` tells it nothing new. A layer whose proof does not verify is provably bad
with nothing revealed at all.

Construction (label :data:`PERSONAL`, 48 bytes ``c || s``)
-----------------------------------------------------------
Notation as in :mod:`mixnet.dleq`: ``B`` the edwards25519 base point, ``ℓ`` its order,
``lift_0(u)`` the Edwards point over u-coordinate ``u`` with sign bit 0.

* **Key.** ``e`` is 32 bytes from the OS CSPRNG; ``e'`` is ``e`` clamped as X25519 clamps;
  ``x₀ = e' mod ℓ``; ``P₀ = x₀·B`` and ``E = u(P₀)`` (which is ``X25519(e, 9)``). The
  witness is ``x = x₀`` if ``P₀`` has sign bit 0, else ``ℓ - x₀``, so that
  ``x·B = lift_0(E)``. The layer's shared secret is ``X25519(e, K)`` as for any layer.
* **Proof.** ``r`` uniform in ``[1, ℓ)`` (64 bytes of ``os.urandom`` reduced), ``R = r·B``,
  ``c = BLAKE2b-128(person = PERSONAL, u32be(len(ctx)) || ctx || E || R || h)`` where ``ctx`` is
  the layer's binding (:func:`mixnet.onion.binding_data`) and ``h`` BLAKE2b-256 of the layer's
  AEAD ciphertext; ``s = r + c·x mod ℓ`` (``c`` read as a 128-bit little-endian integer). The
  prover draws again if ``r``, ``c`` or ``s`` is 0.
* **Verification.** ``E`` strict (canonical, on the curve, not small order) with
  ``P = lift_0(E)`` in the prime-order subgroup; ``0 < s < ℓ``; ``c ≠ 0``; with
  ``R' = s·B - c·P``, accept iff the hash above over ``R'`` equals ``c`` (constant time).

Soundness is Schnorr's with a 128-bit challenge (forking lemma; ``2⁻¹²⁸`` per attempt), and
the hash binds the proof to ``E``, the ciphertext and the (chain, round, hop): copying an honest
layer's ``E`` and proof onto other bytes, or using ``a·E``, needs ``x`` (or ``a·x``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct

from nacl import bindings

from mixnet.dleq import FIELD_PRIME, GROUP_ORDER, InvalidPoint, decode_u, lift_to_edwards
from mixnet.errors import BadLength

__all__ = [
    "CHALLENGE_LENGTH",
    "PERSONAL",
    "PROOF_LENGTH",
    "EphemeralKey",
    "ciphertext_digest",
    "new_ephemeral",
    "prove_ownership",
    "verify_ownership",
]

#: Bytes of an ownership proof: the 16-byte challenge and the 32-byte response.
PROOF_LENGTH = 48
CHALLENGE_LENGTH = 16
#: BLAKE2b personalisation of the challenge hash.
PERSONAL = b"mixnet-owner-v2"

_SCALAR = 32


class EphemeralKey:
    """A layer's ephemeral key: ``secret`` (32 bytes for X25519), ``public`` (``E``) and
    ``witness`` (``x`` with ``x·B = lift_0(E)``, 32 bytes little-endian)."""

    __slots__ = ("public", "secret", "witness")

    def __init__(self, secret: bytes, public: bytes, witness: bytes) -> None:
        self.secret = secret
        self.public = public
        self.witness = witness


def _clamp(secret: bytes) -> bytes:
    clamped = bytearray(secret)
    clamped[0] &= 248
    clamped[31] &= 127
    clamped[31] |= 64
    return bytes(clamped)


def new_ephemeral() -> EphemeralKey:
    """A fresh ephemeral key from the OS CSPRNG (see the module docstring)."""
    secret = os.urandom(_SCALAR)
    x0 = bindings.crypto_core_ed25519_scalar_reduce(_clamp(secret) + bytes(_SCALAR))
    point = bindings.crypto_scalarmult_ed25519_base_noclamp(x0)
    y = int.from_bytes(point, "little") & ((1 << 255) - 1)
    u = (1 + y) * pow(1 - y, -1, FIELD_PRIME) % FIELD_PRIME
    negative = point[31] & 0x80
    witness = bindings.crypto_core_ed25519_scalar_negate(x0) if negative else x0
    return EphemeralKey(secret, u.to_bytes(_SCALAR, "little"), witness)


def ciphertext_digest(ciphertext: bytes) -> bytes:
    """BLAKE2b-256 of a layer's AEAD ciphertext (what a proof is bound to)."""
    return hashlib.blake2b(ciphertext, digest_size=32).digest()


def _challenge(context: bytes, public: bytes, commitment: bytes, digest: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=CHALLENGE_LENGTH, person=PERSONAL)
    h.update(struct.pack(">I", len(context)))
    h.update(context)
    h.update(public)
    h.update(commitment)
    h.update(digest)
    return h.digest()


def prove_ownership(key: EphemeralKey, digest: bytes, context: bytes) -> bytes:
    """The 48-byte proof that the maker of a layer with ephemeral key ``key`` knew it, bound
    to ``digest`` (:func:`ciphertext_digest` of the layer's ciphertext) and ``context`` (its
    binding). Raises ``TypeError``/:class:`BadLength` for malformed arguments."""
    for name, value, length in (("digest", digest, 32), ("witness", key.witness, _SCALAR)):
        if not isinstance(value, bytes):
            raise TypeError(f"{name} must be bytes, not {type(value).__name__}")
        if len(value) != length:
            raise BadLength(f"{name} must be {length} bytes, got {len(value)}")
    if not isinstance(context, bytes):
        raise TypeError(f"context must be bytes, not {type(context).__name__}")
    while True:  # redraw in the events r = 0, c = 0 or s = 0 (probability about 2**-128)
        r = bindings.crypto_core_ed25519_scalar_reduce(os.urandom(64))
        if not any(r):
            continue
        commitment = bindings.crypto_scalarmult_ed25519_base_noclamp(r)
        c = _challenge(context, key.public, commitment, digest)
        if not any(c):
            continue
        s = bindings.crypto_core_ed25519_scalar_add(
            r, bindings.crypto_core_ed25519_scalar_mul(c + bytes(_SCALAR - CHALLENGE_LENGTH),
                                                       key.witness)
        )  # fmt: skip
        if any(s):
            return c + s


def verify_ownership(public: bytes, proof: bytes, digest: bytes, context: bytes) -> bool:
    """Whether ``proof`` shows that the maker of the layer with ephemeral key ``public``
    (32 bytes), ciphertext digest ``digest`` and binding ``context`` knew its secret.

    Never raises for hostile values: a malformed key or proof is simply ``False``. Raises
    ``TypeError`` only if an argument is not ``bytes``.
    """
    for name, value in (("public", public), ("proof", proof), ("digest", digest),
                        ("context", context)):  # fmt: skip
        if not isinstance(value, bytes):
            raise TypeError(f"{name} must be bytes, not {type(value).__name__}")
    if len(public) != _SCALAR or len(proof) != PROOF_LENGTH or len(digest) != 32:
        return False
    c, s = proof[:CHALLENGE_LENGTH], proof[CHALLENGE_LENGTH:]
    if not any(c) or not any(s) or int.from_bytes(s, "little") >= GROUP_ORDER:
        return False
    try:
        decode_u(public, strict=True)
        point = lift_to_edwards(public, 0, strict=True)
        if not bindings.crypto_core_ed25519_is_valid_point(point):
            return False
        commitment = bindings.crypto_core_ed25519_sub(
            bindings.crypto_scalarmult_ed25519_base_noclamp(s),
            bindings.crypto_scalarmult_ed25519_noclamp(
                c + bytes(_SCALAR - CHALLENGE_LENGTH), point
            ),
        )
    except (InvalidPoint, RuntimeError, ValueError):
        return False
    return hmac.compare_digest(_challenge(context, public, commitment, digest), c)
