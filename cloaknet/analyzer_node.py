"""The analyzer: the application at the end of the chain, where the shuffled messages are
analyzed.

:class:`AnalyzerApp` is a :class:`mixnet.sink.SinkApplication`: the generic
:class:`~mixnet.sink.SinkNode` receives the last mix's batch, stores it, hands it to
:meth:`AnalyzerApp.analyze` (in a worker thread), and stores and publishes what it returns —
``GET /rounds/<id>`` (JSON) and the websocket frame ``subscribe {round}`` → ``result {...}``.
The analysis is :func:`cloaknet.analysis.analyze_round` with the chain's protocol (the count
is checked against n·m there: a mismatch makes the round's result an error, never a wrong
sum); a published estimate carries the privacy guarantee it was made under (``epsilon``,
``delta``). The status page (``GET /`` on the analyzer, :mod:`mixnet.status_page`) shows the
results in :meth:`AnalyzerApp.result_columns`. :func:`analyzer_node` builds the node.
"""

from __future__ import annotations

import json
import math
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cloaknet.analysis import analyze_round
from cloaknet.encoding import decode_share
from cloaknet.errors import CloakError
from cloaknet.protocols import SummationProtocol
from cloaknet.protocols.vector_chain import VectorChainProtocol
from mixnet.chain import ChainConfig
from mixnet.core.actions import DeliveredBatch
from mixnet.settings import NodeSettings
from mixnet.sink import SinkNode
from mixnet.status_page import ResultColumn
from mixnet.store import NodeStore

__all__ = ["RESULT_COLUMNS", "VECTOR_RESULT_COLUMNS", "AnalyzerApp", "analyzer_node"]

#: The status page's results table (:meth:`AnalyzerApp.result_columns`).
RESULT_COLUMNS: tuple[ResultColumn, ...] = (
    ResultColumn("round", "round"),
    ResultColumn("status", "status"),
    ResultColumn("users", "users", description="users whose values the round counted"),
    ResultColumn(
        "excluded",
        "excluded",
        default=0,
        format="count",
        description="users excluded from the round (0 when the result does not say)",
    ),
    ResultColumn("protocol", "protocol"),
    ResultColumn(
        "ε", "epsilon", description="the (ε, δ)-differential privacy of the published sum"
    ),
    ResultColumn(
        "δ", "delta", description="the (ε, δ)-differential privacy of the published sum"
    ),
    ResultColumn("estimate", "estimate", description="the published, private sum"),
    ResultColumn("messages", "messages"),
    ResultColumn("analyzed in", "analyze_seconds", format="seconds"),
    ResultColumn("completed", "completed_at", format="time"),
    ResultColumn("error", "error", default=""),
)
#: The results table of a chain that sums vectors: the dimension, and the total of the
#: vector's coordinates in place of the scalar estimate (the vector itself is in the JSON).
VECTOR_RESULT_COLUMNS: tuple[ResultColumn, ...] = tuple(
    column
    for original in RESULT_COLUMNS
    for column in (
        (
            ResultColumn("dimension", "dimension", description="coordinates of the summed vector"),
            ResultColumn(
                "Σ coordinates",
                "estimate",
                description="the total of the published vector sum's coordinates "
                "(the vector is in the round's JSON, GET /rounds/<id>)",
            ),
        )
        if original.key == "estimate"
        else (original,)
    )
)


