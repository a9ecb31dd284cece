"""The open-addressing table of 16-byte keys behind the node's compact sets and maps (pure).

:class:`DigestTable` keeps each key as two ``uint64`` words (plus an ``int32`` owner if
asked) in open addressing with linear probing, at most 3/4 full: about 21 (27 with owners)
bytes per entry, against about 100 for a Python ``set`` or ``dict`` entry of 16-byte
``bytes``. Slots are chosen by a multiply-shift hash under a random per-table key
(``os.urandom``), so that whoever chooses the keys cannot make them collide in the table and
slow it down; the key changes where entries sit, never what the table answers. Its methods
check nothing: :mod:`mixnet.core.digests` (the replay filters) and
:mod:`mixnet.core.receipts` (the entry mix's receipts) wrap it. Also here: splitting
concatenated digests into their halves and telling whether they are all distinct.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import numpy as np
import numpy.ma  # np.unique imports it on first use: here it loads with the node, not a round
import numpy.typing as npt

__all__ = [
    "DIGEST_LENGTH",
    "I64",
    "MASK_64",
    "MAX_LOAD",
    "U64",
    "DigestTable",
    "all_distinct",
    "has_repeats",
    "split_digests",
]

#: Bytes of a digest these tables hold.
DIGEST_LENGTH = 16
#: The low 64 bits (the multiply-shift hash's arithmetic is modulo 2⁶⁴).
MASK_64 = (1 << 64) - 1
#: The most a table is filled before it grows (to twice as many entries or more).
MAX_LOAD = 0.75
_MIN_CAPACITY = 64
_MAX_CAPACITY = (1 << 32) - 1
#: Keys left in a bulk probe below which the rest are probed one by one (each vectorized
#: round costs a dozen numpy calls, whatever the number of keys left in it).
_SCALAR_TAIL = 32

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


def has_repeats(values: U64) -> bool:
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
    if not has_repeats(hi):
        return True
    size = DIGEST_LENGTH
    return len({digests[i : i + size] for i in range(0, len(digests), size)}) == count


class DigestTable:
    """The open-addressing table behind :class:`~mixnet.core.digests.DigestSet`,
    :class:`~mixnet.core.digests.ReplayFilter` and
    :class:`~mixnet.core.receipts.ReceiptTable`: 16-byte keys as ``(hi, lo)`` ``uint64``
    halves, each with an ``int32`` owner if ``owners``. A slot is empty when both words are
    0; the all-zero key is kept aside (``_zero``). Its methods do not check their arguments:
    those classes do."""

    def __init__(self, owners: bool, capacity: int = 0) -> None:
        key = int.from_bytes(os.urandom(16), "little")
        self._salt = key & MASK_64
        self._mult = (key >> 64) | 1
        self._owners = owners
        self._size = 0
        self._zero: int | None = None  # owner of the all-zero digest (-1 in a set), if held
        self._allocate(self._capacity_for(capacity))

    @staticmethod
    def _capacity_for(entries: int) -> int:
        return min(_MAX_CAPACITY, max(_MIN_CAPACITY, int(entries / MAX_LOAD) + 1))

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
        mixed = ((lo ^ self._salt) * self._mult) & MASK_64
        return ((mixed >> 32) * self._cap) >> 32

    def find(self, hi: int, lo: int) -> int:
        """The slot holding the key (>= 0), or ``-1 - slot`` of the empty slot ending its
        probe sequence."""
        cap, his, los = self._cap, self._hiv, self._lov
        i = ((((lo ^ self._salt) * self._mult) & MASK_64) >> 32) * cap >> 32  # _home, inlined
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
        if self._size > MAX_LOAD * self._cap:
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
        if self._size + count > MAX_LOAD * self._cap:
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
        target = max(entries, self._size * 2, int(self._cap * MAX_LOAD) + 1)
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
