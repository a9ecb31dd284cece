"""Tests for mixnet.link: the one reconnecting request path, against real local servers."""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import secrets
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import trustme
from nacl.signing import SigningKey
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidMessage
from websockets.http11 import Request, Response

from mixnet.errors import (
    FrameTooLarge,
    LinkClosed,
    MalformedFrame,
    MixnetError,
    RoundClosed,
    Unauthorized,
    UnexpectedFrameType,
)
from mixnet.keys import CHALLENGE_LENGTH, verify_link_signature
from mixnet.link import (
    CONNECTION_ERRORS,
    Backoff,
    Link,
    challenge_response,
    failure_reason,
    system_uniform,
)
from mixnet.tls import TlsError, client_context
from mixnet.wire import WIRE_VERSION, decode_frame, encode_frame, error_frame

MAX = 1 << 16
FAST = Backoff(base=0.01, cap=0.05)

Handler = Callable[[ServerConnection], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(handler: Handler, **kwargs: object) -> AsyncIterator[str]:
    """Serve ``handler`` on 127.0.0.1 (a free port); yields the ws:// URL."""
    async with serve(handler, "127.0.0.1", 0, compression=None, **kwargs) as server:  # type: ignore[arg-type]
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}"


def free_url() -> str:
    """A ws:// URL on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"ws://127.0.0.1:{port}"


class Sleeps:
    """An injectable ``sleep`` that records the delays and only yields to the loop."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


def decode(raw: str | bytes) -> dict[str, object]:
    assert isinstance(raw, bytes)
    return decode_frame(raw, max_size=MAX)


def abort(conn: ServerConnection) -> None:
    """Drop the connection at once (as a crashing server would)."""
    conn.transport.abort()


# ------------------------------------------------------------------ backoff


def test_backoff_is_capped_exponential_times_rand() -> None:
    backoff = Backoff(base=0.1, cap=1.0)
    ceilings = [backoff.ceiling(k) for k in range(7)]
    assert ceilings == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    assert backoff.delay(2, rand=lambda: 0.5) == pytest.approx(0.2)
    assert backoff.delay(3, rand=lambda: 0.0) == 0.0
    assert backoff.delay(3, rand=lambda: 1.0) == pytest.approx(0.8)
    assert backoff.delay(10_000, rand=lambda: 1.0) == 1.0  # no overflow for huge attempts


def test_backoff_default_jitter_is_uniform_below_the_ceiling() -> None:
    backoff = Backoff(base=0.05, cap=1.0)
    samples = [backoff.delay(3) for _ in range(200)]
    assert all(0.0 <= s <= 0.4 for s in samples)
    assert len(set(samples)) > 190  # jittered, not a fixed schedule
    assert 0.1 < sum(samples) / len(samples) < 0.3  # mean of U[0, 0.4] is 0.2
    draws = [system_uniform() for _ in range(100)]
    assert all(0.0 <= u < 1.0 for u in draws)


@pytest.mark.parametrize(
    ("base", "cap"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0), (float("inf"), float("inf"))]
)
def test_backoff_rejects_bad_parameters(base: float, cap: float) -> None:
    with pytest.raises(ValueError):
        Backoff(base=base, cap=cap)


def test_backoff_rejects_negative_attempt_and_bad_rand() -> None:
    with pytest.raises(ValueError):
        Backoff().delay(-1)
    with pytest.raises(ValueError):
        Backoff().delay(0, rand=lambda: 1.5)


# ------------------------------------------------------------------ requests


async def test_request_returns_the_reply_over_one_connection() -> None:
    connections = 0

    async def handler(conn: ServerConnection) -> None:
        nonlocal connections
        connections += 1
        async for raw in conn:
            frame = decode(raw)
            await conn.send(encode_frame({"type": "pong", "n": frame["n"]}))

    async with serving(handler) as url:
        link = Link(url, max_size=MAX)
        try:
            for n in range(3):
                reply = await link.request({"type": "ping", "n": n}, expect="pong")
                assert reply["n"] == n
        finally:
            await link.close()
    assert connections == 1


