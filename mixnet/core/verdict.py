"""The entry mix's side of the trace: it asks for the chain's verdict on its batch and
excludes the submissions proven bad (``docs/protocol.md``, "Trace and exclude").

Once its batch is acknowledged (``FORWARDED``) the entry mix sends ``trace`` down the chain
(again after :data:`TRACE_RETRY` seconds while a later mix is not ready or unreachable). It
checks every accusation it gets back (:class:`~mixnet.core.actions.Verify`), maps each
accused hop-1 item to the submission it came from, and sends ``exclude`` with every item of
those submissions; once the chain answered, the round is ``CONFIRMED`` and its intake is
erased. It aborts the round instead (``exclude`` with a reason) when a mix is blamed, when
items were dropped downstream without evidence, when fewer than ``min_users``
submissions would remain, or when the excluded submissions' items would not fit one
``exclude`` frame (:func:`~mixnet.core.trace_caps.exclude_cap` items, what every mix accepts),
and when :data:`TRACE_GIVE_UP` answers in a row could not be used however long it waits (a
reply that cannot be read or is too large, a chain that does not know the round — e.g. a mix
of another wire version): the round then ends with that error as its reason instead of being
asked about every second until the later mixes give up on it (after an hour). A later mix
that aborted the round answers ``round-closed``; the entry mix then aborts it too (never
reading an aborted chain's silence as a verdict with nothing to accuse).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mixnet.core.actions import Action, CompactReceipts, Persist, Send, Verify
from mixnet.core.deliveries import evidence_checked, judge_blame
from mixnet.core.item_index import ItemIndex
from mixnet.core.policy import RoundPolicy
from mixnet.core.receipts import ReceiptTable
from mixnet.core.records import DropIntake, ForgetReceipts, SetRound
from mixnet.core.rounds import MixRounds, RoundState
from mixnet.core.status import RoundStatus
from mixnet.core.trace_caps import exclude_cap
from mixnet.core.trace_pages import EntryTrace, exclusion_pages
from mixnet.errors import (
    BadLength,
    FrameTooLarge,
    MalformedFrame,
    MixnetError,
    RoundClosed,
    UnexpectedFrameType,
    UnknownRound,
    UnsupportedVersion,
)
from mixnet.frames import Accused, Exclude, Excluded, Frame, Trace

__all__ = ["TRACE_GIVE_UP", "TRACE_RETRY", "BlameJudged", "EntryVerdict", "VerdictChecked"]

#: Seconds before the entry mix asks for a round's verdict again after a refusal.
TRACE_RETRY = 1.0
#: Answers in a row to ``trace`` or ``exclude`` that waiting does not mend (:data:`UNUSABLE`)
#: after which the entry mix aborts the round with the last one as the reason.
TRACE_GIVE_UP = 10
#: Errors of an answer that asking again does not change: the reply could not be read (or a
#: later mix could not read its successor's and passed the error back), or the chain does not
#: know the round. ``not-ready``, an internal error or a broken link are waited out.
UNUSABLE = (
    MalformedFrame, UnsupportedVersion, UnexpectedFrameType, FrameTooLarge, BadLength,
    UnknownRound,
)  # fmt: skip


@dataclass(frozen=True)
class BlameJudged:
    """Token of the :class:`Verify` of the evidence behind a blame the chain reported."""

    round_id: int
    reply: Accused


@dataclass(frozen=True)
class VerdictChecked:
    """Token of the :class:`Verify` of the chain's accusations about the entry's batch
    (trace page ``page`` of the verdict's ``attempt``: one started over does not take the
    checks of an earlier one)."""

    round_id: int
    reply: Accused
    page: int = 0
    attempt: int = 0


class EntryVerdict(MixRounds):
    """Mixin of :class:`~mixnet.core.entry.EntryMachine`. Subclasses set ``policy`` and
    ``successor``."""

    policy: RoundPolicy
    successor: str
    hops: int
    messages: int

    # ------------------------------------------------------------------ timer

    def verdict_timer(self) -> float | None:
        """When a round's ``trace`` is due again (``None``: none is waiting)."""
        due = [st.trace_at for st in self.rounds.values() if st.trace_at is not None]
        return min(due, default=None)

    def handle_verdict_timer(self, now: float) -> list[Action]:
        """Ask again for the verdict of every round whose retry is due."""
        actions: list[Action] = []
        for st in self.rounds.values():
            if st.trace_at is not None and now >= st.trace_at:
                st.trace_at = None
                if st.status is RoundStatus.FORWARDED:
                    actions.append(Send(Trace(st.round_id, st.entry_trace.page)))
        return actions

    # ------------------------------------------------------------------ events

    def _forwarded(self, st: RoundState) -> list[Action]:
        if self.hops == 1:  # the entry mix is the last: it checked every payload at intake
            return self._confirmed(st, Exclude(st.round_id))
        st.entry_trace = EntryTrace(attempt=st.entry_trace.attempt + 1)
        return [Send(Trace(st.round_id))]

    def verdict_reply(self, sent: Frame, reply: Frame, now: float) -> list[Action] | None:
        """Handle the successor's answer to ``trace`` or ``exclude``; ``None`` if ``sent``
        is neither."""
        if isinstance(sent, Trace) and isinstance(reply, Accused):
            st = self.rounds.get(sent.round_id)
            if st is None or st.status is not RoundStatus.FORWARDED:
                return []
            progress = st.entry_trace
            if sent.page != progress.page or progress.exclusion:
                return []  # an answer to a page asked before (the verdict went on)
            st.trace_failures = 0
            if reply.round_id != sent.round_id:
                return self._conclude(st, f"mix {self.successor} answered for another round")
            keys = {hop: a.public_key for hop, a in enumerate(st.announcements)}
            if reply.blame:
                evidence = reply.evidence
                if evidence is not None and self.signing is not None:
                    if not 2 <= evidence.hop < self.hops:  # see TracingMix._traced
                        return self._conclude(
                            st, f"mix {self.successor} reported a blame its evidence does not back"
                        )
                    judged = BlameJudged(st.round_id, reply)
                    verify, _ = evidence_checked(evidence, reply.proof, reply.evidence_page)
                    return [Verify(st.round_id, verify, keys, judged)]
                return self._conclude(
                    st,
                    f"mix {self.successor} reported, without evidence, that mix {reply.blame} "
                    "could not back its accusations (a blame without evidence cannot be checked)",
                )
            if reply.untraced:
                return self._conclude(
                    st,
                    f"{reply.untraced} items were dropped or refused after the entry mix without "
                    "evidence (a layer that did not open, a replay, or a group of colliding "
                    "onions larger than one trace reply): they cannot be traced",
                )
            if self.signing is not None and not self.signing.page_signed(
                st.round_id, self.successor, reply.accusations, reply.signature
            ):
                return self._conclude(
                    st, f"mix {self.successor} sent accusations on a page it did not sign"
                )
            ask: list[Action] = []
            if reply.more:  # asked for at once: the chain works on it while this is checked
                unending = self._unending(st, reply)
                if unending:
                    return self._conclude(st, unending)
                progress.page += 1
                ask.append(Send(Trace(st.round_id, progress.page), background=True))
            else:
                progress.end = sent.page
            if not reply.accusations:
                progress.checked.add(sent.page)
                return self._maybe_exclude(st)
            token = VerdictChecked(st.round_id, reply, sent.page, progress.attempt)
            return [*ask, Verify(st.round_id, reply.accusations, keys, token)]
        if isinstance(sent, Exclude) and isinstance(reply, Excluded):
            st = self.rounds.get(sent.round_id)
            if st is None or st.status is not RoundStatus.FORWARDED:
                return []
            if sent.final:
                return self._confirmed(st, sent)
            progress = st.entry_trace
            following = sent.page + 1
            if progress.excluding != sent.page or following >= len(progress.exclusion):
                return []  # answered before, or a page of an exclusion given up since
            if progress.exclusion[sent.page] != sent:
                return []
            progress.excluding = following
            return [Send(progress.exclusion[following])]
        return None

    def verdict_error(self, sent: Frame, error: MixnetError, now: float) -> list[Action] | None:
        """The successor refused ``trace`` or ``exclude`` (not ready yet, or restarting):
        ask for the verdict again after :data:`TRACE_RETRY` seconds — but the
        :data:`TRACE_GIVE_UP`-th :data:`UNUSABLE` error in a row aborts the round with it as
        the reason. ``None`` if ``sent`` is neither."""
        if not isinstance(sent, Trace | Exclude):
            return None
        st = self.rounds.get(sent.round_id)
        if st is None or st.status is not RoundStatus.FORWARDED:
            return []
        aborting = isinstance(sent, Exclude) and bool(sent.abort)
        if isinstance(sent, Exclude):  # the verdict starts over (a restart may have lost pages)
            st.entry_trace = EntryTrace(attempt=st.entry_trace.attempt + 1)
        if isinstance(error, RoundClosed) and not aborting:
            # a later mix aborted the round (this mix's own abort, sent before a restart that
            # did not store it, or its trace timeout): end it here too
            return self._conclude(st, f"the chain aborted the round: {error}")
        if isinstance(error, UNUSABLE):
            st.trace_failures += 1
            if st.trace_failures >= TRACE_GIVE_UP and not aborting:
                return self._conclude(
                    st,
                    f"mix {self.successor}'s answers to {type(sent).__name__.lower()} could "
                    f"not be used {st.trace_failures} times in a row: {error}",
                )
        st.trace_at = now + TRACE_RETRY
        return []

    def verified(self, token: object, results: Sequence[bool], now: float) -> list[Action]:
        """Event: the adapter checked the chain's accusations (one bool each), or the
        evidence of a blame (:class:`BlameJudged`: the round aborts naming the culprit,
        :func:`mixnet.core.deliveries.judge`)."""
        if isinstance(token, BlameJudged):
            judged = self.rounds.get(token.round_id)
            if judged is None or judged.status is not RoundStatus.FORWARDED:
                return []
            assert self.signing is not None
            verdict = judge_blame(token.reply, results, self.signing, reporter=self.successor)
            return self._conclude(judged, verdict.reason)
        if not isinstance(token, VerdictChecked):
            raise TypeError(f"not a verdict token: {token!r}")
        st = self.rounds.get(token.round_id)
        if st is None or st.status is not RoundStatus.FORWARDED:
            return []
        progress = st.entry_trace
        if token.attempt != progress.attempt or token.page in progress.checked:
            return []  # a page of a verdict started over since, or checked before
        if progress.exclusion:
            return []  # the verdict is reached (or the round aborted) meanwhile
        accusations = token.reply.accusations
        blame = f"mix {self.successor} could not back its accusations"
        if len(results) != len(accusations) or not all(results):
            return self._conclude(st, blame)
        if progress.origin is None:  # once for all the round's pages
            progress.origin = ItemIndex([st.submissions.all_items()])
        found = progress.origin.positions([accusation.item for accusation in accusations])
        clients, shape = st.submissions.clients(), st.submissions.shape
        for accusation in accusations:
            position = found.get(accusation.item)
            if accusation.hop != 1 or position is None or shape is None:
                return self._conclude(st, blame)  # an item this mix never sent
            progress.clients.add(clients[position // shape[0]])
        progress.checked.add(token.page)
        return self._maybe_exclude(st)

    # ------------------------------------------------------------------ outcomes

    def _unending(self, st: RoundState, reply: Accused) -> str:
        """Why the trace's pages would not end (an empty page that promises more, or more
        pages than the round has hop-1 items: every honest page accuses an item no other
        page does), or ``""``. Such a chain is not waited for: the round aborts."""
        if not reply.accusations:
            return f"mix {self.successor} sent an empty page that promised more"
        if st.entry_trace.page + 1 > self.messages * len(st.submissions):
            return f"mix {self.successor}'s accusations run to more pages than the round has items"
        return ""

    def _maybe_exclude(self, st: RoundState) -> list[Action]:
        """Once every page up to the last (the one without ``more``) is checked: exclude
        every submission accused on them."""
        progress = st.entry_trace
        if progress.end is None or len(progress.checked) <= progress.end:
            return []
        return self._exclude(st, progress.clients)

    def _exclude(self, st: RoundState, clients: Iterable[str]) -> list[Action]:
        """Exclude the submissions of ``clients`` (or abort, see the module docstring), in
        as many ``exclude`` frames as they need (:func:`exclusion_pages`)."""
        excluded = sorted(set(clients))
        remaining = len(st.submissions) - len(excluded)
        if remaining < self.policy.min_users:
            return self._conclude(
                st,
                f"{len(excluded)} submissions were excluded; the {remaining} left are fewer "
                f"than min_users = {self.policy.min_users}",
            )
        cap = exclude_cap(self.policy.chunk_size, self.messages)
        frames = exclusion_pages(st.round_id, [st.submissions[c] for c in excluded], cap)
        st.entry_trace.exclusion = frames
        st.entry_trace.origin = None
        return [Send(frames[0])]

    def _conclude(self, st: RoundState, reason: str) -> list[Action]:
        """Abort the round down the chain for ``reason``."""
        abort = Exclude(st.round_id, (), 0, reason)
        st.entry_trace.exclusion = (abort,)  # answers to the trace's pages are now stale
        st.entry_trace.origin = None
        return [Send(abort)]

    def _confirmed(self, st: RoundState, sent: Exclude) -> list[Action]:
        """The chain applied the exclusion (or the abort): the round is over here."""
        r = st.round_id
        if sent.abort:
            self._move(st, RoundStatus.ABORTED)
            st.receipts.clear()  # clients submit afresh
            writes: tuple[DropIntake | ForgetReceipts | SetRound, ...] = (
                DropIntake(r),
                ForgetReceipts(r),
                SetRound(r, status=RoundStatus.ABORTED),
            )
        else:
            self._move(st, RoundStatus.CONFIRMED)
            writes = (DropIntake(r), SetRound(r, status=RoundStatus.CONFIRMED))
        st.submissions.clear()
        st.entry_trace = EntryTrace()
        if sent.abort or not st.receipts or st.receipts.is_compact:
            return [Persist(writes)]
        # the intake's memory is free: the receipts, kept for RECEIPT_ROUNDS, are compacted
        return [Persist(writes), CompactReceipts(r, st.receipts)]

    def receipts_compacted(self, round_id: int, compacted: ReceiptTable) -> list[Action]:
        """Event: the adapter made the ``compacted()`` copy of round ``round_id``'s
        receipts that :class:`~mixnet.core.actions.CompactReceipts` asked for. They take it
        (or compact themselves, if they changed since: :meth:`ReceiptTable.adopt`); a round
        forgotten meanwhile is left alone."""
        st = self.rounds.get(round_id)
        if st is not None:
            st.receipts.adopt(compacted)
        return []
