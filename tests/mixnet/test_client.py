"""Tests for mixnet.client against a fake entry mix that announces real signed round keys."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import AsyncIterator, Callable, Sequence

import pytest
from nacl.signing import SigningKey
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy
from mixnet.client import MixnetClient, ParameterMismatch, Receipt, RoundInfo
from mixnet.core import submission_digest
from mixnet.errors import (
    BadLength,
    BadSignature,
    DuplicateClient,
    InternalError,
    LinkClosed,
    MixnetError,
    RoundClosed,
    UnexpectedFrameType,
    UnknownRound,
    WrongCount,
)
from mixnet.frames import announcement_frame
from mixnet.keys import RoundKeyAnnouncement, RoundKeyring, announce_round_key
from mixnet.link import Backoff
from mixnet.onion import onion_length, peel_many, submission_length
from mixnet.wire import decode_frame, encode_frame, error_frame
from tests.mixnet.peeling import peel

CHAIN = "chain-test"
MESSAGES = 3
WIDTH = 8
MAX = 1 << 20
FAST = Backoff(base=0.005, cap=0.02)

Anns = list[RoundKeyAnnouncement]
Tamper = Callable[["FakeEntry", int, Anns], Anns]


def free_url() -> str:
    """A ws:// URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"ws://127.0.0.1:{port}"


