"""Batch intake shared by every node after the entry mix (relays and the sink).

A ``batch`` chunk goes :meth:`ChunkReceiver.on_batch` (checks; a chunk already stored is
acknowledged again once it is on disk) → the role's transform (a relay peels, the sink keeps
the items) → :meth:`ChunkReceiver.chunk_ready` (asks to store it) → ``persisted`` (counts it,
acknowledges it, and when the last chunk is in, hands the batch on). Chunks are acknowledged
only after they are stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from mixnet.core.actions import Action, Persist, Reply
from mixnet.core.intake import BatchIntake
from mixnet.core.items import Items
from mixnet.core.records import AddChunk, Chunk, NodeRecords
from mixnet.core.rounds import RoundState
from mixnet.core.status import Role, RoundStatus, advance
from mixnet.errors import InternalError, UnknownRound
from mixnet.frames import Batch, BatchAck

__all__ = ["AwaitChunk", "ChunkReceiver", "ChunkStored"]


@dataclass(frozen=True)
class ChunkStored:
    """Token of the :class:`Persist` of a received chunk."""

    round_id: int
    chunk: Chunk


@dataclass(frozen=True)
class AwaitChunk:
    """Token of an empty :class:`Persist` that lets a repeated chunk wait for its original."""

    round_id: int
    index: int


#: Statuses in which a round's whole batch is already here (a repeated chunk is acknowledged).
_PAST_INTAKE = frozenset(
    {
        RoundStatus.CLOSED,
        RoundStatus.MIXED,
        RoundStatus.FORWARDED,
        RoundStatus.RELEASED,
        RoundStatus.CONFIRMED,
        RoundStatus.DONE,
    }
)


class ChunkReceiver:
    """Mixin: the batch intake of a relay or the sink. Subclasses set ``role``,
    ``predecessor``, ``item_length`` and ``rounds`` and implement :meth:`_receive` (what to do
    with a fresh, checked chunk) and :meth:`_batch_complete`."""

    role: Role
    predecessor: str
    item_length: int
    rounds: dict[int, RoundState]

    def _new_intake(self, round_id: int) -> BatchIntake:
        return BatchIntake(round_id, self.predecessor, self.item_length)

    def on_batch(self, batch: Batch) -> list[Action]:
        """Event: a ``batch`` chunk from the (authenticated) predecessor.

        :raises UnknownRound: the round is not open here, or the sender is not the
            predecessor.
        :raises WrongCount, BadLength: the chunk disagrees with the batch's counts.
        """
        st = self.rounds.get(batch.round_id)
        if st is None or st.batch is None:
            if st is not None and st.status in _PAST_INTAKE and batch.sender == self.predecessor:
                return [Reply(BatchAck(batch.round_id, batch.index))]  # a retry
            raise UnknownRound(f"round {batch.round_id} is not open here")
        fresh = st.batch.check(
            batch.sender, batch.index, batch.chunks, batch.clients, batch.count, batch.payloads
        )
        if not fresh:  # stored and counted: acknowledge again
            return [Reply(BatchAck(batch.round_id, batch.index))]
        # a copy still being processed (its sender lost the connection and resent it) is
        # processed again; the store keeps one, and chunk_ready makes the later one wait
        return self._receive(st, batch)

    def _receive(self, st: RoundState, batch: Batch) -> list[Action]:
        raise NotImplementedError

    def chunk_ready(
        self,
        st: RoundState,
        batch: Batch,
        kept: Sequence[bytes],
        dropped: int,
        digests: bytes = b"",
        inputs: Sequence[bytes] = (),
        received: Sequence[bytes] = (),
    ) -> list[Action]:
        """Ask to store a transformed chunk (``kept`` items, ``dropped`` lost ones, and at a
        mix the ``inputs`` they were peeled from, the chunk as ``received`` if that differs,
        and the sender's signature); a copy of a chunk already on its way to the store
        waits for that one (writes commit in order) and is then acknowledged. Only the
        outputs stay in memory: a mix's inputs are read back from the store for a trace
        (:meth:`~mixnet.core.tracing.TracingMix.intake_loaded`)."""
        if st.batch is not None and batch.index in st.batch.received:
            return [Reply(BatchAck(batch.round_id, batch.index))]
        if batch.index in st.in_flight:
            return [Persist((), token=AwaitChunk(batch.round_id, batch.index))]
        if st.batch is None:
            if st.status in _PAST_INTAKE:  # the first copy completed the batch meanwhile
                return [Reply(BatchAck(batch.round_id, batch.index))]
            raise UnknownRound(f"round {batch.round_id} is not open here")  # aborted
        st.batch.reserve(
            batch.index, batch.chunks, batch.clients, batch.count, len(batch.payloads)
        )
        st.in_flight.add(batch.index)
        outputs = st.batch.keep(batch.index, kept)
        chunk = Chunk(
            sender=batch.sender,
            index=batch.index,
            chunks=batch.chunks,
            clients=batch.clients,
            count=batch.count,
            dropped=dropped,
            payloads=outputs,
            digests=digests,
            inputs=inputs if len(inputs) else (),
            excluded=batch.excluded,
            signature=(batch.signature or b"") if len(inputs) or len(received) else b"",
            received=received,
        )
        return [
            Persist((AddChunk(st.round_id, chunk),), token=ChunkStored(st.round_id, chunk))
        ]

    def chunk_persisted(self, token: object) -> list[Action] | None:
        """Handle a chunk token's commit; ``None`` if ``token`` is not a chunk token."""
        if isinstance(token, AwaitChunk):
            st = self.rounds.get(token.round_id)
            if st is not None and (
                st.status in _PAST_INTAKE
                or (st.batch is not None and token.index in st.batch.received)
            ):
                return [Reply(BatchAck(token.round_id, token.index))]
            raise InternalError("the chunk could not be stored; send it again")
        if not isinstance(token, ChunkStored):
            return None
        st = self.rounds[token.round_id]
        chunk = token.chunk
        st.in_flight.discard(chunk.index)
        if st.batch is None:  # the round was aborted meanwhile
            return [Reply(BatchAck(token.round_id, chunk.index))]
        outcome = st.batch.record(
            chunk.index,
            chunk.chunks,
            chunk.clients,
            chunk.count,
            len(chunk.payloads) + chunk.dropped,
            chunk.dropped,
        )
        self._keep(st, chunk)
        actions: list[Action] = [Reply(BatchAck(token.round_id, chunk.index))]
        if outcome == "complete":
            actions += self._complete(st)
        return actions

    @staticmethod
    def _keep(st: RoundState, chunk: Chunk) -> None:
        """Hold a stored chunk's outputs in memory (until the round's trace is done); its
        inputs stay on disk."""
        st.chunk_payloads[chunk.index] = chunk.payloads
        st.dropped += chunk.dropped
        st.excluded = chunk.excluded

    def chunk_failed(self, token: object) -> None:
        """Handle a chunk token's failed write.

        :raises InternalError: always (the predecessor gets an error and sends it again).
        """
        if isinstance(token, ChunkStored):
            st = self.rounds.get(token.round_id)
            if st is not None:
                st.in_flight.discard(token.chunk.index)
                if st.batch is not None:
                    st.batch.release(token.chunk.index)
        raise InternalError("the node could not store the chunk; send it again")

    def _complete(self, st: RoundState) -> list[Action]:
        assert st.batch is not None
        st.status = advance(self.role, st.status, RoundStatus.CLOSED)
        st.clients = st.batch.clients or 0
        order = sorted(st.chunk_payloads)
        payloads = st.batch.outputs_in_order(order)
        if payloads is None:  # chunks read back after a restart: one copy
            payloads = Items.of([p for i in order for p in st.chunk_payloads[i]])
        else:
            st.chunk_payloads.update(
                (i, view) for i, view in st.batch.output_views().items() if i in st.chunk_payloads
            )
        st.batch.seen.clear()  # the replay filter is done with
        # the batch is handed on as a Sequence; RelayMachine._batch_complete declares
        # list[bytes] but only passes it to _start_mix, which takes any Sequence[bytes]
        return self._batch_complete(st, cast("list[bytes]", payloads))

    def _batch_complete(self, st: RoundState, payloads: list[bytes]) -> list[Action]:
        """The whole batch is stored: ``payloads`` (a ``Sequence[bytes]``, in chunk order)."""
        raise NotImplementedError

    def _restore_intake(self, st: RoundState, records: NodeRecords) -> bool:
        """Recovery: rebuild an open round's intake from its stored chunks; True if the
        batch is complete."""
        st.batch = self._new_intake(st.round_id)
        st.dropped = 0
        for chunk in records.chunks.get(st.round_id, ()):
            if chunk.sender != self.predecessor:
                continue
            st.batch.record(
                chunk.index,
                chunk.chunks,
                chunk.clients,
                chunk.count,
                len(chunk.payloads) + chunk.dropped,
                chunk.dropped,
            )
            self._keep(st, chunk)
            st.batch.seen.setdefault_many(chunk.digests, chunk.index)
        return st.batch.complete
