"""Compact storage of equal-width byte strings: one buffer per round, not one object per item.

A node holds a round's items (onions, payloads) by the hundred thousand; a Python ``bytes``
object costs 33 bytes plus a pointer on top of its content, which is more than a 3-byte
payload and a third of a 99-byte onion. This module keeps them in contiguous ``uint8``
buffers of shape ``(count, width)`` instead (pure: no I/O, no randomness):

* :class:`Items` — an immutable :class:`~collections.abc.Sequence` of ``bytes`` over such a
  buffer, optionally read through an index array (a permutation, a selection) without
  copying. Indexing returns ``bytes``; slicing and :meth:`Items.take` return ``Items``
  sharing the buffer; iteration materializes one block of items at a time. It compares equal
  to a tuple or list of the same ``bytes`` (so records holding it compare as before).
* :class:`RowArena` — append-only rows of one width, in blocks that are anonymous memory
  maps: pages count toward the process's memory only once written, and go back to the OS as
  soon as the last view of a block is dropped (``malloc``'d buffers of this size often stay
  in the heap after being freed).

Views are read-only; the arena writes only rows nobody has seen yet, so an ``Items`` never
changes under its holder.
"""

from __future__ import annotations

import mmap
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

__all__ = ["ITER_BLOCK_BYTES", "Items", "RowArena", "allocate_rows", "repeated_items"]

Rows = npt.NDArray[np.uint8]
Index = npt.NDArray[np.intp]

#: Bytes materialized at once when an :class:`Items` is iterated.
ITER_BLOCK_BYTES = 1 << 20


def allocate_rows(count: int, width: int) -> Rows:
    """A writable ``(count, width)`` ``uint8`` array in its own anonymous memory map (zero
    until written; resident only where written; unmapped when the last view is dropped).

    :raises ValueError: a negative ``count`` or ``width``.
    """
    if count < 0 or width < 0:
        raise ValueError("count and width must be >= 0")
    size = count * width
    if size == 0:
        return np.zeros((count, width), dtype=np.uint8)
    buffer = mmap.mmap(-1, size)
    return np.frombuffer(buffer, dtype=np.uint8).reshape(count, width)


def _readonly(rows: Rows) -> Rows:
    view = rows.view()
    view.flags.writeable = False
    return view


