"""Layered sealed-box onions for a fixed cascade of mixes.

An onion for a chain of ``L`` mixes is built innermost first: the last mix's layer is the
innermost. Each layer is one PyNaCl :class:`~nacl.public.SealedBox` (an ephemeral X25519 key,
XSalsa20-Poly1305; :data:`SEALED_BOX_OVERHEAD` = 48 bytes) whose plaintext is::

    binding tag (16 bytes) || inner bytes

The binding tag is BLAKE2b-128 over a domain string, the chain id, the round id and the hop
index (see :func:`binding_tag`). A mix that opens a layer checks the tag, so a layer made for
another chain, round or position in the chain is refused even when the key happens to match.
Each layer therefore adds :data:`LAYER_OVERHEAD` = 64 bytes, and every onion at a given hop of a
round has the same length, :func:`onion_length`.

Lengths and argument types are checked before any cryptography. Randomness comes only from
libsodium (the OS CSPRNG), inside ``SealedBox.encrypt``.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Sequence

from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, PublicKey, SealedBox

from mixnet.errors import BadLength, BindingMismatch, DecryptionFailed, MixnetError

#: Bytes a sealed box adds: 32-byte ephemeral public key + 16-byte Poly1305 tag.
SEALED_BOX_OVERHEAD = 48
#: Bytes of the per-layer binding tag (BLAKE2b-128).
BINDING_TAG_LENGTH = 16
#: Bytes each onion layer adds to its inner bytes.
LAYER_OVERHEAD = SEALED_BOX_OVERHEAD + BINDING_TAG_LENGTH
#: Bytes of an X25519 public key.
PUBLIC_KEY_LENGTH = 32
#: Most layers an onion may have (the hop index is encoded as an unsigned 16-bit integer).
MAX_LAYERS = 1 << 16

_BINDING_DOMAIN = b"mixnet/onion-layer-binding/v1"
_MAX_ROUND_ID = (1 << 64) - 1
_MAX_HOP_INDEX = MAX_LAYERS - 1

assert LAYER_OVERHEAD == 64


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


def binding_tag(*, chain_id: str, round_id: int, hop_index: int) -> bytes:
    """Return the 16-byte tag binding a layer to ``(chain_id, round_id, hop_index)``.

    The tag is BLAKE2b with a 16-byte digest over the length-prefixed domain string, the
    length-prefixed UTF-8 chain id, the round id as a big-endian uint64 and the hop index as
    a big-endian uint16. Raises ``TypeError``/``ValueError`` for an empty or non-str chain
    id, a round id outside ``[0, 2**64)`` or a hop index outside ``[0, 2**16)``.
    """
    chain = _chain_id_bytes(chain_id)
    _check_int(round_id, "round_id", 0, _MAX_ROUND_ID)
    _check_int(hop_index, "hop_index", 0, _MAX_HOP_INDEX)
    message = b"".join(
        (
            _length_prefixed(_BINDING_DOMAIN),
            _length_prefixed(chain),
            struct.pack(">QH", round_id, hop_index),
        )
    )
    return hashlib.blake2b(message, digest_size=BINDING_TAG_LENGTH).digest()


def onion_length(payload_len: int, layers: int) -> int:
    """Return the length in bytes of an onion with ``layers`` layers around ``payload_len``.

    ``layers`` may be 0 (the bare payload), so the input of hop ``i`` in a chain of ``L``
    mixes has length ``onion_length(payload_len, L - i)``. Raises ``TypeError``/``ValueError``
    for non-int, negative, or too many (``> MAX_LAYERS``) layers.
    """
    _check_int(payload_len, "payload_len", 0, 1 << 62)
    _check_int(layers, "layers", 0, MAX_LAYERS)
    return payload_len + layers * LAYER_OVERHEAD


def wrap(payload: bytes, public_keys: Sequence[bytes], *, chain_id: str, round_id: int) -> bytes:
    """Wrap ``payload`` in one sealed-box layer per mix and return the onion.

    ``public_keys`` are the mixes' 32-byte X25519 round public keys in chain order (hop 0,
    the first mix, first); the result has length ``onion_length(len(payload),
    len(public_keys))``. The caller must have verified the keys (see
    :meth:`mixnet.keys.RoundKeyAnnouncement.verify`).

    Raises ``TypeError`` if ``payload`` is not ``bytes`` or a key is not ``bytes``;
    ``ValueError`` if there are no keys or more than :data:`MAX_LAYERS`, a key is not 32
    bytes, a key is unusable (a low-order point), the chain id is empty, or ``round_id`` is
    outside ``[0, 2**64)``.
    """
    if not isinstance(payload, bytes):
        raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
    if isinstance(public_keys, (bytes, bytearray, str)):
        raise TypeError("public_keys must be a sequence of 32-byte keys, not a single value")
    keys = list(public_keys)
    if not keys:
        raise ValueError("public_keys must hold at least one key")
    if len(keys) > MAX_LAYERS:
        raise ValueError(f"at most {MAX_LAYERS} layers are supported, got {len(keys)}")
    for hop, key in enumerate(keys):
        if not isinstance(key, bytes):
            raise TypeError(f"public key for hop {hop} must be bytes, not {type(key).__name__}")
        if len(key) != PUBLIC_KEY_LENGTH:
            raise ValueError(
                f"public key for hop {hop} must be {PUBLIC_KEY_LENGTH} bytes, got {len(key)}"
            )
    tags = [
        binding_tag(chain_id=chain_id, round_id=round_id, hop_index=hop) for hop in range(len(keys))
    ]

    onion = payload
    for hop in reversed(range(len(keys))):
        box = SealedBox(PublicKey(keys[hop]))
        try:
            onion = box.encrypt(tags[hop] + onion)
        except CryptoError:
            raise ValueError(f"public key for hop {hop} is unusable") from None
    return onion


def _peel_checked(onion: object, box: SealedBox[PrivateKey], tag: bytes, length: int) -> bytes:
    """Peel one layer with arguments already validated; raises only :class:`MixnetError`."""
    if not isinstance(onion, bytes):
        raise BadLength(f"onion must be bytes of length {length}, not {type(onion).__name__}")
    if len(onion) != length:
        raise BadLength(f"onion must be {length} bytes, got {len(onion)}")
    try:
        plaintext = box.decrypt(onion)
    except CryptoError:
        raise DecryptionFailed("onion layer did not decrypt with this round key") from None
    if not hmac.compare_digest(plaintext[:BINDING_TAG_LENGTH], tag):
        raise BindingMismatch("onion layer is bound to another chain, round or hop")
    return plaintext[BINDING_TAG_LENGTH:]


def _prepare_peel(
    secret_key: PrivateKey, chain_id: str, round_id: int, hop_index: int, expected_length: int
) -> tuple[SealedBox[PrivateKey], bytes]:
    """Validate the per-call peel arguments; return the opening box and the expected tag."""
    if not isinstance(secret_key, PrivateKey):
        raise TypeError(f"secret_key must be a PrivateKey, not {type(secret_key).__name__}")
    _check_int(expected_length, "expected_length", LAYER_OVERHEAD, 1 << 62)
    tag = binding_tag(chain_id=chain_id, round_id=round_id, hop_index=hop_index)
    return SealedBox(secret_key), tag


def peel_many(
    onions: Sequence[bytes],
    secret_key: PrivateKey,
    *,
    chain_id: str,
    round_id: int,
    hop_index: int,
    expected_length: int,
) -> list[bytes | MixnetError]:
    """Remove this mix's layer from every onion in ``onions``; never raises for a bad item.

    Returns a list aligned with ``onions``: for each, the inner bytes
    (``expected_length - LAYER_OVERHEAD`` of them), or the error found, checked in order:
    not ``bytes`` of exactly ``expected_length`` → :class:`BadLength` (no cryptography is done
    on a wrong-length input); the sealed box does not open with ``secret_key`` →
    :class:`DecryptionFailed`; the binding tag does not match ``(chain_id, round_id,
    hop_index)`` → :class:`BindingMismatch`. Meant to run in a
    worker thread on a chunk of a batch (libsodium releases the GIL). Invalid call
    arguments still raise ``TypeError``/``ValueError`` before any item is touched.
    """
    box, tag = _prepare_peel(secret_key, chain_id, round_id, hop_index, expected_length)
    results: list[bytes | MixnetError] = []
    for onion in onions:
        try:
            results.append(_peel_checked(onion, box, tag, expected_length))
        except MixnetError as err:
            results.append(err)
    return results
