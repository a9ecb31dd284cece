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

import os
from collections.abc import Iterable, Iterator, MutableMapping, MutableSet, Sequence
from typing import Any

import numpy as np
import numpy.ma  # np.unique imports it on first use: here it loads with the node, not a round
import numpy.typing as npt

__all__ = [
    "DIGEST_LENGTH",
    "DigestSet",
    "DigestTable",
    "ReplayFilter",
    "all_distinct",
    "replay_digests",
    "split_digests",
]

#: Bytes of a digest these tables hold.
DIGEST_LENGTH = 16
_M64 = (1 << 64) - 1
_MAX_LOAD = 0.75
_MIN_CAPACITY = 64
_MAX_CAPACITY = (1 << 32) - 1
#: Keys left in a bulk probe below which the rest are probed one by one (each vectorized
#: round costs a dozen numpy calls, whatever the number of keys left in it).
_SCALAR_TAIL = 32
#: Digests in a bulk call (:meth:`DigestSet.held_many`, :meth:`DigestSet.add_new`) up to
#: which they are probed one by one: measured on a table of half a million digests, a
#: vectorized call for one submission's 7 costs about 5 µs per digest, one by one under
#: 1 µs; from about 64 on, the vectorized call is cheaper.
_SCALAR_CALL = 40

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]


def split_digests(digests: bytes | Iterable[bytes]) -> tuple[U64, U64]:
    """The two little-endian ``uint64`` halves ``(hi, lo)`` of each 16-byte digest, from
    their concatenation or an iterable of them.

    :raises ValueError: not a whole number of 16-byte digests.
    """
    blob = digests if isinstance(digests, bytes) else b"".join(digests)
    if len(blob) % DIGEST_LENGTH:
        raise ValueError("digests must be 16 bytes each")
    words = np.frombuffer(blob, dtype="<u8").astype(np.uint64, copy=False).reshape(-1, 2)
    return words[:, 0], words[:, 1]


def _has_repeats(values: U64) -> bool:
    """Whether two of ``values`` are equal, by one sort. (``np.unique`` hashes instead,
    since NumPy 2.3, and measured 18× slower for a frame's 1,536 values and 30× for 10⁵.)"""
    if values.shape[0] < 2:
        return False
    ordered = np.sort(values)
    return bool((ordered[1:] == ordered[:-1]).any())


def all_distinct(digests: bytes) -> bool:
    """Whether the 16-byte digests of ``digests`` (concatenated) are pairwise distinct (one
    sort of their first halves; the whole digests are compared only if two halves agree).

    :raises ValueError: not a whole number of 16-byte digests.
    """
    hi, _ = split_digests(digests)
    count = int(hi.shape[0])
    if not _has_repeats(hi):
        return True
    size = DIGEST_LENGTH
    return len({digests[i : i + size] for i in range(0, len(digests), size)}) == count


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


