"""A client's submissions in flight, on disk (mixnet.journal): what is kept survives the
process, one frame per client id, in a private file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from mixnet.journal import JournalError, KeptSubmission, SubmissionJournal


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_what_is_kept_survives_a_reopen_one_frame_per_client(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    a = KeptSubmission("alice", 3, b"\x01" * 40)
    b = KeptSubmission("bob", 3, b"\x02" * 40, b"\x03" * 32, b"\x04" * 64, b"\x05" * 72)
    with SubmissionJournal(path) as journal:
        journal.keep(b)
        journal.keep(a)
        journal.keep(KeptSubmission("alice", 4, b"\x06" * 40))  # replaces alice's
        assert journal.get("carol") is None
    with SubmissionJournal(path) as journal:
        assert journal.kept() == [KeptSubmission("alice", 4, b"\x06" * 40), b]
        assert journal.get("bob") == b
        journal.discard("alice")
        journal.discard("nobody")
    with SubmissionJournal(path) as journal:
        assert journal.kept() == [b]


def test_the_journal_files_are_private(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with SubmissionJournal(path) as journal:
        journal.keep(KeptSubmission("alice", 1, b"\x01"))
        files = [p for p in tmp_path.iterdir() if p.name.startswith("journal.db")]
        assert path in files
        assert all(mode(p) == 0o600 for p in files), {p.name: oct(mode(p)) for p in files}


def test_a_kept_frame_is_the_submit_frame_as_sent() -> None:
    plain = KeptSubmission("alice", 7, b"box")
    assert plain.frame() == {"type": "submit", "round": 7, "client": "alice", "box": b"box"}
    signed = KeptSubmission("k", 7, b"box", b"c" * 32, b"s" * 64)
    assert signed.frame() == {"type": "submit", "round": 7, "client": "k", "box": b"box",
                              "credential": b"c" * 32, "signature": b"s" * 64}  # fmt: skip


def test_an_unusable_path_is_a_journal_error(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="directory of the journal does not exist"):
        SubmissionJournal(tmp_path / "missing" / "journal.db")
    not_sqlite = tmp_path / "not-a-journal"
    not_sqlite.write_bytes(b"this is not a database file at all" * 100)
    with pytest.raises(JournalError, match="cannot use journal"):
        SubmissionJournal(not_sqlite)
    with pytest.raises(JournalError):
        SubmissionJournal(tmp_path)  # a directory
