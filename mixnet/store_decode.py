"""Rows → records: how :mod:`mixnet.store` reads its tables back (free of I/O).

The ``*_from_row`` functions rebuild the records that :mod:`mixnet.store_rows` wrote and
raise :class:`CorruptRow` for anything the database holds that it never writes (a wrong
column type, an unknown status, a payload blob whose length does not match, ...);
:class:`~mixnet.store.NodeStore` reports it as a ``StoreError``.
"""

from __future__ import annotations

import json
from typing import TypeVar

import msgpack

from mixnet.core.items import Items
from mixnet.core.records import Chunk, RoundRecord, Submission
from mixnet.core.status import RoundStatus
from mixnet.errors import MixnetError
from mixnet.keys import RoundKeyAnnouncement

__all__ = [
    "CorruptRow",
    "Row",
    "chunk_from_row",
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


def result_from_text(text: object) -> dict[str, object]:
    """Decode a stored result. :raises CorruptRow: not JSON text of an object."""
    try:
        value = json.loads(_as(str, text))
    except ValueError:
        raise CorruptRow("a result is not valid JSON") from None
    if not isinstance(value, dict):
        raise CorruptRow("a result is not a JSON object")
    return value
