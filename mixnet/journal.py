"""A client's submissions in flight, on disk: each value counted once across the client's
restarts (``docs/protocol.md``, "Exactly once from the client's side").

A client that stops between sending a submission and its receipt (killed, a power cut) cannot
tell afterwards whether the entry mix stored it. Submitting the value afresh then counts it
twice if the first copy was stored: in the same round the entry mix refuses a second box from
the same client id, but in a later round it takes it. With a :class:`SubmissionJournal`,
:meth:`mixnet.client.MixnetClient.submit` writes each ``submit`` frame to disk before it sends
it and erases it once the entry mix has answered; a submission under a client id the journal
still holds a frame for first resends that *identical* frame, whose answer says what became
of it:

* ``accepted`` — it was stored (the entry mix acknowledges an exact retry again, for
  :data:`~mixnet.core.entry_restore.RECEIPT_ROUNDS` rounds after its own): the receipt is
  returned and nothing new is sent;
* ``round-closed`` — its round is known and it is not in it (the round closed or was aborted
  without it): it was never counted, and the value is submitted afresh;
* ``unknown-round`` — the entry mix no longer knows the round (more than
  ``RECEIPT_ROUNDS`` rounds went by, or its store was replaced): nobody can tell, and
  :class:`OutcomeUnknown` says so instead of guessing; the frame stays in the journal until
  the application :meth:`~SubmissionJournal.discard`\\ s it.

The journal is a sqlite file (WAL, ``synchronous=FULL``: a frame is on disk before it is sent),
mode 0600: it holds the client's boxes, which only the chain's mixes can open, and its client
ids. One process at a time; its methods block (the client calls them off the event loop).
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from mixnet.errors import MixnetError
from mixnet.private_files import create_private, fsync_directory, restrict_side_files

__all__ = ["JournalError", "KeptSubmission", "OutcomeUnknown", "SubmissionJournal"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kept (
    client TEXT PRIMARY KEY,
    round INTEGER NOT NULL,
    box BLOB NOT NULL,
    credential BLOB,
    signature BLOB,
    token BLOB
) WITHOUT ROWID
"""


class JournalError(OSError):
    """The journal file cannot be created, opened or written (the message says which). An
    :class:`OSError`: what a command line reports as a file error."""


class OutcomeUnknown(MixnetError):
    """The entry mix no longer knows the round of a submission the journal kept, so whether it
    was counted cannot be told. Its frame stays in the journal: resubmitting risks counting
    the value twice (:meth:`SubmissionJournal.discard` first, if the application accepts
    that)."""

    code = "outcome-unknown"


@dataclass(frozen=True)
class KeptSubmission:
    """A ``submit`` frame the journal holds: ``client`` into round ``round_id`` with ``box``
    (and, on a chain with admission, ``credential``, ``signature`` and ``token``)."""

    client: str
    round_id: int
    box: bytes
    credential: bytes | None = None
    signature: bytes | None = None
    token: bytes | None = None

    def frame(self) -> dict[str, object]:
        """The ``submit`` frame, exactly as it was first sent."""
        frame: dict[str, object] = {
            "type": "submit",
            "round": self.round_id,
            "client": self.client,
            "box": self.box,
        }
        for key in ("credential", "signature", "token"):
            value = getattr(self, key)
            if value is not None:
                frame[key] = value
        return frame


class SubmissionJournal:
    """The ``submit`` frames a client sent and has no answer for yet (module docstring),
    at most one per client id: submit a value under its id once at a time (two concurrent
    submissions under one id would share, and overwrite, one kept frame).

    :raises JournalError: ``path``'s directory does not exist, or the file cannot be created
        (mode 0600) or used as a journal.
    """

    def __init__(self, path: str | Path) -> None:
        file = Path(path)
        if not file.parent.is_dir():
            raise JournalError(f"directory of the journal does not exist: {file.parent}")
        self.path = file
        try:
            created = create_private(file)
        except OSError as exc:
            raise JournalError(
                f"cannot create journal {file} (mode 0600): {exc.strerror}"
            ) from None
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(file, isolation_level=None, check_same_thread=False)
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA secure_delete=ON")
            self._conn.execute(_SCHEMA)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot use journal {file}: {exc}") from None
        if mode is None or str(mode[0]).lower() != "wal":
            raise JournalError(f"journal {file} cannot be put in WAL mode")
        try:
            restrict_side_files(file)
        except OSError as exc:
            raise JournalError(
                f"cannot restrict the mode of {exc.filename}: {exc.strerror}"
            ) from None
        if created:
            fsync_directory(file.parent)

    def keep(self, kept: KeptSubmission) -> None:
        """Write ``kept`` (replacing what is kept for its client id); on disk when this
        returns.

        :raises JournalError: it cannot be written.
        """
        row = (kept.client, kept.round_id, kept.box, kept.credential, kept.signature, kept.token)
        self._write("INSERT OR REPLACE INTO kept VALUES (?, ?, ?, ?, ?, ?)", row)

    def get(self, client: str) -> KeptSubmission | None:
        """What is kept for ``client``, or ``None``."""
        with self._lock:
            row = self._conn.execute(
                "SELECT client, round, box, credential, signature, token FROM kept "
                "WHERE client = ?",
                (client,),
            ).fetchone()
        return None if row is None else KeptSubmission(*row)

    def kept(self) -> list[KeptSubmission]:
        """Everything kept, by client id: what a restarted application has to submit again
        (with the same client ids) to learn what became of it."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT client, round, box, credential, signature, token FROM kept "
                "ORDER BY client"
            ).fetchall()
        return [KeptSubmission(*row) for row in rows]

    def discard(self, client: str) -> None:
        """Forget what is kept for ``client`` (the entry mix answered it; or the application
        gives up on knowing). Durable when this returns.

        :raises JournalError: it cannot be written.
        """
        self._write("DELETE FROM kept WHERE client = ?", (client,))

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SubmissionJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, sql: str, args: tuple[object, ...]) -> None:
        try:
            with self._lock:
                self._conn.execute(sql, args)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot write journal {self.path}: {exc}") from None
