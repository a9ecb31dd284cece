"""A node's websocket side: serving each connection one request at a time, closing idle
ones, and dispatching a frame to the machine or to the node's own handlers
(``status``, ``challenge``, ``authenticate``, ``submit-many``, :meth:`extra_request`).

A mixin of :class:`~mixnet.node.BaseNode`, which owns the state it uses (the connection
guard, the peers, the metrics, the frame limits) and the machine it feeds
(:meth:`~mixnet.node.BaseNode._serve`). Every refusal becomes a typed error frame
(:meth:`_refusal`); nothing a peer sends crashes the node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.protocol import State

from mixnet.errors import InternalError, MalformedFrame, MixnetError, UnexpectedFrameType
from mixnet.frames import Frame, FrameLimits, parse_request
from mixnet.limits import ConnectionGuard
from mixnet.metrics import NodeMetrics
from mixnet.peer_auth import PeerAuthenticator
from mixnet.settings import NodeSettings
from mixnet.submit_many import SUBMIT_MANY, parse_submit_many
from mixnet.wire import decode_frame, encode_frame, error_frame, get_str

__all__ = ["PREDECESSOR_FRAMES", "ServesWebsockets"]

log = logging.getLogger("mixnet")

#: Frames only the authenticated predecessor may send (what relays and the sink take).
PREDECESSOR_FRAMES = frozenset({"open-round", "abort-round", "batch", "trace", "exclude"})


class ServesWebsockets:
    """Mixin of :class:`~mixnet.node.BaseNode`: its websocket connections and the dispatch
    of their frames."""

    if TYPE_CHECKING:
        settings: NodeSettings
        metrics: NodeMetrics
        guard: ConnectionGuard
        peers: PeerAuthenticator
        accepts: frozenset[str]
        _handlers: set[asyncio.Task[Any]]
        _closing: set[ServerConnection]
        _stopping: bool
        _max_frame: int
        _limits: FrameLimits

        def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task[Any]: ...

        def status(self) -> dict[str, object]: ...

        async def _serve(self, frame: Frame) -> dict[str, object]: ...

        async def _serve_many(
            self, submissions: Sequence[Frame | MixnetError]
        ) -> dict[str, object]: ...

    async def _serve_connection(self, conn: ServerConnection) -> None:
        """Serve one websocket: one request at a time, each answered by one frame; close it
        after the reply that reached the submission limit. Cancelled by :meth:`stop`."""
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            async for message in conn:
                self.guard.begin(conn)
                try:
                    reply = await self._dispatch(conn, message)
                    await conn.send(encode_frame(reply))
                finally:
                    self.guard.end(conn)
                if conn in self._closing:
                    await conn.close(CloseCode.NORMAL_CLOSURE, "submission limit")
                    break
        except ConnectionClosed:
            pass
        finally:
            if task is not None:
                self._handlers.discard(task)
            self._closing.discard(conn)
            self.peers.forget(conn)

    async def _sweep_idle(self) -> None:
        """Close the connections the guard finds idle (every quarter of ``idle_seconds``,
        at least once a second): open websockets with code 1001 ``idle``, connections still
        in their opening handshake at once."""
        period = min(1.0, self.settings.connection_limits.idle_seconds / 4)
        while not self._stopping:
            await asyncio.sleep(period)
            for conn in self.guard.sweep():
                if conn.protocol.state is State.OPEN:
                    self.spawn(conn.close(CloseCode.GOING_AWAY, "idle"), "closing a connection")
                else:
                    conn.transport.abort()

    async def _dispatch(self, conn: ServerConnection, message: str | bytes) -> dict[str, object]:
        self.metrics.frame()
        try:
            if not isinstance(message, bytes):
                raise MalformedFrame("frames must be binary msgpack")
            raw = decode_frame(message, max_size=self._max_frame)
            kind = get_str(raw, "type", max_length=32)
            if kind == "submit" and self.guard.submitted(conn):
                self._closing.add(conn)  # answered, then closed (mixnet.limits)
            if kind == SUBMIT_MANY and "submit" in self.accepts:
                submissions = parse_submit_many(
                    raw,
                    self._limits,
                    max_count=self.settings.connection_limits.max_submissions_per_frame,
                )
                if self.guard.submitted(conn, len(submissions)):
                    self._closing.add(conn)
                return await self._serve_many(submissions)
            if kind == "status":
                return {"type": "status", **self.status()}
            if kind == "challenge":
                return self.peers.challenge(conn)
            if kind == "authenticate":
                return self.peers.authenticate(conn, raw)
            extra = self.extra_request(kind)
            if extra is not None:
                return await extra(raw)
            if kind not in self.accepts:
                raise UnexpectedFrameType(f"{self.settings.name} does not handle {kind!r}")
            if kind in PREDECESSOR_FRAMES:
                self.peers.require_predecessor(conn)  # before looking inside the frame
            frame = parse_request(kind, raw, self._limits)
            return await self._serve(frame)
        except Exception as exc:
            return self._refusal(exc)


    def extra_request(
        self, kind: str
    ) -> Callable[[dict[str, object]], Coroutine[Any, Any, dict[str, object]]] | None:
        """Hook: a handler for a frame type the machine does not take (e.g. ``get-round``,
        ``subscribe``), or ``None``."""
        return None


    def _refusal(self, exc: Exception) -> dict[str, object]:
        """The error frame answering a request that raised ``exc`` (counted in the metrics;
        an error that is not a :class:`MixnetError` is logged and answered
        ``internal-error``)."""
        if not isinstance(exc, MixnetError):
            log.error("%s: internal error", self.settings.name, exc_info=exc)
            exc = InternalError("internal error; see the node's log")
        self.metrics.error(exc.code)
        return error_frame(exc)
