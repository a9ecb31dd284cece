"""What every round machine shares: per-round state, status changes through the transition
table, and a mix's outbound half (mixing and acknowledged, chunked forwarding).

A machine is driven by calling its event methods; each returns the list of
:mod:`~mixnet.core.actions` its adapter must carry out, in order. Methods raise
:class:`~mixnet.errors.MixnetError` subclasses for a request the node must refuse (the adapter
answers with an error frame); a refused request changes no state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mixnet.core.actions import Action, Mix, Persist, Send
from mixnet.core.deliveries import ChunkSigning, ReceivedChunk
from mixnet.core.digests import DigestSet
from mixnet.core.intake import BatchIntake, EntryIntake
from mixnet.core.item_index import ItemIndex, PairIndex
from mixnet.core.items import Items
from mixnet.core.receipts import ReceiptTable
from mixnet.core.records import (
    AckOutbound,
    DropIntake,
    DropOutbound,
    EraseKey,
    OutboundBatch,
    OutboundChunk,
    PutOutbound,
    SetRound,
    Write,
)
from mixnet.core.status import TERMINAL, Role, RoundStatus, advance
from mixnet.core.submissions import SubmissionTable
from mixnet.core.trace_pages import EntryTrace, ExclusionPages, OwnAccusations
from mixnet.errors import RoundClosed
from mixnet.frames import Batch, BatchAck
from mixnet.keys import RoundKeyAnnouncement

__all__ = [
    "KEEP_ROUNDS",
    "KeyFactory",
    "MixRounds",
    "RoundKey",
    "RoundState",
    "prune_rounds",
    "refuse_forgotten",
]

#: Finished rounds a relay or the sink keeps in memory behind the newest round it opened
#: (their records stay in the store).
KEEP_ROUNDS = 16
#: Seconds before a chunk the successor refused (e.g. it could not store it) is sent again,
#: doubling with each refusal in a row up to :data:`CHUNK_RETRY_CAP`.
CHUNK_RETRY = 1.0
CHUNK_RETRY_CAP = 30.0


@dataclass(frozen=True)
class RoundKey:
    """A fresh round key: the 32-byte X25519 secret and its signed announcement."""

    secret: bytes
    announcement: RoundKeyAnnouncement


#: Makes the key of a round (the adapter's is X25519 from the OS CSPRNG, signed with the
#: node's identity); injected so that the machines stay free of crypto and randomness.
KeyFactory = Callable[[int], RoundKey]


@dataclass
class RoundState:
    """One round at one node (in memory; the store holds what survives a restart)."""

    round_id: int
    status: RoundStatus
    opened_at: float
    announcements: tuple[RoundKeyAnnouncement, ...] = ()
    entry: EntryIntake | None = None
    #: entry mix: stored submissions' payloads by client, in acceptance order (one buffer)
    submissions: SubmissionTable = field(default_factory=SubmissionTable)
    #: entry mix: submissions accepted but not yet stored, by client
    pending: dict[str, tuple[bytes, ...]] = field(default_factory=dict)
    #: entry mix: client -> digest of every stored submission (kept after the intake,
    #: compacted once the round is confirmed)
    receipts: ReceiptTable = field(default_factory=ReceiptTable)
    #: entry mix: digests of the peeled payloads of the round's accepted submissions (equal
    #: onions peel to equal payloads, so this refuses a replay, also after a restart)
    payload_digests: DigestSet = field(default_factory=DigestSet)
    batch: BatchIntake | None = None
    #: relay and sink: stored chunks' payloads by chunk index (views of the round's buffer)
    chunk_payloads: dict[int, Sequence[bytes]] = field(default_factory=dict)
    #: relay: stored chunks' input ciphertexts by chunk index (aligned with the payloads),
    #: read back from the store for a trace that needs them (``intake_loaded``)
    chunk_inputs: dict[int, Sequence[bytes]] = field(default_factory=dict)
    #: relay and sink: items of stored chunks dropped (replays, items that did not peel)
    dropped: int = 0
    #: relay on a chain with ownership proofs: inputs that did not peel, by chunk index
    #: (kept as they peel; after a restart derived from the stored chunks, see below)
    chunk_failed: dict[int, tuple[bytes, ...]] = field(default_factory=dict)
    #: relay on a chain with ownership proofs, restarted: chunks it had stored dropped items,
    #: so some inputs that did not peel may be on disk only (derived with ``intake_loaded``)
    failures_on_disk: bool = False
    #: relay (not the last mix): onions that more than one input peeled to (a client made
    #: them collide); every copy is left out of the batch, and their inputs are accused
    #: (``duplicate``) in the trace. Recomputed from the stored outputs after a restart.
    duplicates: set[bytes] = field(default_factory=set)
    #: relay: received chunks as signed, by index, for deliveries in the trace (read back
    #: from the store with ``chunk_inputs``)
    received: dict[int, ReceivedChunk] = field(default_factory=dict)
    #: relay: ``chunk_inputs`` and ``received`` were read back from the store (memory only;
    #: until then a relay holds only its outputs)
    intake_loaded: bool = False
    #: the sink: submissions the chain excluded (from the batch's chunks)
    excluded: int = 0
    #: entry mix: when to send ``trace`` again (unix seconds), while the chain is not ready
    trace_at: float | None = None
    #: forwarding: when to send the chunk the successor refused again (unix seconds), and
    #: how many refusals in a row (memory only: a restart resends at once)
    resend_at: float | None = None
    refusals: int = 0
    #: entry mix: answers to ``trace`` or ``exclude`` in a row that waiting does not mend
    #: (unreadable, too large, the round unknown; memory only, see ``TRACE_GIVE_UP``)
    trace_failures: int = 0
    #: last mix: the round was aborted by an ``exclude``, answered once the sink answers
    abort_reply: bool = False
    #: last mix: its ``trace`` found every payload of the round valid (so releasing it
    #: unchanged need not run the validator over them again; memory only)
    all_valid: bool = False
    #: relay and last mix: when (unix seconds) its whole batch was here; the trace must end
    #: within :data:`~mixnet.core.tracing.TRACE_TIMEOUT` of it
    held_since: float | None = None
    #: relay and sink: chunk indices whose store write is emitted but not yet committed
    in_flight: set[int] = field(default_factory=set)
    clients: int | None = None
    outbound: OutboundBatch | None = None
    acked: set[int] = field(default_factory=set)
    #: mixes: signatures made off the event loop, by outbound chunk index: (the chunk's
    #: ``payloads`` object they were made over, the signature); used only for that object
    signatures: dict[int, tuple[object, bytes]] = field(default_factory=dict)
    #: relay and last mix: its own accusations in the trace, in pages (computed once the
    #: trace asks; memory only)
    own_accused: OwnAccusations | None = None
    #: relay and last mix: ``chunk_inputs`` and ``chunk_payloads`` indexed both ways for the
    #: trace's pages (built once the inputs are read back; memory only)
    pair_index: PairIndex | None = None
    #: relay and last mix: ``received``'s items indexed for the deliveries of the trace's
    #: pages (built on first use after the read-back; memory only)
    received_index: ItemIndex | None = None
    #: last mix: the pages of a paged ``exclude`` gathered so far (memory only)
    exclusion: ExclusionPages | None = None
    #: entry mix: its progress through the round's verdict (memory only)
    entry_trace: EntryTrace = field(default_factory=EntryTrace)

    def drop_held(self) -> None:
        """Forget what a mix after the entry holds for the round's trace (its intake, the
        trace's pages and indexes): the round's trace is over here, or the round ended."""
        self.chunk_payloads.clear()
        self.chunk_inputs.clear()
        self.chunk_failed.clear()
        self.duplicates.clear()
        self.received.clear()
        self.own_accused = self.exclusion = None
        self.pair_index = self.received_index = None


#: Ids of pruned rounds a machine remembers (to refuse them with a typed error; an older one
#: reopened by the predecessor meets the store's refusal instead).
FORGOTTEN_KEPT = 4096


def refuse_forgotten(forgotten: set[int], round_id: int) -> None:
    """Refuse a request about a round this node pruned from memory (finished; its record is
    in the store).

    :raises RoundClosed: so.
    """
    if round_id in forgotten:
        raise RoundClosed(f"round {round_id} is finished here")


def prune_rounds(
    rounds: dict[int, RoundState], newest: int, forgotten: set[int] | None = None
) -> list[int]:
    """Forget finished rounds more than :data:`KEEP_ROUNDS` older than ``newest``; returns
    their ids (added to ``forgotten``, which keeps the newest :data:`FORGOTTEN_KEPT`).
    Unfinished rounds are kept whatever their age."""
    old = [r for r, st in rounds.items() if r <= newest - KEEP_ROUNDS and st.status in TERMINAL]
    for r in old:
        del rounds[r]
    if forgotten is not None and old:
        forgotten.update(old)
        while len(forgotten) > FORGOTTEN_KEPT:
            forgotten.remove(min(forgotten))
    return old


class MixRounds:
    """State and outbound half shared by :class:`~mixnet.core.entry.EntryMachine` and
    :class:`~mixnet.core.relay.RelayMachine`."""

    role: Role

    def __init__(
        self,
        *,
        name: str,
        chunk_size: int,
        keys: KeyFactory,
        signing: ChunkSigning | None = None,
    ) -> None:
        self.name = name
        self.chunk_size = chunk_size
        self.keys = keys
        #: signing and checking chunks (:mod:`mixnet.core.deliveries`; ``None``: unsigned)
        self.signing = signing
        self.rounds: dict[int, RoundState] = {}
        #: rounds pruned from memory (see :func:`prune_rounds`)
        self.forgotten: set[int] = set()

    # ------------------------------------------------------------------ status

    def status(self, round_id: int) -> RoundStatus | None:
        """The round's status here, or ``None`` if this node never saw it."""
        st = self.rounds.get(round_id)
        return None if st is None else st.status

    def _move(self, st: RoundState, new: RoundStatus) -> None:
        st.status = advance(self.role, st.status, new)

    # ------------------------------------------------------------------ mixing

    def _start_mix(self, st: RoundState, payloads: Sequence[bytes], clients: int) -> list[Action]:
        """The intake of ``st`` is complete and stored: permute it."""
        st.clients = clients
        return [Mix(st.round_id, payloads, self.chunk_size)]

    def mixed(
        self,
        round_id: int,
        chunks: Sequence[Sequence[bytes]],
        signatures: Sequence[bytes] | None = None,
        *,
        seed: bytes | None = None,
    ) -> list[Action]:
        """Event: the adapter permuted the round's payloads and cut them into ``chunks``
        (and, if ``signatures`` are given, signed each chunk: ``signing.sign(round_id, i,
        chunks[i])``, off the event loop; used for the chunks passed as
        :class:`~mixnet.core.items.Items`, which the outbound batch holds as they are).
        ``seed``, if given, must be the seed the chunks were made from:
        ``chunks == permuted_chunks(payloads, seed, chunk_size)`` for the payloads and chunk
        size of the :class:`~mixnet.core.actions.Mix` action
        (:func:`~mixnet.core.outbound.permuted_chunks`).

        Stores the outbound batch (as its seed, if given, except at the last mix, which may
        have to replace its batch after an exclusion), keeps the intake and, at the entry
        mix, erases the round key in one transaction (status ``MIXED``), then sends the
        first chunk.
        """
        st = self.rounds[round_id]
        clients = st.clients or 0
        outbound = OutboundBatch(
            clients=clients,
            count=sum(len(c) for c in chunks),
            chunks=tuple(
                OutboundChunk(i, c if isinstance(c, Items) else tuple(c))
                for i, c in enumerate(chunks)
            ),
            seed=None if self.role is Role.LAST else seed,
        )
        self._move(st, RoundStatus.MIXED)
        st.outbound = outbound
        st.signatures.clear()
        if signatures is not None and len(signatures) == len(outbound.chunks):
            st.signatures.update(
                (c.index, (c.payloads, sig))
                for c, sig in zip(outbound.chunks, signatures, strict=True)
                if isinstance(c.payloads, Items)
            )
        st.entry = st.batch = None
        # the intake stays until the trace is done (it maps outputs back to inputs); the
        # entry mix proves nothing, so its key goes now; later mixes keep theirs to prove
        # their steps
        writes: list[Write] = [PutOutbound(round_id, outbound)]
        if self.role is Role.ENTRY:
            writes.append(EraseKey(round_id))
        writes.append(SetRound(round_id, status=RoundStatus.MIXED, clients=clients))
        persist = Persist(tuple(writes))
        if self.role is Role.LAST:  # held until the exclusions arrive
            return [persist]
        return [persist, *self._send_next(st)]

    # ------------------------------------------------------------------ forwarding

    def _send_next(self, st: RoundState) -> list[Action]:
        """Send the first unacknowledged chunk, or finish the round if every one is."""
        assert st.outbound is not None
        for chunk in st.outbound.chunks:
            if chunk.index not in st.acked:
                return [
                    Send(
                        Batch(
                            round_id=st.round_id,
                            sender=self.name,
                            index=chunk.index,
                            chunks=len(st.outbound.chunks),
                            clients=st.outbound.clients,
                            count=st.outbound.count,
                            payloads=tuple(chunk.payloads),
                            excluded=st.outbound.excluded,
                            signature=self._chunk_signature(st.round_id, chunk),
                        )
                    )
                ]
        done = RoundStatus.CONFIRMED if self.role is Role.LAST else RoundStatus.FORWARDED
        self._move(st, done)
        st.outbound = None
        st.acked.clear()
        st.signatures.clear()
        return [
            Persist(
                (DropOutbound(st.round_id, delivered=True), SetRound(st.round_id, status=done))
            ),
            *self._forwarded(st),
        ]

    def _chunk_signature(self, round_id: int, chunk: OutboundChunk) -> bytes | None:
        """This node's signature over an outbound chunk (``None`` without a signer)."""
        if self.signing is None or self.signing.sign is None:
            return None
        st = self.rounds.get(round_id)
        made = None if st is None else st.signatures.get(chunk.index)
        if made is not None and made[0] is chunk.payloads:  # made over this very chunk
            return made[1]
        return self.signing.sign(round_id, chunk.index, chunk.payloads)

    def _forwarded(self, st: RoundState) -> list[Action]:
        """The successor acknowledged the whole batch (the entry mix starts the trace)."""
        return []

    def _batch_acked(self, ack: BatchAck) -> list[Action]:
        st = self._forwarding(ack.round_id)
        if st is None or st.outbound is None:
            return []  # a late duplicate acknowledgement
        if ack.index in st.acked or ack.index >= len(st.outbound.chunks):
            return []
        st.acked.add(ack.index)
        st.refusals, st.resend_at = 0, None  # the next chunk goes now
        if len(st.acked) == len(st.outbound.chunks):
            return self._send_next(st)  # drops the outbound batch with the last ack
        return [Persist((AckOutbound(ack.round_id, ack.index),)), *self._send_next(st)]

    def _forwarding(self, round_id: int) -> RoundState | None:
        """The round, if this node is forwarding its batch (``None`` otherwise)."""
        st = self.rounds.get(round_id)
        forwarding = (RoundStatus.MIXED, RoundStatus.RELEASED)
        return st if st is not None and st.status in forwarding else None

    def chunk_refused(self, sent: Batch, now: float) -> list[Action]:
        """The successor answered chunk ``sent`` with an error (it could not store it, or
        refuses it): send it again after :data:`CHUNK_RETRY` seconds, doubling with each
        refusal in a row up to :data:`CHUNK_RETRY_CAP` (only one chunk is in flight, so
        nothing else is sent meanwhile)."""
        st = self._forwarding(sent.round_id)
        if st is None or st.outbound is None or sent.index in st.acked:
            return []
        st.refusals += 1
        st.resend_at = now + min(CHUNK_RETRY_CAP, CHUNK_RETRY * 2 ** (st.refusals - 1))
        return []

    def resend_timer(self) -> float | None:
        """When a refused chunk is due again (``None``: none is waiting)."""
        due = [st.resend_at for st in self.rounds.values() if st.resend_at is not None]
        return min(due, default=None)

    def handle_resend_timer(self, now: float) -> list[Action]:
        """Send again the refused chunks that are due."""
        actions: list[Action] = []
        for st in self.rounds.values():
            if st.resend_at is None or now < st.resend_at:
                continue
            st.resend_at = None
            if self._forwarding(st.round_id) is not None and st.outbound is not None:
                actions += self._send_next(st)
        return actions

    def _resume_outbound(self, st: RoundState, outbound: OutboundBatch) -> list[Action]:
        """Recovery: continue forwarding a stored outbound batch where it stopped."""
        st.outbound = outbound
        st.clients = outbound.clients
        st.acked = {c.index for c in outbound.chunks if c.acked}
        return self._send_next(st)

    def _erase_and(self, st: RoundState, status: RoundStatus) -> Persist:
        """The writes that end an unfinished round: drop intake, erase the key, set status."""
        st.entry = st.batch = None
        st.submissions.clear()
        st.pending.clear()
        st.drop_held()
        st.payload_digests.clear()
        return Persist(
            (
                DropIntake(st.round_id),
                EraseKey(st.round_id),
                SetRound(st.round_id, status=status),
            )
        )
