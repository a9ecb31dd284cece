"""The durable state of one mix node or sink node: one sqlite database file per node.

The round machines (:mod:`mixnet.core`) never touch the store: they emit
:class:`~mixnet.core.actions.Persist` actions whose writes (:mod:`mixnet.core.records`) the
node's writer hands to :meth:`NodeStore.apply`, and after a restart they are rebuilt from
:meth:`NodeStore.records` alone. The in-memory ``MemoryStore`` of the test harness
(``tests/mixnet/chain_harness.py``) models the same semantics; a property test checks that the
two agree.

Durability: :meth:`NodeStore.apply` is one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction on
a database in WAL mode with ``synchronous=FULL``, so once it returns, every group it reports
committed survives the process being killed at any moment (and, as far as the OS and disk
honour ``fsync``, a power loss). A node acknowledges a submission or a batch chunk only after
that. Group commit: the writer hands everything queued to one call; each group of writes (one
``Persist``) runs in its own ``SAVEPOINT``, so a group the database refuses (a missing round,
an outbound batch stored twice) is rolled back alone while the others commit.

Fail-stop: a ``COMMIT`` that reports an error leaves its outcome unknown (SQLite may have
written the WAL's commit frame before an ``fsync`` failed, and then replays it on the next
open). Carrying on would let the round machine's memory and the disk disagree, so the store
raises :class:`StoreFailed` and refuses every later call; the node stops, and its restart
recovers from what the disk holds. This is also why the store does not refuse a second
submission of one client itself: the entry machine refuses it, from a memory that always
equals the disk, and the store keeps no index that costs a random page per submission.

What is kept, per round (ids are ints in ``[0, 2**63)``): the round (status, times, ``n``,
the X25519 secret key until erased, the signed round-key announcements); the intake
(submissions at the entry mix, batch chunks downstream); the entry mix's receipts (client →
32-byte submission digest; read back as a compact table per round,
:func:`~mixnet.store_decode.receipts_from_rows`); the outbound batch with per-chunk
acknowledgements — at a mix before the last only as the 32-byte seed of its permutation and
each chunk's size, from which a restarted mix derives the chunks again out of the intake
(:mod:`mixnet.core.outbound`); the sink's
result as JSON. A payload list is one blob (equal-length items concatenated) with its item
length and count, so a round of 500,000 payloads costs one row per list, not one per payload.

Files: the database is created with mode 0600 whatever the umask, and its ``-wal`` and
``-shm`` files are set to 0600 when the store opens (SQLite gives files it creates later the
database's mode).

Threading: a :class:`NodeStore` is used by one thread at a time (the node's writer thread).
It may be constructed in one thread and used in another, but never from two threads at once;
it does no locking of its own. Every method blocks on disk I/O.

Errors: :class:`StoreError` for anything the database refuses or cannot do (a duplicate or
missing row, an unreadable, foreign or differently versioned database, a corrupt row, an I/O
error, use after :meth:`NodeStore.close`), and its subclass :class:`StoreFailed` for a failed
``COMMIT`` and everything after it (see above); ``TypeError``/``ValueError`` for values a
correct caller never passes (a negative id, a secret key of the wrong length, payloads of unequal
length, a result JSON cannot hold, NaN, ...).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType

from mixnet.core.records import (
    Chunk,
    DerivedOutbound,
    NodeRecords,
    OutboundBatch,
    RoundRecord,
    Submission,
    Write,
)
from mixnet.core.status import RoundStatus
from mixnet.errors import MixnetError
from mixnet.private_files import (
    create_private,
    fsync_directory,
    restrict_side_files,
)
from mixnet.store_apply import apply_group, apply_merged
from mixnet.store_decode import (
    CorruptRow,
    chunk_from_row,
    outbound_from_rows,
    receipts_from_rows,
    result_from_text,
    round_from_row,
    stored_int,
    submission_from_row,
)
from mixnet.store_rows import (
    ERASING,
    SCHEMA,
    SECRET_KEY_LENGTH,
    Statement,
    check_int,
    check_name,
    check_sequence,
    group_statements,
)

__all__ = [
    "BUSY_TIMEOUT",
    "SCHEMA_VERSION",
    "SECRET_KEY_LENGTH",
    "NodeStore",
    "StoreError",
    "StoreFailed",
]

#: Version of the schema this module writes; a database with another version is refused.
SCHEMA_VERSION = 8


#: The query of every stored chunk (``chunk_from_row`` takes each row after its round id).
_CHUNKS = (
    "SELECT round_id, sender, idx, chunks, clients, count, dropped, item_length, item_count,"
    " payloads, digests, inputs, input_length, excluded, signature, received FROM chunks"
)
#: :data:`_CHUNKS` with empty ``inputs``, ``signature`` and ``received`` (not read at all).
_CHUNKS_WITHOUT_INPUTS = (
    "SELECT round_id, sender, idx, chunks, clients, count, dropped, item_length, item_count,"
    " payloads, digests, x'', input_length, excluded, x'', x'' FROM chunks"
)
#: Seconds a write waits for a lock held by another connection before failing.
BUSY_TIMEOUT = 10.0

_SCHEMA_VERSION_KEY = "schema_version"


class StoreError(MixnetError):
    """The node's database refused or failed an operation, or holds data it cannot read."""

    code = "store-error"


