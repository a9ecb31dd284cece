"""The durable state of one mix node or analyzer node: one sqlite database file per node.

A node acknowledges a submission (``accepted``) or a batch chunk (``batch-ack``) only after
the method that stores it has returned: every write method is one ``BEGIN IMMEDIATE`` ...
``COMMIT`` transaction on a database in WAL mode with ``synchronous=FULL``, so once it
returns the data survives the process being killed at any moment (and, as far as the OS and
disk honour ``fsync``, a power loss). Group commit means handing many items to one call
(:meth:`NodeStore.add_submissions`), which then share one commit.

What is kept, per round (ids are ints in ``[0, 2**63)``):

* the round itself (:class:`RoundRecord`): a caller-chosen status, times, ``n`` and the
  round's X25519 secret key until :meth:`NodeStore.erase_round_key`;
* the intake: client submissions at the entry mix (:class:`Submission`) or the predecessor's
  batch chunks at an inner mix or the analyzer (:class:`Chunk`);
* the outbound batch (:class:`OutboundChunk`), stored before its first chunk is sent so a
  restarted node resends exactly the same permutation;
* the analyzer's result, as JSON.

A payload list is stored as one blob (the concatenation of equal-length items) with its item
length and count, so a round of 500,000 payloads costs one row per list, not one per payload.

Threading: a :class:`NodeStore` is used by one thread at a time (the node's event-loop
thread). It may be constructed in one thread and then used in another, but it must never be
used from two threads concurrently; it does no locking of its own. Methods block on disk I/O.

Errors: :class:`StoreError` for anything the database refuses or cannot do (missing round,
duplicate submission, unreadable or newer database, corrupt rows, I/O errors, use after
:meth:`NodeStore.close`); ``TypeError``/``ValueError`` for arguments a correct caller never
passes (a negative id, a non-bytes payload, payloads of unequal length, ...).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from mixnet.errors import MixnetError

#: Version of the schema this module writes; a database with another version is refused.
SCHEMA_VERSION = 1
#: Bytes of a round's X25519 secret key.
SECRET_KEY_LENGTH = 32
#: Seconds a write waits for a lock held by another connection before failing.
BUSY_TIMEOUT = 10.0

_MAX_ID = 1 << 63
_SCHEMA_VERSION_KEY = "schema_version"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rounds (
    round_id   INTEGER PRIMARY KEY,
    status     TEXT NOT NULL,
    opened_at  REAL NOT NULL,
    deadline   REAL,
    clients    INTEGER,
    secret_key BLOB
);
CREATE TABLE IF NOT EXISTS submissions (
    id          INTEGER PRIMARY KEY,
    round_id    INTEGER NOT NULL REFERENCES rounds (round_id),
    client      TEXT NOT NULL,
    digest      BLOB NOT NULL,
    item_length INTEGER NOT NULL,
    item_count  INTEGER NOT NULL,
    payloads    BLOB NOT NULL,
    UNIQUE (round_id, client)
);
CREATE INDEX IF NOT EXISTS submissions_by_round ON submissions (round_id);
CREATE TABLE IF NOT EXISTS chunks (
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
    PRIMARY KEY (round_id, sender, idx)
);
CREATE TABLE IF NOT EXISTS outbound (
    round_id INTEGER PRIMARY KEY REFERENCES rounds (round_id),
    clients  INTEGER NOT NULL,
    count    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS outbound_chunks (
    round_id    INTEGER NOT NULL REFERENCES outbound (round_id) ON DELETE CASCADE,
    idx         INTEGER NOT NULL,
    item_length INTEGER NOT NULL,
    item_count  INTEGER NOT NULL,
    payloads    BLOB NOT NULL,
    acked       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (round_id, idx)
);
CREATE TABLE IF NOT EXISTS results (
    round_id INTEGER PRIMARY KEY REFERENCES rounds (round_id),
    result   TEXT NOT NULL
);
"""


class StoreError(MixnetError):
    """The node's database refused or failed an operation, or holds data it cannot read."""

    code = "store-error"


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RoundRecord:
    """One round as stored: ``status`` is a short caller-chosen word ("open", "closed", ...).

    ``opened_at`` and ``deadline`` are unix seconds; ``clients`` is ``n`` once known;
    ``secret_key`` is the round's 32-byte X25519 secret, or ``None`` once erased.
    """

    round_id: int
    status: str
    opened_at: float
    deadline: float | None
    clients: int | None
    secret_key: bytes | None


