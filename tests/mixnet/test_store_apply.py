"""``mixnet.store_apply.insert_rows``: many rows in a few multi-row statements, exactly as
``executemany`` would store them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from mixnet.store_apply import MULTI_ROW, MULTI_ROW_BYTES, insert_rows

SQL = "INSERT INTO t (k, v) VALUES (?, ?)"


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER UNIQUE, v BLOB)")
    yield db
    db.close()


def rows_of(db: sqlite3.Connection) -> list[tuple[object, ...]]:
    return db.execute("SELECT k, v FROM t ORDER BY id").fetchall()


@pytest.mark.parametrize(
    "count", [0, 1, 2, MULTI_ROW - 1, MULTI_ROW, MULTI_ROW + 1, 3 * MULTI_ROW + 5]
)
def test_rows_are_stored_in_order_as_executemany_stores_them(
    conn: sqlite3.Connection, count: int
) -> None:
    rows = [(k, bytes([k % 256]) * (k % 7)) for k in range(count)]
    steps: list[str] = []
    conn.set_trace_callback(steps.append)
    insert_rows(conn, SQL, (row for row in rows))  # read lazily, part by part
    conn.set_trace_callback(None)
    assert rows_of(conn) == rows
    assert len(steps) == -(-count // MULTI_ROW)  # one statement per part, not per row
    other = sqlite3.connect(":memory:", isolation_level=None)
    other.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER UNIQUE, v BLOB)")
    other.executemany(SQL, rows)
    assert rows_of(other) == rows_of(conn)


def test_a_constraint_fails_the_call_as_executemany_does(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN")
    conn.execute("SAVEPOINT s")
    with pytest.raises(sqlite3.IntegrityError):
        insert_rows(conn, SQL, [(1, b"a"), (2, b"b"), (1, b"again")])
    conn.execute("ROLLBACK TO s")
    conn.execute("COMMIT")
    assert rows_of(conn) == []


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO t (k, v) VALUES (?, ?) ON CONFLICT (k) DO NOTHING",
        "INSERT INTO t (k, v) SELECT ?, ?",
        "UPDATE t SET v = ? WHERE k = ?",
    ],
)
def test_other_statements_go_to_executemany(conn: sqlite3.Connection, sql: str) -> None:
    conn.executemany("INSERT INTO t (k, v) VALUES (?, ?)", [(0, b"x"), (1, b"y")])
    steps: list[str] = []
    conn.set_trace_callback(steps.append)
    rows = [(b"z", 1), (b"w", 0)] if sql.startswith("UPDATE") else [(1, b"dup"), (5, b"new")]
    if "SELECT" in sql:
        rows = [(5, b"new"), (6, b"newer")]
    insert_rows(conn, sql, rows)
    conn.set_trace_callback(None)
    assert len(steps) == 2  # one per row


def test_large_rows_go_in_parts_of_about_a_mebibyte(conn: sqlite3.Connection) -> None:
    """sqlite copies what a statement binds and the statement cache keeps the last values:
    rows of large blobs go a few at a time."""
    size = MULTI_ROW_BYTES // 3 + 1
    rows = [(k, bytes([k]) * size) for k in range(7)]
    steps: list[str] = []
    conn.set_trace_callback(steps.append)
    insert_rows(conn, SQL, rows)
    conn.set_trace_callback(None)
    assert rows_of(conn) == rows
    assert len(steps) == 4  # 2 + 2 + 2 + 1 rows
