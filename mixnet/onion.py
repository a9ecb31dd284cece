"""Layered onions for a fixed cascade of mixes: 48-byte AEAD layers bound to their position.

Format version 2 (``docs/protocol.md``, "Onion layers", says where it matches HPKE, RFC 9180,
base mode, and where it differs). One layer made for a mix with X25519 round public key
``K`` at hop ``h`` of round ``r`` of chain ``c`` is::

    E (32 bytes) || ChaCha20-Poly1305-IETF(key, nonce, aad = binding(c, r, h), inner)

where ``E = X25519(e, 9)`` for a fresh ephemeral secret ``e``, ``S = X25519(e, K)``, and
``key (32) || nonce (12)`` is :func:`layer_key` ``(S, E, K)``: BLAKE2b-352 personalised with
:data:`KDF_PERSONAL` over ``S || E || K``. The binding (:func:`binding_data`) is authenticated
as associated data, so a layer made for another chain, round or hop fails authentication
exactly like a layer made for another key, and costs no bytes. Each layer adds
:data:`LAYER_OVERHEAD` = 48 bytes: the ephemeral key and the 16-byte Poly1305 tag.

A chain may require **ownership proofs** (``proven``): every layer after the entry mix's then
carries, between ``E`` and the ciphertext, a 48-byte proof that its maker knew the ephemeral
secret, bound to the ciphertext and the binding (:mod:`mixnet.ownership`), so a layer that does
not open can be traced without a Diffie–Hellman oracle. Such a layer adds
:data:`PROVEN_LAYER_OVERHEAD` = 96 bytes; peeling ignores the proof (it is checked only when
the layer does not open).

A client's submission is **one** layer for the entry mix (hop 0) around the concatenation of
its ``m`` inner onions (one per payload, layers for hops ``1 .. L-1``): the entry mix receives
a submission's onions together from one client anyway, so one box tells it nothing more and
saves ``m - 1`` ephemeral keys, tags and X25519 operations (:func:`wrap_submission`,
:func:`submission_length`). In a chain of one mix the box holds the ``m`` payloads.

Lengths and argument types are checked before any cryptography. Randomness comes only from
libsodium's ``crypto_box_keypair`` (the OS CSPRNG).
"""

from __future__ import annotations

import functools
import hashlib
import struct
import threading
from collections.abc import Sequence

from nacl import bindings
from nacl._sodium import ffi as _ffi  # PyNaCl's CFFI module: libsodium without the wrappers
from nacl._sodium import lib as _lib
from nacl.exceptions import CryptoError
from nacl.public import PrivateKey

from mixnet.errors import BadLength, DecryptionFailed, MixnetError
from mixnet.ownership import PROOF_LENGTH as OWNERSHIP_PROOF_LENGTH
from mixnet.ownership import ciphertext_digest, new_ephemeral, prove_ownership

__all__ = [
    "AEAD_TAG_LENGTH",
    "KDF_PERSONAL",
    "LAYER_OVERHEAD",
    "MAX_LAYERS",
    "PROVEN_LAYER_OVERHEAD",
    "PUBLIC_KEY_LENGTH",
    "binding_data",
    "layer_key",
    "layer_overhead",
    "onion_length",
    "open_layer_with_secret",
    "peel_many",
    "peel_many_raw",
    "seal_layer",
    "split_layer",
    "submission_length",
    "wrap",
    "wrap_submission",
]

#: Bytes of an X25519 public key (the ephemeral key that starts every layer).
PUBLIC_KEY_LENGTH = 32
#: Bytes of the Poly1305 tag that ends every layer.
AEAD_TAG_LENGTH = 16
#: Bytes each onion layer adds to its inner bytes.
LAYER_OVERHEAD = PUBLIC_KEY_LENGTH + AEAD_TAG_LENGTH
#: Bytes a layer with an ownership proof adds.
PROVEN_LAYER_OVERHEAD = LAYER_OVERHEAD + OWNERSHIP_PROOF_LENGTH
#: Most layers an onion may have (the hop index is encoded as an unsigned 16-bit integer).
MAX_LAYERS = 1 << 16
#: BLAKE2b personalisation of the layer key derivation (format version 2).
KDF_PERSONAL = b"mixnet-layer-v2"
#: Domain string that starts every layer's associated data.
BINDING_DOMAIN = b"mixnet/onion-layer/v2"

