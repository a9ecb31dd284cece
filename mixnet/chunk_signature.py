"""Signed chunks: a mix signs every batch chunk it sends, so that what it delivered can be
shown to anyone later (``docs/protocol.md``, "Trace and exclude").

Without them a mix that corrupts an honest item in transit can deny having sent it and blame
its honest successor. With them the successor keeps the sender's signature with each chunk,
and an accusation about an item carries a :class:`Delivery`: the signature over the chunk's
Merkle root and the item's path. Then "the successor made it up" and "the predecessor
corrupted it" can be told apart by anyone.

Construction (label ``mixnet/chunk/v1``)
----------------------------------------
* **Leaves and nodes.** As RFC 6962 (§ 2.1), with BLAKE2b-256 for SHA-256: a leaf hash is
  ``H(0x00 || item)``, an inner node ``H(0x01 || left || right)``; the root of ``n > 1``
  leaves splits them at ``k``, the largest power of two below ``n``; the root of no leaves
  is ``H("")``.
* **Message.** ``u32be(len D) || D || u32be(len chain) || chain || u64be(round) ||
  u32be(len sender) || sender || u32be(index) || u32be(count) || root`` with
  ``D = "mixnet/chunk/v1"``, ``sender`` the sending node's name, ``index`` the chunk's index
  in its batch and ``count`` its number of items; the signature is Ed25519 by the sender's
  identity key.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from mixnet.errors import BadLength

__all__ = [
    "KEPT_SUBTREE",
    "SIGNATURE_LENGTH",
    "ChunkTree",
    "Delivery",
    "chunk_message",
    "chunk_root",
    "delivery_of",
    "inclusion_path",
    "leaf_hash",
    "leaf_hashes",
    "path_root",
    "root_of_leaves",
    "sign_chunk",
    "verify_chunk",
    "verify_delivery",
]

SIGNATURE_LENGTH = 64
_DOMAIN = b"mixnet/chunk/v1"
_HASH = 32
#: Most path entries (a chunk holds at most 2**16 items; 2**32 is generous).
MAX_PATH = 32


_blake2b = hashlib.blake2b
#: The state of ``H`` after the leaf prefix ``0x00``, copied for each leaf of an ``Items``.
_LEAF = _blake2b(b"\x00", digest_size=_HASH)
#: The state of ``H`` after the inner-node prefix ``0x01``, copied for each inner node.
_NODE = _blake2b(b"\x01", digest_size=_HASH)


def _h(data: bytes) -> bytes:
    return _blake2b(data, digest_size=_HASH).digest()


def leaf_hash(item: bytes) -> bytes:
    """``H(0x00 || item)``."""
    return _h(b"\x00" + item)


def leaf_hashes(items: Sequence[bytes]) -> list[bytes]:
    """``[leaf_hash(item) for item in items]``, faster: an :class:`~mixnet.core.items.Items`
    is hashed from its buffer, without one ``bytes`` object per item."""
    from mixnet.core.items import Items  # here: mixnet.core imports this module

    if isinstance(items, Items) and items.width:
        width = items.width
        view = memoryview(items.tobytes())
        copy = _LEAF.copy
        leaves: list[bytes] = []
        append = leaves.append
        for offset in range(0, len(view), width):
            h = copy()
            h.update(view[offset : offset + width])
            append(h.digest())
        return leaves
    return [_blake2b(b"\x00" + item, digest_size=_HASH).digest() for item in items]


def root_of_leaves(leaves: Sequence[bytes]) -> bytes:
    """The Merkle root over leaf hashes ``leaves`` (module docstring): :func:`chunk_root`
    is ``root_of_leaves(leaf_hashes(items))``.

    Computed level by level, pairing neighbours and carrying an odd last node up unchanged,
    which gives RFC 6962's tree (its left subtrees are perfect, so every pair this forms is
    one of its nodes) without the recursion.
    """
    if not leaves:
        return _h(b"")
    level = list(leaves)
    copy = _NODE.copy  # a copied prefix state: no concatenation, no keyword parsing per node
    while len(level) > 1:
        odd = level[-1] if len(level) & 1 else None
        pairs: list[bytes] = []
        append = pairs.append
        for left, right in zip(level[0::2], level[1::2], strict=False):
            h = copy()
            h.update(left)
            h.update(right)
            append(h.digest())
        if odd is not None:
            pairs.append(odd)
        level = pairs
    return level[0]


def _node(left: bytes, right: bytes) -> bytes:
    return _h(b"\x01" + left + right)


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def chunk_root(items: Sequence[bytes]) -> bytes:
    """The Merkle root of a chunk's items (module docstring)."""
    return root_of_leaves(leaf_hashes(items))


