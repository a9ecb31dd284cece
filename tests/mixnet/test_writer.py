"""The store writer: writes commit in submission order, commits are reported in that order,
and a malformed write fails alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mixnet.core.actions import Persist
from mixnet.core.records import NewRound, SetRound
from mixnet.core.status import RoundStatus
from mixnet.store import NodeStore, StoreError
from mixnet.writer import StoreWriter


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