_KEY_LENGTH = 32
_NONCE_LENGTH = 12
_MAX_ROUND_ID = (1 << 64) - 1
_MAX_HOP_INDEX = MAX_LAYERS - 1
_MAX_LENGTH = 1 << 62

assert LAYER_OVERHEAD == 48
assert bindings.crypto_aead_chacha20poly1305_ietf_ABYTES == AEAD_TAG_LENGTH
assert bindings.crypto_aead_chacha20poly1305_ietf_NPUBBYTES == _NONCE_LENGTH


def _check_int(value: object, name: str, low: int, high: int) -> int:
    """Return ``value`` if it is an int (not bool) in ``[low, high]``.

    Raises ``TypeError`` for a non-int or bool, ``ValueError`` if out of range.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return value


def _length_prefixed(data: bytes) -> bytes:
    """Return ``data`` preceded by its length as a big-endian uint32."""
    return struct.pack(">I", len(data)) + data


def _chain_id_bytes(chain_id: object) -> bytes:
    """UTF-8 encode a chain id; ``TypeError``/``ValueError`` if not a valid non-empty str."""
    if not isinstance(chain_id, str):
        raise TypeError(f"chain_id must be str, not {type(chain_id).__name__}")
    if not chain_id:
        raise ValueError("chain_id must not be empty")
    try:
        return chain_id.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("chain_id is not encodable as UTF-8") from None


def binding_data(*, chain_id: str, round_id: int, hop_index: int) -> bytes:
    """Return the associated data binding a layer to ``(chain_id, round_id, hop_index)``.

    It is the length-prefixed (big-endian uint32) :data:`BINDING_DOMAIN`, the length-prefixed
    UTF-8 chain id, the round id as a big-endian uint64 and the hop index as a big-endian
    uint16. Raises ``TypeError``/``ValueError`` for an empty or non-str chain id, a round id
    outside ``[0, 2**64)`` or a hop index outside ``[0, 2**16)``.
    """
    return _binding_data(chain_id, round_id, hop_index)


@functools.lru_cache(maxsize=1024, typed=True)
def _layer_bindings(chain_id: str, round_id: int, first_hop: int, count: int) -> tuple[bytes, ...]:
    """:func:`binding_data` of hops ``first_hop`` … ``first_hop + count - 1`` (one cached
    lookup per onion instead of one per layer)."""
    _check_int(first_hop, "first_hop", 0, _MAX_HOP_INDEX)
    return tuple(_binding_data(chain_id, round_id, first_hop + i) for i in range(count))


@functools.lru_cache(maxsize=4096, typed=True)
def _binding_data(chain_id: str, round_id: int, hop_index: int) -> bytes:
    """:func:`binding_data` computed once per (chain, round, hop)."""
    chain = _chain_id_bytes(chain_id)
    _check_int(round_id, "round_id", 0, _MAX_ROUND_ID)
    _check_int(hop_index, "hop_index", 0, _MAX_HOP_INDEX)
    return b"".join(
        (
            _length_prefixed(BINDING_DOMAIN),
            _length_prefixed(chain),
            struct.pack(">QH", round_id, hop_index),
        )
    )


#: The KDF's initial state (personalised, 44-byte digest), copied for each layer: cheaper
#: than constructing it.
_KDF = hashlib.blake2b(digest_size=_KEY_LENGTH + _NONCE_LENGTH, person=KDF_PERSONAL)


def layer_key(
    shared_secret: bytes, ephemeral_public: bytes, recipient_public: bytes
) -> tuple[bytes, bytes]:
    """Return the AEAD ``(key, nonce)`` (32 and 12 bytes) of a layer.

    BLAKE2b with a 44-byte digest and personalisation :data:`KDF_PERSONAL` over
    ``shared_secret || ephemeral_public || recipient_public`` (all 32 bytes): the first 32
    bytes are the key, the last 12 the nonce. Like HPKE's DHKEM, the key depends on the
    Diffie–Hellman value and on both public keys. Raises :class:`BadLength` if an argument
    is not 32 bytes (``TypeError`` if not ``bytes``).
    """
    for name, value in (
        ("shared_secret", shared_secret),
        ("ephemeral_public", ephemeral_public),
        ("recipient_public", recipient_public),
    ):
        if not isinstance(value, bytes):
            raise TypeError(f"{name} must be bytes, not {type(value).__name__}")
        if len(value) != PUBLIC_KEY_LENGTH:
            raise BadLength(f"{name} must be {PUBLIC_KEY_LENGTH} bytes, got {len(value)}")
    h = _KDF.copy()
    h.update(shared_secret)
    h.update(ephemeral_public)
    h.update(recipient_public)
    okm = h.digest()
    return okm[:_KEY_LENGTH], okm[_KEY_LENGTH:]


def layer_overhead(proven: bool = False) -> int:
    """Bytes one layer adds: :data:`LAYER_OVERHEAD`, or :data:`PROVEN_LAYER_OVERHEAD` with an
    ownership proof."""
    return PROVEN_LAYER_OVERHEAD if proven else LAYER_OVERHEAD


def onion_length(payload_len: int, layers: int, *, proven: bool = False) -> int:
    """Return the length in bytes of an onion with ``layers`` layers around ``payload_len``
    (each with an ownership proof if ``proven``).

    ``layers`` may be 0 (the bare payload), so the input of hop ``i >= 1`` in a chain of
    ``L`` mixes has length ``onion_length(payload_len, L - i, proven=...)``. Raises
    ``TypeError``/``ValueError`` for non-int, negative, or too many (``> MAX_LAYERS``)
    layers.
    """
    _check_int(payload_len, "payload_len", 0, _MAX_LENGTH)
    _check_int(layers, "layers", 0, MAX_LAYERS)
    return payload_len + layers * layer_overhead(proven)


def submission_length(payload_len: int, layers: int, messages: int, *, proven: bool = False) -> int:
    """Return the length of a client's submission box: one entry layer (never proven) around
    ``messages`` inner onions of ``layers - 1`` layers each (``layers`` = mixes in the chain,
    at least 1; ``proven``: the inner layers carry ownership proofs).

    Raises ``TypeError``/``ValueError`` as :func:`onion_length` does, and for ``layers < 1``
    or ``messages < 1``.
    """
    _check_int(layers, "layers", 1, MAX_LAYERS)
    _check_int(messages, "messages", 1, _MAX_LENGTH)
    return LAYER_OVERHEAD + messages * onion_length(payload_len, layers - 1, proven=proven)


def split_layer(layer: bytes, *, proven: bool = False) -> tuple[bytes, bytes, bytes]:
    """Return ``(E, ownership proof, AEAD ciphertext)`` of a layer (the proof is ``b""`` when
    not ``proven``). Raises :class:`BadLength` if the layer is too short to hold them."""
    offset = PUBLIC_KEY_LENGTH + (OWNERSHIP_PROOF_LENGTH if proven else 0)
    if len(layer) < offset + AEAD_TAG_LENGTH:
        raise BadLength(f"a layer must be at least {offset + AEAD_TAG_LENGTH} bytes")
    return layer[:PUBLIC_KEY_LENGTH], layer[PUBLIC_KEY_LENGTH:offset], layer[offset:]


def _check_public_keys(public_keys: Sequence[bytes]) -> list[bytes]:
    if isinstance(public_keys, (bytes, bytearray, str)):
        raise TypeError("public_keys must be a sequence of 32-byte keys, not a single value")
    keys = list(public_keys)
    if len(keys) > MAX_LAYERS:
        raise ValueError(f"at most {MAX_LAYERS} layers are supported, got {len(keys)}")
    for hop, key in enumerate(keys):
        if not isinstance(key, bytes):
            raise TypeError(f"public key for hop {hop} must be bytes, not {type(key).__name__}")
        if len(key) != PUBLIC_KEY_LENGTH:
            raise ValueError(
                f"public key for hop {hop} must be {PUBLIC_KEY_LENGTH} bytes, got {len(key)}"
            )
    return keys


class _Sealer:
    """Makes layers with one set of libsodium buffers (one sealer per thread,
    :func:`_sealer`, so threads never share one). Calls libsodium through PyNaCl's CFFI
    module directly: the ``nacl.bindings`` wrappers re-check every argument and cost a few
    microseconds per call, a tenth of a layer."""

    __slots__ = ("_pk", "_q", "_sk")

    def __init__(self) -> None:
        self._pk = _ffi.new("unsigned char[]", 32)
        self._sk = _ffi.new("unsigned char[]", 32)
        self._q = _ffi.new("unsigned char[]", 32)

    def seal(
        self, plaintext: bytes, recipient_public: bytes, binding: bytes, proven: bool = False
    ) -> bytes:
        """One layer, arguments already checked (32-byte key, bytes). Raises ``ValueError``
        for an unusable (low-order) recipient key."""
        ephemeral_public: object  # bytes, or the key pair's libsodium buffer
        ephemeral_secret: object
        if proven:
            ephemeral = new_ephemeral()
            ephemeral_public, ephemeral_secret = ephemeral.public, ephemeral.secret
        else:
            _lib.crypto_box_keypair(self._pk, self._sk)  # cannot fail
            ephemeral_public = _ffi.buffer(self._pk, 32)  # both stay in libsodium's buffers
            ephemeral_secret = self._sk
        if _lib.crypto_scalarmult(self._q, ephemeral_secret, recipient_public) != 0:
            # libsodium refuses an all-zero result: a low-order key
            raise ValueError("the recipient's public key is unusable (a low-order point)")
        kdf = _KDF.copy()  # :func:`layer_key`, inlined
        kdf.update(_ffi.buffer(self._q, 32))
        kdf.update(ephemeral_public)  # type: ignore[arg-type]
        kdf.update(recipient_public)
        okm = kdf.digest()
        key, nonce = okm[:_KEY_LENGTH], okm[_KEY_LENGTH:]
        sealed_length = len(plaintext) + AEAD_TAG_LENGTH
        if not proven:  # E and the ciphertext written into one buffer: one copy out
            out = _ffi.new("unsigned char[]", PUBLIC_KEY_LENGTH + sealed_length)
            _ffi.memmove(out, self._pk, PUBLIC_KEY_LENGTH)
            _lib.crypto_aead_chacha20poly1305_ietf_encrypt(
                out + PUBLIC_KEY_LENGTH, _ffi.NULL, plaintext, len(plaintext), binding,
                len(binding), _ffi.NULL, nonce, key,
            )  # fmt: skip  # cannot fail for these lengths
            layer: bytes = _ffi.buffer(out, PUBLIC_KEY_LENGTH + sealed_length)[:]
            return layer
        out = _ffi.new("unsigned char[]", sealed_length)
        _lib.crypto_aead_chacha20poly1305_ietf_encrypt(
            out, _ffi.NULL, plaintext, len(plaintext), binding, len(binding), _ffi.NULL,
            nonce, key,
        )  # fmt: skip  # cannot fail for these lengths
        sealed: bytes = _ffi.buffer(out, sealed_length)[:]
        proof = prove_ownership(ephemeral, ciphertext_digest(sealed), binding)
        return ephemeral.public + proof + sealed


_SEALERS = threading.local()


def _sealer() -> _Sealer:
    """This thread's :class:`_Sealer` (its buffers are reused, never shared by threads)."""
    sealer: _Sealer | None = getattr(_SEALERS, "sealer", None)
    if sealer is None:
        sealer = _SEALERS.sealer = _Sealer()
    return sealer


