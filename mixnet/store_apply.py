"""How :meth:`mixnet.store.NodeStore.apply` runs the statements of a group commit inside its
open transaction: one ``SAVEPOINT`` per group, or the merged fast path.

A statement the database refuses (a constraint fails, or ``need_row`` and no row changed)
becomes :class:`Refused`, with the message its :class:`~mixnet.store_rows.Statement` names;
``NodeStore`` reports it as a ``StoreError``. Any other ``sqlite3.Error`` propagates and ends
the transaction. Nothing here begins, commits or rolls back the transaction itself.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Sequence
from functools import lru_cache

from mixnet.store_decode import Row
from mixnet.store_rows import Statement

__all__ = [
    "MULTI_ROW",
    "MULTI_ROW_BYTES",
    "Refused",
    "apply_group",
    "apply_merged",
    "insert_rows",
    "run_statement",
]

#: Most rows one multi-row ``INSERT`` of :func:`insert_rows` carries.
MULTI_ROW = 128
#: About the most blob and text bytes one multi-row ``INSERT`` carries (sqlite copies what
#: is bound, and a cached statement keeps its last values until it is used again).
MULTI_ROW_BYTES = 1 << 20

_UNIQUE = frozenset({"SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"})


class Refused(Exception):
    """The database refused a statement; the message says what to report."""


def apply_merged(conn: sqlite3.Connection, groups: Sequence[Sequence[Statement]]) -> bool:
    """The fast path of a group commit: when every non-empty group is the same list of plain
    single-row ``INSERT`` statements (e.g. one submission each), run each statement once for
    all groups (:func:`insert_rows`) in one savepoint. Returns ``True`` when every group is
    applied, or ``False`` — having changed nothing — when the groups do not have that shape or the
    database refused a row (the caller then applies group by group and reports which).

    :raises sqlite3.Error: a failure other than a refusal (it ends the transaction).
    """
    busy = [group for group in groups if group]
    if len(busy) < 2:
        return False
    shape = [statement.sql for statement in busy[0]]
    for group in busy:
        if len(group) != len(shape):
            return False
        for statement, sql in zip(group, shape, strict=True):
            if (
                statement.sql != sql
                or statement.rows is not None
                or statement.need_row
                or not sql.startswith("INSERT")
            ):
                return False
    conn.execute("SAVEPOINT merged")
    try:
        for k, sql in enumerate(shape):
            insert_rows(conn, sql, [group[k].params for group in busy])
    except sqlite3.IntegrityError:
        conn.execute("ROLLBACK TO merged")
        conn.execute("RELEASE merged")
        return False
    conn.execute("RELEASE merged")
    return True


def apply_group(conn: sqlite3.Connection, group: Sequence[Statement]) -> str | None:
    """Run one group's statements in a savepoint; on a refusal roll the group back and return
    its message (``None``: applied).

    :raises sqlite3.Error: a failure other than a refusal (it ends the transaction).
    """
    conn.execute("SAVEPOINT grp")
    try:
        for statement in group:
            run_statement(conn, statement)
    except Refused as exc:
        conn.execute("ROLLBACK TO grp")
        conn.execute("RELEASE grp")
        return str(exc)
    conn.execute("RELEASE grp")
    return None


def run_statement(conn: sqlite3.Connection, statement: Statement) -> None:
    """Execute one statement of a write; one that need not zero what it deletes
    (``zeroed=False``) runs with ``secure_delete`` off, which is set on again after it.

    :raises Refused: the database refuses it (a constraint fails, or ``need_row`` and no
        row changed). :raises sqlite3.Error: any other failure.
    """
    if statement.zeroed:
        _run(conn, statement)
        return
    conn.execute("PRAGMA secure_delete=OFF")
    try:
        _run(conn, statement)
    finally:
        conn.execute("PRAGMA secure_delete=ON")


def _run(conn: sqlite3.Connection, statement: Statement) -> None:
    try:
        if statement.rows is not None:
            if statement.multi_row:
                insert_rows(conn, statement.sql, statement.rows)
            else:
                conn.executemany(statement.sql, statement.rows)
            return  # (need_row is for single statements)
        cursor = conn.execute(statement.sql, statement.params)
    except sqlite3.IntegrityError as exc:
        name = getattr(exc, "sqlite_errorname", "")
        if name == "SQLITE_CONSTRAINT_FOREIGNKEY":
            raise Refused(statement.missing) from None
        if name in _UNIQUE:
            raise Refused(statement.duplicate) from None
        raise Refused(f"the database refused a write: {exc}") from None
    if statement.need_row and cursor.rowcount < 1:
        raise Refused(statement.missing)


def insert_rows(conn: sqlite3.Connection, sql: str, rows: Iterable[Row]) -> None:
    """``conn.executemany(sql, rows)`` for a plain ``INSERT … VALUES (…)`` (its one values
    tuple last), run as multi-row inserts of up to :data:`MULTI_ROW` rows (and about
    :data:`MULTI_ROW_BYTES`, judged by each part's first row) each: one
    statement step, so one release of the GIL, per part instead of per row (``executemany``
    releases and takes it back around every row, which under load costs more than the row
    itself). ``rows`` is read part by part. Other statements go to ``executemany``.

    :raises sqlite3.Error: as ``executemany`` (rows of the failing part may be in the open
        transaction; the callers roll back to their savepoint).
    """
    head, values = _split_values(sql)
    if not values:
        conn.executemany(sql, rows)
        return
    it = iter(rows)
    while first := next(it, None):
        size = sum(len(v) for v in first if isinstance(v, bytes | str | memoryview))
        part = [first, *itertools.islice(it, min(MULTI_ROW, MULTI_ROW_BYTES // max(size, 1)) - 1)]
        conn.execute(_multi_row(head, values, len(part)), [v for row in part for v in row])


@lru_cache(maxsize=64)
def _split_values(sql: str) -> tuple[str, str]:
    """``(head, values)`` of ``head VALUES values`` when ``values`` is one parenthesised tuple
    ending the statement; ``("", "")`` otherwise."""
    head, sep, values = sql.rpartition(" VALUES ")
    if (
        not sep
        or not head.lstrip().upper().startswith("INSERT INTO")
        or not values.startswith("(")
        or not values.endswith(")")
        or values.count("(") != 1
    ):
        return "", ""
    return head, values


@lru_cache(maxsize=256)
def _multi_row(head: str, values: str, count: int) -> str:
    return f"{head} VALUES {', '.join([values] * count)}"
