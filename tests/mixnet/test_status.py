"""The round statuses: the transition table is what the docs draw, and is enforced."""

from __future__ import annotations

from pathlib import Path

import pytest

from mixnet.core.status import (
    INITIAL,
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    Role,
    RoundStatus,
    advance,
    mermaid,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


@pytest.mark.parametrize("role", list(Role))
def test_the_protocol_doc_draws_the_transition_table(role: Role) -> None:
    assert f"```mermaid\n{mermaid(role)}\n```" in DOC.read_text()


def test_terminal_statuses_have_no_way_out_and_every_status_is_reachable() -> None:
    for role, table in TRANSITIONS.items():
        assert not TERMINAL & set(table)
        reachable = {INITIAL[role]}
        frontier = [INITIAL[role]]
        while frontier:
            for nxt in table.get(frontier.pop(), frozenset()):
                if nxt not in reachable:
                    reachable.add(nxt)
                    frontier.append(nxt)
        assert set(table) <= reachable
        assert any(s in TERMINAL for s in reachable)


def test_advance_refuses_an_edge_the_table_does_not_have() -> None:
    assert advance(Role.RELAY, RoundStatus.OPEN, RoundStatus.CLOSED) is RoundStatus.CLOSED
    with pytest.raises(IllegalTransition):
        advance(Role.RELAY, RoundStatus.FORWARDED, RoundStatus.OPEN)
    with pytest.raises(IllegalTransition):
        advance(Role.SINK, RoundStatus.OPEN, RoundStatus.MIXED)
