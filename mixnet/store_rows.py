"""How :mod:`mixnet.store` lays out its tables and turns writes into SQL; reading rows back
into records is :mod:`mixnet.store_decode`.

:data:`SCHEMA` is the tables; the two halves are both free of I/O:

* **Writes → statements.** :func:`statements` checks one :data:`~mixnet.core.records.Write`
  (``TypeError``/``ValueError`` for a value a correct caller never passes: a negative id, a
  secret key of the wrong length, payloads of unequal length, a result JSON cannot hold, ...)
  and returns the :class:`Statement` list that applies it, each with the message of the
  :class:`~mixnet.store.StoreError` to report when the database refuses it;
  :func:`group_statements` does it for a write group, with one ``executemany`` per table for
  a run of submissions.
* **Rows → records** is :mod:`mixnet.store_decode`: it rebuilds the records written here and
  raises :class:`~mixnet.store_decode.CorruptRow` for anything else the database holds;
  :class:`~mixnet.store.NodeStore` reports it as a ``StoreError``.

A payload list is one blob (the concatenation of equal-length items) with its item length
and count. Announcements are one msgpack blob: a list of ``[chain_id, node, round_id,
public_key, signature]``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import msgpack

from mixnet.core.intake import SEED_LENGTH
from mixnet.core.items import Items
from mixnet.core.receipts import RECEIPT_DIGEST_LENGTH
from mixnet.core.records import (
    AckOutbound,
    AddChunk,
    AddSubmission,
    Chunk,
    DropIntake,
    DropOutbound,
    EraseKey,
    ForgetReceipts,
    NewRound,
    OutboundBatch,
    OutboundChunk,
    PutOutbound,
    PutResult,
    SetRound,
    Submission,
    Write,
)
from mixnet.core.status import RoundStatus
from mixnet.keys import SIGNATURE_LENGTH, RoundKeyAnnouncement
from mixnet.store_decode import Row

#: Bytes of a round's X25519 secret key.
SECRET_KEY_LENGTH = 32
#: Writes after which the store checkpoints the WAL: they delete what must not linger on disk.
ERASING = (EraseKey, DropIntake, ForgetReceipts)

_MAX_ID = 1 << 63


#: The tables of schema version 8 (:data:`mixnet.store.SCHEMA_VERSION`). Version 4 dropped
#: version 3's index on ``submissions (round_id, client)``. Version 5 changed what
#: ``chunks.digests`` holds: the first 16 bytes of each item's chunk-signature Merkle leaf
#: (:func:`mixnet.core.digests.replay_digests`); a relay that rebuilt its replay filter from
#: version 4's digests would miss a replay of an item it stored before the upgrade. Version 6
#: dropped ``receipts``' primary key ``(round_id, client)``: client ids are random, so the key
#: cost a random B-tree page per submission (at 10⁶ users most of the entry mix's store time).
#: The entry machine refuses a second submission of a client from memory, which equals the
#: disk because the store stops at a failed commit (``mixnet.store``, "Fail-stop");
#: ``receipts_by_round`` serves recovery and ``ForgetReceipts`` and grows in order. A version-5
#: store would still refuse a second submission, but is refused like any other version.
#: Version 7 added ``chunks.signature`` and ``chunks.received`` (:class:`~mixnet.core.records.
#: Chunk`): a relay keeps a round's inputs on disk only and reads them back for a trace, with
#: the sender's signed chunk as its delivery, also after a restart.
#: Version 8 added ``outbound.seed``: a mix before the last stores its outbound batch as the
#: seed of its permutation and each chunk's size (``outbound_chunks.payloads`` empty), and
#: derives the chunks again from its stored intake after a restart (:mod:`mixnet.core.outbound`).
SCHEMA = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE rounds (
    round_id      INTEGER PRIMARY KEY,
    status        TEXT NOT NULL,
    opened_at     REAL NOT NULL,
    deadline      REAL,
    clients       INTEGER,
    secret_key    BLOB,
    announcements BLOB NOT NULL
);
CREATE TABLE submissions (
    id          INTEGER PRIMARY KEY,
    round_id    INTEGER NOT NULL REFERENCES rounds (round_id),
    client      TEXT NOT NULL,
    digest      BLOB NOT NULL,
    item_length INTEGER NOT NULL,
    item_count  INTEGER NOT NULL,
    payloads    BLOB NOT NULL
);
CREATE TABLE receipts (
    round_id INTEGER NOT NULL REFERENCES rounds (round_id),
    client   TEXT NOT NULL,
    digest   BLOB NOT NULL
);
CREATE INDEX receipts_by_round ON receipts (round_id);
CREATE TABLE chunks (
    round_id    INTEGER NOT NULL REFERENCES rounds (round_id),
    sender      TEXT NOT NULL,
    idx         INTEGER NOT NULL,
    chunks      INTEGER NOT NULL,
    clients     INTEGER NOT NULL,
    count       INTEGER NOT NULL,
    dropped     INTEGER NOT NULL,
    item_length INTEGER NOT NULL,
    item_count  INTEGER NOT NULL,
    payloads    BLOB NOT NULL,
    digests     BLOB NOT NULL,
    inputs      BLOB NOT NULL,
    input_length INTEGER NOT NULL,
    excluded    INTEGER NOT NULL,
    signature   BLOB NOT NULL,
    received    BLOB NOT NULL,
    PRIMARY KEY (round_id, sender, idx)
);
CREATE TABLE outbound (
    round_id INTEGER PRIMARY KEY REFERENCES rounds (round_id),
    clients  INTEGER NOT NULL,
    count    INTEGER NOT NULL,
    excluded INTEGER NOT NULL,
    seed     BLOB
);
CREATE TABLE outbound_chunks (
    round_id    INTEGER NOT NULL REFERENCES outbound (round_id) ON DELETE CASCADE,
    idx         INTEGER NOT NULL,
    item_length INTEGER NOT NULL,
    item_count  INTEGER NOT NULL,
    payloads    BLOB NOT NULL,
    acked       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (round_id, idx)
);
CREATE TABLE results (
    round_id INTEGER PRIMARY KEY REFERENCES rounds (round_id),
    result   TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class Statement:
    """One SQL statement of a write, and how to report the database refusing it.

    ``rows`` (for ``executemany``, iterated once, possibly lazily) replaces ``params`` when
    not ``None``. ``duplicate`` is the
    message when a UNIQUE or PRIMARY KEY constraint fails; ``missing`` the message when the
    round a row refers to does not exist (a FOREIGN KEY constraint fails) or, with
    ``need_row``, when the statement changed no row.
    """

    sql: str
    params: Row = ()
    rows: Iterable[Row] | None = None
    duplicate: str = "the row already exists"
    missing: str = "the round does not exist"
    need_row: bool = False
    #: ``rows`` are small (a submission each): inserted in multi-row statements
    #: (:func:`mixnet.store_apply.insert_rows`). Not for rows of large blobs, whose copies
    #: the statement cache would hold (a part's worth) until the statement is used again.
    multi_row: bool = False
    #: what the statement deletes or overwrites is zeroed in the database pages
    #: (``secure_delete``, the connection's default); ``False`` only for a delivered outbound
    #: batch (:class:`~mixnet.core.records.DropOutbound`), whose bytes the successor has
    zeroed: bool = True


# --------------------------------------------------------------------------- validation


def check_int(value: object, what: str, *, low: int = 0, high: int = _MAX_ID) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[low, high)``.

    :raises TypeError: not an int. :raises ValueError: out of range.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value < high:
        raise ValueError(f"{what} must be in [{low}, {high}), got {value}")
    return value


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a non-empty str without NUL that encodes as UTF-8.

    :raises TypeError: not a str. :raises ValueError: empty, NUL or not encodable.
    """
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value or "\x00" in value:
        raise ValueError(f"{what} must be non-empty and contain no NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be encodable as UTF-8") from None
    return value


