"""The round machines of a whole chain, wired together in memory (no sockets, no sqlite):
exactly-once intake, the exact sum, and recovery from any crash, under reordered, duplicated
and cut deliveries (hypothesis explores the schedules)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mixnet.core.entry import EntryMachine
from mixnet.core.policy import RoundPolicy
from mixnet.core.status import RoundStatus
from tests.mixnet.chain_harness import VALID_BELOW, MemoryChain


def check_results(chain: MemoryChain, *, settled: bool = True) -> None:
    """Every round the sink finished holds exactly the honest submissions the entry mix
    stored in it, each once, and reports every poisoned one as excluded; once the chain
    settled, every honest client acknowledged in a round is counted in that round (or the
    round was aborted)."""
    sink = chain.nodes[-1]
    for round_id, result in sink.store.results.items():
        stored = chain.stored_in.get(round_id, {})
        if result["status"] == "aborted":
            continue
        kept = {c: v for c, v in stored.items() if chain.honest(c, v)}
        assert result["status"] == "ok", result
        assert result["clients"] == len(kept), (round_id, result, stored)
        assert result["excluded"] == len(stored) - len(kept), (round_id, result, stored)
        assert result["sum"] == sum(sum(v) for v in kept.values())
    entry = chain.nodes[0].machine
    if settled and isinstance(entry, EntryMachine):  # the entry mix ends a round as the sink
        for round_id, result in sink.store.results.items():
            status = entry.status(round_id)
            if status in (RoundStatus.CONFIRMED, RoundStatus.ABORTED):
                aborted = result["status"] == "aborted"
                ended = RoundStatus.ABORTED if aborted else RoundStatus.CONFIRMED
                assert status is ended, (round_id, status, result, "\n".join(chain.trace[-40:]))
    counted: dict[str, list[int]] = {}
    for round_id, stored in chain.stored_in.items():
        if sink.store.results.get(round_id, {}).get("status") == "ok":
            for ident, values in stored.items():
                if chain.honest(ident, values):
                    counted.setdefault(ident, []).append(round_id)
    for client in chain.clients:
        rounds = counted.get(client.ident, [])
        assert len(rounds) <= 1, f"{client.ident} counted in rounds {rounds}\n" + "\n".join(
            chain.trace[-60:]
        )
        assert len(client.acked) <= 1, f"{client.ident} acknowledged in {client.acked}"
        if not settled:
            continue
        for acked in client.acked:
            status = sink.store.rounds[acked].status
            assert status in (RoundStatus.DONE, RoundStatus.ABORTED), (acked, status)
            if status is RoundStatus.DONE and chain.honest(client.ident, client.values):
                assert rounds == [acked]


def test_a_round_through_three_mixes_is_exact() -> None:
    chain = MemoryChain(
        mixes=3, messages=3, policy=RoundPolicy(2, 4, 10.0, chunk_size=2), seed=1
    )
    for i in range(7):
        chain.add_client([i, 10 * i, 100 * i])
    chain.settle()
    check_results(chain)
    results = chain.nodes[-1].store.results
    assert sum(r["clients"] for r in results.values() if r["status"] == "ok") == 7  # type: ignore[misc]
    assert all(c.acked for c in chain.clients)


def test_a_poisoned_submission_is_excluded_and_the_round_is_exact() -> None:
    """One client's second payload is one the last mix's validator refuses: the chain
    traces it back to that client's submission, drops all of it, and the round holds the
    exact sum of the others with excluded = 1."""
    chain = MemoryChain(
        mixes=3, messages=3, policy=RoundPolicy(3, 4, 10.0, chunk_size=2), seed=2
    )
    for i in range(3):
        chain.add_client([i + 1, 10 * (i + 1), 100])
    chain.add_client([5, VALID_BELOW + 9, 5])
    chain.settle()
    check_results(chain)
    (result,) = chain.nodes[-1].store.results.values()
    assert result == {"round": 1, "status": "ok", "clients": 3, "sum": 366, "excluded": 1}


@pytest.mark.parametrize(("mixes", "chunk_size"), [(3, 8), (3, 3), (3, 1), (4, 1), (4, 16)])
def test_colliding_onions_are_excluded_and_the_round_is_exact(
    mixes: int, chunk_size: int
) -> None:
    """One client's first two onions hold the same hop-2 onion: mix 2 leaves both out and
    accuses both inputs (``duplicate``); the entry mix excludes the submission. However small
    the chunks: a reply always carries a pair of accusations."""
    chain = MemoryChain(
        mixes=mixes, messages=3, policy=RoundPolicy(3, 4, 10.0, chunk_size=chunk_size), seed=5
    )
    for i in range(3):
        chain.add_client([i + 1, 10 * (i + 1), 100])
    chain.add_client([5, 6, 7], twins=True)
    chain.settle()
    check_results(chain)
    (result,) = chain.nodes[-1].store.results.values()
    assert result == {"round": 1, "status": "ok", "clients": 3, "sum": 366, "excluded": 1}


@pytest.mark.parametrize("failing", [1, 2, 3])
def test_a_chunk_the_next_node_could_not_store_is_sent_again(failing: int) -> None:
    """Node ``failing`` (mix 2, mix 3, the sink) cannot store the first chunk it gets (a full
    disk) and answers ``internal-error``; its predecessor sends the chunk again a second
    later, and the round ends exact. Before, the round stayed where it was until the sender
    restarted."""
    chain = MemoryChain(
        mixes=3, messages=3, policy=RoundPolicy(3, 3, 10.0, chunk_size=2), seed=failing
    )
    chain.nodes[failing].fail_writes.append("ChunkStored")
    for i in range(3):
        chain.add_client([i + 1, 10 * (i + 1), 100])
    chain.settle()
    check_results(chain)
    assert chain.nodes[failing].fail_writes == []  # the write did fail
    assert "write of" in " ".join(chain.trace)
    (result,) = chain.nodes[-1].store.results.values()
    assert result == {"round": 1, "status": "ok", "clients": 3, "sum": 366, "excluded": 0}


def crash_at_every_step(
    clients: Sequence[tuple[list[int], bool]],
    *,
    chunk_size: int,
    steps: range,
    users: tuple[int, int] = (2, 3),
) -> None:
    """For each node and each step count in ``steps``: a chain of 3 mixes with these
    ``(values, twins)`` clients is run that many steps, the node crashes and restarts, the
    chain settles, and every result must be exact (:func:`check_results`). ``users``: the
    rounds' ``min_users`` and ``max_users``."""
    for victim in range(4):
        for crash_after in steps:
            policy = RoundPolicy(*users, 5.0, "abort", chunk_size=chunk_size)
            chain = MemoryChain(mixes=3, messages=2, policy=policy, seed=crash_after)
            for values, twins in clients:
                chain.add_client(values, twins=twins)
            chain.eager = False
            for _ in range(crash_after):
                chain.step()
            chain.crash(victim)
            chain.restart(victim)
            chain.settle()
            check_results(chain)