@dataclass(frozen=True)
class Submission:
    """A client's accepted submission at the entry mix.

    ``digest`` identifies the submitted (unpeeled) onions, so an identical retry is
    recognised; ``payloads`` are the peeled payloads, all of the same length.
    """

    client: str
    digest: bytes
    payloads: tuple[bytes, ...]


@dataclass(frozen=True)
class Chunk:
    """One received batch chunk: the fields of the ``batch`` frame after peeling.

    ``index`` is in ``[0, chunks)``; ``count`` is the number of payloads in the sender's whole
    batch; ``dropped`` counts payloads of this chunk that failed to peel (not stored).
    """

    sender: str
    index: int
    chunks: int
    clients: int
    count: int
    dropped: int
    payloads: tuple[bytes, ...]


@dataclass(frozen=True)
class OutboundChunk:
    """One chunk of the node's outbound batch and whether the successor acknowledged it."""

    index: int
    payloads: tuple[bytes, ...]
    acked: bool


# --------------------------------------------------------------------------- validation


def _check_int(value: object, what: str, *, low: int = 0, high: int = _MAX_ID) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[low, high)``.

    Raises ``TypeError`` for a non-int and ``ValueError`` when out of range.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value < high:
        raise ValueError(f"{what} must be in [{low}, {high}), got {value}")
    return value


def _check_id(value: object, what: str = "round_id") -> int:
    """Return ``value`` if it is a valid id: an int in ``[0, 2**63)``."""
    return _check_int(value, what)


def _check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a non-empty str without NUL that encodes as UTF-8."""
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


def _check_secret_key(value: object) -> bytes | None:
    """Return ``value`` if it is ``None`` or :data:`SECRET_KEY_LENGTH` bytes."""
    if value is None:
        return None
    if not isinstance(value, bytes):
        raise TypeError(f"secret_key must be bytes or None, not {type(value).__name__}")
    if len(value) != SECRET_KEY_LENGTH:
        raise ValueError(f"secret_key must be {SECRET_KEY_LENGTH} bytes, got {len(value)}")
    return value


def _check_sequence(value: object, what: str) -> None:
    """Raise ``TypeError`` unless ``value`` is a sequence other than a str or bytes-like."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes | bytearray | memoryview):
        raise TypeError(f"{what} must be a sequence, not {type(value).__name__}")


def _pack(payloads: Sequence[bytes], what: str = "payloads") -> tuple[bytes, int, int]:
    """Return ``(blob, item_length, item_count)`` for a sequence of equal-length bytes.

    An empty sequence packs to ``(b"", 0, 0)``. Raises ``TypeError`` if ``payloads`` is not a
    sequence (other than str or bytes-like) of ``bytes``, ``ValueError`` if the lengths differ.
    """
    _check_sequence(payloads, what)
    if not all(isinstance(item, bytes) for item in payloads):
        raise TypeError(f"every item of {what} must be bytes")
    if not payloads:
        return b"", 0, 0
    item_length = len(payloads[0])
    if any(len(item) != item_length for item in payloads):
        raise ValueError(f"all items of {what} must have the same length")
    return b"".join(payloads), item_length, len(payloads)


def _unpack(blob: object, item_length: object, item_count: object) -> tuple[bytes, ...]:
    """Split a stored blob into ``item_count`` items of ``item_length`` bytes.

    Raises :class:`StoreError` if the row is inconsistent (wrong types, negative numbers, or
    ``len(blob) != item_length * item_count``).
    """
    if not (
        isinstance(blob, bytes)
        and isinstance(item_length, int)
        and isinstance(item_count, int)
        and item_length >= 0
        and item_count >= 0
        and len(blob) == item_length * item_count
    ):
        raise StoreError("stored payload list is corrupt (blob length does not match)")
    if item_length == 0:
        return (b"",) * item_count
    return tuple(blob[i : i + item_length] for i in range(0, len(blob), item_length))


def _fsync_directory(directory: Path) -> None:
    """Make a newly created file's directory entry durable (best effort, POSIX only)."""
    with suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- the store