class AnalyzerApp:
    """Runs ``protocol``'s analyzer on every delivered batch (a
    :class:`~mixnet.sink.SinkApplication`).

    ``dump_dir`` (experiments only; the ``--dump-dir`` option) makes :meth:`analyze` also write
    each round's input — the shuffled messages — to ``<dump_dir>/round-<id>.json``. It is off
    by default because it keeps data a deployment should not. ``clock`` (unix seconds) stamps
    ``completed_at`` and measures ``analyze_seconds``. It is also a
    :class:`~mixnet.status_page.DescribesResults` (:meth:`result_columns`).

    :raises TypeError: ``protocol`` is not a
        :class:`~cloaknet.protocols.base.SummationProtocol`.
    :raises ParameterError: the protocol does not send a whole number of messages per user.
    """

    def __init__(
        self,
        protocol: SummationProtocol,
        *,
        dump_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(protocol, SummationProtocol):
            raise TypeError(
                f"protocol must be a SummationProtocol, not {type(protocol).__name__}"
            )
        self.protocol = protocol
        self.messages = protocol.message_count  # ParameterError for a fractional m
        self.dump_dir = dump_dir
        self.clock = clock

    def analyze(self, round_id: int, batch: DeliveredBatch) -> dict[str, Any]:
        """The JSON result of round ``round_id``: :func:`~cloaknet.analysis.analyze_round` of
        the batch (``round``, ``users``, ``messages``, ``protocol``, ``status`` and either the
        protocol's fields or ``error``), plus ``completed_at`` (unix seconds, from ``clock``)
        and ``analyze_seconds`` (>= 0). With ``status == "ok"`` it also states the privacy
        guarantee the estimate was made under: ``epsilon`` and ``delta``, the protocol's
        stated (ε, δ) (the chain file's loader checked that it holds for every round size
        its ``[round]`` allows), or ``None`` where the protocol states none (a cloak built
        from bare parameters). For vector sums the result also has ``vector`` (d floats)
        and ``dimension``, and a planned guarantee is the whole training's, over
        ``training_rounds`` rounds (:mod:`cloaknet.protocols.vector_chain`).

        A bad batch (wrong count, a payload of the wrong width or value) gives
        ``status == "error"``; it never raises for it. Apart from the two timing fields the
        result is a pure function of the arguments, so running it again after a restart
        publishes the same estimate; the dump, if any, is rewritten atomically with the same
        content.

        :raises OSError: the dump could not be written (only with ``dump_dir``).
        """
        started = self.clock()
        result = analyze_round(
            self.protocol,
            round_id,
            batch.clients,
            batch.count,
            batch.payloads,
            excluded=batch.excluded,
        )
        if result.get("status") == "ok":
            epsilon, delta = self.protocol.epsilon, self.protocol.delta
            result.setdefault("epsilon", epsilon if math.isfinite(epsilon) else None)
            result.setdefault("delta", delta if math.isfinite(delta) else None)
        if self.dump_dir is not None:
            self._dump(round_id, batch.clients, batch.payloads)
        completed = self.clock()
        result["completed_at"] = completed
        result["analyze_seconds"] = max(0.0, completed - started)
        return result

    def aborted(self, round_id: int) -> dict[str, Any]:
        """The result of an aborted round (below ``min_users`` at the deadline):
        ``{"round": round_id, "status": "aborted"}``."""
        return {"round": round_id, "status": "aborted"}

    def result_columns(self) -> tuple[ResultColumn, ...]:
        """The status page's results table: :data:`RESULT_COLUMNS` — round, status, users,
        excluded (0 when a result has no ``excluded``), protocol, ε, δ, estimate, messages,
        analysis time, completion time and error; for vector sums
        :data:`VECTOR_RESULT_COLUMNS` (the dimension and the coordinates' total in place of
        the estimate)."""
        if isinstance(self.protocol, VectorChainProtocol):
            return VECTOR_RESULT_COLUMNS
        return RESULT_COLUMNS

    def _dump(self, round_id: int, clients: int, payloads: Sequence[bytes]) -> None:
        """Write ``<dump_dir>/round-<id>.json``: the round's shuffled messages as integers
        (a payload that does not decode is written as -1), with the protocol's name, modulus,
        messages per user and, if it has one, precision. Written to a temporary file first and
        renamed, so a reader never sees a partial file. Raises ``OSError`` if it cannot."""
        assert self.dump_dir is not None
        protocol = self.protocol
        modulus = protocol.message_modulus
        shares: list[int] = []
        for payload in payloads:
            try:
                shares.append(decode_share(payload, modulus))
            except CloakError:
                shares.append(-1)
        record: dict[str, Any] = {
            "round": round_id,
            "users": clients,
            "protocol": protocol.name,
            "modulus": modulus,
            "messages": self.messages,
            "shares": shares,
        }
        precision = protocol.parameters().get("precision")
        if precision is not None:
            record["precision"] = precision
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dump_dir / f".round-{round_id}.json.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(self.dump_dir / f"round-{round_id}.json")


def analyzer_node(
    settings: NodeSettings,
    store: NodeStore,
    protocol: SummationProtocol,
    *,
    dump_dir: Path | None = None,
    clock: Callable[[], float] = time.time,
    chain: ChainConfig | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> SinkNode:
    """The chain's last node (constructed, not started): a :class:`~mixnet.sink.SinkNode`
    running :class:`AnalyzerApp` for ``protocol``. ``chain`` and ``ssl_context`` are for its
    status page (see :meth:`~mixnet.sink.SinkNode.show_chain`).

    :raises TypeError, ParameterError: as :class:`AnalyzerApp`.
    :raises ValueError: ``settings`` describe rounds of another shape than the protocol's
        (``messages`` per client, ``payload_length`` bytes per message), or ``chain`` is
        not the chain whose sink ``settings`` describe.
    """
    app = AnalyzerApp(protocol, dump_dir=dump_dir, clock=clock)
    expected = (app.messages, protocol.bytes_per_message)
    if (settings.messages, settings.payload_length) != expected:
        raise ValueError(
            f"the node settings carry {settings.messages} payloads of "
            f"{settings.payload_length} bytes per client; protocol {protocol.name!r} sends "
            f"{expected[0]} of {expected[1]}"
        )
    return SinkNode(settings, store, app, clock=clock, chain=chain, ssl_context=ssl_context)
