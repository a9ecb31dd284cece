"""The analyzer node: the end of the chain, where the shuffled shares are summed.

It receives the last mix's batch, checks that it holds n·m shares for the round's n accepted
clients (a mismatch makes the round's result an error, never a wrong sum), decodes the
fixed-width shares, runs Algorithm 2 and stores and publishes the result:
``GET /rounds/<id>`` (JSON) and the websocket frame ``subscribe {round}`` → ``result {...}``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.server import ServerConnection

from cloaknet.encoding import analyze_sum, decode_share
from cloaknet.errors import CloakError
from cloaknet.params import CloakParams
from cloaknet.protocols import SummationProtocol
from mixnet.errors import UnknownRound
from mixnet.frames import ROUND_ID_MAX
from mixnet.server import NodeSettings, SinkNode
from mixnet.store import NodeStore
from mixnet.wire import get_int

__all__ = ["AnalyzerNode", "analyze_batch"]

#: How long one ``subscribe`` waits before answering ``pending`` (the client asks again).
SUBSCRIBE_WAIT = 60.0


def analyze_protocol_batch(
    round_id: int, clients: int, count: int, payloads: list[bytes], protocol: SummationProtocol
) -> dict[str, Any]:
    """A comparison protocol's analyzer over a round's batch (chains with
    ``[protocol].name``); same result shape and count check as :func:`analyze_batch`."""
    base: dict[str, Any] = {
        "round": round_id,
        "users": clients,
        "messages": len(payloads),
        "protocol": protocol.name,
    }
    per_user = int(protocol.messages_per_user)
    expected = clients * per_user
    if count != len(payloads) or len(payloads) != expected:
        return {
            **base,
            "status": "error",
            "error": f"expected n·m = {clients}·{per_user} = {expected} messages, "
            f"got {len(payloads)} (batch count {count})",
        }
    try:
        values = [decode_share(p, protocol.message_modulus) for p in payloads]
        dtype = np.uint64 if protocol.message_modulus < 1 << 63 else object
        estimate = protocol.analyze(np.array(values, dtype=dtype), clients)
    except CloakError as exc:
        return {**base, "status": "error", "error": str(exc)}
    return {**base, "status": "ok", "estimate": float(estimate)}


def analyze_batch(
    round_id: int, clients: int, count: int, payloads: list[bytes], params: CloakParams
) -> dict[str, Any]:
    """Algorithm 2 over a round's batch; returns the JSON result (``status`` "ok" or "error").

    Pure: the same inputs always give the same result.
    """
    base: dict[str, Any] = {"round": round_id, "users": clients, "messages": len(payloads)}
    expected = clients * params.messages
    if count != len(payloads) or len(payloads) != expected:
        return {
            **base,
            "status": "error",
            "error": f"expected n·m = {clients}·{params.messages} = {expected} shares, "
            f"got {len(payloads)} (batch count {count})",
        }
    try:
        total = 0
        for payload in payloads:
            total += decode_share(payload, params.modulus)
        result = analyze_sum(total % params.modulus, clients, params)
    except CloakError as exc:
        return {**base, "status": "error", "error": str(exc)}
    return {
        **base,
        "status": "ok",
        "estimate": result.estimate,
        "estimate_exact": f"{result.estimate_exact.numerator}/{result.estimate_exact.denominator}",
        "raw_sum": str(result.raw_sum),
        "clamped": result.clamped,
        "precision": params.precision,
    }


class AnalyzerNode(SinkNode):
    """:class:`~mixnet.server.SinkNode` that runs the cloak's analyzer."""

    def __init__(
        self,
        settings: NodeSettings,
        store: NodeStore,
        params: CloakParams | None,
        *,
        clock: Callable[[], float] = time.time,
        dump_dir: Path | None = None,
        protocol: SummationProtocol | None = None,
    ) -> None:
        super().__init__(settings, store, clock=clock)
        if (params is None) == (protocol is None):
            raise TypeError("an analyzer node runs either the cloak (params) or a protocol")
        self.params = params
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
        if self.protocol is not None:
            result = await asyncio.to_thread(
                analyze_protocol_batch, round_id, clients, count, payloads, self.protocol
            )
        else:
            assert self.params is not None
            result = await asyncio.to_thread(
                analyze_batch, round_id, clients, count, payloads, self.params
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
        """Write the round's analyzer input — the shuffled shares — for experiments
        (``--dump-dir``; off by default, since it keeps data a deployment should not)."""
        assert self.dump_dir is not None
        if self.params is not None:
            modulus = self.params.modulus
        else:
            assert self.protocol is not None
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
            "modulus": modulus,
            "shares": shares,
        }
        if self.params is not None:
            record.update(messages=self.params.messages, precision=self.params.precision)
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