def inclusion_path(items: Sequence[bytes], position: int) -> tuple[bytes, ...]:
    """The audit path of ``items[position]`` (RFC 6962 § 2.1.1 order: the sibling nearest the
    leaf first). Raises ``IndexError`` for a position outside the chunk. For many paths of
    one chunk, :class:`ChunkTree` hashes the chunk once instead of once a path."""
    return ChunkTree(items).path(position)


#: Subtrees of at least this many leaves keep their root in a :class:`ChunkTree`.
KEPT_SUBTREE = 64


class ChunkTree:
    """The Merkle tree of one chunk's ``items``, for many audit paths: the root of every
    subtree of at least :data:`KEPT_SUBTREE` leaves is kept once computed (about ``2n / 64``
    roots: half a byte per item), so the first path hashes about the whole chunk and each
    later one fewer than ``4 · 64`` leaves and nodes. Safe to share between threads (a root
    computed twice is the same)."""

    def __init__(self, items: Sequence[bytes]) -> None:
        self.items = items
        self._roots: dict[tuple[int, int], bytes] = {}

    def _range_root(self, lo: int, hi: int) -> bytes:
        """The root of the subtree over ``items[lo:hi]`` (a subtree of the chunk's tree)."""
        if hi - lo < KEPT_SUBTREE:
            return root_of_leaves(leaf_hashes(self.items[lo:hi]))
        root = self._roots.get((lo, hi))
        if root is None:
            k = _split(hi - lo)
            root = _node(self._range_root(lo, lo + k), self._range_root(lo + k, hi))
            self._roots[(lo, hi)] = root
        return root

    def path(self, position: int) -> tuple[bytes, ...]:
        """The audit path of ``items[position]``, as :func:`inclusion_path`.

        :raises IndexError: ``position`` is outside the chunk.
        """
        count = len(self.items)
        if not 0 <= position < count:
            raise IndexError(f"position {position} outside a chunk of {count} items")
        siblings: list[bytes] = []  # from the root down; the path lists them leaf first
        lo, hi = 0, count
        while hi - lo > 1:
            k = _split(hi - lo)
            if position < lo + k:
                siblings.append(self._range_root(lo + k, hi))
                hi = lo + k
            else:
                siblings.append(self._range_root(lo, lo + k))
                lo += k
        siblings.reverse()
        return tuple(siblings)


def path_root(item: bytes, position: int, count: int, path: Sequence[bytes]) -> bytes | None:
    """The root that ``path`` proves for ``item`` at ``position`` of a chunk of ``count``
    items (``None`` if the path has the wrong length or shape for them)."""
    if not 0 <= position < count or any(len(p) != _HASH for p in path):
        return None
    # the sides of each level, leaf first, as inclusion_path walks them
    sides: list[bool] = []  # True: the sibling is on the right
    n, at = count, position
    while n > 1:
        k = _split(n)
        if at < k:
            sides.append(True)
            n = k
        else:
            sides.append(False)
            at -= k
            n -= k
    if len(sides) != len(path):
        return None
    node = leaf_hash(item)
    for sibling, right in zip(path, reversed(sides), strict=True):
        node = _node(node, sibling) if right else _node(sibling, node)
    return node


