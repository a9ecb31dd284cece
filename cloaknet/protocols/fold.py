"""Analyzing a round one block of messages at a time, in memory that does not grow with it.

A round's analyzer (:func:`cloaknet.analysis.analyze_round`) decodes the payloads in blocks
and folds each block into a :class:`MessageFold` — the protocol's
:meth:`~cloaknet.protocols.base.SummationProtocol.message_fold` — instead of decoding the
whole batch into one array first. Every protocol here needs only a few numbers of the
multiset of its messages:

* the scalar protocols their exact sum (:class:`SumFold`: the cloak and split-and-mix reduce
  it mod N, the single-message ones and the curator take it as it is, unary randomized
  response counts ones, which is the sum of messages in {0, 1});
* the vector sum, per coordinate, how many messages carry that index and the exact sum of
  their shares (:class:`CoordinateSums`, folded by :class:`CoordinateFold`).

Contract shared by every fold: :meth:`MessageFold.add` takes a 1-D block of messages already
checked to lie in ``[0, message_modulus)`` — ``uint64`` (messages of at most 8 bytes) or
``object`` (Python ints) — and never raises for their values (the analysis must report a
bad *payload* anywhere in the batch before the protocol judges any message, as it did when
it decoded everything first); :meth:`MessageFold.result_fields` then returns exactly what the
protocol's ``result_fields`` returns for the same messages, and raises what it raises.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.vectorized import exact_sum

__all__ = ["COORDINATE_BLOCK", "CoordinateFold", "CoordinateSums", "MessageFold", "SumFold"]

#: Messages binned at once by :meth:`CoordinateSums.add` (bounds its temporaries).
COORDINATE_BLOCK: Final[int] = 1 << 16

_LOW32: Final = np.uint64(0xFFFF_FFFF)
_SHIFT32: Final = np.uint64(32)


class MessageFold(abc.ABC):
    """The state of one round's analysis as its messages arrive in blocks (module doc)."""

    @abc.abstractmethod
    def add(self, block: NDArray[Any]) -> None:
        """Fold in ``block``: a 1-D ``uint64`` or ``object`` array of messages in
        ``[0, message_modulus)``. Never raises for the messages' values."""

    @abc.abstractmethod
    def result_fields(self, users: int, *, rng: RandomSource = SYSTEM_RANDOM) -> dict[str, object]:
        """The protocol's ``result_fields`` of every message folded in, for ``users``
        users (raises what it raises)."""


class SumFold(MessageFold):
    """Keeps the count and the exact sum (a Python int) of the messages; ``fields(total,
    count, users, rng)`` turns them into the protocol's result fields."""

    def __init__(self, fields: Callable[[int, int, int, RandomSource], dict[str, object]]) -> None:
        self._fields = fields
        self.count = 0
        self.total = 0

    def add(self, block: NDArray[Any]) -> None:
        flat = np.asarray(block).reshape(-1)
        self.count += int(flat.shape[0])
        self.total += exact_sum(flat)

    def result_fields(self, users: int, *, rng: RandomSource = SYSTEM_RANDOM) -> dict[str, object]:
        return self._fields(self.total, self.count, users, rng)


class CoordinateSums:
    """Per-coordinate counts and exact share sums of vector messages (index in the high
    bits from ``shift`` up, share in the bits of ``share_mask``) for ``dimension``
    coordinates, folded in a block at a time.

    After any number of :meth:`add`: :attr:`count` messages, the largest index and share
    seen (:attr:`max_index`, :attr:`max_share`; -1 before any message), and — while every
    index was below ``dimension`` (:attr:`indices_valid`) — :attr:`counts`, :attr:`low`
    and :attr:`high`: per coordinate the number of messages and the sums of the low and
    high 32-bit halves of their shares (uint64: exact while fewer than 2^32 messages are
    added, as the round's n·m per coordinate always are).
    """

    def __init__(self, dimension: int, shift: np.uint64, share_mask: np.uint64) -> None:
        self.dimension = dimension
        self.shift = shift
        self.share_mask = share_mask
        self.count = 0
        self.max_index = -1
        self.max_share = -1
        self.counts = np.zeros(dimension, dtype=np.uint64)
        self.low = np.zeros(dimension, dtype=np.uint64)
        self.high = np.zeros(dimension, dtype=np.uint64)

    @property
    def indices_valid(self) -> bool:
        """Whether every index added so far is below :attr:`dimension`."""
        return self.max_index < self.dimension

    def add(self, words: NDArray[np.uint64]) -> None:
        """Fold in the messages ``words`` (any shape of ``uint64``), in blocks of
        :data:`COORDINATE_BLOCK`."""
        flat = words.reshape(-1)
        for start in range(0, flat.shape[0], COORDINATE_BLOCK):
            self._add_block(flat[start : start + COORDINATE_BLOCK])

    def _add_block(self, block: NDArray[np.uint64]) -> None:
        size = int(block.shape[0])
        if not size:
            return
        self.count += size
        index = block >> self.shift
        share = block & self.share_mask
        self.max_index = max(self.max_index, int(index.max()))
        self.max_share = max(self.max_share, int(share.max()))
        if not self.indices_valid:
            return  # the analysis fails on the index; the sums are not needed
        bins = index.astype(np.intp)
        np.add.at(self.counts, bins, np.uint64(1))
        np.add.at(self.low, bins, share & _LOW32)
        np.add.at(self.high, bins, share >> _SHIFT32)


class CoordinateFold(MessageFold):
    """Folds vector messages into :class:`CoordinateSums`; ``fields(sums, users)`` turns
    them into the protocol's result fields."""

    def __init__(
        self,
        sums: CoordinateSums,
        fields: Callable[[CoordinateSums, int], dict[str, object]],
    ) -> None:
        self.sums = sums
        self._fields = fields

    def add(self, block: NDArray[Any]) -> None:
        self.sums.add(np.asarray(block).astype(np.uint64, copy=False))

    def result_fields(self, users: int, *, rng: RandomSource = SYSTEM_RANDOM) -> dict[str, object]:
        return self._fields(self.sums, users)