class NodeStore:
    """The durable state of one node, in one sqlite database file.

    Every write method is one transaction: when it returns, its data is committed and
    ``fsync``-ed; when it raises, nothing of it is stored (except for :meth:`erase_round_key`
    and :meth:`drop_intake`, which commit before their checkpoint: if the checkpoint fails,
    they raise with the change already committed). Read methods return immutable
    records and fresh lists. See the module docstring for the threading rule (one thread at a
    time, no concurrent use) and the error contract.

    Erasure: the connection runs with ``secure_delete=ON``, so content SQLite deletes or
    overwrites (an erased key, dropped intake) is zeroed in the database pages. In WAL mode
    older page images remain in the ``-wal`` file until a checkpoint copies and the WAL is
    reset; :meth:`erase_round_key` and :meth:`drop_intake` therefore run a
    ``wal_checkpoint(TRUNCATE)`` at once. None of this reaches copies outside SQLite's files
    (OS page cache, swap, filesystem journal, flash blocks remapped by the disk, backups, or
    Python ``bytes`` objects still referenced in memory).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open (creating if needed) the database at ``path`` and its schema.

        The containing directory must already exist. Raises :class:`StoreError` if it does
        not, if the file is not a database this module can read, if its schema version is
        not :data:`SCHEMA_VERSION` (for instance a newer one), or if WAL mode cannot be set.
        Raises ``TypeError`` if ``path`` is not a str or path-like.
        """
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"path must be a str or path-like, not {type(path).__name__}")
        file = Path(path)
        if not file.parent.is_dir():
            raise StoreError(f"directory of the store does not exist: {file.parent}")
        created = not file.exists()
        try:
            conn = sqlite3.connect(
                file, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {file}: {exc}") from None
        self._conn: sqlite3.Connection | None = conn
        try:
            self._configure(conn)
            self._create_schema()
        except BaseException:
            self.close()
            raise
        if created:
            _fsync_directory(file.parent)

    @staticmethod
    def _configure(conn: sqlite3.Connection) -> None:
        """Set the connection's pragmas; raises :class:`StoreError` if the file is unusable."""
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA secure_delete=ON")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot use the store's database file: {exc}") from None
        if mode is None or str(mode[0]).lower() != "wal":
            raise StoreError("the store's database cannot be put in WAL mode")

    def _create_schema(self) -> None:
        """Create the tables of a new database, or check the version of an existing one.

        Raises :class:`StoreError` if an existing database has no or another schema version.
        """
        with self._transaction() as conn:
            has_meta = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
            ).fetchone()
            if has_meta is not None:
                row = conn.execute(
                    "SELECT value FROM meta WHERE key = ?", (_SCHEMA_VERSION_KEY,)
                ).fetchone()
                if row is None or row[0] != str(SCHEMA_VERSION):
                    found = "none" if row is None else str(row[0])[:20]
                    raise StoreError(
                        f"store has schema version {found}; this program reads only "
                        f"version {SCHEMA_VERSION}"
                    )
                return
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                (_SCHEMA_VERSION_KEY, str(SCHEMA_VERSION)),
            )

    # ----------------------------------------------------------------------- plumbing

    def _connection(self) -> sqlite3.Connection:
        """Return the open connection; raises :class:`StoreError` after :meth:`close`."""
        if self._conn is None:
            raise StoreError("store is closed")
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """Run the block in one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction.

        On any exception the transaction is rolled back and the exception re-raised, with
        ``sqlite3.Error`` turned into :class:`StoreError`.
        """
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"database error: {exc}") from None

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        """Run a read-only statement and return all rows; ``sqlite3.Error`` → StoreError."""
        conn = self._connection()
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"database error: {exc}") from None

    def _checkpoint(self) -> None:
        """Copy the WAL into the database file and truncate the WAL to zero bytes.

        Best effort: if another connection is reading, the WAL cannot be fully reset and is
        left as it is (no error).
        """
        conn = self._connection()
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"database error: {exc}") from None

    def _require_round(self, conn: sqlite3.Connection, round_id: int) -> None:
        """Raise :class:`StoreError` unless round ``round_id`` exists."""
        if conn.execute("SELECT 1 FROM rounds WHERE round_id = ?", (round_id,)).fetchone() is None:
            raise StoreError(f"round {round_id} does not exist")

    def close(self) -> None:
        """Close the database (checkpointing the WAL). Idempotent; later calls raise StoreError."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error as exc:
                raise StoreError(f"database error on close: {exc}") from None

    def __enter__(self) -> NodeStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # ----------------------------------------------------------------------- meta

    def get_meta(self, key: str) -> str | None:
        """Return the value stored under ``key``, or ``None``."""
        _check_name(key, "key")
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return None if not rows else str(rows[0][0])

    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``, replacing any previous value.

        Raises ``ValueError`` for the reserved key ``"schema_version"``.
        """
        _check_name(key, "key")
        if key == _SCHEMA_VERSION_KEY:
            raise ValueError(f"meta key {key!r} is reserved")
        if not isinstance(value, str):
            raise TypeError(f"value must be a str, not {type(value).__name__}")
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    # ----------------------------------------------------------------------- rounds

    def put_round(
        self,
        round_id: int,
        *,
        status: str,
        opened_at: float,
        deadline: float | None,
        secret_key: bytes | None,
    ) -> None:
        """Insert a new round (``clients`` unknown). Raises :class:`StoreError` if it exists.

        ``opened_at`` and ``deadline`` are unix seconds; ``secret_key`` is 32 bytes or None.
        """
        _check_id(round_id)
        _check_name(status, "status")
        opened = _check_time(opened_at, "opened_at")
        due = None if deadline is None else _check_time(deadline, "deadline")
        key = _check_secret_key(secret_key)
        with self._transaction() as conn:
            try:
                conn.execute(
                    "INSERT INTO rounds (round_id, status, opened_at, deadline, secret_key)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (round_id, status, opened, due, key),
                )
            except sqlite3.IntegrityError:
                raise StoreError(f"round {round_id} already exists") from None

    def update_round(
        self,
        round_id: int,
        *,
        status: str | None = None,
        clients: int | None = None,
        deadline: float | None = None,
    ) -> None:
        """Set the given fields of a round; ``None`` means "leave unchanged".

        (So a deadline cannot be reset to ``None``.) Raises :class:`StoreError` if the round
        does not exist, even when no field is given.
        """
        _check_id(round_id)
        changes: dict[str, object] = {}
        if status is not None:
            changes["status"] = _check_name(status, "status")
        if clients is not None:
            changes["clients"] = _check_int(clients, "clients")
        if deadline is not None:
            changes["deadline"] = _check_time(deadline, "deadline")
        with self._transaction() as conn:
            self._require_round(conn, round_id)
            if changes:
                # Column names come from the fixed keys above, never from the caller.
                assignments = ", ".join(f"{column} = ?" for column in changes)
                conn.execute(
                    f"UPDATE rounds SET {assignments} WHERE round_id = ?",  # noqa: S608
                    (*changes.values(), round_id),
                )

    def erase_round_key(self, round_id: int) -> None:
        """Erase the round's secret key (set it to NULL) and checkpoint the WAL.

        The row is rewritten with ``secure_delete=ON`` (the old bytes are zeroed in the page),
        then ``wal_checkpoint(TRUNCATE)`` copies the page into the database file and empties
        the WAL, which held older images of the page. See :class:`NodeStore` for what this
        does not reach. Idempotent; raises :class:`StoreError` if the round does not exist.
        """
        _check_id(round_id)
        with self._transaction() as conn:
            self._require_round(conn, round_id)
            conn.execute("UPDATE rounds SET secret_key = NULL WHERE round_id = ?", (round_id,))
        self._checkpoint()

    def get_round(self, round_id: int) -> RoundRecord | None:
        """Return round ``round_id``, or ``None`` if it was never stored."""
        _check_id(round_id)
        rows = self._query(f"{_ROUND_SELECT} WHERE round_id = ?", (round_id,))
        return _round_record(rows[0]) if rows else None

    def rounds(self, *, status: str | None = None) -> list[RoundRecord]:
        """Return all rounds, or those with ``status``, ordered by round id."""
        if status is None:
            rows = self._query(f"{_ROUND_SELECT} ORDER BY round_id")
        else:
            _check_name(status, "status")
            rows = self._query(f"{_ROUND_SELECT} WHERE status = ? ORDER BY round_id", (status,))
        return [_round_record(row) for row in rows]

    def last_round_id(self) -> int | None:
        """Return the largest stored round id, or ``None`` if there is no round."""
        rows = self._query("SELECT MAX(round_id) FROM rounds")
        value = rows[0][0]
        return None if value is None else _stored_int(value)

    # ----------------------------------------------------------------------- entry-mix intake

    def add_submissions(self, round_id: int, items: Sequence[Submission]) -> None:
        """Store all ``items`` in round ``round_id`` in one transaction (all or nothing).

        Raises :class:`StoreError`, storing nothing, if the round does not exist or any
        client already has a submission in it (including twice within ``items``). Raises
        ``TypeError``/``ValueError`` for a malformed item.
        """
        _check_id(round_id)
        _check_sequence(items, "items")
        rows: list[tuple[object, ...]] = []
        for item in items:
            if not isinstance(item, Submission):
                raise TypeError(f"items must be Submission, not {type(item).__name__}")
            _check_name(item.client, "client")
            if not isinstance(item.digest, bytes):
                raise TypeError("digest must be bytes")
            blob, length, count = _pack(item.payloads)
            rows.append((round_id, item.client, item.digest, length, count, blob))
        with self._transaction() as conn:
            self._require_round(conn, round_id)
            try:
                conn.executemany(
                    "INSERT INTO submissions"
                    " (round_id, client, digest, item_length, item_count, payloads)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    rows,
                )
            except sqlite3.IntegrityError:
                raise StoreError(f"a client already has a submission in round {round_id}") from None

    def get_submission(self, round_id: int, client: str) -> Submission | None:
        """Return ``client``'s submission in round ``round_id``, or ``None``."""
        _check_id(round_id)
        _check_name(client, "client")
        rows = self._query(
            f"{_SUBMISSION_SELECT} WHERE round_id = ? AND client = ?", (round_id, client)
        )
        return _submission(rows[0]) if rows else None

    def submissions(self, round_id: int) -> list[Submission]:
        """Return the submissions of round ``round_id`` in the order they were stored."""
        _check_id(round_id)
        rows = self._query(f"{_SUBMISSION_SELECT} WHERE round_id = ? ORDER BY id", (round_id,))
        return [_submission(row) for row in rows]

    def submission_count(self, round_id: int) -> int:
        """Return how many submissions round ``round_id`` holds (0 for an unknown round)."""
        _check_id(round_id)
        rows = self._query("SELECT COUNT(*) FROM submissions WHERE round_id = ?", (round_id,))
        return _stored_int(rows[0][0])

    # ----------------------------------------------------------------------- chunk intake

    def add_chunk(self, round_id: int, chunk: Chunk) -> bool:
        """Store a received chunk; return ``False`` if ``(round, sender, index)`` is stored.

        A repeated chunk is an idempotent retry: the stored one is kept unchanged, whatever
        the new one holds. The store does not check that ``chunks``, ``clients`` and ``count``
        agree across a sender's chunks; that is the caller's protocol check. Raises
        :class:`StoreError` if the round does not exist, ``TypeError``/``ValueError`` for a
        malformed chunk (e.g. ``index`` not in ``[0, chunks)``).
        """
        _check_id(round_id)
        if not isinstance(chunk, Chunk):
            raise TypeError(f"chunk must be a Chunk, not {type(chunk).__name__}")
        _check_name(chunk.sender, "sender")
        _check_int(chunk.chunks, "chunks", low=1)
        _check_int(chunk.index, "index", high=chunk.chunks)
        _check_int(chunk.clients, "clients")
        _check_int(chunk.count, "count")
        _check_int(chunk.dropped, "dropped")
        blob, length, count = _pack(chunk.payloads)
        with self._transaction() as conn:
            self._require_round(conn, round_id)
            cursor = conn.execute(
                "INSERT INTO chunks (round_id, sender, idx, chunks, clients, count, dropped,"
                " item_length, item_count, payloads) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (round_id, sender, idx) DO NOTHING",
                (
                    round_id,
                    chunk.sender,
                    chunk.index,
                    chunk.chunks,
                    chunk.clients,
                    chunk.count,
                    chunk.dropped,
                    length,
                    count,
                    blob,
                ),
            )
            return cursor.rowcount == 1

    def chunks(self, round_id: int) -> list[Chunk]:
        """Return the chunks of round ``round_id`` ordered by ``(sender, index)``.

        Senders are ordered by code point (SQLite compares their UTF-8 bytes).
        """
        _check_id(round_id)
        rows = self._query(
            "SELECT sender, idx, chunks, clients, count, dropped, item_length, item_count,"
            " payloads FROM chunks WHERE round_id = ? ORDER BY sender, idx",
            (round_id,),
        )
        return [
            Chunk(
                sender=str(row[0]),
                index=_stored_int(row[1]),
                chunks=_stored_int(row[2]),
                clients=_stored_int(row[3]),
                count=_stored_int(row[4]),
                dropped=_stored_int(row[5]),
                payloads=_unpack(row[8], row[6], row[7]),
            )
            for row in rows
        ]

    def chunk_indices(self, round_id: int, sender: str) -> set[int]:
        """Return the indices of ``sender``'s chunks stored for round ``round_id``."""
        _check_id(round_id)
        _check_name(sender, "sender")
        rows = self._query(
            "SELECT idx FROM chunks WHERE round_id = ? AND sender = ?", (round_id, sender)
        )
        return {_stored_int(row[0]) for row in rows}

    # ----------------------------------------------------------------------- outbound batch

    def put_outbound(
        self, round_id: int, *, clients: int, count: int, chunks: Sequence[Sequence[bytes]]
    ) -> None:
        """Store the round's outbound batch, chunk ``i`` being ``chunks[i]``, none acked.

        ``clients`` is ``n``; ``count`` must equal the total number of payloads, and all
        payloads of the batch must have one length (else ``ValueError``). Raises
        :class:`StoreError` if the round does not exist or already has an outbound batch.
        """
        _check_id(round_id)
        _check_int(clients, "clients")
        _check_int(count, "count")
        _check_sequence(chunks, "chunks")
        rows: list[tuple[int, int, int, int, bytes]] = []
        lengths: set[int] = set()
        for index, payloads in enumerate(chunks):
            blob, length, item_count = _pack(payloads, f"chunks[{index}]")
            if item_count:
                lengths.add(length)
            rows.append((round_id, index, length, item_count, blob))
        if len(lengths) > 1:
            raise ValueError("all payloads of the outbound batch must have the same length")
        if sum(row[3] for row in rows) != count:
            raise ValueError("count must equal the number of payloads in chunks")
        with self._transaction() as conn:
            self._require_round(conn, round_id)
            try:
                conn.execute(
                    "INSERT INTO outbound (round_id, clients, count) VALUES (?, ?, ?)",
                    (round_id, clients, count),
                )
            except sqlite3.IntegrityError:
                raise StoreError(f"round {round_id} already has an outbound batch") from None
            conn.executemany(
                "INSERT INTO outbound_chunks (round_id, idx, item_length, item_count, payloads)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )

    def outbound(self, round_id: int) -> tuple[int, int, list[OutboundChunk]] | None:
        """Return ``(clients, count, chunks ordered by index)``, or ``None`` if not stored."""
        _check_id(round_id)
        conn = self._connection()
        try:
            # One read transaction, so the header and the chunks are one snapshot.
            conn.execute("BEGIN")
            try:
                head = conn.execute(
                    "SELECT clients, count FROM outbound WHERE round_id = ?", (round_id,)
                ).fetchone()
                rows = conn.execute(
                    "SELECT idx, item_length, item_count, payloads, acked FROM outbound_chunks"
                    " WHERE round_id = ? ORDER BY idx",
                    (round_id,),
                ).fetchall()
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"database error: {exc}") from None
        if head is None:
            return None
        parts = [
            OutboundChunk(
                index=_stored_int(row[0]),
                payloads=_unpack(row[3], row[1], row[2]),
                acked=bool(row[4]),
            )
            for row in rows
        ]
        return _stored_int(head[0]), _stored_int(head[1]), parts

    def ack_outbound(self, round_id: int, index: int) -> None:
        """Mark outbound chunk ``index`` of the round acknowledged (idempotent).

        Raises :class:`StoreError` if there is no such outbound chunk (for instance after
        :meth:`drop_outbound`).
        """
        _check_id(round_id)
        _check_id(index, "index")
        with self._transaction() as conn:
            cursor = conn.execute(
                "UPDATE outbound_chunks SET acked = 1 WHERE round_id = ? AND idx = ?",
                (round_id, index),
            )
            if cursor.rowcount != 1:
                raise StoreError(f"round {round_id} has no outbound chunk {index}")

    # ----------------------------------------------------------------------- cleanup

    def drop_intake(self, round_id: int) -> None:
        """Delete the round's submissions and chunks, then checkpoint the WAL.

        Call it once the outbound batch is stored (:meth:`put_outbound`). The deleted rows
        link clients to peeled payloads, so they are zeroed like an erased key (see
        :class:`NodeStore`). Idempotent; an unknown round is not an error.
        """
        _check_id(round_id)
        with self._transaction() as conn:
            conn.execute("DELETE FROM submissions WHERE round_id = ?", (round_id,))
            conn.execute("DELETE FROM chunks WHERE round_id = ?", (round_id,))
        self._checkpoint()

    def drop_outbound(self, round_id: int) -> None:
        """Delete the round's outbound batch (once every chunk is acked). Idempotent."""
        _check_id(round_id)
        with self._transaction() as conn:
            conn.execute("DELETE FROM outbound_chunks WHERE round_id = ?", (round_id,))
            conn.execute("DELETE FROM outbound WHERE round_id = ?", (round_id,))

    # ----------------------------------------------------------------------- results

    def put_result(self, round_id: int, result: Mapping[str, object]) -> None:
        """Store the analyzer's result for the round as JSON, replacing any earlier one.

        Raises ``TypeError`` if ``result`` is not a mapping with str keys or holds values
        JSON cannot encode, ``ValueError`` for NaN or infinite floats, and
        :class:`StoreError` if the round does not exist.
        """
        _check_id(round_id)
        if not isinstance(result, Mapping):
            raise TypeError(f"result must be a mapping, not {type(result).__name__}")
        if not all(isinstance(key, str) for key in result):
            raise TypeError("result keys must be str")
        text = json.dumps(dict(result), allow_nan=False, separators=(",", ":"))
        with self._transaction() as conn:
            self._require_round(conn, round_id)
            conn.execute(
                "INSERT INTO results (round_id, result) VALUES (?, ?)"
                " ON CONFLICT (round_id) DO UPDATE SET result = excluded.result",
                (round_id, text),
            )

    def get_result(self, round_id: int) -> dict[str, object] | None:
        """Return the round's stored result, or ``None``; StoreError if it is not valid JSON."""
        _check_id(round_id)
        rows = self._query("SELECT result FROM results WHERE round_id = ?", (round_id,))
        if not rows:
            return None
        try:
            value = json.loads(str(rows[0][0]))
        except ValueError:
            raise StoreError(f"stored result of round {round_id} is not valid JSON") from None
        if not isinstance(value, dict):
            raise StoreError(f"stored result of round {round_id} is not a JSON object")
        return value