def test_colliding_onions_with_a_crash_at_every_step() -> None:
    """The duplicates are found again after any crash (a restarted mix 2 from its stored
    outputs), and the round still ends exact or aborted, never with a wrong sum."""
    others = [([i + 4, 7], False) for i in range(3)]
    crash_at_every_step([([1, 2], False), ([3, 4], True), *others], chunk_size=8,
                        steps=range(1, 90, 4))  # fmt: skip


def test_a_poisoned_submission_with_a_crash_at_every_step() -> None:
    """The trace and the exclusion survive a crash of any node at any step."""
    others = [([i + 4, 7], False) for i in range(3)]
    crash_at_every_step([([1, 2], False), ([VALID_BELOW, 3], False), *others], chunk_size=2,
                        steps=range(1, 90, 4))  # fmt: skip


def paged_clients() -> list[tuple[list[int], bool]]:
    """Four honest clients, five whose second payload the last mix refuses and one whose
    onions collide at mix 2: with chunks of two, more than one ``accused`` reply (two
    accusations) and one ``exclude`` frame (two submissions) carry."""
    honest = [([i + 1, 7], False) for i in range(4)]
    poisoned = [([i + 1, VALID_BELOW + i], False) for i in range(5)]
    return [*honest, *poisoned, ([1, 2], True)]


def test_a_trace_and_an_exclusion_longer_than_one_frame_go_in_pages() -> None:
    """The last mix's five refused payloads come back in three pages, after mix 2's page of
    its own (the colliding pair); the six submissions are excluded in three ``exclude``
    pages; the four honest ones are summed exactly. Before pages, the accusations beyond one
    reply were untraced and the round aborted."""
    chain = MemoryChain(
        mixes=3, messages=2, policy=RoundPolicy(3, 10, 10.0, chunk_size=2), seed=9
    )
    for values, twins in paged_clients():
        chain.add_client(values, twins=twins)
    chain.settle()
    check_results(chain)
    (result,) = chain.nodes[-1].store.results.values()
    assert result == {"round": 1, "status": "ok", "clients": 4, "sum": 38, "excluded": 6}
    asked = [line for line in chain.trace if "deliver" in line and "Trace(round_id=1" in line]
    entry_asked = {line.split("page=")[1] for line in asked if " 0->1 " in line}
    assert entry_asked == {"0)", "1)", "2)", "3)"}, asked  # mix 2's page, the last mix's 3
    excludes = [line for line in chain.trace if "deliver" in line and "Exclude(round_id=1" in line]
    assert len(excludes) == 2 * 3, excludes  # three pages, to mix 2 and on to mix 3


