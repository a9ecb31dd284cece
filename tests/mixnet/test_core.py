"""Tests for mixnet.core: the sans-I/O round intake, batch assembly and mixing of a mix node.

Time is always passed explicitly as ``now``; randomness is injected where determinism is
needed. Nothing here sleeps.
"""

from __future__ import annotations

import itertools
import math
import random
import secrets
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from scipy.stats import chisquare

from mixnet.core import (
    BatchIntake,
    EntryIntake,
    drop_replays,
    mix_batch,
    split_chunks,
    submission_digest,
    uniform_permutation,
)
from mixnet.core.policy import BelowMin, RoundPolicy
from mixnet.errors import (
    BadLength,
    DuplicateClient,
    MalformedFrame,
    MixnetError,
    RoundClosed,
    UnknownRound,
    WrongCount,
)
from mixnet.frames import MAX_CLIENT_ID_LENGTH

M = 3  # inner onions per submission box
BOX_LEN = 16
OPENED_AT = 1000.0
DEADLINE_S = 10.0
DEADLINE = OPENED_AT + DEADLINE_S

_counter = itertools.count()


def fresh_box() -> bytes:
    """A distinct submission box of the right length (content never repeats in a run)."""
    return next(_counter).to_bytes(BOX_LEN, "big")


def make_entry(
    min_users: int = 2,
    max_users: int = 4,
    below_min: BelowMin = "wait",
    deadline_seconds: float = DEADLINE_S,
    opened_at: float = OPENED_AT,
) -> EntryIntake:
    policy = RoundPolicy(min_users, max_users, deadline_seconds, below_min)
    return EntryIntake(1, M, BOX_LEN, policy, opened_at)


def status_of(intake: EntryIntake) -> str:
    """The intake's status, read afresh (keeps type checkers from narrowing it)."""
    return intake.status


def submit(intake: EntryIntake, client: str, box: bytes, now: float) -> bool:
    """check + accept as the server does; returns accept's result (False for a retry)."""
    digest = intake.check(client, box)
    if digest is None:
        return False
    return intake.accept(client, digest, now)


# ================================================================== EntryIntake: accept path


class TestEntryAccept:
    def test_initial_state(self) -> None:
        intake = make_entry()
        assert intake.status == "open"
        assert intake.clients == 0
        assert intake.deadline == DEADLINE
        assert intake.next_timer() == DEADLINE

    def test_check_returns_digest_and_accept_records(self) -> None:
        intake = make_entry()
        box = fresh_box()
        digest = intake.check("alice", box)
        assert digest == submission_digest(box)
        # check alone records nothing
        assert intake.clients == 0
        assert intake.accept("alice", digest, OPENED_AT + 1) is False
        assert intake.clients == 1
        assert intake.accepted == {"alice": digest}
        assert intake.status == "open"

    def test_client_id_at_max_length_is_fine(self) -> None:
        intake = make_entry()
        client = "c" * MAX_CLIENT_ID_LENGTH
        assert submit(intake, client, fresh_box(), OPENED_AT) is False
        assert intake.clients == 1


# ================================================================== EntryIntake: check errors


class TestEntryCheckErrors:
    @pytest.mark.parametrize("length", [0, BOX_LEN - 1, BOX_LEN + 1])
    def test_wrong_length_box(self, length: int) -> None:
        intake = make_entry()
        with pytest.raises(BadLength) as exc:
            intake.check("alice", b"\x00" * length)
        assert exc.value.code == "bad-length"

    @pytest.mark.parametrize(
        "box", ["x" * BOX_LEN, bytearray(BOX_LEN), memoryview(bytes(BOX_LEN)), None, 7]
    )
    def test_non_bytes_box(self, box: object) -> None:
        intake = make_entry()
        with pytest.raises(BadLength):
            intake.check("alice", box)  # type: ignore[arg-type]

    @pytest.mark.parametrize("client", ["", "x" * (MAX_CLIENT_ID_LENGTH + 1), 5, None, b"id"])
    def test_bad_client_id(self, client: object) -> None:
        intake = make_entry()
        with pytest.raises(MalformedFrame) as exc:
            intake.check(client, fresh_box())  # type: ignore[arg-type]
        assert exc.value.code == "malformed-frame"

    def test_different_submission_same_client(self) -> None:
        intake = make_entry()
        submit(intake, "alice", fresh_box(), OPENED_AT)
        with pytest.raises(DuplicateClient) as exc:
            intake.check("alice", fresh_box())
        assert exc.value.code == "duplicate-client"
        assert intake.clients == 1

    def test_box_replayed_from_another_client(self) -> None:
        intake = make_entry()
        alice = fresh_box()
        submit(intake, "alice", alice, OPENED_AT)
        with pytest.raises(DuplicateClient):
            intake.check("mallory", alice)
        assert intake.clients == 1

    def test_checked_but_unaccepted_boxes_are_not_reserved(self) -> None:
        # only accepted submissions count towards replay detection
        intake = make_entry()
        box = fresh_box()
        assert intake.check("alice", box) is not None
        assert intake.check("bob", box) is not None

    def test_round_closed_after_close(self) -> None:
        intake = make_entry(min_users=1, max_users=1)
        assert submit(intake, "alice", fresh_box(), OPENED_AT) is True
        with pytest.raises(RoundClosed) as exc:
            intake.check("bob", fresh_box())
        assert exc.value.code == "round-closed"
        # RoundClosed takes precedence over every other complaint
        with pytest.raises(RoundClosed):
            intake.check("", b"")

    def test_round_closed_after_abort(self) -> None:
        intake = make_entry(min_users=2, below_min="abort")
        submit(intake, "alice", fresh_box(), OPENED_AT)
        assert intake.poll(DEADLINE) == "aborted"
        with pytest.raises(RoundClosed):
            intake.check("bob", fresh_box())
        # a submission accepted before the abort is gone with the round: no "accepted" retry
        with pytest.raises(RoundClosed):
            intake.check("alice", fresh_box())

    def test_errors_are_mixnet_errors(self) -> None:
        intake = make_entry()
        with pytest.raises(MixnetError):
            intake.check("alice", b"")


