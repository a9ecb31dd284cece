"""The one outbound request path of the mixnet: a websocket that reconnects and resends.

A :class:`Link` carries request/reply exchanges to one websocket endpoint: node → successor
(the forward link, retried until acknowledged) and client → entry mix or sink (retried for a
bounded time). One request is in flight per link; every request frame is answered by exactly
one reply frame (``docs/protocol.md``).

Retry contract of :meth:`Link.request`:

* a *connection* failure (``OSError``, ``ConnectionClosed``, ``InvalidHandshake``,
  ``TimeoutError``) closes the connection, waits a capped, jittered backoff
  (:class:`Backoff`), reconnects, re-runs the link's ``authenticate`` step on the new
  connection and resends the *identical* frame bytes — so receivers must treat an exact
  resend as a retry (they do: ``accepted`` and ``batch-ack`` are idempotent);
* an error frame from the peer raises the matching :class:`~mixnet.errors.MixnetError`
  (:func:`mixnet.wire.raise_for_error`) and is never retried;
* a request cancelled between sending and receiving aborts the connection, so that a late
  reply can never be taken as the answer to the next request;
* a connection the peer closed normally while it was idle (a node closes idle connections
  and connections at their submission limit, :mod:`mixnet.limits`) is replaced at once,
  without a backoff and logged at DEBUG only;
* over ``wss://`` a TLS failure (an untrusted certificate, a peer that does not speak TLS)
  is raised at once as :class:`~mixnet.tls.TlsError` by a link with ``retry_for`` (a
  client: retrying cannot fix the configuration); a node's link logs it at WARNING and
  keeps retrying (the successor may be fixed meanwhile).

Every failure is logged with its reason: the exception's type and message and those of its
causes (``InvalidMessage: did not receive a valid HTTP response <- EOFError: ...``).

Jitter comes from :mod:`secrets` (the OS CSPRNG); this project never uses :mod:`random`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import ssl
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass

from nacl.signing import SigningKey
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidHandshake
from websockets.frames import CloseCode
from websockets.protocol import State

from mixnet.errors import (
    FrameTooLarge,
    LinkClosed,
    MalformedFrame,
    UnexpectedFrameType,
    clean_reason,
)
from mixnet.keys import CHALLENGE_LENGTH, sign_link_challenge
from mixnet.tls import is_tls_url, tls_failure
from mixnet.wire import decode_frame, encode_frame, get_bytes, raise_for_error

__all__ = [
    "CONNECTION_ERRORS",
    "Backoff",
    "Exchange",
    "Link",
    "challenge_response",
    "failure_reason",
    "system_uniform",
]

#: Failures of the connection itself; a :class:`Link` retries these (and only these).
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ConnectionClosed,
    InvalidHandshake,
    TimeoutError,
)

#: ``(frame, expected reply type) -> reply`` over one connection: what an ``authenticate``
#: step gets. Error frames raise their :class:`~mixnet.errors.MixnetError`; a reply of
#: another type raises :class:`~mixnet.errors.UnexpectedFrameType`.
Exchange = Callable[[Mapping[str, object], str], Awaitable[dict[str, object]]]

_LOG = logging.getLogger("mixnet.link")
#: Seconds a closing handshake may take before the connection is simply dropped.
CLOSE_TIMEOUT = 1.0
#: Causes followed by :func:`failure_reason`.
_MAX_CAUSES = 3
#: Exponents above this cannot change a capped delay (2.0 ** 1024 would overflow).
_MAX_EXPONENT = 1000


def failure_reason(exc: BaseException) -> str:
    """One line saying why a connection failed: ``Type: message`` of ``exc`` and of up to
    three causes, joined by `` <- `` (an exception without a message shows its type, or
    its ``strerror``), e.g. ``InvalidMessage: did not receive a valid HTTP response <-
    EOFError: connection closed while reading HTTP status line``. Cleaned to one printable
    line (:func:`~mixnet.errors.clean_reason`)."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(parts) <= _MAX_CAUSES:
        seen.add(id(current))
        text = str(current)
        if not text and isinstance(current, OSError) and current.strerror:
            text = current.strerror
        name = type(current).__name__
        if isinstance(current, ConnectionResetError) and not text:
            text = "connection reset by peer"
        parts.append(f"{name}: {text}" if text else name)
        current = current.__cause__ or current.__context__
    return clean_reason(" <- ".join(parts))


