"""The sink's round machine: the end of the chain, where the application gets the batch.

Life of a round here::

    OPEN --last chunk stored--> CLOSED --delivered--> DONE
      \\--abort-round--> ABORTED (the application is told, and its answer stored)

The sink holds no round key (``open-round`` is answered with no announcement). Its intake is
the shared batch intake (:mod:`mixnet.core.downstream`) without a transform; the complete
batch goes to the application (:class:`~mixnet.core.actions.Deliver`), whose result is stored
and published (:class:`~mixnet.core.actions.Publish`). What the payloads mean is the
application's business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mixnet.core.actions import Action, Deliver, DeliveredBatch, Persist, Publish, Reply
from mixnet.core.downstream import ChunkReceiver
from mixnet.core.intake import BatchIntake
from mixnet.core.records import DropIntake, NewRound, NodeRecords, PutResult, SetRound
from mixnet.core.rounds import RoundState, prune_rounds, refuse_forgotten
from mixnet.core.status import Role, RoundStatus, advance
from mixnet.errors import RoundClosed
from mixnet.frames import Aborted, AbortRound, Batch, OpenRound, RoundKeys

__all__ = ["SinkMachine"]


class SinkMachine(ChunkReceiver):
    """The rounds of the sink, whose predecessor (the last mix) is ``predecessor``; payloads
    arrive ``item_length`` bytes long."""

    role = Role.SINK

    def __init__(self, *, predecessor: str, item_length: int) -> None:
        self.predecessor = predecessor
        self.item_length = item_length
        self.rounds: dict[int, RoundState] = {}
        #: rounds pruned from memory (see :func:`~mixnet.core.rounds.prune_rounds`)
        self.forgotten: set[int] = set()
        #: results of the rounds in :attr:`rounds` (older ones are only in the store)
        self.results: dict[int, Mapping[str, object]] = {}

    def _new_intake(self, round_id: int) -> BatchIntake:
        """The sink's intake: payloads are plaintext (equal values are legitimate), so no
        replay filter is sized for them."""
        return BatchIntake(round_id, self.predecessor, self.item_length, filters_replays=False)

    def status(self, round_id: int) -> RoundStatus | None:
        """The round's status here, or ``None`` if this node never saw it."""
        st = self.rounds.get(round_id)
        return None if st is None else st.status

    def on_open_round(self, frame: OpenRound, now: float) -> list[Action]:
        """Event: ``open-round`` from the last mix (idempotent while the round is open).

        :raises RoundClosed: the round is past intake or aborted here.
        """
        r = frame.round_id
        refuse_forgotten(self.forgotten, r)
        st = self.rounds.get(r)
        if st is not None and st.status is not RoundStatus.OPEN:
            raise RoundClosed(f"round {r} is {st.status.value} here")
        actions: list[Action] = []
        if st is None:
            for old in prune_rounds(self.rounds, r, self.forgotten):
                self.results.pop(old, None)  # stays in the store
            st = RoundState(r, RoundStatus.OPEN, now)
            st.batch = self._new_intake(r)
            self.rounds[r] = st
            actions.append(Persist((NewRound(r, RoundStatus.OPEN, now),)))
        return [*actions, Reply(RoundKeys(r, ()))]

    def on_abort_round(self, frame: AbortRound, now: float) -> list[Action]:
        """Event: ``abort-round``: the round ends without a batch; the application is told."""
        r = frame.round_id
        refuse_forgotten(self.forgotten, r)
        st = self.rounds.get(r)
        if st is None:
            st = RoundState(r, RoundStatus.ABORTED, now)
            self.rounds[r] = st
            persist = Persist((NewRound(r, RoundStatus.ABORTED, now),))
        elif st.status is RoundStatus.OPEN:
            st.status = advance(self.role, st.status, RoundStatus.ABORTED)
            st.batch = None
            st.chunk_payloads.clear()
            persist = Persist((DropIntake(r), SetRound(r, status=RoundStatus.ABORTED)))
        elif st.status is RoundStatus.ABORTED:
            return [Reply(Aborted(r))]
        else:
            raise RoundClosed(f"round {r} is {st.status.value} here")
        return [persist, Reply(Aborted(r)), Deliver(r, None, frame.reason)]

    def _receive(self, st: RoundState, batch: Batch) -> list[Action]:
        return self.chunk_ready(st, batch, batch.payloads, 0)

    def persisted(self, token: object, now: float) -> list[Action]:
        """Event: a :class:`Persist` with ``token`` committed."""
        actions = self.chunk_persisted(token)
        if actions is None:
            raise TypeError(f"unknown token {token!r}")
        return actions

    def persist_failed(self, token: object, now: float) -> list[Action]:
        """Event: a :class:`Persist` with ``token`` failed.

        :raises InternalError: always (the last mix sends the chunk again).
        """
        self.chunk_failed(token)
        return []  # pragma: no cover - chunk_failed raises

    def _batch_complete(self, st: RoundState, payloads: Sequence[bytes]) -> list[Action]:
        assert st.batch is not None
        count = st.batch.count or 0
        st.batch = None
        st.chunk_payloads.clear()
        return [
            Persist((SetRound(st.round_id, status=RoundStatus.CLOSED, clients=st.clients),)),
            Deliver(
                st.round_id,
                DeliveredBatch(st.clients or 0, count, payloads, st.excluded),
            ),
        ]

    def delivered(self, round_id: int, result: Mapping[str, object]) -> list[Action]:
        """Event: the application's ``result`` for the round (a JSON-able mapping)."""
        st = self.rounds[round_id]
        writes: list[PutResult | SetRound | DropIntake] = [PutResult(round_id, result)]
        if st.status is RoundStatus.CLOSED:
            st.status = advance(self.role, st.status, RoundStatus.DONE)
            writes += [SetRound(round_id, status=RoundStatus.DONE), DropIntake(round_id)]
        self.results[round_id] = result
        return [Persist(tuple(writes)), Publish(round_id)]

    @classmethod
    def restore(
        cls, records: NodeRecords, now: float, *, predecessor: str, item_length: int
    ) -> tuple[SinkMachine, list[Action]]:
        """Rebuild the machine from what the store holds, and the actions that resume
        unfinished work: a complete or ``CLOSED`` round's batch is delivered again (the
        application's analysis must be a pure function of the batch), an aborted round
        without a stored result is reported to the application again."""
        m = cls(predecessor=predecessor, item_length=item_length)
        actions: list[Action] = []
        for rec in records.rounds:
            r = rec.round_id
            st = RoundState(r, rec.status, rec.opened_at, clients=rec.clients)
            m.rounds[r] = st
            if r in records.results:
                m.results[r] = records.results[r]
            if rec.status in (RoundStatus.OPEN, RoundStatus.CLOSED):
                st.status = RoundStatus.OPEN
                if m._restore_intake(st, records):
                    actions += m._complete(st)
            elif rec.status is RoundStatus.ABORTED and r not in records.results:
                actions.append(Deliver(r, None))
        return m, actions
