"""Unit tests of the round machines of mixnet.core, one machine at a time.

Each test drives ONE machine (entry mix, relay or sink) event by event with hand-made frames
and asserts the exact actions it returns. Keys are fake (32-byte secrets, unsigned
announcements): the machines never look inside them. Peeling is faked by cutting
:data:`LAYER` bytes off each item, as the in-memory chain harness does.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mixnet.chunk_signature import leaf_hash
from mixnet.core.actions import (
    Action,
    CompactReceipts,
    Deliver,
    DeliveredBatch,
    LoadIntake,
    Mix,
    Peel,
    Persist,
    Publish,
    Reply,
    Send,
)
from mixnet.core.downstream import AwaitChunk, ChunkStored
from mixnet.core.entry import (
    OPEN_RETRY_BASE,
    OPEN_RETRY_CAP,
    OPENING_TIMEOUT,
    RECEIPT_ROUNDS,
    AwaitStored,
    EntryMachine,
    Opened,
    Stored,
    SubmitPeeled,
)
from mixnet.core.intake import submission_digest
from mixnet.core.outbound import permuted_chunks
from mixnet.core.policy import RoundPolicy
from mixnet.core.records import (
    AckOutbound,
    AddChunk,
    AddSubmission,
    Chunk,
    DerivedOutbound,
    DropIntake,
    DropOutbound,
    EraseKey,
    ForgetReceipts,
    NewRound,
    NodeRecords,
    OutboundBatch,
    OutboundChunk,
    PutOutbound,
    PutResult,
    RoundRecord,
    SetRound,
    Submission,
    Write,
)
from mixnet.core.relay import ChunkPeeled, RelayMachine
from mixnet.core.rounds import CHUNK_RETRY, CHUNK_RETRY_CAP, RoundKey
from mixnet.core.sink import SinkMachine
from mixnet.core.status import INITIAL, TERMINAL, Role, RoundStatus, advance
from mixnet.errors import (
    BadLength,
    DecryptionFailed,
    DuplicateClient,
    InternalError,
    MixnetError,
    RoundClosed,
    UnknownRound,
    WrongCount,
)
from mixnet.frames import (
    Aborted,
    AbortRound,
    Accepted,
    Accused,
    Batch,
    BatchAck,
    Exclude,
    Excluded,
    OpenRound,
    RoundKeys,
    RoundOffer,
    Submit,
    Trace,
)
from mixnet.keys import RoundKeyAnnouncement
from tests.mixnet.chain_harness import MemoryChain, Node, as_stored, fake_peel

S = RoundStatus
A = TypeVar("A")

NOW = 1000.0
DEADLINE_S = 10.0
HOPS = 3  # mix1 (entry), mix2, mix3, then the sink
M = 2  # inner onions per submission box
LAYER = 8  # bytes one (fake) onion layer adds
VALUE = 8  # bytes of a plaintext payload
RELAY_ITEM = VALUE + LAYER * (HOPS - 1)  # what mix2 receives
ENTRY_BOX = LAYER + M * RELAY_ITEM  # a submission: one fake layer around M inner onions
#: min 2, max 3 users; below the minimum at the deadline the round aborts; chunks of 2
POLICY = RoundPolicy(2, 3, DEADLINE_S, "abort", chunk_size=2)

_fresh = itertools.count(1)


# ============================================================================ helpers


def relay_digest(x: bytes) -> bytes:
    """A relay's replay digest of a received item: its Merkle leaf's first 16 bytes."""
    return leaf_hash(x)[:16]


def announcement(node: str, index: int, round_id: int) -> RoundKeyAnnouncement:
    return RoundKeyAnnouncement(
        chain_id="test",
        node=node,
        round_id=round_id,
        public_key=bytes([index]) * 32,
        signature=b"\0" * 64,
    )


@dataclass
class Keys:
    """A key factory like ``MemoryChain._keys`` that remembers which rounds it made keys
    for."""

    node: str
    index: int
    calls: list[int] = field(default_factory=list)

    def secret(self, round_id: int) -> bytes:
        return bytes([self.index]) * 24 + round_id.to_bytes(8, "big")

    def announcement(self, round_id: int) -> RoundKeyAnnouncement:
        return announcement(self.node, self.index, round_id)

    def __call__(self, round_id: int) -> RoundKey:
        self.calls.append(round_id)
        return RoundKey(self.secret(round_id), self.announcement(round_id))


def downstream(round_id: int, hops: int = HOPS) -> tuple[RoundKeyAnnouncement, ...]:
    """The announcements of mix2..mix{hops}, as the entry mix's successor returns them."""
    return tuple(announcement(f"mix{i}", i, round_id) for i in range(2, hops + 1))


def one(actions: Sequence[Action], kind: type[A]) -> A:
    """The only action of type ``kind`` in ``actions``."""
    found = [a for a in actions if isinstance(a, kind)]
    assert len(found) == 1, actions
    return found[0]