def _check_time(value: object, what: str) -> float:
    """Return ``value`` as a float if it is a finite int or float (unix seconds)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"{what} must be a float, not {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{what} must be finite")
    return result


def _check_bytes(value: object, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"{what} must be bytes, not {type(value).__name__}")
    return value


def check_sequence(value: object, what: str) -> Sequence[object]:
    """Return ``value`` if it is a sequence other than a str or bytes-like (else TypeError)."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes | bytearray | memoryview):
        raise TypeError(f"{what} must be a sequence, not {type(value).__name__}")
    return value


def _pack(payloads: object, what: str = "payloads") -> tuple[bytes | memoryview, int, int]:
    """Return ``(blob, item_length, item_count)`` for a sequence of equal-length bytes (an
    :class:`~mixnet.core.items.Items` gives its buffer as it is, without a copy per item).

    An empty sequence packs to ``(b"", 0, 0)``. :raises TypeError: not a sequence of bytes.
    :raises ValueError: the lengths differ.
    """
    if isinstance(payloads, Items):
        if not payloads:
            return b"", 0, 0
        return payloads.buffer(), payloads.width, len(payloads)
    items = payloads if type(payloads) is tuple else check_sequence(payloads, what)
    if not set(map(type, items)) <= {bytes} and not all(isinstance(i, bytes) for i in items):
        raise TypeError(f"every item of {what} must be bytes")
    blobs: Sequence[bytes] = items  # type: ignore[assignment]  # checked just above
    if not blobs:
        return b"", 0, 0
    if len(set(map(len, blobs))) != 1:
        raise ValueError(f"all items of {what} must have the same length")
    return b"".join(blobs), len(blobs[0]), len(blobs)


