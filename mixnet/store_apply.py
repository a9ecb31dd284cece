"""How :meth:`mixnet.store.NodeStore.apply` runs the statements of a group commit inside its
open transaction: one ``SAVEPOINT`` per group, or the merged fast path.

A statement the database refuses (a constraint fails, or ``need_row`` and no row changed)
becomes :class:`Refused`, with the message its :class:`~mixnet.store_rows.Statement` names;
``NodeStore`` reports it as a ``StoreError``. Any other ``sqlite3.Error`` propagates and ends
the transaction. Nothing here begins, commits or rolls back the transaction itself.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from mixnet.store_rows import Statement

__all__ = ["Refused", "apply_group", "apply_merged", "run_statement"]

_UNIQUE = frozenset({"SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"})


class Refused(Exception):
    """The database refused a statement; the message says what to report."""


def apply_merged(conn: sqlite3.Connection, groups: Sequence[Sequence[Statement]]) -> bool:
    """The fast path of a group commit: when every non-empty group is the same list of plain
    ``INSERT`` statements (e.g. one submission each), run each statement once for all groups
    (``executemany``) in one savepoint. Returns ``True`` when every group is applied, or
    ``False`` — having changed nothing — when the groups do not have that shape or the
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
            conn.executemany(sql, [group[k].params for group in busy])
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
    """Execute one statement of a write.

    :raises Refused: the database refuses it (a constraint fails, or ``need_row`` and no
        row changed). :raises sqlite3.Error: any other failure.
    """
    try:
        if statement.rows is not None:
            cursor = conn.executemany(statement.sql, statement.rows)
        else:
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