class StoreFailed(StoreError):
    """A ``COMMIT`` failed, so whether its writes are on disk is unknown; the store refuses
    every later call (module docstring, "Fail-stop"). Open the file again — restart the node
    — to go on from what the disk holds."""


class NodeStore:
    """The durable state of one node, in one sqlite database file.

    Writes go through :meth:`apply` only (see its contract); reads return immutable records
    and fresh containers, each read one snapshot. ``path`` is the database file. See the
    module docstring for the threading rule and the error contract.

    Erasure: the connection runs with ``secure_delete=ON``, so content SQLite deletes or
    overwrites (an erased key, dropped intake, forgotten receipts) is zeroed in the database
    pages. The one exception is a *delivered* outbound batch
    (``DropOutbound(delivered=True)``: every chunk acknowledged by the successor): it holds
    only this mix's outputs, which the successor has, while what links them to the mix's
    inputs is in the intake, zeroed when dropped; its bytes may stay in free pages, which
    saves writing zeros over the whole batch (about 120 MB at the entry mix at 10⁵ users).
    A batch's row with its permutation seed, which links the outputs to the inputs as the
    intake does, is zeroed whenever it is dropped, and its older page images leave the
    ``-wal`` file with the intake's, at the checkpoint after the intake is dropped (which is
    later: the intake stays until the round's trace is done).
    In WAL mode older page images stay in the ``-wal`` file until a checkpoint copies
    them and the WAL is reset, so :meth:`apply` runs ``wal_checkpoint(TRUNCATE)`` after
    committing an erasing write (``EraseKey``, ``DropIntake``, ``ForgetReceipts``). None of
    this reaches copies outside SQLite's files (OS page
    cache, swap, filesystem journal, flash blocks remapped by the disk, backups, or Python
    ``bytes`` objects still referenced in memory).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open (creating if needed, mode 0600) the database at ``path`` and its schema.

        The containing directory must already exist.

        :raises StoreError: the directory does not exist; the file cannot be created or
            opened, is not a database, holds tables of something else, has no schema version
            or another one than :data:`SCHEMA_VERSION` (an older or newer program wrote it),
            or cannot be put in WAL mode.
        :raises TypeError: ``path`` is not a str or path-like.
        """
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"path must be a str or path-like, not {type(path).__name__}")
        file = Path(path)
        if not file.parent.is_dir():
            raise StoreError(f"directory of the store does not exist: {file.parent}")
        self.path = file
        try:
            created = create_private(file)
        except OSError as exc:
            raise StoreError(f"cannot create store {file} (mode 0600): {exc.strerror}") from None
        try:
            conn = sqlite3.connect(
                file, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {file}: {exc}") from None
        self._conn: sqlite3.Connection | None = conn
        self._checkpoint_due = False
        self._failed: str | None = None  # why the store refuses everything (fail-stop)
        try:
            self._configure(conn)
            self._create_schema(conn)
            self._restrict_side_files()
        except BaseException:
            self.close()
            raise
        if created:
            fsync_directory(file.parent)

    def _configure(self, conn: sqlite3.Connection) -> None:
        """Set the connection's pragmas. :raises StoreError: the file is unusable."""
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA secure_delete=ON")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot use store {self.path}: {exc}") from None
        if mode is None or str(mode[0]).lower() != "wal":
            raise StoreError(f"store {self.path} cannot be put in WAL mode")

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        """Create the tables of a new database, or check the version of an existing one.

        :raises StoreError: foreign tables, or no or another schema version.
        """
        with self._transaction():
            tables = {
                str(row[0])
                for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
            if "meta" not in tables:
                if tables:
                    raise StoreError(f"{self.path} is not a node store (unknown tables)")
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    (_SCHEMA_VERSION_KEY, str(SCHEMA_VERSION)),
                )
                return
            row = conn.execute(
                "SELECT value FROM meta WHERE key = ?", (_SCHEMA_VERSION_KEY,)
            ).fetchone()
        found = None if row is None else str(row[0])
        if found == str(SCHEMA_VERSION):
            return
        if found is None or not found.isdigit():
            raise StoreError(f"store {self.path} has no readable schema version")
        age = "an older" if int(found) < SCHEMA_VERSION else "a newer"
        raise StoreError(
            f"store {self.path} was written by {age} version of this program (schema version"
            f" {found}, this one reads only {SCHEMA_VERSION}); move it aside to start afresh"
        )

    def _restrict_side_files(self) -> None:
        """Set the ``-wal`` and ``-shm`` files to mode 0600. :raises StoreError: cannot."""
        try:
            restrict_side_files(self.path)
        except OSError as exc:
            raise StoreError(
                f"cannot restrict the mode of {exc.filename}: {exc.strerror}"
            ) from None

    # ----------------------------------------------------------------------- writes

    def apply(self, groups: Sequence[Sequence[Write]]) -> list[StoreError | None]:
        """Apply each group of writes atomically, all groups in one transaction.

        Returns one entry per group, in order: ``None`` if the group committed, else the
        :class:`StoreError` that refused it (nothing of that group is stored). Each group runs
        in a ``SAVEPOINT``: one the database refuses is rolled back alone and the others
        still commit. Refusals: ``NewRound`` of an existing round; ``SetRound``, ``EraseKey``,
        ``AddSubmission``, ``AddChunk``, ``PutOutbound`` or ``PutResult`` of a missing round;
        ``PutOutbound`` when the round has an outbound batch; ``AckOutbound`` of a missing
        outbound chunk. ``AddChunk`` of a stored ``(round, sender, index)`` keeps the stored
        chunk; the ``Drop*``/``ForgetReceipts`` writes of nothing are no-ops.
        Groups of the same plain inserts (one submission each, the entry mix's common case)
        run as one ``executemany`` per statement, falling back to group by group when the
        database refuses any row, with the same results.

        A second ``AddSubmission`` of one client in one round is stored like the first: the
        entry machine never asks for one (module docstring, "Fail-stop").

        If the transaction fails before ``COMMIT`` (the database is locked or read-only, an
        I/O error), nothing is stored and every entry is a ``StoreError``. After the commit,
        if a committed group held an ``EraseKey``, ``DropIntake`` or ``ForgetReceipts``, the
        WAL is checkpointed (``TRUNCATE``); a checkpoint that fails or is blocked by a reader
        does not fail the call (the groups are committed) and is retried after every later
        commit and on :meth:`close`.

        :raises TypeError, ValueError: a malformed write (checked before the transaction
            starts, so nothing is stored; see :mod:`mixnet.store_rows`).
        :raises StoreFailed: ``COMMIT`` failed (whether the groups are stored is unknown), or
            an earlier one did; every later call raises it too.
        :raises StoreError: the store is closed.
        """
        check_sequence(groups, "groups")
        prepared: list[tuple[list[Statement], bool]] = []
        for group in groups:
            check_sequence(group, "group")
            stmts = group_statements(group)
            prepared.append((stmts, any(isinstance(write, ERASING) for write in group)))
        conn = self._connection()
        if not prepared:
            return []
        try:
            conn.execute("BEGIN IMMEDIATE")
            if apply_merged(conn, [stmts for stmts, _ in prepared]):
                results: list[StoreError | None] = [None] * len(prepared)
            else:
                refusals = [apply_group(conn, stmts) for stmts, _ in prepared]
                results = [None if r is None else StoreError(r) for r in refusals]
        except sqlite3.Error as exc:
            self._rollback(conn)
            return [StoreError(f"store {self.path}: nothing stored: {exc}") for _ in prepared]
        except BaseException:
            self._rollback(conn)
            raise
        self._commit(conn)
        erased = any(
            erasing and result is None
            for (_, erasing), result in zip(prepared, results, strict=True)
        )
        if erased or self._checkpoint_due:
            self._checkpoint(conn)
        return results

    def _commit(self, conn: sqlite3.Connection) -> None:
        """``COMMIT`` the open transaction. :raises StoreFailed: it failed: the store now
        refuses everything (module docstring, "Fail-stop")."""
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._failed = (
                f"store {self.path}: a commit failed ({exc}), so what it wrote may or may not"
                " be on disk; it refuses everything until it is opened again (restart the"
                " node to recover from the disk)"
            )
            self._rollback(conn)
            raise StoreFailed(self._failed) from None

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL into the database file and truncate it (best effort, see apply)."""
        try:
            row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error:
            self._checkpoint_due = True
            return
        self._checkpoint_due = row is None or row[0] != 0

    # ----------------------------------------------------------------------- reads

    def records(self, *, inputs: bool = True) -> NodeRecords:
        """Return everything stored, as recovery reads it (one snapshot).

        Rounds are ordered by id; submissions (only of rounds that have some) in the order
        they were stored; chunks by ``(sender, index)`` (senders by code point); outbound
        chunks by index. With ``inputs=False`` the chunks come without their ``inputs``,
        ``received`` and ``signature`` (a relay's recovery does not hold them: its trace
        reads them back with :meth:`chunks`), so a restart costs no memory for them.
        :raises StoreError: a corrupt row, a database error, or closed.
        """
        with self._reading() as conn:
            rounds = tuple(_rounds(conn))
            submissions: dict[int, list[Submission]] = {}
            for r, *rest in conn.execute(
                "SELECT round_id, client, digest, item_length, item_count, payloads"
                " FROM submissions ORDER BY round_id, id"
            ):
                submissions.setdefault(stored_int(r), []).append(submission_from_row(tuple(rest)))
            receipts = receipts_from_rows(
                conn.execute(
                    "SELECT round_id, client, digest FROM receipts ORDER BY round_id, rowid"
                ),
                {rec.round_id for rec in rounds if rec.status is RoundStatus.OPEN},
            )
            chunks: dict[int, list[Chunk]] = {}
            query = _CHUNKS if inputs else _CHUNKS_WITHOUT_INPUTS
            for r, *rest in conn.execute(query + " ORDER BY round_id, sender, idx"):
                chunks.setdefault(stored_int(r), []).append(chunk_from_row(tuple(rest)))
            outbound = self._outbound(conn)
            results = {
                stored_int(r): result_from_text(text)
                for r, text in conn.execute("SELECT round_id, result FROM results")
            }
        return NodeRecords(
            rounds=rounds,
            submissions={r: tuple(items) for r, items in submissions.items()},
            receipts=receipts,
            chunks={r: tuple(items) for r, items in chunks.items()},
            outbound=outbound,
            results=results,
        )

    def chunks(self, round_id: int) -> tuple[Chunk, ...]:
        """Round ``round_id``'s stored chunks, by sender and index (none if it has none):
        what :meth:`records` holds for it, read alone (a relay's intake for its trace).

        :raises StoreError: the store is unreadable or corrupt (see :meth:`records`).
        """
        with self._reading() as conn:
            return tuple(
                chunk_from_row(tuple(rest))
                for _, *rest in conn.execute(
                    _CHUNKS + " WHERE round_id = ? ORDER BY sender, idx", (round_id,)
                )
            )

    @staticmethod
    def _outbound(conn: sqlite3.Connection) -> dict[int, OutboundBatch | DerivedOutbound]:
        """Read every outbound batch: whole, or as its seed (a :class:`DerivedOutbound`).

        :raises CorruptRow, sqlite3.Error."""
        return outbound_from_rows(
            conn.execute(
                "SELECT round_id, clients, count, excluded, seed FROM outbound ORDER BY round_id"
            ),
            conn.execute(
                "SELECT round_id, idx, item_length, item_count, payloads, acked"
                " FROM outbound_chunks ORDER BY round_id, idx"
            ),
        )

    def round(self, round_id: int) -> RoundRecord | None:
        """Return round ``round_id``, or ``None`` if it was never stored.

        :raises TypeError, ValueError: not an id. :raises StoreError: corrupt row, closed.
        """
        check_int(round_id, "round_id")
        with self._reading() as conn:
            found = _rounds(conn, round_id=round_id)
        return found[0] if found else None

    def rounds(self, *, limit: int | None = None) -> list[RoundRecord]:
        """Return the rounds ordered by id: all, or the last ``limit`` ones (highest ids).

        :raises TypeError, ValueError: ``limit`` is not a non-negative int.
        :raises StoreError: a corrupt row, closed.
        """
        last = -1 if limit is None else check_int(limit, "limit")
        with self._reading() as conn:
            return _rounds(conn, limit=last)

    def result(self, round_id: int) -> dict[str, object] | None:
        """Return the round's stored result (a JSON object), or ``None``.

        :raises TypeError, ValueError: not an id. :raises StoreError: corrupt row, closed.
        """
        check_int(round_id, "round_id")
        with self._reading() as conn:
            row = conn.execute(
                "SELECT result FROM results WHERE round_id = ?", (round_id,)
            ).fetchone()
            return None if row is None else result_from_text(row[0])

    # ----------------------------------------------------------------------- meta

    def get_meta(self, key: str) -> str | None:
        """Return the value stored under ``key``, or ``None``.

        :raises TypeError, ValueError: ``key`` is not a non-empty str. :raises StoreError.
        """
        check_name(key, "key")
        with self._reading() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key`` (one transaction), replacing any previous value.

        :raises ValueError: the reserved key ``"schema_version"``, or an empty key.
        :raises TypeError: ``key`` or ``value`` is not a str. :raises StoreError.
        """
        check_name(key, "key")
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

    # ----------------------------------------------------------------------- plumbing

    def _connection(self) -> sqlite3.Connection:
        """Return the open connection. :raises StoreFailed: a commit failed (fail-stop).
        :raises StoreError: after :meth:`close`."""
        if self._conn is None:
            raise StoreError("store is closed")
        if self._failed is not None:
            raise StoreFailed(self._failed)
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """Run the block in one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction.

        On any exception the transaction is rolled back and the exception re-raised, with
        ``sqlite3.Error`` turned into :class:`StoreError`; a failed ``COMMIT`` raises
        :class:`StoreFailed` (fail-stop).
        """
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                self._rollback(conn)
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: database error: {exc}") from None
        self._commit(conn)

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """Run the block in one read transaction (one snapshot).

        ``sqlite3.Error`` and :class:`~mixnet.store_decode.CorruptRow` become StoreError.
        """
        conn = self._connection()
        try:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                self._rollback(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: database error: {exc}") from None
        except CorruptRow as exc:
            raise StoreError(f"store {self.path} is corrupt: {exc}") from None

    def limit_cache(self, kib: int) -> None:
        """Let SQLite's page cache of this connection hold at most about ``kib`` KiB
        (``PRAGMA cache_size = -kib``; the default is 2000 KiB). For a node that writes
        what it never reads back during a round (the sink's chunks), whose cache would
        otherwise fill with their pages. Like every method: never while another thread uses
        the store.

        :raises ValueError: ``kib < 1``. :raises StoreError: closed, or the pragma failed.
        """
        if isinstance(kib, bool) or not isinstance(kib, int) or kib < 1:
            raise ValueError(f"kib must be a positive int, got {kib!r}")
        try:
            self._connection().execute(f"PRAGMA cache_size = {-kib}")
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: cannot set the cache size: {exc}") from None

    def close(self) -> None:
        """Close the database (retrying a due checkpoint; SQLite then checkpoints and removes
        the WAL). Idempotent; later calls of other methods raise :class:`StoreError`.

        :raises StoreError: closing failed.
        """
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._checkpoint_due and self._failed is None:
            self._checkpoint(conn)
        try:
            conn.close()
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: error on close: {exc}") from None

    def __enter__(self) -> NodeStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _rounds(
    conn: sqlite3.Connection, *, round_id: int | None = None, limit: int = -1
) -> list[RoundRecord]:
    """Return round ``round_id`` (or all), ordered by id, only the last ``limit`` if not -1.

    :raises CorruptRow, sqlite3.Error.
    """
    rows = conn.execute(
        "SELECT round_id, status, opened_at, deadline, clients, secret_key, announcements"
        " FROM rounds WHERE ?1 IS NULL OR round_id = ?1 ORDER BY round_id DESC LIMIT ?2",
        (round_id, limit),
    ).fetchall()
    return [round_from_row(row) for row in reversed(rows)]