# ================================================================== EntryIntake: retries, re-checks


class TestEntryRetry:
    def test_exact_retry_check_returns_none(self) -> None:
        intake = make_entry()
        box = fresh_box()
        submit(intake, "alice", box, OPENED_AT)
        assert intake.check("alice", bytes(box)) is None
        assert intake.clients == 1

    def test_accept_is_idempotent(self) -> None:
        intake = make_entry()
        digest = intake.check("alice", fresh_box())
        assert digest is not None
        assert intake.accept("alice", digest, OPENED_AT) is False
        assert intake.accept("alice", digest, OPENED_AT + 1) is False
        assert intake.accept("alice", digest, OPENED_AT + 2) is False
        assert intake.clients == 1
        assert intake.status == "open"

    def test_repeated_accept_does_not_close_at_max(self) -> None:
        intake = make_entry(min_users=1, max_users=2)
        digest = intake.check("alice", fresh_box())
        assert digest is not None
        for _ in range(3):
            assert intake.accept("alice", digest, OPENED_AT) is False
        assert intake.status == "open"

    def test_accept_rechecks_client_accepted_meanwhile(self) -> None:
        intake = make_entry()
        d1 = intake.check("alice", fresh_box())
        d2 = intake.check("alice", fresh_box())
        assert d1 is not None and d2 is not None
        intake.accept("alice", d1, OPENED_AT)
        with pytest.raises(DuplicateClient):
            intake.accept("alice", d2, OPENED_AT)
        assert intake.accepted == {"alice": d1}

    def test_accept_rechecks_replay_accepted_meanwhile(self) -> None:
        intake = make_entry()
        shared = fresh_box()
        da = intake.check("alice", shared)
        db = intake.check("bob", shared)
        assert da is not None and db is not None
        intake.accept("alice", da, OPENED_AT)
        with pytest.raises(DuplicateClient):
            intake.accept("bob", db, OPENED_AT)
        assert intake.clients == 1

    def test_release_frees_the_client_and_the_box(self) -> None:
        intake = make_entry(min_users=1, max_users=1)
        box = fresh_box()
        digest = intake.check("alice", box)
        assert digest is not None
        assert intake.accept("alice", digest, OPENED_AT) is True
        intake.release("alice", reopen=True)
        assert intake.status == "open" and intake.clients == 0
        assert intake.check("bob", box) is not None

    def test_accept_rechecks_round_closed_meanwhile(self) -> None:
        intake = make_entry(min_users=1, max_users=1)
        da = intake.check("alice", fresh_box())
        db = intake.check("bob", fresh_box())
        assert da is not None and db is not None
        assert intake.accept("alice", da, OPENED_AT) is True
        with pytest.raises(RoundClosed):
            intake.accept("bob", db, OPENED_AT)
        assert intake.clients == 1

    def test_exact_retry_after_close_is_still_accepted(self) -> None:
        # alice's submission closes the round; her ack is lost and she retries.
        intake = make_entry(min_users=1, max_users=1)
        box = fresh_box()
        assert submit(intake, "alice", box, OPENED_AT) is True
        assert intake.status == "closed"
        assert intake.check("alice", box) is None


# ================================================================== EntryIntake: closing policy


