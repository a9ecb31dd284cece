"""``submit-many``: parsing and receipts (pure), and a real chain over sockets where one frame
carries good, malformed, duplicate and repeated submissions, each decided on its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixnet.client import MixnetClient, send_submissions
from mixnet.core.policy import RoundPolicy
from mixnet.errors import (
    BadLength,
    DuplicateClient,
    MalformedFrame,
    RoundClosed,
    UnexpectedFrameType,
    UnknownRound,
    WrongCount,
)
from mixnet.frames import FrameLimits, Submit
from mixnet.limits import Limits, LimitsError
from mixnet.link import Link
from mixnet.localchain import RunningChain
from mixnet.submit_many import (
    RECEIPTS,
    parse_receipts,
    parse_submit_many,
    receipts_frame,
    submit_many_frame,
)
from mixnet.wire import decode_frame, encode_frame, error_frame
from tests.mixnet.test_limits import refused
from tests.mixnet.test_nodes import WIDTH, payloads, result, running_chain

LIMITS = FrameLimits(chain_id="t", submission_length=10)


def submit(client: str, box: bytes = b"b" * 10, round_id: int = 1) -> Submit:
    return Submit(round_id=round_id, client=client, box=box)


# --------------------------------------------------------------------------- pure


@given(st.lists(st.binary(min_size=10, max_size=10), min_size=1, max_size=20))
def test_a_frame_of_submissions_parses_back_to_them(boxes: list[bytes]) -> None:
    sent = [submit(f"c{i}", box) for i, box in enumerate(boxes)]
    raw = decode_frame(encode_frame(submit_many_frame(sent)), max_size=1 << 20)
    assert parse_submit_many(raw, LIMITS, max_count=20) == sent


def test_a_bad_submission_is_refused_alone() -> None:
    frame = submit_many_frame([submit("a"), submit("b"), submit("c")])
    elements = frame["submissions"]
    assert isinstance(elements, list)
    elements[1]["box"] = b"short"
    elements[2]["type"] = "batch"
    out = parse_submit_many(frame, LIMITS, max_count=8)
    assert out[0] == submit("a")
    assert isinstance(out[1], BadLength)
    assert isinstance(out[2], MalformedFrame)


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        ({"type": "submit-many"}, MalformedFrame),
        ({"type": "submit-many", "submissions": b"x"}, MalformedFrame),
        ({"type": "submit-many", "submissions": []}, WrongCount),
        ({"type": "submit-many", "submissions": [{}] * 5}, WrongCount),
        ({"type": "submit-many", "submissions": [1]}, MalformedFrame),
    ],
)
def test_a_bad_frame_is_refused_whole(frame: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        parse_submit_many(frame, LIMITS, max_count=4)


def test_receipts_are_checked_against_what_was_sent() -> None:
    sent = [submit("a"), submit("b")]
    accepted = {"type": "accepted", "round": 1, "client": "a"}
    refused = error_frame(DuplicateClient("again"))
    out = parse_receipts(receipts_frame([accepted, refused]), sent)
    assert out.results[0] is None
    assert isinstance(out.results[1], DuplicateClient)
    with pytest.raises(MalformedFrame, match="another submission"):
        parse_receipts(receipts_frame([accepted, accepted]), sent)
    with pytest.raises(MalformedFrame, match="2 results"):
        parse_receipts(receipts_frame([accepted]), sent)
    with pytest.raises(MalformedFrame):
        parse_receipts({"type": "accepted", "round": 1, "client": "a"}, sent)
    with pytest.raises(MalformedFrame):
        parse_receipts(receipts_frame([accepted, {"type": "round"}]), sent)
    with pytest.raises(ValueError):
        submit_many_frame([])


def test_the_limit_is_checked() -> None:
    assert Limits().max_submissions_per_frame == 256
    with pytest.raises(LimitsError, match="max_submissions_per_frame"):
        Limits(max_submissions_per_frame=0)
    with pytest.raises(LimitsError, match="max_submissions_per_frame"):
        Limits(max_submissions_per_frame=4097)


# --------------------------------------------------------------------------- a real chain


@contextlib.asynccontextmanager
async def chain_with_client(
    tmp_path: Path, *, mixes: int, messages: int, users: int, chunk_size: int, limits: Limits
) -> AsyncIterator[tuple[RunningChain, MixnetClient]]:
    """A real chain taking rounds of exactly ``users`` submissions, and a client of it."""
    policy = RoundPolicy(
        min_users=users, max_users=users, deadline_seconds=30.0, chunk_size=chunk_size
    )
    async with running_chain(
        tmp_path, mixes=mixes, messages=messages, policy=policy, limits=limits
    ) as chain:
        client = MixnetClient(
            chain.config, messages=messages, payload_length=WIDTH, sink_url=chain.config.sink.url
        )
        async with client:
            yield chain, client


async def test_each_submission_of_a_frame_is_decided_on_its_own(tmp_path: Path) -> None:
    """One frame: three good submissions, a box of the wrong length, a second box for a
    client already in it, and an exact repeat of the first. The good ones are stored and
    counted once; the others get their typed errors (the repeat its acknowledgement); the
    round's sum is exactly the good ones'."""
    limits = Limits(max_submissions_per_frame=8)
    async with chain_with_client(
        tmp_path, mixes=2, messages=2, users=4, chunk_size=4, limits=limits
    ) as (_, client):
        info = await client.current_round()
        r = info.round_id

        def box(values: list[int]) -> bytes:
            return client.wrap(payloads(values), info)

        good = [submit(f"u{i}", box([i, 10 * i]), r) for i in (1, 2, 3)]
        frame = [*good, submit("short", b"x" * 5, r), submit("u2", box([50, 50]), r), good[0]]
        link = client._entry[0]
        give_up = asyncio.get_running_loop().time() + 20
        out = await send_submissions(link, frame, give_up=give_up)
        assert out[:3] == [None, None, None]
        assert isinstance(out[3], BadLength)
        assert isinstance(out[4], DuplicateClient)
        assert out[5] is None  # an exact retry is acknowledged, not counted again
        # the round is still open for one more; a frame over the limit is refused whole
        too_many = [submit(f"v{i}", box([1, 1]), r) for i in range(9)]
        with pytest.raises(WrongCount):
            await send_submissions(link, too_many, give_up=give_up)
        last = await send_submissions(link, [submit("u4", box([4, 40]), r)], give_up=give_up)
        assert last == [None]
        done = await asyncio.wait_for(result(client, r), 30)
        late = await send_submissions(link, [submit("u5", box([5, 5]), r)], give_up=give_up)
        assert isinstance(late[0], RoundClosed | UnknownRound)
    assert done["status"] == "ok"
    assert done["clients"] == 4
    assert done["sum"] == sum(11 * i for i in (1, 2, 3, 4))


async def test_a_frame_that_fills_the_round_is_acknowledged_up_to_max_users(
    tmp_path: Path,
) -> None:
    """A round of at most three users and one frame of five fresh submissions: the first
    three are stored together and acknowledged, the two after the round closed are refused
    ``round-closed``, and the round's sum is exactly the three acknowledged ones'."""
    limits = Limits(max_submissions_per_frame=8)
    async with chain_with_client(
        tmp_path, mixes=2, messages=2, users=3, chunk_size=4, limits=limits
    ) as (_, client):
        info = await client.current_round()
        frame = [
            submit(f"u{i}", client.wrap(payloads([i, 100 * i]), info), info.round_id)
            for i in range(1, 6)
        ]
        give_up = asyncio.get_running_loop().time() + 20
        out = await send_submissions(client._entry[0], frame, give_up=give_up)
        assert out[:3] == [None, None, None]
        assert all(isinstance(e, RoundClosed) for e in out[3:])
        done = await asyncio.wait_for(result(client, info.round_id), 30)
    assert done["status"] == "ok" and done["clients"] == 3
    assert done["sum"] == sum(101 * i for i in (1, 2, 3))


async def test_the_entry_mix_takes_a_full_frame_and_only_the_entry_mix_does(
    tmp_path: Path,
) -> None:
    """A frame of ``max_submissions_per_frame`` boxes fits the entry mix's frame size; a
    later mix refuses ``submit-many`` like ``submit``."""
    limits = Limits(max_submissions_per_frame=16)
    async with chain_with_client(
        tmp_path, mixes=2, messages=3, users=16, chunk_size=8, limits=limits
    ) as (chain, client):
        info = await client.current_round()
        frame = [
            submit(f"u{i}", client.wrap(payloads([i, i, i]), info), info.round_id)
            for i in range(16)
        ]
        give_up = asyncio.get_running_loop().time() + 20
        out = await send_submissions(client._entry[0], frame, give_up=give_up)
        assert out == [None] * 16
        done = await asyncio.wait_for(result(client, info.round_id), 30)
        assert done["sum"] == 3 * sum(range(16))
        later = Link(chain.config.mixes[1].url, max_size=1 << 20, name="t", retry_for=5)
        try:
            with pytest.raises(UnexpectedFrameType):
                await later.request(submit_many_frame(frame[:1]), expect=RECEIPTS)
        finally:
            await later.close()


async def test_each_submission_of_a_frame_counts_toward_the_connection_limit(
    tmp_path: Path,
) -> None:
    """With ``max_submissions_per_connection = 4``, a frame of three and then a frame of two
    reach the limit: the connection is closed after the second reply (and the link opens a
    new one for the third frame)."""
    limits = Limits(max_submissions_per_connection=4)
    async with chain_with_client(
        tmp_path, mixes=1, messages=1, users=6, chunk_size=4, limits=limits
    ) as (chain, client):
        info = await client.current_round()
        frames = [
            [submit(f"u{i}", client.wrap(payloads([i]), info), info.round_id) for i in group]
            for group in ([1, 2, 3], [4], [5, 6])
        ]
        give_up = asyncio.get_running_loop().time() + 20
        link = client._entry[0]
        assert await send_submissions(link, frames[0], give_up=give_up) == [None] * 3
        assert refused(chain.mixes[0])["submissions"] == 0
        assert await send_submissions(link, frames[1], give_up=give_up) == [None]
        assert refused(chain.mixes[0])["submissions"] == 1
        assert await send_submissions(link, frames[2], give_up=give_up) == [None] * 2
        done = await asyncio.wait_for(result(client, info.round_id), 30)
    assert done["sum"] == 21 and done["clients"] == 6
