"""Tests for mixnet.store: the durable sqlite state of a node."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mixnet.errors import MixnetError
from mixnet.store import (
    SCHEMA_VERSION,
    Chunk,
    NodeStore,
    OutboundChunk,
    RoundRecord,
    StoreError,
    Submission,
)

ROOT = Path(__file__).resolve().parents[2]
KEY = bytes(range(32))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "node.db"


@pytest.fixture
def store(db: Path) -> Iterator[NodeStore]:
    with NodeStore(db) as s:
        yield s


def open_round(store: NodeStore, round_id: int = 1, secret_key: bytes | None = KEY) -> None:
    store.put_round(
        round_id, status="open", opened_at=1000.5, deadline=1060.0, secret_key=secret_key
    )


def submission(client: str, fill: int, count: int = 3, length: int = 8) -> Submission:
    return Submission(
        client=client,
        digest=bytes([fill]) * 32,
        payloads=tuple(bytes([fill, i]) * (length // 2) for i in range(count)),
    )


def chunk(sender: str, index: int, payloads: tuple[bytes, ...] = (b"ab", b"cd")) -> Chunk:
    return Chunk(
        sender=sender, index=index, chunks=3, clients=2, count=6, dropped=1, payloads=payloads
    )


def raw(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(db, isolation_level=None)


# --------------------------------------------------------------------------- opening


def test_new_store_is_wal_and_versioned(store: NodeStore, db: Path) -> None:
    assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
    conn = raw(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_missing_directory_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        NodeStore(tmp_path / "absent" / "node.db")


def test_store_error_is_a_mixnet_error() -> None:
    assert issubclass(StoreError, MixnetError)
    assert StoreError("x").code == "store-error"


def test_not_a_database_is_a_store_error(db: Path) -> None:
    db.write_bytes(b"this is not an sqlite database" * 100)
    with pytest.raises(StoreError):
        NodeStore(db)


def test_newer_schema_version_is_refused(db: Path) -> None:
    NodeStore(db).close()
    conn = raw(db)
    conn.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
    )
    conn.close()
    with pytest.raises(StoreError, match="schema version"):
        NodeStore(db)


def test_missing_schema_version_is_refused(db: Path) -> None:
    NodeStore(db).close()
    conn = raw(db)
    conn.execute("DELETE FROM meta")
    conn.close()
    with pytest.raises(StoreError, match="schema version"):
        NodeStore(db)


def test_closed_store_raises_and_close_is_idempotent(db: Path) -> None:
    store = NodeStore(db)
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get_meta("x")
    with NodeStore(db) as again:
        again.set_meta("x", "y")
    with pytest.raises(StoreError):
        again.get_meta("x")


def test_constructed_in_one_thread_used_in_another(db: Path) -> None:
    store = NodeStore(db)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            open_round(store)
            store.add_submissions(1, [submission("a", 1)])
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert errors == []
    assert store.submission_count(1) == 1
    store.close()


# --------------------------------------------------------------------------- meta and rounds


def test_meta_roundtrip_and_persistence(store: NodeStore, db: Path) -> None:
    assert store.get_meta("next") is None
    store.set_meta("next", "1")
    store.set_meta("next", "2")
    assert store.get_meta("next") == "2"
    store.close()
    with NodeStore(db) as again:
        assert again.get_meta("next") == "2"


def test_meta_rejects_bad_arguments(store: NodeStore) -> None:
    with pytest.raises(ValueError):
        store.set_meta("schema_version", "9")
    with pytest.raises(ValueError):
        store.set_meta("", "x")
    with pytest.raises(TypeError):
        store.set_meta("k", 3)  # type: ignore[arg-type]


def test_round_lifecycle_and_persistence(store: NodeStore, db: Path) -> None:
    assert store.last_round_id() is None
    assert store.get_round(1) is None
    open_round(store, 1)
    store.put_round(2, status="open", opened_at=1100, deadline=None, secret_key=None)
    expected = RoundRecord(1, "open", 1000.5, 1060.0, None, KEY)
    assert store.get_round(1) == expected
    store.update_round(1, status="closed", clients=12)
    store.update_round(2, deadline=1200.0)
    store.update_round(2)
    assert store.get_round(1) == RoundRecord(1, "closed", 1000.5, 1060.0, 12, KEY)
    assert store.get_round(2) == RoundRecord(2, "open", 1100.0, 1200.0, None, None)
    assert [r.round_id for r in store.rounds()] == [1, 2]
    assert [r.round_id for r in store.rounds(status="open")] == [2]
    assert store.rounds(status="done") == []
    assert store.last_round_id() == 2
    store.erase_round_key(1)
    store.erase_round_key(1)
    store.close()
    with NodeStore(db) as again:
        assert again.get_round(1) == RoundRecord(1, "closed", 1000.5, 1060.0, 12, None)
        assert again.last_round_id() == 2


def test_round_errors(store: NodeStore) -> None:
    open_round(store, 1)
    with pytest.raises(StoreError, match="exists"):
        open_round(store, 1)
    with pytest.raises(StoreError, match="does not exist"):
        store.update_round(9, status="x")
    with pytest.raises(StoreError, match="does not exist"):
        store.update_round(9)
    with pytest.raises(StoreError, match="does not exist"):
        store.erase_round_key(9)


@pytest.mark.parametrize(
    ("round_id", "error"),
    [(-1, ValueError), (2**63, ValueError), (True, TypeError), (1.0, TypeError), ("1", TypeError)],
)
def test_round_ids_are_checked(store: NodeStore, round_id: object, error: type) -> None:
    with pytest.raises(error):
        store.get_round(round_id)  # type: ignore[arg-type]
    with pytest.raises(error):
        store.submissions(round_id)  # type: ignore[arg-type]


def test_largest_round_id_is_accepted(store: NodeStore) -> None:
    open_round(store, 2**63 - 1)
    assert store.last_round_id() == 2**63 - 1


def test_put_round_checks_fields(store: NodeStore) -> None:
    with pytest.raises(ValueError):
        store.put_round(1, status="open", opened_at=0.0, deadline=None, secret_key=b"short")
    with pytest.raises(TypeError):
        store.put_round(1, status="open", opened_at=0.0, deadline=None, secret_key="k" * 32)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.put_round(1, status="open", opened_at=float("nan"), deadline=None, secret_key=None)
    with pytest.raises(ValueError):
        store.put_round(1, status="", opened_at=0.0, deadline=None, secret_key=None)
    with pytest.raises(ValueError):
        store.update_round(1, clients=-1)
    assert store.rounds() == []


# --------------------------------------------------------------------------- submissions


def test_submissions_roundtrip_in_insertion_order(store: NodeStore, db: Path) -> None:
    open_round(store, 1)
    open_round(store, 2)
    first = [submission("zed", 1), submission("amy", 2)]
    store.add_submissions(1, first)
    store.add_submissions(2, [submission("amy", 9)])
    store.add_submissions(1, [submission("mid", 3, count=0)])
    store.add_submissions(1, [])
    assert store.submissions(1) == [*first, submission("mid", 3, count=0)]
    assert store.submission_count(1) == 3
    assert store.submission_count(2) == 1
    assert store.submission_count(5) == 0
    assert store.get_submission(1, "amy") == submission("amy", 2)
    assert store.get_submission(2, "amy") == submission("amy", 9)
    assert store.get_submission(1, "nobody") is None
    store.close()
    with NodeStore(db) as again:
        assert again.submissions(1) == [*first, submission("mid", 3, count=0)]


def test_add_submissions_is_all_or_nothing(store: NodeStore) -> None:
    open_round(store, 1)
    store.add_submissions(1, [submission("a", 1)])
    with pytest.raises(StoreError):
        store.add_submissions(1, [submission("b", 2), submission("a", 3), submission("c", 4)])
    assert store.submissions(1) == [submission("a", 1)]
    with pytest.raises(StoreError):
        store.add_submissions(1, [submission("d", 5), submission("d", 6)])
    assert store.submission_count(1) == 1
    store.add_submissions(1, [submission("b", 2)])
    assert store.submission_count(1) == 2


def test_add_submissions_needs_the_round(store: NodeStore) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        store.add_submissions(4, [submission("a", 1)])


def test_add_submissions_checks_items(store: NodeStore) -> None:
    open_round(store, 1)
    unequal = Submission(client="a", digest=b"d", payloads=(b"abc", b"de"))
    not_bytes = Submission(client="a", digest=b"d", payloads=("abc",))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.add_submissions(1, [submission("ok", 1), unequal])
    with pytest.raises(TypeError):
        store.add_submissions(1, [not_bytes])
    with pytest.raises(TypeError):
        store.add_submissions(1, [("a", b"d", (b"x",))])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        store.add_submissions(1, [Submission(client="a", digest=b"d", payloads=b"xy")])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.add_submissions(1, [Submission(client="", digest=b"d", payloads=())])
    assert store.submission_count(1) == 0


# --------------------------------------------------------------------------- chunks


def test_add_chunk_is_idempotent_and_first_wins(store: NodeStore, db: Path) -> None:
    open_round(store, 1)
    assert store.add_chunk(1, chunk("m1", 1)) is True
    assert store.add_chunk(1, chunk("m1", 1, payloads=(b"zz",))) is False
    assert store.add_chunk(1, chunk("m1", 0)) is True
    assert store.add_chunk(1, chunk("m0", 2, payloads=())) is True
    assert store.chunks(1) == [chunk("m0", 2, payloads=()), chunk("m1", 0), chunk("m1", 1)]
    assert store.chunk_indices(1, "m1") == {0, 1}
    assert store.chunk_indices(1, "m9") == set()
    store.close()
    with NodeStore(db) as again:
        assert again.chunks(1)[2] == chunk("m1", 1)


def test_add_chunk_errors(store: NodeStore) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        store.add_chunk(1, chunk("m1", 0))
    open_round(store, 1)
    with pytest.raises(ValueError):
        store.add_chunk(1, chunk("m1", 3))
    with pytest.raises(ValueError):
        store.add_chunk(1, chunk("m1", 0, payloads=(b"a", b"bc")))
    with pytest.raises(TypeError):
        store.add_chunk(1, chunk("m1", 0, payloads=(bytearray(b"a"),)))  # type: ignore[arg-type]
    assert store.chunks(1) == []


def test_large_payload_lists_round_trip(store: NodeStore) -> None:
    open_round(store, 1)
    payloads = tuple(i.to_bytes(24, "big") for i in range(200_000))
    big = Chunk(
        sender="m1", index=0, chunks=1, clients=1, count=200_000, dropped=0, payloads=payloads
    )
    assert store.add_chunk(1, big)
    assert store.chunks(1) == [big]
    store.put_outbound(1, clients=1, count=200_000, chunks=[payloads[:100_000], payloads[100_000:]])
    stored = store.outbound(1)
    assert stored is not None
    assert stored[2][0].payloads + stored[2][1].payloads == payloads


# --------------------------------------------------------------------------- outbound


def test_outbound_roundtrip_ack_and_drop(store: NodeStore, db: Path) -> None:
    open_round(store, 1)
    assert store.outbound(1) is None
    store.put_outbound(1, clients=2, count=3, chunks=[[b"aa", b"bb"], [b"cc"]])
    store.ack_outbound(1, 1)
    store.ack_outbound(1, 1)
    expected = (
        2,
        3,
        [OutboundChunk(0, (b"aa", b"bb"), False), OutboundChunk(1, (b"cc",), True)],
    )
    assert store.outbound(1) == expected
    store.close()
    with NodeStore(db) as again:
        assert again.outbound(1) == expected
        with pytest.raises(StoreError, match="already"):
            again.put_outbound(1, clients=2, count=1, chunks=[[b"zz"]])
        with pytest.raises(StoreError, match="no outbound chunk"):
            again.ack_outbound(1, 2)
        again.drop_outbound(1)
        again.drop_outbound(1)
        assert again.outbound(1) is None
        again.put_outbound(1, clients=0, count=0, chunks=[])
        assert again.outbound(1) == (0, 0, [])


def test_put_outbound_checks_arguments(store: NodeStore) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        store.put_outbound(1, clients=1, count=1, chunks=[[b"a"]])
    open_round(store, 1)
    with pytest.raises(ValueError, match="count"):
        store.put_outbound(1, clients=1, count=2, chunks=[[b"a"]])
    with pytest.raises(ValueError):
        store.put_outbound(1, clients=1, count=2, chunks=[[b"a"], [b"bc"]])
    with pytest.raises(TypeError):
        store.put_outbound(1, clients=1, count=1, chunks=[b"a"])  # type: ignore[list-item]
    assert store.outbound(1) is None


def test_drop_intake_deletes_only_the_intake_of_that_round(store: NodeStore) -> None:
    open_round(store, 1)
    open_round(store, 2)
    store.add_submissions(1, [submission("a", 1)])
    store.add_submissions(2, [submission("a", 2)])
    store.add_chunk(1, chunk("m1", 0))
    store.put_outbound(1, clients=1, count=1, chunks=[[b"x"]])
    store.drop_intake(1)
    store.drop_intake(1)
    store.drop_intake(77)
    assert store.submissions(1) == []
    assert store.chunks(1) == []
    assert store.submission_count(2) == 1
    assert store.outbound(1) is not None
    assert store.get_round(1) is not None


# --------------------------------------------------------------------------- results


def test_results_roundtrip_replace_and_persist(store: NodeStore, db: Path) -> None:
    open_round(store, 1)
    assert store.get_result(1) is None
    store.put_result(1, {"sum": 3, "ok": True})
    store.put_result(1, {"estimate": 0.25, "shares": [1, 2], "error": None})
    store.close()
    with NodeStore(db) as again:
        assert again.get_result(1) == {"estimate": 0.25, "shares": [1, 2], "error": None}


def test_put_result_errors(store: NodeStore) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        store.put_result(1, {"a": 1})
    open_round(store, 1)
    with pytest.raises(ValueError):
        store.put_result(1, {"a": float("nan")})
    with pytest.raises(TypeError):
        store.put_result(1, {"a": b"bytes"})
    with pytest.raises(TypeError):
        store.put_result(1, {1: "a"})  # type: ignore[dict-item]
    assert store.get_result(1) is None


# --------------------------------------------------------------------------- corruption


def test_corrupt_blob_length_is_a_store_error(store: NodeStore, db: Path) -> None:
    open_round(store, 1)
    store.add_submissions(1, [submission("a", 1)])
    store.add_chunk(1, chunk("m1", 0))
    store.put_outbound(1, clients=1, count=2, chunks=[[b"aa", b"bb"]])
    conn = raw(db)
    for table in ("submissions", "chunks", "outbound_chunks"):
        conn.execute(f"UPDATE {table} SET item_count = item_count + 1")
    conn.close()
    with pytest.raises(StoreError, match="corrupt"):
        store.submissions(1)
    with pytest.raises(StoreError, match="corrupt"):
        store.get_submission(1, "a")
    with pytest.raises(StoreError, match="corrupt"):
        store.chunks(1)
    with pytest.raises(StoreError, match="corrupt"):
        store.outbound(1)


def test_corrupt_result_is_a_store_error(store: NodeStore, db: Path) -> None:
    open_round(store, 1)
    store.put_result(1, {"a": 1})
    conn = raw(db)
    conn.execute("UPDATE results SET result = '[1, 2]'")
    conn.close()
    with pytest.raises(StoreError):
        store.get_result(1)


# --------------------------------------------------------------------------- erasure


def files_containing(directory: Path, needle: bytes) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_file() and needle in p.read_bytes())


def test_erase_round_key_removes_the_key_bytes_from_disk(store: NodeStore, db: Path) -> None:
    key = os.urandom(32)
    open_round(store, 1, secret_key=key)
    open_round(store, 2, secret_key=os.urandom(32))
    for i in range(5):
        store.update_round(1, status=f"step-{i}")
        store.add_submissions(1, [submission(f"c{i}", i)])
    assert files_containing(db.parent, key) != []  # the search below can find the key
    store.erase_round_key(1)
    assert store.get_round(1) is not None
    assert store.get_round(1).secret_key is None  # type: ignore[union-attr]
    assert files_containing(db.parent, key) == []
    store.close()
    assert files_containing(db.parent, key) == []
    with NodeStore(db) as again:
        record = again.get_round(1)
        assert record is not None
        assert record.secret_key is None
        assert record.status == "step-4"
        assert again.get_round(2).secret_key is not None  # type: ignore[union-attr]


# --------------------------------------------------------------------------- hard kills

CHILD = """
import os, sys, time
from mixnet.store import NodeStore, Submission
store = NodeStore(sys.argv[1])
store.put_round(7, status="open", opened_at=1.0, deadline=None, secret_key=None)
store.add_submissions(7, [
    Submission(client=f"c{i}", digest=bytes([i]) * 32, payloads=(bytes([i]) * 16,) * 3)
    for i in range(100)
])
print("stored", flush=True)
if sys.argv[2] == "exit":
    os._exit(0)
time.sleep(60)
"""


def start_child(db: Path, mode: str) -> subprocess.Popen[str]:
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), mode],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def check_child_data(db: Path) -> None:
    with NodeStore(db) as store:
        assert store.submission_count(7) == 100
        assert store.get_submission(7, "c42") == Submission(
            client="c42", digest=bytes([42]) * 32, payloads=(bytes([42]) * 16,) * 3
        )


def test_data_survives_exit_without_close(db: Path) -> None:
    child = start_child(db, "exit")
    out, _ = child.communicate(timeout=30)
    assert out == "stored\n"
    assert child.returncode == 0
    check_child_data(db)


def test_data_survives_sigkill_right_after_commit(db: Path) -> None:
    child = start_child(db, "sleep")
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "stored\n"
        child.kill()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    check_child_data(db)
