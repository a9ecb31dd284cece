"""The trace, one machine at a time: what a relay, the last mix and the entry mix do with
``trace``, ``accused``, ``exclude`` and ``excluded`` — and above all what they refuse to do
(no step is proven, so no link revealed, for an accusation that does not hold)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

import pytest

from mixnet.blame import Accusation, Failure, Step
from mixnet.chunk_signature import leaf_hashes
from mixnet.core.actions import (
    Action,
    CompactReceipts,
    LoadIntake,
    Mix,
    Peel,
    Persist,
    Prove,
    Reply,
    Send,
    Verify,
)
from mixnet.core.digests import replay_digests
from mixnet.core.records import (
    Chunk,
    DropIntake,
    DropOutbound,
    EraseKey,
    ForgetReceipts,
    OutboundBatch,
    OutboundChunk,
    PutOutbound,
    SetRound,
)
from mixnet.core.relay import RelayMachine
from mixnet.core.status import RoundStatus
from mixnet.core.trace_tokens import TraceProved
from mixnet.core.tracing import unpeeled_inputs
from mixnet.core.verdict import TRACE_GIVE_UP, TRACE_RETRY, VerdictChecked
from mixnet.errors import (
    FrameTooLarge,
    InternalError,
    MixnetError,
    NotReady,
    RoundClosed,
    UnsupportedVersion,
)
from mixnet.frames import (
    Aborted,
    AbortRound,
    Accused,
    Batch,
    BatchAck,
    Exclude,
    Excluded,
    OpenRound,
    RoundKeys,
    Trace,
)
from tests.mixnet.chain_harness import MemoryStore
from tests.mixnet.test_machines import (
    DEADLINE_S,
    LAYER,
    NOW,
    POLICY,
    PRED,
    RELAY_ITEM,
    VALUE,
    Keys,
    announcement,
    chunk_frame,
    item,
    one,
    open_entry,
    read_back,
    receive_and_store,
    store,
    stored,
    submit_frame,
)

S = RoundStatus
R = 5


def valid(payload: bytes) -> bool:
    return payload[0] != 0xFF


def relay_at(*, last: bool, items: Sequence[bytes]) -> tuple[RelayMachine, list[Action]]:
    """A relay (hop 1 of 3, or the last mix: hop 2 of 3) that received ``items`` in one
    chunk and mixed them in order; returns it and the actions of ``mixed``."""
    hop = 2 if last else 1
    relay = RelayMachine(
        name=f"mix{hop + 1}", predecessor=PRED, item_length=len(items[0]), chunk_size=2,
        keys=Keys(f"mix{hop + 1}", hop + 1), hop=hop, successor="sink" if last else "mix3",
        last=last, validator=valid,
    )  # fmt: skip
    relay.on_open_round(OpenRound(R), NOW)
    relay.on_reply(OpenRound(R), RoundKeys(R, () if last else (announcement("mix3", 3, R),)), NOW)
    acts = receive_and_store(relay, chunk_frame(0, items, chunks=1, count=len(items)))
    assert isinstance(acts[-1], Mix)
    outputs = [i[:-LAYER] for i in items]
    return relay, relay.mixed(R, [outputs])


def forwarded_relay(items: Sequence[bytes]) -> RelayMachine:
    relay, acts = relay_at(last=False, items=items)
    batch = one(acts, Send).frame
    assert isinstance(batch, Batch)
    read_back(relay, relay.on_reply(batch, BatchAck(R, 0), NOW))
    assert relay.status(R) is S.FORWARDED
    return relay


def step(hop: int, item_: bytes) -> Step:
    return Step(hop, item_, bytes(32), bytes(96))


def accusation_of(output: bytes, hop: int = 2) -> Accusation:
    """An accusation (structure only: the machine leaves the crypto to Verify)."""
    return Accusation(Failure.INVALID_PAYLOAD, (step(hop, output),))


class TestRelay:
    items: ClassVar[list[bytes]] = [item(RELAY_ITEM) for _ in range(2)]

    def test_trace_is_not_ready_before_the_batch_is_forwarded(self) -> None:
        relay, _ = relay_at(last=False, items=self.items)
        with pytest.raises(NotReady):
            read_back(relay, relay.on_trace(Trace(R), NOW))
        with pytest.raises(NotReady):
            read_back(relay, relay.on_exclude(Exclude(R, ()), NOW))

    def test_the_successor_announcements_are_kept_for_verifying(self) -> None:
        relay = forwarded_relay(self.items)
        assert read_back(relay, relay.on_trace(Trace(R), NOW)) == [Send(Trace(R))]
        acc = accusation_of(self.items[0][:-LAYER])
        verify = one(read_back(relay, relay.on_reply(Trace(R), Accused(R, (acc,)), NOW)), Verify)
        assert verify.keys == {1: bytes([2]) * 32, 2: bytes([3]) * 32}

    def test_a_verified_accusation_is_traced_one_hop_back(self) -> None:
        relay = forwarded_relay(self.items)
        out = self.items[1][:-LAYER]
        reply = Accused(R, (accusation_of(out),), untraced=0)
        verify = one(read_back(relay, relay.on_reply(Trace(R), reply, NOW)), Verify)
        prove = one(read_back(relay, relay.verified(verify.token, [True], NOW)), Prove)
        assert list(prove.items) == [self.items[1]]  # the input that produced it
        mine = step(1, self.items[1])
        (answer,) = relay.proved(prove.token, [mine], NOW)
        assert answer == Reply(Accused(R, (reply.accusations[0].extended(mine),), 0))

    @pytest.mark.parametrize("problem", ["does not verify", "not our output", "wrong hop"])
    def test_an_accusation_that_does_not_hold_blames_the_successor_and_reveals_nothing(
        self, problem: str
    ) -> None:
        relay = forwarded_relay(self.items)
        out = self.items[0][:-LAYER]
        acc = {
            "does not verify": accusation_of(out),
            "not our output": accusation_of(b"\1" * len(out)),
            "wrong hop": accusation_of(out, hop=1),
        }[problem]
        verify = one(read_back(relay, relay.on_reply(Trace(R), Accused(R, (acc,)), NOW)), Verify)
        acts = read_back(relay, relay.verified(verify.token, [problem != "does not verify"], NOW))
        assert acts == [Reply(Accused(R, blame="mix3", evidence=acc))]  # no Prove: no input named

    def test_a_blame_from_further_down_is_passed_back(self) -> None:
        relay = forwarded_relay(self.items)
        acts = read_back(relay, relay.on_reply(Trace(R), Accused(R, blame="mix3"), NOW))
        assert acts == [Reply(Accused(R, blame="mix3"))]

    def test_exclude_passes_the_outputs_on_and_then_erases(self) -> None:
        relay = forwarded_relay(self.items)
        frame = Exclude(R, (self.items[0], b"\7" * RELAY_ITEM), excluded=1)
        acts = read_back(relay, relay.on_exclude(frame, NOW))
        assert acts == [Send(Exclude(R, (self.items[0][:-LAYER],), 1))]
        acts = read_back(relay, relay.on_reply(acts[0].frame, Excluded(R), NOW))  # type: ignore[union-attr]
        assert acts == [
            Persist((DropIntake(R), EraseKey(R), SetRound(R, status=S.CONFIRMED))),
            Reply(Excluded(R)),
        ]
        assert relay.status(R) is S.CONFIRMED
        assert read_back(relay, relay.on_exclude(frame, NOW)) == [Reply(Excluded(R))]  # a retry
        assert read_back(relay, relay.on_trace(Trace(R), NOW)) == [Reply(Accused(R))]


class TestLastMix:
    good = item(VALUE + LAYER)
    bad = b"\xff" + item(VALUE + LAYER)[1:]

    def test_it_holds_the_batch_and_accuses_what_the_validator_refuses(self) -> None:
        last, acts = relay_at(last=True, items=[self.good, self.bad])
        assert not any(isinstance(a, Send) for a in acts)  # nothing goes to the sink yet
        prove = one(read_back(last, last.on_trace(Trace(R), NOW)), Prove)
        assert list(prove.items) == [self.bad]
        assert prove.token == TraceProved(R, None, 0)
        (answer,) = last.proved(prove.token, [step(2, self.bad)], NOW)
        assert answer == Reply(Accused(R, (accusation_of(self.bad),)))

    def test_exclusion_releases_the_rest_to_the_sink(self) -> None:
        last, _ = relay_at(last=True, items=[self.good, self.bad])
        acts = read_back(last, last.on_exclude(Exclude(R, (self.bad,), excluded=1), NOW))
        kept = OutboundBatch(1, 1, (OutboundChunk(0, (self.good[:-LAYER],)),), excluded=1)
        assert acts[:2] == [
            Persist(
                (
                    DropOutbound(R),
                    PutOutbound(R, kept),
                    DropIntake(R),
                    EraseKey(R),
                    SetRound(R, status=S.RELEASED, clients=1),
                )
            ),
            Reply(Excluded(R)),
        ]
        batch = one(acts, Send).frame
        assert batch == Batch(R, "mix3", 0, 1, 1, 1, (self.good[:-LAYER],), excluded=1)
        read_back(last, last.on_reply(batch, BatchAck(R, 0), NOW))
        assert last.status(R) is S.CONFIRMED

    def test_an_exclusion_that_leaves_an_invalid_payload_aborts(self) -> None:
        last, _ = relay_at(last=True, items=[self.good, self.bad])
        acts = read_back(last, last.on_exclude(Exclude(R, (), excluded=0), NOW))
        abort = one(acts, Send).frame
        assert isinstance(abort, AbortRound) and "validator refuses" in abort.reason
        assert last.status(R) is S.ABORTED
        # the predecessor hears of it once the sink has recorded the abort
        assert read_back(last, last.on_reply(abort, Aborted(R), NOW)) == [Reply(Excluded(R))]

    def test_a_round_the_trace_found_valid_is_released_without_validating_it_again(
        self,
    ) -> None:
        """The usual round: its trace accuses nothing and its ``exclude`` names nothing. The
        validator runs once per payload, in the trace, not again at the release; without a
        trace in this process (e.g. after a restart) the release checks them itself."""
        calls: list[bytes] = []

        def counting(payload: bytes) -> bool:
            calls.append(payload)
            return valid(payload)

        for traced in (True, False):
            items = [item(VALUE + LAYER), item(VALUE + LAYER)]  # valid: they start with 0
            last, _ = relay_at(last=True, items=items)
            last.validator = counting
            calls.clear()
            if traced:
                assert last.on_trace(Trace(R), NOW) == [Reply(Accused(R, (), 0))]
            acts = last.on_exclude(Exclude(R, ()), NOW)  # no LoadIntake: inputs stay on disk
            assert len(calls) == 2  # once per payload, in the trace or at the release
            batch = one(acts, Send).frame
            assert isinstance(batch, Batch)
            assert sorted(batch.payloads) == sorted(i[:-LAYER] for i in items)

    def test_an_abort_is_passed_to_the_sink(self) -> None:
        last, _ = relay_at(last=True, items=[self.good, self.bad])
        acts = last.on_exclude(Exclude(R, (), abort="mix mix2 could not back it"), NOW)
        assert one(acts, Send).frame == AbortRound(R, "mix mix2 could not back it")


class TestEntry:
    def forwarded(
        self, clients: Sequence[str] = ("a", "b", "c")
    ) -> tuple[object, dict[str, tuple[bytes, ...]]]:
        m, _ = open_entry(replace(POLICY, max_users=max(POLICY.max_users, len(clients))))
        for client in clients:
            store(m, submit_frame(client))
        batch = one(
            m.mixed(1, [[p for sub in m.rounds[1].submissions.values() for p in sub]]), Send
        ).frame
        assert m.on_reply(batch, BatchAck(1, 0), NOW)[-1] == Send(Trace(1))
        return m, {c: tuple(items) for c, items in m.rounds[1].submissions.items()}

    def test_an_accused_item_excludes_its_whole_submission(self) -> None:
        m, subs = self.forwarded()
        acc = Accusation(Failure.INVALID_PAYLOAD, (step(1, subs["b"][1]), step(2, b"x")))
        verify = one(m.on_reply(Trace(1), Accused(1, (acc,)), NOW), Verify)  # type: ignore[attr-defined]
        attempt = m.rounds[1].entry_trace.attempt  # type: ignore[attr-defined]
        assert verify.token == VerdictChecked(1, Accused(1, (acc,)), 0, attempt)
        acts = m.verified(verify.token, [True], NOW)  # type: ignore[attr-defined]
        assert acts == [Send(Exclude(1, subs["b"], 1))]
        done = m.on_reply(Exclude(1, subs["b"], 1), Excluded(1), NOW)  # type: ignore[attr-defined]
        assert done == [
            Persist((DropIntake(1), SetRound(1, status=S.CONFIRMED))),
            CompactReceipts(1, m.rounds[1].receipts),  # type: ignore[attr-defined]
        ]

    @pytest.mark.parametrize(
        ("reply", "checks", "reason"),
        [
            (Accused(1, blame="mix3"), None, "mix mix3 could not back"),
            (Accused(1, untraced=2), None, "2 items were dropped"),
            ("forged", [False], "mix mix2 could not back"),
            ("unknown item", [True], "mix mix2 could not back"),
        ],
    )
    def test_the_round_aborts_when_the_verdict_does_not_hold(
        self, reply: Accused | str, checks: list[bool] | None, reason: str
    ) -> None:
        m, subs = self.forwarded()
        m.successor = "mix2"  # type: ignore[attr-defined]
        if isinstance(reply, str):
            target = subs["a"][0] if reply == "forged" else b"\5" * len(subs["a"][0])
            reply = Accused(1, (Accusation(Failure.INVALID_PAYLOAD, (step(1, target),)),))
        acts = m.on_reply(Trace(1), reply, NOW)  # type: ignore[attr-defined]
        if checks is not None:
            acts = m.verified(one(acts, Verify).token, checks, NOW)  # type: ignore[attr-defined]
        exclude = one(acts, Send).frame
        assert isinstance(exclude, Exclude) and exclude.items == () and reason in exclude.abort
        done = m.on_reply(exclude, Excluded(1), NOW)  # type: ignore[attr-defined]
        assert done == [
            Persist((DropIntake(1), ForgetReceipts(1), SetRound(1, status=S.ABORTED)))
        ]

    def test_too_few_left_aborts(self) -> None:
        m, subs = self.forwarded()  # min_users = 2 of 3
        accs = tuple(
            Accusation(Failure.INVALID_PAYLOAD, (step(1, subs[c][0]),)) for c in ("a", "b")
        )
        verify = one(m.on_reply(Trace(1), Accused(1, accs), NOW), Verify)  # type: ignore[attr-defined]
        exclude = one(m.verified(verify.token, [True, True], NOW), Send).frame  # type: ignore[attr-defined]
        assert isinstance(exclude, Exclude) and "fewer than min_users = 2" in exclude.abort

    def test_an_exclusion_longer_than_one_frame_goes_in_pages(self) -> None:
        """With chunks of one item, one exclude frame carries two submissions' items
        (exclude_cap): three to exclude go in two pages, sent one after the other; the round
        is confirmed when the last page is answered."""
        m, subs = self.forwarded(("a", "b", "c", "d"))
        m.policy = replace(m.policy, chunk_size=1, min_users=1)  # type: ignore[attr-defined]
        accs = tuple(
            Accusation(Failure.INVALID_PAYLOAD, (step(1, subs[c][0]),)) for c in ("a", "b", "c")
        )
        verify = one(m.on_reply(Trace(1), Accused(1, accs), NOW), Verify)  # type: ignore[attr-defined]
        first = one(m.verified(verify.token, [True] * 3, NOW), Send).frame  # type: ignore[attr-defined]
        assert first == Exclude(1, subs["a"] + subs["b"], 3, page=0, pages=2)
        assert not first.final
        second = one(m.on_reply(first, Excluded(1), NOW), Send).frame  # type: ignore[attr-defined]
        assert second == Exclude(1, subs["c"], 3, page=1, pages=2) and second.final
        assert m.status(1) is S.FORWARDED  # type: ignore[attr-defined]
        assert m.on_reply(first, Excluded(1), NOW) == []  # type: ignore[attr-defined]
        done = m.on_reply(second, Excluded(1), NOW)  # type: ignore[attr-defined]
        assert isinstance(done[0], Persist) and m.status(1) is S.CONFIRMED  # type: ignore[attr-defined]

    def test_a_refused_page_of_the_exclusion_starts_the_verdict_over(self) -> None:
        """The last mix answers the last page ``not-ready`` if a restart lost earlier ones:
        the entry mix asks for the trace again from page 0 and sends every page again."""
        m, subs = self.forwarded(("a", "b", "c", "d"))
        m.policy = replace(m.policy, chunk_size=1, min_users=1)  # type: ignore[attr-defined]
        accs = tuple(
            Accusation(Failure.INVALID_PAYLOAD, (step(1, subs[c][0]),)) for c in ("a", "b", "c")
        )
        acts = m.on_reply(Trace(1), Accused(1, accs, more=True), NOW)  # type: ignore[attr-defined]
        assert one(acts, Send).frame == Trace(1, 1)
        assert m.verified(one(acts, Verify).token, [True] * 3, NOW) == []  # type: ignore[attr-defined]
        first = one(m.on_reply(Trace(1, 1), Accused(1), NOW), Send).frame  # type: ignore[attr-defined]
        second = one(m.on_reply(first, Excluded(1), NOW), Send).frame  # type: ignore[attr-defined]
        assert m.on_send_error(second, NotReady("pages missing"), NOW) == []  # type: ignore[attr-defined]
        assert m.on_reply(first, Excluded(1), NOW) == []  # type: ignore[attr-defined]
        assert Send(Trace(1)) in m.handle_timer(NOW + TRACE_RETRY)  # type: ignore[attr-defined]

    def test_the_trace_is_asked_page_by_page(self) -> None:
        """Each reply that says ``more`` makes the entry mix ask for the next page at once,
        while it checks this one; the pages are checked in any order, and the submissions
        accused on all of them are excluded together once the last is checked; a late
        answer or check of a page already done changes nothing."""
        m, subs = self.forwarded(("a", "b", "c", "d"))
        m.policy = replace(m.policy, min_users=1)  # type: ignore[attr-defined]

        def page(*clients: str, more: bool) -> Accused:
            return Accused(
                1,
                tuple(Accusation(Failure.INVALID_PAYLOAD, (step(1, subs[c][1]),)) for c in clients),
                more=more,
            )

        acts = m.on_reply(Trace(1), page("b", more=True), NOW)  # type: ignore[attr-defined]
        assert one(acts, Send) == Send(Trace(1, 1), background=True)  # checked meanwhile
        first = one(acts, Verify)
        assert first.token.page == 0  # type: ignore[attr-defined]
        assert m.on_reply(Trace(1), page("a", more=True), NOW) == []  # type: ignore[attr-defined]
        acts = m.on_reply(Trace(1, 1), page("d", "b", more=False), NOW)  # type: ignore[attr-defined]
        last = one(acts, Verify)
        assert not [a for a in acts if isinstance(a, Send)]  # no page after the last
        assert m.verified(last.token, [True, True], NOW) == []  # type: ignore[attr-defined]
        assert m.verified(last.token, [True, True], NOW) == []  # type: ignore[attr-defined]
        acts = m.verified(first.token, [True], NOW)  # type: ignore[attr-defined]
        assert acts == [Send(Exclude(1, subs["b"] + subs["d"], 2))]
        assert m.verified(first.token, [True], NOW) == []  # type: ignore[attr-defined]

    def test_a_check_of_a_verdict_started_over_is_not_taken(self) -> None:
        """A page checked for an attempt that an error on ``exclude`` restarted since (the
        last mix lost pages) is not counted for the new attempt."""
        m, subs = self.forwarded(("a", "b", "c"))
        m.policy = replace(m.policy, min_users=1)  # type: ignore[attr-defined]
        acc = Accusation(Failure.INVALID_PAYLOAD, (step(1, subs["a"][0]),))
        old = one(m.on_reply(Trace(1), Accused(1, (acc,), more=True), NOW), Verify)  # type: ignore[attr-defined]
        m.on_send_error(Exclude(1, (), 0, page=0, pages=2), NotReady("lost"), NOW)  # type: ignore[attr-defined]
        assert m.verified(old.token, [True], NOW) == []  # type: ignore[attr-defined]
        progress = m.rounds[1].entry_trace  # type: ignore[attr-defined]
        assert progress.checked == set() and progress.clients == set()

    @pytest.mark.parametrize("pages", ["empty", "endless"])
    def test_pages_that_do_not_end_abort(self, pages: str) -> None:
        """An empty page that promises more, or more pages than the round has items (every
        honest page accuses a new item), ends the round instead of a trace without end."""
        m, subs = self.forwarded()
        m.successor = "mix2"  # type: ignore[attr-defined]
        acc = Accusation(Failure.INVALID_PAYLOAD, (step(1, subs["a"][0]),))
        reply = Accused(1, () if pages == "empty" else (acc,), more=True)
        sent: Trace = Trace(1)
        for _ in range(3 * len(subs["a"]) + 1):
            acts = m.on_reply(sent, reply, NOW)  # type: ignore[attr-defined]
            frame = one(acts, Send).frame
            if isinstance(frame, Exclude):
                break
            assert isinstance(frame, Trace)
            assert m.verified(one(acts, Verify).token, [True], NOW) == []  # type: ignore[attr-defined]
            sent = frame
        assert isinstance(frame, Exclude) and frame.items == ()
        reason = "an empty page that promised more" if pages == "empty" else "more pages than"
        assert reason in frame.abort

    def test_one_submission_is_excluded_even_with_chunks_smaller_than_it(self) -> None:
        m, subs = self.forwarded()
        m.policy = replace(m.policy, chunk_size=1)  # type: ignore[attr-defined]
        acc = Accusation(Failure.INVALID_PAYLOAD, (step(1, subs["b"][1]),))
        verify = one(m.on_reply(Trace(1), Accused(1, (acc,)), NOW), Verify)  # type: ignore[attr-defined]
        assert m.verified(verify.token, [True], NOW) == [Send(Exclude(1, subs["b"], 1))]  # type: ignore[attr-defined]

    def test_a_not_ready_chain_is_asked_again(self) -> None:
        m, _ = self.forwarded()
        err: MixnetError = NotReady("round 1 is mixed here")
        assert m.on_send_error(Trace(1), err, NOW) == []  # type: ignore[attr-defined]
        assert m.verdict_timer() == NOW + TRACE_RETRY  # type: ignore[attr-defined]
        acts = m.handle_timer(NOW + TRACE_RETRY + DEADLINE_S)  # type: ignore[attr-defined]
        assert Send(Trace(1)) in acts

    def test_a_chain_that_aborted_the_round_makes_the_entry_abort_it(self) -> None:
        """A later mix answers ``round-closed``: it aborted the round (after its trace
        timeout, or on this mix's abort that a restart lost). The entry mix aborts too."""
        m, _ = self.forwarded()
        closed: MixnetError = RoundClosed("round 1 was aborted at mix3")
        abort = one(m.on_send_error(Trace(1), closed, NOW), Send).frame  # type: ignore[attr-defined]
        assert isinstance(abort, Exclude) and abort.items == ()
        assert abort.abort == "the chain aborted the round: round 1 was aborted at mix3"
        assert m.on_send_error(abort, closed, NOW) == []  # type: ignore[attr-defined]
        m.on_reply(abort, Excluded(1), NOW)  # type: ignore[attr-defined]
        assert m.rounds[1].status is S.ABORTED  # type: ignore[attr-defined]
        assert not m.rounds[1].receipts  # type: ignore[attr-defined]

    def test_answers_that_waiting_does_not_mend_abort_the_round(self) -> None:
        """A reply too large to read (or from a mix of another wire version) comes back the
        same however often the entry mix asks: the TRACE_GIVE_UP-th in a row aborts the round
        with it as the reason, instead of asking every second until the later mixes give up
        after an hour. A not-ready or an internal error does not count; a usable answer
        starts the count again."""
        m, _ = self.forwarded()
        large: MixnetError = FrameTooLarge("mix3 sent a reply over 307200 bytes")
        for _ in range(TRACE_GIVE_UP - 1):
            assert m.on_send_error(Trace(1), large, NOW) == []  # type: ignore[attr-defined]
            m.on_send_error(Trace(1), NotReady("busy"), NOW)  # type: ignore[attr-defined]
            m.on_send_error(Exclude(1, (), 0), InternalError("oops"), NOW)  # type: ignore[attr-defined]
        assert m.verdict_timer() == NOW + TRACE_RETRY  # type: ignore[attr-defined]
        assert m.on_reply(Trace(1), Accused(1, (), untraced=1), NOW) != []  # type: ignore[attr-defined]
        assert m.rounds[1].trace_failures == 0  # type: ignore[attr-defined]
        m2, _ = self.forwarded()
        other: MixnetError = UnsupportedVersion("wire version 9")
        for _ in range(TRACE_GIVE_UP - 1):
            assert m2.on_send_error(Trace(1), other, NOW) == []  # type: ignore[attr-defined]
        abort = one(m2.on_send_error(Trace(1), other, NOW), Send).frame  # type: ignore[attr-defined]
        assert isinstance(abort, Exclude) and abort.items == ()
        assert abort.abort == (
            f"mix {m2.successor}'s answers to trace could not be used {TRACE_GIVE_UP} times "  # type: ignore[attr-defined]
            "in a row: wire version 9"
        )
        # the abort itself refused: asked again (trace, then the abort again), no new abort
        assert m2.on_send_error(abort, other, NOW) == []  # type: ignore[attr-defined]
        assert m2.verdict_timer() == NOW + TRACE_RETRY  # type: ignore[attr-defined]
        done = m2.on_reply(abort, Excluded(1), NOW)  # type: ignore[attr-defined]
        assert m2.rounds[1].status is S.ABORTED  # type: ignore[attr-defined]
        assert done


def test_a_pruned_round_reopened_is_refused_with_a_typed_error() -> None:
    """A relay forgets finished rounds from memory; an authenticated predecessor that opens
    or aborts one of them again gets ``round-closed``, not a store error."""
    from mixnet.core.rounds import KEEP_ROUNDS
    from mixnet.errors import RoundClosed
    from tests.mixnet.test_machines import make_relay

    relay, _ = make_relay()
    relay.on_abort_round(AbortRound(1), NOW)  # round 1 ends here (aborted)
    relay.on_open_round(OpenRound(1 + KEEP_ROUNDS), NOW)  # prunes round 1
    assert relay.status(1) is None and 1 in relay.forgotten
    with pytest.raises(RoundClosed):
        relay.on_open_round(OpenRound(1), NOW)
    with pytest.raises(RoundClosed):
        relay.on_abort_round(AbortRound(1), NOW)
    relay.on_open_round(OpenRound(2), NOW)  # a round never seen still opens
    assert relay.status(2) is S.OPEN


def test_more_refused_payloads_than_a_reply_carries_come_in_pages() -> None:
    """The last mix accuses at most ``accusation_cap`` payloads in one reply; the rest come
    on the next pages, each asked for with ``trace {round, page}``, the last saying no
    ``more``; nothing is untraced."""
    from mixnet.core.trace_caps import accusation_cap

    cap = accusation_cap(2, 3)
    assert cap == 2  # never fewer: a pair of duplicate accusations always fits
    bad = [b"\xff" + item(VALUE + LAYER)[1:] for _ in range(cap + 1)]
    last, _ = relay_at(last=True, items=bad)
    prove = one(read_back(last, last.on_trace(Trace(R), NOW)), Prove)
    assert prove.items == tuple(bad[:cap])
    assert prove.token == TraceProved(R, None, 0, more=True)
    steps = [step(2, i) for i in prove.items]
    (answer,) = last.proved(prove.token, steps, NOW)
    assert isinstance(answer, Reply) and isinstance(answer.frame, Accused)
    assert answer.frame.more and len(answer.frame.accusations) == cap
    prove = one(last.on_trace(Trace(R, 1), NOW), Prove)
    assert prove.items == (bad[cap],) and prove.token == TraceProved(R, None, 0)
    assert last.on_trace(Trace(R, 2), NOW) == [Reply(Accused(R))]  # past the end: nothing
    assert one(last.on_trace(Trace(R), NOW), Prove).items == tuple(bad[:cap])  # asked again


def test_a_relay_gives_up_a_trace_that_never_comes() -> None:
    """An entry mix that never asks for the verdict cannot make a relay keep the round's key
    and intake: after TRACE_TIMEOUT they are erased and the round is aborted here."""
    from mixnet.core.tracing import TRACE_TIMEOUT

    relay = forwarded_relay([item(RELAY_ITEM) for _ in range(2)])
    assert relay.next_timer() == NOW + TRACE_TIMEOUT
    assert relay.handle_timer(NOW + TRACE_TIMEOUT - 1) == []
    acts = relay.handle_timer(NOW + TRACE_TIMEOUT)
    assert acts == [Persist((DropIntake(R), EraseKey(R), SetRound(R, status=S.ABORTED)))]
    assert relay.status(R) is S.ABORTED and relay.next_timer() is None
    # a late entry mix is told the round was aborted, not that there is nothing to accuse
    with pytest.raises(RoundClosed, match="aborted"):
        relay.on_trace(Trace(R), NOW)
    with pytest.raises(RoundClosed, match="aborted"):
        relay.on_exclude(Exclude(R, (), 0), NOW)
    assert relay.on_exclude(Exclude(R, (), 0, "late abort"), NOW) == [Reply(Excluded(R))]


def test_the_last_mix_gives_up_and_tells_the_sink() -> None:
    from mixnet.core.tracing import TRACE_TIMEOUT

    last, _ = relay_at(last=True, items=[item(VALUE + LAYER)])
    acts = last.handle_timer(NOW + TRACE_TIMEOUT)
    abort = one(acts, Send).frame
    assert isinstance(abort, AbortRound) and "no verdict reached mix3" in abort.reason
    assert last.status(R) is S.ABORTED
    assert read_back(last, last.on_reply(abort, Aborted(R), NOW)) == [Reply(Aborted(R))]


# --------------------------------------------------------------------------- ownership proofs


def proven_relay(
    *, last: bool, items: Sequence[bytes], failing: int, proven: bool = True
) -> RelayMachine:
    """A relay of a chain with ownership proofs that received ``items`` in one chunk, of
    which item ``failing`` did not peel; mixed (and, for a relay, forwarded)."""
    from mixnet.errors import DecryptionFailed

    hop = 2 if last else 1
    relay = RelayMachine(
        name=f"mix{hop + 1}", predecessor=PRED, item_length=len(items[0]), chunk_size=8,
        keys=Keys(f"mix{hop + 1}", hop + 1), hop=hop, successor="sink" if last else "mix3",
        last=last, validator=valid, proven=proven,
    )  # fmt: skip
    relay.on_open_round(OpenRound(R), NOW)
    relay.on_reply(OpenRound(R), RoundKeys(R, () if last else (announcement("mix3", 3, R),)), NOW)
    peel = one(relay.on_batch(chunk_frame(0, items, chunks=1, count=len(items))), Peel)
    results: list[bytes | MixnetError] = [i[:-LAYER] for i in peel.items]
    results[failing] = DecryptionFailed("does not open")
    persist = one(relay.peeled(peel.token, results, NOW), Persist)
    stored(relay, persist)
    acts = relay.persisted(persist.token, NOW)
    mix = one(acts, Mix)
    acts = relay.mixed(R, [list(mix.payloads)])
    if not last:
        batch = one(acts, Send).frame
        assert isinstance(batch, Batch)
        read_back(relay, relay.on_reply(batch, BatchAck(R, 0), NOW))
    return relay


class TestOwnershipProofs:
    items: ClassVar[list[bytes]] = [item(RELAY_ITEM) for _ in range(3)]

    def test_the_last_mix_accuses_an_input_it_could_not_peel(self) -> None:
        relay = proven_relay(last=True, items=self.items, failing=1)
        prove = one(read_back(relay, relay.on_trace(Trace(R), NOW)), Prove)
        assert list(prove.items) == [self.items[1]] and prove.failures == 1
        evidence = Step(2, self.items[1], b"", b"")  # no owner: nothing revealed
        (answer,) = relay.proved(prove.token, [evidence], NOW)
        assert answer == Reply(Accused(R, (Accusation(Failure.NO_OWNER, (evidence,)),), 0))

    def test_a_relays_own_failures_are_its_first_page(self) -> None:
        """A relay's own accusations come first, on pages of their own that promise more;
        the page after them is its successor's first (here: nothing downstream)."""
        relay = proven_relay(last=False, items=self.items, failing=0)
        prove = one(read_back(relay, relay.on_trace(Trace(R), NOW)), Prove)
        assert list(prove.items) == [self.items[0]] and prove.failures == 1
        revealed = step(1, self.items[0])
        (answer,) = relay.proved(prove.token, [revealed], NOW)
        accused = (Accusation(Failure.UNDECRYPTABLE, (revealed,)),)
        assert answer == Reply(Accused(R, accused, 0, more=True))
        assert relay.on_trace(Trace(R, 1), NOW) == [Send(Trace(R))]
        assert relay.on_reply(Trace(R), Accused(R), NOW) == [Reply(Accused(R))]

    def test_the_successors_pages_follow_its_own(self) -> None:
        relay = proven_relay(last=False, items=self.items, failing=0)
        read_back(relay, relay.on_trace(Trace(R), NOW))
        assert relay.on_trace(Trace(R, 2), NOW) == [Send(Trace(R, 1))]
        out = self.items[2][:-LAYER]
        reply = Accused(R, (accusation_of(out),), more=True)
        verify = one(relay.on_reply(Trace(R, 1), reply, NOW), Verify)
        prove = one(relay.verified(verify.token, [True], NOW), Prove)
        assert list(prove.items) == [self.items[2]] and prove.failures == 0
        mine = step(1, self.items[2])
        (answer,) = relay.proved(prove.token, [mine], NOW)
        assert answer == Reply(Accused(R, (reply.accusations[0].extended(mine),), 0, more=True))

    def test_without_ownership_proofs_a_failure_is_untraced(self) -> None:
        relay = proven_relay(last=True, items=self.items, failing=1, proven=False)
        assert read_back(relay, relay.on_trace(Trace(R), NOW)) == [Reply(Accused(R, (), 1))]


def proven_relay_and_disk(
    *, last: bool, items: Sequence[bytes], failing: int | None
) -> tuple[RelayMachine, MemoryStore]:
    """:func:`proven_relay` (``failing``: the position among the items peeled, if any), with
    every write it asked for kept in a store."""
    from mixnet.errors import DecryptionFailed

    disk = MemoryStore()
    kept = disk.kept
    hop = 2 if last else 1
    relay = proven_machine(hop, last)
    kept(relay.on_open_round(OpenRound(R), NOW))
    later = () if last else (announcement("mix3", 3, R),)
    kept(relay.on_reply(OpenRound(R), RoundKeys(R, later), NOW))
    peel = one(relay.on_batch(chunk_frame(0, items, chunks=1, count=len(items))), Peel)
    results: list[bytes | MixnetError] = [i[:-LAYER] for i in peel.items]
    if failing is not None:
        results[failing] = DecryptionFailed("does not open")
    persist = one(kept(relay.peeled(peel.token, results, NOW)), Persist)
    stored(relay, persist)  # for read_back
    mix = one(kept(relay.persisted(persist.token, NOW)), Mix)
    acts = kept(relay.mixed(R, [list(mix.payloads)]))
    if not last:
        batch = one(acts, Send).frame
        assert isinstance(batch, Batch)
        kept(relay.on_reply(batch, BatchAck(R, 0), NOW))
    return relay, disk


def proven_machine(hop: int, last: bool) -> RelayMachine:
    return RelayMachine(
        name=f"mix{hop + 1}", predecessor=PRED, item_length=RELAY_ITEM, chunk_size=8,
        keys=Keys(f"mix{hop + 1}", hop + 1), hop=hop, successor="sink" if last else "mix3",
        last=last, validator=valid, proven=True,
    )  # fmt: skip


def restarted(disk: MemoryStore, *, last: bool) -> RelayMachine:
    """The relay rebuilt from ``disk`` as a restarted node reads it (no chunk inputs)."""
    hop = 2 if last else 1
    machine, _ = RelayMachine.restore(
        disk.records(inputs=False), NOW, name=f"mix{hop + 1}", predecessor=PRED,
        item_length=RELAY_ITEM, chunk_size=8, keys=Keys(f"mix{hop + 1}", hop + 1), hop=hop,
        successor="sink" if last else "mix3", last=last, validator=valid, proven=True,
    )  # fmt: skip
    return machine


def loaded(machine: RelayMachine, disk: MemoryStore, actions: list[Action]) -> list[Action]:
    """``actions`` must ask to read the round's intake back: what follows once it is."""
    (load,) = actions
    assert isinstance(load, LoadIntake) and load.round_id == R
    return machine.intake_loaded(load.token, disk.records().chunks[R], NOW)


class TestOwnershipProofsAfterARestart:
    """A relay's inputs that did not peel are not kept apart on disk: a restarted relay
    derives them from its stored chunks (items as received, the digests they brought into
    the replay filter, the inputs that peeled) and accuses exactly what it would have
    without the restart, instead of counting them as untraced (which aborted the round)."""

    def items(self) -> list[bytes]:
        a, b, c = (item(RELAY_ITEM) for _ in range(3))
        return [a, b, a, c]  # the second a is a replay: dropped, and untraced either way

    def test_the_last_mix_accuses_the_same_inputs(self) -> None:
        items = self.items()
        live, disk = proven_relay_and_disk(last=True, items=items, failing=1)
        again = restarted(disk, last=True)
        before = one(read_back(live, live.on_trace(Trace(R), NOW)), Prove)
        after = one(loaded(again, disk, again.on_trace(Trace(R), NOW)), Prove)
        assert list(after.items) == list(before.items) == [items[1]]
        assert after.failures == before.failures == 1
        evidence = Step(2, items[1], b"", b"")
        expected = Reply(Accused(R, (Accusation(Failure.NO_OWNER, (evidence,)),), 1))
        assert again.proved(after.token, [evidence], NOW) == [expected]
        assert live.proved(before.token, [evidence], NOW) == [expected]

    def test_a_relay_with_nothing_traced_downstream_accuses_its_own(self) -> None:
        items = self.items()
        live, disk = proven_relay_and_disk(last=False, items=items, failing=2)
        again = restarted(disk, last=False)
        assert again.status(R) is S.FORWARDED and again.rounds[R].failures_on_disk
        after = one(loaded(again, disk, again.on_trace(Trace(R), NOW)), Prove)
        before = one(read_back(live, live.on_trace(Trace(R), NOW)), Prove)
        assert list(after.items) == list(before.items) == [items[3]]  # c, the third peeled
        assert after.failures == before.failures == 1
        revealed = step(1, items[3])
        (answer,) = again.proved(after.token, [revealed], NOW)
        accused = (Accusation(Failure.UNDECRYPTABLE, (revealed,)),)
        assert answer == Reply(Accused(R, accused, 1, more=True))
        assert again.on_trace(Trace(R, 1), NOW) == [Send(Trace(R))]

    def test_a_relay_traces_accusations_and_its_own_failures(self) -> None:
        items = self.items()
        _, disk = proven_relay_and_disk(last=False, items=items, failing=0)
        again = restarted(disk, last=False)
        own = one(loaded(again, disk, again.on_trace(Trace(R), NOW)), Prove)
        assert list(own.items) == [items[0]] and own.failures == 1
        assert again.on_trace(Trace(R, 1), NOW) == [Send(Trace(R))]
        out = items[3][:-LAYER]
        reply = Accused(R, (accusation_of(out),))
        verify = one(again.on_reply(Trace(R), reply, NOW), Verify)
        prove = one(again.verified(verify.token, [True], NOW), Prove)
        assert list(prove.items) == [items[3]] and prove.failures == 0

    def test_a_restart_without_drops_reads_nothing_back(self) -> None:
        items = [item(RELAY_ITEM) for _ in range(3)]
        _, disk = proven_relay_and_disk(last=True, items=items, failing=None)
        again = restarted(disk, last=True)  # an honest round: no read back, nothing to say
        assert not again.rounds[R].failures_on_disk
        assert again.on_trace(Trace(R), NOW) == [Reply(Accused(R, (), 0))]


def test_unpeeled_inputs_are_the_brought_items_that_did_not_peel() -> None:
    """Of a stored chunk's items as received: replays (of another chunk, or a repeat in the
    chunk) are not failures; items brought into the filter that are not among the inputs
    are, each once, in the order received."""
    a, b, c, d = (item(RELAY_ITEM) for _ in range(4))
    received = [a, b, a, d, c, b]
    digests = replay_digests(leaf_hashes(received))
    brought = digests[0:16] + digests[16:32] + digests[64:80]  # a, b, c: d is another's
    chunk = Chunk(PRED, 0, 1, 1, 6, dropped=4, payloads=(c[:-LAYER], a[:-LAYER]),
                  digests=brought, inputs=(a, c), received=tuple(received))  # fmt: skip
    assert unpeeled_inputs(chunk) == (b,)
    assert unpeeled_inputs(replace(chunk, dropped=0)) == ()
    assert unpeeled_inputs(replace(chunk, inputs=(a, b, c))) == ()


# --------------------------------------------------------------------------- duplicates


class TestDuplicates:
    """Two inputs of a relay that peel to one onion (a client made them collide): the relay
    leaves every copy out of its batch and accuses both inputs (``duplicate``); without it,
    the next mix would drop the second copy as an untraced replay and the round abort."""

    def twins(self) -> tuple[bytes, bytes, bytes]:
        base, other = item(RELAY_ITEM), item(RELAY_ITEM)
        a = base[:-LAYER] + b"\x01" * LAYER  # fake layers: both peel to base[:-LAYER]
        b = base[:-LAYER] + b"\x02" * LAYER
        return a, b, other

    def relay(
        self, disk: MemoryStore, items: Sequence[bytes], chunk_size: int = 16
    ) -> tuple[RelayMachine, Mix]:
        relay = RelayMachine(
            name="mix2", predecessor=PRED, item_length=RELAY_ITEM, chunk_size=chunk_size,
            keys=Keys("mix2", 2), hop=1, successor="mix3", validator=valid,
        )  # fmt: skip
        disk.kept(relay.on_open_round(OpenRound(R), NOW))
        disk.kept(relay.on_reply(OpenRound(R), RoundKeys(R, (announcement("mix3", 3, R),)), NOW))
        peel = one(relay.on_batch(chunk_frame(0, items, chunks=1, count=len(items))), Peel)
        persist = one(disk.kept(relay.peeled(peel.token, [i[:-LAYER] for i in peel.items],
                                             NOW)), Persist)  # fmt: skip
        stored(relay, persist)
        return relay, one(disk.kept(relay.persisted(persist.token, NOW)), Mix)

    def forward(self, relay: RelayMachine, disk: MemoryStore, mix: Mix) -> None:
        batch = one(disk.kept(relay.mixed(R, [list(mix.payloads)])), Send).frame
        assert isinstance(batch, Batch)
        disk.kept(read_back(relay, relay.on_reply(batch, BatchAck(R, 0), NOW)))
        assert relay.status(R) is S.FORWARDED

    def test_every_copy_is_left_out_and_both_inputs_accused(self) -> None:
        a, b, other = self.twins()
        disk = MemoryStore()
        relay, mix = self.relay(disk, [a, other, b])
        assert list(mix.payloads) == [other[:-LAYER]]  # what mix 3 gets: no copy at all
        assert relay.rounds[R].duplicates == {a[:-LAYER]} and relay.rounds[R].dropped == 2
        self.forward(relay, disk, mix)
        prove = one(read_back(relay, relay.on_trace(Trace(R), NOW)), Prove)
        assert list(prove.items) == [a, b] and prove.failures == 0
        steps = [step(1, a), step(1, b)]
        (answer,) = relay.proved(prove.token, steps, NOW)
        dups = tuple(Accusation(Failure.DUPLICATE, (s,)) for s in steps)
        # nothing untraced: both copies accused; the successor's pages follow
        assert answer == Reply(Accused(R, dups, 0, more=True))

    def test_they_come_before_the_accusations_traced_back(self) -> None:
        a, b, other = self.twins()
        disk = MemoryStore()
        relay, mix = self.relay(disk, [a, other, b])
        self.forward(relay, disk, mix)
        own = one(read_back(relay, relay.on_trace(Trace(R), NOW)), Prove)
        assert list(own.items) == [a, b]
        assert isinstance(own.token, TraceProved) and own.token.duplicates == 2
        assert relay.on_trace(Trace(R, 1), NOW) == [Send(Trace(R))]
        reply = Accused(R, (accusation_of(other[:-LAYER]),))
        verify = one(relay.on_reply(Trace(R), reply, NOW), Verify)
        prove = one(relay.verified(verify.token, [True], NOW), Prove)
        assert list(prove.items) == [other]
        assert isinstance(prove.token, TraceProved) and prove.token.duplicates == 0

    def test_a_group_larger_than_a_page_is_untraced_whole(self) -> None:
        """A duplicate holds only with its twins: three copies do not fit a page of two
        accusations, so none is accused (all three count as untraced: the round aborts,
        and nobody is wrongly blamed)."""
        a, b, other = self.twins()
        c = a[:-LAYER] + b"\x03" * LAYER
        disk = MemoryStore()
        relay, mix = self.relay(disk, [a, other, b, c], chunk_size=8)  # 2 accusations a page
        self.forward(relay, disk, mix)
        assert read_back(relay, relay.on_trace(Trace(R), NOW)) == [Send(Trace(R))]
        assert relay.on_reply(Trace(R), Accused(R), NOW) == [Reply(Accused(R, untraced=3))]

    def test_a_restarted_relay_finds_them_again_in_its_stored_outputs(self) -> None:
        a, b, other = self.twins()
        disk = MemoryStore()
        relay, mix = self.relay(disk, [a, other, b])
        self.forward(relay, disk, mix)
        again, _ = RelayMachine.restore(
            disk.records(inputs=False), NOW, name="mix2", predecessor=PRED,
            item_length=RELAY_ITEM, chunk_size=16, keys=Keys("mix2", 2), hop=1,
            successor="mix3", validator=valid,
        )  # fmt: skip
        st = again.rounds[R]
        assert st.duplicates == {a[:-LAYER]} and st.dropped == 2
        (load,) = again.on_trace(Trace(R), NOW)
        assert isinstance(load, LoadIntake)
        prove = one(again.intake_loaded(load.token, disk.records().chunks[R], NOW), Prove)
        assert list(prove.items) == [a, b]

    def test_the_last_mix_keeps_equal_payloads(self) -> None:
        a, b, _ = self.twins()
        last, _ = relay_at(last=True, items=[a, b])  # mixed both, in order
        assert last.rounds[R].duplicates == set() and last.rounds[R].dropped == 0


def test_repeated_items_finds_every_repeat_across_parts() -> None:
    from mixnet.core.items import Items, repeated_items

    rows = [bytes([i % 5]) * 12 for i in range(12)]  # 0..4 repeat, first 8 bytes shared too
    parts = [Items.of(rows[:7], 12), rows[7:]]
    assert repeated_items(parts) == {bytes([v]) * 12: (3 if v < 2 else 2) for v in range(5)}
    assert repeated_items([Items.of([b"x" * 12, b"y" * 12], 12)]) == {}
    same_prefix = [b"p" * 8 + b"1", b"p" * 8 + b"2"]  # equal first 8 bytes, different items
    assert repeated_items([same_prefix]) == {}
    assert repeated_items([[b"ab", b"ab", b"a"]]) == {b"ab": 2}  # shorter than 8 bytes
    assert repeated_items([]) == {} and repeated_items([[]]) == {}