def _pack_announcements(value: object) -> bytes:
    """Return the msgpack blob of a sequence of :class:`RoundKeyAnnouncement` (else TypeError)."""
    items = check_sequence(value, "announcements")
    rows = []
    for item in items:
        if not isinstance(item, RoundKeyAnnouncement):
            raise TypeError(f"announcements must be RoundKeyAnnouncement, not {type(item)}")
        rows.append([item.chain_id, item.node, item.round_id, item.public_key, item.signature])
    packed: bytes = msgpack.packb(rows, use_bin_type=True)
    return packed


def _check_json(value: object, depth: int = 0) -> None:
    """Raise ``TypeError`` unless ``value`` is JSON-able with str keys at every level."""
    if depth > 100:
        raise ValueError("result is nested too deeply")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"result keys must be str, not {type(key).__name__}")
            _check_json(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_json(item, depth + 1)
    elif value is not None and not isinstance(value, str | int | float):
        raise TypeError(f"a result cannot hold {type(value).__name__}")


def _encode_result(result: object) -> str:
    """Return the JSON text of a result mapping (tuples become lists).

    :raises TypeError: not a mapping, a non-str key at any level, a value JSON cannot hold.
    :raises ValueError: NaN or an infinite float.
    """
    if not isinstance(result, Mapping):
        raise TypeError(f"result must be a mapping, not {type(result).__name__}")
    _check_json(result)
    return json.dumps(dict(result), allow_nan=False, separators=(",", ":"))


# --------------------------------------------------------------------------- writes


def statements(write: Write) -> tuple[Statement, ...]:
    """Check ``write`` and return the statements that apply it, in order.

    :raises TypeError: not a write, or a field of the wrong type.
    :raises ValueError: a field out of range (see the module docstring).
    """
    if not isinstance(write, Write):
        raise TypeError(f"not a write: {type(write).__name__}")
    r = check_int(write.round_id, "round_id")
    missing = f"round {r} does not exist"
    match write:
        case NewRound():
            key = write.secret_key
            if key is not None and len(_check_bytes(key, "secret_key")) != SECRET_KEY_LENGTH:
                raise ValueError(f"secret_key must be {SECRET_KEY_LENGTH} bytes")
            row = (
                r,
                _status(write.status),
                _check_time(write.opened_at, "opened_at"),
                key,
                _pack_announcements(write.announcements),
            )
            sql = (
                "INSERT INTO rounds (round_id, status, opened_at, secret_key, announcements)"
                " VALUES (?, ?, ?, ?, ?)"
            )
            return (Statement(sql, row, duplicate=f"round {r} already exists"),)
        case SetRound():
            changes = (
                None if write.status is None else _status(write.status),
                None if write.clients is None else check_int(write.clients, "clients"),
                None if write.deadline is None else _check_time(write.deadline, "deadline"),
                None if write.announcements is None else _pack_announcements(write.announcements),
                r,
            )
            sql = (
                "UPDATE rounds SET status = coalesce(?, status), clients = coalesce(?, clients),"
                " deadline = coalesce(?, deadline),"
                " announcements = coalesce(?, announcements) WHERE round_id = ?"
            )
            return (Statement(sql, changes, missing=missing, need_row=True),)
        case EraseKey():
            sql = "UPDATE rounds SET secret_key = NULL WHERE round_id = ?"
            return (Statement(sql, (r,), missing=missing, need_row=True),)
        case AddSubmission():
            return _add_submission(r, write.submission, missing)
        case AddChunk():
            return _add_chunk(r, write.chunk, missing)
        case DropIntake():
            return (
                Statement("DELETE FROM submissions WHERE round_id = ?", (r,)),
                Statement("DELETE FROM chunks WHERE round_id = ?", (r,)),
            )
        case ForgetReceipts():
            return (Statement("DELETE FROM receipts WHERE round_id = ?", (r,)),)
        case PutOutbound():
            return _put_outbound(r, write, missing)
        case AckOutbound():
            index = check_int(write.index, "index")
            sql = "UPDATE outbound_chunks SET acked = 1 WHERE round_id = ? AND idx = ?"
            return (
                Statement(
                    sql,
                    (r, index),
                    missing=f"round {r} has no outbound chunk {index}",
                    need_row=True,
                ),
            )
        case DropOutbound():
            if not isinstance(write.delivered, bool):
                raise TypeError(f"delivered must be a bool, not {type(write.delivered).__name__}")
            zeroed = not write.delivered
            return (
                Statement("DELETE FROM outbound_chunks WHERE round_id = ?", (r,), zeroed=zeroed),
                # zeroed always: it may hold the seed, which links the outputs to the inputs
                Statement("DELETE FROM outbound WHERE round_id = ?", (r,)),
            )
        case PutResult():
            sql = (
                "INSERT INTO results (round_id, result) VALUES (?, ?)"
                " ON CONFLICT (round_id) DO UPDATE SET result = excluded.result"
            )
            return (Statement(sql, (r, _encode_result(write.result)), missing=missing),)
    raise TypeError(f"not a write: {type(write).__name__}")


def _status(value: object) -> str:
    if not isinstance(value, RoundStatus):
        raise TypeError(f"status must be a RoundStatus, not {type(value).__name__}")
    return value.value


def group_statements(group: Sequence[Write]) -> list[Statement]:
    """The statements of a write group, in order: :func:`statements` of each write, except
    that a run of :class:`AddSubmission` writes of one round becomes one ``executemany``
    per table (a ``submit-many`` frame's submissions are stored by one group).

    :raises TypeError, ValueError: as :func:`statements`, for any write of the group.
    """
    out: list[Statement] = []
    run: list[AddSubmission] = []
    for write in group:
        if isinstance(write, AddSubmission) and (not run or run[0].round_id == write.round_id):
            run.append(write)
            continue
        if run:
            out += _add_submissions(run)
            run = []
        if isinstance(write, AddSubmission):
            run.append(write)
        else:
            out += statements(write)
    if run:
        out += _add_submissions(run)
    return out


_RECEIPT = "INSERT INTO receipts (round_id, client, digest) VALUES (?, ?, ?)"
_SUBMISSION = (
    "INSERT INTO submissions (round_id, client, digest, item_length, item_count, payloads)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)


def _add_submissions(run: Sequence[AddSubmission]) -> tuple[Statement, ...]:
    """The statements of :class:`AddSubmission` writes of one round (checked as by
    :func:`statements`): one row each in ``receipts`` and ``submissions``."""
    if len(run) == 1:
        return statements(run[0])
    r = check_int(run[0].round_id, "round_id")
    rows = [_submission_row(r, write.submission) for write in run]
    missing = f"round {r} does not exist"
    return (
        Statement(_RECEIPT, rows=[row[:3] for row in rows], missing=missing, multi_row=True),
        Statement(_SUBMISSION, rows=rows, missing=missing, multi_row=True),
    )


def _add_submission(r: int, item: object, missing: str) -> tuple[Statement, ...]:
    row = _submission_row(r, item)
    return (
        Statement(_RECEIPT, row[:3], missing=missing),
        Statement(_SUBMISSION, row, missing=missing),
    )


def _submission_row(r: int, item: object) -> Row:
    """A submission's row of ``submissions`` (its first three values are its receipt's).

    :raises TypeError, ValueError: see :func:`statements`."""
    if not isinstance(item, Submission):
        raise TypeError(f"submission must be a Submission, not {type(item).__name__}")
    client = check_name(item.client, "client")
    digest = _check_bytes(item.digest, "digest")
    if len(digest) != RECEIPT_DIGEST_LENGTH:
        raise ValueError(f"a submission's digest must be {RECEIPT_DIGEST_LENGTH} bytes")
    blob, length, count = _pack(item.payloads)
    return (r, client, digest, length, count, blob)


def _add_chunk(r: int, chunk: object, missing: str) -> tuple[Statement, ...]:
    if not isinstance(chunk, Chunk):
        raise TypeError(f"chunk must be a Chunk, not {type(chunk).__name__}")
    chunks = check_int(chunk.chunks, "chunks", low=1)
    row = (
        r,
        check_name(chunk.sender, "sender"),
        check_int(chunk.index, "index", high=chunks),
        chunks,
        check_int(chunk.clients, "clients"),
        check_int(chunk.count, "count"),
        check_int(chunk.dropped, "dropped"),
        *_pack(chunk.payloads),
        _digests(chunk.digests),
        *_inputs(chunk),
        check_int(chunk.excluded, "excluded"),
        *_received(chunk),
    )
    sql = (
        "INSERT INTO chunks (round_id, sender, idx, chunks, clients, count, dropped, payloads,"
        " item_length, item_count, digests, inputs, input_length, excluded, signature,"
        " received) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (round_id, sender, idx) DO NOTHING"
    )
    return (Statement(sql, row, missing=missing),)


def _inputs(chunk: Chunk) -> tuple[bytes | memoryview, int]:
    """``(blob, input_length)`` of a chunk's inputs: none, or one per payload."""
    blob, length, count = _pack(chunk.inputs, "inputs")
    if count not in (0, len(chunk.payloads)):
        raise ValueError("a chunk has one input per payload, or none")
    return blob, length


def _received(chunk: Chunk) -> tuple[bytes, bytes | memoryview]:
    """``(signature, received)`` of a chunk: a 64-byte signature or none, and the items
    as received when they differ from the inputs (as many as the chunk carried, of the
    inputs' length), or none."""
    signature = _check_bytes(chunk.signature, "signature")
    if len(signature) not in (0, SIGNATURE_LENGTH):
        raise ValueError(f"a chunk signature is {SIGNATURE_LENGTH} bytes, or none")
    blob, length, count = _pack(chunk.received, "received")
    if count and (
        count != len(chunk.payloads) + chunk.dropped
        or (len(chunk.inputs) and length != len(chunk.inputs[0]))
    ):
        raise ValueError("a chunk's received items are all it carried, of its inputs' length")
    return signature, blob


def _digests(value: object) -> bytes:
    """A chunk's replay-filter digests: bytes, a whole number of 16-byte digests."""
    if not isinstance(value, bytes):
        raise TypeError(f"digests must be bytes, not {type(value).__name__}")
    if len(value) % 16:
        raise ValueError("digests must be a whole number of 16-byte digests")
    return value


def _put_outbound(r: int, write: PutOutbound, missing: str) -> tuple[Statement, ...]:
    """An outbound batch's rows: with a ``seed``, the seed and each chunk's item length and
    count, no payloads (an empty blob each; recovery derives them again)."""
    batch = write.batch
    if not isinstance(batch, OutboundBatch):
        raise TypeError(f"batch must be an OutboundBatch, not {type(batch).__name__}")
    clients = check_int(batch.clients, "clients")
    count = check_int(batch.count, "count")
    seed = batch.seed
    if seed is not None and (not isinstance(seed, bytes) or len(seed) != SEED_LENGTH):
        raise ValueError(f"an outbound batch's seed must be {SEED_LENGTH} bytes")
    parts: list[tuple[int, Items | bytes | memoryview, int, int]] = []
    lengths: set[int] = set()
    total = 0
    for i, part in enumerate(check_sequence(batch.chunks, "chunks")):
        if not isinstance(part, OutboundChunk):
            raise TypeError(f"chunks must be OutboundChunk, not {type(part).__name__}")
        if part.index != i or part.acked is not False:
            raise ValueError("outbound chunks must be indexed 0, 1, ... and not acknowledged")
        data: Items | bytes | memoryview
        if isinstance(part.payloads, Items) and part.payloads:
            # gathered only when its row is written: one chunk in memory at a time
            data, length, items = part.payloads, part.payloads.width, len(part.payloads)
        else:
            data, length, items = _pack(part.payloads, f"chunks[{i}].payloads")
        if seed is not None:
            data = b""  # the seed stands for the payloads
        if items:
            lengths.add(length)
        total += items
        parts.append((i, data, length, items))

    def rows() -> Iterator[Row]:
        for i, data, length, items in parts:
            yield (r, i, data.buffer() if isinstance(data, Items) else data, length, items)

    if len(lengths) > 1:
        raise ValueError("all payloads of an outbound batch must have the same length")
    if total != count:
        raise ValueError("count must equal the number of payloads in the chunks")
    return (
        Statement(
            "INSERT INTO outbound (round_id, clients, count, excluded, seed)"
            " VALUES (?, ?, ?, ?, ?)",
            (r, clients, count, check_int(batch.excluded, "excluded"), seed),
            duplicate=f"round {r} already has an outbound batch",
            missing=missing,
        ),
        Statement(
            "INSERT INTO outbound_chunks (round_id, idx, payloads, item_length, item_count)"
            " VALUES (?, ?, ?, ?, ?)",
            rows=rows(),
        ),
    )