def item(length: int) -> bytes:
    """A distinct item of ``length`` bytes (and stays distinct when peeled)."""
    return (next(_fresh).to_bytes(8, "big") * (length // 8 + 1))[:length]


def peel(items: Sequence[bytes], split: int = 1) -> list[bytes | MixnetError]:
    return fake_peel(items, split)


def box(inner: Sequence[bytes] | None = None) -> bytes:
    """A fake submission box around ``inner`` (default: ``M`` distinct relay items)."""
    items = inner if inner is not None else [item(RELAY_ITEM) for _ in range(M)]
    return b"".join(items) + item(LAYER)


# ---------------------------------------------------------------------------- entry


def make_entry(policy: RoundPolicy = POLICY, hops: int = HOPS) -> tuple[EntryMachine, Keys]:
    keys = Keys("mix1", 1)
    m = EntryMachine(
        name="mix1", hops=hops, messages=M, box_length=ENTRY_BOX, policy=policy, keys=keys
    )
    return m, keys


def restore_entry(
    records: NodeRecords, policy: RoundPolicy = POLICY, now: float = NOW
) -> tuple[EntryMachine, list[Action]]:
    return EntryMachine.restore(
        records,
        now,
        name="mix1",
        hops=HOPS,
        messages=M,
        box_length=ENTRY_BOX,
        policy=policy,
        keys=Keys("mix1", 1),
    )


def open_entry(policy: RoundPolicy = POLICY, now: float = NOW) -> tuple[EntryMachine, Keys]:
    """An entry machine whose round 1 is OPEN (committed) since ``now``."""
    m, keys = make_entry(policy)
    m.handle_timer(now)
    m.on_reply(OpenRound(1), RoundKeys(1, downstream(1)), now)
    assert m.persisted(Opened(1), now) == []
    return m, keys


def submit_frame(client: str, round_id: int = 1) -> Submit:
    return Submit(round_id, client, box())


def peel_submission(m: EntryMachine, frame: Submit, now: float = NOW) -> list[Action]:
    """on_submit, then peeled: the actions after the peel (the store write first)."""
    p = one(m.on_submit(frame), Peel)
    return m.peeled(p.token, peel(p.items, p.split), now)


def store(m: EntryMachine, frame: Submit, now: float = NOW) -> list[Action]:
    """A submission all the way: peeled, stored; returns every action after the peel's,
    the commit's reactions included (in the order the adapter carries them out)."""
    after_peel = peel_submission(m, frame, now)
    persist = after_peel[0]
    assert isinstance(persist, Persist) and isinstance(persist.token, Stored)
    return [*m.persisted(persist.token, now), *after_peel[1:]]


def payloads_of(frame: Submit) -> tuple[bytes, ...]:
    return tuple(p for p in fake_peel([frame.box], M) if isinstance(p, bytes))


def confirm(m: EntryMachine, round_id: int, now: float = NOW) -> list[Action]:
    """A forwarded round's trace with no accusation: ``exclude`` nothing, then confirmed."""
    assert m.status(round_id) is S.FORWARDED
    exclude = one(m.on_reply(Trace(round_id), Accused(round_id), now), Send).frame
    assert exclude == Exclude(round_id, (), 0)
    acts = m.on_reply(exclude, Excluded(round_id), now)
    assert m.status(round_id) is S.CONFIRMED
    return acts


# ============================================================================ entry mix


class TestEntryOpening:
    def test_fresh_machine_opens_round_1_on_the_timer(self) -> None:
        m, keys = make_entry()
        assert m.next_timer() == 0.0  # at once
        acts = m.handle_timer(NOW)
        assert acts == [
            Persist((NewRound(1, S.OPENING, NOW, keys.secret(1), (keys.announcement(1),)),)),
            Send(OpenRound(1)),
        ]
        assert keys.calls == [1]
        assert m.status(1) is S.OPENING
        assert m.offer() is None
        assert m.next_timer() == NOW + OPENING_TIMEOUT  # waits for the chain's answer
        assert m.handle_timer(NOW + 100) == []  # no second round while one is opening

    def test_an_opening_the_chain_never_answers_is_given_up_and_aborted(self) -> None:
        m, _ = make_entry()
        m.handle_timer(NOW)
        late = NOW + OPENING_TIMEOUT
        acts = m.handle_timer(late)
        assert acts == [
            Persist((ForgetReceipts(1), DropIntake(1), EraseKey(1), SetRound(1, status=S.ABORTED))),
            Send(AbortRound(1)),
        ]
        assert m.status(1) is S.ABORTED and m.opening is None
        assert m.next_timer() == late + OPEN_RETRY_BASE  # backs off as after a refusal
        # the chain's late answer is ignored (the abort follows it on the same link)
        assert m.on_reply(OpenRound(1), RoundKeys(1, downstream(1)), late + 1) == []
        acts = m.handle_timer(late + OPEN_RETRY_BASE)
        assert Send(OpenRound(2)) in acts

    def test_round_keys_open_the_round_once_committed(self) -> None:
        m, keys = make_entry()
        m.handle_timer(NOW)
        anns = (keys.announcement(1), *downstream(1))
        acts = m.on_reply(OpenRound(1), RoundKeys(1, downstream(1)), NOW + 1)
        assert acts == [
            Persist(
                (SetRound(1, status=S.OPEN, deadline=NOW + 1 + DEADLINE_S, announcements=anns),),
                token=Opened(1),
            )
        ]
        assert m.status(1) is S.OPEN
        assert m.offer() is None  # not before the commit
        assert m.persisted(Opened(1), NOW + 1) == []
        assert m.offer() == RoundOffer(
            round_id=1,
            deadline=NOW + 1 + DEADLINE_S,
            messages=M,
            payload_length=0,
            clients=0,
            min_clients=2,
            max_clients=3,
            announcements=anns,
        )
        assert m.next_timer() == NOW + 1 + DEADLINE_S
        # a late duplicate of the answer changes nothing
        assert m.on_reply(OpenRound(1), RoundKeys(1, downstream(1)), NOW + 2) == []
        assert m.handle_timer(NOW + 2) == []

    @pytest.mark.parametrize(
        "announcements",
        [
            (),
            downstream(1)[:1],
            (*downstream(1), announcement("mix4", 4, 1)),
            (downstream(1)[0], announcement("mix3", 3, 2)),  # a key for another round
        ],
        ids=["none", "too-few", "too-many", "other-round"],
    )
    def test_wrong_announcements_fail_the_round(
        self, announcements: tuple[RoundKeyAnnouncement, ...]
    ) -> None:
        m, _ = make_entry()
        m.handle_timer(NOW)
        acts = m.on_reply(OpenRound(1), RoundKeys(1, announcements), NOW)
        assert acts == [
            Persist((EraseKey(1), SetRound(1, status=S.FAILED))),
            Send(AbortRound(1)),
        ]
        assert m.status(1) is S.FAILED
        assert m.offer() is None
        assert m.next_timer() == NOW + OPEN_RETRY_BASE

    def test_refused_open_round_fails_it_and_backs_off(self) -> None:
        m, keys = make_entry()
        m.handle_timer(NOW)
        acts = m.on_send_error(OpenRound(1), RoundClosed("no"), NOW)
        assert acts == [
            Persist((EraseKey(1), SetRound(1, status=S.FAILED))),
            Send(AbortRound(1)),
        ]
        assert m.status(1) is S.FAILED
        assert m.next_timer() == NOW + OPEN_RETRY_BASE
        assert m.handle_timer(NOW + OPEN_RETRY_BASE / 2) == []  # still backing off
        # the late answer of a failed round is ignored
        assert m.on_reply(OpenRound(1), RoundKeys(1, downstream(1)), NOW) == []
        assert m.on_send_error(OpenRound(1), RoundClosed("no"), NOW) == []
        acts = m.handle_timer(NOW + OPEN_RETRY_BASE)
        assert acts == [
            Persist(
                (
                    NewRound(
                        2, S.OPENING, NOW + OPEN_RETRY_BASE, keys.secret(2), (keys.announcement(2),)
                    ),
                )
            ),
            Send(OpenRound(2)),
        ]

    def test_backoff_doubles_up_to_the_cap_and_resets_after_an_open(self) -> None:
        m, _ = make_entry()
        now = NOW
        delays = []
        for r in range(1, 10):
            assert m.handle_timer(now)[-1] == Send(OpenRound(r))
            m.on_send_error(OpenRound(r), InternalError("down"), now)
            timer = m.next_timer()
            assert timer is not None
            delays.append(timer - now)
            now = timer
        assert delays == [min(OPEN_RETRY_CAP, OPEN_RETRY_BASE * 2**k) for k in range(9)]
        assert delays[-1] == OPEN_RETRY_CAP
        # round 10 opens; its refusal count starts again from the base delay
        assert m.handle_timer(now)[-1] == Send(OpenRound(10))
        m.on_reply(OpenRound(10), RoundKeys(10, downstream(10)), now)
        m.persisted(Opened(10), now)
        m.handle_timer(now + DEADLINE_S)  # aborted: nobody submitted
        assert m.status(10) is S.ABORTED
        assert m.status(11) is S.OPENING
        m.on_send_error(OpenRound(11), InternalError("down"), now + DEADLINE_S)
        assert m.next_timer() == now + DEADLINE_S + OPEN_RETRY_BASE

    def test_a_failed_open_commit_does_not_wedge_the_machine(self) -> None:
        m, _ = make_entry()
        m.handle_timer(NOW)
        m.on_reply(OpenRound(1), RoundKeys(1, downstream(1)), NOW)
        m.persist_failed(Opened(1), NOW)
        assert m.status(1) in TERMINAL
        timer = m.next_timer()
        assert timer is not None
        assert Send(OpenRound(2)) in m.handle_timer(max(timer, NOW))


class TestEntrySubmissions:
    def test_unknown_round(self) -> None:
        m, _ = open_entry()
        with pytest.raises(UnknownRound):
            m.on_submit(submit_frame("alice", round_id=2))

    def test_round_still_opening_is_unknown(self) -> None:
        m, _ = make_entry()
        m.handle_timer(NOW)
        with pytest.raises(UnknownRound):
            m.on_submit(submit_frame("alice", round_id=1))

    def test_closed_round(self) -> None:
        m, _ = open_entry()
        store(m, submit_frame("a"))
        store(m, submit_frame("b"))
        m.handle_timer(NOW + DEADLINE_S)
        assert m.status(1) is S.CLOSED
        with pytest.raises(RoundClosed):
            m.on_submit(submit_frame("late"))

    def test_aborted_round(self) -> None:
        m, _ = open_entry()
        m.handle_timer(NOW + DEADLINE_S)
        assert m.status(1) is S.ABORTED
        with pytest.raises(RoundClosed):
            m.on_submit(submit_frame("late"))

    def test_failed_round(self) -> None:
        m, _ = make_entry()
        m.handle_timer(NOW)
        m.on_send_error(OpenRound(1), InternalError("down"), NOW)
        with pytest.raises(RoundClosed):
            m.on_submit(submit_frame("alice"))

    def test_a_submission_is_acknowledged_after_it_is_stored(self) -> None:
        m, _ = open_entry()
        frame = submit_frame("alice")
        digest = submission_digest(frame.box)
        token = SubmitPeeled(1, "alice", digest)
        assert m.on_submit(frame) == [Peel(1, (frame.box,), token, split=M)]
        offer = m.offer()
        assert offer is not None and offer.clients == 0
        acts = m.peeled(token, peel([frame.box], M), NOW + 1)
        sub = Submission("alice", digest, payloads_of(frame))
        assert acts == [Persist((AddSubmission(1, sub),), token=Stored(1, ("alice",), (digest,)))]
        offer = m.offer()
        assert offer is not None and offer.clients == 1  # counted once peeled
        assert m.persisted(Stored(1, ("alice",), (digest,)), NOW + 1) == [
            Reply(Accepted(1, "alice"))
        ]
        assert m.status(1) is S.OPEN

    def test_exact_retry_while_storing_waits_for_the_original(self) -> None:
        m, _ = open_entry()
        frame = submit_frame("alice")
        stored = peel_submission(m, frame)
        # the client lost its connection and resends the identical frame
        assert m.on_submit(frame) == [Persist((), token=AwaitStored(1, "alice"))]
        persist = stored[0]
        assert isinstance(persist, Persist)
        assert m.persisted(persist.token, NOW) == [Reply(Accepted(1, "alice"))]
        assert m.persisted(AwaitStored(1, "alice"), NOW) == [Reply(Accepted(1, "alice"))]
        # and once stored, a retry is acknowledged at once
        assert m.on_submit(frame) == [Reply(Accepted(1, "alice"))]
        offer = m.offer()
        assert offer is not None and offer.clients == 1

    def test_exact_retry_while_peeling_waits_for_the_original(self) -> None:
        m, _ = open_entry()
        frame = submit_frame("alice")
        first = one(m.on_submit(frame), Peel)
        second = one(m.on_submit(frame), Peel)  # not counted yet: peeled again
        acts = m.peeled(first.token, peel(first.items, first.split), NOW)
        assert isinstance(acts[0], Persist) and isinstance(acts[0].token, Stored)
        assert m.peeled(second.token, peel(second.items, second.split), NOW) == [
            Persist((), token=AwaitStored(1, "alice"))
        ]

    def test_waiting_retry_of_a_failed_write_gets_an_error(self) -> None:
        m, _ = open_entry()
        frame = submit_frame("alice")
        persist = peel_submission(m, frame)[0]
        assert isinstance(persist, Persist)
        assert m.on_submit(frame) == [Persist((), token=AwaitStored(1, "alice"))]
        with pytest.raises(InternalError):
            m.persist_failed(persist.token, NOW)
        with pytest.raises(InternalError):
            m.persisted(AwaitStored(1, "alice"), NOW)
        offer = m.offer()
        assert offer is not None and offer.clients == 0
        # the client submits afresh (new onions) and is accepted
        assert store(m, submit_frame("alice")) == [Reply(Accepted(1, "alice"))]

    def test_a_frame_is_stored_by_one_write_and_answered_or_refused_whole(self) -> None:
        """``peeled_many`` stores a frame's accepted submissions with one write: its commit
        acknowledges each, in order; its failure refuses them all and frees their client
        ids and onions, so that the same frames are taken again."""
        m, _ = open_entry(RoundPolicy(2, 10, DEADLINE_S, "abort", chunk_size=2))
        frames = [submit_frame(c) for c in ("a", "b", "c")]
        peels = [one(m.on_submit(f), Peel) for f in frames]
        opened = [(p.token, peel(p.items, p.split)) for p in peels]
        decided = m.peeled_many(opened, NOW)
        assert decided.outcomes == (None, None, None)
        (persist,) = decided.actions
        assert isinstance(persist, Persist) and isinstance(persist.token, Stored)
        assert persist.token.clients == ("a", "b", "c")
        assert persist.writes == tuple(
            AddSubmission(1, Submission(f.client, submission_digest(f.box), payloads_of(f)))
            for f in frames
        )
        with pytest.raises(InternalError):
            m.persist_failed(persist.token, NOW)
        offer = m.offer()
        assert offer is not None and offer.clients == 0
        assert not m.rounds[1].pending and not set(m.rounds[1].payload_digests)
        peels = [one(m.on_submit(f), Peel) for f in frames]  # the same frames, again
        again = m.peeled_many([(p.token, peel(p.items, p.split)) for p in peels], NOW)
        (persist,) = again.actions
        assert isinstance(persist, Persist)
        assert m.persisted(persist.token, NOW) == [
            Reply(Accepted(1, c)) for c in ("a", "b", "c")
        ]
        assert list(m.rounds[1].submissions) == ["a", "b", "c"]
        assert m.rounds[1].receipts.matches(
            {c: submission_digest(f.box) for c, f in zip("abc", frames, strict=True)}
        )

    def test_identical_resend_after_a_failed_write_is_taken_again(self) -> None:
        m, _ = open_entry()
        frame = submit_frame("alice")
        persist = peel_submission(m, frame)[0]
        assert isinstance(persist, Persist)
        with pytest.raises(InternalError):
            m.persist_failed(persist.token, NOW)
        assert m.on_submit(frame) == [
            Peel(1, (frame.box,), SubmitPeeled(1, "alice", submission_digest(frame.box)), split=M)
        ]

    def test_a_different_submission_of_an_accepted_client_is_refused(self) -> None:
        m, _ = open_entry()
        store(m, submit_frame("alice"))
        with pytest.raises(DuplicateClient):
            m.on_submit(submit_frame("alice"))

    def test_two_different_submissions_of_one_client_racing_through_the_peel(self) -> None:
        m, _ = open_entry()
        first, second = submit_frame("alice"), submit_frame("alice")
        p1 = one(m.on_submit(first), Peel)
        p2 = one(m.on_submit(second), Peel)  # neither is counted yet
        assert isinstance(m.peeled(p1.token, peel(p1.items, p1.split), NOW)[0], Persist)
        with pytest.raises(DuplicateClient):
            m.peeled(p2.token, peel(p2.items, p2.split), NOW)
        offer = m.offer()
        assert offer is not None and offer.clients == 1

    def test_unknown_tokens_are_a_programming_error(self) -> None:
        m, _ = open_entry()
        with pytest.raises(TypeError):
            m.peeled(AwaitStored(1, "a"), [], NOW)
        with pytest.raises(TypeError):
            m.persisted(object(), NOW)

    def test_a_peel_error_refuses_the_whole_submission(self) -> None:
        m, _ = open_entry()
        frame = submit_frame("alice")
        p = one(m.on_submit(frame), Peel)
        results = peel(p.items, p.split)
        results[1] = DecryptionFailed("the box does not open")
        with pytest.raises(DecryptionFailed):
            m.peeled(p.token, results, NOW)
        offer = m.offer()
        assert offer is not None and offer.clients == 0
        # nothing was reserved: the same client may submit again (even the same onions)
        assert store(m, frame) == [Reply(Accepted(1, "alice"))]

    def test_the_round_closes_at_max_users_and_mixes_once_everything_is_stored(self) -> None:
        m, keys = open_entry()
        a, b, c = submit_frame("a"), submit_frame("b"), submit_frame("c")
        store(m, a)
        pending_b = peel_submission(m, b)  # b is still being written
        acts = peel_submission(m, c, NOW + 2)  # the third user closes the round
        persist_c = acts[0]
        assert isinstance(persist_c, Persist)
        assert acts[1:] == [Persist((SetRound(1, status=S.CLOSED, clients=3),))]
        assert m.status(1) is S.CLOSED
        assert m.offer() is None
        assert m.persisted(persist_c.token, NOW + 2) == [Reply(Accepted(1, "c"))]  # b pending
        persist_b = pending_b[0]
        assert isinstance(persist_b, Persist)
        assert m.persisted(persist_b.token, NOW + 2) == [
            Reply(Accepted(1, "b")),
            Mix(1, payloads_of(a) + payloads_of(c) + payloads_of(b), POLICY.chunk_size),
        ]
        # the next round opens on the next timer
        assert m.next_timer() == 0.0
        assert m.handle_timer(NOW + 3) == [
            Persist((NewRound(2, S.OPENING, NOW + 3, keys.secret(2), (keys.announcement(2),)),)),
            Send(OpenRound(2)),
        ]

    def test_a_store_failure_in_a_closed_round_below_min_aborts_it(self) -> None:
        m, _ = open_entry(RoundPolicy(2, 2, DEADLINE_S, "wait"))
        store(m, submit_frame("a"))
        persist = peel_submission(m, submit_frame("b"))[0]  # closes the round at max
        assert isinstance(persist, Persist)
        assert m.status(1) is S.CLOSED
        acts = m.persist_failed(persist.token, NOW)
        assert acts == [
            Persist((ForgetReceipts(1), DropIntake(1), EraseKey(1), SetRound(1, status=S.ABORTED))),
            Send(AbortRound(1)),
        ]
        assert m.status(1) is S.ABORTED


class TestEntryDeadline:
    def test_deadline_closes_a_round_with_min_users(self) -> None:
        m, keys = open_entry()
        a, b = submit_frame("a"), submit_frame("b")
        store(m, a)
        store(m, b)
        assert m.handle_timer(NOW + DEADLINE_S - 0.001) == []
        acts = m.handle_timer(NOW + DEADLINE_S)
        t = NOW + DEADLINE_S
        assert acts == [
            Persist((SetRound(1, status=S.CLOSED, clients=2),)),
            Mix(1, payloads_of(a) + payloads_of(b), POLICY.chunk_size),
            Persist((NewRound(2, S.OPENING, t, keys.secret(2), (keys.announcement(2),)),)),
            Send(OpenRound(2)),
        ]
        assert m.status(1) is S.CLOSED

    def test_deadline_close_waits_for_a_submission_being_stored(self) -> None:
        m, _ = open_entry()
        a, b = submit_frame("a"), submit_frame("b")
        store(m, a)
        persist_b = peel_submission(m, b)[0]
        assert isinstance(persist_b, Persist)
        acts = m.handle_timer(NOW + DEADLINE_S)
        assert acts[0] == Persist((SetRound(1, status=S.CLOSED, clients=2),))
        assert not any(isinstance(x, Mix) for x in acts)
        assert m.persisted(persist_b.token, NOW + DEADLINE_S) == [
            Reply(Accepted(1, "b")),
            Mix(1, payloads_of(a) + payloads_of(b), POLICY.chunk_size),
        ]

    def test_deadline_aborts_a_round_below_min_users(self) -> None:
        m, keys = open_entry()
        a = submit_frame("a")
        store(m, a)
        t = NOW + DEADLINE_S
        acts = m.handle_timer(t)
        assert acts == [
            Persist((ForgetReceipts(1), DropIntake(1), EraseKey(1), SetRound(1, status=S.ABORTED))),
            Send(AbortRound(1)),
            Persist((NewRound(2, S.OPENING, t, keys.secret(2), (keys.announcement(2),)),)),
            Send(OpenRound(2)),
        ]
        assert m.status(1) is S.ABORTED
        # the receipts went with the round: the client is told to submit afresh
        with pytest.raises(RoundClosed):
            m.on_submit(a)
        assert m.on_reply(AbortRound(1), Aborted(1), t) == []

    def test_abort_while_a_submission_is_being_stored(self) -> None:
        m, _ = open_entry()
        persist = peel_submission(m, submit_frame("a"))[0]
        assert isinstance(persist, Persist)
        m.handle_timer(NOW + DEADLINE_S)
        assert m.status(1) is S.ABORTED
        with pytest.raises(RoundClosed):  # the client must not be told "accepted"
            m.persisted(persist.token, NOW + DEADLINE_S)

    def test_below_min_wait_stays_open_past_the_deadline(self) -> None:
        m, _ = open_entry(RoundPolicy(2, 3, DEADLINE_S, "wait"))
        store(m, submit_frame("a"))
        assert m.handle_timer(NOW + DEADLINE_S) == []
        assert m.status(1) is S.OPEN
        assert m.next_timer() is None  # only a submission can close it now
        acts = store(m, submit_frame("b"), NOW + 50)
        assert acts[0] == Reply(Accepted(1, "b"))
        assert one(acts, Mix).round_id == 1
        assert m.status(1) is S.CLOSED

    def test_receipts_of_a_finished_round_are_kept_for_receipt_rounds_rounds(self) -> None:
        m, keys = open_entry()
        a = submit_frame("a")
        store(m, a)
        store(m, submit_frame("b"))
        now = NOW + DEADLINE_S
        m.handle_timer(now)  # closes round 1, opens round 2
        chunk = one(m.mixed(1, [[b"x" * RELAY_ITEM]]), Send).frame
        m.on_reply(chunk, BatchAck(1, 0), now)
        assert m.status(1) is S.FORWARDED
        done, compact = confirm(m, 1, now)
        assert done == Persist((DropIntake(1), SetRound(1, status=S.CONFIRMED)))
        assert isinstance(compact, CompactReceipts) and compact.round_id == 1
        # as the adapter: the copy made off the event loop, handed back
        assert m.receipts_compacted(1, compact.receipts.compacted()) == []
        assert m.rounds[1].receipts.is_compact  # the retries below ask the compact table
        for r in range(2, RECEIPT_ROUNDS + 1):  # rounds 2..RECEIPT_ROUNDS are refused
            assert m.on_submit(a) == [Reply(Accepted(1, "a"))]
            m.on_send_error(OpenRound(r), InternalError("down"), now)
            timer = m.next_timer()
            assert timer is not None
            now = timer
            acts = m.handle_timer(now)
            new = NewRound(r + 1, S.OPENING, now, keys.secret(r + 1), (keys.announcement(r + 1),))
            if r + 1 <= RECEIPT_ROUNDS:
                assert acts == [Persist((new,)), Send(OpenRound(r + 1))]
            else:  # opening round RECEIPT_ROUNDS + 1 forgets round 1
                assert acts == [Persist((ForgetReceipts(1), new)), Send(OpenRound(r + 1))]
        assert m.status(1) is None
        with pytest.raises(UnknownRound):
            m.on_submit(a)

    def test_a_confirmed_round_has_its_receipts_compacted_and_they_still_answer(self) -> None:
        """Once the round is confirmed (its intake dropped), the machine asks for its
        receipts to be compacted off the event loop and takes the copy (no str or bytes per
        receipt); an exact retry is still acknowledged and another box still refused. A
        copy made before a change is refused: the receipts compact themselves instead."""
        m, _ = open_entry()
        a = submit_frame("a")
        store(m, a)
        store(m, submit_frame("b"))
        receipts = m.rounds[1].receipts
        assert not receipts.is_compact  # the intake's hot path uses the dict
        m.handle_timer(NOW + DEADLINE_S)  # closes round 1
        chunk = one(m.mixed(1, [[b"x" * RELAY_ITEM]]), Send).frame
        m.on_reply(chunk, BatchAck(1, 0), NOW)
        assert not receipts.is_compact  # mixed and forwarded: the intake is still held
        compact = one(confirm(m, 1), CompactReceipts)
        assert compact.receipts is receipts and not receipts.is_compact
        copy = receipts.compacted()  # what the adapter makes in a worker thread
        assert m.receipts_compacted(1, copy) == []
        assert receipts.is_compact and receipts.nbytes() == copy.nbytes() > 0
        assert len(receipts) == 2
        assert m.on_submit(a) == [Reply(Accepted(1, "a"))]
        with pytest.raises(RoundClosed):
            m.on_submit(Submit(1, "a", box()))
        with pytest.raises(RoundClosed):
            m.on_submit(submit_frame("c"))
        assert m.receipts_compacted(7, copy) == []  # a round it does not know: ignored

    def test_restored_receipts_of_a_finished_round_are_compacted(self) -> None:
        a, sub_a = stored_submission("a", 3)
        open_frame, sub_b = stored_submission("b", 4)
        records = NodeRecords(
            rounds=(
                round_record(3, S.CONFIRMED),
                round_record(4, S.OPEN, deadline=NOW + 4.0, key=True),
            ),
            submissions={4: (sub_b,)},
            receipts={3: {"a": sub_a.digest}, 4: {"b": sub_b.digest}},
        )
        m, _ = restore_entry(records, now=NOW + 1)
        assert m.rounds[3].receipts.is_compact and not m.rounds[4].receipts.is_compact
        assert m.on_submit(a) == [Reply(Accepted(3, "a"))]
        assert m.on_submit(open_frame) == [Reply(Accepted(4, "b"))]


class TestEntryAfterMixing:
    def mixed_entry(self) -> tuple[EntryMachine, Submit, list[Action]]:
        m, _ = open_entry()
        a = submit_frame("a")
        store(m, a)
        store(m, submit_frame("b"))
        m.handle_timer(NOW + DEADLINE_S)
        acts = m.mixed(1, [[self.x, self.y], [self.z]])
        return m, a, acts

    x, y, z = (item(RELAY_ITEM) for _ in range(3))

    def test_mixed_stores_the_batch_erases_the_key_and_sends_chunk_0(self) -> None:
        m, _, acts = self.mixed_entry()
        outbound = OutboundBatch(
            clients=2,
            count=3,
            chunks=(OutboundChunk(0, (self.x, self.y)), OutboundChunk(1, (self.z,))),
        )
        assert acts == [
            Persist(
                (
                    PutOutbound(1, outbound),
                    EraseKey(1),  # the intake stays for the trace
                    SetRound(1, status=S.MIXED, clients=2),
                )
            ),
            Send(Batch(1, "mix1", 0, 2, 2, 3, (self.x, self.y))),
        ]
        assert m.status(1) is S.MIXED

    def test_exact_retry_is_still_acknowledged_and_others_are_refused(self) -> None:
        m, a, _ = self.mixed_entry()
        assert m.on_submit(a) == [Reply(Accepted(1, "a"))]
        with pytest.raises(RoundClosed):
            m.on_submit(submit_frame("a"))  # same client, other onions
        with pytest.raises(RoundClosed):
            m.on_submit(submit_frame("newcomer"))

    def test_forwarding_chunk_by_chunk(self) -> None:
        m, _, acts = self.mixed_entry()
        chunk0 = one(acts, Send).frame
        assert isinstance(chunk0, Batch)
        acts = m.on_reply(chunk0, BatchAck(1, 0), NOW)
        assert acts[0] == Persist((AckOutbound(1, 0),))
        chunk1 = one(acts, Send).frame
        assert isinstance(chunk1, Batch) and chunk1.index == 1 and len(chunk1.payloads) == 1
        with pytest.raises(InternalError):
            m.on_reply(chunk1, BatchAck(1, 0), NOW)  # acknowledges another chunk
        assert m.on_reply(chunk0, BatchAck(1, 0), NOW) == []  # late duplicate
        assert m.on_reply(chunk1, BatchAck(1, 1), NOW) == [
            Persist((DropOutbound(1, delivered=True), SetRound(1, status=S.FORWARDED))),
            Send(Trace(1)),  # the chain's verdict on the batch
        ]
        assert m.status(1) is S.FORWARDED
        assert m.on_reply(chunk1, BatchAck(1, 1), NOW) == []

    def test_a_refused_chunk_is_sent_again_later(self) -> None:
        """The successor could not store chunk 0 (``internal-error``): it is sent again after
        CHUNK_RETRY seconds, then after twice that if refused again; an acknowledgement
        starts the count again."""
        m, _, acts = self.mixed_entry()
        chunk0 = one(acts, Send).frame
        assert isinstance(chunk0, Batch)
        t = NOW + DEADLINE_S
        assert m.on_send_error(chunk0, InternalError("could not store"), t) == []
        assert m.status(1) is S.MIXED and m.next_timer() == t + CHUNK_RETRY
        assert Send(chunk0) not in m.handle_timer(t + CHUNK_RETRY / 2)
        assert Send(chunk0) in m.handle_timer(t + CHUNK_RETRY)
        assert m.on_send_error(chunk0, InternalError("again"), t + 1) == []
        assert m.next_timer() == t + 1 + 2 * CHUNK_RETRY
        assert Send(chunk0) in m.handle_timer(t + 1 + 2 * CHUNK_RETRY)
        acts = m.on_reply(chunk0, BatchAck(1, 0), t + 4)
        chunk1 = one(acts, Send).frame
        assert isinstance(chunk1, Batch) and chunk1.index == 1
        assert m.on_send_error(chunk1, WrongCount("no"), t + 5) == []
        assert m.next_timer() == t + 5 + CHUNK_RETRY  # counted afresh after the ack
        assert m.on_reply(chunk1, BatchAck(1, 1), t + 5.5)[-1] == Send(Trace(1))
        assert not any(isinstance(a, Send) for a in m.handle_timer(t + 6))  # nothing left


# ---------------------------------------------------------------------------- entry: restore


def round_record(
    round_id: int,
    status: RoundStatus,
    *,
    deadline: float | None = None,
    clients: int | None = None,
    key: bool = False,
) -> RoundRecord:
    keys = Keys("mix1", 1)
    return RoundRecord(
        round_id,
        status,
        NOW,
        deadline=deadline,
        clients=clients,
        secret_key=keys.secret(round_id) if key else None,
        announcements=(keys.announcement(round_id), *downstream(round_id)),
    )


def stored_submission(client: str, round_id: int) -> tuple[Submit, Submission]:
    frame = submit_frame(client, round_id)
    return frame, Submission(client, submission_digest(frame.box), payloads_of(frame))


class TestEntryRestore:
    def test_empty_store(self) -> None:
        m, acts = restore_entry(NodeRecords())
        assert acts == []
        assert m.next_round_id == 1
        assert one(m.handle_timer(NOW), Send) == Send(OpenRound(1))

    def test_a_round_left_opening_is_aborted_down_the_chain(self) -> None:
        m, acts = restore_entry(NodeRecords(rounds=(round_record(4, S.OPENING, key=True),)))
        assert acts == [
            Persist((ForgetReceipts(4), DropIntake(4), EraseKey(4), SetRound(4, status=S.ABORTED))),
            Send(AbortRound(4)),
        ]
        assert m.status(4) is S.ABORTED
        assert m.offer() is None
        assert one(m.handle_timer(NOW), Send) == Send(OpenRound(5))

    def test_an_open_round_takes_submissions_again_until_its_stored_deadline(self) -> None:
        a, sub_a = stored_submission("a", 3)
        records = NodeRecords(
            rounds=(round_record(3, S.OPEN, deadline=NOW + 4.0, key=True),),
            submissions={3: (sub_a,)},
            receipts={3: {"a": sub_a.digest}},
        )
        m, acts = restore_entry(records, now=NOW + 1)
        assert acts == []
        offer = m.offer()
        assert offer is not None
        assert (offer.round_id, offer.deadline, offer.clients) == (3, NOW + 4.0, 1)
        assert m.next_timer() == NOW + 4.0
        assert m.on_submit(a) == [Reply(Accepted(3, "a"))]  # exact retry
        with pytest.raises(DuplicateClient):
            m.on_submit(submit_frame("a", round_id=3))
        b = submit_frame("b", round_id=3)
        assert store(m, b, NOW + 2) == [Reply(Accepted(3, "b"))]
        assert m.handle_timer(NOW + 3.9) == []
        acts = m.handle_timer(NOW + 4.0)
        assert acts[:2] == [
            Persist((SetRound(3, status=S.CLOSED, clients=2),)),
            Mix(3, sub_a.payloads + payloads_of(b), POLICY.chunk_size),
        ]
        assert acts[-1] == Send(OpenRound(4))

    def test_an_open_round_restored_at_max_users_takes_no_more(self) -> None:
        subs = [stored_submission(c, 3)[1] for c in "abc"]  # POLICY.max_users == 3
        records = NodeRecords(
            rounds=(round_record(3, S.OPEN, deadline=NOW + 4.0, key=True),),
            submissions={3: tuple(subs)},
            receipts={3: {sub.client: sub.digest for sub in subs}},
        )
        m, acts = restore_entry(records)
        acts += m.handle_timer(NOW + 1)
        with pytest.raises(RoundClosed):
            m.on_submit(submit_frame("d", round_id=3))
        assert Mix(3, tuple(p for sub in subs for p in sub.payloads), 2) in acts

    def test_an_open_round_past_its_deadline_closes_on_the_first_timer(self) -> None:
        _, sub_a = stored_submission("a", 3)
        _, sub_b = stored_submission("b", 3)
        records = NodeRecords(
            rounds=(round_record(3, S.OPEN, deadline=NOW - 1, key=True),),
            submissions={3: (sub_a, sub_b)},
            receipts={3: {"a": sub_a.digest, "b": sub_b.digest}},
        )
        m, acts = restore_entry(records)
        assert acts == []
        assert m.handle_timer(NOW)[:2] == [
            Persist((SetRound(3, status=S.CLOSED, clients=2),)),
            Mix(3, sub_a.payloads + sub_b.payloads, POLICY.chunk_size),
        ]

    def test_a_second_open_round_is_aborted(self) -> None:
        records = NodeRecords(
            rounds=(
                round_record(3, S.OPEN, deadline=NOW + 4.0, key=True),
                round_record(4, S.OPEN, deadline=NOW + 5.0, key=True),
            )
        )
        m, acts = restore_entry(records)
        assert acts == [
            Persist((ForgetReceipts(4), DropIntake(4), EraseKey(4), SetRound(4, status=S.ABORTED))),
            Send(AbortRound(4)),
        ]
        offer = m.offer()
        assert offer is not None and offer.round_id == 3

    def test_a_closed_round_is_mixed(self) -> None:
        a, sub_a = stored_submission("a", 2)
        _, sub_b = stored_submission("b", 2)
        records = NodeRecords(
            rounds=(round_record(2, S.CLOSED, clients=2, key=True),),
            submissions={2: (sub_a, sub_b)},
            receipts={2: {"a": sub_a.digest, "b": sub_b.digest}},
        )
        m, acts = restore_entry(records)
        assert acts == [Mix(2, sub_a.payloads + sub_b.payloads, POLICY.chunk_size)]
        assert m.status(2) is S.CLOSED
        assert m.on_submit(a) == [Reply(Accepted(2, "a"))]
        with pytest.raises(RoundClosed):
            m.on_submit(submit_frame("c", round_id=2))
        # the next round opens meanwhile
        assert one(m.handle_timer(NOW), Send) == Send(OpenRound(3))

    def test_a_closed_round_below_min_users_is_aborted(self) -> None:
        _, sub_a = stored_submission("a", 2)
        records = NodeRecords(
            rounds=(round_record(2, S.CLOSED, clients=2, key=True),),
            submissions={2: (sub_a,)},
            receipts={2: {"a": sub_a.digest}},
        )
        m, acts = restore_entry(records)
        assert acts == [
            Persist((ForgetReceipts(2), DropIntake(2), EraseKey(2), SetRound(2, status=S.ABORTED))),
            Send(AbortRound(2)),
        ]
        assert m.status(2) is S.ABORTED

    def test_a_mixed_round_resumes_at_the_first_unacknowledged_chunk(self) -> None:
        p = [item(RELAY_ITEM) for _ in range(5)]
        outbound = OutboundBatch(
            clients=2,
            count=5,
            chunks=(
                OutboundChunk(0, (p[0], p[1]), acked=True),
                OutboundChunk(1, (p[2], p[3]), acked=False),
                OutboundChunk(2, (p[4],), acked=False),
            ),
        )
        records = NodeRecords(
            rounds=(round_record(6, S.MIXED, clients=2),),
            receipts={6: {"a": b"\1" * 32}},
            outbound={6: outbound},
        )
        m, acts = restore_entry(records)
        chunk1 = Batch(6, "mix1", 1, 3, 2, 5, (p[2], p[3]))
        assert acts == [Send(chunk1)]
        acts = m.on_reply(chunk1, BatchAck(6, 1), NOW)
        assert acts == [
            Persist((AckOutbound(6, 1),)),
            Send(Batch(6, "mix1", 2, 3, 2, 5, (p[4],))),
        ]
        assert m.on_reply(Batch(6, "mix1", 2, 3, 2, 5, (p[4],)), BatchAck(6, 2), NOW) == [
            Persist((DropOutbound(6, delivered=True), SetRound(6, status=S.FORWARDED))),
            Send(Trace(6)),
        ]
        assert m.status(6) is S.FORWARDED

    def test_a_mixed_round_stored_as_its_seed_resumes_with_the_same_chunks(self) -> None:
        """A batch the store kept as its permutation seed is derived again from the stored
        submissions, in their stored order: the chunk resumed is the one first sent."""
        subs = [stored_submission(c, 6)[1] for c in ("a", "b", "c")]
        payloads = [p for sub in subs for p in sub.payloads]
        seed = bytes(range(32))
        chunks = permuted_chunks(payloads, seed, 2)
        assert [len(c) for c in chunks] == [2, 2, 2]
        derived = DerivedOutbound(3, 6, seed, (2, 2, 2), frozenset({0}))
        records = NodeRecords(
            rounds=(round_record(6, S.MIXED, clients=3),),
            submissions={6: tuple(subs)},
            receipts={6: {s.client: s.digest for s in subs}},
            outbound={6: derived},
        )
        _, acts = restore_entry(records)
        assert acts == [Send(Batch(6, "mix1", 1, 3, 3, 6, tuple(chunks[1])))]
        # another seed, or the submissions in another order, would give other chunks
        assert list(permuted_chunks(payloads, bytes(32), 2)[1]) != list(chunks[1])
        swapped = [p for sub in (subs[1], subs[0], subs[2]) for p in sub.payloads]
        assert list(permuted_chunks(swapped, seed, 2)[1]) != list(chunks[1])

    def test_a_live_mix_stored_as_its_seed_resumes_after_a_restart(self) -> None:
        """The live path: the round is mixed with a seed and the write keeps the seed; a
        restart from what the store then returns (the seed, the chunks' sizes, chunk 0
        acknowledged) sends the very chunk the live machine would have sent next."""
        policy = RoundPolicy(3, 3, DEADLINE_S, "abort", chunk_size=2)
        m, _ = open_entry(policy)
        mix = one([a for c in ("a", "b", "c") for a in store(m, submit_frame(c))], Mix)
        seed = b"\x07" * 32
        chunks = permuted_chunks(mix.payloads, seed, mix.chunk_size)
        acts = m.mixed(1, chunks, seed=seed)
        (put,) = [w for a in acts if isinstance(a, Persist) for w in a.writes
                  if isinstance(w, PutOutbound)]  # fmt: skip
        assert put.batch.seed == seed
        first = one(acts, Send).frame
        assert isinstance(first, Batch) and first.payloads == tuple(chunks[0])
        head, *rest = put.batch.chunks
        stored = as_stored(replace(put.batch, chunks=(replace(head, acked=True), *rest)))
        assert stored == DerivedOutbound(3, 6, seed, (2, 2, 2), frozenset({0}))
        st = m.rounds[1]
        subs = tuple(
            Submission(c, st.receipts[c], tuple(st.submissions[c])) for c in ("a", "b", "c")
        )
        records = NodeRecords(
            rounds=(round_record(1, S.MIXED, clients=3),),
            submissions={1: subs},
            outbound={1: stored},
        )
        _, resumed = EntryMachine.restore(
            records, NOW, name="mix1", hops=HOPS, messages=M, box_length=ENTRY_BOX,
            policy=policy, keys=Keys("mix1", 1),
        )  # fmt: skip
        assert resumed == [Send(Batch(1, "mix1", 1, 3, 3, 6, tuple(chunks[1])))]

    def test_a_mixed_round_with_every_chunk_acknowledged_is_forwarded(self) -> None:
        outbound = OutboundBatch(1, 1, (OutboundChunk(0, (b"x" * RELAY_ITEM,), acked=True),))
        records = NodeRecords(rounds=(round_record(6, S.MIXED, clients=1),), outbound={6: outbound})
        m, acts = restore_entry(records)
        assert acts == [
            Persist((DropOutbound(6, delivered=True), SetRound(6, status=S.FORWARDED))),
            Send(Trace(6)),
        ]
        assert m.status(6) is S.FORWARDED

    def test_an_aborted_round_in_the_receipt_window_is_aborted_again(self) -> None:
        records = NodeRecords(
            rounds=(
                round_record(1, S.ABORTED),
                round_record(RECEIPT_ROUNDS + 1, S.ABORTED, key=True),
                round_record(RECEIPT_ROUNDS + 2, S.CONFIRMED),
            )
        )
        m, acts = restore_entry(records)
        r = RECEIPT_ROUNDS + 1
        # round 1 is older than the window (the last round is RECEIPT_ROUNDS + 2)
        assert acts == [Send(AbortRound(r)), Persist((EraseKey(r),))]
        assert m.next_round_id == RECEIPT_ROUNDS + 3
        assert m.on_reply(AbortRound(r), Aborted(r), NOW) == []

    def test_a_terminal_round_whose_key_survived_has_it_erased(self) -> None:
        records = NodeRecords(
            rounds=(round_record(1, S.FAILED, key=True), round_record(2, S.CONFIRMED, key=True))
        )
        _, acts = restore_entry(records)
        assert acts == [Persist((EraseKey(1),)), Persist((EraseKey(2),))]

    def test_a_forwarded_round_asks_for_its_verdict_again(self) -> None:
        sub = Submission("a", b"\1" * 32, (b"p" * RELAY_ITEM, b"q" * RELAY_ITEM))
        records = NodeRecords(
            rounds=(round_record(3, S.FORWARDED, clients=1),), submissions={3: (sub,)}
        )
        m, acts = restore_entry(records)
        assert acts == [Send(Trace(3))]
        assert m.rounds[3].submissions == {"a": sub.payloads}


# ============================================================================ relay

PRED = "mix1"


def make_relay(chunk_size: int = 2) -> tuple[RelayMachine, Keys]:
    keys = Keys("mix2", 2)
    relay = RelayMachine(
        name="mix2", predecessor=PRED, item_length=RELAY_ITEM, chunk_size=chunk_size, keys=keys
    )
    return relay, keys


def restore_relay(records: NodeRecords) -> tuple[RelayMachine, list[Action]]:
    return RelayMachine.restore(
        records,
        NOW,
        name="mix2",
        predecessor=PRED,
        item_length=RELAY_ITEM,
        chunk_size=2,
        keys=Keys("mix2", 2),
    )


def open_relay(round_id: int = 5) -> tuple[RelayMachine, Keys]:
    relay, keys = make_relay()
    relay.on_open_round(OpenRound(round_id), NOW)
    return relay, keys


def chunk_frame(
    index: int,
    payloads: Sequence[bytes],
    *,
    chunks: int = 2,
    clients: int = 2,
    count: int = 4,
    round_id: int = 5,
    sender: str = PRED,
) -> Batch:
    return Batch(round_id, sender, index, chunks, clients, count, tuple(payloads))


def receive(machine: RelayMachine | SinkMachine, frame: Batch) -> tuple[list[Action], Persist]:
    """Deliver a chunk up to its store write: (actions on the way, the write)."""
    acts = machine.on_batch(frame)
    if isinstance(machine, RelayMachine):
        p = one(acts, Peel)
        acts = machine.peeled(p.token, peel(p.items, p.split), NOW)
    persist = acts[-1]
    assert isinstance(persist, Persist)
    return acts, persist


def receive_and_store(machine: RelayMachine | SinkMachine, frame: Batch) -> list[Action]:
    _, persist = receive(machine, frame)
    stored(machine, persist)
    return machine.persisted(persist.token, NOW)


#: The chunks each machine of a test asked to store, as its store would read them back.
_DISKS: weakref.WeakKeyDictionary[object, list[Chunk]] = weakref.WeakKeyDictionary()


def stored(machine: object, persist: Persist) -> None:
    """Keep the chunks ``persist`` writes for ``machine`` (see :func:`read_back`)."""
    disk = _DISKS.setdefault(machine, [])
    disk += [w.chunk for w in persist.writes if isinstance(w, AddChunk)]


def read_back(machine: RelayMachine, actions: list[Action]) -> list[Action]:
    """``actions``; but if they ask to read the round's intake back (a relay keeps only its
    outputs in memory), what the machine does once the chunks :func:`stored` for it are."""
    if len(actions) == 1 and isinstance(actions[0], LoadIntake):
        token = actions[0].token
        return machine.intake_loaded(token, tuple(_DISKS.get(machine, [])), NOW)
    return actions


class TestRelayOpening:
    def test_open_round_stores_the_key_and_forwards(self) -> None:
        relay, keys = make_relay()
        acts = relay.on_open_round(OpenRound(5), NOW)
        assert acts == [
            Persist((NewRound(5, S.OPEN, NOW, keys.secret(5), (keys.announcement(5),)),)),
            Send(OpenRound(5)),
        ]
        assert relay.status(5) is S.OPEN

    def test_the_reply_carries_its_own_announcement_first(self) -> None:
        relay, keys = open_relay()
        later = (announcement("mix3", 3, 5),)
        acts = relay.on_reply(OpenRound(5), RoundKeys(5, later), NOW)
        every = (keys.announcement(5), *later)  # stored: the trace checks later mixes' proofs
        assert acts == [Persist((SetRound(5, announcements=every),)), Reply(RoundKeys(5, every))]

    def test_repeated_open_round_makes_no_second_key(self) -> None:
        relay, keys = open_relay()
        assert relay.on_open_round(OpenRound(5), NOW + 1) == [Send(OpenRound(5))]
        assert keys.calls == [5]
        later = (announcement("mix3", 3, 5),)
        every = (keys.announcement(5), *later)
        assert relay.on_reply(OpenRound(5), RoundKeys(5, later), NOW) == [
            Persist((SetRound(5, announcements=every),)),
            Reply(RoundKeys(5, every)),
        ]
        assert relay.on_reply(OpenRound(5), RoundKeys(5, later), NOW)[-1] == Reply(
            RoundKeys(5, every)
        )

    def test_keys_for_another_round_are_an_internal_error(self) -> None:
        relay, _ = open_relay()
        with pytest.raises(InternalError):
            relay.on_reply(OpenRound(5), RoundKeys(6, ()), NOW)

    def test_a_refused_open_round_is_passed_back(self) -> None:
        relay, _ = open_relay()
        err = RoundClosed("the sink says no")
        with pytest.raises(RoundClosed) as exc:
            relay.on_send_error(OpenRound(5), err, NOW)
        assert exc.value is err

    def test_abort_of_an_open_round(self) -> None:
        relay, _ = open_relay()
        acts = relay.on_abort_round(AbortRound(5), NOW)
        assert acts == [
            Persist((DropIntake(5), EraseKey(5), SetRound(5, status=S.ABORTED))),
            Send(AbortRound(5)),
        ]
        assert relay.status(5) is S.ABORTED
        assert relay.on_reply(AbortRound(5), Aborted(5), NOW) == [Reply(Aborted(5))]
        # a repeated abort is passed on again, without writes
        assert relay.on_abort_round(AbortRound(5), NOW) == [Send(AbortRound(5))]
        with pytest.raises(RoundClosed):
            relay.on_open_round(OpenRound(5), NOW)
        with pytest.raises(UnknownRound):
            relay.on_batch(chunk_frame(0, [item(RELAY_ITEM)]))

    def test_abort_of_an_unknown_round_is_remembered(self) -> None:
        relay, keys = make_relay()
        assert relay.on_abort_round(AbortRound(7), NOW) == [
            Persist((NewRound(7, S.ABORTED, NOW),)),
            Send(AbortRound(7)),
        ]
        with pytest.raises(RoundClosed):
            relay.on_open_round(OpenRound(7), NOW)
        assert keys.calls == []

    def test_abort_of_a_round_past_intake_is_refused(self) -> None:
        relay, _ = open_relay()
        receive_and_store(relay, chunk_frame(0, [item(RELAY_ITEM)], chunks=1, count=1))
        assert relay.status(5) is S.CLOSED
        with pytest.raises(RoundClosed):
            relay.on_abort_round(AbortRound(5), NOW)
        with pytest.raises(RoundClosed):
            relay.on_open_round(OpenRound(5), NOW)


class TestRelayIntake:
    def test_a_chunk_is_checked_deduplicated_peeled_stored_and_acknowledged(self) -> None:
        relay, _ = open_relay()
        x, y = item(RELAY_ITEM), item(RELAY_ITEM)
        frame = chunk_frame(0, [x, y, x])  # x is replayed within the chunk
        digests = relay_digest(x) + relay_digest(y)  # what this chunk let into the filter
        token = ChunkPeeled(frame, 1, digests, (x, y), (x, y, x))
        assert relay.on_batch(frame) == [Peel(5, [x, y], token)]
        acts = relay.peeled(token, peel([x, y]), NOW)
        chunk = Chunk(
            PRED,
            0,
            2,
            2,
            4,
            dropped=1,
            payloads=(x[:-LAYER], y[:-LAYER]),
            digests=digests,
            inputs=(x, y),
            received=(x, y, x),  # as it came: an item was dropped (its inputs stay on disk)
        )
        assert acts == [Persist((AddChunk(5, chunk),), token=ChunkStored(5, chunk))]
        assert relay.persisted(ChunkStored(5, chunk), NOW) == [Reply(BatchAck(5, 0))]
        assert relay.status(5) is S.OPEN
        # a repeat of the stored chunk is acknowledged again, nothing else
        assert relay.on_batch(frame) == [Reply(BatchAck(5, 0))]

    def test_an_item_of_another_chunk_is_a_replay_and_peel_failures_are_dropped(self) -> None:
        relay, _ = open_relay()
        x, y, z = item(RELAY_ITEM), item(RELAY_ITEM), item(RELAY_ITEM)
        receive_and_store(relay, chunk_frame(0, [x, y], count=5))
        frame = chunk_frame(1, [y, z, x], count=5)
        p = one(relay.on_batch(frame), Peel)
        assert list(p.items) == [z]
        assert p.token == ChunkPeeled(frame, 2, relay_digest(z), (z,), (y, z, x))
        acts = relay.peeled(p.token, [DecryptionFailed("tagged")], NOW)
        chunk = Chunk(
            PRED, 1, 2, 2, 5, dropped=3, payloads=(), digests=relay_digest(z),
            received=(y, z, x),
        )  # fmt: skip
        assert acts == [Persist((AddChunk(5, chunk),), token=ChunkStored(5, chunk))]

    def test_the_last_chunk_closes_the_round_and_mixes_it(self) -> None:
        relay, _ = open_relay()
        w, x, y, z = (item(RELAY_ITEM) for _ in range(4))
        assert receive_and_store(relay, chunk_frame(1, [y, z])) == [Reply(BatchAck(5, 1))]
        assert receive_and_store(relay, chunk_frame(0, [w, x])) == [
            Reply(BatchAck(5, 0)),
            Persist((SetRound(5, status=S.CLOSED, clients=2),)),
            Mix(5, tuple(i[:-LAYER] for i in (w, x, y, z)), 2),  # in chunk order
        ]
        assert relay.status(5) is S.CLOSED
        assert relay.on_batch(chunk_frame(1, [y, z])) == [Reply(BatchAck(5, 1))]

    @pytest.mark.parametrize(
        ("frame", "error"),
        [
            (chunk_frame(0, [b"x" * RELAY_ITEM], round_id=6), UnknownRound),
            (chunk_frame(0, [b"x" * RELAY_ITEM], sender="mix9"), UnknownRound),
            (chunk_frame(0, [b"x" * (RELAY_ITEM - 1)]), BadLength),
            (chunk_frame(2, [b"x" * RELAY_ITEM]), WrongCount),
            (chunk_frame(0, [b"x" * RELAY_ITEM] * 5), WrongCount),
        ],
        ids=["unknown-round", "not-the-predecessor", "bad-length", "bad-index", "over-count"],
    )
    def test_a_bad_chunk_is_refused(self, frame: Batch, error: type[MixnetError]) -> None:
        relay, _ = open_relay()
        with pytest.raises(error):
            relay.on_batch(frame)
        assert relay.rounds[5].batch is not None and relay.rounds[5].batch.seen == {}

    def test_a_copy_of_a_chunk_whose_write_is_in_flight_waits_for_it(self) -> None:
        relay, _ = open_relay()
        x, y = item(RELAY_ITEM), item(RELAY_ITEM)
        frame = chunk_frame(0, [x, y])
        _, original = receive(relay, frame)
        # the predecessor lost the connection and resends the chunk
        copy = relay.on_batch(frame)
        p = one(copy, Peel)
        assert list(p.items) == [x, y]  # a retransmission is not a replay of itself
        assert relay.peeled(p.token, peel(p.items, p.split), NOW) == [
            Persist((), token=AwaitChunk(5, 0))
        ]
        assert relay.persisted(original.token, NOW) == [Reply(BatchAck(5, 0))]
        assert relay.persisted(AwaitChunk(5, 0), NOW) == [Reply(BatchAck(5, 0))]

    def test_chunks_in_flight_together_over_the_count_are_refused_before_the_write(
        self,
    ) -> None:
        relay, _ = open_relay()
        receive(relay, chunk_frame(0, [item(RELAY_ITEM), item(RELAY_ITEM)], count=2))
        with pytest.raises(WrongCount):
            receive(relay, chunk_frame(1, [item(RELAY_ITEM), item(RELAY_ITEM)], count=2))

    def test_a_copy_peeled_after_the_original_committed_is_acknowledged(self) -> None:
        relay, _ = open_relay()
        frame = chunk_frame(0, [item(RELAY_ITEM)])
        original = one(relay.on_batch(frame), Peel)
        copy = one(relay.on_batch(frame), Peel)
        write = relay.peeled(original.token, peel(original.items), NOW)[0]
        assert isinstance(write, Persist)
        assert relay.persisted(write.token, NOW) == [Reply(BatchAck(5, 0))]
        assert relay.peeled(copy.token, peel(copy.items), NOW) == [Reply(BatchAck(5, 0))]

    def test_a_waiting_copy_of_a_failed_write_gets_an_error(self) -> None:
        relay, _ = open_relay()
        frame = chunk_frame(0, [item(RELAY_ITEM)])
        _, original = receive(relay, frame)
        _, waiting = receive(relay, frame)
        assert waiting == Persist((), token=AwaitChunk(5, 0))
        with pytest.raises(InternalError):
            relay.persist_failed(original.token, NOW)
        with pytest.raises(InternalError):
            relay.persisted(AwaitChunk(5, 0), NOW)
        # the predecessor sends it again: processed afresh
        assert receive_and_store(relay, frame) == [Reply(BatchAck(5, 0))]

    def test_a_chunk_written_after_an_abort_is_acknowledged(self) -> None:
        relay, _ = open_relay()
        _, persist = receive(relay, chunk_frame(0, [item(RELAY_ITEM)]))
        relay.on_abort_round(AbortRound(5), NOW)
        assert relay.persisted(persist.token, NOW) == [Reply(BatchAck(5, 0))]
        assert relay.status(5) is S.ABORTED


class TestRelayForwarding:
    def mixed_relay(self) -> tuple[RelayMachine, list[Action], list[list[bytes]]]:
        relay, _ = open_relay()
        items = [item(RELAY_ITEM) for _ in range(3)]
        receive_and_store(relay, chunk_frame(0, items, chunks=1, count=3))
        chunks = [[i[:-LAYER] for i in items[1:]], [items[0][:-LAYER]]]
        return relay, relay.mixed(5, chunks), chunks

    def test_mixed_stores_the_batch_erases_the_key_and_sends_chunk_0(self) -> None:
        relay, acts, chunks = self.mixed_relay()
        outbound = OutboundBatch(
            2, 3, (OutboundChunk(0, tuple(chunks[0])), OutboundChunk(1, tuple(chunks[1])))
        )
        assert acts == [
            Persist(  # intake and key stay: the trace may ask this mix to prove a step
                (
                    PutOutbound(5, outbound),
                    SetRound(5, status=S.MIXED, clients=2),
                )
            ),
            Send(Batch(5, "mix2", 0, 2, 2, 3, tuple(chunks[0]))),
        ]
        assert relay.status(5) is S.MIXED

    def test_a_chunk_repeated_after_mixing_is_acknowledged_again(self) -> None:
        relay, _, _ = self.mixed_relay()
        again = chunk_frame(0, [item(RELAY_ITEM)], chunks=1, count=3)
        assert relay.on_batch(again) == [Reply(BatchAck(5, 0))]
        with pytest.raises(UnknownRound):  # but not from anyone else
            relay.on_batch(chunk_frame(0, [item(RELAY_ITEM)], chunks=1, count=3, sender="x"))

    def test_each_ack_sends_the_next_chunk_and_the_last_ends_the_round(self) -> None:
        relay, acts, chunks = self.mixed_relay()
        first = one(acts, Send).frame
        second = Batch(5, "mix2", 1, 2, 2, 3, tuple(chunks[1]))
        assert relay.on_reply(first, BatchAck(5, 0), NOW) == [
            Persist((AckOutbound(5, 0),)),
            Send(second),
        ]
        assert relay.on_reply(second, BatchAck(5, 1), NOW) == [
            Persist((DropOutbound(5, delivered=True), SetRound(5, status=S.FORWARDED)))
        ]
        assert relay.status(5) is S.FORWARDED
        assert relay.on_reply(second, BatchAck(5, 1), NOW) == []
        assert relay.on_batch(chunk_frame(0, [], chunks=1, count=3)) == [Reply(BatchAck(5, 0))]

    @pytest.mark.parametrize("ack", [BatchAck(5, 1), BatchAck(6, 0)])
    def test_an_ack_for_another_chunk_raises(self, ack: BatchAck) -> None:
        relay, acts, _ = self.mixed_relay()
        with pytest.raises(InternalError):
            relay.on_reply(one(acts, Send).frame, ack, NOW)
        assert relay.status(5) is S.MIXED

    def test_a_refused_chunk_is_sent_again_later(self) -> None:
        relay, acts, _ = self.mixed_relay()
        first = one(acts, Send).frame
        assert relay.on_send_error(first, InternalError("could not store"), NOW) == []
        assert relay.status(5) is S.MIXED and relay.next_timer() == NOW + CHUNK_RETRY
        assert relay.handle_timer(NOW + CHUNK_RETRY) == [Send(first)]
        for refusal in range(1, 8):  # doubling, capped
            relay.on_send_error(first, InternalError("again"), NOW)
            wait = min(CHUNK_RETRY_CAP, CHUNK_RETRY * 2**refusal)
            assert relay.next_timer() == NOW + wait
            assert relay.handle_timer(NOW + wait) == [Send(first)]
        relay.on_send_error(first, InternalError("again"), NOW)
        sent = relay.on_reply(first, BatchAck(5, 0), NOW)  # a late answer of an earlier try
        second = one(sent, Send).frame
        assert isinstance(second, Batch) and second.index == 1
        assert relay.next_timer() is None  # chunk 1 went with the ack: no second copy


class TestRelayRestore:
    def test_an_open_round_with_every_chunk_stored_is_mixed(self) -> None:
        c0 = Chunk(PRED, 0, 2, 2, 3, 0, (b"a" * 16, b"b" * 16))
        c1 = Chunk(PRED, 1, 2, 2, 3, 0, (b"c" * 16,))
        records = NodeRecords(
            rounds=(RoundRecord(5, S.OPEN, NOW, secret_key=b"k" * 32),),
            chunks={5: (c0, c1)},
        )
        relay, acts = restore_relay(records)
        assert acts == [
            Persist((SetRound(5, status=S.CLOSED, clients=2),)),
            Mix(5, (b"a" * 16, b"b" * 16, b"c" * 16), 2),
        ]
        assert relay.status(5) is S.CLOSED

    def test_an_open_round_takes_its_missing_chunks(self) -> None:
        stored = Chunk(PRED, 0, 2, 2, 3, 0, (b"a" * 16, b"b" * 16))
        records = NodeRecords(rounds=(RoundRecord(5, S.OPEN, NOW),), chunks={5: (stored,)})
        relay, acts = restore_relay(records)
        assert acts == []
        assert relay.on_batch(chunk_frame(0, [], count=3)) == [Reply(BatchAck(5, 0))]
        last = item(RELAY_ITEM)
        assert receive_and_store(relay, chunk_frame(1, [last], count=3)) == [
            Reply(BatchAck(5, 1)),
            Persist((SetRound(5, status=S.CLOSED, clients=2),)),
            Mix(5, (b"a" * 16, b"b" * 16, last[:-LAYER]), 2),
        ]

    def test_a_replay_across_a_restart_is_still_dropped(self) -> None:
        relay, _ = open_relay()
        x, y = item(RELAY_ITEM), item(RELAY_ITEM)
        receive_and_store(relay, chunk_frame(0, [x], count=3))
        # the chunk as the relay stores it: with the digests of what it let into the filter
        stored = Chunk(PRED, 0, 2, 2, 3, 0, (x[:-LAYER],), digests=relay_digest(x))
        records = NodeRecords(rounds=(RoundRecord(5, S.OPEN, NOW),), chunks={5: (stored,)})
        restarted, _ = restore_relay(records)
        p = one(restarted.on_batch(chunk_frame(1, [x, y], count=3)), Peel)
        assert list(p.items) == [y]

    def test_open_round_again_after_a_restart_announces_the_stored_key(self) -> None:
        keys = Keys("mix2", 2)
        records = NodeRecords(
            rounds=(
                RoundRecord(
                    5,
                    S.OPEN,
                    NOW,
                    secret_key=keys.secret(5),
                    announcements=(keys.announcement(5),),
                ),
            )
        )
        relay, acts = restore_relay(records)
        assert acts == []
        assert relay.on_open_round(OpenRound(5), NOW) == [Send(OpenRound(5))]
        later = (announcement("mix3", 3, 5),)
        every = (keys.announcement(5), *later)
        assert relay.on_reply(OpenRound(5), RoundKeys(5, later), NOW) == [
            Persist((SetRound(5, announcements=every),)),
            Reply(RoundKeys(5, every)),
        ]
        assert relay.on_reply(OpenRound(5), RoundKeys(5, later), NOW)[-1] == Reply(
            RoundKeys(5, every)
        )

    def test_a_mixed_round_resumes_forwarding(self) -> None:
        outbound = OutboundBatch(
            2, 3, (OutboundChunk(0, (b"a" * 16,), acked=True), OutboundChunk(1, (b"b" * 16,)))
        )
        records = NodeRecords(
            rounds=(RoundRecord(5, S.MIXED, NOW, clients=2),), outbound={5: outbound}
        )
        relay, acts = restore_relay(records)
        assert acts == [Send(Batch(5, "mix2", 1, 2, 2, 3, (b"b" * 16,)))]
        assert relay.on_batch(chunk_frame(0, [])) == [Reply(BatchAck(5, 0))]

    def test_a_mixed_round_stored_as_its_seed_resumes_from_its_outputs(self) -> None:
        """A relay's batch kept as its seed is derived again from the stored chunks'
        outputs, in chunk order, without the onions that several inputs peeled to."""
        twin = b"t" * RELAY_ITEM
        outputs = {0: (b"a" * RELAY_ITEM, twin), 1: (twin, b"b" * RELAY_ITEM)}
        chunk_records = tuple(
            Chunk(PRED, i, 2, 2, 4, 0, outputs[i], b"", ()) for i in (0, 1)
        )
        seed = b"\x05" * 32
        kept = [b"a" * RELAY_ITEM, b"b" * RELAY_ITEM]  # the twin's copies go nowhere
        chunks = permuted_chunks(kept, seed, 1)
        records = NodeRecords(
            rounds=(RoundRecord(5, S.MIXED, NOW, clients=2, secret_key=b"k" * 32),),
            chunks={5: chunk_records},
            outbound={5: DerivedOutbound(2, 2, seed, (1, 1), frozenset({0}))},
        )
        relay, acts = restore_relay(records)
        assert acts == [Send(Batch(5, "mix2", 1, 2, 2, 2, tuple(chunks[1])))]
        assert relay.rounds[5].duplicates == {twin}

    def test_terminal_rounds_with_a_key_have_it_erased(self) -> None:
        records = NodeRecords(
            rounds=(
                RoundRecord(1, S.CONFIRMED, NOW, secret_key=b"k" * 32),
                RoundRecord(2, S.ABORTED, NOW, secret_key=b"k" * 32),
                RoundRecord(3, S.CONFIRMED, NOW),
                RoundRecord(4, S.FORWARDED, NOW, secret_key=b"k" * 32),  # kept for the trace
            )
        )
        relay, acts = restore_relay(records)
        assert acts == [Persist((EraseKey(1),)), Persist((EraseKey(2),))]
        with pytest.raises(RoundClosed):
            relay.on_open_round(OpenRound(2), NOW)


# ============================================================================ sink

SINK_PRED = "mix3"


def make_sink() -> SinkMachine:
    return SinkMachine(predecessor=SINK_PRED, item_length=VALUE)


def sink_chunk(
    index: int,
    payloads: Sequence[bytes],
    *,
    chunks: int = 2,
    clients: int = 2,
    count: int = 3,
    round_id: int = 9,
) -> Batch:
    return Batch(round_id, SINK_PRED, index, chunks, clients, count, tuple(payloads))


def open_sink(round_id: int = 9) -> SinkMachine:
    sink = make_sink()
    sink.on_open_round(OpenRound(round_id), NOW)
    return sink


class TestSink:
    def test_open_round_answers_with_no_announcement(self) -> None:
        sink = make_sink()
        assert sink.on_open_round(OpenRound(9), NOW) == [
            Persist((NewRound(9, S.OPEN, NOW),)),
            Reply(RoundKeys(9, ())),
        ]
        assert sink.status(9) is S.OPEN
        assert sink.on_open_round(OpenRound(9), NOW) == [Reply(RoundKeys(9, ()))]

    def test_a_complete_batch_is_delivered_and_its_result_published(self) -> None:
        sink = open_sink()
        v = b"\0" * 7 + b"\1"
        frame = sink_chunk(0, [v, v])  # equal plaintexts are legitimate: both kept
        acts = sink.on_batch(frame)
        chunk = Chunk(SINK_PRED, 0, 2, 2, 3, 0, (v, v))
        assert acts == [Persist((AddChunk(9, chunk),), token=ChunkStored(9, chunk))]
        assert sink.persisted(ChunkStored(9, chunk), NOW) == [Reply(BatchAck(9, 0))]
        w = b"\0" * 7 + b"\2"
        assert receive_and_store(sink, sink_chunk(1, [w])) == [
            Reply(BatchAck(9, 1)),
            Persist((SetRound(9, status=S.CLOSED, clients=2),)),
            Deliver(9, DeliveredBatch(clients=2, count=3, payloads=(v, v, w))),
        ]
        assert sink.status(9) is S.CLOSED
        result: Mapping[str, object] = {"round": 9, "sum": 4}
        assert sink.delivered(9, result) == [
            Persist((PutResult(9, result), SetRound(9, status=S.DONE), DropIntake(9))),
            Publish(9),
        ]
        assert sink.status(9) is S.DONE
        assert sink.results[9] == result
        assert sink.on_batch(sink_chunk(1, [w])) == [Reply(BatchAck(9, 1))]
        with pytest.raises(RoundClosed):
            sink.on_abort_round(AbortRound(9), NOW)
        with pytest.raises(RoundClosed):
            sink.on_open_round(OpenRound(9), NOW)

    def test_abort_tells_the_application(self) -> None:
        sink = open_sink()
        assert sink.on_abort_round(AbortRound(9), NOW) == [
            Persist((DropIntake(9), SetRound(9, status=S.ABORTED))),
            Reply(Aborted(9)),
            Deliver(9, None),
        ]
        assert sink.status(9) is S.ABORTED
        assert sink.on_abort_round(AbortRound(9), NOW) == [Reply(Aborted(9))]
        result: Mapping[str, object] = {"round": 9, "status": "aborted"}
        assert sink.delivered(9, result) == [Persist((PutResult(9, result),)), Publish(9)]
        assert sink.status(9) is S.ABORTED
        with pytest.raises(RoundClosed):
            sink.on_open_round(OpenRound(9), NOW)
        with pytest.raises(UnknownRound):
            sink.on_batch(sink_chunk(0, [b"x" * VALUE]))

    def test_abort_of_an_unknown_round(self) -> None:
        sink = make_sink()
        assert sink.on_abort_round(AbortRound(4), NOW) == [
            Persist((NewRound(4, S.ABORTED, NOW),)),
            Reply(Aborted(4)),
            Deliver(4, None),
        ]

    def test_chunk_checks(self) -> None:
        sink = open_sink()
        with pytest.raises(UnknownRound):
            sink.on_batch(Batch(9, "mix2", 0, 1, 1, 1, (b"x" * VALUE,)))
        with pytest.raises(BadLength):
            sink.on_batch(sink_chunk(0, [b"x" * (VALUE + 1)]))
        with pytest.raises(UnknownRound):
            sink.on_batch(sink_chunk(0, [b"x" * VALUE], round_id=10))

    def test_restore_redelivers_a_complete_batch(self) -> None:
        c0 = Chunk(SINK_PRED, 0, 2, 2, 3, 0, (b"a" * VALUE, b"b" * VALUE))
        c1 = Chunk(SINK_PRED, 1, 2, 2, 3, 0, (b"c" * VALUE,))
        for status in (S.OPEN, S.CLOSED):
            records = NodeRecords(rounds=(RoundRecord(9, status, NOW),), chunks={9: (c1, c0)})
            sink, acts = SinkMachine.restore(records, NOW, predecessor=SINK_PRED, item_length=VALUE)
            assert acts == [
                Persist((SetRound(9, status=S.CLOSED, clients=2),)),
                Deliver(9, DeliveredBatch(2, 3, (b"a" * VALUE, b"b" * VALUE, b"c" * VALUE))),
            ]
            assert sink.status(9) is S.CLOSED

    def test_restore_of_incomplete_aborted_and_done_rounds(self) -> None:
        c0 = Chunk(SINK_PRED, 0, 2, 2, 3, 0, (b"a" * VALUE, b"b" * VALUE))
        records = NodeRecords(
            rounds=(
                RoundRecord(1, S.DONE, NOW, clients=2),
                RoundRecord(2, S.ABORTED, NOW),
                RoundRecord(3, S.ABORTED, NOW),
                RoundRecord(9, S.OPEN, NOW),
            ),
            chunks={9: (c0,)},
            results={1: {"sum": 1}, 3: {"status": "aborted"}},
        )
        sink, acts = SinkMachine.restore(records, NOW, predecessor=SINK_PRED, item_length=VALUE)
        assert acts == [Deliver(2, None)]  # an abort whose result was never stored
        assert sink.results == {1: {"sum": 1}, 3: {"status": "aborted"}}
        assert sink.on_batch(sink_chunk(0, [])) == [Reply(BatchAck(9, 0))]
        assert receive_and_store(sink, sink_chunk(1, [b"c" * VALUE]))[-1] == Deliver(
            9, DeliveredBatch(2, 3, (b"a" * VALUE, b"b" * VALUE, b"c" * VALUE))
        )


# ============================================================================ the whole chain


Edge = tuple[Role, RoundStatus, RoundStatus]


def guard_stored_statuses(chain: MemoryChain, monkeypatch: pytest.MonkeyPatch) -> list[Edge]:
    """Check every status a node of ``chain`` stores against the transition table (a round
    is created in its role's initial status, or directly ABORTED when an abort arrives
    first); returns the list of stored status changes, filled as the chain runs."""
    edges: list[Edge] = []

    def guard(node: Node, role: Role) -> None:
        original = node.store._apply

        def apply(w: Write) -> None:
            if isinstance(w, NewRound):
                assert w.status in (INITIAL[role], S.ABORTED), (node.name, w)
            elif isinstance(w, SetRound) and w.status is not None:
                old = node.store.rounds[w.round_id].status
                if w.status is not old:
                    advance(role, old, w.status)  # raises IllegalTransition
                    edges.append((role, old, w.status))
            original(w)

        monkeypatch.setattr(node.store, "_apply", apply)

    for node in chain.nodes:
        if node.index == 0:
            guard(node, Role.ENTRY)
        elif node.index < chain.mixes - 1:
            guard(node, Role.RELAY)
        elif node.index == chain.mixes - 1:
            guard(node, Role.LAST)
        else:
            guard(node, Role.SINK)
    return edges


def check_memory_agrees_with_store(chain: MemoryChain) -> None:
    for node in chain.nodes:
        assert node.machine is not None
        for round_id, rec in node.store.rounds.items():
            assert node.machine.status(round_id) in (rec.status, None), (node.name, round_id)
            if rec.status in TERMINAL:
                assert rec.secret_key is None, (node.name, round_id)


def test_a_whole_chain_only_makes_allowed_status_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every machine changes statuses only through ``advance`` (which raises on an edge the
    transition table lacks): a chain that runs rounds to their end, closing and aborting,
    settles; every stored status change is an edge of the table too, and what each node
    stored agrees with what its machine holds."""
    chain = MemoryChain(
        mixes=3, messages=2, policy=RoundPolicy(2, 3, 5.0, "abort", chunk_size=2), seed=3
    )
    edges = guard_stored_statuses(chain, monkeypatch)
    for i in range(7):  # 3 + 3, then one left alone below min_users: aborted
        chain.add_client([i, i + 1])
    chain.settle()
    check_memory_agrees_with_store(chain)
    assert set(edges) == {
        (Role.ENTRY, S.OPENING, S.OPEN),
        (Role.ENTRY, S.OPEN, S.CLOSED),
        (Role.ENTRY, S.OPEN, S.ABORTED),
        (Role.ENTRY, S.CLOSED, S.MIXED),
        (Role.ENTRY, S.MIXED, S.FORWARDED),
        (Role.ENTRY, S.FORWARDED, S.CONFIRMED),
        (Role.RELAY, S.OPEN, S.CLOSED),
        (Role.RELAY, S.OPEN, S.ABORTED),
        (Role.RELAY, S.CLOSED, S.MIXED),
        (Role.RELAY, S.MIXED, S.FORWARDED),
        (Role.RELAY, S.FORWARDED, S.CONFIRMED),
        (Role.LAST, S.OPEN, S.CLOSED),
        (Role.LAST, S.OPEN, S.ABORTED),
        (Role.LAST, S.CLOSED, S.MIXED),
        (Role.LAST, S.MIXED, S.RELEASED),
        (Role.LAST, S.RELEASED, S.CONFIRMED),
        (Role.SINK, S.OPEN, S.CLOSED),
        (Role.SINK, S.OPEN, S.ABORTED),
        (Role.SINK, S.CLOSED, S.DONE),
    }


@pytest.mark.parametrize("victim", range(4))
def test_restarts_only_make_allowed_status_changes(
    victim: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with a crash and restart of one node at several points: what recovery
    stores follows the table as well."""
    for crash_after in range(3, 210, 8):  # the run takes about 210 steps
        chain = MemoryChain(
            mixes=3, messages=2, policy=RoundPolicy(2, 3, 5.0, "abort", chunk_size=2), seed=5
        )
        guard_stored_statuses(chain, monkeypatch)
        for i in range(5):
            chain.add_client([i, 1])
        chain.eager = False
        for _ in range(crash_after):
            chain.step()
        chain.crash(victim)
        chain.restart(victim)
        chain.settle()
        check_memory_agrees_with_store(chain)


def test_the_back_off_after_a_refused_opening_is_jittered_within_half_to_full() -> None:
    draws = iter([0.0, 0.999, 0.5])
    m, _ = make_entry()
    m.jitter = lambda: next(draws)
    now = NOW
    waits = []
    for _ in range(3):
        m.handle_timer(now)
        round_id = m.opening
        assert round_id is not None
        m.on_send_error(OpenRound(round_id), RoundClosed("no"), now)
        due = m.next_timer()
        assert due is not None
        waits.append(due - now)
        now = due
    assert waits == pytest.approx(
        [OPEN_RETRY_BASE * 0.5, 2 * OPEN_RETRY_BASE * 0.9995, 4 * OPEN_RETRY_BASE * 0.75]
    )


def test_relays_and_the_sink_forget_finished_rounds_beyond_the_window() -> None:
    from mixnet.core.rounds import KEEP_ROUNDS

    relay = RelayMachine(
        name="mix2", predecessor="mix1", item_length=8, chunk_size=4, keys=Keys("mix2", 2)
    )
    sink = SinkMachine(predecessor="mix2", item_length=8)
    for r in range(1, KEEP_ROUNDS + 3):
        relay.on_open_round(OpenRound(r), NOW)
        if r < 3:
            relay.on_abort_round(AbortRound(r), NOW)
        sink.on_open_round(OpenRound(r), NOW)
        if r < 3:
            sink.on_abort_round(AbortRound(r), NOW)
            sink.delivered(r, {"round": r, "status": "aborted"})
    # rounds 1 and 2 finished and fell out of the window; round 3.. are open (kept)
    assert relay.status(1) is None and relay.status(2) is None
    assert relay.status(3) is S.OPEN
    assert sink.status(1) is None and 1 not in sink.results
    assert sink.status(3) is S.OPEN


def test_a_replayed_onion_is_refused_after_an_entry_restart() -> None:
    """The entry mix's replay filters live in memory; after a restart they are rebuilt from
    the stored submissions: a replayed box (its digest) and a box that repeats an inner
    onion of a stored submission (equal onions peel to equal payloads) are refused under
    another client id."""
    m, _ = open_entry()
    a = submit_frame("a")
    store(m, a)
    sub = Submission("a", submission_digest(a.box), payloads_of(a))
    records = NodeRecords(
        rounds=(round_record(1, S.OPEN, deadline=NOW + DEADLINE_S),),
        submissions={1: (sub,)},
        receipts={1: {"a": sub.digest}},
    )
    restored, _ = restore_entry(records)
    with pytest.raises(DuplicateClient):
        restored.on_submit(Submit(1, "mallory", a.box))
    inner = a.box[:-LAYER]
    replay = Submit(1, "mallory", box([inner[:RELAY_ITEM], item(RELAY_ITEM)]))
    p = one(restored.on_submit(replay), Peel)
    with pytest.raises(DuplicateClient):
        restored.peeled(p.token, peel(p.items, p.split), NOW)
    fresh = one(restored.on_submit(submit_frame("b")), Peel)
    assert isinstance(restored.peeled(fresh.token, peel(fresh.items, fresh.split), NOW)[0], Persist)


class TestEntryPeeledMany:
    """``peeled_many`` (a ``submit-many`` frame's boxes opened together) decides every
    submission exactly as :meth:`EntryMachine.peeled` called for each in turn, with and
    without its fresh lane (a call of fresh submissions decided at once)."""

    @settings(max_examples=150, deadline=None)
    # the sixth submission closes the round: the replay after it is refused as in peeled
    # (round-closed), not by the onions accepted earlier in the frame (found by hypothesis)
    @example(plan=[("fresh", 0)] * 6 + [("replay", 0)], lane=True, late=False)
    @example(plan=[("fresh", 0)] * 6 + [("replay", 0)], lane=False, late=False)
    @example(plan=[("fresh", 0)] * 4, lane=True, late=True)  # past the deadline: closes
    @example(plan=[("fresh", 0)] * 5, lane=True, late=False)  # two calls, both fresh
    @example(plan=[("fresh", 0)] * 6, lane=True, late=False)  # the second call fills the round
    @given(
        st.lists(
            st.tuples(st.sampled_from(["fresh", "retry", "same-client", "replay", "fail"]),
                      st.integers(0, 7)),
            min_size=1, max_size=12,
        ),
        st.booleans(),
        st.booleans(),
    )  # fmt: skip
    def test_it_agrees_with_one_peeled_per_submission(
        self, plan: list[tuple[str, int]], lane: bool, late: bool
    ) -> None:
        policy = RoundPolicy(2, 6, DEADLINE_S, "abort", chunk_size=2)
        when = NOW + DEADLINE_S if late else NOW  # late: an accept may close the round
        frames: list[Submit] = []
        boxes: list[bytes] = []
        for n, (how, pick) in enumerate(plan):
            if how == "retry" and frames:
                frames.append(frames[pick % len(frames)])
            elif how == "same-client" and frames:
                frames.append(Submit(1, frames[pick % len(frames)].client, box()))
            elif how == "replay" and boxes:  # another client's inner onions in a new box
                inner = boxes[pick % len(boxes)][: M * RELAY_ITEM]
                frames.append(Submit(1, f"r{n}", inner + item(LAYER)))
            else:
                frames.append(Submit(1, f"c{n}", box()))
            boxes.append(frames[-1].box)
        fails = {n for n, (how, _) in enumerate(plan) if how == "fail"}
        machines = [open_entry(policy)[0], open_entry(policy)[0]]
        machines[0].fresh_lane = False  # the reference: every submission on its own
        machines[1].fresh_lane = lane
        peels: list[list[tuple[int, Peel]]] = [[], []]
        early: list[dict[int, object]] = [{}, {}]
        for k, m in enumerate(machines):
            for n, frame in enumerate(frames):
                try:
                    actions = m.on_submit(frame)
                except MixnetError as exc:
                    early[k][n] = type(exc)
                    continue
                if len(actions) == 1 and isinstance(actions[0], Peel):
                    peels[k].append((n, actions[0]))
                else:
                    early[k][n] = actions
        assert early[0] == early[1]

        def opened(n: int, p: Peel) -> list[bytes | MixnetError]:
            if n in fails:
                return [DecryptionFailed("no")]
            return peel(p.items, p.split)

        one_by_one: dict[int, object] = {}
        writes: list[object] = []  # the submissions' writes, in commit order
        others: list[Action] = []  # every other action (closing a round)
        for n, p in peels[0]:
            try:
                acts = machines[0].peeled(p.token, opened(n, p), when)
            except MixnetError as exc:
                one_by_one[n] = type(exc)
                continue
            first = acts[0] if acts else None
            if isinstance(first, Persist) and isinstance(first.token, Stored):
                one_by_one[n] = None  # accepted: its own write
                writes += first.writes
                others += acts[1:]
            else:
                one_by_one[n] = acts
        # two frames: the second's onions are also checked against the first's in the filter
        pairs = [(p.token, opened(n, p)) for n, p in peels[1]]
        half = len(pairs) // 2
        decided = [
            machines[1].peeled_many(pairs[:half], when),
            machines[1].peeled_many(pairs[half:], when),
        ]
        together = [o for d in decided for o in d.outcomes]
        assert {
            n: type(r) if isinstance(r, MixnetError) else r
            for (n, _), r in zip(peels[1], together, strict=True)
        } == one_by_one
        shared = [a for d in decided for a in d.actions]
        stores = [a for a in shared if isinstance(a, Persist) and isinstance(a.token, Stored)]
        # one write per round and frame, holding its accepted submissions in order
        assert [w for a in stores for w in a.writes] == writes
        assert len(stores) == sum(1 for d in decided if any(o is None for o in d.outcomes))
        for persist in stores:
            token = persist.token
            assert isinstance(token, Stored)
            pending = machines[1].rounds[token.round_id].pending
            assert persist.writes == tuple(
                AddSubmission(token.round_id, Submission(c, d, pending[c]))
                for c, d in zip(token.clients, token.digests, strict=True)
            )
        assert [x for x in shared if x not in stores] == others
        a, b = machines
        assert set(a.rounds) == set(b.rounds)
        for r in a.rounds:
            assert set(a.rounds[r].payload_digests) == set(b.rounds[r].payload_digests)
            assert a.rounds[r].pending == b.rounds[r].pending
            assert a.rounds[r].status == b.rounds[r].status
            entry_a, entry_b = a.rounds[r].entry, b.rounds[r].entry
            assert (entry_a is None) == (entry_b is None)
            if entry_a is not None and entry_b is not None:
                assert entry_a.accepted == entry_b.accepted
                assert entry_a.status == entry_b.status

    def test_the_fresh_lane_takes_a_call_of_fresh_submissions_and_nothing_else(self) -> None:
        """The lane decides a call of fresh submissions at once (one write, all accepted)
        and leaves every other call, unchanged, to the submission-by-submission path: a
        retry, a client twice, a replayed onion, a box that did not open, a call that
        closes the round."""
        policy = RoundPolicy(2, 6, DEADLINE_S, "abort", chunk_size=2)

        def opened(
            m: EntryMachine, frames: Sequence[Submit]
        ) -> list[tuple[object, list[bytes | MixnetError]]]:
            peels = [one(m.on_submit(f), Peel) for f in frames]
            return [(p.token, peel(p.items, p.split)) for p in peels]

        m = open_entry(policy)[0]
        first = [submit_frame(f"a{i}") for i in range(3)]
        taken = m._peeled_fresh(opened(m, first), NOW)
        assert taken is not None and taken.outcomes == (None, None, None)
        (persist,) = taken.actions
        assert isinstance(persist, Persist) and isinstance(persist.token, Stored)
        assert persist.token.clients == ("a0", "a1", "a2")
        round_state = m.rounds[1]
        assert set(round_state.pending) == {"a0", "a1", "a2"}
        assert len(round_state.payload_digests) == 3 * M

        def refused(calls: list[tuple[object, list[bytes | MixnetError]]]) -> None:
            before = (dict(round_state.pending), set(round_state.payload_digests))
            accepted = dict(round_state.entry.accepted) if round_state.entry else None
            assert m._peeled_fresh(calls, NOW) is None
            assert (dict(round_state.pending), set(round_state.payload_digests)) == before
            assert (dict(round_state.entry.accepted) if round_state.entry else None) == accepted

        twice = submit_frame("b0")
        refused(opened(m, [twice, Submit(1, "b0", box())]))  # one client twice
        replayed = Submit(1, "b1", first[0].box[: M * RELAY_ITEM] + item(LAYER))
        refused(opened(m, [submit_frame("b2"), replayed]))  # an onion already in the round
        inner = [item(RELAY_ITEM) for _ in range(M)]
        refused(opened(m, [Submit(1, "b3", box(inner)), Submit(1, "b4", box(inner[::-1]))]))
        failed = opened(m, [submit_frame("b5"), submit_frame("b6")])
        refused([failed[0], (failed[1][0], [DecryptionFailed("no")])])
        refused(opened(m, [submit_frame(f"c{i}") for i in range(3)]))  # 3 + 3 = max_users
        retry_token = opened(m, [submit_frame("d0")])
        assert m._peeled_fresh(retry_token, NOW) is not None  # d0 is now pending
        refused(retry_token)  # its exact retry while it is stored