def test_a_paged_trace_with_a_crash_at_every_step() -> None:
    """A crash of any node at any step of a paged trace and exclusion: the restarted node
    answers every page as before (the last mix's gathered exclusion pages are lost; the
    entry mix starts the verdict over), and the round ends exact, never wrong."""
    # the round takes about 350 steps, its trace from about step 170
    crash_at_every_step(paged_clients(), chunk_size=2, steps=range(1, 360, 4), users=(3, 10))


def test_an_aborting_entry_mix_restarted_at_every_step_ends_the_round_aborted() -> None:
    """Excluding the poisoned submission leaves fewer than ``min_users``: the entry mix aborts
    the round down the chain. Crashed at any step and restarted, it must end the round
    ``aborted`` like the sink (and forget its receipts, so that clients submit afresh) —
    also when the later mixes aborted before it could store that it had: a trace of an
    aborted round answers ``round-closed``, not "nothing to accuse"."""
    for crash_after in range(1, 120, 3):
        chain = MemoryChain(
            mixes=3, messages=2,
            policy=RoundPolicy(3, 3, 5.0, "abort", chunk_size=2), seed=crash_after,
        )  # fmt: skip
        chain.add_client([1, 2])
        chain.add_client([3, 4])
        chain.add_client([5, VALID_BELOW + 1])  # refused by the last mix's validator
        chain.eager = False
        for _ in range(crash_after):
            chain.step()
        chain.crash(0)
        chain.restart(0)
        chain.settle()
        check_results(chain)
        entry = chain.nodes[0].machine
        assert isinstance(entry, EntryMachine)
        results = chain.nodes[-1].store.results
        assert all(r["status"] == "aborted" for r in results.values()), results


def test_every_node_recovers_from_a_crash_at_every_step() -> None:
    """Crash each node after each of its first steps; the chain still ends exact."""
    crash_at_every_step([([i + 1, 7], False) for i in range(5)], chunk_size=2,
                        steps=range(1, 80, 3))  # fmt: skip


class ChainSchedules(RuleBasedStateMachine):
    """Any order of deliveries, duplicates (cut connections), timer ticks, crashes and
    restarts of any node; the invariants hold throughout and after settling."""

    def __init__(self) -> None:
        super().__init__()
        self.chain = self.make_chain()
        self.chain.eager = False

    @staticmethod
    def make_chain() -> MemoryChain:
        """Six honest clients and a poisoned one (traced and excluded)."""
        chain = MemoryChain(
            mixes=3, messages=2, policy=RoundPolicy(2, 4, 5.0, "abort", chunk_size=3), seed=7
        )
        for i in range(6):
            chain.add_client([i + 1, 1000 * (i + 1)])
        chain.add_client([VALID_BELOW + 1, 7])
        return chain

    @precondition(lambda self: bool(self.chain.runnable()))
    @rule(data=st.data(), steps=st.sampled_from([1, 1, 2, 100]))
    def run_a_task(self, data: st.DataObject, steps: int) -> None:
        node, task = data.draw(st.sampled_from(self.chain.runnable()))
        self.chain.run(node, task, limit=steps)

    @precondition(lambda self: bool(self.chain.deliverable()))
    @rule(data=st.data())
    def deliver_a_request(self, data: st.DataObject) -> None:
        self.chain.deliver(data.draw(st.sampled_from(self.chain.deliverable())))

    @precondition(lambda self: bool(self.chain.answerable()))
    @rule(data=st.data())
    def deliver_a_reply(self, data: st.DataObject) -> None:
        self.chain.answer(data.draw(st.sampled_from(self.chain.answerable())))

    @precondition(lambda self: bool(self.chain.exchanges))
    @rule(data=st.data())
    def cut_a_connection(self, data: st.DataObject) -> None:
        ident = data.draw(st.sampled_from(sorted(self.chain.exchanges)))
        self.chain.cut(self.chain.exchanges[ident])

    @rule(steps=st.integers(1, 40))
    def progress(self, steps: int) -> None:
        for _ in range(steps):
            if not self.chain.step():
                return

    @rule(client=st.integers(0, 6))
    def client_submits(self, client: int) -> None:
        self.chain.client_submit(self.chain.clients[client])

    @rule(seconds=st.sampled_from([0.5, 2.0, 6.0]))
    def time_passes(self, seconds: float) -> None:
        self.chain.tick(seconds)

    @rule(index=st.integers(1, 3))
    def a_chunk_write_fails(self, index: int) -> None:
        """The next chunk node ``index`` stores fails (a full disk): it answers
        ``internal-error`` and its predecessor must send the chunk again."""
        if self.chain.nodes[index].alive:
            self.chain.nodes[index].fail_writes.append("ChunkStored")

    @rule(index=st.integers(0, 3))
    def crash_and_restart(self, index: int) -> None:
        self.chain.crash(index)
        self.chain.restart(index)

    @invariant()
    def results_are_exact(self) -> None:
        check_results(self.chain, settled=False)

    def teardown(self) -> None:
        self.chain.settle()
        check_results(self.chain)
        assert all(c.done for c in self.chain.clients)