class TestEntryClosing:
    def test_closes_at_max_users_exactly_once(self) -> None:
        intake = make_entry(min_users=2, max_users=3)
        results = [submit(intake, f"c{i}", fresh_box(), OPENED_AT + i) for i in range(3)]
        assert results == [False, False, True]
        assert intake.status == "closed"
        assert intake.clients == 3
        assert intake.next_timer() is None
        with pytest.raises(RoundClosed):
            intake.check("late", fresh_box())
        box = fresh_box()
        with pytest.raises(RoundClosed):
            intake.accept("late", submission_digest(box), OPENED_AT + 5)
        assert intake.clients == 3
        # polling a closed round changes nothing, before or after the deadline
        assert intake.poll(OPENED_AT + 5) == "closed"
        assert intake.poll(DEADLINE + 100) == "closed"

    def test_closes_at_max_before_deadline_even_if_min_equals_max(self) -> None:
        intake = make_entry(min_users=2, max_users=2)
        assert submit(intake, "a", fresh_box(), OPENED_AT) is False
        assert submit(intake, "b", fresh_box(), OPENED_AT) is True

    def test_deadline_with_enough_clients_closes_via_poll(self) -> None:
        intake = make_entry(min_users=2, max_users=5)
        submit(intake, "a", fresh_box(), OPENED_AT + 1)
        submit(intake, "b", fresh_box(), OPENED_AT + 2)
        assert intake.poll(OPENED_AT + 5) == "open"
        assert intake.poll(DEADLINE - 1e-6) == "open"
        assert intake.status == "open"
        assert intake.poll(DEADLINE) == "closed"
        assert status_of(intake) == "closed"
        assert intake.clients == 2
        assert intake.next_timer() is None

    @pytest.mark.parametrize("below_min", ["wait", "abort"])
    def test_deadline_with_enough_clients_closes_under_either_policy(
        self, below_min: BelowMin
    ) -> None:
        intake = make_entry(min_users=1, max_users=5, below_min=below_min)
        submit(intake, "a", fresh_box(), OPENED_AT)
        assert intake.poll(DEADLINE + 3) == "closed"

    def test_accept_after_deadline_with_enough_clients_closes_immediately(self) -> None:
        # the deadline passed but poll has not run yet: the accept itself closes the round
        intake = make_entry(min_users=2, max_users=5)
        assert submit(intake, "a", fresh_box(), OPENED_AT) is False
        assert submit(intake, "b", fresh_box(), DEADLINE + 0.5) is True
        assert intake.status == "closed"

    def test_below_min_wait_stays_open_then_closes_at_min(self) -> None:
        intake = make_entry(min_users=3, max_users=5, below_min="wait")
        submit(intake, "a", fresh_box(), OPENED_AT)
        assert intake.poll(DEADLINE) == "open"
        assert intake.poll(DEADLINE + 1000) == "open"
        # still accepting after the deadline
        assert submit(intake, "b", fresh_box(), DEADLINE + 1001) is False
        assert intake.status == "open"
        assert intake.poll(DEADLINE + 1002) == "open"
        # the accept that reaches min_users closes the round at once
        assert submit(intake, "c", fresh_box(), DEADLINE + 1003) is True
        assert status_of(intake) == "closed"
        assert intake.clients == 3
        with pytest.raises(RoundClosed):
            intake.check("d", fresh_box())

    def test_below_min_wait_with_no_clients(self) -> None:
        intake = make_entry(min_users=1, max_users=5, below_min="wait")
        assert intake.poll(DEADLINE + 50) == "open"
        assert submit(intake, "a", fresh_box(), DEADLINE + 51) is True

    def test_below_min_abort(self) -> None:
        intake = make_entry(min_users=3, max_users=5, below_min="abort")
        submit(intake, "a", fresh_box(), OPENED_AT)
        submit(intake, "b", fresh_box(), OPENED_AT)
        assert intake.poll(DEADLINE - 0.5) == "open"
        assert intake.poll(DEADLINE) == "aborted"
        assert intake.status == "aborted"
        assert intake.next_timer() is None
        # aborted is final
        assert intake.poll(DEADLINE + 1) == "aborted"
        with pytest.raises(RoundClosed):
            intake.check("c", fresh_box())
        box = fresh_box()
        with pytest.raises(RoundClosed):
            intake.accept("c", submission_digest(box), DEADLINE + 2)
        assert intake.status == "aborted"

    def test_abort_with_zero_clients(self) -> None:
        intake = make_entry(min_users=1, max_users=1, below_min="abort")
        assert intake.poll(DEADLINE) == "aborted"

    def test_before_deadline_below_min_accept_never_closes(self) -> None:
        intake = make_entry(min_users=3, max_users=5)
        for i in range(2):
            assert submit(intake, f"c{i}", fresh_box(), DEADLINE - 1) is False
        assert intake.status == "open"

    def test_next_timer_is_deadline_while_open(self) -> None:
        intake = make_entry(opened_at=50.0, deadline_seconds=2.5)
        assert intake.next_timer() == 52.5
        submit(intake, "a", fresh_box(), 51.0)
        assert intake.next_timer() == 52.5
        intake.poll(52.0)
        assert intake.next_timer() == 52.5

    def test_next_timer_none_after_close_and_abort(self) -> None:
        closed = make_entry(min_users=1, max_users=1)
        submit(closed, "a", fresh_box(), OPENED_AT)
        assert closed.next_timer() is None
        aborted = make_entry(below_min="abort")
        aborted.poll(DEADLINE)
        assert aborted.next_timer() is None

    def test_next_timer_after_deadline_below_min_wait_is_not_in_the_past(self) -> None:
        intake = make_entry(min_users=2, max_users=4, below_min="wait")
        now = DEADLINE + 1
        assert intake.poll(now) == "open"
        timer = intake.next_timer()
        assert timer is None or timer > now

    def test_release_undoes_an_accept(self) -> None:
        intake = make_entry()
        box = fresh_box()
        assert submit(intake, "alice", box, OPENED_AT) is False
        intake.release("alice", reopen=False)
        assert intake.clients == 0
        assert intake.accepted == {}
        # the client and its box are free again
        assert intake.check("alice", fresh_box()) is not None
        assert intake.check("bob", box) is not None

    @pytest.mark.parametrize("reopen", [True, False])
    def test_release_of_the_closing_accept(self, reopen: bool) -> None:
        intake = make_entry(min_users=1, max_users=2)
        submit(intake, "a", fresh_box(), OPENED_AT)
        box = fresh_box()
        assert submit(intake, "b", box, OPENED_AT) is True
        intake.release("b", reopen=reopen)
        assert intake.clients == 1
        assert status_of(intake) == ("open" if reopen else "closed")

    def test_release_of_an_unknown_client_changes_nothing(self) -> None:
        intake = make_entry()
        submit(intake, "alice", fresh_box(), OPENED_AT)
        intake.release("nobody", reopen=True)
        assert intake.clients == 1
        assert intake.status == "open"

    def test_restore_registers_without_closing(self) -> None:
        intake = make_entry(min_users=1, max_users=2)
        box = fresh_box()
        digest = submission_digest(box)
        intake.restore("alice", digest)
        assert intake.clients == 1
        assert intake.status == "open"
        # the restored client's exact retry is recognised
        assert intake.check("alice", box) is None
        with pytest.raises(DuplicateClient):
            intake.check("alice", fresh_box())
        # poll then applies the deadline to the restored count
        assert intake.poll(DEADLINE) == "closed"