def _seal(plaintext: bytes, recipient_public: bytes, binding: bytes, proven: bool = False) -> bytes:
    """One layer with this thread's :class:`_Sealer` (see :meth:`_Sealer.seal`)."""
    return _sealer().seal(plaintext, recipient_public, binding, proven)


def _wrap_checked(
    payload: bytes, keys: Sequence[bytes], layer_bindings: Sequence[bytes], first_hop: int,
    proven: bool, sealer: _Sealer,
) -> bytes:  # fmt: skip
    onion = payload
    for offset in reversed(range(len(keys))):
        try:
            onion = sealer.seal(onion, keys[offset], layer_bindings[offset], proven)
        except ValueError:
            raise ValueError(f"public key for hop {first_hop + offset} is unusable") from None
    return onion


def seal_layer(
    plaintext: bytes, recipient_public: bytes, *, chain_id: str, round_id: int, hop_index: int
) -> bytes:
    """Return one layer around ``plaintext`` for the mix with round key ``recipient_public``
    at ``hop_index`` (``len(plaintext) + LAYER_OVERHEAD`` bytes).

    Raises ``TypeError`` for non-bytes arguments, ``ValueError`` for a key that is not 32
    bytes or is unusable (a low-order point), or a bad binding (see :func:`binding_data`).
    """
    if not isinstance(plaintext, bytes):
        raise TypeError(f"plaintext must be bytes, not {type(plaintext).__name__}")
    (key,) = _check_public_keys([recipient_public])
    binding = binding_data(chain_id=chain_id, round_id=round_id, hop_index=hop_index)
    return _seal(plaintext, key, binding)