class DigestTable:
    """The open-addressing table behind both classes (and
    :class:`~mixnet.core.receipts.ReceiptTable`): 16-byte keys as ``(hi, lo)`` ``uint64``
    halves, each with an ``int32`` owner if ``owners``. A slot is empty when both words are
    0; the all-zero key is kept aside (``_zero``). Its methods do not check their arguments:
    the classes above do."""

    def __init__(self, owners: bool, capacity: int = 0) -> None:
        key = int.from_bytes(os.urandom(16), "little")
        self._salt = key & _M64
        self._mult = (key >> 64) | 1
        self._owners = owners
        self._size = 0
        self._zero: int | None = None  # owner of the all-zero digest (-1 in a set), if held
        self._allocate(self._capacity_for(capacity))

    @staticmethod
    def _capacity_for(entries: int) -> int:
        return min(_MAX_CAPACITY, max(_MIN_CAPACITY, int(entries / _MAX_LOAD) + 1))

    def _allocate(self, capacity: int) -> None:
        self._cap = capacity
        self._hi: U64 = np.zeros(capacity, dtype=np.uint64)
        self._lo: U64 = np.zeros(capacity, dtype=np.uint64)
        self._own = np.zeros(capacity if self._owners else 0, dtype=np.int32)
        self._hiv = self._hi.data
        self._lov = self._lo.data
        self._ownv = self._own.data

    # ------------------------------------------------------------------ one digest

    def _home(self, lo: int) -> int:
        mixed = ((lo ^ self._salt) * self._mult) & _M64
        return ((mixed >> 32) * self._cap) >> 32

    def find(self, hi: int, lo: int) -> int:
        """The slot holding the key (>= 0), or ``-1 - slot`` of the empty slot ending its
        probe sequence."""
        cap, his, los = self._cap, self._hiv, self._lov
        i = ((((lo ^ self._salt) * self._mult) & _M64) >> 32) * cap >> 32  # _home, inlined
        while True:
            a, b = his[i], los[i]
            if a == hi and b == lo:
                return i
            if a == 0 and b == 0:
                return -1 - i
            i += 1
            if i == cap:
                i = 0

    def get(self, hi: int, lo: int) -> int | None:
        """The key's owner (-1 in a set), or ``None`` if absent."""
        if hi == 0 and lo == 0:
            return self._zero
        slot = self.find(hi, lo)
        if slot < 0:
            return None
        return int(self._ownv[slot]) if self._owners else -1

    def put(self, hi: int, lo: int, owner: int) -> None:
        """Insert the key or change its owner."""
        if hi == 0 and lo == 0:
            if self._zero is None:
                self._size += 1
            self._zero = owner
            return
        slot = self.find(hi, lo)
        if slot < 0:
            slot = -1 - slot
            self._hiv[slot] = hi
            self._lov[slot] = lo
            self._size += 1
        if self._owners:
            self._ownv[slot] = owner
        if self._size > _MAX_LOAD * self._cap:
            self.grow(self._size)

    def remove(self, hi: int, lo: int) -> bool:
        """Delete the key (backward-shift deletion: no tombstones); whether it was held."""
        if hi == 0 and lo == 0:
            held = self._zero is not None
            if held:
                self._zero = None
                self._size -= 1
            return held
        slot = self.find(hi, lo)
        if slot < 0:
            return False
        cap, his, los, owns = self._cap, self._hiv, self._lov, self._ownv
        hole, j = slot, slot
        while True:
            j = j + 1 if j + 1 < cap else 0
            a, b = his[j], los[j]
            if a == 0 and b == 0:
                break
            home = self._home(b)
            # the entry at j may move into the hole unless its home lies cyclically in (hole, j]
            if (hole < home <= j) if hole <= j else (home > hole or home <= j):
                continue
            his[hole], los[hole] = a, b
            if self._owners:
                owns[hole] = owns[j]
            hole = j
        his[hole] = los[hole] = 0
        self._size -= 1
        return True

    # ------------------------------------------------------------------ many digests

    def _homes(self, lo: U64) -> I64:
        with np.errstate(over="ignore"):
            mixed = (lo ^ np.uint64(self._salt)) * np.uint64(self._mult)
        return ((mixed >> np.uint64(32)) * np.uint64(self._cap) >> np.uint64(32)).astype(np.int64)

    def find_many(self, hi: U64, lo: U64) -> I64:
        """Per key: its slot, or -1 if absent (all-zero keys report -1; see ``get``)."""
        return self.probe_many(hi, lo)[0]

    def probe_many(self, hi: U64, lo: U64) -> tuple[I64, I64]:
        """Per key: its slot or -1 if absent (as :meth:`find_many`), and where its probe
        sequence ended: its slot, or the empty slot an insert of it would take first (all-zero
        keys: their home)."""
        result = np.full(hi.shape[0], -1, dtype=np.int64)
        pos = self._homes(lo)
        todo = np.flatnonzero((hi != 0) | (lo != 0))
        while todo.size:
            if todo.size <= _SCALAR_TAIL:  # the few long probe sequences: one by one
                for i in todo.tolist():
                    slot = self.find(int(hi[i]), int(lo[i]))
                    result[i] = slot if slot >= 0 else -1
                    pos[i] = slot if slot >= 0 else -1 - slot
                break
            p = pos[todo]
            a, b = self._hi[p], self._lo[p]
            found = (a == hi[todo]) & (b == lo[todo])
            result[todo[found]] = p[found]
            going = ~(found | ((a == 0) & (b == 0)))
            todo, p = todo[going], p[going] + 1
            p[p == self._cap] = 0
            pos[todo] = p
        return result, pos

    def insert_new(
        self,
        hi: U64,
        lo: U64,
        owner: int | npt.NDArray[np.int32],
        start: I64 | None = None,
    ) -> None:
        """Insert keys that are distinct, non-zero and absent (not checked). ``start``: where
        each key's probe sequence ended in :meth:`probe_many`, with no change to the table
        since (the probes then go on from there, not from each key's home)."""
        count = hi.shape[0]
        if not count:
            return
        if self._size + count > _MAX_LOAD * self._cap:
            self.grow(self._size + count)
            start = None  # the slots moved
        owners = np.broadcast_to(np.asarray(owner, dtype=np.int32), (count,))
        pos = self._homes(lo) if start is None else start.copy()
        todo = np.arange(count)
        while todo.size:
            if todo.size <= _SCALAR_TAIL:  # the few long probe sequences: one by one
                his, los, owns = self._hiv, self._lov, self._ownv
                for i in todo.tolist():
                    slot = -1 - self.find(int(hi[i]), int(lo[i]))  # absent: an empty slot
                    his[slot], los[slot] = int(hi[i]), int(lo[i])
                    if self._owners:
                        owns[slot] = int(owners[i])
                break
            p = pos[todo]
            free = (self._hi[p] == 0) & (self._lo[p] == 0)
            slots, first = np.unique(p[free], return_index=True)
            winners = todo[free][first]
            self._hi[slots], self._lo[slots] = hi[winners], lo[winners]
            if self._owners:
                self._own[slots] = owners[winners]
            won = np.zeros(count, dtype=bool)
            won[winners] = True
            todo = todo[~won[todo]]
            p = pos[todo] + 1
            p[p == self._cap] = 0
            pos[todo] = p
        self._size += count

    def grow(self, entries: int) -> None:
        """Re-insert everything into a table with room for ``entries`` (at least twice as
        many as now)."""
        occupied = np.flatnonzero((self._hi != 0) | (self._lo != 0))
        hi, lo = self._hi[occupied], self._lo[occupied]
        own = self._own[occupied] if self._owners else np.zeros(0, dtype=np.int32)
        target = max(entries, self._size * 2, int(self._cap * _MAX_LOAD) + 1)
        self._allocate(self._capacity_for(target))
        size, self._size = self._size, 0
        self.insert_new(hi, lo, own if self._owners else 0)
        self._size = size

    def copy(self) -> DigestTable:
        """An independent copy (the same key, slots and owners)."""
        other = DigestTable.__new__(DigestTable)
        other._salt, other._mult, other._owners = self._salt, self._mult, self._owners
        other._size, other._zero = self._size, self._zero
        other._cap = self._cap
        other._hi, other._lo, other._own = self._hi.copy(), self._lo.copy(), self._own.copy()
        other._hiv, other._lov, other._ownv = other._hi.data, other._lo.data, other._own.data
        return other

    def entries(self) -> Iterator[tuple[int, int, int]]:
        """(hi, lo, owner) of every entry (the all-zero key first)."""
        if self._zero is not None:
            yield 0, 0, self._zero
        for slot in np.flatnonzero((self._hi != 0) | (self._lo != 0)).tolist():
            yield (
                int(self._hi[slot]),
                int(self._lo[slot]),
                int(self._own[slot]) if self._owners else -1,
            )

    def __len__(self) -> int:
        return self._size

    def nbytes(self) -> int:
        return int(self._hi.nbytes + self._lo.nbytes + self._own.nbytes)


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
        if _has_repeats(hi):  # maybe repeats: keep the first
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