# ================================================================== EntryIntake: invariant


class EntryIntakeMachine(RuleBasedStateMachine):
    """Random accepts, retries, replays and polls with a clock that only moves forward.

    Invariants: a round never closes with fewer than min_users, never holds more than
    max_users, never aborts unless below min under "abort", and every transition matches
    the policy.
    """

    def __init__(self) -> None:
        super().__init__()
        self.intake: EntryIntake
        self.now = 0.0
        self.submissions: dict[str, bytes] = {}
        self.ids = itertools.count()

    @initialize(
        min_users=st.integers(1, 4),
        extra=st.integers(0, 3),
        deadline=st.floats(0.5, 20.0),
        below_min=st.sampled_from(["wait", "abort"]),
        opened_at=st.floats(0.0, 1e6),
    )
    def setup(
        self, min_users: int, extra: int, deadline: float, below_min: BelowMin, opened_at: float
    ) -> None:
        policy = RoundPolicy(min_users, min_users + extra, deadline, below_min)
        self.intake = EntryIntake(7, M, BOX_LEN, policy, opened_at)
        self.now = opened_at

    @property
    def policy(self) -> RoundPolicy:
        return self.intake.policy

    @rule(dt=st.floats(0.0, 8.0))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule()
    def submit_new(self) -> None:
        client = f"client-{next(self.ids)}"
        box = fresh_box()
        if self.intake.status != "open":
            with pytest.raises(RoundClosed):
                self.intake.check(client, box)
            return
        before = self.intake.clients
        digest = self.intake.check(client, box)
        assert digest == submission_digest(box)
        closed = self.intake.accept(client, digest, self.now)
        self.submissions[client] = box
        n = before + 1
        assert self.intake.clients == n
        should_close = n >= self.policy.max_users or (
            self.now >= self.intake.deadline and n >= self.policy.min_users
        )
        assert closed == should_close
        assert self.intake.status == ("closed" if should_close else "open")

    @precondition(lambda self: bool(self.submissions))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from(sorted(self.submissions)))
        box = self.submissions[client]
        if self.intake.status == "aborted":
            with pytest.raises(RoundClosed):
                self.intake.check(client, box)
            return
        if self.intake.status == "closed":
            # an exact retry of an accepted submission is acknowledged again after closing
            assert self.intake.check(client, box) is None
            return
        before = self.intake.clients
        assert self.intake.check(client, box) is None
        assert self.intake.accept(client, submission_digest(box), self.now) is False
        assert self.intake.clients == before
        assert self.intake.status == "open"

    @precondition(lambda self: bool(self.submissions))
    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        victim = data.draw(st.sampled_from(sorted(self.submissions)))
        expected: type[MixnetError] = (
            DuplicateClient if self.intake.status == "open" else RoundClosed
        )
        with pytest.raises(expected):
            self.intake.check(f"client-{next(self.ids)}", self.submissions[victim])

    @rule()
    def poll(self) -> None:
        before = self.intake.status
        n = self.intake.clients
        status = self.intake.poll(self.now)
        assert status == self.intake.status
        if before != "open":
            assert status == before
        elif self.now < self.intake.deadline:
            assert status == "open"
        elif n >= self.policy.min_users:
            assert status == "closed"
        elif self.policy.below_min == "abort":
            assert status == "aborted"
        else:
            assert status == "open"

    @invariant()
    def never_closes_below_min(self) -> None:
        if self.intake.status == "closed":
            assert self.intake.clients >= self.policy.min_users

    @invariant()
    def never_above_max(self) -> None:
        assert self.intake.clients <= self.policy.max_users

    @invariant()
    def abort_only_below_min(self) -> None:
        if self.intake.status == "aborted":
            assert self.policy.below_min == "abort"
            assert self.intake.clients < self.policy.min_users

    @invariant()
    def open_below_max(self) -> None:
        if self.intake.status == "open":
            assert self.intake.clients < self.policy.max_users

    @invariant()
    def timer_matches_status(self) -> None:
        timer = self.intake.next_timer()
        if self.intake.status != "open":
            assert timer is None
        else:
            # open: the deadline, or None once a poll past it left a "wait" round open
            # (then only an accept can close it, so there is nothing to wake up for)
            assert timer in (self.intake.deadline, None)
            if timer is None:
                assert self.intake.policy.below_min == "wait"
                assert self.intake.clients < self.intake.policy.min_users