def wrap(
    payload: bytes,
    public_keys: Sequence[bytes],
    *,
    chain_id: str,
    round_id: int,
    first_hop: int = 0,
    proven: bool = False,
) -> bytes:
    """Wrap ``payload`` in one layer per key and return the onion (with ownership proofs in
    every layer if ``proven``).

    ``public_keys`` are the round public keys of the mixes at hops ``first_hop``,
    ``first_hop + 1``, … in chain order; the first key's layer is the outermost. The result
    has length ``onion_length(len(payload), len(public_keys), proven=proven)`` (no keys: the
    payload itself). Clients use :func:`wrap_submission`, which calls this with ``first_hop = 1``
    for the inner onions. The caller must have verified the keys (see
    :meth:`mixnet.keys.RoundKeyAnnouncement.verify`).

    Raises ``TypeError`` if ``payload`` or a key is not ``bytes``; ``ValueError`` for more
    than :data:`MAX_LAYERS` keys, a key that is not 32 bytes or is unusable (a low-order
    point), an empty chain id, a ``round_id`` outside ``[0, 2**64)`` or hops beyond
    ``2**16 - 1``.
    """
    if not isinstance(payload, bytes):
        raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
    keys = _check_public_keys(public_keys)
    layer_bindings = _layer_bindings(chain_id, round_id, first_hop, len(keys))
    return _wrap_checked(payload, keys, layer_bindings, first_hop, proven, _sealer())