# --------------------------------------------------------------------------- row decoding

_ROUND_SELECT = "SELECT round_id, status, opened_at, deadline, clients, secret_key FROM rounds"
_SUBMISSION_SELECT = "SELECT client, digest, item_length, item_count, payloads FROM submissions"


def _stored_int(value: object) -> int:
    """Return a stored integer column; raises :class:`StoreError` if it is not an int."""
    if not isinstance(value, int):
        raise StoreError("stored row is corrupt (integer expected)")
    return value


def _round_record(row: tuple[object, ...]) -> RoundRecord:
    """Build a :class:`RoundRecord` from a ``_ROUND_SELECT`` row (StoreError if corrupt)."""
    round_id, status, opened_at, deadline, clients, secret_key = row
    if not (
        isinstance(status, str)
        and isinstance(opened_at, float)
        and (deadline is None or isinstance(deadline, float))
        and (secret_key is None or isinstance(secret_key, bytes))
    ):
        raise StoreError("stored round is corrupt")
    return RoundRecord(
        round_id=_stored_int(round_id),
        status=status,
        opened_at=opened_at,
        deadline=deadline,
        clients=None if clients is None else _stored_int(clients),
        secret_key=secret_key,
    )


def _submission(row: tuple[object, ...]) -> Submission:
    """Build a :class:`Submission` from a ``_SUBMISSION_SELECT`` row (StoreError if corrupt)."""
    client, digest, item_length, item_count, blob = row
    if not (isinstance(client, str) and isinstance(digest, bytes)):
        raise StoreError("stored submission is corrupt")
    return Submission(client=client, digest=digest, payloads=_unpack(blob, item_length, item_count))