TestEntryIntakeMachine = EntryIntakeMachine.TestCase
TestEntryIntakeMachine.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None
)


@settings(max_examples=200, deadline=None)
@given(
    min_users=st.integers(1, 5),
    extra=st.integers(0, 5),
    below_min=st.sampled_from(["wait", "abort"]),
    ops=st.lists(
        st.tuples(st.sampled_from(["accept", "poll"]), st.floats(0.0, 5.0)), max_size=40
    ),
)
def test_never_closes_below_min_property(
    min_users: int, extra: int, below_min: BelowMin, ops: list[tuple[str, float]]
) -> None:
    policy = RoundPolicy(min_users, min_users + extra, 10.0, below_min)
    intake = EntryIntake(1, M, BOX_LEN, policy, 0.0)
    now = 0.0
    for i, (op, dt) in enumerate(ops):
        now += dt
        if op == "poll":
            intake.poll(now)
        elif intake.status == "open":
            submit(intake, f"c{i}", fresh_box(), now)
        assert intake.clients <= policy.max_users
        if intake.status == "closed":
            assert intake.clients >= policy.min_users


# ================================================================== BatchIntake

SENDER = "mix-0"
PLEN = 8


def payloads(k: int) -> list[bytes]:
    return [fresh_box()[-PLEN:] for _ in range(k)]


def make_batch() -> BatchIntake:
    return BatchIntake(5, SENDER, PLEN)


def deliver(
    intake: BatchIntake, index: int, chunks: int, clients: int, count: int, items: list[bytes],
    dropped: int = 0,
) -> str:
    """check + record as the server does; returns the outcome ('duplicate' if check says so)."""
    if not intake.check(SENDER, index, chunks, clients, count, items):
        return "duplicate"
    return intake.record(index, chunks, clients, count, len(items), dropped)