def wrap_submission(
    payloads: Sequence[bytes],
    public_keys: Sequence[bytes],
    *,
    chain_id: str,
    round_id: int,
    proven: bool = False,
) -> bytes:
    """Return a client's submission box for ``payloads`` (one inner onion each).

    ``public_keys`` are all the mixes' round keys in chain order (hop 0 first). Each payload
    is wrapped for hops ``1 .. L-1`` (:func:`wrap`); the inner onions are concatenated in
    order and sealed in one layer for the entry mix. The result has length
    ``submission_length(len(payload), L, len(payloads), proven=proven)``; with ``proven``
    every inner layer carries an ownership proof.

    Raises ``TypeError`` for non-bytes payloads or keys; ``ValueError`` for no payloads,
    payloads of different lengths, no keys, or anything :func:`wrap` refuses.
    """
    if isinstance(payloads, (bytes, bytearray, str)):
        raise TypeError("payloads must be a sequence of bytes, not a single value")
    items = list(payloads)
    if not items:
        raise ValueError("a submission needs at least one payload")
    for index, payload in enumerate(items):
        if not isinstance(payload, bytes):
            raise TypeError(f"payload {index} must be bytes, not {type(payload).__name__}")
    if len({len(p) for p in items}) != 1:
        raise ValueError("every payload of a submission must have the same length")
    keys = _check_public_keys(public_keys)
    if not keys:
        raise ValueError("public_keys must hold at least one key")
    layer_bindings = _layer_bindings(chain_id, round_id, 0, len(keys))
    sealer = _sealer()
    inner = b"".join(
        _wrap_checked(p, keys[1:], layer_bindings[1:], 1, proven, sealer) for p in items
    )
    try:
        return sealer.seal(inner, keys[0], layer_bindings[0])
    except ValueError:
        raise ValueError("public key for hop 0 is unusable") from None


