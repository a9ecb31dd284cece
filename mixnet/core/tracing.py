"""The trace at a mix after the entry mix: answering ``trace`` with proven accusations
(``docs/protocol.md``, "Trace and exclude"); the exclusion that follows it is
:mod:`mixnet.core.exclusion`.

A relay keeps its intake (the input ciphertexts and what they peeled to) and its round key
until the round's exclusions have passed: the outputs in memory, the inputs and the chunks
as signed on disk, read back (:class:`~mixnet.core.actions.LoadIntake`, then
:meth:`TracingMix.intake_loaded`) only when a step needs them. ``trace`` goes down the
chain; the last mix answers with one accusation per payload the application's validator
refuses, each backed by its own step (:class:`~mixnet.core.actions.Prove`); every relay on
the way back checks the accusations about its outputs
(:class:`~mixnet.core.actions.Verify`), finds the input each came from, adds its own step
and passes them back. It reveals an input only for an output whose accusation verified; a
successor whose accusation does not verify, or names an item this mix never sent, is blamed
(the round then aborts). A page's lookups from outputs to inputs and back go through the
round's :class:`~mixnet.core.item_index.PairIndex`, built once.

On a chain with ownership proofs (``proven``) a mix also accuses every input that did not
peel (``undecryptable`` or ``no-owner``, :func:`mixnet.blame.prove_failure`), and these are
traced back and excluded like refused payloads (a restarted relay derives them from its
stored chunks: :func:`unpeeled_inputs`). On any chain a relay accuses the inputs that peeled
to an onion another input also peeled to (``duplicate``; it left every copy out of its
batch, ``RoundState.duplicates``), each group whole or not at all. Items a mix dropped
without evidence (replays; without ownership proofs, layers that do not open) are counted as
``untraced``: the entry mix aborts a round that has any, as no honest link may be revealed
for them (``mixnet.blame``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from mixnet.blame import Accusation, Failure, PayloadValidator, Step, failure_of
from mixnet.chunk_signature import leaf_hashes
from mixnet.core.actions import Action, LoadIntake, Persist, Prove, Reply, Send, Verify
from mixnet.core.deliveries import (
    ReceivedChunk,
    deliveries,
    evidence_checked,
    judge_blame,
    received_index,
)
from mixnet.core.digests import DIGEST_LENGTH, replay_digests
from mixnet.core.item_index import PairIndex
from mixnet.core.items import repeated_items
from mixnet.core.records import (
    Chunk,
    DropIntake,
    EraseKey,
    NodeRecords,
    SetRound,
)
from mixnet.core.rounds import MixRounds, RoundState
from mixnet.core.status import Role, RoundStatus
from mixnet.core.trace_caps import accusation_cap
from mixnet.core.trace_pages import OwnAccusations, own_pages
from mixnet.core.trace_tokens import (
    BlameChecked,
    IntakeNeeded,
    TraceProved,
    TraceStep,
    TraceVerified,
)
from mixnet.core.validate import all_valid
from mixnet.errors import InternalError, MixnetError, NotReady, RoundClosed, UnknownRound
from mixnet.frames import Accused, Exclude, Trace

__all__ = ["TRACE_OVER", "TRACE_TIMEOUT", "TracingMix", "unpeeled_inputs"]

#: Seconds a mix after the entry keeps a round's key and intake for the trace once its whole
#: batch is here. A round whose ``exclude`` has not come by then is aborted here (the last
#: mix tells the sink), so an entry mix that never returns cannot make a mix keep keys forever.
TRACE_TIMEOUT = 3600.0


def unpeeled_inputs(chunk: Chunk) -> tuple[bytes, ...]:
    """The inputs of a stored chunk that did not peel, in the order received: the items it
    brought into the replay filter (its ``digests``; the others were replays) that are not
    among its ``inputs`` (those that peeled). What a relay on a chain with ownership proofs
    accuses as its own failures, derived from its store after a restart."""
    if not chunk.dropped:
        return ()
    received = chunk.as_received()
    brought = set(_each_digest(chunk.digests))
    peeled = set(map(bytes, chunk.inputs))
    failed: list[bytes] = []
    digests = _each_digest(replay_digests(leaf_hashes(received)))
    for item, digest in zip(received, digests, strict=True):
        if digest in brought and item not in peeled:
            brought.discard(digest)  # a repeat of it in the chunk was a replay
            failed.append(bytes(item))
    return tuple(failed)


def _each_digest(blob: bytes) -> list[bytes]:
    return [blob[at : at + DIGEST_LENGTH] for at in range(0, len(blob), DIGEST_LENGTH)]


#: Statuses in which a mix's part of the trace is over (a repeated request is answered
#: with nothing to add).
TRACE_OVER = frozenset({RoundStatus.RELEASED, RoundStatus.CONFIRMED, RoundStatus.ABORTED})


class TracingMix(MixRounds):
    """Mixin of :class:`~mixnet.core.relay.RelayMachine`: the trace, and the helpers the
    exclusion (:class:`~mixnet.core.exclusion.ExcludingMix`) shares. Subclasses set
    ``hop``, ``successor`` and ``validator``."""

    hop: int
    predecessor: str
    successor: str
    validator: PayloadValidator
    proven: bool

    if TYPE_CHECKING:  # the exclusion half (mixnet.core.exclusion.ExcludingMix)

        def on_exclude(self, frame: Exclude, now: float) -> list[Action]: ...

    # ------------------------------------------------------------------ helpers

    def _round(self, round_id: int) -> RoundState:
        st = self.rounds.get(round_id)
        if st is None:
            raise UnknownRound(f"round {round_id} is unknown here")
        return st

    @staticmethod
    def _index(st: RoundState) -> PairIndex:
        """The round's (input, output) pairs — ``chunk_inputs`` beside ``chunk_payloads``, in
        chunk order — indexed both ways (built on first use, kept until the intake is
        erased): a page's lookups without a scan of the round. Only once the inputs are read
        back (:meth:`_needs_intake`).

        :raises InternalError: the inputs are not read back.
        """
        if not st.intake_loaded:
            raise InternalError(f"round {st.round_id}'s inputs are not read back")
        if st.pair_index is None:
            st.pair_index = PairIndex(st.chunk_inputs, st.chunk_payloads)
        return st.pair_index

    @staticmethod
    def _needs_intake(st: RoundState, event: TraceStep, *args: object) -> list[Action]:
        """Nothing if the round's inputs are in memory; else the :class:`LoadIntake` after
        which :meth:`intake_loaded` runs ``event`` with ``args`` again. A relay keeps only
        its outputs in memory: its inputs (and the chunks as signed) are read back from the
        store when a trace needs them — a step to prove, an accusation to trace back, an
        exclusion to follow — which an honest round never does."""
        if st.intake_loaded:
            return []
        return [LoadIntake(st.round_id, IntakeNeeded(st.round_id, event, args))]

    def intake_loaded(self, token: object, chunks: Sequence[Chunk], now: float) -> list[Action]:
        """Event: the adapter read the round's stored ``chunks`` (:class:`LoadIntake` with
        ``token``): hold their inputs and the predecessor's signed chunks until the trace is
        over, and run the step that needed them again.

        :raises TypeError: ``token`` is not an :class:`IntakeNeeded`.
        """
        if not isinstance(token, IntakeNeeded):
            raise TypeError(f"not an intake token: {token!r}")
        st = self.rounds.get(token.round_id)
        if st is not None and not st.intake_loaded:
            if st.status not in TRACE_OVER:  # else erased meanwhile: nothing to hold
                for chunk in chunks:
                    if chunk.sender != self.predecessor or chunk.index not in st.chunk_payloads:
                        continue
                    if len(chunk.inputs):
                        st.chunk_inputs[chunk.index] = chunk.inputs
                    if chunk.signature:
                        st.received[chunk.index] = ReceivedChunk(
                            chunk.sender, chunk.index, chunk.as_received(), chunk.signature
                        )
                    if st.failures_on_disk and chunk.index not in st.chunk_failed:
                        failed = unpeeled_inputs(chunk)
                        if failed:
                            st.chunk_failed[chunk.index] = failed
            st.failures_on_disk = False
            st.pair_index = st.received_index = None  # built from what is held now
            st.intake_loaded = True  # whatever was found: the step runs once more, not again
        args = token.args
        if token.event == "trace":
            return self.on_trace(cast(Trace, args[0]), now)
        if token.event == "exclude":
            return self.on_exclude(cast(Exclude, args[0]), now)
        if token.event == "traced":
            return self._traced(cast(Trace, args[0]), cast(Accused, args[1]))
        return self.verified(args[0], cast("Sequence[bool]", args[1]), now)  # "verified"

    def _hop_keys(self, st: RoundState) -> dict[int, bytes]:
        """Hop → round public key of this mix and every later one (announced in order)."""
        return {self.hop + i: a.public_key for i, a in enumerate(st.announcements)}

    def _finish(self, st: RoundState, status: RoundStatus) -> Persist:
        """Erase the intake and the key: the trace is over here."""
        self._move(st, status)
        st.drop_held()
        return Persist(
            (DropIntake(st.round_id), EraseKey(st.round_id), SetRound(st.round_id, status=status))
        )

    # ------------------------------------------------------------------ trace

    def on_trace(self, frame: Trace, now: float) -> list[Action]:
        """Event: ``trace`` from the predecessor, for page ``frame.page`` of the accusations
        (:mod:`mixnet.core.trace_pages`): one of this mix's own pages, or — at a relay, past
        them — its successor's page traced back through it.

        :raises UnknownRound: the round is unknown here.
        :raises NotReady: the round is not past its batch here yet (ask again later).
        :raises RoundClosed: the round was aborted here (by the entry mix's abort, which its
            restart may not have stored, or after :data:`TRACE_TIMEOUT`): the entry mix must
            not take "nothing to accuse" for a verdict.
        """
        ended = self._trace_ended(frame.round_id)
        if ended:
            return ended
        st = self._round(frame.round_id)
        ready = RoundStatus.MIXED if self.role is Role.LAST else RoundStatus.FORWARDED
        if st.status is not ready:
            raise NotReady(f"round {frame.round_id} is {st.status.value} here")
        own = self._own(st)
        if own is None:
            return self._needs_intake(st, "trace", frame)
        if frame.page < len(own.pages):
            page = own.pages[frame.page]
            # a relay's successor may have pages after its own; the last mix knows
            more = self.role is Role.RELAY or frame.page + 1 < len(own.pages)
            token = TraceProved(
                frame.round_id, None, own.untraced, page.failures, page.duplicates, more
            )
            return [Prove(frame.round_id, page.items, token, failures=page.failures)]
        if self.role is Role.LAST:
            return [Reply(Accused(frame.round_id, untraced=own.untraced))]
        return [Send(Trace(frame.round_id, frame.page - len(own.pages)))]

    def _own(self, st: RoundState) -> OwnAccusations | None:
        """This mix's own accusations in the round, in pages (computed once, memory only),
        or ``None`` while they need the inputs on disk (the caller reads them back): inputs
        that did not peel, those whose layers hold a repeated onion (``st.duplicates``) and,
        at the last mix, those whose payloads the validator refuses. Proving any of them
        needs the inputs too (for their deliveries)."""
        if st.own_accused is not None:
            return st.own_accused
        last = self.role is Role.LAST
        if not st.intake_loaded:
            if last:  # the usual round: every payload valid, nothing to prove
                st.all_valid = all(
                    all_valid(self.validator, st.chunk_payloads[index])
                    for index in sorted(st.chunk_payloads)
                )
            if (last and not st.all_valid) or st.duplicates or st.chunk_failed:
                return None
            if st.failures_on_disk:  # inputs that did not peel may be on disk only
                return None
            st.own_accused = OwnAccusations(untraced=st.dropped)
            return st.own_accused
        failed = [item for index in sorted(st.chunk_failed) for item in st.chunk_failed[index]]
        groups: dict[bytes, list[bytes]] = {}
        refused: list[bytes] = []
        if st.duplicates or last:
            for index in sorted(st.chunk_payloads):
                outputs = st.chunk_payloads[index]
                if not st.duplicates and all_valid(self.validator, outputs):
                    continue  # the usual chunk: nothing to accuse (one vectorized check)
                inputs = st.chunk_inputs.get(index, ())
                for item, output in zip(inputs, outputs, strict=True):
                    if output in st.duplicates:
                        groups.setdefault(bytes(output), []).append(item)
                    elif last and not self.validator(output):
                        refused.append(item)
        if last:
            st.all_valid = not refused
        cap = accusation_cap(self.chunk_size, self.hop + 1)
        st.own_accused = own_pages(
            failed, list(groups.values()), refused, cap=cap, dropped=st.dropped
        )
        return st.own_accused

    def _trace_ended(self, round_id: int) -> list[Action]:
        """The answer to a trace of a round whose trace is over here — also when it ended
        while this mix was tracing it (the entry mix's exclusion, sent before a restart that
        did not store it, overtook its new ``trace``): nothing to accuse, the verdict is
        applied. Empty while the trace goes on, and for a round unknown here (the caller
        decides).

        :raises RoundClosed: the round was aborted here: the entry mix must not take
            "nothing to accuse" for a verdict.
        """
        st = self.rounds.get(round_id)
        if st is None:
            return []
        if st.status is RoundStatus.ABORTED:
            raise RoundClosed(f"round {round_id} was aborted at {self.name}")
        if st.status in TRACE_OVER:
            return [Reply(Accused(round_id))]
        return []

    def _traced(self, sent: Trace, reply: Accused) -> list[Action]:
        """The successor answered ``trace``: check its accusations (off the loop)."""
        ended = self._trace_ended(sent.round_id)
        if ended:
            return ended
        st = self._round(sent.round_id)
        if reply.round_id != sent.round_id:
            return [Reply(Accused(sent.round_id, blame=self.successor))]
        if reply.blame:
            if reply.evidence is None or self.signing is None:
                return [Reply(Accused(sent.round_id, blame=reply.blame))]
            keys = self._hop_keys(st)
            # the refused accusation was made by a mix at least two hops further on (the
            # refuser is then after this mix) and inside the chain; anything else would let
            # the reporter pin the blame on this mix or on nobody: the reporter is named
            if not (self.hop + 2 <= reply.evidence.hop and reply.evidence.hop in keys):
                return [Reply(Accused(sent.round_id, blame=self.successor))]
            checked = BlameChecked(sent.round_id, reply)
            verify, _ = evidence_checked(reply.evidence, reply.proof, reply.evidence_page)
            return [Verify(sent.round_id, verify, keys, checked)]
        if self.signing is not None and not self.signing.page_signed(
            sent.round_id, self.successor, reply.accusations, reply.signature
        ):  # nothing it said can be shown to anyone: blamed on this mix's word alone
            return [Reply(Accused(sent.round_id, blame=self.successor))]
        own = self._own(st)  # found when the trace asked (else read back first)
        if own is None:
            return self._needs_intake(st, "traced", sent, reply)
        if not reply.accusations:
            untraced = reply.untraced + own.untraced
            return [Reply(Accused(sent.round_id, untraced=untraced, more=reply.more))]
        token = TraceVerified(sent.round_id, reply)
        return [Verify(sent.round_id, reply.accusations, self._hop_keys(st), token)]

    def verified(self, token: object, results: Sequence[bool], now: float) -> list[Action]:
        """Event: the adapter checked the successor's accusations (one bool each). Each
        accused item must be an output of this mix; its input is then proven. A successor
        whose accusation does not hold, or names an item this mix never sent, is blamed with
        that accusation as the evidence; for a :class:`BlameChecked` token the evidence of
        the successor's blame is judged (:func:`mixnet.core.deliveries.judge`)."""
        if isinstance(token, BlameChecked | TraceVerified):
            ended = self._trace_ended(token.round_id)
            if ended:
                return ended
        if isinstance(token, BlameChecked):
            assert self.signing is not None
            reply = token.reply
            verdict = judge_blame(reply, results, self.signing, reporter=self.successor)
            if not verdict.backed:  # the successor made it up: passed on, it would name this mix
                return [Reply(Accused(token.round_id, blame=verdict.name))]
            backed = Accused(
                token.round_id, blame=verdict.name, evidence=reply.evidence, proof=reply.proof,
                refusal=reply.refusal, evidence_page=reply.evidence_page,
            )  # fmt: skip
            return [Reply(backed)]
        if not isinstance(token, TraceVerified):
            raise TypeError(f"not a trace token: {token!r}")
        st = self._round(token.round_id)
        accusations = token.reply.accusations
        if len(results) != len(accusations):
            return [Reply(Accused(token.round_id, blame=self.successor))]
        load = self._needs_intake(st, "verified", token, tuple(results))
        if load:
            return load
        wanted = {accusation.item for accusation in accusations}
        origin = self._index(st).inputs_of(wanted)
        inputs = []
        for position, (accusation, holds) in enumerate(zip(accusations, results, strict=True)):
            item = origin.get(accusation.item)
            if not holds or accusation.hop != self.hop + 1 or item is None:
                # it does not hold, or names an item this mix never sent
                return [self._refuse(token.round_id, token.reply, position)]
            inputs.append(item)
        own = self._own(st)
        assert own is not None  # the inputs are read back
        untraced = token.reply.untraced + own.untraced
        proved = TraceProved(token.round_id, accusations, untraced, more=token.reply.more)
        return [Prove(token.round_id, tuple(inputs), proved)]

    def proved(
        self, token: object, steps: Sequence[Step | MixnetError], now: float = 0.0
    ) -> list[Action]:
        """Event: the adapter proved this mix's steps; answer the ``trace``.

        :raises InternalError: a step could not be proven (the predecessor asks again).
        """
        if not isinstance(token, TraceProved):
            raise TypeError(f"not a trace token: {token!r}")
        ended = self._trace_ended(token.round_id)
        if ended:
            return ended
        made: list[Step] = []
        for step in steps:
            if not isinstance(step, Step):
                raise InternalError(f"a step could not be proven: {step}")
            made.append(step)
        st = self.rounds.get(token.round_id)
        found = {}
        if st is not None:
            if st.received_index is None:
                st.received_index = received_index(st.received)
            found = deliveries(st.received, [s.item for s in made], st.received_index)
        own = tuple(
            Accusation(failure_of(s), (s,), found.get(s.item)) for s in made[: token.failures]
        )
        ends = token.failures + token.duplicates
        own += tuple(
            Accusation(Failure.DUPLICATE, (s,), found.get(s.item))
            for s in made[token.failures : ends]
        )
        rest = made[ends:]
        if token.accusations is None:
            accused = tuple(
                Accusation(Failure.INVALID_PAYLOAD, (s,), found.get(s.item)) for s in rest
            )
        else:
            if len(rest) != len(token.accusations):
                raise InternalError("a step is missing")
            accused = tuple(
                a.extended(s, found.get(s.item))
                for a, s in zip(token.accusations, rest, strict=True)
            )
        page = own + accused
        signature = None
        if self.signing is not None:
            signature = self.signing.sign_page(token.round_id, self.name, page)
        return [
            Reply(
                Accused(token.round_id, page, token.untraced, more=token.more, signature=signature)
            )
        ]

    def _refuse(self, round_id: int, reply: Accused, position: int) -> Reply:
        """The blame of the successor for its accusation ``reply.accusations[position]``,
        which this mix refuses: the accusation as evidence, with the proof that it was on the
        successor's signed page and this mix's signature over the refusal."""
        proof, refusal = None, None
        if self.signing is not None:
            proof, refusal = self.signing.refusal(
                round_id, self.name, reply.accusations, position, reply.signature
            )
        evidence = reply.accusations[position]
        # a duplicate holds only beside its twins: the judges need the page it was on
        page = reply.accusations if evidence.failure is Failure.DUPLICATE else ()
        return Reply(
            Accused(
                round_id, blame=self.successor, evidence=evidence, proof=proof, refusal=refusal,
                evidence_page=page,
            )
        )

    # ------------------------------------------------------------------ recovery

    def _restore_held(self, st: RoundState, records: NodeRecords) -> None:
        """Recovery: hold a mixed round's stored intake again (for its trace)."""
        for chunk in records.chunks.get(st.round_id, ()):
            if chunk.sender != self.predecessor:
                continue
            st.chunk_payloads[chunk.index] = chunk.payloads  # its inputs stay on disk
            st.dropped += chunk.dropped
        # the onions it left out of its batch as duplicates, found again
        self._note_duplicates(st, [st.chunk_payloads[i] for i in sorted(st.chunk_payloads)])

    def _note_duplicates(self, st: RoundState, outputs: Sequence[Sequence[bytes]]) -> None:
        """At a relay (not the last mix, whose plaintexts may repeat): remember in
        ``st.duplicates`` every onion that more than one input peeled to across ``outputs``
        (the round's, in chunk order; a client made them collide: honest clients' onions
        never do) and count every copy as dropped. No copy is forwarded; the trace accuses
        every input that made one (``duplicate``), so that the next mix does not drop a
        copy as an untraced replay and abort the round."""
        if self.role is not Role.RELAY:
            return
        repeated = repeated_items(outputs)
        st.duplicates = set(repeated)
        st.dropped += sum(repeated.values())