class TestBatchIntake:
    def test_initial_state(self) -> None:
        intake = make_batch()
        assert intake.complete is False
        assert intake.total_received == 0
        assert intake.dropped == 0
        assert intake.chunks is None and intake.clients is None and intake.count is None

    @pytest.mark.parametrize(
        "order", [[0, 1, 2], [2, 0, 1], [1, 2, 0], [2, 1, 0]], ids=lambda o: "".join(map(str, o))
    )
    def test_chunks_in_any_order_complete(self, order: list[int]) -> None:
        sizes = [2, 2, 1]
        intake = make_batch()
        outcomes = [deliver(intake, i, 3, 2, 5, payloads(sizes[i])) for i in order]
        assert outcomes == ["stored", "stored", "complete"]
        assert intake.complete is True
        assert intake.total_received == 5
        assert (intake.chunks, intake.clients, intake.count) == (3, 2, 5)
        assert intake.received == {0: 2, 1: 2, 2: 1}

    def test_single_chunk_completes(self) -> None:
        intake = make_batch()
        assert deliver(intake, 0, 1, 3, 4, payloads(4)) == "complete"

    def test_duplicate_chunk(self) -> None:
        intake = make_batch()
        first = payloads(2)
        assert deliver(intake, 0, 2, 1, 3, first, dropped=1) == "stored"
        # same index again: a duplicate (even with different payloads), nothing changes
        assert intake.check(SENDER, 0, 2, 1, 3, first) is False
        assert intake.check(SENDER, 0, 2, 1, 3, payloads(1)) is False
        assert intake.record(0, 2, 1, 3, 2, dropped=1) == "duplicate"
        assert intake.received == {0: 2}
        assert intake.dropped == 1
        assert intake.complete is False
        assert deliver(intake, 1, 2, 1, 3, payloads(1)) == "complete"
        # a duplicate after completion is still just a duplicate
        assert intake.check(SENDER, 1, 2, 1, 3, payloads(1)) is False
        assert intake.record(1, 2, 1, 3, 1) == "duplicate"
        assert intake.complete is True

    def test_duplicate_is_recognised_before_payload_checks(self) -> None:
        # a retry of a stored chunk is acked even if its payloads would not fit any more
        intake = make_batch()
        deliver(intake, 0, 2, 1, 2, payloads(2))
        assert intake.check(SENDER, 0, 2, 1, 2, payloads(2)) is False

    def test_wrong_sender(self) -> None:
        intake = make_batch()
        with pytest.raises(UnknownRound) as exc:
            intake.check("mix-9", 0, 1, 1, 1, payloads(1))
        assert exc.value.code == "unknown-round"
        deliver(intake, 0, 2, 1, 2, payloads(1))
        with pytest.raises(UnknownRound):
            intake.check("mix-9", 1, 2, 1, 2, payloads(1))
        # even a "duplicate" from the wrong sender is refused
        with pytest.raises(UnknownRound):
            intake.check("mix-9", 0, 2, 1, 2, payloads(1))

    @pytest.mark.parametrize(
        ("chunks", "clients", "count"),
        [(4, 2, 6), (2, 2, 6), (3, 3, 6), (3, 1, 6), (3, 2, 7), (3, 2, 5)],
    )
    def test_disagreeing_counts(self, chunks: int, clients: int, count: int) -> None:
        intake = make_batch()
        deliver(intake, 0, 3, 2, 6, payloads(2))
        with pytest.raises(WrongCount) as exc:
            intake.check(SENDER, 1, chunks, clients, count, payloads(2))
        assert exc.value.code == "wrong-count"
        assert intake.received == {0: 2}

    @pytest.mark.parametrize(("index", "chunks"), [(-1, 3), (3, 3), (4, 3), (0, 0), (0, -1)])
    def test_index_out_of_range(self, index: int, chunks: int) -> None:
        intake = make_batch()
        with pytest.raises(WrongCount):
            intake.check(SENDER, index, chunks, 1, 1, payloads(1))

    @pytest.mark.parametrize(("clients", "count"), [(-1, 1), (1, -1)])
    def test_negative_counts(self, clients: int, count: int) -> None:
        intake = make_batch()
        with pytest.raises(WrongCount):
            intake.check(SENDER, 0, 1, clients, count, [])

    @pytest.mark.parametrize(
        "bad", [b"", b"\x00" * (PLEN - 1), b"\x00" * (PLEN + 1), "x" * PLEN, bytearray(PLEN), None]
    )
    def test_payload_wrong_length(self, bad: object) -> None:
        intake = make_batch()
        items: list[object] = list(payloads(3))
        items[1] = bad
        with pytest.raises(BadLength) as exc:
            intake.check(SENDER, 0, 1, 1, 3, items)  # type: ignore[arg-type]
        assert exc.value.code == "bad-length"

    def test_more_payloads_than_count_in_one_chunk(self) -> None:
        intake = make_batch()
        with pytest.raises(WrongCount):
            intake.check(SENDER, 0, 2, 1, 3, payloads(4))

    def test_more_payloads_than_count_across_chunks(self) -> None:
        intake = make_batch()
        assert deliver(intake, 0, 3, 1, 5, payloads(3)) == "stored"
        assert intake.check(SENDER, 1, 3, 1, 5, payloads(2)) is True  # exactly reaches 5
        with pytest.raises(WrongCount):
            intake.check(SENDER, 1, 3, 1, 5, payloads(3))
        assert deliver(intake, 1, 3, 1, 5, payloads(2)) == "stored"
        with pytest.raises(WrongCount):
            intake.check(SENDER, 2, 3, 1, 5, payloads(1))
        assert deliver(intake, 2, 3, 1, 5, []) == "complete"

    def test_dropped_counts_accumulate(self) -> None:
        intake = make_batch()
        deliver(intake, 1, 3, 2, 6, payloads(2), dropped=1)
        deliver(intake, 0, 3, 2, 6, payloads(2), dropped=0)
        assert intake.dropped == 1
        assert deliver(intake, 2, 3, 2, 6, payloads(2), dropped=2) == "complete"
        assert intake.dropped == 3
        # dropped payloads still count as received (they arrived, then failed to peel)
        assert intake.total_received == 6

    def test_zero_payload_batch_completes(self) -> None:
        intake = make_batch()
        assert intake.check(SENDER, 0, 1, 0, 0, []) is True
        assert intake.record(0, 1, 0, 0, 0) == "complete"
        assert intake.complete is True
        assert intake.total_received == 0
        with pytest.raises(WrongCount):
            make_batch().check(SENDER, 0, 1, 0, 0, payloads(1))

    def test_record_rechecks_counts_of_interleaved_chunks(self) -> None:
        intake = make_batch()
        assert intake.check(SENDER, 0, 2, 1, 4, payloads(2)) is True
        assert intake.check(SENDER, 1, 3, 9, 40, payloads(2)) is True
        intake.record(0, 2, 1, 4, 2)
        with pytest.raises(WrongCount):
            intake.record(1, 3, 9, 40, 2)

    def test_record_rechecks_total_of_interleaved_chunks(self) -> None:
        intake = make_batch()
        assert intake.check(SENDER, 0, 2, 1, 4, payloads(3)) is True
        assert intake.check(SENDER, 1, 2, 1, 4, payloads(3)) is True
        intake.record(0, 2, 1, 4, 3)
        with pytest.raises(WrongCount):
            intake.record(1, 2, 1, 4, 3)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), sizes=st.lists(st.integers(0, 4), min_size=1, max_size=8))
def test_batch_any_order_with_retries_completes_once(data: st.DataObject, sizes: list[int]) -> None:
    chunks, count = len(sizes), sum(sizes)
    order = data.draw(st.permutations(range(chunks)))
    # interleave some retries of already delivered chunks
    deliveries: list[int] = []
    for pos, index in enumerate(order):
        deliveries.append(index)
        if data.draw(st.booleans()):
            deliveries.append(data.draw(st.sampled_from(order[: pos + 1])))
    intake = make_batch()
    outcomes = [deliver(intake, i, chunks, 3, count, payloads(sizes[i])) for i in deliveries]
    assert outcomes.count("complete") == 1
    assert outcomes.count("stored") == chunks - 1
    assert intake.complete
    assert intake.total_received == count


# ================================================================== mixing


def scripted(values: Sequence[int]) -> Callable[[int], int]:
    """A randbelow returning the given choices, checking each is in range."""
    it: Iterator[int] = iter(values)
    calls: list[int] = []

    def randbelow(n: int) -> int:
        calls.append(n)
        v = next(it)
        assert 0 <= v < n
        return v

    randbelow.calls = calls  # type: ignore[attr-defined]
    return randbelow