async def test_dropped_connection_resends_the_identical_frame(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mixnet.link")
    received: list[bytes] = []

    async def handler(conn: ServerConnection) -> None:
        async for raw in conn:
            assert isinstance(raw, bytes)
            received.append(raw)
            if len(received) == 1:
                abort(conn)  # the request is lost mid-flight: no reply
                return
            await conn.send(encode_frame({"type": "done", "size": len(raw)}))

    sleeps = Sleeps()
    async with serving(handler) as url:
        link = Link(url, max_size=MAX, name="mix1", sleep=sleeps, backoff=FAST)
        frame = {"type": "batch", "payloads": [secrets.token_bytes(100) for _ in range(3)]}
        reply = await link.request(frame, expect="done")
        await link.close()
    assert len(received) == 2
    assert received[0] == received[1]  # the same bytes, not a re-encoding with fresh data
    assert reply == {"v": WIRE_VERSION, "type": "done", "size": len(received[0])}
    assert len(sleeps.delays) == 1 and 0 <= sleeps.delays[0] <= FAST.ceiling(0)
    failures = [r for r in caplog.records if r.name == "mixnet.link"]
    assert len(failures) == 1
    assert failures[0].levelno == logging.INFO
    assert url in failures[0].getMessage() and "mix1" in failures[0].getMessage()


async def test_a_silent_peer_is_treated_as_a_lost_connection_after_the_reply_timeout() -> None:
    """A peer that takes a request and never answers (a link that died silently) does not
    hold the request forever: after ``reply_timeout`` the link reconnects and resends."""
    received: list[bytes] = []

    async def handler(conn: ServerConnection) -> None:
        async for raw in conn:
            assert isinstance(raw, bytes)
            received.append(raw)
            if len(received) == 1:
                continue  # swallow the first copy: no reply, connection kept open
            await conn.send(encode_frame({"type": "done"}))

    async with serving(handler) as url:
        link = Link(url, max_size=MAX, reply_timeout=0.2, backoff=FAST, sleep=Sleeps())
        try:
            reply = await asyncio.wait_for(link.request({"type": "batch"}, expect="done"), 5)
        finally:
            await link.close()
    assert reply["type"] == "done"
    assert len(received) == 2 and received[0] == received[1]
    with pytest.raises(ValueError, match="reply_timeout"):
        Link("ws://127.0.0.1:1", max_size=MAX, reply_timeout=0)


async def test_retry_delays_follow_the_backoff() -> None:
    attempts = 0

    async def handler(conn: ServerConnection) -> None:
        nonlocal attempts
        attempts += 1
        if attempts <= 5:
            abort(conn)
            return
        async for _raw in conn:
            await conn.send(encode_frame({"type": "ok"}))

    sleeps = Sleeps()
    backoff = Backoff(base=0.01, cap=0.04)
    async with serving(handler) as url:
        link = Link(url, max_size=MAX, sleep=sleeps, backoff=backoff)
        await link.request({"type": "x"}, expect="ok")
        await link.close()
    assert len(sleeps.delays) == 5
    for k, delay in enumerate(sleeps.delays):
        assert 0 <= delay <= backoff.ceiling(k)
    assert backoff.ceiling(4) == 0.04  # the cap is reached


async def test_refused_handshake_is_retried() -> None:
    calls = 0

    def process_request(conn: ServerConnection, request: Request) -> Response | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            return conn.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "starting\n")
        return None

    async def handler(conn: ServerConnection) -> None:
        async for _raw in conn:
            await conn.send(encode_frame({"type": "ok"}))

    sleeps = Sleeps()
    async with serving(handler, process_request=process_request) as url:
        link = Link(url, max_size=MAX, sleep=sleeps, backoff=FAST)
        assert (await link.request({"type": "x"}))["type"] == "ok"
        await link.close()
    assert calls == 2 and len(sleeps.delays) == 1


