"""What a node shows about itself: per-round timings (``/status``, round metrics) and the
HTTP side of :class:`~mixnet.node.BaseNode` (:class:`ServesHttp`, a mixin, and its helpers).

:class:`RoundTimes` maps a round id to its numbers — when the node opened, closed and mixed
it, seconds spent peeling, forwarding and in the trace, messages and dropped items — taken
from the writes the machine emits (:meth:`RoundTimes.note_writes`) and from the adapter
(:meth:`RoundTimes.note`). It keeps the most recent :data:`TIMES_KEPT` rounds and reports a
finished round to the node's metrics.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from mixnet.core.actions import Persist
from mixnet.core.records import NewRound, SetRound
from mixnet.core.status import TERMINAL, RoundStatus
from mixnet.limits import ConnectionGuard
from mixnet.metrics import NodeMetrics

if TYPE_CHECKING:
    from mixnet.core.status import Role
    from mixnet.settings import NodeSettings
    from mixnet.store import StoreFailed
    from mixnet.writer import StoreWriter

__all__ = [
    "STATUS_HISTORY",
    "TIMES_KEPT",
    "RoundTimes",
    "ServesHttp",
    "answer_http",
    "guarded_connection",
    "json_response",
]

log = logging.getLogger("mixnet")
_PROBES = {"/healthz": "health", "/status": "status", "/metrics": "metrics"}

#: Rounds kept in ``/status``'s history.
STATUS_HISTORY = 32
#: Most rounds whose timings are kept for ``/status`` (older ones are forgotten).
TIMES_KEPT = 2 * STATUS_HISTORY


class RoundTimes(dict[int, dict[str, float]]):
    """Round id → its timings and counts (a plain dict, bounded to :data:`TIMES_KEPT`)."""

    def __init__(self, metrics: NodeMetrics) -> None:
        super().__init__()
        self.metrics = metrics

    def note(self, round_id: int, **values: float) -> None:
        """Record per-round numbers shown in ``/status`` (messages, dropped, timings)."""
        self.setdefault(round_id, {}).update(values)

    def note_writes(self, persist: Persist, now: float) -> bool:
        """Take the status changes among ``persist``'s writes at time ``now``; whether a
        round finished (it is then counted in the metrics)."""
        finished = False
        for write in persist.writes:
            if isinstance(write, NewRound):
                self.setdefault(write.round_id, {})["opened"] = now
            elif isinstance(write, SetRound) and write.status is not None:
                times = self.setdefault(write.round_id, {})
                if write.status is RoundStatus.CLOSED:
                    times["closed"] = now
                elif write.status is RoundStatus.MIXED:
                    times["mixed"] = now
                elif write.status is RoundStatus.FORWARDED and "mixed" in times:
                    times["forward_seconds"] = now - times["mixed"]
                elif write.status is RoundStatus.RELEASED:
                    times["released"] = now
                if write.status in TERMINAL:
                    if write.status is RoundStatus.CONFIRMED and "released" in times:
                        # the last mix forwards after the trace
                        times["forward_seconds"] = now - times["released"]
                    elif "mixed" in times and "forward_seconds" in times:
                        times["trace_seconds"] = now - times["mixed"] - times["forward_seconds"]
                    self._finished(write.status, times, now)
                    finished = True
        return finished

    def _finished(self, status: RoundStatus, times: dict[str, float], now: float) -> None:
        closed, opened = times.get("closed"), times.get("opened")
        self.metrics.round_finished(
            status.value,
            messages=int(times.get("messages", 0)),
            dropped=int(times.get("dropped", 0)),
            hop_seconds=None if closed is None else now - closed,
            round_seconds=None if opened is None else now - opened,
        )
        times["finished"] = now
        while len(self) > TIMES_KEPT:  # bounded, oldest rounds first
            del self[min(self)]


def guarded_connection(guard: ConnectionGuard) -> type[ServerConnection]:
    """A :class:`ServerConnection` class whose connections pass ``guard`` the moment the
    TCP connection is accepted (after the TLS handshake on a ``wss://`` node) and leave it
    when the socket is closed."""

    class GuardedConnection(ServerConnection):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            guard.admit(self)

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            guard.release(self)

    return GuardedConnection


def json_response(conn: ServerConnection, status: int, body: object) -> Response:
    """An HTTP response with ``body`` as indented JSON."""
    response = conn.respond(http.HTTPStatus(status), json.dumps(body, indent=2) + "\n")
    del response.headers["Content-Type"]
    response.headers["Content-Type"] = "application/json"
    return response


async def answer_http(
    conn: ServerConnection,
    request: Request,
    *,
    name: str,
    status: Callable[[], Mapping[str, object]],
    metrics: Callable[[], tuple[bytes, str]],
    routes: Callable[[str], Awaitable[tuple[int, object] | None]],
    failure: Callable[[], str | None] = lambda: None,
) -> Response | None:
    """The answer to a plain HTTP GET on a node (``None`` for a websocket upgrade, which
    the server goes on with): ``/healthz`` (503 with ``failure()`` once that is not
    ``None``: the node's store failed a commit), ``/status`` (``status()`` as JSON), ``/metrics``
    (``metrics()`` gives the body and its content type), the node's own ``routes(path)``
    (status and JSON body, or ``None``), else 404. Probes log at DEBUG only."""
    if "upgrade" in request.headers.get("Connection", "").lower():
        return None
    path = request.path.split("?", 1)[0]
    probe = _PROBES.get(path)
    if probe is not None:
        log.debug("%s: %s probe", name, probe)
    if path == "/healthz":
        failed = failure()
        if failed is not None:
            return conn.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, f"failed: {failed}\n")
        return conn.respond(http.HTTPStatus.OK, "ok\n")
    if path == "/status":
        return json_response(conn, 200, status())
    if path == "/metrics":
        body, content_type = metrics()
        response = conn.respond(http.HTTPStatus.OK, body.decode())
        del response.headers["Content-Type"]
        response.headers["Content-Type"] = content_type
        return response
    routed = await routes(path)
    if routed is not None:
        return json_response(conn, routed[0], routed[1])
    return conn.respond(http.HTTPStatus.NOT_FOUND, "not found\n")


class ServesHttp:
    """Mixin of :class:`~mixnet.node.BaseNode`: the plain HTTP GETs a node answers on its
    websocket port (:func:`answer_http`), with the hooks :meth:`routes` and :meth:`status`
    that nodes override."""

    if TYPE_CHECKING:
        settings: NodeSettings
        role: Role
        metrics: NodeMetrics
        writer: StoreWriter[Any]
        _round_times: RoundTimes

        @property
        def failure(self) -> StoreFailed | None: ...

        def round_statuses(self) -> dict[int, RoundStatus]: ...

        def _update_gauges(self) -> None: ...

    async def routes(self, path: str) -> tuple[int, object] | None:
        """Hook for extra GET routes: return (status, JSON body) or None."""
        return None

    def status(self) -> dict[str, object]:
        """What ``/status`` shows: the node, and its most recent rounds with timings."""
        statuses = self.round_statuses()
        recent = sorted(statuses)[-STATUS_HISTORY:]
        return {
            "chain": self.settings.chain_id,
            "node": self.settings.name,
            "hop": self.settings.hop,
            "role": self.role.value,
            "rounds": [
                {"round": r, "status": statuses[r].value, **self._round_times.get(r, {})}
                for r in recent
            ],
            "writer_commits": self.writer.commits,
        }

    async def _process_request(
        self, conn: ServerConnection, request: Request
    ) -> Response | None:
        return await answer_http(
            conn, request, name=self.settings.name, status=self.status,
            metrics=self._render_metrics, routes=self.routes,
            failure=lambda: None if self.failure is None else str(self.failure),
        )  # fmt: skip

    def _render_metrics(self) -> tuple[bytes, str]:
        self._update_gauges()
        return self.metrics.render()
