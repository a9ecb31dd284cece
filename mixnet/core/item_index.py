"""A round's items looked up without a scan and without an object per item (pure).

The trace maps items to where they came from, a page at a time: at a relay an accused
output to the input it peeled from (``verified``), an excluded input to its output
(``exclude``, and the last mix's release); at the entry mix an accused item to the client
that submitted it. A page names at most a few hundred items, but a round of 10⁶ users holds
6·10⁶ of them at each hop: a scan per page costs about a second, a verdict over thousands of
bad submissions has about a hundred pages, and a ``dict`` of every item costs over 100
bytes per item.

:class:`ItemIndex` sorts a sequence of items once by their Python hashes and finds a page's
items in O(k log n), at 8 bytes per item (the top 32 bits of the hash and an ``int32``
position). Items whose keys are equal are compared whole, so a collision costs time, never a
wrong answer. Python keys its hash of ``bytes`` with a random secret per process, so no
client can aim its items at one key; a node run with ``PYTHONHASHSEED`` set gives up that
secret, and a client then pays about 2³² hashes per item it adds to a key.

:class:`PairIndex` is a mix's (input, output) pairs indexed both ways, each side on first use.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from mixnet.errors import InternalError

__all__ = ["ItemIndex", "PairIndex"]


def _keys(items: Iterable[bytes], count: int) -> npt.NDArray[np.int32]:
    """The top 32 bits of each item's Python hash: enough to find an item among a few
    million in one or two candidates (every candidate is compared whole)."""
    hashes = np.fromiter(map(hash, items), dtype=np.int64, count=count)
    return (hashes >> 32).astype(np.int32)


class ItemIndex:
    """The items of ``parts`` taken as one sequence (positions 0, 1, …, part after part),
    sorted by hash. Holds ``parts`` (no copy); they must not change while it is used."""

    def __init__(self, parts: Sequence[Sequence[bytes]]) -> None:
        self._parts = list(parts)
        sizes = np.asarray([len(part) for part in self._parts], dtype=np.int64)
        self._ends = np.cumsum(sizes)
        count = int(self._ends[-1]) if len(sizes) else 0
        keys = _keys(itertools.chain.from_iterable(self._parts), count)
        order = np.argsort(keys, kind="stable")  # equal keys keep their positions' order
        self._keys: npt.NDArray[np.int32] = keys[order]
        self._order: npt.NDArray[np.signedinteger] = order.astype(
            np.int32 if count < 2**31 else np.int64
        )

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
        items = list(dict.fromkeys(wanted))
        if not items or not len(self._keys):
            return {}
        keys = _keys(items, len(items))
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
    in ascending order (a chunk missing from ``inputs`` has no pairs), as a mix's trace sees
    them (:meth:`~mixnet.core.tracing.TracingMix._pairs`), looked up from either side.

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