async def test_error_frame_raises_the_typed_error_without_retry() -> None:
    frames: list[dict[str, object]] = []
    connections = 0

    async def handler(conn: ServerConnection) -> None:
        nonlocal connections
        connections += 1
        async for raw in conn:
            frames.append(decode(raw))
            if len(frames) == 1:
                await conn.send(encode_frame(error_frame(RoundClosed("round 7 is closed"))))
            elif len(frames) == 2:
                reply = {"type": "error", "code": "some-new-code", "reason": "later version"}
                await conn.send(encode_frame(reply))
            else:
                await conn.send(encode_frame({"type": "ok"}))

    sleeps = Sleeps()
    async with serving(handler) as url:
        link = Link(url, max_size=MAX, sleep=sleeps)
        with pytest.raises(RoundClosed, match="round 7 is closed"):
            await link.request({"type": "submit"}, expect="accepted")
        with pytest.raises(MixnetError) as info:
            await link.request({"type": "submit"}, expect="accepted")
        assert info.value.code == "some-new-code"
        assert (await link.request({"type": "status"}, expect="ok"))["type"] == "ok"
        await link.close()
    assert len(frames) == 3  # each sent once
    assert sleeps.delays == [] and connections == 1  # no retry, the connection stays usable


async def test_text_frame_and_unexpected_type_are_typed_errors() -> None:
    async def handler(conn: ServerConnection) -> None:
        async for raw in conn:
            kind = decode(raw)["type"]
            if kind == "text":
                await conn.send("not msgpack")
            else:
                await conn.send(encode_frame({"type": "surprise"}))

    async with serving(handler) as url:
        link = Link(url, max_size=MAX)
        with pytest.raises(MalformedFrame):
            await link.request({"type": "text"})
        with pytest.raises(UnexpectedFrameType, match="surprise"):
            await link.request({"type": "x"}, expect="ok")
        with pytest.raises(UnexpectedFrameType):
            await link.request({"type": "x"}, expect=("ok", "pending"))
        assert (await link.request({"type": "x"}, expect={"surprise", "ok"}))["type"] == "surprise"
        assert (await link.request({"type": "x"}))["type"] == "surprise"  # expect=None: any
        await link.close()


async def test_oversized_reply_raises_frame_too_large_without_retry() -> None:
    frames = 0

    async def handler(conn: ServerConnection) -> None:
        nonlocal frames
        with contextlib.suppress(ConnectionClosed):
            async for _raw in conn:
                frames += 1
                await conn.send(encode_frame({"type": "big", "blob": bytes(2 * MAX)}))

    sleeps = Sleeps()
    async with serving(handler) as url:
        link = Link(url, max_size=MAX, sleep=sleeps)  # would otherwise retry forever
        with pytest.raises(FrameTooLarge):
            await asyncio.wait_for(link.request({"type": "x"}), timeout=1)
        await link.close()
    assert frames == 1 and sleeps.delays == []


async def test_retry_for_gives_up_with_the_connection_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mixnet.link")
    url = free_url()
    link = Link(url, max_size=MAX, retry_for=0.3, backoff=FAST)
    started = time.monotonic()
    with pytest.raises(OSError):
        await link.request({"type": "get-round"})
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 1.5
    messages = [r.getMessage() for r in caplog.records if r.name == "mixnet.link"]
    assert len(messages) >= 3  # one line per failed attempt
    assert all(url in m for m in messages)
    assert "giving up" in messages[-1] and all("retrying" in m for m in messages[:-1])
    await link.close()


async def test_retry_for_zero_fails_on_the_first_error() -> None:
    sleeps = Sleeps()
    link = Link(free_url(), max_size=MAX, retry_for=0, sleep=sleeps)
    with pytest.raises(OSError):
        await link.request({"type": "x"})
    assert sleeps.delays == []


