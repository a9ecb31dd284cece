"""The sink node: the end of the chain, where the application gets each round's batch.

The adapter around :class:`~mixnet.core.sink.SinkMachine`. What the payloads mean is the
application's (a :class:`SinkApplication`): its :meth:`~SinkApplication.analyze` runs in a
worker thread on the complete batch, and its JSON-able result is stored and published —
over websockets (``subscribe {round}`` → ``result {...}``, or ``pending {round}`` after
:data:`SUBSCRIBE_WAIT` seconds: ask again) and over HTTP (``GET /rounds``, ``GET
/rounds/<id>``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from mixnet.core.actions import Action, Deliver, DeliveredBatch, Peel
from mixnet.core.sink import SinkMachine
from mixnet.core.status import Role, RoundStatus
from mixnet.errors import MixnetError
from mixnet.frames import AbortRound, Batch, Frame, OpenRound, parse_subscribe
from mixnet.node import PREDECESSOR_FRAMES, BaseNode
from mixnet.settings import NodeSettings
from mixnet.store import NodeStore

__all__ = ["SUBSCRIBE_WAIT", "SinkApplication", "SinkNode"]

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


class SinkNode(BaseNode):
    """The chain's sink (``settings.hop == settings.hops``)."""

    role = Role.SINK
    accepts = PREDECESSOR_FRAMES

    def __init__(
        self,
        settings: NodeSettings,
        store: NodeStore,
        application: SinkApplication,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not settings.is_sink or settings.predecessor is None:
            raise ValueError("a sink is the node after the last mix")
        super().__init__(settings, store, clock=clock)
        self.application = application
        self.machine = SinkMachine(
            predecessor=settings.predecessor, item_length=settings.item_length_in()
        )
        self._waiters: dict[int, asyncio.Event] = {}

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
        else:
            result = await asyncio.to_thread(
                self.application.analyze, action.round_id, action.batch
            )
            self.note(
                action.round_id,
                messages=len(action.batch.payloads),
                analyze_seconds=self.clock() - started,
            )
        return self.machine.delivered(action.round_id, _json_safe(action.round_id, result))

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
        return {"type": "result", **result}

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