def schedule_settings(examples: int) -> settings:
    """``examples`` schedules of 60 steps (``CHAIN_EXAMPLES=3000`` for a longer search)."""
    return settings(
        max_examples=int(os.environ.get("CHAIN_EXAMPLES", str(examples))),
        stateful_step_count=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


ChainSchedules.TestCase.settings = schedule_settings(200)
TestChainSchedules = ChainSchedules.TestCase


class ChainSchedulesWithTwins(ChainSchedules):
    """The same schedules with a client whose onions collide at mix 2 instead of the
    poisoned one (chunks of 8 items, so that mix 2's reply carries both its accusations)."""

    @staticmethod
    def make_chain() -> MemoryChain:
        """Six honest clients and one whose onions collide (left out at mix 2, traced,
        excluded)."""
        chain = MemoryChain(
            mixes=3, messages=2, policy=RoundPolicy(2, 4, 5.0, "abort", chunk_size=8), seed=11
        )
        for i in range(6):
            chain.add_client([i + 1, 1000 * (i + 1)])
        chain.add_client([7, 8], twins=True)
        return chain


ChainSchedulesWithTwins.TestCase.settings = schedule_settings(100)
TestChainSchedulesWithTwins = ChainSchedulesWithTwins.TestCase


def test_a_chain_of_one_mix_confirms_its_rounds_and_refuses_bad_payloads_at_intake() -> None:
    """With one mix the entry mix is also the last: it checks the payloads when it peels a
    submission (a bad one is refused whole), and confirms a forwarded round without a trace
    (its successor is the sink, which takes no ``trace``)."""
    chain = MemoryChain(mixes=1, messages=2, policy=RoundPolicy(2, 3, 5.0, chunk_size=2), seed=4)
    for i in range(3):
        chain.add_client([i + 1, 10])
    poisoned = chain.add_client([VALID_BELOW, 1])
    chain.settle()
    check_results(chain)
    entry = chain.nodes[0]
    assert entry.machine is not None
    assert {st.status for st in entry.machine.rounds.values()} >= {RoundStatus.CONFIRMED}
    assert poisoned.done and not poisoned.acked  # refused, never counted
    (result,) = chain.nodes[-1].store.results.values()
    assert result["status"] == "ok" and result["clients"] == 3 and result["sum"] == 36


def test_an_exclusion_that_overtakes_a_restarted_entrys_trace_still_confirms() -> None:
    """Found by the twins schedules: the entry mix sends its exclusion and is restarted
    before storing the answer, so it traces the round again. Mix 2 passes the new ``trace``
    on, then applies the exclusion (its trace is over: its intake and what it knew of the
    colliding onions are erased), and only then gets mix 3's answer. It must answer "nothing
    to accuse" as for any round whose trace is over, not count its dropped copies as
    untraced — which made the entry mix abort a round the sink had counted, and tell its
    clients to submit again."""
    machine = ChainSchedulesWithTwins()
    for step, arg in [("progress", 1), ("progress", 1), ("progress", 1), ("progress", 9),
                      ("progress", 40), ("progress", 40), ("progress", 40), ("crash", 0),
                      ("crash", 0), ("crash", 0), ("progress", 18), ("progress", 40),
                      ("crash", 1), ("progress", 1), ("crash", 0)]:  # fmt: skip
        if step == "progress":
            machine.progress(arg)
        else:
            machine.crash_and_restart(arg)
        machine.results_are_exact()
    machine.teardown()
    results = machine.chain.nodes[-1].store.results
    assert results[2]["status"] == "ok" and results[2]["excluded"] == 1, results