# ------------------------------------------------------------------ authentication


class AuthServer:
    """A successor that demands the link challenge before it serves ``work`` frames; it
    drops the connection on the first ``work`` frame it receives."""

    def __init__(self, identity: SigningKey, *, chain_id: str, node: str) -> None:
        self.identity = identity.verify_key
        self.chain_id = chain_id
        self.node = node
        self.nonces: list[bytes] = []
        self.authenticated = 0
        self.work: list[tuple[bool, bytes]] = []

    async def handler(self, conn: ServerConnection) -> None:
        nonce: bytes | None = None
        authenticated = False
        async for raw in conn:
            frame = decode(raw)
            try:
                reply = self.answer(frame, nonce, authenticated)
            except MixnetError as exc:
                await conn.send(encode_frame(error_frame(exc)))
                continue
            if reply["type"] == "challenge":
                nonce = reply["nonce"]  # type: ignore[assignment]
            elif reply["type"] == "authenticated":
                authenticated = True
            elif len(self.work) == 1:
                abort(conn)
                return
            await conn.send(encode_frame(reply))

    def answer(
        self, frame: dict[str, object], nonce: bytes | None, authenticated: bool
    ) -> dict[str, object]:
        if frame["type"] == "challenge":
            fresh = secrets.token_bytes(CHALLENGE_LENGTH)
            self.nonces.append(fresh)
            return {"type": "challenge", "nonce": fresh}
        if frame["type"] == "authenticate":
            if nonce is None or frame["node"] != self.node:
                raise Unauthorized("not the predecessor")
            signature = frame["signature"]
            assert isinstance(signature, bytes)
            verify_link_signature(
                self.identity, signature, chain_id=self.chain_id, node=self.node, challenge=nonce
            )
            self.authenticated += 1
            return {"type": "authenticated", "node": self.node}
        if not authenticated:
            raise Unauthorized("authenticate first")
        payload = frame["payload"]
        assert isinstance(payload, bytes)
        self.work.append((authenticated, payload))
        return {"type": "work-ack"}


async def test_authentication_reruns_on_every_new_connection() -> None:
    identity = SigningKey.generate()
    server = AuthServer(identity, chain_id="chain-1", node="mix1")
    sleeps = Sleeps()
    async with serving(server.handler) as url:
        link = Link(
            url,
            max_size=MAX,
            name="mix1",
            authenticate=challenge_response(identity, chain_id="chain-1", node="mix1"),
            sleep=sleeps,
            backoff=FAST,
        )
        await link.request({"type": "work", "payload": b"chunk-0"}, expect="work-ack")
        await link.request({"type": "work", "payload": b"chunk-1"}, expect="work-ack")
        await link.close()
    assert server.authenticated == 2  # once per connection
    assert len(set(server.nonces)) == 2
    assert server.work == [(True, b"chunk-0"), (True, b"chunk-0"), (True, b"chunk-1")]
    assert len(sleeps.delays) == 1


@pytest.mark.parametrize(
    ("signer_is_right", "node"), [(False, "mix1"), (True, "mix2")], ids=["wrong-key", "wrong-node"]
)
async def test_refused_authentication_is_raised_not_retried(
    signer_is_right: bool, node: str
) -> None:
    identity = SigningKey.generate()
    server = AuthServer(identity, chain_id="chain-1", node="mix1")
    signer = identity if signer_is_right else SigningKey.generate()
    sleeps = Sleeps()
    async with serving(server.handler) as url:
        link = Link(
            url,
            max_size=MAX,
            authenticate=challenge_response(signer, chain_id="chain-1", node=node),
            sleep=sleeps,
        )
        with pytest.raises(MixnetError) as info:
            await link.request({"type": "work", "payload": b"x"})
        await link.close()
    assert info.value.code in ("bad-signature", "unauthorized")
    assert sleeps.delays == [] and server.work == [] and len(server.nonces) == 1