class TestUniformPermutation:
    @pytest.mark.parametrize("size", [0, 1])
    def test_trivial_sizes_use_no_randomness(self, size: int) -> None:
        def no_random(n: int) -> int:
            raise AssertionError("randbelow must not be called")

        assert uniform_permutation(size, no_random) == list(range(size))

    def test_default_randomness_gives_permutation(self) -> None:
        for size in (0, 1, 2, 10, 100):
            assert sorted(uniform_permutation(size)) == list(range(size))

    def test_randbelow_called_with_decreasing_bounds(self) -> None:
        rb = scripted([0, 0, 0, 0])
        uniform_permutation(5, rb)
        assert rb.calls == [5, 4, 3, 2]  # type: ignore[attr-defined]

    def test_known_output_for_all_zero_choices(self) -> None:
        assert uniform_permutation(4, lambda n: 0) == [1, 2, 3, 0]

    def test_identity_for_maximal_choices(self) -> None:
        assert uniform_permutation(6, lambda n: n - 1) == list(range(6))

    def test_choice_sequences_biject_onto_permutations(self) -> None:
        # each of the 4*3*2 choice sequences gives a distinct permutation: with exact
        # randbelow every order is equally likely
        perms = {
            tuple(uniform_permutation(4, scripted(choices)))
            for choices in itertools.product(range(4), range(3), range(2))
        }
        assert perms == set(itertools.permutations(range(4)))


class TestDropReplays:
    """``drop_replays(items, seen, chunk)``: an item is a replay if it arrived in another
    chunk index of the round, or repeats within this chunk; a retransmitted copy of a chunk
    keeps exactly what the first copy kept."""

    A, B, C, D = b"a" * 4, b"b" * 4, b"c" * 4, b"d" * 4

    def test_repeats_within_a_chunk_keep_the_first_copy(self) -> None:
        a, b, c = self.A, self.B, self.C
        seen: dict[bytes, int] = {}
        kept, dropped = drop_replays([a, b, a, c, b, a], seen, 0)
        assert (kept, dropped) == ([a, b, c], 3)
        assert len(seen) == 3
        assert set(seen.values()) == {0}

    def test_item_of_another_chunk_is_a_replay(self) -> None:
        seen: dict[bytes, int] = {}
        assert drop_replays([b"x", b"y"], seen, 0) == ([b"x", b"y"], 0)
        assert drop_replays([b"y", b"z"], seen, 1) == ([b"z"], 1)
        # whichever chunk brought an item first owns it, whatever the index order
        assert drop_replays([b"w", b"z"], seen, 0) == ([b"w"], 1)

    def test_a_later_chunk_cannot_claim_an_earlier_chunks_items(self) -> None:
        seen: dict[bytes, int] = {}
        drop_replays([b"x"], seen, 5)
        assert drop_replays([b"x", b"x"], seen, 2) == ([], 2)
        assert drop_replays([b"x"], seen, 5) == ([b"x"], 0)  # still chunk 5's

    def test_retransmitted_copy_keeps_exactly_what_the_first_kept(self) -> None:
        a, b, c, d = self.A, self.B, self.C, self.D
        seen: dict[bytes, int] = {}
        chunk0 = [a, b, a]
        chunk1 = [b, c, d, c]
        first0 = drop_replays(chunk0, seen, 0)
        first1 = drop_replays(chunk1, seen, 1)
        assert first0 == ([a, b], 1)
        assert first1 == ([c, d], 2)
        before = dict(seen)
        # copies of either chunk, in any order, any number of times
        for _ in range(2):
            assert drop_replays(chunk1, seen, 1) == first1
            assert drop_replays(chunk0, seen, 0) == first0
        assert seen == before

    def test_retransmitted_copy_is_not_a_replay_of_itself(self) -> None:
        # unlike a plain "seen set", the second copy of the same chunk is not emptied
        seen: dict[bytes, int] = {}
        items = [self.A, self.B]
        assert drop_replays(items, seen, 3) == (items, 0)
        assert drop_replays(items, seen, 3) == (items, 0)
        assert drop_replays(items, seen, 4) == ([], 2)

    def test_empty_and_all_repeats(self) -> None:
        assert drop_replays([], {}, 0) == ([], 0)
        assert drop_replays([b"x"] * 5, {}, 0) == ([b"x"], 4)

    def test_does_not_mutate_items_and_accepts_a_tuple(self) -> None:
        items = (self.A, self.A, self.B)
        kept, dropped = drop_replays(items, {}, 0)
        assert items == (self.A, self.A, self.B)
        assert (kept, dropped) == ([self.A, self.B], 1)
        assert isinstance(kept, list)

    @settings(max_examples=100, deadline=None)
    @given(
        chunks=st.lists(
            st.lists(st.sampled_from([b"p", b"q", b"r", b"s", b"t", b"u"]), max_size=6),
            min_size=1,
            max_size=5,
        ),
        data=st.data(),
    )
    def test_property_any_order_with_retransmissions(
        self, chunks: list[list[bytes]], data: st.DataObject
    ) -> None:
        # deliver each chunk at least once, with retransmissions, in any order
        order = data.draw(
            st.lists(st.integers(0, len(chunks) - 1), max_size=3 * len(chunks)).map(
                lambda extra: extra + list(range(len(chunks)))
            )
        )
        order = data.draw(st.permutations(order))
        seen: dict[bytes, int] = {}
        first: dict[int, tuple[list[bytes], int]] = {}
        owner: dict[bytes, int] = {}
        for index in order:
            kept, dropped = drop_replays(chunks[index], seen, index)
            assert len(kept) + dropped == len(chunks[index])
            if index in first:
                # a retransmission: exactly the same outcome as the first copy
                assert (kept, dropped) == first[index]
                continue
            first[index] = (kept, dropped)
            # the first copy keeps, in order, each item no other chunk brought before
            expected: list[bytes] = []
            for item in chunks[index]:
                if item not in expected and owner.get(item, index) == index:
                    expected.append(item)
            assert kept == expected
            for item in kept:
                owner[item] = index
        # over the whole round, every distinct item is kept exactly once
        everything = [item for kept, _ in first.values() for item in kept]
        assert sorted(everything) == sorted({item for c in chunks for item in c})


