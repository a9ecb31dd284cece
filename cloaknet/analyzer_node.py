"""The analyzer node: the end of the chain, where the shuffled messages are analyzed.

It receives the last mix's batch, runs :func:`cloaknet.analysis.analyze_round` with the
chain's protocol (the count is checked against n·m there: a mismatch makes the round's result
an error, never a wrong sum), and stores and publishes the result: ``GET /rounds/<id>`` (JSON)
and the websocket frame ``subscribe {round}`` → ``result {...}``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection

from cloaknet.analysis import analyze_round
from cloaknet.encoding import decode_share
from cloaknet.errors import CloakError
from cloaknet.protocols import SummationProtocol
from mixnet.errors import UnknownRound
from mixnet.frames import ROUND_ID_MAX
from mixnet.server import NodeSettings, SinkNode
from mixnet.store import NodeStore
from mixnet.wire import get_int

__all__ = ["AnalyzerNode"]

#: How long one ``subscribe`` waits before answering ``pending`` (the client asks again).
SUBSCRIBE_WAIT = 60.0


class AnalyzerNode(SinkNode):
    """:class:`~mixnet.server.SinkNode` that runs ``protocol``'s analyzer on every batch.

    ``dump_dir`` (experiments only) makes it write each round's input to
    ``<dump_dir>/round-<id>.json``. ``TypeError`` if ``protocol`` is not a
    :class:`~cloaknet.protocols.base.SummationProtocol`.
    """

    def __init__(
        self,
        settings: NodeSettings,
        store: NodeStore,
        protocol: SummationProtocol,
        *,
        clock: Callable[[], float] = time.time,
        dump_dir: Path | None = None,
    ) -> None:
        if not isinstance(protocol, SummationProtocol):
            raise TypeError(
                f"protocol must be a SummationProtocol, not {type(protocol).__name__}"
            )
        super().__init__(settings, store, clock=clock)
        self.protocol = protocol
        self.dump_dir = dump_dir
        self._waiters: dict[int, asyncio.Event] = {}
        self.handlers["subscribe"] = self._on_subscribe

    def _event(self, round_id: int) -> asyncio.Event:
        return self._waiters.setdefault(round_id, asyncio.Event())

    def _publish(self, round_id: int, result: dict[str, Any]) -> None:
        self.store.put_result(round_id, result)
        self._event(round_id).set()

    async def on_batch(
        self, round_id: int, clients: int, count: int, payloads: list[bytes]
    ) -> None:
        started = self.clock()
        result = await asyncio.to_thread(
            analyze_round, self.protocol, round_id, clients, count, payloads
        )
        if self.dump_dir is not None:
            await asyncio.to_thread(self._dump, round_id, clients, payloads)
        result["completed_at"] = self.clock()
        result["analyze_seconds"] = result["completed_at"] - started
        self._round_metrics(round_id).update(
            {"messages": len(payloads), "analyze_seconds": result["analyze_seconds"]}
        )
        self._publish(round_id, result)

    def _dump(self, round_id: int, clients: int, payloads: list[bytes]) -> None:
        """Write the round's analyzer input — the shuffled messages — for experiments
        (``--dump-dir``; off by default, since it keeps data a deployment should not).
        A payload that does not decode is written as -1."""
        assert self.dump_dir is not None
        modulus = self.protocol.message_modulus
        shares = []
        for payload in payloads:
            try:
                shares.append(decode_share(payload, modulus))
            except CloakError:
                shares.append(-1)
        record: dict[str, Any] = {
            "round": round_id,
            "users": clients,
            "protocol": self.protocol.name,
            "modulus": modulus,
            "messages": self.protocol.message_count,
            "shares": shares,
        }
        precision = self.protocol.parameters().get("precision")
        if precision is not None:
            record["precision"] = precision
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dump_dir / f".round-{round_id}.json.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(self.dump_dir / f"round-{round_id}.json")

    def on_abort(self, round_id: int) -> None:
        self._publish(round_id, {"round": round_id, "status": "aborted"})

    def result(self, round_id: int) -> dict[str, Any] | None:
        return self.store.get_result(round_id)

    def routes(self, path: str) -> tuple[int, object] | None:
        if path == "/rounds":
            return 200, [r.round_id for r in self.store.rounds()]
        if not path.startswith("/rounds/"):
            return None
        tail = path[len("/rounds/") :]
        if not tail.isdigit() or len(tail) > 19:
            return 400, {"error": "round id must be a non-negative integer"}
        round_id = int(tail)
        result = self.result(round_id)
        if result is not None:
            return 200, result
        known = self.store.get_round(round_id) is not None
        return 404, {"round": round_id, "status": "pending" if known else "unknown"}

    async def _on_subscribe(
        self, conn: ServerConnection, frame: dict[str, object]
    ) -> dict[str, object]:
        round_id = get_int(frame, "round", min_value=0, max_value=ROUND_ID_MAX)
        result = self.result(round_id)
        if result is None:
            try:
                await asyncio.wait_for(self._event(round_id).wait(), timeout=SUBSCRIBE_WAIT)
            except TimeoutError:
                return {"type": "pending", "round": round_id}
            result = self.result(round_id)
            if result is None:
                raise UnknownRound(f"round {round_id} has no result")
        return {"type": "result", **result}
