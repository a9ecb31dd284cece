"""Prometheus metrics of one mixnet node, through :mod:`prometheus_client`.

A :class:`NodeMetrics` owns its own :class:`~prometheus_client.CollectorRegistry` (never
the process-wide default one), so several nodes can live in one process (tests, a local
chain) without their series colliding. The node adapter calls the small typed methods
(:meth:`NodeMetrics.frame`, :meth:`~NodeMetrics.error`, :meth:`~NodeMetrics.refuse`,
:meth:`~NodeMetrics.round_finished`, :meth:`~NodeMetrics.set_open_rounds`,
:meth:`~NodeMetrics.set_queued`, :meth:`~NodeMetrics.set_connections`,
:meth:`~NodeMetrics.set_receipts`) and serves
:meth:`~NodeMetrics.render` at ``GET /metrics``.

Every mixnet series carries the labels ``node`` and ``hop``; some add one more (``code``,
``outcome`` or ``reason``). In the text format labels are written sorted by name and
values as floats, e.g. ``mixnet_rounds_total{hop="0",node="mix1",outcome="forwarded"} 1.0``.
Each counter also gets prometheus_client's ``<name>_created`` series (a timestamp).

Series:

* ``mixnet_frames_total``: websocket frames received.
* ``mixnet_errors_total{code}``: frames answered with an error frame, by error code.
* ``mixnet_rounds_total{outcome}``: rounds finished here, by outcome (:data:`ROUND_OUTCOMES`
  are present from the start, at 0).
* ``mixnet_messages_total``: messages mixed or delivered.
* ``mixnet_dropped_total``: items dropped (replayed, failing to peel, or one of several
  inputs that peeled to the same onion).
* ``mixnet_excluded_submissions_total``: submissions the chain proved bad and excluded
  (counted at the sink; present from the start, at 0).
* ``mixnet_refused_total{reason}``: connections or requests refused, by reason; the
  connection guard's reasons (:data:`mixnet.limits.REFUSALS`: ``connections``,
  ``evicted``, ``idle``, ``submissions``) are present from the start, at 0.
* ``mixnet_open_rounds``, ``mixnet_queued_messages``, ``mixnet_connections`` (open
  connections), ``mixnet_receipts`` (receipts the entry mix keeps, :mod:`mixnet.core.receipts`;
  0 elsewhere): gauges.
* ``mixnet_hop_seconds``, ``mixnet_round_seconds``: histograms (:data:`SECONDS_BUCKETS`).
* ``mixnet_node_info{node,hop,role}``: always 1; names this node's role.
* ``process_*`` (where ``/proc`` exists) and ``python_info``: the process and platform
  collectors of prometheus_client — the node's own process only.
* at a mix with peel worker processes (:meth:`NodeMetrics.add_peel_workers`):
  ``mixnet_peel_workers`` (gauge: live workers) and ``mixnet_peel_workers_cpu_seconds_total``
  (user + system CPU of the node's child processes: the live workers from ``/proc``, those
  that ended from ``getrusage(RUSAGE_CHILDREN)``), which is most of a mix's CPU.

Label values given to the methods (error codes, outcomes, reasons) should come from a small
fixed set: every distinct value is a separate series kept for the life of the process.
"""

from __future__ import annotations

import math
import os
import re
import resource
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mixnet.limits import REFUSALS

__all__ = ["OTHER_LABEL", "ROUND_OUTCOMES", "SECONDS_BUCKETS", "NodeMetrics"]

#: Outcomes of a round at a node; their ``mixnet_rounds_total`` series start at 0.
#: ``forwarded`` (a mix sent the batch on), ``done`` (the sink produced the result),
#: ``aborted`` (closed below ``min_users`` with ``below_min = "abort"``), ``failed``.
ROUND_OUTCOMES: tuple[str, ...] = ("confirmed", "done", "aborted", "failed")

#: Upper bounds (seconds) of the histogram buckets: 10 ms to 10 min, then ``+Inf``.
SECONDS_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip

#: The label value recorded instead of a code, outcome or reason that is not a short token.
OTHER_LABEL = "other"

_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_BASE_LABELS = ("node", "hop")


def _token(value: object, what: str) -> str:
    """``value`` if it is a short token (``[A-Za-z0-9_.-]{1,64}``), :data:`OTHER_LABEL` for
    any other str (so that odd input cannot break the exposition), ``TypeError`` otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value if _TOKEN.fullmatch(value) else OTHER_LABEL


def _count(value: object, what: str) -> int:
    """``value`` if it is an int >= 0 (not a bool); ``TypeError``/``ValueError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return value