class Items(Sequence[bytes]):
    """An immutable sequence of ``len(self)`` byte strings of :attr:`width` bytes each.

    Built from a 2-D ``uint8`` array ``rows`` (read-only views of it are kept, never
    copies), and optionally ``index``: then item ``i`` is ``rows[index[i]]``. Construct with
    :meth:`of` (from ``bytes`` objects), :meth:`from_bytes` (a blob, zero-copy) or
    :meth:`empty`.
    """

    __slots__ = ("_hash", "_index", "_rows")

    def __init__(self, rows: Rows, index: Index | None = None) -> None:
        """:raises ValueError: ``rows`` is not a 2-D ``uint8`` array, or ``index`` is not
        1-D."""
        if rows.ndim != 2 or rows.dtype != np.uint8:
            raise ValueError("rows must be a 2-D uint8 array")
        if index is not None and index.ndim != 1:
            raise ValueError("index must be 1-D")
        self._rows: Rows = rows if not rows.flags.writeable else _readonly(rows)
        self._index = index
        self._hash: int | None = None

    # ------------------------------------------------------------------ construction

    @classmethod
    def empty(cls, width: int = 0) -> Items:
        """No items (of ``width`` bytes)."""
        return cls(np.zeros((0, width), dtype=np.uint8))

    @classmethod
    def from_bytes(
        cls, blob: bytes | bytearray | memoryview, width: int, count: int | None = None
    ) -> Items:
        """The items of ``width`` bytes concatenated in ``blob`` (a view of an immutable
        ``bytes``; a ``bytearray`` or ``memoryview`` is copied). ``count`` is needed only
        for ``width`` 0.

        :raises ValueError: ``len(blob)`` is not a multiple of ``width``, or disagrees with
            ``count``.
        """
        if width < 0:
            raise ValueError("width must be >= 0")
        size = len(blob)
        if width == 0:
            if size or count is None:
                raise ValueError("items of width 0 need an empty blob and a count")
            return cls(np.zeros((count, 0), dtype=np.uint8))
        if size % width or (count is not None and count * width != size):
            raise ValueError(f"a blob of {size} bytes does not hold items of {width} bytes")
        data = blob if isinstance(blob, bytes) else bytes(blob)
        return cls(np.frombuffer(data, dtype=np.uint8).reshape(size // width, width))

    @classmethod
    def concat(cls, parts: Sequence[Items]) -> Items:
        """The items of ``parts`` one after the other, in one new buffer.

        :raises ValueError: no parts, or parts of different widths.
        """
        if not parts:
            raise ValueError("nothing to concatenate")
        widths = {part.width for part in parts}
        if len(widths) != 1:
            raise ValueError(f"items of different widths: {sorted(widths)}")
        return cls(np.concatenate([part.array() for part in parts]))

    @classmethod
    def of(cls, items: Iterable[bytes], width: int | None = None) -> Items:
        """``items`` (each ``bytes``, all of one length) as :class:`Items`; an ``Items`` is
        returned as it is. ``width`` is the length of an empty sequence's items.

        :raises TypeError: an item is not ``bytes``. :raises ValueError: lengths differ.
        """
        if isinstance(items, Items):
            return items
        seq = items if isinstance(items, list | tuple) else list(items)
        if not seq:
            return cls.empty(width or 0)
        first = seq[0]
        if not isinstance(first, bytes):
            raise TypeError(f"items must be bytes, not {type(first).__name__}")
        size = len(first)
        if not set(map(type, seq)) <= {bytes} or len(set(map(len, seq))) > 1:
            for item in seq:  # find the item at fault
                if not isinstance(item, bytes):
                    raise TypeError(f"items must be bytes, not {type(item).__name__}")
                if len(item) != size:
                    raise ValueError("all items must have the same length")
        if size == 0:
            return cls(np.zeros((len(seq), 0), dtype=np.uint8))
        return cls.from_bytes(b"".join(seq), size)

    # ------------------------------------------------------------------ queries

    @property
    def width(self) -> int:
        """Bytes per item."""
        return int(self._rows.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes of content (``len(self) * width``)."""
        return len(self) * self.width

    def __len__(self) -> int:
        return int(self._rows.shape[0] if self._index is None else self._index.shape[0])

    @overload
    def __getitem__(self, key: int) -> bytes: ...

    @overload
    def __getitem__(self, key: slice) -> Items: ...

    def __getitem__(self, key: int | slice) -> bytes | Items:
        if isinstance(key, slice):
            if self._index is None:
                return Items(self._rows[key])
            return Items(self._rows, self._index[key])
        i = operator.index(key)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("Items index out of range")
        row = i if self._index is None else int(self._index[i])
        item: bytes = self._rows[row].tobytes()
        return item

    def __iter__(self) -> Iterator[bytes]:
        n, width = len(self), self.width
        if width == 0:
            yield from (b"" for _ in range(n))
            return
        step = max(1, ITER_BLOCK_BYTES // width)
        for start in range(0, n, step):
            blob = self[start : start + step].tobytes()
            for offset in range(0, len(blob), width):
                yield blob[offset : offset + width]

    def array(self) -> Rows:
        """The items as a C-contiguous ``(len, width)`` array (read-only; a view when no
        index applies and the rows are contiguous, else a fresh copy)."""
        if self._index is None:
            if self._rows.flags.c_contiguous:
                return self._rows
            return _readonly(np.ascontiguousarray(self._rows))
        return _readonly(np.take(self._rows, self._index, axis=0))

    def blocks(self, rows: int) -> Iterator[Rows]:
        """The items in order, as consecutive read-only C-contiguous ``(k, width)`` arrays
        of at most ``rows`` rows each (none for no items): views of the buffer where
        :meth:`array` of that stretch would be one, else a fresh copy of one block at a
        time — so reading every item costs at most one block of memory on top of the
        buffer, and never one object per item.

        :raises ValueError: ``rows < 1``.
        """
        if rows < 1:
            raise ValueError("rows must be >= 1")
        for start in range(0, len(self), rows):
            yield self[start : start + rows].array()

    def tobytes(self) -> bytes:
        """The items concatenated."""
        return self.array().tobytes()

    def buffer(self) -> memoryview:
        """The items concatenated, as a read-only buffer (no copy when :meth:`array` is a
        view): what a blob column or a socket takes."""
        return self.array().data.cast("B")

    def take(self, index: Index) -> Items:
        """The items at positions ``index`` (any order, repeats allowed), without copying."""
        if self._index is None:
            return Items(self._rows, index)
        return Items(self._rows, self._index[index])

    # ------------------------------------------------------------------ protocol

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Items):
            if len(self) != len(other):
                return False
            if len(self) == 0:
                return True
            return self.width == other.width and bool(np.array_equal(self.array(), other.array()))
        if isinstance(other, tuple | list):
            return len(self) == len(other) and all(
                a == b for a, b in zip(self, other, strict=False)
            )
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self))  # equal to a tuple of the same bytes: same hash
        return self._hash

    def __repr__(self) -> str:
        return f"Items({len(self)} × {self.width} bytes)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Items.from_bytes, (self.tobytes(), self.width, len(self)))


class RowArena:
    """Append-only storage of rows of ``width`` bytes for one round, in blocks.

    :meth:`append` copies rows in and returns the read-only :class:`Items` view of them (the
    rows of one call never straddle two blocks). A new block holds at least ``capacity``
    rows (the first) or as many as everything so far (later ones), so a round takes a few
    blocks at most. :meth:`items` returns everything appended, in order, as one ``Items``:
    with more than one block it first moves the rows into one block, dropping each old
    block as soon as it is copied (so the copy costs one block of memory, not a second
    round). Not thread-safe; use from one thread.
    """

    def __init__(self, width: int, capacity: int = 0) -> None:
        if width < 0 or capacity < 0:
            raise ValueError("width and capacity must be >= 0")
        self.width = width
        self.capacity = capacity
        self._blocks: list[Rows] = []
        self._used: list[int] = []

    def __len__(self) -> int:
        return sum(self._used)

    def _room(self, count: int) -> int:
        """Index of a block with room for ``count`` more rows (allocated if needed)."""
        if self._blocks and self._blocks[-1].shape[0] - self._used[-1] >= count:
            return len(self._blocks) - 1
        size = max(count, self.capacity if not self._blocks else len(self), 1024)
        self._blocks.append(allocate_rows(size, self.width))
        self._used.append(0)
        return len(self._blocks) - 1

    def append(self, rows: Items | Sequence[bytes] | bytes) -> Items:
        """Copy ``rows`` (items of :attr:`width` bytes, or their concatenation) to the end;
        return them as a read-only view.

        :raises ValueError: a row of another width. :raises TypeError: not bytes.
        """
        if isinstance(rows, bytes):
            data = Items.from_bytes(rows, self.width) if self.width else Items.empty()
        else:
            data = Items.of(rows, self.width)
        count = len(data)
        if count and data.width != self.width:
            raise ValueError(f"rows must be {self.width} bytes, not {data.width}")
        block = self._room(count)
        start = self._used[block]
        target = self._blocks[block][start : start + count]
        if count and self.width:
            target[...] = data.array()
        self._used[block] = start + count
        return Items(target)

    def append_row(self, row: bytes) -> None:
        """Copy one row (``width`` bytes) to the end (the fast path of :meth:`append`).

        :raises ValueError: not ``width`` bytes.
        """
        if len(row) != self.width:
            raise ValueError(f"a row must be {self.width} bytes, not {len(row)}")
        block = self._room(1)
        if self.width:
            self._blocks[block][self._used[block]] = np.frombuffer(row, dtype=np.uint8)
        self._used[block] += 1

    def rows(self, start: int, stop: int) -> Items:
        """Rows ``start`` to ``stop`` (exclusive) in append order: a view when they lie in
        one block, else a copy.

        :raises IndexError: outside ``[0, len(self)]`` or ``start > stop``.
        """
        if not 0 <= start <= stop <= len(self):
            raise IndexError("rows out of range")
        parts: list[Rows] = []
        base = 0
        for block, used in zip(self._blocks, self._used, strict=True):
            lo, hi = max(start, base), min(stop, base + used)
            if lo < hi:
                parts.append(block[lo - base : hi - base])
            base += used
        if len(parts) == 1:
            return Items(parts[0])
        if not parts:
            return Items.empty(self.width)
        return Items(np.concatenate(parts))

    def items(self) -> Items:
        """Every row appended so far, in order (see the class for what it costs)."""
        if len(self._blocks) > 1:
            self._consolidate()
        if not self._blocks:
            return Items.empty(self.width)
        return Items(self._blocks[0][: self._used[0]])

    def _consolidate(self) -> None:
        total = len(self)
        merged = allocate_rows(max(total, 1), self.width)
        old: list[Rows | None] = list(self._blocks)
        self._blocks = []
        at = 0
        for i, used in enumerate(self._used):
            block = old[i]
            assert block is not None
            merged[at : at + used] = block[:used]
            at += used
            old[i] = block = None  # unmapped now, unless a view of it is still held
        self._blocks, self._used = [merged], [total]

    def clear(self) -> None:
        """Forget every row (views already handed out stay valid)."""
        self._blocks.clear()
        self._used.clear()


def _prefixes(part: Sequence[bytes]) -> npt.NDArray[np.uint64]:
    """The first 8 bytes of each item (zero-padded), as little-endian integers."""
    if isinstance(part, Items) and part.width >= 8:
        words = np.ascontiguousarray(part.array()[:, :8]).view("<u8").ravel()
        return words.astype(np.uint64, copy=False)  # no copy on a little-endian machine
    return np.array(
        [int.from_bytes(bytes(item[:8]).ljust(8, b"\0"), "little") for item in part],
        dtype=np.uint64,
    )


def repeated_items(parts: Iterable[Sequence[bytes]]) -> dict[bytes, int]:
    """Every item that occurs more than once across ``parts`` (taken as one sequence), with
    how many times. Vectorized: items are grouped by their first 8 bytes, and only those that
    share theirs with another are compared whole (for onions, whose first bytes are an
    ephemeral public key, none among honest clients' items)."""
    sources = [part for part in parts if len(part)]
    if not sources:
        return {}
    keys = np.concatenate([_prefixes(part) for part in sources])
    values, counts = np.unique(keys, return_counts=True)
    shared = values[counts > 1]
    if not shared.size:
        return {}
    flags = np.isin(keys, shared)
    seen: dict[bytes, int] = {}
    at = 0
    for part in sources:
        for index in np.flatnonzero(flags[at : at + len(part)]):
            item = bytes(part[int(index)])
            seen[item] = seen.get(item, 0) + 1
        at += len(part)
    return {item: count for item, count in seen.items() if count > 1}
