"""Round statuses and the one table of allowed transitions.

Every node keeps, per round, one :class:`RoundStatus`. The statuses and the transitions each
role may make are listed once, in :data:`TRANSITIONS`; the round machines
(:mod:`mixnet.core.entry`, :mod:`mixnet.core.relay`, :mod:`mixnet.core.sink`) change a
status only through :func:`advance`, and the store persists the enum's value. The diagram in
``docs/protocol.md`` is drawn from this table (a test checks that they agree).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "INITIAL",
    "TERMINAL",
    "TRANSITIONS",
    "IllegalTransition",
    "Role",
    "RoundStatus",
    "advance",
    "mermaid",
]


class Role(enum.Enum):
    """A node's place in the chain: the entry mix (hop 0) runs the rounds; a relay is every
    later mix but the last; the last mix validates the plaintext payloads and holds them until
    the trace is done; the sink is the end of the chain (where the application runs)."""

    ENTRY = "entry"
    RELAY = "relay"
    LAST = "last"
    SINK = "sink"


class RoundStatus(enum.Enum):
    """Where one round stands at one node (the value is what the store keeps).

    * ``OPENING`` — entry mix only: the round key exists; the chain is being asked to open it.
    * ``OPEN`` — the entry mix takes submissions; a relay or the sink takes batch chunks.
    * ``CLOSED`` — intake is complete (policy at the entry, every chunk in downstream).
    * ``MIXED`` — a mix stored its permuted outbound batch (before the last mix: the seed it
      is derived from; the last mix holds it).
    * ``FORWARDED`` — the successor acknowledged every outbound chunk; the mix keeps its
      intake (and, after the entry mix, its round key) for the trace.
    * ``RELEASED`` — last mix only: the exclusions are applied, its intake and key erased;
      the batch goes to the sink.
    * ``CONFIRMED`` — a mix's end: the round's exclusions passed (the last mix: the sink
      acknowledged the batch); intake and key are erased.
    * ``DONE`` — the sink handed the batch to the application and stored its result.
    * ``ABORTED`` — the round ended without a result (below ``min_users``, or told so).
    * ``FAILED`` — entry mix only: the chain refused to open the round.
    """

    OPENING = "opening"
    OPEN = "open"
    CLOSED = "closed"
    MIXED = "mixed"
    FORWARDED = "forwarded"
    RELEASED = "released"
    CONFIRMED = "confirmed"
    DONE = "done"
    ABORTED = "aborted"
    FAILED = "failed"


_S = RoundStatus

#: For each role, the statuses a round may move to from each status. A round enters the
#: machine in ``OPENING`` (entry mix) or ``OPEN`` (relay, sink).
TRANSITIONS: Mapping[Role, Mapping[RoundStatus, frozenset[RoundStatus]]] = MappingProxyType(
    {
        Role.ENTRY: MappingProxyType(
            {
                _S.OPENING: frozenset({_S.OPEN, _S.FAILED, _S.ABORTED}),
                _S.OPEN: frozenset({_S.CLOSED, _S.ABORTED}),
                # aborted when storing submissions failed and fewer than min_users are left
                _S.CLOSED: frozenset({_S.MIXED, _S.ABORTED}),
                _S.MIXED: frozenset({_S.FORWARDED}),
                # the trace: confirmed, or aborted (blame, untraceable items, too few left)
                _S.FORWARDED: frozenset({_S.CONFIRMED, _S.ABORTED}),
            }
        ),
        Role.RELAY: MappingProxyType(
            {
                _S.OPEN: frozenset({_S.CLOSED, _S.ABORTED}),
                _S.CLOSED: frozenset({_S.MIXED}),
                _S.MIXED: frozenset({_S.FORWARDED}),
                _S.FORWARDED: frozenset({_S.CONFIRMED, _S.ABORTED}),
            }
        ),
        Role.LAST: MappingProxyType(
            {
                _S.OPEN: frozenset({_S.CLOSED, _S.ABORTED}),
                _S.CLOSED: frozenset({_S.MIXED}),
                _S.MIXED: frozenset({_S.RELEASED, _S.ABORTED}),
                _S.RELEASED: frozenset({_S.CONFIRMED}),
            }
        ),
        Role.SINK: MappingProxyType(
            {
                _S.OPEN: frozenset({_S.CLOSED, _S.ABORTED}),
                _S.CLOSED: frozenset({_S.DONE}),
            }
        ),
    }
)

#: Statuses no transition leaves.
TERMINAL: frozenset[RoundStatus] = frozenset(
    {_S.CONFIRMED, _S.DONE, _S.ABORTED, _S.FAILED}
)

#: Where a round starts, per role.
INITIAL: Mapping[Role, RoundStatus] = MappingProxyType(
    {Role.ENTRY: _S.OPENING, Role.RELAY: _S.OPEN, Role.LAST: _S.OPEN, Role.SINK: _S.OPEN}
)


class IllegalTransition(RuntimeError):
    """A machine tried a transition :data:`TRANSITIONS` does not allow (a bug, not input)."""


def advance(role: Role, old: RoundStatus, new: RoundStatus) -> RoundStatus:
    """Return ``new`` if ``role`` may move a round from ``old`` to ``new``.

    :raises IllegalTransition: the table has no such edge.
    """
    if new not in TRANSITIONS[role].get(old, frozenset()):
        raise IllegalTransition(f"{role.value}: {old.value} -> {new.value} is not allowed")
    return new


def mermaid(role: Role) -> str:
    """The transition table of ``role`` as a mermaid ``stateDiagram-v2`` (what
    ``docs/protocol.md`` shows; a test checks that the two agree)."""
    lines = ["stateDiagram-v2", f"    [*] --> {INITIAL[role].name}"]
    for old, targets in TRANSITIONS[role].items():
        for new in sorted(targets, key=lambda s: s.name):
            lines.append(f"    {old.name} --> {new.name}")
    finals = sorted(
        {s for targets in TRANSITIONS[role].values() for s in targets if s in TERMINAL},
        key=lambda s: s.name,
    )
    lines += [f"    {s.name} --> [*]" for s in finals]
    return "\n".join(lines)