def _seconds(value: object, what: str) -> float | None:
    """``value`` as a float if it is a finite number >= 0, ``None`` if it is ``None``;
    ``TypeError``/``ValueError`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number or None, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
    return float(value)


class NodeMetrics:
    """The metrics of one node: ``node`` (its name), ``hop`` (its position in the chain,
    >= 0) and ``role`` (e.g. ``"entry"``, ``"mix"``, ``"sink"``; shown only in
    ``mixnet_node_info``).

    The metric families are attributes (``frames``, ``errors``, ``rounds``, ``messages``,
    ``dropped``, ``refused``, ``connections``, ``open_rounds``, ``queued_messages``,
    ``hop_seconds``,
    ``round_seconds``), registered on :attr:`registry`; update them through the methods,
    which fill in the ``node`` and ``hop`` labels and check their arguments. Construction
    raises ``TypeError``/``ValueError`` for an invalid ``node``, ``hop`` or ``role``. Methods
    are safe to call from several threads (prometheus_client locks its values).
    """

    def __init__(self, node: str, hop: int, role: str) -> None:
        if not isinstance(node, str) or not node:
            raise ValueError(f"node must be a non-empty str, got {node!r}")
        if not isinstance(role, str) or not role:
            raise ValueError(f"role must be a non-empty str, got {role!r}")
        self.node = node
        self.hop = _count(hop, "hop")
        self.role = role
        #: This node's own registry; :meth:`render` exposes exactly what is registered here.
        self.registry = CollectorRegistry()
        registry, base = self.registry, _BASE_LABELS
        self.frames = Counter(
            "mixnet_frames", "Websocket frames received.", base, registry=registry
        )
        self.errors = Counter(
            "mixnet_errors",
            "Frames answered with an error frame, by error code.",
            (*base, "code"),
            registry=registry,
        )
        self.rounds = Counter(
            "mixnet_rounds",
            "Rounds this node finished (mixed and forwarded, or analyzed), by outcome.",
            (*base, "outcome"),
            registry=registry,
        )
        self.messages = Counter(
            "mixnet_messages", "Messages this node mixed or delivered.", base, registry=registry
        )
        self.dropped = Counter(
            "mixnet_dropped",
            "Items dropped (replayed, failing to peel, or peeling to another input's onion).",
            base,
            registry=registry,
        )
        self.excluded = Counter(
            "mixnet_excluded_submissions",
            "Submissions the chain proved bad and left out of a round (counted at the sink).",
            base,
            registry=registry,
        )
        self.refused = Counter(
            "mixnet_refused",
            "Connections or requests refused, by reason.",
            (*base, "reason"),
            registry=registry,
        )
        self.connections = Gauge(
            "mixnet_connections", "Connections open at this node.", base, registry=registry
        )
        self.receipts = Gauge(
            "mixnet_receipts",
            "Receipts the entry mix keeps for exact retries, over the rounds it keeps them for"
            " (0 at other nodes).",
            base,
            registry=registry,
        )
        self.open_rounds = Gauge(
            "mixnet_open_rounds", "Rounds not yet finished at this node.", base, registry=registry
        )
        self.queued_messages = Gauge(
            "mixnet_queued_messages",
            "Messages buffered here for rounds not yet finished.",
            base,
            registry=registry,
        )
        self.hop_seconds = Histogram(
            "mixnet_hop_seconds",
            "Time a round spends at this node, from intake complete to forwarded or delivered.",
            base,
            registry=registry,
            buckets=SECONDS_BUCKETS,
        )
        self.round_seconds = Histogram(
            "mixnet_round_seconds",
            "Round time here: entry mix from opened to forwarded; sink from opened to result.",
            base,
            registry=registry,
            buckets=SECONDS_BUCKETS,
        )
        info = Info("mixnet_node", "This node: its name, hop and role.", registry=registry)
        info.info({"node": node, "hop": str(self.hop), "role": role})
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        labels = (node, str(self.hop))
        self._labels = labels
        self._frames = self.frames.labels(*labels)
        self._messages = self.messages.labels(*labels)
        self._dropped = self.dropped.labels(*labels)
        self._open_rounds = self.open_rounds.labels(*labels)
        self._queued = self.queued_messages.labels(*labels)
        self._connections = self.connections.labels(*labels)
        self._receipts = self.receipts.labels(*labels)
        self._hop_seconds = self.hop_seconds.labels(*labels)
        self._round_seconds = self.round_seconds.labels(*labels)
        self.excluded.labels(*labels)
        for outcome in ROUND_OUTCOMES:
            self.rounds.labels(*labels, outcome)
        for reason in REFUSALS:
            self.refused.labels(*labels, reason)

    def frame(self) -> None:
        """Count one websocket frame received."""
        self._frames.inc()

    def error(self, code: str) -> None:
        """Count one frame answered with an error frame carrying ``code`` (a wire error code
        such as ``"malformed-frame"``; see :func:`_token` for odd values)."""
        self.errors.labels(*self._labels, _token(code, "code")).inc()

    def refuse(self, reason: str) -> None:
        """Count one connection or request refused for ``reason`` (a short fixed token such
        as ``"round-closed"`` or ``"too-large"``)."""
        self.refused.labels(*self._labels, _token(reason, "reason")).inc()

    def submissions_excluded(self, count: int) -> None:
        """Count ``count`` (an int >= 0) submissions excluded from a round by the trace."""
        self.excluded.labels(*self._labels).inc(_count(count, "count"))

    def round_finished(
        self,
        outcome: str,
        *,
        messages: int = 0,
        dropped: int = 0,
        hop_seconds: float | None = None,
        round_seconds: float | None = None,
    ) -> None:
        """Record that a round finished here with ``outcome`` (one of
        :data:`ROUND_OUTCOMES`, or another short token).

        ``messages`` (mixed or delivered) and ``dropped`` (replayed, failing to peel, or
        duplicates) are added to their counters. ``hop_seconds`` (intake complete to
        forwarded/delivered) and ``round_seconds`` (entry mix: opened to forwarded; sink:
        opened to result) are observed when given; pass ``None`` for what this node does not
        measure. All arguments are checked before anything is recorded: ``TypeError`` for a
        wrong type, ``ValueError`` for a negative count or a negative or non-finite time.
        """
        label = _token(outcome, "outcome")
        messages = _count(messages, "messages")
        dropped = _count(dropped, "dropped")
        hop = _seconds(hop_seconds, "hop_seconds")
        whole = _seconds(round_seconds, "round_seconds")
        self.rounds.labels(*self._labels, label).inc()
        self._messages.inc(messages)
        self._dropped.inc(dropped)
        if hop is not None:
            self._hop_seconds.observe(hop)
        if whole is not None:
            self._round_seconds.observe(whole)

    def set_open_rounds(self, count: int) -> None:
        """Set the number of rounds not yet finished at this node (an int >= 0)."""
        self._open_rounds.set(_count(count, "count"))

    def set_queued(self, count: int) -> None:
        """Set the number of messages buffered for unfinished rounds (an int >= 0)."""
        self._queued.set(_count(count, "count"))

    def set_connections(self, count: int) -> None:
        """Set the number of connections open at this node (an int >= 0)."""
        self._connections.set(_count(count, "count"))

    def set_receipts(self, count: int) -> None:
        """Set the number of receipts the entry mix keeps (an int >= 0)."""
        self._receipts.set(_count(count, "count"))

    def add_peel_workers(self, pids: Callable[[], Sequence[int]]) -> None:
        """Register ``mixnet_peel_workers`` and ``mixnet_peel_workers_cpu_seconds_total``
        (module docstring), read at each scrape; ``pids`` gives the live workers' process
        ids (:attr:`mixnet.peel_processes.PeelProcesses.pids`)."""
        self.registry.register(_PeelWorkers(self.node, str(self.hop), pids))

    def render(self) -> tuple[bytes, str]:
        """``(body, content type)`` for ``GET /metrics``: everything in :attr:`registry` in
        the Prometheus text format (:func:`prometheus_client.generate_latest`, UTF-8) and
        :data:`prometheus_client.CONTENT_TYPE_LATEST`."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _PeelWorkers(Collector):
    """The peel worker series of :meth:`NodeMetrics.add_peel_workers`."""

    def __init__(self, node: str, hop: str, pids: Callable[[], Sequence[int]]) -> None:
        self._labels = [node, hop]
        self._pids = pids
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def _live_cpu(self, pid: int) -> float:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # no /proc, or the worker ended: then it counts once reaped
            return 0.0
        fields = text[text.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / self._tick  # utime, stime

    def collect(self) -> Iterator[Metric]:
        pids = list(self._pids())
        ended = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = ended.ru_utime + ended.ru_stime + sum(self._live_cpu(pid) for pid in pids)
        workers = GaugeMetricFamily(
            "mixnet_peel_workers", "Peel worker processes running for this mix.",
            labels=list(_BASE_LABELS),
        )  # fmt: skip
        workers.add_metric(self._labels, len(pids))
        yield workers
        seconds = CounterMetricFamily(
            "mixnet_peel_workers_cpu_seconds",
            "User and system CPU of this mix's peel worker processes, in seconds.",
            labels=list(_BASE_LABELS),
        )
        seconds.add_metric(self._labels, cpu)
        yield seconds