def chunk_message(
    *, chain_id: str, round_id: int, sender: str, index: int, count: int, root: bytes
) -> bytes:
    """The bytes a chunk's signature covers (module docstring)."""
    chain, name = chain_id.encode("utf-8"), sender.encode("utf-8")
    return b"".join(
        (
            struct.pack(">I", len(_DOMAIN)), _DOMAIN,
            struct.pack(">I", len(chain)), chain,
            struct.pack(">Q", round_id),
            struct.pack(">I", len(name)), name,
            struct.pack(">II", index, count),
            root,
        )
    )  # fmt: skip


def sign_chunk(
    key: SigningKey, *, chain_id: str, round_id: int, sender: str, index: int,
    items: Sequence[bytes], root: bytes | None = None,
) -> bytes:  # fmt: skip
    """The sender's 64-byte signature over chunk ``index`` holding ``items``. ``root``, if
    given, must be ``chunk_root(items)`` (computed already, e.g. in a worker thread)."""
    if root is None:
        root = chunk_root(items)
    message = chunk_message(chain_id=chain_id, round_id=round_id, sender=sender, index=index,
                            count=len(items), root=root)  # fmt: skip
    return bytes(key.sign(message).signature)


def verify_chunk(
    key: VerifyKey, signature: bytes, *, chain_id: str, round_id: int, sender: str,
    index: int, items: Sequence[bytes], root: bytes | None = None,
) -> bool:  # fmt: skip
    """Whether ``signature`` is ``sender``'s (``key``) over chunk ``index`` with ``items``.
    ``root``, if given, must be ``chunk_root(items)`` (the caller hashed the items
    already)."""
    if not isinstance(signature, bytes) or len(signature) != SIGNATURE_LENGTH:
        return False
    if root is None:
        root = chunk_root(items)
    message = chunk_message(chain_id=chain_id, round_id=round_id, sender=sender, index=index,
                            count=len(items), root=root)  # fmt: skip
    try:
        key.verify(message, signature)
    except BadSignatureError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Delivery:
    """Evidence that ``sender`` delivered an item: it is at ``position`` of chunk ``index``
    (``count`` items) of the sender's batch, ``path`` is its audit path and ``signature`` the
    sender's signature over the chunk. Construction checks types and lengths only."""

    sender: str
    index: int
    count: int
    position: int
    path: tuple[bytes, ...]
    signature: bytes

    def __post_init__(self) -> None:
        for name in ("index", "count", "position"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise TypeError(f"{name} must be a non-negative int")
        if not isinstance(self.sender, str) or not self.sender:
            raise TypeError("sender must be a non-empty str")
        if len(self.path) > MAX_PATH or any(
            not isinstance(p, bytes) or len(p) != _HASH for p in self.path
        ):
            raise BadLength(f"a path holds at most {MAX_PATH} hashes of {_HASH} bytes")
        if not isinstance(self.signature, bytes) or len(self.signature) != SIGNATURE_LENGTH:
            raise BadLength(f"signature must be {SIGNATURE_LENGTH} bytes")


def delivery_of(
    items: Sequence[bytes], position: int, *, sender: str, index: int, signature: bytes
) -> Delivery:
    """The :class:`Delivery` of ``items[position]`` from a stored, signed chunk."""
    return Delivery(sender, index, len(items), position, inclusion_path(items, position),
                    signature)  # fmt: skip


def verify_delivery(
    delivery: Delivery, item: bytes, key: VerifyKey, *, chain_id: str, round_id: int
) -> bool:
    """Whether ``delivery`` proves that its sender (identity ``key``) sent ``item`` in round
    ``round_id`` of chain ``chain_id``."""
    root = path_root(item, delivery.position, delivery.count, delivery.path)
    if root is None:
        return False
    message = chunk_message(chain_id=chain_id, round_id=round_id, sender=delivery.sender,
                            index=delivery.index, count=delivery.count, root=root)  # fmt: skip
    try:
        key.verify(message, delivery.signature)
    except BadSignatureError:
        return False
    return True
