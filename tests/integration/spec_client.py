"""A minimal cloaknet client written from the specification alone.

This module was written from ``docs/wire.md`` (wire version 2), with ``docs/chainfile.md``,
``docs/protocol.md`` and ``README.md`` for context, and checked against the known-answer
vectors in ``tests/mixnet/wire_vectors.json``. It does not import (and was written without
reading) the ``cloaknet`` or ``mixnet`` packages: it uses only the Python standard library,
``msgpack``, ``websockets`` and PyNaCl (libsodium's X25519, ChaCha20-Poly1305-IETF and
Ed25519 through ``nacl.bindings`` / ``nacl.signing``).

What it does, by section of ``docs/wire.md``:

* § 2 / § 11.1 — read the chain file (TOML): chain id, the mixes in order with their URLs
  and Ed25519 identity keys, the analyzer's URL and the explicit ``[protocol]`` parameters
  (modulus ``N``, precision ``k``, messages ``m``).
* § 4 — frames are msgpack maps with text keys, ``v = 2``; bytes are bin, text is str.
* § 8.3 — verify every round-key announcement against the chain file's identity keys, in
  chain order.
* § 11.2, § 11.3 — encode a value ``x`` into ``m`` shares mod ``N`` (sum-preserving mode:
  no noise), each a fixed-width big-endian payload.
* § 9 — every layer is ``E || ChaCha20-Poly1305(key, nonce, AD, inner)`` with
  ``key || nonce = BLAKE2b-352["mixnet-layer-v2"](S || E || K)`` and the binding data ``AD``
  of (chain, round, hop) as associated data; each payload is wrapped for hops ``L−1 … 1``
  and the ``m`` inner onions go, concatenated, into one layer for hop 0: the submission box.
* § 9.5, § 9.6 — on a chain with ``[chain] ownership_proofs = true`` every inner layer is
  ``E || c || s || ciphertext``: a Schnorr proof on edwards25519 (libsodium's ``ed25519``
  scalar and point functions) that the layer's maker knew its ephemeral secret, with the
  challenge ``BLAKE2b-128["mixnet-owner-v2"](u32be(len ctx) || ctx || E || R || h)``.
* § 6.1, § 10 — ``get-round`` / ``submit {round, client, box}`` at the entry mix, resending
  the identical frame bytes on a lost connection and re-encoding only after ``round-closed``
  / ``unknown-round``; the receipt is the box's submission digest.
* § 6.1 — ``submit-many {submissions}``: several users' submissions in one frame, answered by
  ``receipts {results}``, one ``accepted`` or ``error`` map per submission, in order.
* § 6.2, § 12 — ``subscribe`` at the analyzer until the round's ``result``.

:func:`check_vectors` rebuilds the byte-level constructions from the vectors file.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import math
import os
import random
import re
import secrets
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import msgpack
import nacl.bindings
import nacl.exceptions
import nacl.signing
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

WIRE_VERSION = 2
ANNOUNCEMENT_DOMAIN = b"mixnet/round-key-announcement/v1"
BINDING_DOMAIN = b"mixnet/onion-layer/v2"
KDF_PERSON = b"mixnet-layer-v2"
LINK_DOMAIN = b"mixnet/link-authentication/v1"
SUBMISSION_DOMAIN = b"mixnet/submission/v1"
TOKEN_DOMAIN = b"mixnet/admission-token/v1"
STEP_DOMAIN = b"mixnet/blame-step/v1"
LAYER_OVERHEAD = 48  # 32 (E) + 16 (Poly1305 tag); the binding is associated data
OWNER_PERSON = b"mixnet-owner-v2"  # § 9.6
PROOF_LENGTH = 48  # § 9.6: c (16) || s (32)
PROVEN_LAYER_OVERHEAD = LAYER_OVERHEAD + PROOF_LENGTH  # § 9.5
FIELD_P = 2**255 - 19  # § 13.2 p
GROUP_ORDER = 2**252 + 27742317777372353535851937790883648493  # § 13.2 ℓ
MAX_REPLY_BYTES = 1 << 20  # § 3: the reference client refuses replies over 1 MiB
NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")

#: Error codes after which § 10 says: fetch the round again and re-encode the value.
REENCODE_CODES = frozenset({"round-closed", "unknown-round"})


# --------------------------------------------------------------------------- errors


class SpecClientError(Exception):
    """A local failure of this client (bad chain file, bad signature, bad reply, ...)."""


class WireError(SpecClientError):
    """An ``error`` frame from a node (§ 7)."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


class VectorMismatch(SpecClientError):
    """A construction of this module does not reproduce a known-answer vector."""


# --------------------------------------------------------------------------- § 1 primitives


def u16be(x: int) -> bytes:
    return x.to_bytes(2, "big")


def u32be(x: int) -> bytes:
    return x.to_bytes(4, "big")


def u64be(x: int) -> bytes:
    return x.to_bytes(8, "big")


def lp(s: bytes) -> bytes:
    """``u32be(len(s)) || s``."""
    return u32be(len(s)) + s