# ------------------------------------------------------------------ close and cancel


async def test_closed_link_raises_link_closed() -> None:
    async def handler(conn: ServerConnection) -> None:
        async for _raw in conn:
            await conn.send(encode_frame({"type": "ok"}))

    async with serving(handler) as url:
        link = Link(url, max_size=MAX)
        await link.request({"type": "x"})
        await link.close()
        await link.close()  # idempotent
        assert link.closed
        with pytest.raises(LinkClosed) as info:
            await link.request({"type": "x"})
    assert info.value.code == "link-closed"


async def test_close_ends_a_request_that_retries_forever() -> None:
    sleeps = Sleeps()
    link = Link(free_url(), max_size=MAX, sleep=sleeps)  # retry_for=None: forever
    task = asyncio.create_task(link.request({"type": "batch"}))
    while len(sleeps.delays) < 3:
        await asyncio.sleep(0.005)
    await link.close()
    with pytest.raises(LinkClosed):
        await asyncio.wait_for(task, timeout=1)


async def test_close_ends_a_request_waiting_for_its_reply() -> None:
    got_frame = asyncio.Event()

    async def handler(conn: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for _raw in conn:
                got_frame.set()  # never answers

    async with serving(handler) as url:
        link = Link(url, max_size=MAX)
        task = asyncio.create_task(link.request({"type": "open-round"}))
        await asyncio.wait_for(got_frame.wait(), timeout=1)
        await link.close()
        with pytest.raises(LinkClosed):
            await asyncio.wait_for(task, timeout=1)


async def test_cancelled_request_never_takes_a_late_reply_for_the_next_one() -> None:
    async def handler(conn: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in conn:
                n = decode(raw)["n"]
                if n == 1:
                    await asyncio.sleep(0.2)
                await conn.send(encode_frame({"type": "echo", "n": n}))

    async with serving(handler) as url:
        link = Link(url, max_size=MAX)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(link.request({"type": "echo", "n": 1}), timeout=0.05)
        await asyncio.sleep(0.3)  # the late reply to n=1 would be waiting by now
        reply = await link.request({"type": "echo", "n": 2}, expect="echo")
        await link.close()
    assert reply["n"] == 2


def test_link_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        Link("ws://127.0.0.1:1", max_size=0)
    with pytest.raises(ValueError):
        Link("ws://127.0.0.1:1", max_size=MAX, retry_for=-1)
    with pytest.raises(ValueError):
        Link("ws://127.0.0.1:1", max_size=MAX, open_timeout=0)


# ------------------------------------------------------------------ reasons, idle closes, TLS


def test_failure_reasons_name_the_error_and_its_causes() -> None:
    assert failure_reason(ConnectionResetError()) == (
        "ConnectionResetError: connection reset by peer"
    )
    assert failure_reason(ConnectionRefusedError(111, "Connection refused")) == (
        "ConnectionRefusedError: [Errno 111] Connection refused"
    )
    try:
        try:
            raise EOFError("connection closed while reading HTTP status line")
        except EOFError as inner:
            raise InvalidMessage("did not receive a valid HTTP response") from inner
    except InvalidMessage as outer:
        assert failure_reason(outer) == (
            "InvalidMessage: did not receive a valid HTTP response <- "
            "EOFError: connection closed while reading HTTP status line"
        )
    assert failure_reason(TimeoutError()) == "TimeoutError"


async def test_a_connection_the_peer_closed_while_idle_is_replaced_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A node closes idle connections (and those at their submission limit) normally: the
    next request opens a new connection at once, with no backoff and no INFO line."""
    caplog.set_level(logging.DEBUG, logger="mixnet.link")
    connections = 0

    async def handler(conn: ServerConnection) -> None:
        nonlocal connections
        connections += 1
        raw = await conn.recv()
        await conn.send(encode_frame({"type": "pong", "n": decode(raw)["n"]}))
        await conn.close(1001, "idle")

    sleeps = Sleeps()
    async with serving(handler) as url:
        link = Link(url, max_size=MAX, sleep=sleeps, backoff=FAST)
        try:
            for n in range(3):
                assert (await link.request({"type": "ping", "n": n}))["n"] == n
                await asyncio.sleep(0.05)  # the close arrives while the link is idle
        finally:
            await link.close()
    assert connections == 3 and sleeps.delays == []
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]


def _pki(tmp_path: Path) -> tuple[ssl.SSLContext, Path, Path]:
    """A server context for 127.0.0.1, the CA that signed it, and another CA."""
    ca, other = trustme.CA(), trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    other.cert_pem.write_to_path(str(tmp_path / "other.pem"))
    return server, tmp_path / "ca.pem", tmp_path / "other.pem"


async def pong(conn: ServerConnection) -> None:
    async for raw in conn:
        await conn.send(encode_frame({"type": "pong", "n": decode(raw)["n"]}))


async def test_wss_with_the_chain_ca_and_a_clear_error_without_it(tmp_path: Path) -> None:
    server, ca, other = _pki(tmp_path)
    async with serving(pong, ssl=server) as ws_url:
        url = ws_url.replace("ws://", "wss://")
        trusted = Link(url, max_size=MAX, retry_for=5, ssl_context=client_context(ca))
        try:
            assert (await trusted.request({"type": "ping", "n": 1}))["n"] == 1
        finally:
            await trusted.close()
        # a client (retry_for set) fails at once with a TlsError naming the problem
        untrusted = Link(url, max_size=MAX, retry_for=30, ssl_context=client_context(other))
        started = time.monotonic()
        with pytest.raises(TlsError) as info:
            await untrusted.request({"type": "ping", "n": 2})
        assert time.monotonic() - started < 5
        assert str(info.value) == (
            f"{url}: the node's TLS certificate is not trusted: unable to get local issuer "
            "certificate (is [tls].ca in the chain file the CA that signed it?)"
        )
        await untrusted.close()


async def test_a_node_link_keeps_retrying_a_tls_failure_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mixnet.link")
    server, _, other = _pki(tmp_path)
    sleeps = Sleeps()
    async with serving(pong, ssl=server) as ws_url:
        url = ws_url.replace("ws://", "wss://")
        link = Link(url, max_size=MAX, name="mix1", sleep=sleeps, backoff=FAST,
                    ssl_context=client_context(other))
        task = asyncio.create_task(link.request({"type": "ping", "n": 1}))
        while len(sleeps.delays) < 2:
            await asyncio.sleep(0.01)
        await link.close()
        with pytest.raises(LinkClosed):
            await task
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) >= 2
    assert f"mix1: ping to {url} failed ({url}: the node's TLS certificate is not trusted" in (
        warnings[0]
    )


async def test_tls_to_a_plain_node_and_plain_to_a_tls_node_log_their_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mixnet.link")
    server, ca, _ = _pki(tmp_path)
    async with serving(pong) as plain_url, serving(pong, ssl=server) as tls_url:
        for url, context in [
            (plain_url.replace("ws://", "wss://"), client_context(ca)),  # wss to a ws node
            (tls_url, None),  # ws to a wss node
        ]:
            link = Link(url, max_size=MAX, retry_for=0, ssl_context=context)
            with pytest.raises((TlsError, *CONNECTION_ERRORS)):
                await link.request({"type": "ping", "n": 1})
            await link.close()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    for message in messages:
        reason = message.split(" failed (", 1)[1]
        assert not reason.startswith(")")  # never the empty reason of old
    assert "(a wss:// URL: does the node serve TLS?)" in messages[0]
    assert "InvalidMessage: did not receive a valid HTTP response <- " in messages[1]