class FakeEntry:
    """An entry mix of a two-mix chain, in-process: real round keys (one keyring and identity
    per mix), ``get-round`` and ``submit`` with exact-retry acknowledgement. Knobs:

    * ``tamper(entry, round, announcements)`` rewrites the announcements it sends;
    * ``drop_submits``: store the next N submissions, then drop the connection unanswered;
    * ``close_rounds``: answer the next N submissions ``round-closed`` and open a new round;
    * ``no_round``: answer the next N ``get-round`` with ``unknown-round``;
    * ``reject``: answer every submission with this error.
    """

    def __init__(self, mixes: int = 2) -> None:
        self.names = [f"mix{i}" for i in range(mixes)]
        self.identities = [SigningKey.generate() for _ in range(mixes)]
        self.keyrings = [RoundKeyring() for _ in range(mixes)]
        self.messages = MESSAGES
        self.payload_length = WIDTH
        self.round_id = 0
        self.tamper: Tamper | None = None
        self.drop_submits = 0
        self.close_rounds = 0
        self.no_round = 0
        self.reject: MixnetError | None = None
        self.fail_stores = 0
        self.get_rounds = 0
        self.submits: list[tuple[int, str, bytes]] = []
        self.accepted: dict[tuple[int, str], bytes] = {}
        self.payloads: dict[tuple[int, str], list[bytes]] = {}
        self.open_round()

    def open_round(self) -> None:
        self.round_id += 1
        for keyring in self.keyrings:
            keyring.open_round(self.round_id)

    def announcements(self, r: int) -> list[RoundKeyAnnouncement]:
        return [
            announce_round_key(
                identity, chain_id=CHAIN, node=name, round_id=r, public_key=ring.public_key(r)
            )
            for name, identity, ring in zip(self.names, self.identities, self.keyrings, strict=True)
        ]

    def round_frame(self) -> dict[str, object]:
        r = self.round_id
        anns = self.announcements(r)
        if self.tamper is not None:
            anns = self.tamper(self, r, anns)
        return {
            "type": "round",
            "round": r,
            "deadline": 1_900_000_000.5,
            "messages": self.messages,
            "payload_length": self.payload_length,
            "clients": len(self.accepted),
            "min_clients": 1,
            "max_clients": 100,
            "announcements": [announcement_frame(a) for a in anns],
        }

    def on_submit(self, frame: dict[str, object]) -> dict[str, object] | None:
        r, client, box = frame["round"], frame["client"], frame["box"]
        assert isinstance(r, int) and isinstance(client, str) and isinstance(box, bytes)
        digest = submission_digest(box)
        self.submits.append((r, client, digest))
        if self.reject is not None:
            return error_frame(self.reject)
        if self.fail_stores:
            self.fail_stores -= 1
            return error_frame(InternalError("the node could not store the submission"))
        if r != self.round_id:
            return error_frame(RoundClosed(f"round {r} is closed"))
        if self.close_rounds:
            self.close_rounds -= 1
            self.open_round()
            return error_frame(RoundClosed(f"round {r} is closed"))
        previous = self.accepted.get((r, client))
        if previous is not None and previous != digest:
            return error_frame(DuplicateClient(f"client {client!r} already submitted"))
        self.accepted[(r, client)] = digest
        self.payloads[(r, client)] = self.open_box(r, box)
        if self.drop_submits:
            self.drop_submits -= 1
            return None  # stored, but the acknowledgement is lost with the connection
        return {"type": "accepted", "round": r, "client": client}

    def open_box(self, r: int, box: bytes) -> list[bytes]:
        hops = len(self.keyrings)
        items = peel_many(
            [box], self.keyrings[0].secret(r), chain_id=CHAIN, round_id=r, hop_index=0,
            expected_length=submission_length(WIDTH, hops, self.messages), split=self.messages,
        )  # fmt: skip
        return [self.peel_rest(r, item) for item in items if isinstance(item, bytes)]

    def peel_rest(self, r: int, onion: bytes) -> bytes:
        hops = len(self.keyrings)
        for hop, ring in enumerate(self.keyrings[1:], start=1):
            onion = peel(
                onion,
                ring.secret(r),
                chain_id=CHAIN,
                round_id=r,
                hop_index=hop,
                expected_length=onion_length(WIDTH, hops - hop),
            )
        return onion

    async def handler(self, conn: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in conn:
                assert isinstance(raw, bytes)
                frame = decode_frame(raw, max_size=MAX)
                reply: dict[str, object] | None
                if frame["type"] == "get-round":
                    self.get_rounds += 1
                    if self.no_round:
                        self.no_round -= 1
                        reply = error_frame(UnknownRound("no round is open; try again"))
                    else:
                        reply = self.round_frame()
                elif frame["type"] == "submit":
                    reply = self.on_submit(frame)
                else:
                    reply = error_frame(UnexpectedFrameType(f"{frame['type']!r}"))
                if reply is None:
                    conn.transport.abort()
                    return
                await conn.send(encode_frame(reply))

    def config(self, url: str) -> ChainConfig:
        mixes = [
            NodeInfo(name, url if hop == 0 else f"ws://127.0.0.1:{hop}", identity.verify_key)
            for hop, (name, identity) in enumerate(zip(self.names, self.identities, strict=True))
        ]
        sink = NodeInfo("sink", "ws://127.0.0.1:999")
        policy = RoundPolicy(min_users=1, max_users=100, deadline_seconds=30.0)
        return ChainConfig(CHAIN, tuple(mixes), sink, policy)


@contextlib.asynccontextmanager
async def serving(handler: Callable[[ServerConnection], object]) -> AsyncIterator[str]:
    async with serve(handler, "127.0.0.1", 0, compression=None) as server:  # type: ignore[arg-type]
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def running(
    entry: FakeEntry, *, sink_url: str | None = None, **kwargs: object
) -> AsyncIterator[MixnetClient]:
    """A client of ``entry``'s chain (fast backoff unless given)."""
    options: dict[str, object] = {"backoff": FAST, "retry_for": 5.0, **kwargs}
    options.setdefault("messages", MESSAGES)
    options.setdefault("payload_length", WIDTH)
    async with serving(entry.handler) as url:
        client = MixnetClient(
            entry.config(url), sink_url=sink_url or free_url(), **options  # type: ignore[arg-type]
        )
        async with client:
            yield client


class Payloads:
    """``make_payloads`` that counts its calls and returns fresh random payloads each time."""

    def __init__(self) -> None:
        self.made: list[list[bytes]] = []

    def __call__(self) -> Sequence[bytes]:
        payloads = [secrets.token_bytes(WIDTH) for _ in range(MESSAGES)]
        self.made.append(payloads)
        return payloads


# ------------------------------------------------------------------ round discovery


async def test_genuine_announcements_are_accepted() -> None:
    entry = FakeEntry()
    async with running(entry) as client:
        info = await client.current_round()
        assert info == RoundInfo(
            1, 1_900_000_000.5, tuple(ring.public_key(1) for ring in entry.keyrings)
        )
        assert await client.current_round() is info  # cached
        entry.open_round()
        assert (await client.current_round(refresh=True)).round_id == 2
    assert entry.get_rounds == 2


def resigned(
    entry: FakeEntry, ann: RoundKeyAnnouncement, *, round_id: int, chain_id: str = CHAIN
) -> RoundKeyAnnouncement:
    """``ann`` signed again by its genuine signer, for ``round_id`` on ``chain_id``."""
    signer = entry.identities[entry.names.index(ann.node)]
    return announce_round_key(
        signer, chain_id=chain_id, node=ann.node, round_id=round_id, public_key=ann.public_key
    )


def wrong_signer(entry: FakeEntry, r: int, anns: Anns) -> Anns:
    forged = announce_round_key(
        SigningKey.generate(), chain_id=CHAIN, node="mix1", round_id=r, public_key=bytes(range(32))
    )
    return [anns[0], forged]


def wrong_round(entry: FakeEntry, r: int, anns: Anns) -> Anns:
    return [anns[0], resigned(entry, anns[1], round_id=r + 1)]


def wrong_chain(entry: FakeEntry, r: int, anns: Anns) -> Anns:
    return [anns[0], resigned(entry, anns[1], round_id=r, chain_id="another-chain")]


def wrong_order(entry: FakeEntry, r: int, anns: Anns) -> Anns:
    return anns[::-1]


def missing(entry: FakeEntry, r: int, anns: Anns) -> Anns:
    return anns[:1]


def extra(entry: FakeEntry, r: int, anns: Anns) -> Anns:
    return [*anns, anns[1]]


def swapped_keys(entry: FakeEntry, r: int, anns: Anns) -> Anns:
    first, second = anns
    return [
        RoundKeyAnnouncement(CHAIN, first.node, r, second.public_key, first.signature),
        RoundKeyAnnouncement(CHAIN, second.node, r, first.public_key, second.signature),
    ]


@pytest.mark.parametrize(
    "tamper",
    [wrong_signer, wrong_round, wrong_chain, wrong_order, missing, extra, swapped_keys],
    ids=lambda f: f.__name__,
)
async def test_announcements_that_are_off_raise_bad_signature(tamper: Tamper) -> None:
    entry = FakeEntry()
    entry.tamper = tamper
    make = Payloads()
    async with running(entry) as client:
        with pytest.raises(BadSignature):
            await client.current_round()
        with pytest.raises(BadSignature):
            await client.submit(make)
    assert entry.submits == [] and make.made == []  # nothing was encrypted to those keys


@pytest.mark.parametrize("field", ["messages", "payload_length"])
async def test_round_of_another_shape_raises_parameter_mismatch(field: str) -> None:
    entry = FakeEntry()
    setattr(entry, field, getattr(entry, field) + 1)
    async with running(entry) as client:
        with pytest.raises(ParameterMismatch) as info:
            await client.current_round()
    assert info.value.code == "parameter-mismatch"


# ------------------------------------------------------------------ submit


async def test_submit_wraps_payloads_that_the_mixes_peel() -> None:
    entry = FakeEntry()
    make = Payloads()
    async with running(entry) as client:
        receipt = await client.submit(make, client_id="alice")
    assert receipt == Receipt(1, "alice", entry.accepted[(1, "alice")])
    assert entry.payloads[(1, "alice")] == make.made[0]  # both layers peel, in chain order
    assert len(entry.submits) == 1


async def test_dropped_connection_resends_identical_onions() -> None:
    entry = FakeEntry()
    entry.drop_submits = 1
    make = Payloads()
    async with running(entry) as client:
        receipt = await client.submit(make)
    assert len(make.made) == 1  # not encoded again
    assert len(entry.submits) == 2
    (r1, c1, d1), (r2, c2, d2) = entry.submits
    assert (r1, c1, d1) == (r2, c2, d2)  # the same digest twice: an exact retry
    assert entry.accepted == {(1, receipt.client_id): d1}  # counted once
    assert receipt.digest == d1 and receipt.round_id == 1


async def test_a_failed_store_is_answered_by_resending_the_identical_submission() -> None:
    """``internal-error`` means the entry mix stored nothing: the client resends the same
    onions (no fresh encoding), and is counted once."""
    entry = FakeEntry()
    entry.fail_stores = 2
    make = Payloads()
    async with running(entry) as client:
        receipt = await client.submit(make)
    assert len(make.made) == 1
    assert len(entry.submits) == 3 and len({s for s in entry.submits}) == 1
    assert entry.accepted == {(1, receipt.client_id): entry.submits[0][2]}


async def test_a_store_failing_for_retry_for_seconds_gives_up() -> None:
    entry = FakeEntry()
    entry.fail_stores = 10**6
    async with running(entry, retry_for=0.2) as client:
        with pytest.raises(InternalError):
            await client.submit(Payloads())


async def test_round_closed_makes_fresh_payloads_for_the_next_round() -> None:
    entry = FakeEntry()
    entry.close_rounds = 1
    make = Payloads()
    async with running(entry) as client:
        receipt = await client.submit(make)
    assert len(make.made) == 2  # make_payloads called again for round 2
    assert [s[0] for s in entry.submits] == [1, 2]
    assert entry.submits[0][2] != entry.submits[1][2]
    assert receipt.round_id == 2 and entry.get_rounds == 2
    assert entry.payloads[(2, receipt.client_id)] == make.made[1]


async def test_concurrent_submissions_refresh_a_closed_round_once() -> None:
    entry = FakeEntry()
    entry.close_rounds = 1
    async with running(entry, connections=4) as client:
        receipts = await asyncio.gather(*(client.submit(Payloads()) for _ in range(6)))
    assert {r.round_id for r in receipts} == {2}
    assert len({r.client_id for r in receipts}) == 6
    assert entry.get_rounds == 2  # one discovery, one refresh, shared by all six


async def test_no_open_round_yet_is_retried() -> None:
    entry = FakeEntry()
    entry.no_round = 2
    async with running(entry) as client:
        receipt = await client.submit(Payloads())
    assert receipt.round_id == 1 and entry.get_rounds == 3


async def test_rounds_closing_for_retry_for_seconds_gives_up() -> None:
    entry = FakeEntry()
    entry.close_rounds = 10**6
    async with running(entry, retry_for=0.2) as client:
        with pytest.raises(RoundClosed):
            await client.submit(Payloads())
    assert len(entry.submits) >= 2


async def test_other_errors_are_reraised_as_is() -> None:
    entry = FakeEntry()
    entry.reject = DuplicateClient("client 'bob' already submitted")
    make = Payloads()
    async with running(entry) as client:
        with pytest.raises(DuplicateClient) as info:
            await client.submit(make, client_id="bob")
    assert info.value.code == "duplicate-client"
    assert len(entry.submits) == 1 and len(make.made) == 1  # not retried


async def test_wrong_payloads_are_refused_before_sending() -> None:
    entry = FakeEntry()
    async with running(entry) as client:
        with pytest.raises(WrongCount):
            await client.submit(lambda: [bytes(WIDTH)] * (MESSAGES - 1))
        with pytest.raises(BadLength):
            await client.submit(lambda: [bytes(WIDTH)] * (MESSAGES - 1) + [bytes(WIDTH + 1)])
    assert entry.submits == []


@pytest.mark.parametrize("bad", ["", "x" * 129, "tab\there", "nul\x00"])
async def test_client_ids_are_validated(bad: str) -> None:
    entry = FakeEntry()
    async with running(entry) as client:
        with pytest.raises(ValueError):
            await client.submit(Payloads(), client_id=bad)
        receipt = await client.submit(Payloads(), client_id="x" * 128)
        assert receipt.client_id == "x" * 128
        default = await client.submit(Payloads())
    assert len(default.client_id) == 32 and int(default.client_id, 16) >= 0


# ------------------------------------------------------------------ sink and lifecycle


async def test_sink_request_returns_the_sinks_reply() -> None:
    async def sink(conn: ServerConnection) -> None:
        async for raw in conn:
            assert isinstance(raw, bytes)
            frame = decode_frame(raw, max_size=MAX)
            if frame["round"] == 1:
                reply = {"type": "result", "round": 1, "status": "ok"}
            else:
                reply = error_frame(UnknownRound("no such round"))
            await conn.send(encode_frame(reply))

    entry = FakeEntry()
    async with serving(sink) as sink_url, running(entry, sink_url=sink_url) as client:
        reply = await client.sink_request({"type": "subscribe", "round": 1}, expect="result")
        assert reply["status"] == "ok"
        with pytest.raises(UnknownRound):
            await client.sink_request({"type": "subscribe", "round": 2})


async def test_closed_client_raises_link_closed() -> None:
    entry = FakeEntry()
    async with running(entry) as client:
        await client.current_round()
    await client.aclose()  # idempotent
    with pytest.raises(LinkClosed):
        await client.submit(Payloads())
    with pytest.raises(LinkClosed):
        await client.current_round(refresh=True)
    with pytest.raises(LinkClosed):
        await client.sink_request({"type": "status"})


def test_constructor_rejects_bad_arguments() -> None:
    entry = FakeEntry()
    config = entry.config("ws://127.0.0.1:9")
    for bad in ({"messages": 0}, {"payload_length": -1}, {"connections": 0}, {"retry_for": -1.0}):
        options: dict[str, object] = {
            "messages": MESSAGES, "payload_length": WIDTH, "sink_url": "ws://127.0.0.1:8", **bad
        }
        with pytest.raises(ValueError):
            MixnetClient(config, **options)  # type: ignore[arg-type]