def blake2b(data: bytes, bits: int, person: bytes = b"") -> bytes:
    """BLAKE2b with digest length *parameter* ``bits / 8`` (not a truncation)."""
    return hashlib.blake2b(data, digest_size=bits // 8, person=person).digest()


# --------------------------------------------------------------------------- § 2, § 11.1 chain file


@dataclass(frozen=True)
class Mix:
    name: str
    url: str
    identity: bytes  # Ed25519 public key, 32 bytes


@dataclass(frozen=True)
class Protocol:
    """The cloak's explicit parameters (§ 11.1, form 1)."""

    mode: str
    messages: int
    modulus: int
    precision: int

    @property
    def payload_length(self) -> int:
        return share_width(self.modulus)


@dataclass(frozen=True)
class Chain:
    chain_id: str
    mixes: tuple[Mix, ...]
    analyzer_url: str
    protocol: Protocol
    ownership_proofs: bool = False  # § 2: a proven chain

    @property
    def hops(self) -> int:
        return len(self.mixes)

    @property
    def submission_length(self) -> int:
        return submission_length(self.protocol.payload_length, self.hops, self.protocol.messages,
                                 proven=self.ownership_proofs)


def _require(table: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in table:
        raise SpecClientError(f"chain file: {where}.{key}: missing")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise SpecClientError(f"chain file: {where}.{key}: expected {kind.__name__}")
    return value


def parse_identity(text: str) -> bytes:
    """§ 8.1: strict standard base64 (with padding) of exactly 32 bytes."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except ValueError as exc:
        raise SpecClientError(f"identity {text!r}: not base64: {exc}") from exc
    if len(raw) != 32:
        raise SpecClientError(f"identity {text!r}: {len(raw)} bytes, expected 32")
    return raw


def parse_protocol(table: Mapping[str, Any]) -> Protocol:
    """Read ``[protocol]`` in the explicit-parameters form (§ 11.1, form 1)."""
    if "plan" in table or "name" in table:
        raise SpecClientError(
            "chain file: protocol: only the explicit form (mode/messages/modulus/precision) "
            "can be used without the project's planner (docs/wire.md § 11.1)"
        )
    mode = _require(table, "mode", str, "protocol")
    if mode not in ("sum-preserving", "single-user"):
        raise SpecClientError(f"chain file: protocol.mode: unknown mode {mode!r}")
    messages = _require(table, "messages", int, "protocol")
    precision = _require(table, "precision", int, "protocol")
    raw_modulus = table.get("modulus")
    if isinstance(raw_modulus, str) and raw_modulus.isascii() and raw_modulus.isdigit():
        modulus = int(raw_modulus)
    elif isinstance(raw_modulus, int) and not isinstance(raw_modulus, bool):
        modulus = raw_modulus
    else:
        raise SpecClientError("chain file: protocol.modulus: expected a decimal string")
    if messages < 1 or precision < 1 or modulus < 2 or modulus % 2 == 0:
        raise SpecClientError("chain file: protocol: messages, precision or modulus out of range")
    return Protocol(mode=mode, messages=messages, modulus=modulus, precision=precision)


def load_chain(path: str | os.PathLike[str]) -> Chain:
    """Read what a client needs from a chain file (§ 2, § 10 step 1)."""
    with open(path, "rb") as fh:
        doc = tomllib.load(fh)
    chain_table = doc.get("chain")
    if not isinstance(chain_table, dict):
        raise SpecClientError("chain file: [chain]: missing")
    chain_id = _require(chain_table, "id", str, "chain")
    if not NAME_RE.fullmatch(chain_id):
        raise SpecClientError(f"chain file: chain.id: invalid {chain_id!r}")
    ownership_proofs = chain_table.get("ownership_proofs", False)
    if not isinstance(ownership_proofs, bool):
        raise SpecClientError("chain file: chain.ownership_proofs: expected true or false")
    mix_tables = doc.get("mix")
    if not isinstance(mix_tables, list) or not mix_tables:
        raise SpecClientError("chain file: [[mix]]: at least one mix is required")
    mixes: list[Mix] = []
    for n, entry in enumerate(mix_tables):
        where = f"mix[{n}]"
        if not isinstance(entry, dict):
            raise SpecClientError(f"chain file: {where}: not a table")
        name = _require(entry, "name", str, where)
        url = _require(entry, "url", str, where)
        identity = parse_identity(_require(entry, "identity", str, where))
        mixes.append(Mix(name=name, url=url, identity=identity))
    analyzer = doc.get("analyzer")
    if not isinstance(analyzer, dict):
        raise SpecClientError("chain file: [analyzer]: missing")
    analyzer_url = _require(analyzer, "url", str, "analyzer")
    protocol_table = doc.get("protocol")
    if not isinstance(protocol_table, dict):
        raise SpecClientError("chain file: [protocol]: missing")
    return Chain(
        chain_id=chain_id,
        mixes=tuple(mixes),
        analyzer_url=analyzer_url,
        protocol=parse_protocol(protocol_table),
        ownership_proofs=ownership_proofs,
    )


# --------------------------------------------------------------------------- § 8 signatures


def announcement_bytes(chain_id: str, node: str, round_id: int, public_key: bytes) -> bytes:
    """§ 8.3: the bytes an announcement's Ed25519 signature covers."""
    return (
        lp(ANNOUNCEMENT_DOMAIN)
        + lp(chain_id.encode("utf-8"))
        + lp(node.encode("utf-8"))
        + u64be(round_id)
        + lp(public_key)
    )


def link_authentication_bytes(chain_id: str, node: str, nonce: bytes) -> bytes:
    """§ 8.4 (not used by clients; checked against the vectors)."""
    return lp(LINK_DOMAIN) + lp(chain_id.encode("utf-8")) + lp(node.encode("utf-8")) + lp(nonce)


def verify_signature(identity: bytes, message: bytes, signature: bytes) -> bool:
    try:
        nacl.signing.VerifyKey(identity).verify(message, signature)
    except (nacl.exceptions.BadSignatureError, ValueError, TypeError):
        return False
    return True


def verify_announcements(chain: Chain, round_id: int, announcements: object) -> list[bytes]:
    """§ 10 step 2: check every announcement, in chain order; return ``K_0 … K_{L−1}``."""
    if not isinstance(announcements, list) or len(announcements) != chain.hops:
        raise SpecClientError(f"round {round_id}: expected {chain.hops} announcements")
    keys: list[bytes] = []
    for hop, (mix, ann) in enumerate(zip(chain.mixes, announcements, strict=True)):
        if not isinstance(ann, dict):
            raise SpecClientError(f"announcement {hop}: not a map")
        node, ann_round = ann.get("node"), ann.get("round")
        public_key, signature = ann.get("public_key"), ann.get("signature")
        if node != mix.name:
            raise SpecClientError(f"announcement {hop}: node {node!r}, expected {mix.name!r}")
        if not _is_int(ann_round) or ann_round != round_id:
            raise SpecClientError(f"announcement {hop}: round {ann_round!r}, expected {round_id}")
        if not isinstance(public_key, bytes) or len(public_key) != 32:
            raise SpecClientError(f"announcement {hop}: public_key is not 32 bytes")
        if not isinstance(signature, bytes) or len(signature) != 64:
            raise SpecClientError(f"announcement {hop}: signature is not 64 bytes")
        signed = announcement_bytes(chain.chain_id, mix.name, round_id, public_key)
        if not verify_signature(mix.identity, signed, signature):
            raise SpecClientError(f"announcement {hop} ({mix.name}): bad signature")
        keys.append(public_key)
    return keys


# --------------------------------------------------------------------------- § 11 payloads


def share_width(modulus: int) -> int:
    """§ 11.2: ``w = max(1, ceil(bitlength(N − 1) / 8))``."""
    return max(1, ((modulus - 1).bit_length() + 7) // 8)


def encode_share(value: int, modulus: int) -> bytes:
    """§ 11.2: a share as a fixed-width unsigned big-endian byte string."""
    if not 0 <= value < modulus:
        raise SpecClientError(f"share {value} not in [0, {modulus})")
    return value.to_bytes(share_width(modulus), "big")


def payload_is_valid(payload: bytes, modulus: int) -> bool:
    """§ 11.2: exactly ``w`` bytes and a value ``< N``."""
    return len(payload) == share_width(modulus) and int.from_bytes(payload, "big") < modulus


def quantize(x: float, precision: int) -> int:
    """§ 11.3 step 1: ``floor(x·k)`` on the exact real value of the binary64 ``x``."""
    if not isinstance(x, float | int) or isinstance(x, bool):
        raise SpecClientError(f"value {x!r} is not a number")
    if math.isnan(x) or not 0 <= x <= 1:
        raise SpecClientError(f"value {x!r} is not in [0, 1]")
    return math.floor(Fraction(x) * precision)


def uniform_below(modulus: int) -> int:
    """A uniform integer in ``[0, N)`` from the OS CSPRNG, by rejection (§ 11.3 step 3)."""
    bits = (modulus - 1).bit_length()
    nbytes = (bits + 7) // 8
    mask = (1 << bits) - 1
    while True:
        r = int.from_bytes(os.urandom(nbytes), "big") & mask
        if r < modulus:
            return r


def split_shares(value: int, modulus: int, messages: int,
                 random_shares: Sequence[int] | None = None) -> list[int]:
    """§ 11.3 step 3: ``m − 1`` uniform shares and one that fixes the sum mod ``N``."""
    if random_shares is None:
        random_shares = [uniform_below(modulus) for _ in range(messages - 1)]
    if len(random_shares) != messages - 1:
        raise SpecClientError("split_shares: need m − 1 random shares")
    last = (value - sum(random_shares)) % modulus
    return [*random_shares, last]


def encode_value(x: float, protocol: Protocol,
                 random_shares: Sequence[int] | None = None) -> list[bytes]:
    """Algorithm 1 in sum-preserving mode: ``m`` payloads of ``w`` bytes for ``x ∈ [0, 1]``."""
    if protocol.mode != "sum-preserving":
        raise SpecClientError(
            f"mode {protocol.mode!r}: this minimal client only implements sum-preserving mode"
        )
    v = quantize(x, protocol.precision)
    shares = split_shares(v, protocol.modulus, protocol.messages, random_shares)
    return [encode_share(y, protocol.modulus) for y in shares]


# --------------------------------------------------------------------------- § 9 onions


def binding_data(chain_id: str, round_id: int, hop: int) -> bytes:
    """§ 9.1: ``AD(chain_id, round, i)``, the associated data of hop ``i``'s layer."""
    return lp(BINDING_DOMAIN) + lp(chain_id.encode("utf-8")) + u64be(round_id) + u16be(hop)


def layer_key(shared: bytes, ephemeral: bytes, recipient: bytes) -> tuple[bytes, bytes]:
    """§ 9.2 step 3: ``key || nonce = BLAKE2b-352["mixnet-layer-v2"](S || E || K)``."""
    okm = blake2b(shared + ephemeral + recipient, 352, person=KDF_PERSON)
    return okm[:32], okm[32:]


def onion_length(payload_length: int, layers: int, proven: bool = False) -> int:
    """§ 9.3: ``w + 48·n``; § 9.5, on a proven chain: ``w + 96·n``."""
    return payload_length + (PROVEN_LAYER_OVERHEAD if proven else LAYER_OVERHEAD) * layers


def submission_length(payload_length: int, hops: int, messages: int,
                      proven: bool = False) -> int:
    """§ 9.3: ``48 + m·(w + 48·(L − 1))``; § 9.5: ``48 + m·(w + 96·(L − 1))``."""
    return LAYER_OVERHEAD + messages * onion_length(payload_length, hops - 1, proven)


# --------------------------------------------------------------------------- § 9.6 ownership


def _le(value: int) -> bytes:
    return value.to_bytes(32, "little")


def lift_0(u_bytes: bytes) -> bytes:
    """§ 13.2 / § 9.6: ``lift_0(u)``, the Edwards point with ``y = (u − 1)/(u + 1)`` and sign
    bit 0 (for a ``u < p − 1``)."""
    u = int.from_bytes(u_bytes, "little")
    return _le((u - 1) * pow(u + 1, -1, FIELD_P) % FIELD_P)


@dataclass(frozen=True)
class OwnerKey:
    """§ 9.6 "Key": every value derived from a layer's ephemeral secret ``e``."""

    secret: bytes  # e
    clamped: bytes  # e'
    scalar: bytes  # x₀ = e' mod ℓ
    scalar_point: bytes  # P₀ = x₀·B
    sign_bit: int  # of P₀
    witness: bytes  # x: x₀, or ℓ − x₀ if P₀'s sign bit is 1
    public: bytes  # E = u(P₀) = X25519(e, 9)


def owner_key(e: bytes) -> OwnerKey:
    """§ 9.6 "Key"."""
    clamped = bytearray(e)
    clamped[0] &= 248
    clamped[31] &= 127
    clamped[31] |= 64
    x0 = int.from_bytes(clamped, "little") % GROUP_ORDER
    point = nacl.bindings.crypto_scalarmult_ed25519_base_noclamp(_le(x0))
    sign = point[31] >> 7
    y = int.from_bytes(point, "little") & ((1 << 255) - 1)
    public = _le((1 + y) * pow(1 - y, -1, FIELD_P) % FIELD_P)
    witness = x0 if sign == 0 else GROUP_ORDER - x0
    return OwnerKey(e, bytes(clamped), _le(x0), point, sign, _le(witness), public)


def owner_challenge_input(ctx: bytes, public: bytes, commitment: bytes, digest: bytes) -> bytes:
    """§ 9.6 "Challenge": ``u32be(len(ctx)) || ctx || E || R || h``."""
    return lp(ctx) + public + commitment + digest


def owner_challenge(ctx: bytes, public: bytes, commitment: bytes, digest: bytes) -> bytes:
    """§ 9.6: ``H(ctx, E, R, h) = BLAKE2b-128["mixnet-owner-v2"](…)``."""
    return blake2b(owner_challenge_input(ctx, public, commitment, digest), 128,
                   person=OWNER_PERSON)


@dataclass(frozen=True)
class OwnershipProof:
    """§ 9.6 "Proof", with its intermediate values (for the vector checks)."""

    digest: bytes  # h = BLAKE2b-256(ct)
    random: bytes  # the 64 random bytes r was reduced from
    r: bytes
    commitment: bytes  # R = r·B
    challenge_input: bytes
    c: bytes
    s: bytes

    @property
    def proof(self) -> bytes:
        return self.c + self.s


def prove_ownership(key: OwnerKey, ciphertext: bytes, ctx: bytes,
                    random_bytes: bytes | None = None) -> OwnershipProof:
    """§ 9.6 "Proof" for a layer with ephemeral key ``key``, AEAD ciphertext ``ciphertext`` and
    binding data ``ctx``. ``random_bytes`` (64 bytes, for the vectors) fixes ``r``; by default
    it is drawn from the OS CSPRNG, again while ``r``, ``c`` or ``s`` is 0."""
    digest = blake2b(ciphertext, 256)
    x = int.from_bytes(key.witness, "little")
    while True:
        raw = os.urandom(64) if random_bytes is None else random_bytes
        r = int.from_bytes(raw, "little") % GROUP_ORDER
        if r == 0:
            if random_bytes is not None:
                raise SpecClientError("prove_ownership: r = 0")
            continue
        commitment = nacl.bindings.crypto_scalarmult_ed25519_base_noclamp(_le(r))
        message = owner_challenge_input(ctx, key.public, commitment, digest)
        c = blake2b(message, 128, person=OWNER_PERSON)
        s = (r + int.from_bytes(c, "little") * x) % GROUP_ORDER
        if any(c) and s != 0:
            return OwnershipProof(digest, raw, _le(r), commitment, message, c, _le(s))
        if random_bytes is not None:
            raise SpecClientError("prove_ownership: c = 0 or s = 0")


def verify_ownership(public: bytes, proof: bytes, digest: bytes, ctx: bytes) -> bool:
    """§ 9.6 "Verification": true or false, never an error."""
    if len(public) != 32 or len(proof) != PROOF_LENGTH or len(digest) != 32:
        return False
    if int.from_bytes(public, "little") >= FIELD_P - 1:  # strict, and lift_0 is defined
        return False
    point = lift_0(public)
    if not nacl.bindings.crypto_core_ed25519_is_valid_point(point):
        return False
    c, s = proof[:16], int.from_bytes(proof[16:], "little")
    if not any(c) or not 0 < s < GROUP_ORDER:
        return False
    commitment = nacl.bindings.crypto_core_ed25519_sub(
        nacl.bindings.crypto_scalarmult_ed25519_base_noclamp(_le(s)),
        nacl.bindings.crypto_scalarmult_ed25519_noclamp(c + bytes(16), point),
    )
    return hmac.compare_digest(owner_challenge(ctx, public, commitment, digest), c)


def layer_is_owned(item: bytes, chain_id: str, round_id: int, hop: int) -> bool:
    """§ 13.3 item 6: whether a proven layer's ownership proof verifies at ``hop``."""
    if len(item) < PROVEN_LAYER_OVERHEAD:
        return False
    return verify_ownership(item[:32], item[32:80], blake2b(item[80:], 256),
                            binding_data(chain_id, round_id, hop))


# --------------------------------------------------------------------------- § 9 layers


@dataclass(frozen=True)
class Layer:
    """Every intermediate value of one layer (§ 9.2; with ``owner`` a proven layer, § 9.5),
    for the vector checks."""

    hop: int
    ephemeral_public: bytes
    shared_secret: bytes
    kdf_input: bytes
    key: bytes
    nonce: bytes
    associated_data: bytes
    plaintext: bytes
    ciphertext: bytes
    owner_key: OwnerKey | None = None
    owner: OwnershipProof | None = None

    @property
    def proof(self) -> bytes:
        return b"" if self.owner is None else self.owner.proof

    @property
    def layer(self) -> bytes:
        return self.ephemeral_public + self.proof + self.ciphertext


def seal_layer(recipient: bytes, inner: bytes, chain_id: str, round_id: int, hop: int,
               ephemeral_secret: bytes | None = None, *, proven: bool = False,
               proof_random: bytes | None = None) -> Layer:
    """§ 9.2: ``layer(hop, recipient, inner)``, step by step; with ``proven``, § 9.5's
    ``proven_layer`` (``proof_random``: the 64 bytes ``r`` is reduced from, for the vectors)."""
    e = os.urandom(32) if ephemeral_secret is None else ephemeral_secret
    E = nacl.bindings.crypto_scalarmult_base(e)
    try:
        S = nacl.bindings.crypto_scalarmult(e, recipient)
    except Exception as exc:  # libsodium refuses an all-zero result
        raise SpecClientError("round key is unusable (all-zero shared secret)") from exc
    if not any(S):
        raise SpecClientError("round key is unusable (all-zero shared secret)")
    key, nonce = layer_key(S, E, recipient)
    ad = binding_data(chain_id, round_id, hop)
    ciphertext = nacl.bindings.crypto_aead_chacha20poly1305_ietf_encrypt(inner, ad, nonce, key)
    if not proven:
        return Layer(hop, E, S, S + E + recipient, key, nonce, ad, inner, ciphertext)
    if hop < 1:
        raise SpecClientError("the entry mix's layer never carries an ownership proof")
    okey = owner_key(e)
    if okey.public != E:
        raise SpecClientError("internal: u(x₀·B) differs from X25519(e, 9)")
    owner = prove_ownership(okey, ciphertext, ad, proof_random)
    return Layer(hop, E, S, S + E + recipient, key, nonce, ad, inner, ciphertext, okey, owner)


def open_with_secret(layer: bytes, shared: bytes, recipient: bytes, chain_id: str,
                     round_id: int, hop: int, proven: bool = False) -> bytes:
    """§ 9.2 "Opening" and § 13.1, from the shared secret ``S`` (§ 9.5: skipping a proven
    layer's ownership proof): the inner bytes, or :class:`SpecClientError` if the layer does
    not authenticate."""
    skip = PROOF_LENGTH if proven else 0
    if len(layer) < LAYER_OVERHEAD + skip:
        raise SpecClientError("layer too short")
    key, nonce = layer_key(shared, layer[:32], recipient)
    ad = binding_data(chain_id, round_id, hop)
    try:
        return bytes(nacl.bindings.crypto_aead_chacha20poly1305_ietf_decrypt(
            layer[32 + skip:], ad, nonce, key))
    except nacl.exceptions.CryptoError as exc:
        raise SpecClientError("decryption-failed: the layer does not authenticate") from exc


def open_layer(layer: bytes, round_secret: bytes, chain_id: str, round_id: int, hop: int,
               proven: bool = False) -> bytes:
    """§ 9.2 "Opening" as mix ``hop`` does it, with its round secret key (§ 9.5: a proven
    layer's ownership proof is skipped, not checked)."""
    if len(layer) < LAYER_OVERHEAD:
        raise SpecClientError("layer shorter than 48 bytes")
    try:
        S = nacl.bindings.crypto_scalarmult(round_secret, layer[:32])
    except Exception as exc:  # an all-zero shared secret
        raise SpecClientError("decryption-failed: all-zero shared secret") from exc
    K = nacl.bindings.crypto_scalarmult_base(round_secret)
    return open_with_secret(layer, S, K, chain_id, round_id, hop, proven)


@dataclass(frozen=True)
class Submission:
    """A submission box (§ 9.3) with every layer: ``inner[j]`` are inner onion ``j``'s
    layers in hop order (hop 1 first; empty with one mix, or for an item given as is)."""

    payloads: tuple[bytes, ...]
    inner: tuple[tuple[Layer, ...], ...]
    box_layer: Layer
    onions: tuple[bytes, ...] = ()

    @property
    def box(self) -> bytes:
        return self.box_layer.layer

    @property
    def items(self) -> list[bytes]:
        """The inner onions (the hop-1 items; with one mix, the payloads)."""
        if self.onions:
            return list(self.onions)
        return [layers[0].layer if layers else payload
                for layers, payload in zip(self.inner, self.payloads, strict=True)]


def wrap_submission(payloads: Sequence[bytes], chain_id: str, round_id: int,
                    round_keys: Sequence[bytes],
                    ephemeral_secrets: Mapping[tuple[int, int], bytes] | None = None,
                    *, proven: bool = False,
                    proof_randoms: Mapping[tuple[int, int], bytes] | None = None,
                    first_hops: Mapping[int, int] | None = None) -> Submission:
    """§ 9.3: each payload wrapped for hops ``L−1 … 1`` (innermost first), then one layer for
    hop 0 around the concatenated inner onions; with ``proven`` every inner layer carries its
    ownership proof (§ 9.5). ``ephemeral_secrets`` and ``proof_randoms`` (for the vectors) map
    ``(j, hop)`` to the secret and proof randomness of payload ``j``'s layer at ``hop``, and
    ``(-1, 0)`` to the box's; by default every layer gets fresh OS randomness.
    ``first_hops`` (for garbage tests) maps ``j`` to the innermost hop payload ``j`` is wrapped
    for (``payloads[j]`` is then an item for the next hop, not a payload)."""
    if not payloads:
        raise SpecClientError("wrap: need payloads")
    if not round_keys:
        raise SpecClientError("wrap: need at least one round key")
    secrets_ = ephemeral_secrets or {}
    randoms = proof_randoms or {}
    last = len(round_keys) - 1
    inner: list[tuple[Layer, ...]] = []
    onions: list[bytes] = []
    for j, payload in enumerate(payloads):
        layers: list[Layer] = []
        o = payload
        for i in reversed(range(1, (first_hops or {}).get(j, last) + 1)):
            layer = seal_layer(round_keys[i], o, chain_id, round_id, i, secrets_.get((j, i)),
                               proven=proven, proof_random=randoms.get((j, i)))
            layers.append(layer)
            o = layer.layer
        layers.reverse()
        inner.append(tuple(layers))
        onions.append(o)
    if len({len(o) for o in onions}) != 1:
        raise SpecClientError("wrap: the inner onions differ in length")
    box_layer = seal_layer(round_keys[0], b"".join(onions), chain_id, round_id, 0,
                           secrets_.get((-1, 0)))
    result = Submission(tuple(payloads), tuple(inner), box_layer, tuple(onions))
    if first_hops is None:
        expected = submission_length(len(payloads[0]), len(round_keys), len(payloads), proven)
        if len(result.box) != expected:
            raise SpecClientError("internal: box of the wrong length")
    return result


def garbage_item(chain_id: str, round_id: int, hop: int, length: int, *, owned: bool) -> bytes:
    """An item for mix ``hop`` of a proven chain that no key opens (for tests of § 13.3):
    random bytes (its ownership proof fails: ``no-owner``), or with ``owned`` a fresh ``E``
    with a valid ownership proof (§ 9.6) over random ciphertext (``undecryptable``)."""
    if length < PROVEN_LAYER_OVERHEAD:
        raise SpecClientError("garbage_item: too short for a proven layer")
    filler = os.urandom(length - 32 - PROOF_LENGTH)
    if not owned:
        return os.urandom(32 + PROOF_LENGTH) + filler
    key = owner_key(os.urandom(32))
    proof = prove_ownership(key, filler, binding_data(chain_id, round_id, hop)).proof
    return key.public + proof + filler


def cut(plaintext: bytes, messages: int) -> list[bytes]:
    """§ 9.3: the entry mix cuts an opened box into ``m`` consecutive equal items."""
    if messages < 1 or len(plaintext) % messages:
        raise SpecClientError("box content does not divide into m items")
    n = len(plaintext) // messages
    return [plaintext[j * n:(j + 1) * n] for j in range(messages)]


def submission_digest(box: bytes) -> bytes:
    """§ 9.4: ``BLAKE2b-256["mixnet-submit"](box)``."""
    return blake2b(box, 256, person=b"mixnet-submit")


def item_digest(item: bytes) -> bytes:
    """§ 9.4: BLAKE2b-128 of an item."""
    return blake2b(item, 128)


def admission_fields(client_seed: bytes, chain_id: str, round_id: int, box: bytes,
                     token: bytes | None = None) -> dict[str, Any]:
    """§ 6.1 "Admission": the ``client``, ``credential``, ``signature`` (and ``token``)
    fields of a ``submit`` frame signed with the client's Ed25519 seed."""
    key = nacl.signing.SigningKey(client_seed)
    credential = bytes(key.verify_key)
    message = (lp(SUBMISSION_DOMAIN) + lp(chain_id.encode("utf-8")) + u64be(round_id)
               + lp(submission_digest(box)))
    fields: dict[str, Any] = {
        "client": base64.b64encode(credential).decode("ascii"),
        "credential": credential,
        "signature": key.sign(message).signature,
    }
    if token is not None:
        fields["token"] = token
    return fields


def token_bytes(chain_id: str, credential: bytes, expires: int) -> bytes:
    """§ 6.1 "Admission": the bytes an issuer signs for a token."""
    return lp(TOKEN_DOMAIN) + lp(chain_id.encode("utf-8")) + lp(credential) + u64be(expires)


# --------------------------------------------------------------------------- § 4 frames


def encode_frame(frame_type: str, **fields: Any) -> bytes:
    """A frame: ``type`` first, the fields in the order given, ``v`` last (as the vectors)."""
    frame: dict[str, Any] = {"type": frame_type, **fields, "v": WIRE_VERSION}
    packed = msgpack.packb(frame, use_bin_type=True)
    assert isinstance(packed, bytes)
    return packed


def _no_duplicates(pairs: list[tuple[Any, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if not isinstance(key, str):
            raise SpecClientError("frame: a map key is not a str")
        if key in result:
            raise SpecClientError(f"frame: duplicate key {key!r}")
        result[key] = value
    return result


def _no_ext(code: int, data: bytes) -> Any:
    raise SpecClientError(f"frame: extension type {code} refused")


def decode_frame(data: bytes) -> dict[str, Any]:
    """Decode one frame (§ 4): exactly one msgpack map, text keys, ``v = 1``, str ``type``."""
    try:
        frame = msgpack.unpackb(
            data, raw=False, strict_map_key=False,
            object_pairs_hook=_no_duplicates, ext_hook=_no_ext, timestamp=0,
        )
    except SpecClientError:
        raise
    except Exception as exc:
        raise SpecClientError(f"frame: not one msgpack value: {exc}") from exc
    if not isinstance(frame, dict):
        raise SpecClientError("frame: top level is not a map")
    if not _is_int(frame.get("v")) or frame["v"] != WIRE_VERSION:
        raise SpecClientError(f"frame: unsupported version {frame.get('v')!r}")
    if not isinstance(frame.get("type"), str):
        raise SpecClientError("frame: missing type")
    return frame


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _expect(frame: Mapping[str, Any], frame_type: str) -> None:
    if frame["type"] == "error":
        code, reason = frame.get("code"), frame.get("reason", "")
        if not isinstance(code, str):
            raise SpecClientError("error frame without a str code")
        raise WireError(code, reason if isinstance(reason, str) else "")
    if frame["type"] != frame_type:
        raise SpecClientError(f"expected a {frame_type!r} frame, got {frame['type']!r}")


# --------------------------------------------------------------------------- § 3 transport


async def _backoff(attempt: int, cap: float = 1.0) -> None:
    await asyncio.sleep(random.uniform(0, min(cap, 0.05 * 2**attempt)))


class Link:
    """One websocket to one node: one request in flight; identical resend on a lost link (§ 3)."""

    def __init__(self, url: str, *, retry_for: float = 60.0) -> None:
        self.url = url
        self.retry_for = retry_for
        self._ws: ClientConnection | None = None
        self.resends = 0  # how many times a request was resent after a lost connection
        #: Test hook: drop the connection right after the next request of this frame type
        #: is sent, before its reply arrives (to exercise the identical-resend path, § 10).
        self.drop_next: str | None = None

    async def _connection(self) -> ClientConnection:
        if self._ws is None:
            self._ws = await connect(
                self.url, max_size=MAX_REPLY_BYTES, compression=None,
                ping_interval=20, ping_timeout=60, open_timeout=10,
            )
        return self._ws

    async def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()

    async def request(self, frame: bytes) -> dict[str, Any]:
        """Send ``frame`` and return the decoded reply, resending the same bytes on loss."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.retry_for
        attempt = 0
        while True:
            try:
                ws = await self._connection()
                await ws.send(frame)
                if self.drop_next is not None and decode_frame(frame)["type"] == self.drop_next:
                    self.drop_next = None
                    ws.transport.abort()  # a lost TCP connection, not a closing handshake
                reply = await ws.recv()
            except (ConnectionClosed, OSError, InvalidHandshake, TimeoutError) as exc:
                self._ws = None
                if loop.time() > give_up:
                    raise SpecClientError(f"{self.url}: connection lost: {exc!r}") from exc
                self.resends += 1
                await _backoff(attempt)
                attempt += 1
                continue
            if not isinstance(reply, bytes):
                raise SpecClientError(f"{self.url}: a text message is not a frame")
            return decode_frame(reply)

    async def __aenter__(self) -> Link:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# --------------------------------------------------------------------------- § 10 the client


@dataclass(frozen=True)
class OpenRound:
    round_id: int
    keys: tuple[bytes, ...]
    deadline: float


@dataclass(frozen=True)
class Receipt:
    """§ 10 step 6: ``(round, client, submission_digest(box))``."""

    round_id: int
    client: str
    digest: bytes
    frame: bytes = field(repr=False)  # the exact ``submit`` bytes, for an identical resend


@dataclass(frozen=True)
class RoundResult:
    """§ 12.1: the fields a client reads, plus the whole object."""

    round_id: int
    status: str
    users: int | None
    excluded: int | None
    estimate_exact: Fraction | None
    raw_sum: int | None
    raw: dict[str, Any] = field(repr=False)


async def get_round(chain: Chain, entry: Link, *, attempts: int = 10) -> OpenRound:
    """§ 10 step 2: ``get-round`` and verify the reply and every announcement."""
    for attempt in range(attempts):
        reply = await entry.request(encode_frame("get-round"))
        try:
            _expect(reply, "round")
        except WireError as exc:
            if exc.code == "unknown-round" and attempt + 1 < attempts:
                await _backoff(attempt)
                continue
            raise
        round_id = reply.get("round")
        if not isinstance(round_id, int) or isinstance(round_id, bool) \
                or not 0 <= round_id < 2**63:
            raise SpecClientError("round: bad round id")
        if reply.get("messages") != chain.protocol.messages:
            raise SpecClientError(
                f"parameter-mismatch: messages {reply.get('messages')!r} "
                f"!= chain file's {chain.protocol.messages}"
            )
        if reply.get("payload_length") != chain.protocol.payload_length:
            raise SpecClientError(
                f"parameter-mismatch: payload_length {reply.get('payload_length')!r} "
                f"!= chain file's {chain.protocol.payload_length}"
            )
        deadline = reply.get("deadline")
        if not isinstance(deadline, float | int) or isinstance(deadline, bool):
            raise SpecClientError("round: bad deadline")
        keys = verify_announcements(chain, round_id, reply.get("announcements"))
        return OpenRound(round_id=round_id, keys=tuple(keys), deadline=float(deadline))
    raise SpecClientError("get-round: no open round")  # pragma: no cover


async def submit_value(chain: Chain, entry: Link, x: float, *, max_reencodes: int = 10) -> Receipt:
    """§ 10 steps 2–7 for one value: one user, one ``submit``."""
    quantize(x, chain.protocol.precision)  # refuse a bad value before any network traffic
    for attempt in range(max_reencodes):
        open_round = await get_round(chain, entry)
        payloads = encode_value(x, chain.protocol)
        box = wrap_submission(payloads, chain.chain_id, open_round.round_id, open_round.keys,
                              proven=chain.ownership_proofs).box
        if len(box) != chain.submission_length:
            raise SpecClientError("internal: box of the wrong length")
        client = secrets.token_hex(16)
        frame = encode_frame("submit", round=open_round.round_id, client=client, box=box)
        reply = await entry.request(frame)  # resends these exact bytes on a lost connection
        try:
            _expect(reply, "accepted")
        except WireError as exc:
            if exc.code in REENCODE_CODES:
                await _backoff(attempt + 3)
                continue  # the round is gone: fetch a new one and encode afresh
            raise
        if reply.get("round") != open_round.round_id or reply.get("client") != client:
            raise SpecClientError(f"accepted: names {reply.get('round')!r}/{reply.get('client')!r}")
        return Receipt(open_round.round_id, client, submission_digest(box), frame)
    raise SpecClientError(f"value {x!r}: no round took it after {max_reencodes} tries")


async def submit_many(chain: Chain, entry: Link, xs: Sequence[float], *,
                      malformed: bool = False) -> list[Receipt]:
    """§ 6.1 ``submit-many``: one user per value, every submission in one frame (one round).
    With ``malformed``, one more element whose box is one byte short goes first; its result
    must be ``bad-length`` and the others must be stored all the same."""
    for x in xs:
        quantize(x, chain.protocol.precision)
    open_round = await get_round(chain, entry)
    elements: list[dict[str, Any]] = []
    boxes: list[bytes] = []
    for x in xs:
        box = wrap_submission(encode_value(x, chain.protocol), chain.chain_id,
                              open_round.round_id, open_round.keys,
                              proven=chain.ownership_proofs).box
        boxes.append(box)
        elements.append({"round": open_round.round_id, "client": secrets.token_hex(16),
                         "box": box})
    if malformed:
        elements.insert(0, {"round": open_round.round_id, "client": secrets.token_hex(16),
                            "box": boxes[0][:-1]})
    frame = encode_frame("submit-many", submissions=elements)
    reply = await entry.request(frame)
    _expect(reply, "receipts")
    results = reply.get("results")
    if not isinstance(results, list) or len(results) != len(elements):
        raise SpecClientError("receipts: one result per submission expected")
    receipts = []
    for n, (element, result) in enumerate(zip(elements, results, strict=True)):
        if not isinstance(result, dict) or not isinstance(result.get("type"), str):
            raise SpecClientError(f"receipts: result {n} is not a frame map")
        if malformed and n == 0:
            if result.get("type") != "error" or result.get("code") != "bad-length":
                raise SpecClientError(f"receipts: the short box got {result!r}")
            continue
        _expect(result, "accepted")
        if result.get("round") != element["round"] or result.get("client") != element["client"]:
            raise SpecClientError(f"receipts: result {n} names another submission")
        single = encode_frame("submit", round=element["round"], client=element["client"],
                              box=element["box"])
        receipts.append(Receipt(element["round"], element["client"],
                                submission_digest(element["box"]), single))
    return receipts


async def submit_garbage(chain: Chain, entry: Link, *, hop: int, owned: bool) -> Receipt:
    """For tests of § 13.3 on a proven chain: one submission whose first inner onion turns,
    at ``hop`` (1 … L−1), into an item no key opens — with a valid ownership proof
    (``owned``: the mix there accuses it ``undecryptable``) or without (``no-owner``). Its
    other payloads are valid shares of 0. The chain should exclude the whole submission."""
    if not chain.ownership_proofs or not 1 <= hop < chain.hops:
        raise SpecClientError("submit_garbage: needs a proven chain and 1 ≤ hop ≤ L − 1")
    open_round = await get_round(chain, entry)
    w = chain.protocol.payload_length
    garbage = garbage_item(chain.chain_id, open_round.round_id, hop,
                           onion_length(w, chain.hops - hop, proven=True), owned=owned)
    payloads = [garbage, *encode_value(0.0, chain.protocol)[1:]]
    box = wrap_submission(payloads, chain.chain_id, open_round.round_id, open_round.keys,
                          proven=True, first_hops={0: hop - 1}).box
    if len(box) != chain.submission_length:
        raise SpecClientError("internal: box of the wrong length")
    client = secrets.token_hex(16)
    frame = encode_frame("submit", round=open_round.round_id, client=client, box=box)
    reply = await entry.request(frame)
    _expect(reply, "accepted")  # the entry mix does not look into the items (§ 6.1)
    return Receipt(open_round.round_id, client, submission_digest(box), frame)


async def resend(chain: Chain, receipt: Receipt) -> None:
    """Resend a stored submission's identical bytes on a new connection (§ 10 step 7): the
    entry mix must answer ``accepted`` again without counting the value twice."""
    async with Link(chain.mixes[0].url) as entry:
        reply = await entry.request(receipt.frame)
    _expect(reply, "accepted")
    if reply.get("round") != receipt.round_id or reply.get("client") != receipt.client:
        raise SpecClientError(f"accepted: names {reply.get('round')!r}/{reply.get('client')!r}")


def parse_result(frame: Mapping[str, Any]) -> RoundResult:
    """§ 12.1: read a result object (unknown fields are ignored)."""
    round_id, status = frame.get("round"), frame.get("status")
    if not _is_int(round_id) or not isinstance(status, str):
        raise SpecClientError("result: missing round or status")
    assert isinstance(round_id, int)
    exact: Fraction | None = None
    text = frame.get("estimate_exact")
    if isinstance(text, str):
        num, sep, den = text.partition("/")
        if not sep or not re.fullmatch(r"-?[0-9]+", num) or not re.fullmatch(r"[0-9]+", den):
            raise SpecClientError(f"result: estimate_exact {text!r} is not 'num/den'")
        exact = Fraction(int(num), int(den))
    raw_sum_text = frame.get("raw_sum")
    raw_sum: int | None = None
    if isinstance(raw_sum_text, str) and raw_sum_text.isascii() and raw_sum_text.isdigit():
        raw_sum = int(raw_sum_text)
    users, excluded = frame.get("users"), frame.get("excluded")
    return RoundResult(
        round_id=round_id,
        status=status,
        users=users if _is_int(users) else None,
        excluded=excluded if _is_int(excluded) else None,
        estimate_exact=exact,
        raw_sum=raw_sum,
        raw=dict(frame),
    )


async def subscribe(chain: Chain, round_id: int, *, timeout: float = 300.0) -> RoundResult:
    """§ 6.2 / § 10 step 8: ``subscribe {round}`` at the analyzer until ``result``."""
    frame = encode_frame("subscribe", round=round_id)
    loop = asyncio.get_running_loop()
    give_up = loop.time() + timeout
    async with Link(chain.analyzer_url) as analyzer:
        k = 0
        while True:
            reply = await analyzer.request(frame)
            if reply["type"] == "pending":
                if loop.time() > give_up:
                    raise SpecClientError(f"round {round_id}: no result after {timeout} s")
                await _backoff(k)
                k += 1
                continue
            _expect(reply, "result")
            return parse_result(reply)


@dataclass(frozen=True)
class Outcome:
    receipts: tuple[Receipt, ...]
    results: dict[int, RoundResult]
    resends: int
    garbage: tuple[Receipt, ...] = ()  # submit_garbage's submissions

    @property
    def estimate_exact(self) -> Fraction:
        """The exact total over every round the values landed in."""
        total = Fraction(0)
        for result in self.results.values():
            if result.status != "ok" or result.estimate_exact is None:
                raise SpecClientError(f"round {result.round_id}: status {result.status!r}")
            total += result.estimate_exact
        return total


async def submit_and_sum(chain_path: str | os.PathLike[str], values: Sequence[float], *,
                         drop_first_reply: bool = False, resend_first: bool = False,
                         garbage: Sequence[tuple[int, bool]] = (),
                         many: bool = False) -> Outcome:
    """Submit each value as one user and return the analyzer's result for its round(s).

    ``drop_first_reply`` drops the connection right after the first ``submit`` is sent
    (before its reply), so that the submission goes through the identical-resend path;
    ``resend_first`` resends the first submission's identical frame once every value is in
    (the entry mix must acknowledge it again without counting it twice). ``garbage`` (a
    proven chain only): ``(hop, owned)`` for each submission of :func:`submit_garbage` to
    send first; the chain should exclude them. With ``many`` the values go in one
    ``submit-many`` frame (:func:`submit_many`, with one malformed element) instead.
    """
    chain = load_chain(chain_path)
    receipts: list[Receipt] = []
    bad: list[Receipt] = []
    async with Link(chain.mixes[0].url) as entry:
        for hop, owned in garbage:
            bad.append(await submit_garbage(chain, entry, hop=hop, owned=owned))
        if many:
            receipts += await submit_many(chain, entry, values, malformed=True)
        for n, x in enumerate([] if many else values):
            if drop_first_reply and n == 0:
                entry.drop_next = "submit"
            receipts.append(await submit_value(chain, entry, x))
        resends = entry.resends
    if resend_first and receipts:
        await resend(chain, receipts[0])
    results: dict[int, RoundResult] = {}
    for round_id in sorted({r.round_id for r in [*bad, *receipts]}):
        results[round_id] = await subscribe(chain, round_id)
    return Outcome(tuple(receipts), results, resends, tuple(bad))


# --------------------------------------------------------------------------- § 14 vectors


DEFAULT_VECTORS = Path(__file__).resolve().parents[1] / "mixnet" / "wire_vectors.json"


def _hex(s: str) -> bytes:
    return bytes.fromhex(s)


def _same(what: str, got: object, want: object) -> None:
    if isinstance(got, bytes) and isinstance(want, bytes):
        equal = hmac.compare_digest(got, want)
    else:
        equal = got == want
    if not equal:
        shown_got = got.hex() if isinstance(got, bytes) else repr(got)
        shown_want = want.hex() if isinstance(want, bytes) else repr(want)
        raise VectorMismatch(f"{what}: got {shown_got}, expected {shown_want}")


def _from_vector_fields(value: Any) -> Any:
    """Turn the vectors' ``{"bin": "<hex>"}`` notation back into bytes."""
    if isinstance(value, dict):
        if set(value) == {"bin"}:
            return _hex(value["bin"])
        return {k: _from_vector_fields(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_vector_fields(v) for v in value]
    return value


def _check_layer(where: str, got: Layer, want: Mapping[str, Any], recipient: bytes) -> None:
    """Every value of a rebuilt layer (§ 9.2) against a layer vector."""
    _same(f"{where} hop", got.hop, want["hop"])
    _same(f"{where} recipient", recipient, _hex(want["recipient_public"]))
    _same(f"{where} E", got.ephemeral_public, _hex(want["ephemeral_public"]))
    _same(f"{where} S", got.shared_secret, _hex(want["shared_secret"]))
    _same(f"{where} kdf input", got.kdf_input, _hex(want["kdf_input"]))
    _same(f"{where} key", got.key, _hex(want["key"]))
    _same(f"{where} nonce", got.nonce, _hex(want["nonce"]))
    _same(f"{where} associated data", got.associated_data, _hex(want["associated_data"]))
    _same(f"{where} plaintext", got.plaintext, _hex(want["plaintext"]))
    _same(f"{where} ciphertext", got.ciphertext, _hex(want["ciphertext"]))
    _same(f"{where} layer", got.layer, _hex(want["layer"]))
    _same(f"{where} length", len(got.layer), len(got.plaintext) + LAYER_OVERHEAD)


def _check_submission(label: str, vector: Mapping[str, Any], chain_id: str, round_id: int,
                      publics: Sequence[bytes], secrets_: Sequence[bytes]) -> Submission:
    """Rebuild a submission box (§ 9.3) with the vector's ephemeral secrets, compare every
    layer, then open it as the mixes do (§ 9.3 "Peeling") down to the payloads."""
    payloads = [_hex(p) for p in vector["payloads"]]
    ephemerals: dict[tuple[int, int], bytes] = {
        (-1, 0): _hex(vector["box_layer"]["ephemeral_secret"])}
    for onion in vector.get("inner_onions", []):
        for layer in onion["layers"]:
            ephemerals[onion["index"], layer["hop"]] = _hex(layer["ephemeral_secret"])
    built = wrap_submission(payloads, chain_id, round_id, publics, ephemerals)
    _check_layer(f"{label} box", built.box_layer, vector["box_layer"], publics[0])
    for j, layers in enumerate(built.inner):
        if not layers:  # one mix: no inner layers
            continue
        want = vector["inner_onions"][j]
        _same(f"{label} inner onion {j} payload", payloads[j], _hex(want["payload"]))
        for got, want_layer in zip(layers, want["layers"], strict=True):
            _check_layer(f"{label} inner onion {j} hop {got.hop}", got, want_layer,
                         publics[got.hop])
        _same(f"{label} inner onion {j}", layers[0].layer, _hex(want["onion"]))
    _same(f"{label} box", built.box, _hex(vector["box"]))
    _same(f"{label} box length", len(built.box),
          submission_length(len(payloads[0]), len(publics), len(payloads)))
    _same(f"{label} length", vector["length"], len(built.box))
    _same(f"{label} submission digest", submission_digest(built.box),
          _hex(vector["submission_digest"]))
    # the entry mix opens the box and cuts it; each later mix opens its layer
    items = cut(open_layer(built.box, secrets_[0], chain_id, round_id, 0), len(payloads))
    _same(f"{label} items", items, [_hex(i) for i in vector["items"]])
    _same(f"{label} items = inner onions", items, built.items)
    for j, item in enumerate(items):
        for hop in range(1, len(publics)):
            item = open_layer(item, secrets_[hop], chain_id, round_id, hop)
        _same(f"{label} payload {j} after peeling", item, payloads[j])
    if "item_digests" in vector:
        _same(f"{label} item digests", [item_digest(i) for i in items],
              [_hex(d) for d in vector["item_digests"]])
    return built


def _check_owner(where: str, key: OwnerKey, owner: OwnershipProof | None,
                 want: Mapping[str, Any]) -> None:
    """The § 9.6 values of a proven layer against a layer vector."""
    _same(f"{where} e", key.secret, _hex(want["ephemeral_secret"]))
    _same(f"{where} e'", key.clamped, _hex(want["clamped_secret"]))
    _same(f"{where} x0", key.scalar, _hex(want["scalar"]))
    _same(f"{where} P0", key.scalar_point, _hex(want["scalar_point"]))
    _same(f"{where} sign bit", key.sign_bit, want["sign_bit"])
    _same(f"{where} witness", key.witness, _hex(want["witness"]))
    _same(f"{where} E", key.public, _hex(want["ephemeral_public"]))
    _same(f"{where} lift_0(E)", lift_0(key.public), _hex(want["lifted_public"]))
    _same(f"{where} x·B = lift_0(E)",
          nacl.bindings.crypto_scalarmult_ed25519_base_noclamp(key.witness), lift_0(key.public))
    if owner is None:
        raise VectorMismatch(f"{where}: no ownership proof")
    _same(f"{where} h", owner.digest, _hex(want["ciphertext_digest"]))
    _same(f"{where} proof randomness", owner.random, _hex(want["proof_random"]))
    _same(f"{where} r", owner.r, _hex(want["r"]))
    _same(f"{where} R", owner.commitment, _hex(want["commitment"]))
    _same(f"{where} challenge input", owner.challenge_input, _hex(want["challenge_input"]))
    _same(f"{where} c", owner.c, _hex(want["challenge"]))
    _same(f"{where} s", owner.s, _hex(want["response"]))
    _same(f"{where} proof", owner.proof, _hex(want["proof"]))
    ad = _hex(want["associated_data"])
    if not verify_ownership(key.public, owner.proof, owner.digest, ad):
        raise VectorMismatch(f"{where}: the ownership proof does not verify")
    tampered = owner.c + _le(int.from_bytes(owner.s, "little") ^ 1)
    if verify_ownership(key.public, tampered, owner.digest, ad):
        raise VectorMismatch(f"{where}: a tampered ownership proof verifies")


def _check_proven_submission(label: str, vector: Mapping[str, Any], chain_id: str,
                             round_id: int, publics: Sequence[bytes],
                             secrets_: Sequence[bytes]) -> list[tuple[int | None, bytes]]:
    """Rebuild a box of a proven chain (§ 9.5) with the vector's ephemeral secrets and proof
    randomness — including garbage items given as they are — compare every value, then peel
    every item as the mixes do. Returns, per item, the hop at which it did not open (``None``
    if it opened down to the payload) and the last bytes reached."""
    ephemerals: dict[tuple[int, int], bytes] = {
        (-1, 0): _hex(vector["box_layer"]["ephemeral_secret"])}
    randoms: dict[tuple[int, int], bytes] = {}
    innermost: list[bytes] = []
    first_hops: dict[int, int] = {}
    for j, onion in enumerate(vector["inner_onions"]):
        _same(f"{label} inner onion index", onion["index"], j)
        if "garbage_layer" in onion:  # an item as the client made it: E || proof || filler
            g = onion["garbage_layer"]
            key = owner_key(_hex(g["ephemeral_secret"]))
            ad = binding_data(chain_id, round_id, g["hop"])
            _same(f"{label} garbage {j} associated data", ad, _hex(g["associated_data"]))
            ct = _hex(g["ciphertext"])
            owner = prove_ownership(key, ct, ad, _hex(g["proof_random"]))
            _check_owner(f"{label} garbage {j}", key, owner, g)
            item = key.public + owner.proof + ct
            _same(f"{label} garbage {j} layer", item, _hex(g["layer"]))
            innermost.append(item)
            first_hops[j] = 0
            continue
        for layer in onion["layers"]:
            ephemerals[j, layer["hop"]] = _hex(layer["ephemeral_secret"])
            randoms[j, layer["hop"]] = _hex(layer["proof_random"])
        innermost.append(_hex(onion["layers"][-1]["plaintext"]))
        first_hops[j] = onion["layers"][-1]["hop"]
        if "payload" in onion:
            _same(f"{label} inner onion {j} payload", innermost[-1], _hex(onion["payload"]))
    built = wrap_submission(innermost, chain_id, round_id, publics, ephemerals, proven=True,
                            proof_randoms=randoms, first_hops=first_hops)
    _check_layer(f"{label} box", built.box_layer, vector["box_layer"], publics[0])
    for j, layers in enumerate(built.inner):
        want = vector["inner_onions"][j]
        _same(f"{label} inner onion {j} layers", len(layers), len(want["layers"]))
        for got, w in zip(layers, want["layers"], strict=True):
            where = f"{label} inner onion {j} hop {got.hop}"
            _same(f"{where} hop", got.hop, w["hop"])
            _same(f"{where} recipient", publics[got.hop], _hex(w["recipient_public"]))
            if got.owner_key is None:
                raise VectorMismatch(f"{where}: not a proven layer")
            _check_owner(where, got.owner_key, got.owner, w)
            _same(f"{where} S", got.shared_secret, _hex(w["shared_secret"]))
            _same(f"{where} kdf input", got.kdf_input, _hex(w["kdf_input"]))
            _same(f"{where} key", got.key, _hex(w["key"]))
            _same(f"{where} nonce", got.nonce, _hex(w["nonce"]))
            _same(f"{where} associated data", got.associated_data, _hex(w["associated_data"]))
            _same(f"{where} plaintext", got.plaintext, _hex(w["plaintext"]))
            _same(f"{where} ciphertext", got.ciphertext, _hex(w["ciphertext"]))
            _same(f"{where} layer", got.layer, _hex(w["layer"]))
            _same(f"{where} length", len(got.layer), len(got.plaintext) + PROVEN_LAYER_OVERHEAD)
            if not layer_is_owned(got.layer, chain_id, round_id, got.hop):
                raise VectorMismatch(f"{where}: not owned")
        _same(f"{label} inner onion {j}", built.items[j], _hex(want["onion"]))
    _same(f"{label} box", built.box, _hex(vector["box"]))
    w_, m_ = len(_hex(vector["inner_onions"][-1].get("payload", "00"))), len(innermost)
    _same(f"{label} box length", len(built.box), submission_length(w_, len(publics), m_, True))
    _same(f"{label} length", vector["length"], len(built.box))
    _same(f"{label} submission digest", submission_digest(built.box),
          _hex(vector["submission_digest"]))
    items = cut(open_layer(built.box, secrets_[0], chain_id, round_id, 0), m_)
    _same(f"{label} items", items, [_hex(i) for i in vector["items"]])
    _same(f"{label} item digests", [item_digest(i) for i in items],
          [_hex(d) for d in vector["item_digests"]])
    outcomes: list[tuple[int | None, bytes]] = []
    for item in items:
        failed: int | None = None
        for hop in range(1, len(publics)):
            try:
                item = open_layer(item, secrets_[hop], chain_id, round_id, hop, proven=True)
            except SpecClientError:
                failed = hop
                break
        outcomes.append((failed, item))
    return outcomes


def _check_proven(doc: Mapping[str, Any]) -> None:
    """§ 9.5, § 9.6 and § 13 on the ``proven`` vectors."""
    pv = doc["proven"]
    chain_id, round_id = pv["chain_id"], pv["round"]
    _same("proven chain flag", pv["ownership_proofs"], True)
    secrets_ = [_hex(m["round_secret"]) for m in pv["mixes"]]
    publics = [_hex(m["round_public"]) for m in pv["mixes"]]
    for m, secret, public in zip(pv["mixes"], secrets_, publics, strict=True):
        _same(f"proven round key of {m['name']}", nacl.bindings.crypto_scalarmult_base(secret),
              public)
    w, hops, m_ = pv["payload_length"], len(pv["mixes"]), pv["messages"]
    _same("proven layer overhead", pv["proven_layer_overhead"], PROVEN_LAYER_OVERHEAD)
    _same("proof length", pv["proof_length"], PROOF_LENGTH)
    _same("proven submission length", submission_length(w, hops, m_, True),
          pv["submission_length"])
    _same("proven inner onion length", onion_length(w, hops - 1, True), pv["inner_onion_length"])
    _same("proven item lengths",
          [submission_length(w, hops, m_, True),
           *(onion_length(w, hops - i, True) for i in range(1, hops + 1))],
          pv["item_lengths"])
    outcomes: dict[str, list[tuple[int | None, bytes]]] = {}
    vectors = {v["client"]: v for v in pv["submissions"]}
    for client, vector in vectors.items():
        outcomes[client] = _check_proven_submission(
            f"proven {client}", vector, chain_id, round_id, publics, secrets_)
        for j, (failed, last) in enumerate(outcomes[client]):
            onion = vector["inner_onions"][j]
            if "payload" in onion:
                _same(f"proven {client} payload {j}", (failed, last),
                      (None, _hex(onion["payload"])))
    # the trace: each accusation against trudy's garbage
    for acc in pv["accusations"]:
        name = f"proven accusation {acc['failure']}"
        steps = acc["steps"]
        items = vectors[acc["client"]]["items"]
        _same(f"{name} accused item", steps[0]["item"], items[acc["index"]])
        failed, _ = outcomes[acc["client"]][acc["index"]]
        _same(f"{name} the last step's hop is where the item did not open", failed,
              steps[-1]["hop"])
        for position, step in enumerate(steps):
            hop, item = step["hop"], _hex(step["item"])
            where = f"{name} step {hop}"
            _same(f"{where} hop", hop, steps[0]["hop"] + position)
            _same(f"{where} E", item[:32], _hex(step["ephemeral_public"]))
            _same(f"{where} ownership proof", item[32:80], _hex(step["ownership_proof"]))
            _same(f"{where} ciphertext", item[80:], _hex(step["ciphertext"]))
            _same(f"{where} associated data", binding_data(chain_id, round_id, hop),
                  _hex(step["associated_data"]))
            owned = layer_is_owned(item, chain_id, round_id, hop)
            _same(f"{where} owned", owned, step["owned"])
            is_last = position == len(steps) - 1
            if step["shared_secret"] == "":  # a step without a secret (§ 13.1)
                _same(f"{where} without a secret", (acc["failure"], is_last, step["proof"], owned),
                      ("no-owner", True, "", False))
                continue
            ctx = (lp(STEP_DOMAIN) + lp(chain_id.encode("utf-8")) + u64be(round_id) + u16be(hop)
                   + blake2b(item, 256))
            _same(f"{where} context", ctx, _hex(step["context"]))
            S = nacl.bindings.crypto_scalarmult(secrets_[hop], item[:32])
            _same(f"{where} S", S, _hex(step["shared_secret"]))
            key, nonce = layer_key(S, item[:32], publics[hop])
            _same(f"{where} key", key, _hex(step["key"]))
            _same(f"{where} nonce", nonce, _hex(step["nonce"]))
            try:
                inner = open_with_secret(item, S, publics[hop], chain_id, round_id, hop, True)
            except SpecClientError:
                _same(f"{where} does not open", (step["opens"], acc["failure"], is_last, owned),
                      (False, "undecryptable", True, True))
                continue
            _same(f"{where} opens", step["opens"], True)
            _same(f"{where} inner", inner, _hex(step["inner"]))
            if is_last:
                raise VectorMismatch(f"{where}: the last step's layer opens")
            _same(f"{where} holds the next item", inner, _hex(steps[position + 1]["item"]))
        if "copied_from" in acc:  # E and the proof of an honest layer, other ciphertext
            src = acc["copied_from"]
            layer = _hex(vectors[src["client"]]["inner_onions"][src["index"]]["layers"][
                src["hop"] - 1]["layer"])
            copied = _hex(steps[-1]["item"])
            _same(f"{name} copied E and proof", copied[:80], layer[:80])
            if copied == layer or not layer_is_owned(layer, chain_id, round_id, src["hop"]):
                raise VectorMismatch(f"{name}: the copied layer should be owned, the copy not")
    # the frames of that trace (§ 6.3): empty bin for a step without a secret
    frames = {f["name"]: f for f in pv["frames"]}
    for f in pv["frames"]:
        _same(f"proven frame {f['name']} decodes", decode_frame(_hex(f["msgpack"])),
              {**_from_vector_fields(f["fields"]), "v": WIRE_VERSION})
    own = decode_frame(_hex(frames["accused (mix3 to mix2)"]["msgpack"]))
    ((step,),) = [a["steps"] for a in own["accusations"]]
    _same("no-owner step on the wire", (own["accusations"][0]["failure"], step["secret"],
                                        step["proof"]), ("no-owner", b"", b""))
    back = decode_frame(_hex(frames["accused (mix2 to mix1)"]["msgpack"]))
    _same("accused failures", [a["failure"] for a in back["accusations"]],
          [a["failure"] for a in pv["accusations"]])
    for wire, acc in zip(back["accusations"], pv["accusations"], strict=True):
        _same(f"accused {acc['failure']} steps",
              [(s["hop"], s["item"], s["secret"], s["proof"]) for s in wire["steps"]],
              [(s["hop"], _hex(s["item"]), _hex(s["shared_secret"]), _hex(s["proof"]))
               for s in acc["steps"]])
    exclude = decode_frame(_hex(frames["exclude (mix1 to mix2)"]["msgpack"]))
    _same("proven exclude items", exclude["items"], [_hex(i) for i in vectors["trudy"]["items"]])


def check_vectors(path: str | os.PathLike[str] = DEFAULT_VECTORS) -> list[str]:
    """Rebuild the vectors' byte-level constructions; raise :class:`VectorMismatch` on any
    difference. Returns the names of the checks that passed."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    done: list[str] = []
    _same("wire_version", doc["wire_version"], WIRE_VERSION)

    # chain: identity keys from seeds, round keys, lengths (§ 9.3)
    vchain = doc["chain"]
    chain_id, round_id = vchain["id"], vchain["round"]
    round_keys = [_hex(m["round_public"]) for m in vchain["mixes"]]
    round_secrets = [_hex(m["round_secret"]) for m in vchain["mixes"]]
    for m in vchain["mixes"]:
        signing = nacl.signing.SigningKey(_hex(m["identity_seed"]))
        _same(f"identity of {m['name']}", bytes(signing.verify_key), _hex(m["identity_public"]))
        _same(f"identity text of {m['name']}", parse_identity(m["identity_text"]),
              _hex(m["identity_public"]))
        _same(f"round key of {m['name']}",
              nacl.bindings.crypto_scalarmult_base(_hex(m["round_secret"])),
              _hex(m["round_public"]))
    w, hops, m_ = vchain["payload_length"], len(vchain["mixes"]), vchain["messages"]
    _same("layer overhead", vchain["layer_overhead"], LAYER_OVERHEAD)
    _same("submission length", submission_length(w, hops, m_), vchain["submission_length"])
    _same("inner onion length", onion_length(w, hops - 1), vchain["inner_onion_length"])
    later = [onion_length(w, hops - i) for i in range(1, hops + 1)]
    _same("item lengths", [submission_length(w, hops, m_), *later], vchain["item_lengths"])
    done.append("chain")

    # § 9.1 binding data
    for v in doc["binding_data"]:
        _same(f"binding data {v['chain_id']}/{v['round']}/{v['hop']}",
              binding_data(v["chain_id"], v["round"], v["hop"]), _hex(v["associated_data"]))
    done.append("binding_data")

    # § 8.3 announcements (Ed25519 is deterministic: re-sign with the seed too)
    seeds = {m["name"]: _hex(m["identity_seed"]) for m in vchain["mixes"]}
    identities = {m["name"]: _hex(m["identity_public"]) for m in vchain["mixes"]}
    for v in doc["announcements"]:
        signed = announcement_bytes(v["chain_id"], v["node"], v["round"], _hex(v["public_key"]))
        _same(f"announcement bytes of {v['node']}", signed, _hex(v["signed_bytes"]))
        signature = nacl.signing.SigningKey(seeds[v["node"]]).sign(signed).signature
        _same(f"announcement signature of {v['node']}", signature, _hex(v["signature"]))
        if not verify_signature(identities[v["node"]], signed, _hex(v["signature"])):
            raise VectorMismatch(f"announcement of {v['node']} does not verify")
    done.append("announcements")

    # § 8.4 link authentication
    v = doc["link_authentication"]
    signed = link_authentication_bytes(v["chain_id"], v["node"], _hex(v["challenge"]))
    _same("link authentication bytes", signed, _hex(v["signed_bytes"]))
    _same("link authentication signature",
          nacl.signing.SigningKey(seeds[v["node"]]).sign(signed).signature, _hex(v["signature"]))
    done.append("link_authentication")

    # § 9.2, § 9.3 the submission boxes with the fixed ephemeral secrets, every layer
    submissions: dict[str, Submission] = {}
    for vector in doc["submissions"]:
        submissions[vector["client"]] = _check_submission(
            vector["client"], vector, chain_id, round_id, round_keys, round_secrets)
    done.append("submissions")

    # a chain of one mix: the box holds the payloads
    solo = doc["one_mix"]
    solo_secret = _hex(solo["mix"]["round_secret"])
    solo_public = nacl.bindings.crypto_scalarmult_base(solo_secret)
    _same("one-mix round key", solo_public, _hex(solo["mix"]["round_public"]))
    _same("one-mix submission length", submission_length(w, 1, solo["messages"]),
          solo["submission_length"])
    built = _check_submission("one-mix", solo["submission"], solo["chain_id"], solo["round"],
                              [solo_public], [solo_secret])
    _same("one-mix items are the payloads", built.items, list(built.payloads))
    done.append("one_mix")

    # § 9.1, § 9.2 a layer opens only with its key and binding
    wb = doc["wrong_binding"]
    mis = wb["misbound_layer"]
    mix_secret = {m["name"]: _hex(m["round_secret"]) for m in vchain["mixes"]}
    mix_public = {m["name"]: _hex(m["round_public"]) for m in vchain["mixes"]}
    rebuilt = seal_layer(mix_public[mis["recipient"]], _hex(mis["plaintext"]), chain_id,
                         round_id, mis["hop"], _hex(mis["ephemeral_secret"]))
    _check_layer("misbound layer", rebuilt, mis, mix_public[mis["recipient"]])
    for case in wb["openings"]:
        where = f"opening {case['item']} by {case['key_of']} as {case['chain_id']}/" \
                f"{case['round']}/{case['hop']}"
        _same(f"{where} associated data", binding_data(case["chain_id"], case["round"],
                                                       case["hop"]),
              _hex(case["associated_data"]))
        try:
            inner = open_layer(_hex(case["layer"]), mix_secret[case["key_of"]],
                               case["chain_id"], case["round"], case["hop"])
        except SpecClientError:
            _same(f"{where} outcome", "decryption-failed", case["result"])
        else:
            _same(f"{where} outcome", "ok", case["result"])
            _same(f"{where} inner", inner, _hex(case["inner"]))
    done.append("wrong_binding")

    # § 13.1 trace steps: the context, and opening the layer with the revealed S
    trace = doc["trace"]
    accused = submissions[trace["accused"]["client"]].inner[trace["accused"]["index"]]
    for step in trace["steps"]:
        hop = step["hop"]
        item = _hex(step["item"])
        _same(f"step {hop} item", item, accused[hop - 1].layer)
        ctx = (lp(STEP_DOMAIN) + lp(chain_id.encode("utf-8")) + u64be(round_id) + u16be(hop)
               + blake2b(item, 256))
        _same(f"step {hop} context", ctx, _hex(step["context"]))
        S = nacl.bindings.crypto_scalarmult(round_secrets[hop], item[:32])
        _same(f"step {hop} S", S, _hex(step["shared_secret"]))
        key, nonce = layer_key(S, item[:32], round_keys[hop])
        _same(f"step {hop} key", key, _hex(step["key"]))
        _same(f"step {hop} nonce", nonce, _hex(step["nonce"]))
        _same(f"step {hop} associated data", binding_data(chain_id, round_id, hop),
              _hex(step["associated_data"]))
        inner = open_with_secret(item, S, round_keys[hop], chain_id, round_id, hop)
        _same(f"step {hop} inner", inner, _hex(step["inner"]))
    last = _hex(trace["steps"][-1]["inner"])
    if payload_is_valid(last, int(trace["validator"]["modulus"])):
        raise VectorMismatch("the traced payload should be invalid")
    done.append("trace")

    # § 6.1 admission: the token and the submission signature (Ed25519 is deterministic)
    adm = doc["admission"]
    issuer = nacl.signing.SigningKey(_hex(adm["issuer_seed"]))
    credential = bytes(nacl.signing.SigningKey(_hex(adm["client_seed"])).verify_key)
    tsigned = token_bytes(adm["chain_id"], credential, adm["expires"])
    _same("token signed bytes", tsigned, _hex(adm["token_signed_bytes"]))
    token = issuer.sign(tsigned).signature + u64be(adm["expires"])
    _same("token", token, _hex(adm["token"]))
    box = _hex(adm["box"])
    _same("admission box digest", submission_digest(box), _hex(adm["submission_digest"]))
    _same("submission signed bytes",
          lp(SUBMISSION_DOMAIN) + lp(adm["chain_id"].encode("utf-8")) + u64be(adm["round"])
          + lp(submission_digest(box)), _hex(adm["submission_signed_bytes"]))
    fields = admission_fields(_hex(adm["client_seed"]), adm["chain_id"], adm["round"], box, token)
    _same("admission credential", fields["credential"], _hex(adm["credential"]))
    _same("admission client id", fields["client"], adm["client"])
    _same("admission signature", fields["signature"], _hex(adm["signature"]))
    done.append("admission")

    # § 11 payloads: [protocol] tables, widths, encodings, Algorithm 1, validity
    cn = doc["cloaknet"]
    for table in cn["protocol_tables"]:
        proto = parse_protocol(tomllib.loads(table["toml"])["protocol"])
        _same(f"protocol table {table['mode']}",
              (proto.mode, proto.messages, proto.modulus, proto.precision, proto.payload_length),
              (table["mode"], table["messages"], int(table["modulus"]), table["precision"],
               table["payload_length"]))
    for sw in cn["share_widths"]:
        _same(f"share width of {sw['modulus']}", share_width(int(sw["modulus"])), sw["width"])
    for se in cn["share_encodings"]:
        _same(f"encoding of {se['value']} mod {se['modulus']}",
              encode_share(int(se["value"]), int(se["modulus"])), _hex(se["bytes"]))
    enc = cn["encoder"]
    modulus = int(enc["modulus"])
    _same("encoder quantized", quantize(enc["x"], enc["precision"]), enc["quantized"])
    protocol = Protocol("sum-preserving", len(enc["shares"]), modulus, enc["precision"])
    _same("encoder shares",
          split_shares(enc["quantized"], modulus, protocol.messages, enc["random_shares"]),
          enc["shares"])
    _same("encoder payloads", encode_value(enc["x"], protocol, enc["random_shares"]),
          [_hex(p) for p in enc["payloads"]])
    _same("encoder payloads = alice's box payloads",
          list(submissions[enc["client"]].payloads), [_hex(p) for p in enc["payloads"]])
    vmod = int(trace["validator"]["modulus"])
    for bad in cn["invalid_payloads"]:
        if payload_is_valid(_hex(bad), vmod):
            raise VectorMismatch(f"payload {bad} should be invalid")
    done.append("cloaknet")

    # § 12 the result: Algorithm 2 on the vector's payloads, and the exact field
    res = cn["result"]
    z = sum(int.from_bytes(_hex(p), "big") for p in res["payloads"]) % vmod
    parsed = parse_result(res["result"])
    _same("result raw_sum", z, parsed.raw_sum)
    _same("result estimate_exact", parsed.estimate_exact,
          Fraction(z, res["result"]["precision"]))
    done.append("result")

    # § 4, § 6 frames: the client's requests byte for byte, the replies it parses
    frames = {f["name"]: f for f in doc["frames"]}
    _same("get-round frame", encode_frame("get-round"), _hex(frames["get-round"]["msgpack"]))
    sfields = _from_vector_fields(frames["submit"]["fields"])
    _same("submit frame",
          encode_frame("submit", round=sfields["round"], client=sfields["client"],
                       box=sfields["box"]),
          _hex(frames["submit"]["msgpack"]))
    _same("submit box = alice's box", sfields["box"], submissions["alice"].box)
    afields = _from_vector_fields(frames["submit (with admission)"]["fields"])
    _same("submit (with admission) frame",
          encode_frame("submit", round=afields["round"], client=fields["client"],
                       box=afields["box"], credential=fields["credential"],
                       token=fields["token"], signature=fields["signature"]),
          _hex(frames["submit (with admission)"]["msgpack"]))
    _same("subscribe frame", encode_frame("subscribe", round=round_id),
          _hex(frames["subscribe"]["msgpack"]))
    for f in doc["frames"]:
        decoded = decode_frame(_hex(f["msgpack"]))
        _same(f"frame {f['name']} decodes", decoded,
              {**_from_vector_fields(f["fields"]), "v": WIRE_VERSION})
    round_frame = decode_frame(_hex(frames["round"]["msgpack"]))
    vector_chain = Chain(
        chain_id=chain_id,
        mixes=tuple(Mix(m["name"], "ws://unused", _hex(m["identity_public"]))
                    for m in vchain["mixes"]),
        analyzer_url="ws://unused",
        protocol=Protocol("sum-preserving", vchain["messages"], vmod, 100000),
    )
    keys = verify_announcements(vector_chain, round_frame["round"], round_frame["announcements"])
    _same("round frame keys", keys, round_keys)
    try:
        _expect(decode_frame(_hex(frames["error"]["msgpack"])), "accepted")
    except WireError as exc:
        _same("error frame code", exc.code, "duplicate-client")
    else:
        raise VectorMismatch("error frame not recognised")
    result_frame = parse_result(decode_frame(_hex(frames["result"]["msgpack"])))
    _same("result frame exact", result_frame.estimate_exact, Fraction(41999, 100000))
    done.append("frames")

    # § 9.5, § 9.6, § 13 a chain with ownership proofs
    _check_proven(doc)
    done.append("proven")
    return done


if __name__ == "__main__":  # pragma: no cover
    import sys

    if len(sys.argv) < 3:
        print("usage: spec_client.py CHAIN_FILE VALUE...", file=sys.stderr)
        raise SystemExit(2)
    print("vector checks:", ", ".join(check_vectors()))
    outcome = asyncio.run(submit_and_sum(sys.argv[1], [float(a) for a in sys.argv[2:]]))
    for rid, result in outcome.results.items():
        print(rid, json.dumps(result.raw, default=str))
