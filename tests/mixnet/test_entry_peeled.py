"""Lone ``submit`` frames whose boxes opened together are decided together
(:mod:`mixnet.entry_peeled`), on a real chain: each
submission still decided and answered on its own, the accepted ones stored by one write, a
failed write refusing each of them, and concurrent submits over several connections summing
exactly."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from mixnet.client import MixnetClient
from mixnet.core.policy import RoundPolicy
from mixnet.core.records import AddSubmission, Write
from mixnet.errors import BadLength, DuplicateClient, InternalError, MixnetError
from mixnet.frames import Submit
from mixnet.localchain import RunningChain
from mixnet.mix import MixNode
from mixnet.store import StoreError
from tests.mixnet.test_nodes import WIDTH, payloads, result, running_chain


@contextlib.asynccontextmanager
async def chain_of_two(
    tmp_path: Path, users: int, *, connections: int = 1
) -> AsyncIterator[tuple[RunningChain, MixnetClient]]:
    """A real chain of two mixes taking rounds of exactly ``users`` two-payload
    submissions, and a client of it over ``connections`` connections."""
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=30.0, chunk_size=8)
    async with running_chain(tmp_path, mixes=2, messages=2, policy=policy) as chain:
        client = MixnetClient(
            chain.config,
            messages=2,
            payload_length=WIDTH,
            sink_url=chain.config.sink.url,
            connections=connections,
        )
        async with client:
            yield chain, client


async def serve(entry: MixNode, frame: Submit) -> dict[str, object]:
    """The entry mix's answer to a lone ``submit`` (its reply, or the error frame)."""
    try:
        return await entry._serve(frame)
    except MixnetError as exc:
        return entry._refusal(exc)


async def test_lone_submits_opened_together_are_decided_once_each_on_its_own(
    tmp_path: Path,
) -> None:
    """Seven lone submits reach the entry mix together: three good ones, a box of the wrong
    length, a second box for a client already in, an exact repeat of the first, and a fourth
    good one. The six boxes of the right length open in one peel task and are decided by
    one call; each
    submission gets its own answer, as in a ``submit-many`` frame, and the round sums
    exactly the four good ones (the repeat counted once)."""
    async with chain_of_two(tmp_path, 4) as (chain, client):
        info = await client.current_round()
        r = info.round_id

        def box(values: list[int]) -> bytes:
            return client.wrap(payloads(values), info)

        good = [Submit(r, f"u{i}", box([i, 10 * i])) for i in (1, 2, 3)]
        frames = [
            *good,
            Submit(r, "short", b"x" * 5),
            Submit(r, "u2", box([50, 50])),
            good[0],
            Submit(r, "u4", box([4, 40])),
        ]
        entry = chain.mixes[0]
        together = entry._together
        before = (together.decisions, together.decided)
        answers = await asyncio.gather(*(serve(entry, f) for f in frames))
        # every box but the short one opens (in one peel task) and is decided in one call
        assert (together.decisions, together.decided) == (before[0] + 1, before[1] + 6)
        assert [answers[i] for i in (0, 1, 2, 5, 6)] == [
            {"type": "accepted", "round": r, "client": c}
            for c in ("u1", "u2", "u3", "u1", "u4")
        ]
        assert answers[3]["code"] == BadLength.code
        assert answers[4]["code"] == DuplicateClient.code
        done = await asyncio.wait_for(result(client, r), 30)
    assert done["status"] == "ok" and done["clients"] == 4
    assert done["sum"] == sum(11 * i for i in (1, 2, 3, 4))


async def test_a_failed_shared_write_refuses_each_of_its_submissions(tmp_path: Path) -> None:
    """The store refuses the write that holds three lone submits decided together: each
    gets ``internal-error`` and nothing of them is kept, so the same three frames sent again
    are stored, and with a fourth the round sums each once."""
    async with chain_of_two(tmp_path, 4) as (chain, client):
        info = await client.current_round()
        r = info.round_id
        frames = [Submit(r, f"u{i}", client.wrap(payloads([i, i]), info)) for i in (1, 2, 3)]
        entry = chain.mixes[0]
        apply = entry.store.apply
        refused: list[int] = []

        def failing(groups: Sequence[Sequence[Write]]) -> list[StoreError | None]:
            bad = [any(isinstance(w, AddSubmission) for w in g) for g in groups]
            if refused or not any(bad):
                return apply(groups)
            refused.append(sum(bad))
            rest = iter(apply([g for g, b in zip(groups, bad, strict=True) if not b]))
            return [StoreError("refused for the test") if b else next(rest) for b in bad]

        entry.store.apply = failing  # type: ignore[method-assign]
        answers = await asyncio.gather(*(serve(entry, f) for f in frames))
        assert refused == [1]  # the three were one write
        assert [a["code"] for a in answers] == [InternalError.code] * 3
        again = await asyncio.gather(*(serve(entry, f) for f in frames))
        assert [a["type"] for a in again] == ["accepted"] * 3
        last = Submit(r, "u4", client.wrap(payloads([4, 4]), info))
        assert (await serve(entry, last))["type"] == "accepted"
        done = await asyncio.wait_for(result(client, r), 30)
    assert done["status"] == "ok" and done["clients"] == 4 and done["sum"] == 20


async def test_concurrent_lone_submits_over_several_connections_sum_exactly(
    tmp_path: Path,
) -> None:
    """Twenty clients submit at once over six connections, one ``submit`` frame each: each
    is decided once and acknowledged, and the round's sum is exact."""
    users = 20
    async with chain_of_two(tmp_path, users, connections=6) as (chain, client):

        def values(i: int) -> Callable[[], list[bytes]]:
            return lambda: payloads([i, 2 * i])

        receipts = await asyncio.gather(
            *(client.submit(values(i), client_id=f"c{i}") for i in range(users))
        )
        rounds = {rc.round_id for rc in receipts}
        assert len(rounds) == 1
        done = await asyncio.wait_for(result(client, rounds.pop()), 30)
        assert chain.mixes[0]._together.decided == users
    assert done["status"] == "ok" and done["clients"] == users
    assert done["sum"] == 3 * sum(range(users))