class TestMixBatch:
    def test_is_a_permutation_keeping_equal_payloads(self) -> None:
        # plaintext shares may be equal: all copies must survive mixing
        items = [*payloads(20), b"same", b"same"]
        mixed = mix_batch(items)
        assert sorted(mixed) == sorted(items)

    def test_empty(self) -> None:
        assert mix_batch([]) == []

    def test_does_not_mutate_input(self) -> None:
        items = payloads(6)
        copy = list(items)
        mix_batch(items)
        assert items == copy

    def test_deterministic_randbelow_is_reproducible(self) -> None:
        items = payloads(30)
        first = mix_batch(items, random.Random(1234).randrange)
        second = mix_batch(items, random.Random(1234).randrange)
        assert first == second
        other = mix_batch(items, random.Random(4321).randrange)
        assert sorted(other) == sorted(first)
        assert other != first  # 30! orders: a collision is essentially impossible

    def test_uses_injected_randbelow(self) -> None:
        a, b, c, d = (bytes([i]) * 4 for i in range(4))
        assert mix_batch([a, b, c, d], lambda n: 0) == [b, c, d, a]

    def test_uniformity_of_orders(self) -> None:
        items = [b"w", b"x", b"y", b"z"]
        index = {p: k for k, p in enumerate(itertools.permutations(items))}
        trials = 24_000
        counts: Counter[int] = Counter()
        for _ in range(trials):
            counts[index[tuple(mix_batch(items, secrets.randbelow))]] += 1
        assert len(counts) == 24
        observed = [counts[k] for k in range(24)]
        result = chisquare(observed)
        assert result.pvalue > 1e-4, observed


# ================================================================== split_chunks


class TestSplitChunks:
    @pytest.mark.parametrize(
        ("n", "size", "sizes"),
        [
            (10, 3, [3, 3, 3, 1]),
            (9, 3, [3, 3, 3]),
            (1, 1, [1]),
            (5, 1, [1, 1, 1, 1, 1]),
            (4, 100, [4]),
        ],
    )
    def test_sizes(self, n: int, size: int, sizes: list[int]) -> None:
        items = payloads(n)
        chunks = split_chunks(items, size)
        assert [len(c) for c in chunks] == sizes
        assert [p for c in chunks for p in c] == items

    @pytest.mark.parametrize("size", [1, 7])
    def test_empty_input_gives_one_empty_chunk(self, size: int) -> None:
        assert split_chunks([], size) == [[]]

    @pytest.mark.parametrize("size", [0, -1, -100])
    def test_bad_size(self, size: int) -> None:
        with pytest.raises(ValueError, match="chunk size"):
            split_chunks(payloads(3), size)
        with pytest.raises(ValueError):
            split_chunks([], size)

    def test_chunks_are_lists(self) -> None:
        chunks = split_chunks(tuple(payloads(3)), 2)
        assert all(isinstance(c, list) for c in chunks)

    @given(n=st.integers(0, 60), size=st.integers(1, 20))
    def test_property(self, n: int, size: int) -> None:
        items = [i.to_bytes(2, "big") for i in range(n)]
        chunks = split_chunks(items, size)
        assert len(chunks) == max(1, math.ceil(n / size))
        assert all(1 <= len(c) <= size for c in chunks) or chunks == [[]]
        assert all(len(c) == size for c in chunks[:-1])
        assert [p for c in chunks for p in c] == items


# ================================================================== submission_digest


class TestSubmissionDigest:
    def test_deterministic_and_32_bytes(self) -> None:
        d = submission_digest(b"box")
        assert isinstance(d, bytes) and len(d) == 32
        assert submission_digest(b"box") == d

    def test_content_matters(self) -> None:
        assert submission_digest(b"\x00" * 16) != submission_digest(b"\x00" * 15 + b"\x01")

    def test_personalised(self) -> None:
        import hashlib

        assert submission_digest(b"abc") != hashlib.blake2b(b"abc", digest_size=32).digest()
        assert submission_digest(b"abc") == hashlib.blake2b(
            b"abc", digest_size=32, person=b"mixnet-submit"
        ).digest()
