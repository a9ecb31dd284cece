"""The exclusion at a mix after the entry mix: passing ``exclude`` on, and the timer that
ends a trace nobody finishes (``docs/protocol.md``, "Trace and exclude").

``exclude`` names inputs to drop. A relay passes their outputs on and, once its successor
answered the last page, erases its intake and key (``CONFIRMED``). The last mix gathers the
pages of a paged exclusion, removes the excluded items' payloads and forwards the rest to
the sink (``RELEASED``, then ``CONFIRMED``) — or, for an abort, tells the sink the round
ends. A round whose exclusion has not come within
:data:`~mixnet.core.tracing.TRACE_TIMEOUT` of its batch is aborted here.

:class:`ExcludingMix` completes :class:`~mixnet.core.tracing.TracingMix` (the trace, and
the helpers both halves use).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from mixnet.core.actions import Action, Persist, Reply, Send
from mixnet.core.intake import split_chunks
from mixnet.core.records import (
    DropIntake,
    DropOutbound,
    EraseKey,
    OutboundBatch,
    OutboundChunk,
    PutOutbound,
    SetRound,
    Write,
)
from mixnet.core.rounds import RoundState
from mixnet.core.status import Role, RoundStatus
from mixnet.core.trace_pages import ExclusionPages
from mixnet.core.tracing import TRACE_OVER, TRACE_TIMEOUT, TracingMix
from mixnet.errors import NotReady, RoundClosed
from mixnet.frames import AbortRound, Exclude, Excluded

__all__ = ["ExcludingMix"]


class ExcludingMix(TracingMix):
    """Mixin of :class:`~mixnet.core.relay.RelayMachine`: the exclusion, and the timer."""

    # ------------------------------------------------------------------ exclude

    def on_exclude(self, frame: Exclude, now: float) -> list[Action]:
        """Event: ``exclude`` from the predecessor (idempotent).

        :raises UnknownRound: the round is unknown here.
        :raises NotReady: the round is not past its batch here yet.
        :raises RoundClosed: the round was aborted here and ``frame`` is not an abort.
        """
        st = self._round(frame.round_id)
        if st.status is RoundStatus.ABORTED and not frame.abort:
            raise RoundClosed(f"round {frame.round_id} was aborted at {self.name}")
        if st.status in TRACE_OVER:
            return [Reply(Excluded(frame.round_id))]
        if self.role is Role.RELAY and st.status is RoundStatus.FORWARDED:
            wanted = set(frame.items)
            outputs: tuple[bytes, ...] = ()
            if wanted:
                load = self._needs_intake(st, "exclude", frame)
                if load:
                    return load
                following = self._index(st).outputs_of(wanted)
                outputs = tuple(following[i] for i in frame.items if i in following)
            return [Send(replace(frame, items=outputs))]
        if self.role is Role.LAST and st.status is RoundStatus.MIXED:
            if frame.pages > 1 and not frame.abort:
                whole = self._gather(st, frame)
                if whole is None:
                    return [Reply(Excluded(frame.round_id))]  # not the last page: go on
                frame = whole
            if frame.items and not frame.abort:  # the usual round excludes none
                load = self._needs_intake(st, "exclude", frame)
                if load:
                    return load
            return self._release(st, frame)
        raise NotReady(f"round {frame.round_id} is {st.status.value} here")

    def _gather(self, st: RoundState, frame: Exclude) -> Exclude | None:
        """Last mix: keep a page of a paged exclusion; the whole exclusion once every page
        is here, else ``None``.

        :raises NotReady: ``frame`` is the last page and some are missing (a restart lost
            them): the entry mix starts the verdict over.
        :raises MalformedFrame: the pages name more items than the round has here.
        """
        pages = st.exclusion
        if pages is None or not pages.matches(frame):  # a new exclusion replaces another
            held = sum(len(p) for p in st.chunk_payloads.values()) + st.dropped
            pages = st.exclusion = ExclusionPages(frame.pages, frame.excluded, limit=held)
        if pages.add(frame):
            return pages.whole(frame.round_id)
        if frame.final:
            missing = frame.pages - len(pages.got)
            raise NotReady(f"{missing} pages of round {frame.round_id}'s exclusion are missing")
        return None

    def _excluded(self, sent: Exclude, reply: Excluded) -> list[Action]:
        """The successor took a page of the exclusion; after the last page (answered once
        the whole exclusion applied) this relay's part is over."""
        st = self._round(sent.round_id)
        actions: list[Action] = []
        if st.status is RoundStatus.FORWARDED and sent.final:  # every page has passed
            status = RoundStatus.ABORTED if sent.abort else RoundStatus.CONFIRMED
            actions.append(self._finish(st, status))
        return [*actions, Reply(Excluded(sent.round_id))]

    def _release(self, st: RoundState, frame: Exclude) -> list[Action]:
        """Last mix: drop the excluded items' payloads and forward the rest, or abort."""
        assert st.outbound is not None
        if not frame.abort and not frame.items:  # nothing excluded: the batch goes as it is
            outbound = st.outbound
            if frame.excluded or (not st.all_valid and any(
                not self.validator(p) for chunk in outbound.chunks for p in chunk.payloads
            )):  # fmt: skip
                reason = "the exclusions left payloads the validator refuses"
                return self._abort_released(st, reason)
            return self._forward_rest(st, None, st.clients or 0, 0)
        if not frame.abort:
            wanted = set(frame.items)
            following = self._index(st).outputs_of(wanted)
            removed = Counter(following[i] for i in frame.items if i in following)
            kept: list[bytes] = []
            for chunk in st.outbound.chunks:
                for payload in chunk.payloads:
                    if removed[payload] > 0:
                        removed[payload] -= 1
                    else:
                        kept.append(payload)
            clients = (st.clients or 0) - frame.excluded
            if any(not self.validator(p) for p in kept) or clients < 0:
                reason = "the exclusions left payloads the validator refuses"
                return self._abort_released(st, reason)
            return self._forward_rest(st, kept, clients, frame.excluded)
        return self._abort_released(st, frame.abort)

    def _forward_rest(
        self, st: RoundState, kept: list[bytes] | None, clients: int, excluded: int
    ) -> list[Action]:
        """Release the held batch: ``kept`` payloads re-chunked (``None``: the stored
        outbound batch unchanged, nothing rewritten)."""
        r = st.round_id
        writes: list[Write] = []
        if kept is None:
            assert st.outbound is not None
            outbound = st.outbound
        else:
            chunks = split_chunks(kept, self.chunk_size)
            outbound = OutboundBatch(
                clients=clients,
                count=len(kept),
                chunks=tuple(OutboundChunk(i, tuple(c)) for i, c in enumerate(chunks)),
                excluded=excluded,
            )
            writes += [DropOutbound(r), PutOutbound(r, outbound)]
        self._move(st, RoundStatus.RELEASED)
        st.outbound = outbound
        st.clients = clients
        st.acked.clear()
        st.drop_held()
        writes += [
            DropIntake(r),
            EraseKey(r),
            SetRound(r, status=RoundStatus.RELEASED, clients=clients),
        ]
        return [Persist(tuple(writes)), Reply(Excluded(r)), *self._send_next(st)]

    def _abort_released(self, st: RoundState, reason: str) -> list[Action]:
        persist = self._finish(st, RoundStatus.ABORTED)
        st.outbound = None
        st.abort_reply = True
        writes = (*persist.writes, DropOutbound(st.round_id))
        return [Persist(writes), Send(AbortRound(st.round_id, reason))]

    # ------------------------------------------------------------------ timer

    def _waiting(self, st: RoundState) -> bool:
        """The round waits for its trace here (a relay forwarded it, the last mix holds it)."""
        waiting = RoundStatus.MIXED if self.role is Role.LAST else RoundStatus.FORWARDED
        return st.status is waiting and st.held_since is not None

    def next_timer(self) -> float | None:
        """When :meth:`handle_timer` must next be called (``None``: only after an event)."""
        due = [
            st.held_since + TRACE_TIMEOUT
            for st in self.rounds.values()
            if self._waiting(st) and st.held_since is not None
        ]
        resend = self.resend_timer()
        return min([*due, *([resend] if resend is not None else [])], default=None)

    def handle_timer(self, now: float) -> list[Action]:
        """Abort every round whose trace has not ended within :data:`TRACE_TIMEOUT` of its
        batch arriving here: its key and intake are erased; the last mix tells the sink. Send
        refused chunks again when they are due."""
        actions: list[Action] = self.handle_resend_timer(now)
        for st in list(self.rounds.values()):
            if not self._waiting(st) or st.held_since is None:
                continue
            if now < st.held_since + TRACE_TIMEOUT:
                continue
            reason = f"no verdict reached {self.name} within {TRACE_TIMEOUT:.0f} s"
            if self.role is Role.LAST:
                actions += self._abort_released(st, reason)
                st.abort_reply = False  # nobody waits for an answer
            else:
                actions.append(self._finish(st, RoundStatus.ABORTED))
        return actions

