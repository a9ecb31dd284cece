"""Compact hash tables of 16-byte digests: the round's replay filters (pure).

A Python ``set`` or ``dict`` of 16-byte ``bytes`` costs about 100 bytes per entry, more than
the 51- or 99-byte onions it guards. These tables keep each digest as two ``uint64`` words
(plus an ``int32`` owner for :class:`ReplayFilter`) in open addressing with linear probing,
at most 3/4 full: about 21 (27 with owners) bytes per entry. They behave exactly like the
``set``/``dict`` they replace (every digest is compared whole), and offer bulk operations on
numpy arrays for a chunk's thousands of digests at once.

* :class:`DigestSet` — a :class:`~collections.abc.MutableSet` of digests (the entry mix's
  digests of a round's inner onions).
* :class:`ReplayFilter` — a :class:`~collections.abc.MutableMapping` digest → chunk index
  (a later mix's filter of the round's incoming ciphertexts), with :meth:`ReplayFilter.owners`
  and :meth:`ReplayFilter.add_new` for a whole chunk.

Slots are chosen by a multiply-shift hash under a random per-table key (``os.urandom``), so
that whoever chooses the items cannot make them collide in the table and slow it down; the
key changes where entries sit, never what the table answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableMapping, MutableSet, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from mixnet.core.digest_table import (
    DIGEST_LENGTH,
    I64,
    U64,
    DigestTable,
    all_distinct,
    has_repeats,
    split_digests,
)
from mixnet.core.digest_table import MASK_64 as _M64
from mixnet.core.digest_table import MAX_LOAD as _MAX_LOAD

__all__ = [
    "DIGEST_LENGTH",
    "DigestSet",
    "DigestTable",
    "ReplayFilter",
    "all_distinct",
    "replay_digests",
    "split_digests",
]

#: Digests in a bulk call (:meth:`DigestSet.held_many`, :meth:`DigestSet.add_new`) up to
#: which they are probed one by one: measured on a table of half a million digests, a
#: vectorized call for one submission's 7 costs about 5 µs per digest, one by one under
#: 1 µs; from about 64 on, the vectorized call is cheaper.
_SCALAR_CALL = 40


def replay_digests(leaves: Sequence[bytes]) -> bytes:
    """The replay filter's 16-byte digests of received items, concatenated: the first 16
    bytes of each item's Merkle leaf hash (``leaves``, :func:`~mixnet.chunk_signature.
    leaf_hashes`: BLAKE2b-256 of ``0x00 || item``), so that each item is hashed once. They
    are internal to a mix (stored with its chunks to rebuild the filter after a restart)."""
    if not leaves:
        return b""
    rows = np.frombuffer(b"".join(leaves), dtype=np.uint8).reshape(len(leaves), -1)
    return rows[:, :DIGEST_LENGTH].tobytes()


def _word_pairs(digests: bytes) -> list[int]:
    """The little-endian ``uint64`` halves of each digest of ``digests`` (concatenated),
    flattened as ``[hi0, lo0, hi1, lo1, ...]`` Python ints (for probing a few one by one).

    :raises ValueError: not a whole number of 16-byte digests.
    """
    if len(digests) % DIGEST_LENGTH:
        raise ValueError("digests must be 16 bytes each")
    words: list[int] = np.frombuffer(digests, dtype="<u8").tolist()
    return words


def _halves(digest: bytes) -> tuple[int, int]:
    if not isinstance(digest, bytes) or len(digest) != DIGEST_LENGTH:
        raise TypeError("a digest is 16 bytes")
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")


def _join(hi: int, lo: int) -> bytes:
    return hi.to_bytes(8, "little") + lo.to_bytes(8, "little")


class DigestSet(MutableSet[bytes]):
    """A set of 16-byte digests (see the module docstring); iterable in no set order."""

    def __init__(self, digests: Iterable[bytes] = ()) -> None:
        self._table = DigestTable(owners=False)
        self.update(digests)

    def reserve(self, entries: int) -> None:
        """Make room for ``entries`` digests in all (avoids growing step by step)."""
        if entries > _MAX_LOAD * self._table._cap:
            self._table.grow(entries)

    def __contains__(self, digest: object) -> bool:
        if not isinstance(digest, bytes) or len(digest) != DIGEST_LENGTH:
            return False
        return self._table.get(*_halves(digest)) is not None

    def __iter__(self) -> Iterator[bytes]:
        return (_join(hi, lo) for hi, lo, _ in self._table.entries())

    def __len__(self) -> int:
        return len(self._table)

    def add(self, value: bytes) -> None:
        """:raises TypeError: not a 16-byte digest."""
        self._table.put(*_halves(value), -1)

    def discard(self, value: bytes) -> None:
        if isinstance(value, bytes) and len(value) == DIGEST_LENGTH:
            self._table.remove(*_halves(value))

    def update(self, digests: Iterable[bytes]) -> None:
        """Add every digest of ``digests`` (the loop of :meth:`add`, inlined: this runs for
        every item the entry mix accepts)."""
        table = self._table
        for digest in digests:
            if not isinstance(digest, bytes) or len(digest) != DIGEST_LENGTH:
                raise TypeError("a digest is 16 bytes")
            hi = int.from_bytes(digest[:8], "little")
            lo = int.from_bytes(digest[8:], "little")
            if not (hi or lo):
                table.put(0, 0, -1)
                continue
            his, los, cap = table._hiv, table._lov, table._cap
            i = ((((lo ^ table._salt) * table._mult) & _M64) >> 32) * cap >> 32
            while True:
                a = his[i]
                if a == hi and los[i] == lo:
                    break
                if a == 0 and los[i] == 0:
                    his[i] = hi
                    los[i] = lo
                    table._size += 1
                    if table._size > _MAX_LOAD * cap:
                        table.grow(table._size)
                    break
                i += 1
                if i == cap:
                    i = 0

    def held_many(self, digests: bytes) -> npt.NDArray[np.bool_]:
        """Per digest of ``digests`` (16-byte digests, concatenated): whether it is held —
        one vectorized probe for many (e.g. every item of a ``submit-many`` frame).

        :raises ValueError: not a whole number of 16-byte digests.
        """
        if len(digests) <= _SCALAR_CALL * DIGEST_LENGTH:
            words, get = _word_pairs(digests), self._table.get
            found = [get(words[i], words[i + 1]) is not None for i in range(0, len(words), 2)]
            return np.array(found, dtype=np.bool_)
        hi, lo = split_digests(digests)
        held = self._table.find_many(hi, lo) >= 0
        zero = (hi == 0) & (lo == 0)
        if self._table._zero is not None and zero.any():
            held |= zero
        return held

    def add_new(self, digests: bytes) -> None:
        """Add the digests of ``digests`` (concatenated), which must be distinct and not
        held (not checked; :meth:`held_many` tells) — one vectorized insert for many.

        :raises ValueError: not a whole number of 16-byte digests.
        """
        if len(digests) <= _SCALAR_CALL * DIGEST_LENGTH:
            words, put = _word_pairs(digests), self._table.put
            for i in range(0, len(words), 2):
                put(words[i], words[i + 1], -1)
            return
        hi, lo = split_digests(digests)
        zero = (hi == 0) & (lo == 0)
        if zero.any():
            self._table.put(0, 0, -1)
            hi, lo = hi[~zero], lo[~zero]
        self._table.insert_new(hi, lo, -1)

    def add_absent(self, digests: bytes) -> bool:
        """Add the digests of ``digests`` (concatenated, distinct: not checked) if none of
        them is held, and return ``True``; if one is held, change nothing and return
        ``False``. :meth:`held_many` and :meth:`add_new` in one probe of the table.

        :raises ValueError: not a whole number of 16-byte digests.
        """
        hi, lo = split_digests(digests)
        if len(digests) <= _SCALAR_CALL * DIGEST_LENGTH or bool(((hi == 0) & (lo == 0)).any()):
            if self.held_many(digests).any():
                return False
            self.add_new(digests)
            return True
        slots, ends = self._table.probe_many(hi, lo)
        if bool((slots >= 0).any()):
            return False
        self._table.insert_new(hi, lo, -1, start=ends)
        return True

    def difference_update(self, digests: Iterable[bytes]) -> None:
        """Remove every digest of ``digests`` that is held."""
        for digest in digests:
            self.discard(digest)

    def isdisjoint(self, other: Iterable[Any]) -> bool:
        """Whether no digest of ``other`` is held (inlined lookups, as :meth:`update`)."""
        table = self._table
        his, los, cap = table._hiv, table._lov, table._cap
        salt, mult = table._salt, table._mult
        for digest in other:
            if not isinstance(digest, bytes) or len(digest) != DIGEST_LENGTH:
                continue
            hi = int.from_bytes(digest[:8], "little")
            lo = int.from_bytes(digest[8:], "little")
            if not (hi or lo):
                if table._zero is not None:
                    return False
                continue
            i = ((((lo ^ salt) * mult) & _M64) >> 32) * cap >> 32
            while True:
                a = his[i]
                if a == hi and los[i] == lo:
                    return False
                if a == 0 and los[i] == 0:
                    break
                i += 1
                if i == cap:
                    i = 0
        return True

    def clear(self) -> None:
        self._table = DigestTable(owners=False)

    def __repr__(self) -> str:
        return f"DigestSet({len(self)} digests)"


class ReplayFilter(MutableMapping[bytes, int]):
    """Digest of an incoming item → index of the chunk it first arrived in (see the module
    docstring). :meth:`owners` and :meth:`add_new` work on a chunk's digests at once."""

    def __init__(self) -> None:
        self._table = DigestTable(owners=True)

    def reserve(self, entries: int) -> None:
        """Make room for ``entries`` digests in all (avoids growing step by step)."""
        if entries > _MAX_LOAD * self._table._cap:
            self._table.grow(entries)

    def __getitem__(self, digest: bytes) -> int:
        if not isinstance(digest, bytes) or len(digest) != DIGEST_LENGTH:
            raise KeyError(digest)
        owner = self._table.get(*_halves(digest))
        if owner is None:
            raise KeyError(digest)
        return owner

    def __setitem__(self, digest: bytes, chunk: int) -> None:
        self._table.put(*_halves(digest), chunk)

    def __delitem__(self, digest: bytes) -> None:
        if not isinstance(digest, bytes) or not self._table.remove(*_halves(digest)):
            raise KeyError(digest)

    def __iter__(self) -> Iterator[bytes]:
        return (_join(hi, lo) for hi, lo, _ in self._table.entries())

    def __len__(self) -> int:
        return len(self._table)

    def owners(self, hi: U64, lo: U64) -> list[int]:
        """Per digest (halves from :func:`split_digests`): the chunk that brought it, or -1."""
        owners: list[int] = self._owners_of(self._table.find_many(hi, lo), hi, lo).tolist()
        return owners

    def _owners_of(self, slots: I64, hi: U64, lo: U64) -> I64:
        """:meth:`owners` from the keys' ``slots`` (:meth:`DigestTable.find_many`), as an array."""
        found = slots >= 0
        result = np.full(slots.shape[0], -1, dtype=np.int64)
        result[found] = self._table._own[slots[found]]
        zero = np.flatnonzero((hi == 0) & (lo == 0))
        if zero.size and self._table._zero is not None:
            result[zero] = self._table._zero
        return result

    def add_new(self, hi: U64, lo: U64, chunk: int) -> None:
        """Record digests that are distinct and absent (e.g. those :meth:`owners` reported
        -1 for, deduplicated) as brought by ``chunk``."""
        zero = (hi == 0) & (lo == 0)
        if zero.any():
            self._table.put(0, 0, chunk)
            hi, lo = hi[~zero], lo[~zero]
        self._table.insert_new(hi, lo, chunk)

    def admit(self, digests: bytes, chunk: int) -> tuple[npt.NDArray[np.intp], bytes]:
        """The replay filter of chunk number ``chunk`` whose items have ``digests``
        (concatenated, one per item), as :func:`mixnet.core.intake.replay_positions` with
        precomputed digests: an item is kept unless its digest is held for another chunk,
        or repeats an earlier item of the chunk. Records the kept digests as ``chunk``'s;
        returns the kept positions (ascending) and the digests this call added (in order).
        Deterministic: a copy of the same chunk keeps exactly what the first copy kept.

        :raises ValueError: not a whole number of 16-byte digests.
        """
        hi, lo = split_digests(digests)
        count = hi.shape[0]
        slots, ends = self._table.probe_many(hi, lo)
        owners = self._owners_of(slots, hi, lo)
        keep = (owners == -1) | (owners == chunk)
        if has_repeats(hi):  # maybe repeats: keep the first
            first: set[bytes] = set()
            for position in range(count):
                digest = digests[position * DIGEST_LENGTH : (position + 1) * DIGEST_LENGTH]
                if digest in first:
                    keep[position] = False
                else:
                    first.add(digest)
        positions = np.flatnonzero(keep)
        new = np.flatnonzero(keep & (owners == -1))
        slotted = new[(hi[new] != 0) | (lo[new] != 0)]
        if slotted.shape[0] < new.shape[0]:  # kept aside, not in a slot: the ends still hold
            self._table.put(0, 0, chunk)
        self._table.insert_new(hi[slotted], lo[slotted], chunk, start=ends[slotted])
        words = np.frombuffer(digests, dtype="<u8").reshape(-1, 2)
        return positions, words[new].tobytes()

    def clear(self) -> None:
        self._table = DigestTable(owners=True)

    def setdefault_many(self, digests: bytes, chunk: int) -> None:
        """``setdefault(digest, chunk)`` for each digest of ``digests`` (concatenated):
        recovery re-records a stored chunk's digests, the first chunk to bring one keeps it."""
        hi, lo = split_digests(digests)
        absent = np.asarray(self.owners(hi, lo)) == -1
        hi, lo = hi[absent], lo[absent]
        if hi.shape[0] > 1:  # distinct, keeping the first
            _, first = np.unique(np.stack([hi, lo], axis=1), axis=0, return_index=True)
            first.sort()
            hi, lo = hi[first], lo[first]
        self.add_new(hi, lo, chunk)

    def __repr__(self) -> str:
        return f"ReplayFilter({len(self)} digests)"