def open_layer_with_secret(
    layer: bytes, recipient_public: bytes, shared_secret: bytes, binding: bytes
) -> bytes:
    """Open ``layer`` with its (revealed) X25519 shared secret and return what it holds.

    ``binding`` is :func:`binding_data` for the layer's chain, round and hop. This is how
    anyone checks a mix's step in an accusation (:mod:`mixnet.blame`); it does not check that
    the secret is right (verify its proof first). Raises ``TypeError``, :class:`BadLength`
    (a key or secret not 32 bytes, a layer shorter than :data:`LAYER_OVERHEAD`), and
    :class:`DecryptionFailed` if the layer does not authenticate.
    """
    if not isinstance(layer, bytes):
        raise TypeError(f"layer must be bytes, not {type(layer).__name__}")
    if not isinstance(binding, bytes):
        raise TypeError(f"binding must be bytes, not {type(binding).__name__}")
    if len(layer) < LAYER_OVERHEAD:
        raise BadLength(f"a layer must be at least {LAYER_OVERHEAD} bytes, got {len(layer)}")
    ephemeral = layer[:PUBLIC_KEY_LENGTH]
    key, nonce = layer_key(shared_secret, ephemeral, recipient_public)
    try:
        return bindings.crypto_aead_chacha20poly1305_ietf_decrypt(
            layer[PUBLIC_KEY_LENGTH:], binding, nonce, key
        )
    except CryptoError:
        raise DecryptionFailed("the layer does not authenticate with this secret") from None


_NO_OPEN = "onion layer did not decrypt with this round key"
_NO_OPEN_BOUND = "onion layer did not decrypt with this round key, chain, round and hop"


def peel_many(
    onions: Sequence[bytes],
    secret_key: PrivateKey,
    *,
    chain_id: str,
    round_id: int,
    hop_index: int,
    expected_length: int,
    split: int = 1,
    proven: bool = False,
) -> list[bytes | MixnetError]:
    """Remove this mix's layer from every onion in ``onions``; never raises for a bad item.

    Each opened layer's content is cut into ``split`` equal items (the entry mix opens a
    submission box into its ``m`` inner onions with ``split = m``; other mixes use 1).
    Returns a flat list with ``split`` entries per onion, in order: the items, or ``split``
    times the error found, checked in order: not ``bytes`` of exactly ``expected_length`` →
    :class:`BadLength` (no cryptography is done on a wrong-length input); the layer does not
    authenticate with ``secret_key`` and the binding of ``(chain_id, round_id, hop_index)``
    → :class:`DecryptionFailed`. With ``proven`` each layer carries an ownership proof after
    ``E``, which peeling skips (it is checked only for a layer that does not open). Meant to
    run in a worker thread on a chunk of a batch (libsodium releases the GIL). Invalid call
    arguments (including an ``expected_length`` whose content does not divide into ``split``
    items) raise ``TypeError``/``ValueError`` before any item is touched.
    """
    if not isinstance(secret_key, PrivateKey):
        raise TypeError(f"secret_key must be a PrivateKey, not {type(secret_key).__name__}")
    return peel_many_raw(
        onions,
        bytes(secret_key),
        bytes(secret_key.public_key),
        chain_id=chain_id,
        round_id=round_id,
        hop_index=hop_index,
        expected_length=expected_length,
        split=split,
        proven=proven,
    )