def system_uniform() -> float:
    """A uniform float in [0, 1) with 53 random bits from the OS CSPRNG (:mod:`secrets`)."""
    return secrets.randbits(53) / (1 << 53)


@dataclass(frozen=True)
class Backoff:
    """Capped, jittered exponential backoff: attempt k waits a uniform time in
    [0, min(cap, base·2^k)] ("full jitter"). ``base`` and ``cap`` are seconds.

    Construction raises ``ValueError`` unless ``0 < base <= cap`` and both are finite.
    """

    base: float = 0.05
    cap: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.base) and math.isfinite(self.cap)):
            raise ValueError("backoff base and cap must be finite")
        if not 0 < self.base <= self.cap:
            raise ValueError(f"need 0 < base <= cap, got base={self.base}, cap={self.cap}")

    def ceiling(self, attempt: int) -> float:
        """The longest wait, in seconds, before retry number ``attempt`` (0-based)."""
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {attempt}")
        return min(self.cap, self.base * 2.0 ** min(attempt, _MAX_EXPONENT))

    def delay(self, attempt: int, rand: Callable[[], float] = system_uniform) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based): ``rand()`` times
        :meth:`ceiling`. ``rand`` must return a float in [0, 1] (else ``ValueError``); the
        default draws from the OS CSPRNG. Raises ``ValueError`` for a negative ``attempt``."""
        ceiling = self.ceiling(attempt)
        u = rand()
        if not 0.0 <= u <= 1.0:
            raise ValueError(f"rand() must return a number in [0, 1], got {u!r}")
        return u * ceiling


def _expected_types(expect: str | Collection[str] | None) -> frozenset[str] | None:
    if expect is None:
        return None
    if isinstance(expect, str):
        return frozenset((expect,))
    types = frozenset(expect)
    if not types or not all(isinstance(t, str) for t in types):
        raise TypeError("expect must be a str, a non-empty collection of str, or None")
    return types


class Link:
    """A reconnecting websocket to ``url`` carrying one request/reply at a time.

    ``max_size`` bounds every received frame in bytes (websocket layer and
    :func:`~mixnet.wire.decode_frame`). ``authenticate`` runs on every new connection before
    the first request on it (see :func:`challenge_response`); its connection failures are
    retried like any other, a :class:`~mixnet.errors.MixnetError` it raises is not.
    ``retry_for`` is ``None`` to retry connection failures forever (node links) or a number
    of seconds after which the next failure is re-raised (clients). ``backoff`` spaces the
    retries, ``open_timeout`` (seconds) bounds each connection attempt, ``reply_timeout``
    (seconds, or ``None`` for no bound) bounds the wait for a reply — a peer that stays
    silent longer is treated as a lost connection (reconnect, resend) — ``sleep`` is the
    awaitable used to wait (tests inject one). ``ssl_context`` is the TLS client context of
    a ``wss://`` URL (``None``: the system's default CAs; ignored for ``ws://``). Nothing
    connects before the first request.
    """

    def __init__(
        self,
        url: str,
        *,
        max_size: int,
        name: str = "link",
        authenticate: Callable[[Exchange], Awaitable[None]] | None = None,
        retry_for: float | None = None,
        backoff: Backoff = Backoff(),  # frozen: one shared default is safe
        open_timeout: float = 10.0,
        reply_timeout: float | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        logger: logging.Logger | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be positive, got {max_size}")
        if retry_for is not None and not (math.isfinite(retry_for) and retry_for >= 0):
            raise ValueError(f"retry_for must be None or a finite number >= 0, got {retry_for}")
        if not (math.isfinite(open_timeout) and open_timeout > 0):
            raise ValueError(f"open_timeout must be a finite number > 0, got {open_timeout}")
        self.url = url
        self.max_size = max_size
        self.name = name
        self.retry_for = retry_for
        self.backoff = backoff
        self.open_timeout = open_timeout
        if reply_timeout is not None and not (math.isfinite(reply_timeout) and reply_timeout > 0):
            raise ValueError(f"reply_timeout must be None or a number > 0, got {reply_timeout}")
        self.reply_timeout = reply_timeout
        self.ssl_context = ssl_context if is_tls_url(url) else None
        self._authenticate = authenticate
        self._sleep = sleep
        self._log = logger if logger is not None else _LOG
        self._conn: ClientConnection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    async def request(
        self, frame: Mapping[str, object], *, expect: str | Collection[str] | None = None
    ) -> dict[str, object]:
        """Send ``frame`` and return the peer's reply.

        One request at a time per link (later callers wait for a lock). Connection
        failures (``OSError``, ``ConnectionClosed``, ``InvalidHandshake``, ``TimeoutError``)
        are logged once each at INFO with the URL and retried after :attr:`backoff`,
        reconnecting and re-authenticating, and resending the identical frame bytes; with
        ``retry_for`` set, the first failure ``retry_for`` seconds or more after the request
        took the lock is re-raised.

        ``expect`` is the acceptable reply type(s) (``None``: any).

        :raises MixnetError: the peer answered with an error frame (its subclass by code);
            not retried, and the connection stays usable.
        :raises MalformedFrame: the reply is a text frame or not a valid frame.
        :raises FrameTooLarge: the reply is over ``max_size`` bytes (not retried).
        :raises UnexpectedFrameType: the reply's type is not in ``expect``.
        :raises LinkClosed: the link is closed, or was closed while the request waited.
        :raises TypeError, ValueError: ``frame`` cannot be encoded (before anything is sent).
        """
        expected = _expected_types(expect)
        data = encode_frame(frame)  # encoded once: every resend carries the same bytes
        kind = str(frame.get("type"))
        async with self._lock:
            loop = asyncio.get_running_loop()
            give_up = None if self.retry_for is None else loop.time() + self.retry_for
            attempt = 0
            replaced = False  # a normally closed idle connection was replaced already
            while True:
                self._check_open()
                reused = self._conn is not None
                conn = None
                try:
                    conn = await self._connection()
                    raw = await self._send_recv(conn, data)
                except CONNECTION_ERRORS as exc:
                    await self._drop()
                    self._check_open()
                    if _reply_too_large(exc):  # the same request would get the same reply
                        raise FrameTooLarge(
                            f"{self.url} sent a reply over {self.max_size} bytes"
                        ) from exc
                    reason = failure_reason(exc)
                    if (
                        conn is None  # while connecting
                        and is_tls_url(self.url)
                        and isinstance(exc, ConnectionResetError | EOFError)
                    ):  # what a plain ws:// node answers to a TLS client hello
                        reason += " (a wss:// URL: does the node serve TLS?)"
                    if reused and not replaced and isinstance(exc, ConnectionClosedOK):
                        # the peer closed a connection we kept (idle, or at its limit)
                        replaced = True
                        self._log.debug(
                            "%s: %s to %s: connection closed by the peer (%s); reconnecting",
                            self.name, kind, self.url, reason,
                        )
                        continue
                    tls = tls_failure(self.url, exc)
                    if tls is not None and self.retry_for is not None:
                        self._log.info("%s: %s to %s failed (%s)", self.name, kind, self.url,
                                       reason)
                        raise tls from exc
                    now = loop.time()
                    if give_up is not None and now >= give_up:
                        self._log.info(
                            "%s: %s to %s failed (%s); giving up after %.1f s",
                            self.name, kind, self.url, reason, self.retry_for,
                        )
                        raise
                    delay = self.backoff.delay(attempt)
                    if give_up is not None:
                        delay = min(delay, give_up - now)
                    self._log.log(
                        logging.WARNING if tls is not None else logging.INFO,
                        "%s: %s to %s failed (%s); retrying in %.2f s",
                        self.name, kind, self.url, reason if tls is None else tls.reason, delay,
                    )
                    attempt += 1
                    await self._sleep(delay)
                    continue
                return self._reply(raw, expected)

    async def close(self) -> None:
        """Close the connection and refuse further requests (:class:`LinkClosed`).

        Idempotent. A request in progress ends with :class:`LinkClosed` at its next step.
        """
        self._closed = True
        await self._drop()

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise LinkClosed(f"{self.name}: the link to {self.url} is closed")

    async def _connection(self) -> ClientConnection:
        conn = self._conn
        if conn is not None and conn.protocol.state is not State.OPEN:
            self._conn = None  # closed by the peer while idle: open a new one
            await _close_quietly(conn)
            conn = None
        if conn is None:
            conn = await self._open()
            if self._closed:  # closed while connecting: do not keep the new socket
                await _close_quietly(conn)
                self._check_open()
            self._conn = conn
        return conn

    async def _open(self) -> ClientConnection:
        conn = await connect(
            self.url,
            compression=None,
            max_size=self.max_size,
            open_timeout=self.open_timeout,
            close_timeout=CLOSE_TIMEOUT,
            proxy=None,
            ssl=self.ssl_context,
        )
        if self._authenticate is None:
            return conn

        async def exchange(frame: Mapping[str, object], expect: str) -> dict[str, object]:
            raw = await self._send_recv(conn, encode_frame(frame))
            return self._reply(raw, frozenset((expect,)))

        try:
            await self._authenticate(exchange)
        except BaseException:
            await _close_quietly(conn)
            raise
        return conn

    async def _send_recv(self, conn: ClientConnection, data: bytes) -> str | bytes:
        try:
            await conn.send(data)
            if self.reply_timeout is None:
                return await conn.recv()
            return await asyncio.wait_for(conn.recv(), self.reply_timeout)
        except CONNECTION_ERRORS:
            raise
        except BaseException:
            # Cancelled (or worse) between send and reply: the reply may still arrive and
            # would be read as the answer to the next request. Never reuse this connection.
            if self._conn is conn:
                self._conn = None
            with contextlib.suppress(Exception):
                conn.transport.abort()
            raise

    def _reply(self, raw: str | bytes, expected: frozenset[str] | None) -> dict[str, object]:
        if not isinstance(raw, bytes):
            raise MalformedFrame(f"{self.url} sent a text frame")
        reply = decode_frame(raw, max_size=self.max_size)
        raise_for_error(reply)
        if expected is not None and reply["type"] not in expected:
            want = " or ".join(repr(t) for t in sorted(expected))
            raise UnexpectedFrameType(f"expected {want}, got {reply['type']!r}")
        return reply

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await _close_quietly(conn)


def _reply_too_large(exc: BaseException) -> bool:
    """Whether the websocket layer closed the connection because a received message was
    over ``max_size`` (close code 1009)."""
    return (
        isinstance(exc, ConnectionClosed)
        and exc.sent is not None
        and exc.sent.code == CloseCode.MESSAGE_TOO_BIG
    )


async def _close_quietly(conn: ClientConnection) -> None:
    """Close ``conn``, dropping it if the closing handshake takes over
    :data:`CLOSE_TIMEOUT` seconds (a peer that does not answer cannot hold a shutdown)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await conn.close()
    with contextlib.suppress(Exception):
        conn.transport.abort()


