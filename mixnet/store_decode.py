"""Rows → records: how :mod:`mixnet.store` reads its tables back (free of I/O).

The ``*_from_row`` functions rebuild the records that :mod:`mixnet.store_rows` wrote and
raise :class:`CorruptRow` for anything the database holds that it never writes (a wrong
column type, an unknown status, a payload blob whose length does not match, ...);
:class:`~mixnet.store.NodeStore` reports it as a ``StoreError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TypeVar

import msgpack

from mixnet.core.intake import SEED_LENGTH
from mixnet.core.items import Items
from mixnet.core.receipts import RECEIPT_DIGEST_LENGTH, ReceiptTable
from mixnet.core.records import (
    Chunk,
    DerivedOutbound,
    OutboundBatch,
    OutboundChunk,
    RoundRecord,
    Submission,
)
from mixnet.core.status import RoundStatus
from mixnet.errors import MixnetError
from mixnet.keys import RoundKeyAnnouncement

__all__ = [
    "CorruptRow",
    "Row",
    "chunk_from_row",
    "outbound_from_rows",
    "receipts_from_rows",
    "result_from_text",
    "round_from_row",
    "stored_int",
    "submission_from_row",
    "unpack",
]

#: One row as sqlite returns it (or as a statement's parameters).
Row = tuple[object, ...]
T = TypeVar("T")

_STATUSES = {status.value: status for status in RoundStatus}


class CorruptRow(Exception):
    """A stored row is not one :mod:`mixnet.store_rows` writes (the store reports a
    ``StoreError``)."""


def stored_int(value: object) -> int:
    """Return a stored integer column. :raises CorruptRow: it is not an int."""
    if not isinstance(value, int):
        raise CorruptRow("integer expected")
    return value


def unpack(blob: object, item_length: object, item_count: object) -> Items:
    """The ``item_count`` items of ``item_length`` bytes in a stored blob, as a view of it.

    :raises CorruptRow: wrong types, negative numbers or ``len(blob) != length * count``.
    """
    if not (
        isinstance(blob, bytes)
        and isinstance(item_length, int)
        and isinstance(item_count, int)
        and item_length >= 0
        and item_count >= 0
        and len(blob) == item_length * item_count
    ):
        raise CorruptRow("a payload list's blob length does not match")
    return Items.from_bytes(blob, item_length, item_count)


def _announcements(blob: object) -> tuple[RoundKeyAnnouncement, ...]:
    try:
        rows = msgpack.unpackb(_as(bytes, blob), raw=False)
        return tuple(RoundKeyAnnouncement(*row) for row in rows)
    except (ValueError, TypeError, msgpack.UnpackException, MixnetError):
        raise CorruptRow("announcements are unreadable") from None


def _as(kind: type[T], value: object) -> T:
    """Return ``value`` if it is a ``kind``. :raises CorruptRow: it is not."""
    if not isinstance(value, kind):
        raise CorruptRow(f"{kind.__name__} expected")
    return value


def _opt(kind: type[T], value: object) -> T | None:
    """Return ``value`` if it is ``None`` or a ``kind``. :raises CorruptRow: it is not."""
    return None if value is None else _as(kind, value)


def round_from_row(row: Row) -> RoundRecord:
    """Rebuild a round from ``(round_id, status, opened_at, deadline, clients, secret_key,
    announcements)``. :raises CorruptRow: see the module docstring."""
    round_id, status, opened_at, deadline, clients, secret_key, announcements = row
    if not isinstance(status, str) or status not in _STATUSES:
        raise CorruptRow("unknown round status")
    return RoundRecord(
        round_id=stored_int(round_id),
        status=_STATUSES[status],
        opened_at=_as(float, opened_at),
        deadline=_opt(float, deadline),
        clients=None if clients is None else stored_int(clients),
        secret_key=_opt(bytes, secret_key),
        announcements=_announcements(announcements),
    )


def submission_from_row(row: Row) -> Submission:
    """Rebuild ``(client, digest, item_length, item_count, payloads)``."""
    client, digest, length, count, blob = row
    return Submission(_as(str, client), _as(bytes, digest), tuple(unpack(blob, length, count)))


def chunk_from_row(row: Row) -> Chunk:
    """Rebuild ``(sender, idx, chunks, clients, count, dropped, item_length, item_count,
    payloads, digests, inputs, input_length, excluded, signature, received)``."""
    (
        sender, index, chunks, clients, count, dropped, length, items, blob, digests,
        inputs, input_length, excluded, signature, received,
    ) = row  # fmt: skip
    payloads = unpack(blob, length, items)
    inputs_blob = _as(bytes, inputs)
    received_blob = _as(bytes, received)
    # the items as received are all the chunk carried (kept and dropped), of one length: the
    # inputs' length, if any peeled (a chunk whose every item was dropped has no inputs)
    carried = len(payloads) + stored_int(dropped)
    width = len(received_blob) // carried if carried else 0
    if received_blob and (
        not width
        or width * carried != len(received_blob)
        or (inputs_blob and width != stored_int(input_length))
    ):
        raise CorruptRow("a chunk's received items are corrupt")
    return Chunk(
        _as(str, sender),
        stored_int(index),
        stored_int(chunks),
        stored_int(clients),
        stored_int(count),
        stored_int(dropped),
        payloads,
        _as(bytes, digests),
        unpack(inputs_blob, input_length, len(payloads)) if inputs_blob else (),
        stored_int(excluded),
        _as(bytes, signature),
        unpack(received_blob, width, carried) if received_blob else (),
    )


def outbound_from_rows(
    heads: Iterable[Row], chunks: Iterable[Row]
) -> dict[int, OutboundBatch | DerivedOutbound]:
    """Every outbound batch from the rows of ``outbound`` (``heads``: round, clients, count,
    excluded, seed) and of ``outbound_chunks`` (round, index, item length, item count,
    payloads, acknowledged; by round and index): whole, or, with a seed, as a
    :class:`~mixnet.core.records.DerivedOutbound` of the chunks' sizes and acknowledgements.

    :raises CorruptRow: an acknowledgement not 0 or 1, a seeded chunk with payloads or out of
        order, a seed not :data:`~mixnet.core.intake.SEED_LENGTH` bytes, sizes that do not add
        up to the count, or a payload blob of the wrong length.
    """
    heads_by_round = {
        stored_int(r): (stored_int(clients), stored_int(count), stored_int(excluded), seed)
        for r, clients, count, excluded, seed in heads
    }
    parts: dict[int, list[OutboundChunk]] = {}
    sizes: dict[int, list[int]] = {}
    acks: dict[int, set[int]] = {}
    for r, index, length, count, blob, acked in chunks:
        if acked not in (0, 1):
            raise CorruptRow("an outbound chunk's acknowledgement is not 0 or 1")
        r, index = stored_int(r), stored_int(index)
        head = heads_by_round.get(r)
        if head is not None and head[3] is not None:  # stored as its seed
            if blob != b"" or index != len(sizes.get(r, ())):
                raise CorruptRow("a seeded outbound chunk holds payloads or is out of order")
            sizes.setdefault(r, []).append(stored_int(count))
            if acked == 1:
                acks.setdefault(r, set()).add(index)
            continue
        chunk = OutboundChunk(index, unpack(blob, length, count), acked == 1)
        parts.setdefault(r, []).append(chunk)
    batches: dict[int, OutboundBatch | DerivedOutbound] = {}
    for r, (clients, count, excluded, seed) in heads_by_round.items():
        if seed is None:
            batches[r] = OutboundBatch(clients, count, tuple(parts.get(r, ())), excluded)
            continue
        if not isinstance(seed, bytes) or len(seed) != SEED_LENGTH:
            raise CorruptRow(f"an outbound batch's seed is not {SEED_LENGTH} bytes")
        if sum(sizes.get(r, ())) != count:
            raise CorruptRow("a seeded outbound batch's chunks do not add up to its count")
        batches[r] = DerivedOutbound(
            clients, count, seed, tuple(sizes.get(r, ())), frozenset(acks.get(r, ())), excluded
        )
    return batches


def result_from_text(text: object) -> dict[str, object]:
    """Decode a stored result. :raises CorruptRow: not JSON text of an object."""
    try:
        value = json.loads(_as(str, text))
    except ValueError:
        raise CorruptRow("a result is not valid JSON") from None
    if not isinstance(value, dict):
        raise CorruptRow("a result is not a JSON object")
    return value


def receipts_from_rows(
    rows: Iterable[Row], open_rounds: frozenset[int] | set[int]
) -> dict[int, ReceiptTable]:
    r"""The receipts of each round from ``(round_id, client, digest)`` rows ordered by round
    (then as stored: a later receipt of a client replaces its earlier one), each round's
    :meth:`~mixnet.core.receipts.ReceiptTable.compact`\ ed as soon as its rows end, unless
    it is in ``open_rounds`` (the round that still takes submissions keeps its ``dict``):
    reading 16 rounds of a million receipts holds one round's ``dict`` at a time, not 16.

    :raises CorruptRow: a client id that is not text or a digest that is not
        :data:`~mixnet.core.receipts.RECEIPT_DIGEST_LENGTH` bytes.
    """
    tables: dict[int, ReceiptTable] = {}
    current: int | None = None
    pending: dict[str, bytes] = {}

    def close() -> None:
        if current is None:
            return
        table = ReceiptTable(pending.items())
        if current not in open_rounds:
            table.compact()
        tables[current] = table

    for r, client, digest in rows:
        if (
            not isinstance(client, str)
            or not isinstance(digest, bytes)
            or len(digest) != RECEIPT_DIGEST_LENGTH
        ):
            raise CorruptRow("a receipt is corrupt")
        round_id = stored_int(r)
        if round_id != current:
            close()
            current, pending = round_id, {}
        pending[client] = digest
    close()
    return tables