def peel_many_raw(
    onions: Sequence[bytes],
    secret: bytes,
    public: bytes,
    *,
    chain_id: str,
    round_id: int,
    hop_index: int,
    expected_length: int,
    split: int = 1,
    proven: bool = False,
) -> list[bytes | MixnetError]:
    """:func:`peel_many` with the round key as its raw 32-byte ``secret`` and the matching
    ``public`` key (the caller vouches that they match: a wrong ``public`` makes every layer
    fail to open). No key is derived here, so a worker process handed the key's bytes costs
    no extra scalar multiplication per request.

    :raises TypeError, ValueError: as :func:`peel_many`; also for keys that are not 32
        ``bytes``.
    """
    for key, label in ((secret, "secret"), (public, "public")):
        if not isinstance(key, bytes) or len(key) != PUBLIC_KEY_LENGTH:
            raise TypeError(f"{label} must be 32 bytes")
    _check_int(expected_length, "expected_length", LAYER_OVERHEAD, _MAX_LENGTH)
    _check_int(split, "split", 1, _MAX_LENGTH)
    overhead = layer_overhead(proven)
    if expected_length < overhead:
        raise ValueError(f"expected_length must be at least {overhead}")
    skip = overhead - LAYER_OVERHEAD
    content = expected_length - overhead
    if content % split or (split > 1 and content == 0):
        raise ValueError(f"a layer of {expected_length} bytes does not hold {split} equal items")
    width = content // split
    binding = binding_data(chain_id=chain_id, round_id=round_id, hop_index=hop_index)
    results: list[bytes | MixnetError] = []
    # one layer's steps inlined (a call and its lookups cost a percent of a layer), with
    # buffers of this call (so of this thread) reused for every onion: each is overwritten
    # before it is read, so nothing of one onion reaches another's result
    q = _ffi.new("unsigned char[]", 32)
    out = _ffi.new("unsigned char[]", max(1, expected_length))
    shared, start = _ffi.buffer(q, 32), PUBLIC_KEY_LENGTH + skip
    sealed_length = expected_length - start
    inner = _ffi.buffer(out, sealed_length - AEAD_TAG_LENGTH)  # >= 0: checked above
    scalarmult, decrypt = _lib.crypto_scalarmult, _lib.crypto_aead_chacha20poly1305_ietf_decrypt
    kdf, null, binding_length = _KDF.copy, _ffi.NULL, len(binding)
    append = results.append
    for onion in onions:
        if not isinstance(onion, bytes) or len(onion) != expected_length:
            error: MixnetError = BadLength(
                f"onion must be bytes of length {expected_length}, not {type(onion).__name__}"
                if not isinstance(onion, bytes)
                else f"onion must be {expected_length} bytes, got {len(onion)}"
            )
            results.extend([error] * split)
            continue
        ephemeral = onion[:PUBLIC_KEY_LENGTH]
        if scalarmult(q, secret, ephemeral) != 0:  # a low-order ephemeral key
            results.extend([DecryptionFailed(_NO_OPEN)] * split)
            continue
        h = kdf()  # :func:`layer_key`
        h.update(shared)
        h.update(ephemeral)
        h.update(public)
        okm = h.digest()
        if decrypt(out, null, null, onion[start:], sealed_length, binding, binding_length,
                   okm[_KEY_LENGTH:], okm[:_KEY_LENGTH]) != 0:  # fmt: skip
            results.extend([DecryptionFailed(_NO_OPEN_BOUND)] * split)
            continue
        if split == 1:
            append(inner[:])
        else:
            layer = inner[:]
            results.extend(layer[i : i + width] for i in range(0, content, width))
    return results
