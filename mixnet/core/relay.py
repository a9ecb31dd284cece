"""The round machine of a mix after the entry mix (a relay, or the last mix).

Life of a round at a relay, and at the last mix (which holds its batch until the trace)::

    OPEN --last chunk stored--> CLOSED --mixed--> MIXED --last ack--> FORWARDED
      \\--abort-round--> ABORTED                   --exclude passed--> CONFIRMED | ABORTED

    OPEN --> CLOSED --> MIXED --exclude--> RELEASED --last ack--> CONFIRMED
                            \\--exclude (abort)--> ABORTED

``open-round`` makes the round key (injected :data:`~mixnet.core.rounds.KeyFactory`), stores
it, passes the request down the chain and answers with this node's and every later node's
signed keys. Chunks of the predecessor's batch are checked, replayed ciphertexts dropped
(each item is hashed once: its Merkle leaf serves the signature check and, cut to 16 bytes,
the replay filter, :func:`~mixnet.core.digests.replay_digests`), the rest peeled, stored and
acknowledged (:mod:`mixnet.core.downstream`); the complete batch is permuted and forwarded
like the entry mix's (the last mix holds it). The trace is :mod:`mixnet.core.tracing`'s, the
exclusions :mod:`mixnet.core.exclusion`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from mixnet.blame import PayloadValidator, accept_all
from mixnet.chunk_signature import leaf_hashes
from mixnet.core.actions import Action, Peel, Persist, Reply, Send
from mixnet.core.deliveries import ChunkSigning
from mixnet.core.digests import replay_digests
from mixnet.core.downstream import ChunkReceiver
from mixnet.core.exclusion import ExcludingMix
from mixnet.core.items import Items
from mixnet.core.outbound import derive_outbound
from mixnet.core.records import EraseKey, NewRound, NodeRecords, OutboundBatch, SetRound
from mixnet.core.rounds import (
    KeyFactory,
    MixRounds,
    RoundState,
    prune_rounds,
    refuse_forgotten,
)
from mixnet.core.status import Role, RoundStatus
from mixnet.errors import InternalError, MixnetError, RoundClosed
from mixnet.frames import (
    Aborted,
    AbortRound,
    Accused,
    Batch,
    BatchAck,
    Exclude,
    Excluded,
    Frame,
    OpenRound,
    RoundKeys,
    Trace,
)

__all__ = ["ChunkPeeled", "RelayMachine"]

#: Statuses in which a mix holds a round's whole batch, key and intake.
_HELD = frozenset({RoundStatus.CLOSED, RoundStatus.MIXED, RoundStatus.FORWARDED})


@dataclass(frozen=True)
class ChunkPeeled:
    """Token of the :class:`Peel` of a chunk: ``replayed`` items were dropped before it;
    ``digests`` are those of the items it brought into the replay filter; ``items`` are
    the items peeled (the results are aligned with them); ``received`` is the chunk as it
    came (stored with it for the trace when items were dropped; empty if none were)."""

    batch: Batch
    replayed: int
    digests: bytes = b""
    items: Sequence[bytes] = ()
    received: Sequence[bytes] = ()


class RelayMachine(ChunkReceiver, ExcludingMix):
    """The rounds of mix ``name`` at position ``hop`` (>= 1) whose predecessor is
    ``predecessor`` and successor ``successor``; items arrive ``item_length`` bytes long.
    With ``last`` it is the chain's last mix: it checks its plaintext outputs with
    ``validator`` (the application's) and holds them until the trace is done."""

    def __init__(
        self,
        *,
        name: str,
        predecessor: str,
        item_length: int,
        chunk_size: int,
        keys: KeyFactory,
        hop: int = 1,
        successor: str = "",
        last: bool = False,
        validator: PayloadValidator = accept_all,
        proven: bool = False,
        signing: ChunkSigning | None = None,
    ) -> None:
        """``proven``: the chain's layers carry ownership proofs, so inputs that do not peel
        are kept for the trace (:mod:`mixnet.core.tracing`) instead of only counted.
        ``signing``: sign outbound chunks and check inbound ones
        (:mod:`mixnet.core.deliveries`)."""
        MixRounds.__init__(self, name=name, chunk_size=chunk_size, keys=keys, signing=signing)
        self.proven = proven
        self.role = Role.LAST if last else Role.RELAY
        self.predecessor = predecessor
        self.successor = successor
        self.item_length = item_length
        self.hop = hop
        self.validator = validator

    # ------------------------------------------------------------------ opening, aborting

    def on_open_round(self, frame: OpenRound, now: float) -> list[Action]:
        """Event: ``open-round`` from the predecessor (idempotent while the round is open).

        :raises RoundClosed: the round is past intake or aborted here.
        """
        r = frame.round_id
        refuse_forgotten(self.forgotten, r)
        st = self.rounds.get(r)
        if st is not None and st.status is not RoundStatus.OPEN:
            raise RoundClosed(f"round {r} is {st.status.value} here")
        actions: list[Action] = []
        if st is None:
            prune_rounds(self.rounds, r, self.forgotten)
            key = self.keys(r)
            st = RoundState(r, RoundStatus.OPEN, now, (key.announcement,))
            st.batch = self._new_intake(r)
            self.rounds[r] = st
            actions.append(
                Persist((NewRound(r, RoundStatus.OPEN, now, key.secret, (key.announcement,)),))
            )
        return [*actions, Send(OpenRound(r))]

    def on_abort_round(self, frame: AbortRound, now: float) -> list[Action]:
        """Event: ``abort-round`` from the predecessor; passed down the chain, answered
        once the successor answered."""
        r = frame.round_id
        refuse_forgotten(self.forgotten, r)
        st = self.rounds.get(r)
        actions: list[Action] = []
        if st is None:
            st = RoundState(r, RoundStatus.ABORTED, now)
            self.rounds[r] = st
            actions.append(Persist((NewRound(r, RoundStatus.ABORTED, now),)))
        elif st.status is RoundStatus.OPEN:
            self._move(st, RoundStatus.ABORTED)
            actions.append(self._erase_and(st, RoundStatus.ABORTED))
        elif st.status is not RoundStatus.ABORTED:
            raise RoundClosed(f"round {r} is {st.status.value} here")
        return [*actions, Send(AbortRound(r))]

    def on_reply(self, sent: Frame, reply: Frame, now: float) -> list[Action]:
        """Event: the successor answered ``sent`` with ``reply``."""
        if isinstance(sent, OpenRound) and isinstance(reply, RoundKeys):
            st = self.rounds.get(sent.round_id)
            if st is None or reply.round_id != sent.round_id or not st.announcements:
                raise InternalError("successor announced keys for another round")
            # this mix's key and every later one's: the trace checks their proofs
            st.announcements = (st.announcements[0], *reply.announcements)
            r = sent.round_id
            return [
                Persist((SetRound(r, announcements=st.announcements),)),
                Reply(RoundKeys(r, st.announcements)),
            ]
        if isinstance(sent, AbortRound) and isinstance(reply, Aborted):
            st = self.rounds.get(sent.round_id)
            if st is not None and st.abort_reply:  # the abort came with an exclude
                st.abort_reply = False
                return [Reply(Excluded(sent.round_id))]
            return [Reply(Aborted(sent.round_id))]
        if isinstance(sent, Trace) and isinstance(reply, Accused):
            return self._traced(sent, reply)
        if isinstance(sent, Exclude) and isinstance(reply, Excluded):
            if reply.round_id != sent.round_id:
                raise InternalError("successor confirmed another round")
            return self._excluded(sent, reply)
        if isinstance(sent, Batch) and isinstance(reply, BatchAck):
            if (reply.round_id, reply.index) != (sent.round_id, sent.index):
                raise InternalError("successor acknowledged another chunk")
            return self._batch_acked(reply)
        return []

    def on_send_error(self, sent: Frame, error: MixnetError, now: float) -> list[Action]:
        """Event: the successor refused ``sent``. A refused ``open-round``, ``abort-round``,
        ``trace`` or ``exclude`` is passed back to the predecessor (raised); a refused chunk
        is sent again later (:meth:`~mixnet.core.rounds.MixRounds.chunk_refused`)."""
        if isinstance(sent, OpenRound | AbortRound | Trace | Exclude):
            raise error
        if isinstance(sent, Batch):
            return self.chunk_refused(sent, now)
        return []

    # ------------------------------------------------------------------ intake

    def _receive(self, st: RoundState, batch: Batch) -> list[Action]:
        """Check the chunk's signature (:class:`BadSignature` if it fails; nothing is kept),
        keep it for deliveries, drop replays and peel the rest."""
        assert st.batch is not None
        received = Items.of(batch.payloads, self.item_length)  # one contiguous copy
        # each item is hashed once: its Merkle leaf serves the signature and the replay filter
        leaves = leaf_hashes(received)
        if self.signing is not None:
            self.signing.check(batch.round_id, batch.sender, batch.index, received,
                               batch.signature, leaves=leaves)  # fmt: skip
        # the digests this chunk added to the filter are stored with it, so that a restart
        # rebuilds the filter
        positions, digests = st.batch.seen.admit(replay_digests(leaves), batch.index)
        unique = received if len(positions) == len(received) else received.take(positions)
        token = ChunkPeeled(batch, len(received) - len(positions), digests, unique, received)
        return [Peel(batch.round_id, unique, token)]

    def peeled(
        self, token: object, results: Sequence[bytes | MixnetError], now: float
    ) -> list[Action]:
        """Event: the adapter peeled a chunk (items that fail to peel are dropped and
        counted; the sink then sees fewer items than the batch declared)."""
        if not isinstance(token, ChunkPeeled):
            raise TypeError(f"not a chunk token: {token!r}")
        st = self.rounds[token.batch.round_id]
        if len(results) != len(token.items):
            raise InternalError("the peel returned another number of items")
        items = token.items
        inputs: Sequence[bytes]
        # the common case: every item peeled (a chunk from the worker processes says so by
        # coming back as Items, which hold nothing but bytes)
        if isinstance(results, Items) or all(isinstance(p, bytes) for p in results):
            kept = cast("Sequence[bytes]", results)
            inputs = items
        else:
            ok = [i for i, p in enumerate(results) if isinstance(p, bytes)]
            kept = [p for p in results if isinstance(p, bytes)]
            if self.proven:  # kept for the trace (after a restart derived from the store)
                good = set(ok)
                failed = tuple(items[i] for i in range(len(results)) if i not in good)
                st.chunk_failed[token.batch.index] = failed
            inputs = (
                items.take(np.asarray(ok, dtype=np.intp))
                if isinstance(items, Items)
                else [items[i] for i in ok]
            )
        dropped = token.replayed + len(results) - len(kept)
        # the chunk as received is stored for the trace only if it differs from the inputs
        received = token.received if dropped else ()
        return self.chunk_ready(st, token.batch, kept, dropped, token.digests, inputs, received)

    def persisted(self, token: object, now: float) -> list[Action]:
        """Event: a :class:`Persist` with ``token`` committed."""
        actions = self.chunk_persisted(token)
        if actions is None:
            raise TypeError(f"unknown token {token!r}")
        st = self.rounds.get(getattr(token, "round_id", -1))
        if st is not None and st.batch is None and st.held_since is None:
            st.held_since = now  # the whole batch is here: the trace clock starts
        return actions

    def persist_failed(self, token: object, now: float) -> list[Action]:
        """Event: a :class:`Persist` with ``token`` failed.

        :raises InternalError: always (the predecessor sends the chunk again).
        """
        self.chunk_failed(token)
        return []  # pragma: no cover - chunk_failed raises

    def _batch_complete(self, st: RoundState, payloads: list[bytes]) -> list[Action]:
        st.batch = None
        self._note_duplicates(st, [payloads])
        return [
            Persist((SetRound(st.round_id, status=RoundStatus.CLOSED, clients=st.clients),)),
            *self._start_mix(st, self._to_mix(st, payloads), st.clients or 0),
        ]

    @staticmethod
    def _to_mix(st: RoundState, payloads: Sequence[bytes]) -> Sequence[bytes]:
        """What of the round's outputs ``payloads`` (in chunk order) is mixed: all but the
        duplicates (no copy goes on: the trace accuses the inputs that made them)."""
        if not st.duplicates:
            return payloads
        keep = [i for i, p in enumerate(payloads) if p not in st.duplicates]
        if isinstance(payloads, Items):
            return payloads.take(np.asarray(keep, dtype=np.intp))
        return [payloads[i] for i in keep]

    def _stored_outbound(self, st: RoundState, records: NodeRecords) -> OutboundBatch:
        """Recovery of a mixed round (its outputs held again, :meth:`_restore_held`): its
        stored outbound batch, derived again from its outputs if the store kept its seed."""
        stored = records.outbound[st.round_id]
        if isinstance(stored, OutboundBatch):
            return stored
        outputs = Items.of([p for i in sorted(st.chunk_payloads) for p in st.chunk_payloads[i]])
        return derive_outbound(stored, self._to_mix(st, outputs))

    # ------------------------------------------------------------------ recovery

    @classmethod
    def restore(
        cls,
        records: NodeRecords,
        now: float,
        *,
        name: str,
        predecessor: str,
        item_length: int,
        chunk_size: int,
        keys: KeyFactory,
        hop: int = 1,
        successor: str = "",
        last: bool = False,
        validator: PayloadValidator = accept_all,
        proven: bool = False,
        signing: ChunkSigning | None = None,
    ) -> tuple[RelayMachine, list[Action]]:
        """Rebuild the machine from what the store holds, and the actions that resume
        unfinished work: an ``OPEN`` round whose chunks are all stored, or a ``CLOSED``
        round, is mixed; a ``MIXED`` relay round's forwarding continues (the last mix holds
        its batch and its intake for the trace, as a ``FORWARDED`` relay does); a
        ``RELEASED`` round's forwarding to the sink continues; a finished round's key, if
        one is left, is erased."""
        m = cls(
            name=name,
            predecessor=predecessor,
            item_length=item_length,
            chunk_size=chunk_size,
            keys=keys,
            hop=hop,
            successor=successor,
            last=last,
            validator=validator,
            proven=proven,
            signing=signing,
        )
        actions: list[Action] = []
        for rec in records.rounds:
            r = rec.round_id
            st = RoundState(r, rec.status, rec.opened_at, rec.announcements, clients=rec.clients)
            m.rounds[r] = st
            if rec.status is RoundStatus.OPEN:
                if m._restore_intake(st, records):
                    actions += m._complete(st)
            elif rec.status is RoundStatus.CLOSED:
                st.status = RoundStatus.OPEN
                if m._restore_intake(st, records):
                    actions += m._complete(st)
            elif rec.status is RoundStatus.MIXED and r in records.outbound:
                m._restore_held(st, records)
                if last:
                    st.outbound = m._stored_outbound(st, records)
                else:
                    actions += m._resume_outbound(st, m._stored_outbound(st, records))
            elif rec.status is RoundStatus.FORWARDED:
                m._restore_held(st, records)
            elif rec.status is RoundStatus.RELEASED and r in records.outbound:
                released = records.outbound[r]
                if not isinstance(released, OutboundBatch):  # only the last mix releases
                    raise ValueError(f"round {r}: a released batch is stored whole")
                actions += m._resume_outbound(st, released)
            elif rec.secret_key is not None and rec.status in (
                RoundStatus.CONFIRMED,
                RoundStatus.ABORTED,
            ):
                actions.append(Persist((EraseKey(r),)))
            if st.batch is None and st.status in _HELD:
                st.held_since = now  # the trace clock restarts with the node
            # inputs that did not peel were kept in memory: the trace derives them from the
            # stored chunks (intake_loaded), so that it still accuses them
            st.failures_on_disk = proven and st.dropped > 0
        return m, actions
