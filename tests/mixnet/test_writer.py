"""The store writer: writes commit in submission order, commits are reported in that order,
and a malformed write fails alone."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from mixnet.core.actions import Persist
from mixnet.core.records import AddSubmission, NewRound, SetRound, Submission
from mixnet.core.status import RoundStatus
from mixnet.errors import InternalError
from mixnet.store import NodeStore, StoreError, StoreFailed
from mixnet.writer import StoreWriter
from tests.mixnet.small_disk import small_disk


async def test_commits_are_reported_in_submission_order_and_a_bad_write_fails_alone(
    tmp_path: Path,
) -> None:
    seen: list[tuple[object, bool]] = []

    def on_commit(persist: Persist, error: StoreError | None) -> str:
        seen.append((persist.token, error is None))
        return "ok" if error is None else "failed"

    with NodeStore(tmp_path / "n.db") as store:
        writer: StoreWriter[str] = StoreWriter(store, on_commit)
        good = Persist((NewRound(1, RoundStatus.OPEN, 1.0),), token="first")
        malformed = Persist((NewRound(2, RoundStatus.OPEN, 1.0, secret_key=b"short"),), token="bad")
        refused = Persist((SetRound(99, status=RoundStatus.CLOSED),), token="no such round")
        later = Persist((SetRound(1, status=RoundStatus.CLOSED, clients=3),), token="last")
        futures = [writer.submit(p) for p in (good, malformed, refused, later)]
        outcomes = await asyncio.gather(*futures)
        await asyncio.to_thread(writer.close)
        assert outcomes == ["ok", "failed", "failed", "ok"]
        assert seen == [("first", True), ("bad", False), ("no such round", False), ("last", True)]
        record = store.round(1)
        assert record is not None and record.status is RoundStatus.CLOSED
        assert store.round(2) is None


async def test_a_failed_commit_stops_the_writer_and_reports_nothing_of_its_batch(
    tmp_path: Path,
) -> None:
    """Fail-stop on a real full disk: the batch whose commit failed is neither reported
    stored nor failed to ``on_commit`` (its outcome is unknown); its futures and every
    later one fail with ``internal-error``; ``on_failure`` hears of it once."""
    seen: list[object] = []
    failures: list[StoreFailed] = []

    def on_commit(persist: Persist, error: StoreError | None) -> str:
        assert error is None
        seen.append(persist.token)
        return "ok"

    with small_disk(tmp_path, 256) as disk:
        store = NodeStore(disk / "n.db")
        writer: StoreWriter[str] = StoreWriter(store, on_commit, on_failure=failures.append)
        assert await writer.submit(Persist((NewRound(1, RoundStatus.OPEN, 1.0),), token=0)) == "ok"
        last = 0
        for i in range(1, 10_000):
            sub = Submission(f"c{i}", bytes(32), (os.urandom(1000),))
            try:
                await writer.submit(Persist((AddSubmission(1, sub),), token=i))
            except InternalError as exc:
                assert "store failed a commit" in str(exc)
                last = i
                break
        assert last > 1 and len(failures) == 1
        assert writer.failure is failures[0] and "a commit failed" in str(failures[0])
        assert seen == list(range(last))
        with pytest.raises(InternalError, match="store failed a commit"):
            await writer.submit(Persist((SetRound(1, clients=1),), token="after"))
        await asyncio.to_thread(writer.close)
        store.close()
        assert seen == list(range(last)) and len(failures) == 1


async def test_a_writer_closed_while_a_commit_waits_for_company_refuses_it_quietly(
    tmp_path: Path,
) -> None:
    """The entry mix's group commit waits ``window`` for more writes; a node that stops
    meanwhile refuses the waiting write with ``internal-error``, and the flush ends without
    an exception of its own (none is left for asyncio to report)."""
    with NodeStore(tmp_path / "n.db") as store:
        writer: StoreWriter[str] = StoreWriter(store, lambda p, e: "ok", window=0.2)
        future = writer.submit(Persist((NewRound(1, RoundStatus.OPEN, 1.0),), token=1))
        flusher = writer._flusher
        assert flusher is not None
        await asyncio.sleep(0.01)  # the flush now waits for company
        await asyncio.to_thread(writer.close)
        with pytest.raises(InternalError, match="stopping"):
            await future
        await asyncio.wait_for(flusher, 5)
        assert flusher.exception() is None
        assert store.round(1) is None
