"""The sink node: the end of the chain, where the application gets each round's batch.

The adapter around :class:`~mixnet.core.sink.SinkMachine`. What the payloads mean is the
application's (a :class:`SinkApplication`): its :meth:`~SinkApplication.analyze` runs in a
worker thread on the complete batch, and its JSON-able result is stored and published —
over websockets (``subscribe {round}`` → ``result {...}``, or ``pending {round}`` after
:data:`SUBSCRIBE_WAIT` seconds: ask again) and over HTTP (``GET /rounds``, ``GET
/rounds/<id>``). ``GET /`` is the status page (:mod:`mixnet.status_page`): the chain, the
open round, the recent results (in the columns the application chooses, if it implements
:class:`~mixnet.status_page.DescribesResults`) and each hop's timings.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import ssl
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from mixnet.chain import ChainConfig
from mixnet.core.actions import Action, Deliver, DeliveredBatch, Peel
from mixnet.core.sink import SinkMachine
from mixnet.core.status import Role, RoundStatus
from mixnet.errors import MixnetError
from mixnet.frames import AbortRound, Batch, Frame, OpenRound, parse_subscribe
from mixnet.logs import round_extra
from mixnet.node import PREDECESSOR_FRAMES, STORE_CACHE_KIB, BaseNode
from mixnet.settings import NodeSettings
from mixnet.status_page import (
    RECENT_RESULTS,
    ChainNode,
    ChainPoller,
    DescribesResults,
    NodeView,
    PageData,
    content_security_policy,
    generic_columns,
    new_nonce,
    render_page,
)
from mixnet.store import NodeStore

__all__ = ["STORE_CACHE_KIB", "SUBSCRIBE_WAIT", "SinkApplication", "SinkNode"]

log = logging.getLogger("mixnet")

#: Seconds one ``subscribe`` waits for a result before answering ``pending``.
SUBSCRIBE_WAIT = 60.0


class SinkApplication(Protocol):
    """What a sink does with the rounds it receives."""

    def analyze(self, round_id: int, batch: DeliveredBatch) -> Mapping[str, object]:
        """The result of a complete round: a JSON-able mapping. Runs in a worker thread and
        must be a pure function of its arguments (after a restart it may run again on the
        same batch)."""
        ...

    def aborted(self, round_id: int) -> Mapping[str, object]:
        """The result to publish for a round that ended without a batch."""
        ...


#: Characters of a result written to the log line that announces it.
_LOGGED_RESULT = 400


def _log_result(node: str, round_id: int, result: Mapping[str, object]) -> None:
    """Log a round's result when it is published: INFO when its status is ``ok``, WARNING
    otherwise (an error or an abort, with its reason), as compact JSON (truncated)."""
    text = json.dumps(result, separators=(",", ":"), sort_keys=True, default=str)
    if len(text) > _LOGGED_RESULT:
        text = text[: _LOGGED_RESULT - 3] + "..."
    level = logging.INFO if result.get("status") == "ok" else logging.WARNING
    log.log(level, "%s: round %d result %s", node, round_id, text, extra=round_extra(round_id))


class SinkNode(BaseNode):
    """The chain's sink (``settings.hop == settings.hops``).

    ``chain`` (optional; see :meth:`show_chain`) lets the status page list and poll every
    node; ``ssl_context`` is what it trusts for ``wss://`` nodes (``None``: the system's
    default trust).
    """

    role = Role.SINK
    accepts = PREDECESSOR_FRAMES

    def __init__(
        self,
        settings: NodeSettings,
        store: NodeStore,
        application: SinkApplication,
        *,
        clock: Callable[[], float] = time.time,
        chain: ChainConfig | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if not settings.is_sink or settings.predecessor is None:
            raise ValueError("a sink is the node after the last mix")
        super().__init__(settings, store, clock=clock)
        self.application = application
        self.machine = SinkMachine(
            predecessor=settings.predecessor, item_length=settings.item_length_in()
        )
        self._waiters: dict[int, asyncio.Event] = {}
        self._poller = ChainPoller(
            [ChainNode(settings.predecessor, settings.hop - 1, None)]
        )
        self._chain_shown = False
        if chain is not None:
            self.show_chain(chain, ssl_context=ssl_context)

    def show_chain(
        self, config: ChainConfig, *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        """Let the status page list every mix of ``config`` and ask each for its status at
        its URL (``ssl_context``: what to trust for ``wss://``; ``None`` the system's
        default). Until this is called the page lists only the predecessor, by name. May be
        called again (e.g. once every node of a local chain is listening).

        :raises ValueError: ``config`` is another chain, or this node is not its sink.
        """
        settings = self.settings
        if config.chain_id != settings.chain_id or config.sink.name != settings.name:
            raise ValueError(
                f"chain {config.chain_id!r} (sink {config.sink.name!r}) is not this node's "
                f"chain {settings.chain_id!r} (sink {settings.name!r})"
            )
        if len(config.mixes) != settings.hops:
            raise ValueError(
                f"the chain has {len(config.mixes)} mixes; this sink is at hop {settings.hops}"
            )
        self._poller = ChainPoller(
            [ChainNode(m.name, hop, m.url) for hop, m in enumerate(config.mixes)],
            ssl_context=ssl_context,
        )
        self._chain_shown = True

    def recover(self) -> list[Action]:
        assert self.settings.predecessor is not None
        self.machine, actions = SinkMachine.restore(
            self.store.records(),
            self.clock(),
            predecessor=self.settings.predecessor,
            item_length=self.settings.item_length_in(),
        )
        return self.emit(actions)

    def handle(self, frame: Frame) -> list[Action]:
        now = self.clock()
        if isinstance(frame, OpenRound):
            return self.machine.on_open_round(frame, now)
        if isinstance(frame, AbortRound):
            return self.machine.on_abort_round(frame, now)
        if isinstance(frame, Batch):
            return self.machine.on_batch(frame)
        return super().handle(frame)

    def on_reply(self, sent: Frame, reply: Frame) -> list[Action]:
        raise TypeError("the sink sends nothing")

    def on_send_error(self, sent: Frame, error: MixnetError) -> list[Action]:
        raise TypeError("the sink sends nothing")

    def persisted(self, token: object) -> list[Action]:
        return self.machine.persisted(token, self.clock())

    def persist_failed(self, token: object) -> list[Action]:
        return self.machine.persist_failed(token, self.clock())

    async def peel(self, action: Peel) -> list[Action]:
        raise TypeError("the sink peels nothing")

    async def deliver(self, action: Deliver) -> list[Action]:
        """Run the application on the batch (or tell it of the abort), off the event loop."""
        started = self.clock()
        if action.batch is None:
            result = await asyncio.to_thread(self.application.aborted, action.round_id)
            if action.reason:
                result = {**result, "reason": action.reason}
        else:
            result = await asyncio.to_thread(
                self.application.analyze, action.round_id, action.batch
            )
            st = self.machine.rounds.get(action.round_id)
            self.note(
                action.round_id,
                messages=len(action.batch.payloads),
                analyze_seconds=self.clock() - started,
                dropped=0 if st is None else st.dropped,  # replays (see MixNode.mix)
            )
            if action.batch.excluded:
                self.metrics.submissions_excluded(action.batch.excluded)
        safe = _json_safe(action.round_id, result)
        _log_result(self.settings.name, action.round_id, safe)
        return self.machine.delivered(action.round_id, safe)

    def round_statuses(self) -> dict[int, RoundStatus]:
        return {r: st.status for r, st in self.machine.rounds.items()}

    # ------------------------------------------------------------------ results

    async def result(self, round_id: int) -> Mapping[str, object] | None:
        """The round's stored result, or ``None`` (recent results from memory, older ones
        from the store)."""
        recent = self.machine.results.get(round_id)
        if recent is not None or round_id in self.machine.rounds:
            return recent
        return await self.writer.read(self.store.result, round_id)

    def published(self, round_id: int) -> None:
        waiter = self._waiters.pop(round_id, None)
        if waiter is not None:
            waiter.set()

    def extra_request(
        self, kind: str
    ) -> Callable[[dict[str, object]], Coroutine[Any, Any, dict[str, object]]] | None:
        return self._on_subscribe if kind == "subscribe" else None

    async def _on_subscribe(self, raw: dict[str, object]) -> dict[str, object]:
        round_id = parse_subscribe(raw).round_id
        result = await self.result(round_id)
        if result is None:
            waiter = self._waiters.setdefault(round_id, asyncio.Event())
            try:
                await asyncio.wait_for(waiter.wait(), timeout=SUBSCRIBE_WAIT)
            except TimeoutError:
                if self._waiters.get(round_id) is waiter:
                    del self._waiters[round_id]  # waiters of an unfinished round are freed
                return {"type": "pending", "round": round_id}
            result = await self.result(round_id)
            if result is None:  # pragma: no cover - published means stored
                return {"type": "pending", "round": round_id}
        # the frame's own keys win: a result cannot retype or re-version the frame
        return {**{k: v for k, v in result.items() if k not in ("type", "v")}, "type": "result"}

    async def routes(self, path: str) -> tuple[int, object] | None:
        if path == "/rounds":
            records = await self.writer.read(self.store.rounds)
            return 200, [rec.round_id for rec in records]
        if not path.startswith("/rounds/"):
            return None
        tail = path[len("/rounds/") :]
        if not tail.isdigit() or len(tail) > 19:
            return 400, {"error": "round id must be a non-negative integer"}
        round_id = int(tail)
        result = await self.result(round_id)
        if result is not None:
            return 200, dict(result)
        known = round_id in self.machine.rounds or (
            await self.writer.read(self.store.round, round_id)
        ) is not None
        return 404, {"round": round_id, "status": "pending" if known else "unknown"}


    # ------------------------------------------------------------------ status page

    async def status_page_data(self) -> PageData:
        """What the status page shows now: every known node's status (this node's own, the
        others' from :class:`~mixnet.status_page.ChainPoller`), the last
        :data:`~mixnet.status_page.RECENT_RESULTS` rounds this sink stored, newest first
        (with their results, or their status while they have none: marked pending), and
        the application's columns (or :func:`~mixnet.status_page.generic_columns`).

        :raises StoreError: the store cannot be read.
        """
        settings = self.settings
        others = await self._poller.poll()
        here = NodeView(ChainNode(settings.name, settings.hop, None), self.status())
        nodes = [*others, here]

        def read() -> list[tuple[int, RoundStatus, Mapping[str, object] | None]]:
            return [
                (rec.round_id, rec.status, self.store.result(rec.round_id))
                for rec in self.store.rounds(limit=RECENT_RESULTS)
            ]

        results: list[Mapping[str, object]] = []
        pending: set[int] = set()
        for round_id, status, stored in reversed(await self.writer.read(read)):
            result = self.machine.results.get(round_id)
            result = stored if result is None else result
            if result is None:
                pending.add(round_id)
                results.append({"round": round_id, "status": status.value})
            else:
                results.append({"round": round_id, **result})
        app = self.application
        columns = (
            list(app.result_columns())
            if isinstance(app, DescribesResults)
            else generic_columns(results)
        )
        note = None
        if not self._chain_shown:
            note = (
                "The sink was not given the chain's addresses: only its predecessor is "
                "listed, and the open round is not known."
            )
        return PageData(
            chain_id=settings.chain_id,
            nodes=nodes,
            results=results,
            columns=columns,
            now=self.clock(),
            pending=frozenset(pending),
            note=note,
        )

    async def _process_request(
        self, conn: ServerConnection, request: Request
    ) -> Response | None:
        """Serve ``GET /`` (not a websocket upgrade) as the status page — HTML with a
        ``Content-Security-Policy`` that runs only the page's own script and style, never
        cached; 503 if it cannot be built (logged) — and everything else as
        :class:`~mixnet.node.BaseNode` does."""
        upgrade = "upgrade" in request.headers.get("Connection", "").lower()
        if upgrade or request.path.split("?", 1)[0] != "/":
            return await super()._process_request(conn, request)
        nonce = new_nonce()
        try:
            body = render_page(await self.status_page_data(), nonce=nonce)
        except Exception:
            log.exception("%s: the status page failed", self.settings.name)
            return conn.respond(
                http.HTTPStatus.SERVICE_UNAVAILABLE, "status page unavailable; see the log\n"
            )
        response = conn.respond(http.HTTPStatus.OK, body)
        del response.headers["Content-Type"]
        response.headers["Content-Type"] = "text/html; charset=utf-8"
        response.headers["Content-Security-Policy"] = content_security_policy(nonce)
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response


def _json_safe(round_id: int, result: Mapping[str, object]) -> dict[str, object]:
    """The application's result as stored (a JSON object); one it cannot be becomes an
    error result instead of failing the node's writes."""
    try:
        value = json.loads(json.dumps(dict(result), allow_nan=False))
    except (TypeError, ValueError) as exc:
        log.error("round %d: the application's result is not JSON: %s", round_id, exc)
        return {"round": round_id, "status": "error", "error": "result is not valid JSON"}
    assert isinstance(value, dict)
    return value
