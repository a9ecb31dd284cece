"""Proofs that a revealed X25519 shared secret is correct (Chaum–Pedersen on edwards25519).

A mix that proves what an onion layer holds (:mod:`mixnet.blame`) reveals the layer's X25519
shared secret ``S = X25519(k, E)`` together with a proof that ``S`` was computed with the
secret ``k`` behind its announced round key ``K = X25519(k, 9)``. Anyone can then rebuild
the layer key from ``S`` (:func:`mixnet.onion.open_layer_with_secret`) and open the layer,
so a mix can neither lie about what a layer holds nor blame an honest item.

Construction (version 1, label :data:`DOMAIN_LABEL`)
---------------------------------------------------
Notation: ``p = 2**255 - 19``; ``ℓ = 2**252 + 27742317777372353535851937790883648493``, the
order of the prime subgroup; ``B`` the edwards25519 base point (Montgomery ``u = 9``);
``d = -121665/121666 mod p``. Encodings: a *u-coordinate* is 32 bytes little-endian as in
X25519; an *Edwards point* is the RFC 8032 encoding (``y`` little-endian, bit 255 = ``x mod 2``,
the "sign"); a *scalar* is 32 bytes little-endian and canonical (``< ℓ``).

1. **u-coordinates.** ``K`` and ``S`` are strict: the integer must be ``< p`` (so bit 255 is
   clear), because X25519 only outputs canonical values. ``E`` is read as X25519 reads it:
   bit 255 ignored, then reduced mod ``p`` (so every ``E`` libsodium's ``crypto_box_seal_open``
   accepts can be proven about); the hash still takes ``E``'s 32 bytes exactly as given.
   :class:`InvalidPoint` is raised for the small-order values ``u ∈ {0, 1, p-1, u₈, u₈'}``
   (all points of order dividing 8 on the curve, the point at infinity included since
   X25519 encodes it as 0, and the order-4 point ``u = -1`` of the twist), and for ``u`` on
   the quadratic twist (no Edwards point: ``(y²-1)/(d·y²+1)`` is not a square).
2. **Lifts.** ``y = (u-1)/(u+1) mod p``; ``lift_σ(u)`` is the Edwards point with that ``y``
   and sign bit ``σ``. X25519 cannot tell ``lift_0(u)`` from ``lift_1(u) = -lift_0(u)``, and
   ``u(Q) = (1+y)/(1-y)`` maps both back to ``u``.
3. **Clamping.** ``k' = k`` with ``k'[0] &= 248``, ``k'[31] &= 127``, ``k'[31] |= 64``;
   libsodium computes ``X25519(k, u) = u(k'·Q)`` for either ``Q`` over ``u``. The witness is
   ``x₀ = k' mod ℓ`` (never 0: ``k' = 8m`` with ``0 < m < ℓ``). ``P1 = lift_0(K)`` is public;
   ``x₀·B = ±P1`` and the prover uses ``x = x₀`` or ``ℓ - x₀``, whichever gives ``x·B = P1``.
4. **Cofactor.** ``Ē = [8⁻¹ mod ℓ]·[8]·lift_0(E)``, the prime-order component of
   ``lift_0(E)`` (equal to it for any honestly made ``E``). As ``8 | k'``, the torsion part of
   a malicious ``E`` is killed by X25519 just as here: ``S = u(k'·lift_0(E)) = u(x·Ē)``.
   ``P2 = x·Ē``, with whatever sign it has.
5. **Proof.** ``r`` uniform in ``[1, ℓ)`` (64 bytes of ``os.urandom`` reduced mod ``ℓ``),
   ``A1 = r·B``, ``A2 = r·Ē``, ``c = H(A1, A2)``, ``s = r + c·x mod ℓ``; the prover draws again
   in the (probability about 2⁻²⁵²) events ``r = 0``, ``c = 0`` or ``s = 0``. The proof bytes
   are ``P2 || c || s`` (:data:`PROOF_LENGTH` = 96); ``P1`` and ``Ē`` follow from ``K``, ``E``.
6. **Challenge.** ``H`` is BLAKE2b-512 (no key, salt or personalization) of::

       u32be(len(DOMAIN_LABEL)) || DOMAIN_LABEL || u32be(len(context)) || context
       || K || E || S || P1 || Ē || P2 || A1 || A2        (each point 32 bytes)

   read as a 64-byte little-endian integer and reduced mod ``ℓ``. ``context`` (at most
   :data:`MAX_CONTEXT_LENGTH` bytes) must name what the proof is about (chain, round, hop,
   item); a proof never verifies under another context.
7. **Verification.** All lengths are checked first. Then ``K`` (strict, and ``P1`` in the
   prime-order subgroup), ``S`` (strict) and ``E`` (as in 1.) are decoded; ``P2`` must be a
   canonical point of the prime-order subgroup that is not small order
   (``crypto_core_ed25519_is_valid_point``) with ``u(P2) = S``; ``c`` and ``s`` must be
   canonical and non-zero. With ``A1' = s·B - c·P1`` and ``A2' = s·Ē - c·P2`` the proof is
   accepted iff ``H(A1', A2') = c`` (constant-time compare).

**Why it is sound.** By special soundness a valid proof yields ``x`` with ``P1 = x·B`` and
``P2 = x·Ē``. From ``u(P1) = K = u(k'·B)``, ``x ≡ ±k' (mod ℓ)``, hence
``u(P2) = u(±k'·Ē) = X25519(k, E)``: only the true ``S`` can be proven. Signs give no room:
the verifier fixes ``P1 = lift_0(K)`` and ``Ē`` from ``lift_0(E)``, so a negated ``P2`` or a
point over another ``u`` breaks the equations, while an honest proof verifies whichever
Edwards point the sender's ``E`` "really" was (only its ``u`` is ever used).

**What the verifier learns.** Nothing about ``k`` beyond the statement: ``P1`` and ``Ē`` are
functions of ``K`` and ``E``; a transcript ``(P2, c, s)`` is simulated from ``P2`` alone by
picking ``c, s`` at random, setting ``A1 = s·B - c·P1``, ``A2 = s·Ē - c·P2`` and programming
``H`` (honest-verifier zero knowledge; ``r`` is uniform and fresh, so ``s`` hides ``x``).
``P2`` itself is the exact Diffie–Hellman point behind ``S``: its sign bit is one bit more than
``S``, about this one Diffie–Hellman value (whoever made ``E = e·B`` knows it already,
``P2 = e·P1``), not about ``k``. Hiding even that bit would need an OR-proof over both lifts.

**Caveat for the protocol.** Revealing ``S`` for an ``E`` of the submitter's choice is a
Diffie–Hellman oracle for ``k``: whoever copies an honest layer's ``E`` (or uses ``-E``,
``E`` plus a torsion point, or ``a·E`` for a known ``a``) into an item that fails to open gets
``S'`` from which that honest layer's ``S`` follows. The protocol must refuse to reveal
``S`` unless the submitter proved knowledge of ``E``'s discrete logarithm (bound to the item),
or rule this out otherwise; this module only proves and checks statements. Items whose ``E``
is small order or on the twist need no proof: :func:`validate_ephemeral_public` shows it to
anyone (no honest sender makes one, and nobody without ``k`` can make one that opens).

Secret-dependent arithmetic runs in libsodium; the choice between ``x₀`` and ``ℓ - x₀``
depends on one bit that is the same for all proofs of a round. Field arithmetic in Python
only touches public values.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import struct
from dataclasses import dataclass

from nacl import bindings

from mixnet.errors import BadLength, BadSignature, InternalError

#: The field prime of Curve25519 / edwards25519.
FIELD_PRIME = 2**255 - 19
#: The order ℓ of the prime-order subgroup (and of the base point B).
GROUP_ORDER = 2**252 + 27742317777372353535851937790883648493
#: Bytes of a u-coordinate, an Edwards point, a scalar and an X25519 secret key.
POINT_LENGTH = 32
SCALAR_LENGTH = 32
#: Bytes of an encoded proof: ``P2 || c || s``.
PROOF_LENGTH = 3 * 32
#: Longest ``context`` accepted, in bytes.
MAX_CONTEXT_LENGTH = 1024
#: Domain label hashed first into every challenge.
DOMAIN_LABEL = b"mixnet/x25519-shared-secret-dleq/v1"

_P = FIELD_PRIME
_EDWARDS_D = (-121665 * pow(121666, -1, _P)) % _P
#: u-coordinates of the two Montgomery points of order 8 (each stands for two points).
_U_ORDER_8 = (
    325606250916557431795983626356110631294008115727848805560023387167927233504,
    39382357235489614581723060781553021112529911719440698176882885853963445705823,
)
#: Every u (mod p) of a point of small order on the curve (0, 1, order 8) or twist (p-1).
SMALL_ORDER_U: frozenset[int] = frozenset({0, 1, _P - 1, *_U_ORDER_8})
_INV8 = pow(8, -1, GROUP_ORDER).to_bytes(SCALAR_LENGTH, "little")
_ZERO = bytes(SCALAR_LENGTH)


class InvalidProof(BadSignature):
    """A shared-secret proof does not verify (forged, malformed, or for other inputs).

    A :class:`~mixnet.errors.BadSignature`, so it travels with wire code ``bad-signature``.
    """


class InvalidPoint(InvalidProof):
    """A u-coordinate or Edwards point is unusable: non-canonical where that is required,
    of small order, on the twist, or outside the prime-order subgroup."""


# --------------------------------------------------------------------------- input checks


def _check_bytes(value: object, name: str, length: int) -> bytes:
    """Return ``value`` if it is ``bytes`` of ``length``; ``TypeError`` / :class:`BadLength`."""
    if not isinstance(value, bytes):
        raise TypeError(f"{name} must be bytes, not {type(value).__name__}")
    if len(value) != length:
        raise BadLength(f"{name} must be {length} bytes, got {len(value)}")
    return value


def _check_context(context: object) -> bytes:
    """Return ``context`` if it is ``bytes`` of at most :data:`MAX_CONTEXT_LENGTH`."""
    if not isinstance(context, bytes):
        raise TypeError(f"context must be bytes, not {type(context).__name__}")
    if len(context) > MAX_CONTEXT_LENGTH:
        raise BadLength(f"context must be at most {MAX_CONTEXT_LENGTH} bytes, got {len(context)}")
    return context


# --------------------------------------------------------------------------- field and points


def montgomery_to_edwards_y(u: int) -> int:
    """Return ``y = (u - 1)/(u + 1) mod p`` for a field element ``u`` in ``[0, p)``.

    Raises ``TypeError`` for a non-int and ``ValueError`` if ``u`` is out of range or
    ``u = p - 1`` (where the map is undefined).
    """
    if not isinstance(u, int) or isinstance(u, bool):
        raise TypeError(f"u must be int, not {type(u).__name__}")
    if not 0 <= u < _P or u == _P - 1:
        raise ValueError("u must be in [0, p - 1)")
    return (u - 1) * pow(u + 1, -1, _P) % _P


def edwards_y_to_montgomery(y: int) -> int:
    """Return ``u = (1 + y)/(1 - y) mod p`` for ``y`` in ``[0, p)``, ``y != 1``.

    Raises ``TypeError`` for a non-int and ``ValueError`` if ``y`` is out of range or 1 (the
    neutral element, whose u-coordinate is at infinity).
    """
    if not isinstance(y, int) or isinstance(y, bool):
        raise TypeError(f"y must be int, not {type(y).__name__}")
    if not 0 <= y < _P or y == 1:
        raise ValueError("y must be in [0, p) and not 1")
    return (1 + y) * pow(1 - y, -1, _P) % _P


def _is_square(value: int) -> bool:
    """Return whether ``value`` (mod p) is a square, zero included (Euler's criterion)."""
    return value % _P == 0 or pow(value, (_P - 1) // 2, _P) == 1


def decode_u(data: bytes, *, strict: bool) -> int:
    """Decode a 32-byte u-coordinate and return it as an int in ``[0, p)``.

    ``strict`` requires the canonical encoding (integer ``< p``, so bit 255 clear), as X25519
    outputs are; otherwise the value is read as X25519 reads it (bit 255 ignored, reduced
    mod p). Raises ``TypeError`` / :class:`BadLength` for a non-bytes or wrong-length
    input, and :class:`InvalidPoint` for a non-canonical value (``strict``), a small-order
    value (:data:`SMALL_ORDER_U`) or a point on the twist.
    """
    raw = int.from_bytes(_check_bytes(data, "u-coordinate", POINT_LENGTH), "little")
    if strict and raw >= _P:
        raise InvalidPoint("u-coordinate is not canonical")
    u = (raw & ((1 << 255) - 1)) % _P
    if u in SMALL_ORDER_U:
        raise InvalidPoint("u-coordinate is a point of small order")
    y = montgomery_to_edwards_y(u)
    y2 = y * y % _P
    if not _is_square((y2 - 1) * pow(_EDWARDS_D * y2 + 1, -1, _P)):
        raise InvalidPoint("u-coordinate is not on Curve25519 (it is on the twist)")
    return u


def _lift(u: int, sign: int) -> bytes:
    """Edwards encoding of ``lift_sign(u)`` for a ``u`` already accepted by :func:`decode_u`."""
    return (montgomery_to_edwards_y(u) | (sign << 255)).to_bytes(POINT_LENGTH, "little")


def lift_to_edwards(data: bytes, sign: int = 0, *, strict: bool = True) -> bytes:
    """Return the Edwards encoding of the point over u-coordinate ``data`` with sign bit
    ``sign`` (0 or 1; the two choices are negatives of each other).

    ``data`` is decoded by :func:`decode_u` with ``strict`` (same errors); ``ValueError`` if
    ``sign`` is not 0 or 1. The result may lie outside the prime-order subgroup when
    ``data`` carries a torsion component.
    """
    if sign not in (0, 1) or isinstance(sign, bool):
        raise ValueError("sign must be 0 or 1")
    return _lift(decode_u(data, strict=strict), sign)


def edwards_to_montgomery(point: bytes) -> bytes:
    """Return the 32-byte u-coordinate of Edwards point ``point``.

    ``point`` must be canonical, in the prime-order subgroup and not small order (checked
    by libsodium's ``crypto_core_ed25519_is_valid_point``); otherwise :class:`InvalidPoint`.
    ``TypeError`` / :class:`BadLength` for a non-bytes or wrong-length input.
    """
    _check_bytes(point, "Edwards point", POINT_LENGTH)
    if not bindings.crypto_core_ed25519_is_valid_point(point):
        raise InvalidPoint("Edwards point is not a valid point of the prime-order subgroup")
    y = int.from_bytes(point, "little") & ((1 << 255) - 1)
    return edwards_y_to_montgomery(y).to_bytes(POINT_LENGTH, "little")


def _prime_component(point: bytes) -> bytes:
    """Return ``[8⁻¹ mod ℓ]·[8]·point``, the prime-order component of a curve point.

    Raises :class:`InvalidPoint` if ``point`` is not on the curve or has small order.
    """
    try:
        eight = point
        for _ in range(3):
            eight = bytes(bindings.crypto_core_ed25519_add(eight, eight))
        result = bytes(bindings.crypto_scalarmult_ed25519_noclamp(_INV8, eight))
    except RuntimeError:
        raise InvalidPoint("point is not on the curve or has small order") from None
    if not bindings.crypto_core_ed25519_is_valid_point(result):
        raise InvalidPoint("point has no prime-order component")
    return result


@functools.lru_cache(maxsize=64)
def _public_key_point(public_key: bytes) -> bytes:
    """Return ``P1 = lift_0(K)`` for a strict ``K`` whose lift is in the prime-order subgroup.

    Kept for the last keys asked about (a pure function of ``K``; a refusal is not kept): a
    trace proves and checks thousands of steps under one round key, and this costs two field
    inversions and an exponentiation (about 110 µs) each time."""
    p1 = _lift(decode_u(public_key, strict=True), 0)
    if not bindings.crypto_core_ed25519_is_valid_point(p1):
        raise InvalidPoint("public key is not in the prime-order subgroup")
    return p1


def validate_public_key(public_key: bytes) -> None:
    """Check an X25519 round public key ``K`` as the verifier does.

    ``K`` must be canonical, on the curve, not small order, and in the prime-order
    subgroup (every ``X25519(k, 9)`` is). Raises ``TypeError`` / :class:`BadLength` /
    :class:`InvalidPoint`.
    """
    _public_key_point(public_key)


def validate_ephemeral_public(ephemeral_public: bytes) -> None:
    """Check a sealed box's ephemeral public key ``E`` as the prover and verifier do.

    ``E`` is read as X25519 reads it and must be on the curve with a non-trivial
    prime-order component. If this raises :class:`InvalidPoint` no proof exists, and
    anyone can see that the item is invalid. ``TypeError`` / :class:`BadLength` for a
    non-bytes or wrong-length input.
    """
    _ephemeral_point(_check_bytes(ephemeral_public, "ephemeral_public", POINT_LENGTH))


def _ephemeral_point(ephemeral_public: bytes) -> bytes:
    """``Ē``: the prime-order component of ``lift_0(E)``, for a 32-byte ``E`` read as X25519
    reads it (bit 255 ignored, reduced mod p).

    The same checks as :func:`decode_u` (``strict=False``) and then :func:`_prime_component`,
    without the Euler criterion (89 µs in Python, the costliest step of a check): a ``u`` on
    the twist lifts to no curve point, which libsodium's decoding in :func:`_prime_component`
    refuses anyway (``tests/mixnet/test_dleq.py`` checks that both agree on any input).

    :raises InvalidPoint: ``E`` is small order, on the twist, or has no prime-order component.
    """
    u = (int.from_bytes(ephemeral_public, "little") & ((1 << 255) - 1)) % _P
    if u in SMALL_ORDER_U:
        raise InvalidPoint("u-coordinate is a point of small order")
    return _prime_component(_lift(u, 0))


# --------------------------------------------------------------------------- the proof


def _scalar_is_canonical(scalar: bytes) -> bool:
    return int.from_bytes(scalar, "little") < GROUP_ORDER


def _length_prefixed(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _challenge(context: bytes, *points: bytes) -> bytes:
    """``H`` of the module docstring over ``K, E, S, P1, Ē, P2, A1, A2`` (in that order)."""
    digest = hashlib.blake2b(digest_size=64)
    digest.update(_length_prefixed(DOMAIN_LABEL))
    digest.update(_length_prefixed(context))
    for point in points:
        digest.update(point)
    return bytes(bindings.crypto_core_ed25519_scalar_reduce(digest.digest()))


@dataclass(frozen=True, slots=True)
class SharedSecretProof:
    """A proof that ``shared_secret`` is ``X25519(k, E)`` for the ``k`` behind ``K``.

    Fields: ``shared_point`` (``P2``, the Edwards point whose u-coordinate is ``S``),
    ``challenge`` (``c``) and ``response`` (``s``), each 32 bytes. Construction checks only
    types and lengths (``TypeError`` / :class:`BadLength`); :meth:`from_bytes` and
    :func:`verify_shared_secret` check everything else.
    """

    shared_point: bytes
    challenge: bytes
    response: bytes

    def __post_init__(self) -> None:
        _check_bytes(self.shared_point, "shared_point", POINT_LENGTH)
        _check_bytes(self.challenge, "challenge", SCALAR_LENGTH)
        _check_bytes(self.response, "response", SCALAR_LENGTH)

    @property
    def shared_secret(self) -> bytes:
        """``S``, the u-coordinate of ``shared_point``; :class:`InvalidPoint` if it is bad."""
        return edwards_to_montgomery(self.shared_point)

    def to_bytes(self) -> bytes:
        """Return the :data:`PROOF_LENGTH`-byte encoding ``P2 || c || s``."""
        return self.shared_point + self.challenge + self.response

    @classmethod
    def from_bytes(cls, data: bytes) -> SharedSecretProof:
        """Decode :meth:`to_bytes` output, checking its structure.

        Raises ``TypeError`` / :class:`BadLength` for a non-bytes or wrong-length input
        (before any math), :class:`InvalidPoint` if ``P2`` is not a canonical point of the
        prime-order subgroup, and :class:`InvalidProof` if ``c`` or ``s`` is not canonical
        or is zero.
        """
        _check_bytes(data, "proof", PROOF_LENGTH)
        proof = cls(data[:32], data[32:64], data[64:])
        edwards_to_montgomery(proof.shared_point)
        for name, scalar in (("challenge", proof.challenge), ("response", proof.response)):
            if not _scalar_is_canonical(scalar) or scalar == _ZERO:
                raise InvalidProof(f"proof {name} is not a canonical non-zero scalar")
        return proof


def prove_shared_secret(
    secret_key: bytes, ephemeral_public: bytes, *, context: bytes
) -> SharedSecretProof:
    """Compute ``S = X25519(secret_key, ephemeral_public)`` and prove it (module docstring).

    ``S`` is exactly what libsodium's ``crypto_scalarmult`` returns (clamped key) and is
    available as ``proof.shared_secret``; ``proof.to_bytes()`` is what
    :func:`verify_shared_secret` takes. The nonce comes from ``os.urandom``.

    Raises ``TypeError`` / :class:`BadLength` for non-bytes or wrong-length arguments or a
    ``context`` over :data:`MAX_CONTEXT_LENGTH` (all before any math), and
    :class:`InvalidPoint` if ``ephemeral_public`` is small order or on the twist (see
    :func:`validate_ephemeral_public`); :class:`~mixnet.errors.InternalError` if libsodium
    and this module disagree (a bug).
    """
    _check_bytes(secret_key, "secret_key", SCALAR_LENGTH)
    _check_bytes(ephemeral_public, "ephemeral_public", POINT_LENGTH)
    ctx = _check_context(context)
    e_bar = _ephemeral_point(ephemeral_public)
    try:
        shared_secret = bytes(bindings.crypto_scalarmult(secret_key, ephemeral_public))
        public_key = bytes(bindings.crypto_scalarmult_base(secret_key))
    except RuntimeError:
        raise InvalidPoint("ephemeral public key gives an all-zero shared secret") from None
    p1 = _public_key_point(public_key)

    clamped = bytearray(secret_key)
    clamped[0] &= 248
    clamped[31] = (clamped[31] & 127) | 64
    x0 = bytes(bindings.crypto_core_ed25519_scalar_reduce(bytes(clamped) + _ZERO))
    clamped[:] = bytes(len(clamped))
    x0_point = bytes(bindings.crypto_scalarmult_ed25519_base_noclamp(x0))
    x = (x0, bytes(bindings.crypto_core_ed25519_scalar_negate(x0)))[x0_point[31] >> 7]
    p2 = bytes(bindings.crypto_scalarmult_ed25519_noclamp(x, e_bar))
    if bytes(bindings.crypto_scalarmult_ed25519_base_noclamp(x)) != p1:
        raise InternalError("x·B differs from lift_0(K)")
    if edwards_to_montgomery(p2) != shared_secret:
        raise InternalError("x·Ē does not map to the X25519 shared secret")

    while True:
        r = bytes(bindings.crypto_core_ed25519_scalar_reduce(os.urandom(64)))
        if r == _ZERO:
            continue
        a1 = bytes(bindings.crypto_scalarmult_ed25519_base_noclamp(r))
        a2 = bytes(bindings.crypto_scalarmult_ed25519_noclamp(r, e_bar))
        c = _challenge(ctx, public_key, ephemeral_public, shared_secret, p1, e_bar, p2, a1, a2)
        if c == _ZERO:
            continue
        s = bytes(
            bindings.crypto_core_ed25519_scalar_add(
                r, bindings.crypto_core_ed25519_scalar_mul(c, x)
            )
        )
        if s != _ZERO:
            return SharedSecretProof(shared_point=p2, challenge=c, response=s)


def verify_shared_secret(
    public_key: bytes,
    ephemeral_public: bytes,
    shared_secret: bytes,
    proof: bytes,
    *,
    context: bytes,
) -> None:
    """Return if ``proof`` shows ``shared_secret = X25519(k, ephemeral_public)`` for the
    ``k`` behind ``public_key`` (``K = X25519(k, 9)``), under ``context``; raise otherwise.

    Raises ``TypeError`` / :class:`BadLength` for non-bytes or wrong-length arguments (all
    checked before any math), :class:`InvalidPoint` for an unusable ``K``, ``E``, ``S`` or
    ``P2`` (see the module docstring), and :class:`InvalidProof` for any proof that does not
    verify. Both are :class:`~mixnet.errors.BadSignature`.
    """
    _check_bytes(public_key, "public_key", POINT_LENGTH)
    _check_bytes(ephemeral_public, "ephemeral_public", POINT_LENGTH)
    _check_bytes(shared_secret, "shared_secret", POINT_LENGTH)
    _check_bytes(proof, "proof", PROOF_LENGTH)
    ctx = _check_context(context)

    p1 = _public_key_point(public_key)
    decode_u(shared_secret, strict=True)
    e_bar = _ephemeral_point(ephemeral_public)
    parsed = SharedSecretProof.from_bytes(proof)
    if parsed.shared_secret != shared_secret:
        raise InvalidProof("proof is for another shared secret")
    c, s, p2 = parsed.challenge, parsed.response, parsed.shared_point
    try:
        a1 = bytes(
            bindings.crypto_core_ed25519_sub(
                bindings.crypto_scalarmult_ed25519_base_noclamp(s),
                bindings.crypto_scalarmult_ed25519_noclamp(c, p1),
            )
        )
        a2 = bytes(
            bindings.crypto_core_ed25519_sub(
                bindings.crypto_scalarmult_ed25519_noclamp(s, e_bar),
                bindings.crypto_scalarmult_ed25519_noclamp(c, p2),
            )
        )
    except RuntimeError:
        raise InvalidProof("proof does not verify") from None
    expected = _challenge(ctx, public_key, ephemeral_public, shared_secret, p1, e_bar, p2, a1, a2)
    if not hmac.compare_digest(expected, c):
        raise InvalidProof("proof does not verify")