def challenge_response(
    identity: SigningKey, *, chain_id: str, node: str
) -> Callable[[Exchange], Awaitable[None]]:
    """An ``authenticate`` step for a node's forward :class:`Link`: prove to the successor
    that this end is ``node`` of chain ``chain_id``.

    Sends ``challenge {}``, signs the 32-byte nonce of the ``challenge {nonce}`` reply with
    ``identity`` (:func:`mixnet.keys.sign_link_challenge`) and sends
    ``authenticate {node, signature}``, expecting ``authenticated {node}``.

    The step raises :class:`~mixnet.errors.MalformedFrame` /
    :class:`~mixnet.errors.BadLength` for a malformed nonce or an ``authenticated`` reply
    naming another node, and the successor's error (e.g. ``unauthorized``,
    ``bad-signature``) as its :class:`~mixnet.errors.MixnetError`.
    """

    async def authenticate(exchange: Exchange) -> None:
        reply = await exchange({"type": "challenge"}, "challenge")
        nonce = get_bytes(reply, "nonce", length=CHALLENGE_LENGTH)
        signature = sign_link_challenge(identity, chain_id=chain_id, node=node, challenge=nonce)
        reply = await exchange(
            {"type": "authenticate", "node": node, "signature": signature}, "authenticated"
        )
        if reply.get("node") != node:
            raise MalformedFrame(f"the successor authenticated {reply.get('node')!r}, not {node!r}")

    return authenticate
