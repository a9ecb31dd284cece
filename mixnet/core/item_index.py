"""A round's items looked up without a scan and without an object per item (pure).

The trace maps items to where they came from, a page at a time: at a relay an accused
output to the input it peeled from (``verified``), an excluded input to its output
(``exclude``, and the last mix's release); at the entry mix an accused item to the client
that submitted it. A page names at most a few hundred items, but a round of 10⁶ users holds
6·10⁶ of them at each hop: a scan per page costs about a second, a verdict over thousands of
bad submissions has about a hundred pages, and a ``dict`` of every item costs over 100
bytes per item.

:class:`ItemIndex` sorts a sequence of items once by a 32-bit key and finds a page's items
in O(k log n), at 8 bytes per item (the key and an ``int32`` position). The key is a
multilinear hash of the item's 8-byte words (and its length) under random odd 64-bit
multipliers drawn from the OS for each index, keeping the top 32 bits (multiply-shift,
Dietzfelbinger et al.: two distinct items share a key with probability about 2⁻³¹), computed
with numpy on the rows of compact :class:`~mixnet.core.items.Items` a block at a time — no
Python object per item, about 0.4 s for 6·10⁶ onions of 100 bytes. The multipliers are
secret, so no client can aim its items at one key. Items whose keys are equal are compared
whole, so a collision costs time, never a wrong answer: the multipliers decide how items are
bucketed, never a result.

:class:`PairIndex` is a mix's (input, output) pairs indexed both ways, each side on first use.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from mixnet.core.items import Items
from mixnet.errors import InternalError

__all__ = ["ItemIndex", "PairIndex"]


#: Items up to which the sort packs each key and position into one ``int64`` (a plain sort,
#: several times faster than a stable ``argsort``; positions must fit 31 bits).
PACKED_SORT_LIMIT = 2**31

#: Rows keyed at once (a block's padded copy is this many rows of at most a few hundred bytes).
KEY_BLOCK_ROWS = 1 << 16


class _Keys:
    """The key of :class:`ItemIndex` for items of at most ``8 * words`` bytes: ``(Σ aᵢ·wᵢ +
    a₀·len) mod 2⁶⁴ >> 32`` over the item's little-endian 8-byte words ``wᵢ`` (zero-padded),
    with odd multipliers ``a`` from ``os.urandom``."""

    def __init__(self, words: int) -> None:
        self.words = words
        raw = np.frombuffer(os.urandom(8 * (words + 1)), dtype="<u8")
        self._mult = raw | np.uint64(1)

    def of_rows(self, rows: npt.NDArray[np.uint8]) -> npt.NDArray[np.int32]:
        """The keys of the ``(n, width)`` rows (``width`` at most ``8 * words``)."""
        count, width = rows.shape
        words = -(-width // 8)
        out = np.empty(count, dtype=np.int32)
        length = np.uint64(width * int(self._mult[self.words]) % 2**64)  # no scalar overflow
        for start in range(0, count, KEY_BLOCK_ROWS):
            block = rows[start : start + KEY_BLOCK_ROWS]
            padded = np.zeros((len(block), words * 8), dtype=np.uint8)
            padded[:, :width] = block
            total = (padded.view("<u8") * self._mult[:words]).sum(axis=1, dtype=np.uint64)
            top = (total + length) >> np.uint64(32)
            out[start : start + len(block)] = top.astype(np.uint32).view(np.int32)
        return out

    def of(self, part: Sequence[bytes]) -> npt.NDArray[np.int32]:
        """The keys of ``part``'s items, in order (items longer than ``8 * words`` bytes get
        key 0: no indexed item is that long)."""
        if isinstance(part, Items):  # a block at a time: an indexed view is not copied whole
            blocks = [self.of_rows(rows) for rows in part.blocks(KEY_BLOCK_ROWS)]
            return np.concatenate(blocks) if blocks else np.empty(0, np.int32)
        out = np.zeros(len(part), dtype=np.int32)
        by_length: dict[int, list[int]] = {}
        for position, item in enumerate(part):
            by_length.setdefault(len(item), []).append(position)
        for width, positions in by_length.items():
            if width > 8 * self.words:
                continue
            blob = b"".join(bytes(part[i]) for i in positions)
            rows = np.frombuffer(blob, dtype=np.uint8).reshape(len(positions), width)
            out[positions] = self.of_rows(rows)
        return out


def _longest(part: Sequence[bytes]) -> int:
    if isinstance(part, Items):
        return part.width if len(part) else 0
    return max(map(len, part), default=0)


class ItemIndex:
    """The items of ``parts`` taken as one sequence (positions 0, 1, …, part after part),
    sorted by key (:class:`_Keys`, its multipliers drawn for this index). Holds ``parts`` (no
    copy); they must not change while it is used."""

    def __init__(self, parts: Sequence[Sequence[bytes]]) -> None:
        self._parts = list(parts)
        sizes = np.asarray([len(part) for part in self._parts], dtype=np.int64)
        self._ends = np.cumsum(sizes)
        self._longest = max(map(_longest, self._parts), default=0)
        self._key = _Keys(-(-self._longest // 8))
        parts_keys = [self._key.of(part) for part in self._parts]
        keys = np.concatenate(parts_keys) if parts_keys else np.empty(0, np.int32)
        del parts_keys
        self._keys: npt.NDArray[np.int32]
        self._order: npt.NDArray[np.signedinteger]
        if len(keys) < PACKED_SORT_LIMIT:  # (key, position) in one int64: equal keys in order
            pairs = (keys.astype(np.int64) << 32) | np.arange(len(keys), dtype=np.int64)
            del keys
            pairs.sort()
            self._keys = (pairs >> 32).astype(np.int32)
            self._order = (pairs & 0xFFFFFFFF).astype(np.int32)
        else:
            order = np.argsort(keys, kind="stable")  # equal keys keep their positions' order
            self._keys, self._order = keys[order], order

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        """Bytes the index keeps of its own (the items are the caller's)."""
        return int(self._keys.nbytes + self._order.nbytes + self._ends.nbytes)

    def locate(self, position: int) -> tuple[int, int]:
        """(part number, offset in that part) of the item at ``position``."""
        part = int(np.searchsorted(self._ends, position, side="right"))
        return part, position - (int(self._ends[part - 1]) if part else 0)

    def positions(self, wanted: Collection[bytes], *, last: bool = True) -> dict[bytes, int]:
        """Each item of ``wanted`` found → its last position (``last``) or its first; items
        not found are left out."""
        items = [item for item in dict.fromkeys(wanted) if len(item) <= self._longest]
        if not items or not len(self._keys):
            return {}
        keys = self._key.of(items)
        starts = np.searchsorted(self._keys, keys, side="left").tolist()
        stops = np.searchsorted(self._keys, keys, side="right").tolist()
        found: dict[bytes, int] = {}
        for item, start, stop in zip(items, starts, stops, strict=True):
            candidates = self._order[start:stop].tolist()  # ascending positions
            for position in reversed(candidates) if last else candidates:
                part, offset = self.locate(position)
                if self._parts[part][offset] == item:
                    found[item] = position
                    break
        return found


class PairIndex:
    """The pairs ``zip(inputs[i], outputs[i])`` over the chunk indices ``i`` of ``outputs``
    in ascending order (a chunk missing from ``inputs`` has no pairs), as a mix holds them
    for its trace (``RoundState.chunk_inputs`` and ``chunk_payloads``), looked up from
    either side.

    Holds the sequences it is given (no copy); they must not change while it is used.

    :raises InternalError: a chunk's inputs and outputs differ in length.
    """

    def __init__(
        self, inputs: Mapping[int, Sequence[bytes]], outputs: Mapping[int, Sequence[bytes]]
    ) -> None:
        chunks = sorted(outputs)
        self._inputs = [inputs.get(index, ()) for index in chunks]
        self._outputs = [outputs[index] for index in chunks]
        for index, ins, outs in zip(chunks, self._inputs, self._outputs, strict=True):
            if len(ins) != len(outs):
                raise InternalError(f"chunk {index} has {len(ins)} inputs for {len(outs)} outputs")
        self._count = sum(map(len, self._outputs))
        self._by_input: ItemIndex | None = None
        self._by_output: ItemIndex | None = None

    def __len__(self) -> int:
        """How many pairs."""
        return self._count

    @property
    def nbytes(self) -> int:
        """Bytes the sides built so far keep of their own (the items are the caller's)."""
        return sum(side.nbytes for side in (self._by_input, self._by_output) if side)

    def outputs_of(self, wanted: Collection[bytes]) -> dict[bytes, bytes]:
        """Each item of ``wanted`` that is an input → its output (of the last pair, in chunk
        order, that has it as its input); items that are no input are left out."""
        if self._by_input is None:
            self._by_input = ItemIndex(self._inputs)
        return _other_side(self._by_input, self._outputs, wanted)

    def inputs_of(self, wanted: Collection[bytes]) -> dict[bytes, bytes]:
        """Each item of ``wanted`` that is an output → its input (of the last pair, in chunk
        order, that has it as its output); items that are no output are left out."""
        if self._by_output is None:
            self._by_output = ItemIndex(self._outputs)
        return _other_side(self._by_output, self._inputs, wanted)


def _other_side(
    index: ItemIndex, other: Sequence[Sequence[bytes]], wanted: Collection[bytes]
) -> dict[bytes, bytes]:
    """Each found item → the item at its position on the other side (same part, offset)."""
    found = {}
    for item, position in index.positions(wanted).items():
        part, offset = index.locate(position)
        found[item] = other[part][offset]
    return found
