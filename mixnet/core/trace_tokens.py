"""The tokens a relay's trace carries through the adapter (:mod:`mixnet.core.tracing`): each
names the step a :class:`~mixnet.core.actions.Verify`, :class:`~mixnet.core.actions.Prove` or
:class:`~mixnet.core.actions.LoadIntake` belongs to, and what that step resumes with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mixnet.blame import Accusation
from mixnet.frames import Accused

__all__ = ["BlameChecked", "IntakeNeeded", "TraceProved", "TraceStep", "TraceVerified"]


@dataclass(frozen=True)
class TraceVerified:
    """Token of the :class:`Verify` of the successor's accusations."""

    round_id: int
    reply: Accused


@dataclass(frozen=True)
class BlameChecked:
    """Token of the :class:`Verify` of the evidence behind the successor's blame."""

    round_id: int
    reply: Accused


#: The trace steps that may need a relay's inputs (run again once they are read back).
TraceStep = Literal["trace", "traced", "verified", "exclude"]


@dataclass(frozen=True)
class IntakeNeeded:
    """Token of the :class:`LoadIntake` of a round whose inputs a step of its trace needs:
    that step (``event``: ``"trace"``, ``"traced"``, ``"verified"`` or ``"exclude"``) and its
    arguments, run again once the inputs are read back."""

    round_id: int
    event: TraceStep
    args: tuple[object, ...]


@dataclass(frozen=True)
class TraceProved:
    """Token of the :class:`Prove` of this mix's evidence: first ``failures`` inputs that
    did not peel (each starts an accusation here), then ``duplicates`` inputs that peeled to
    a repeated onion (likewise), then — for the last mix (``accusations`` is ``None``) — one
    step per refused payload, or else one step extending each of the successor's
    ``accusations``."""

    round_id: int
    accusations: tuple[Accusation, ...] | None
    untraced: int
    failures: int = 0
    #: after the failures, inputs whose layers hold an onion another input's also holds
    #: (each starts a ``duplicate`` accusation here)
    duplicates: int = 0
    #: the reply is a page of the trace and a next page may hold more (``Accused.more``)
    more: bool = False
