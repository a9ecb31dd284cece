"""The sink's status page: ``GET /`` as one small, self-contained HTML page.

What the page shows — the chain (every node's hop, name, address and whether it answers),
the open round, the recent results and each hop's timings per round — comes from the
nodes' own ``/status`` (:meth:`mixnet.node.BaseNode.status`) and the sink's stored results.
The mixnet knows nothing of what a result means: the application at the sink chooses the
results table's columns by implementing :class:`DescribesResults`; an application that does
not gets a column for each scalar field its results hold.

Contracts:

* :func:`render_page` is pure: the same :class:`PageData` and nonce give the same page.
  Every string that comes from data (results, node names, URLs, field names, errors) is
  HTML-escaped (quotes included), so no data can add markup; the only script and style
  elements are the page's own, and carry the ``nonce`` that :func:`content_security_policy`
  allows — a browser runs nothing else.
* The page uses no external asset (no font, image, script or stylesheet from elsewhere).
  Its inline script refetches ``/`` every ``refresh_seconds`` and swaps in the new
  ``#content`` (parsed as inert HTML; scripts in it would not run); it counts the swaps in
  ``<body data-refreshes>``. Without script a ``<noscript>`` meta refresh reloads the page.
* :class:`ChainPoller` asks every other node for its status over the node's websocket (the
  ``status`` frame, which needs no authentication), all nodes at once, each bounded by
  ``timeout`` seconds, and at most once per ``interval`` seconds however often the page is
  loaded (later loads share the last answers).
"""

from __future__ import annotations

import asyncio
import html
import json
import math
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from websockets.asyncio.client import connect

from mixnet.core.status import TERMINAL, RoundStatus
from mixnet.errors import MalformedFrame, clean_reason
from mixnet.status_assets import CSS, SCRIPT, check_nonce, content_security_policy, new_nonce
from mixnet.wire import decode_frame, encode_frame, raise_for_error

__all__ = [
    "ChainNode",
    "ChainPoller",
    "DescribesResults",
    "NodeView",
    "PageData",
    "ResultColumn",
    "content_security_policy",
    "fetch_status",
    "format_value",
    "generic_columns",
    "new_nonce",
    "render_page",
]

#: Seconds between the page's own refreshes.
REFRESH_SECONDS = 3.0
#: Results shown (the most recent rounds the sink knows).
RECENT_RESULTS = 10
#: Rounds shown in the timings table.
TIMING_ROUNDS = 6
#: Columns the generic results table shows at most.
GENERIC_COLUMNS = 12
#: Characters of one shown value at most (longer ones are cut, with an ellipsis).
MAX_SHOWN = 96
#: Largest status reply accepted from a node, in bytes.
STATUS_MAX_SIZE = 1 << 20

#: How a column's values are shown: ``auto`` by type; ``time`` unix seconds as UTC
#: ``HH:MM:SS``; ``seconds`` a duration; ``count`` a number, or a list's length.
Format = Literal["auto", "time", "seconds", "count"]

#: Statuses given their own CSS class (anything else gets the neutral one): every round
#: status, and a result's ``ok``, ``error`` and ``pending`` (no result yet).
_STATUS_CLASSES = frozenset({s.value for s in RoundStatus} | {"ok", "error", "pending"})
#: Statuses of rounds still moving through the chain (shown as in progress).
_MOVING = frozenset({s.value for s in RoundStatus if s not in TERMINAL})
_TAKING = frozenset({RoundStatus.OPENING.value, RoundStatus.OPEN.value})
_ROUND_TIMES = ("opened", "closed", "mixed", "finished")


@dataclass(frozen=True)
class ResultColumn:
    """One column of the results table: header ``label``, the result field ``key``, the
    ``default`` shown for a result without that field (``None`` shows a dash), the
    ``format`` of its values and a ``description`` (the header's tooltip)."""

    label: str
    key: str
    default: object = None
    format: Format = "auto"
    description: str = ""


@runtime_checkable
class DescribesResults(Protocol):
    """Optional for a :class:`~mixnet.sink.SinkApplication`: the columns in which the
    status page shows its results."""

    def result_columns(self) -> Sequence[ResultColumn]:
        """The results table's columns, in order (a ``round`` column is the caller's
        business: include it)."""
        ...


@dataclass(frozen=True)
class ChainNode:
    """A node as the page lists it: its ``name``, ``hop`` (0 is the entry mix; the sink's
    hop is the number of mixes) and ``url`` (``None``: the sink does not know it)."""

    name: str
    hop: int
    url: str | None


@dataclass(frozen=True)
class NodeView:
    """A node and what it said: its ``/status`` JSON, or ``None`` and the ``error`` that
    kept it from answering."""

    node: ChainNode
    status: Mapping[str, object] | None
    error: str | None = None


@dataclass(frozen=True)
class PageData:
    """Everything one rendering of the page shows.

    ``nodes`` in chain order (the sink last); ``results`` newest first, each a result as
    published with its ``round``; ``pending`` the ids of rounds listed in ``results`` that
    have no result yet (shown as pending, with no other field); ``columns`` the results
    table's; ``now`` unix seconds; ``note`` an optional line under the chain (e.g. why only
    some nodes are listed); ``links`` same-origin paths listed at the bottom.
    """

    chain_id: str
    nodes: Sequence[NodeView]
    results: Sequence[Mapping[str, object]]
    columns: Sequence[ResultColumn]
    now: float
    pending: frozenset[int] = frozenset()
    note: str | None = None
    refresh_seconds: float = REFRESH_SECONDS
    links: Sequence[str] = ("/status", "/rounds", "/metrics")


# ---------------------------------------------------------------------- fetching


async def fetch_status(
    url: str,
    *,
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
    max_size: int = STATUS_MAX_SIZE,
) -> dict[str, object]:
    """Ask the node at ``url`` (``ws://`` or ``wss://``) for its status: one ``status``
    frame on a fresh connection, closed afterwards. ``ssl_context`` is used for ``wss://``
    only (``None``: the system's default trust).

    :raises TimeoutError: no answer within ``timeout`` seconds (connecting included).
    :raises OSError, websockets.exceptions.WebSocketException: the connection failed.
    :raises MixnetError: the node answered with an error frame, or with a frame that is
        not valid (:class:`~mixnet.errors.MalformedFrame`).
    """
    options: dict[str, object] = {}
    if url.startswith("wss://") and ssl_context is not None:
        options["ssl"] = ssl_context
    async with asyncio.timeout(timeout):
        async with connect(
            url,
            compression=None,
            max_size=max_size,
            open_timeout=timeout,
            proxy=None,
            **options,  # type: ignore[arg-type]
        ) as conn:
            await conn.send(encode_frame({"type": "status"}))
            raw = await conn.recv()
    if not isinstance(raw, bytes):
        raise MalformedFrame(f"{url} sent a text frame")
    reply = decode_frame(raw, max_size=max_size)
    raise_for_error(reply)
    reply.pop("type", None)
    reply.pop("v", None)
    return reply


class ChainPoller:
    """The other nodes' status for the page (see the module's contracts).

    ``nodes`` are the nodes to ask (those without a URL are listed with an error, never
    asked); ``clock`` is monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        nodes: Sequence[ChainNode],
        *,
        timeout: float = 2.0,
        interval: float = 2.0,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a finite number > 0, got {timeout}")
        if not (math.isfinite(interval) and interval >= 0):
            raise ValueError(f"interval must be a finite number >= 0, got {interval}")
        self.nodes = tuple(nodes)
        self.timeout = timeout
        self.interval = interval
        self.ssl_context = ssl_context
        self._clock = clock
        self._lock = asyncio.Lock()
        self._last: tuple[float, list[NodeView]] | None = None

    async def poll(self) -> list[NodeView]:
        """Every node's view, in the order given: fresh if the last poll is ``interval``
        seconds old or more, the last poll's otherwise. Never raises for a node that does
        not answer (its view carries the reason)."""
        async with self._lock:
            last = self._last
            if last is not None and self._clock() - last[0] < self.interval:
                return list(last[1])
            views = list(await asyncio.gather(*(self._view(node) for node in self.nodes)))
            self._last = (self._clock(), views)
            return list(views)

    async def _view(self, node: ChainNode) -> NodeView:
        if node.url is None:
            return NodeView(node, None, "address not known to the sink")
        try:
            status = await fetch_status(
                node.url, timeout=self.timeout, ssl_context=self.ssl_context
            )
        except TimeoutError:
            return NodeView(node, None, f"no answer within {self.timeout:g} s")
        except Exception as exc:  # any failure is shown, never raised into the page
            reason = clean_reason(f"{type(exc).__name__}: {exc}")
            return NodeView(node, None, reason)
        return NodeView(node, status, None)


# ---------------------------------------------------------------------- formatting


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return str(seconds)
    if abs(seconds) < 1:
        return f"{seconds * 1000:.0f} ms"
    if abs(seconds) < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(seconds, 60)
    return f"{minutes:.0f} min {rest:.0f} s"


def _clock_time(unix: float) -> str:
    if not math.isfinite(unix):
        return str(unix)
    return time.strftime("%H:%M:%S", time.gmtime(unix)) + " UTC"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def format_value(value: object, fmt: Format = "auto") -> str:
    """``value`` as the page shows it (plain text, not yet escaped, at most
    :data:`MAX_SHOWN` characters): ``None`` is a dash; numbers are integers when whole,
    else 4 significant digits (``1e-06``); ``time`` and ``seconds`` format numbers as a UTC
    clock time and a duration; ``count`` shows a list's length; booleans are yes/no; bytes
    are hex; other lists and objects are compact JSON."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if fmt == "count" and isinstance(value, list | tuple):
        return str(len(value))
    if _is_number(value):
        number = float(value)  # type: ignore[arg-type]
        if fmt == "time":
            return _clock_time(number)
        if fmt == "seconds":
            return _duration(number)
        return str(value) if isinstance(value, int) else _number(number)
    if isinstance(value, str):
        return _cut(value)
    if isinstance(value, bytes):
        return _cut(value.hex())
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return _cut(text)


def generic_columns(results: Iterable[Mapping[str, object]]) -> list[ResultColumn]:
    """The columns for an application that does not choose them: ``round``, ``status``,
    then every other field holding a scalar (number, string, boolean, null) in some result,
    in the order first seen, at most :data:`GENERIC_COLUMNS` in all."""
    keys = ["round", "status"]
    for result in results:
        for key, value in result.items():
            if key not in keys and (value is None or isinstance(value, str | int | float)):
                keys.append(key)
    return [ResultColumn(key, key) for key in keys[:GENERIC_COLUMNS]]


def _status_class(status: object) -> str:
    text = str(status)
    return f"st st-{text}" if text in _STATUS_CLASSES else "st"


def _node_rounds(status: Mapping[str, object] | None) -> dict[int, Mapping[str, object]]:
    """A node's ``/status`` rounds by id (entries that are not objects with an integer
    ``round`` are ignored: a node may send anything)."""
    found: dict[int, Mapping[str, object]] = {}
    rounds = status.get("rounds") if status is not None else None
    if isinstance(rounds, list):
        for entry in rounds:
            if isinstance(entry, Mapping):
                rid = entry.get("round")
                if isinstance(rid, int) and not isinstance(rid, bool):
                    found[rid] = entry
    return found


def _time_of(entry: Mapping[str, object], key: str) -> float | None:
    value = entry.get(key)
    return float(value) if _is_number(value) else None  # type: ignore[arg-type]


# ---------------------------------------------------------------------- rendering


def render_page(data: PageData, *, nonce: str) -> str:
    """The whole page for ``data`` (see the module's contracts); ``nonce`` marks the page's
    own script and style (:func:`new_nonce`; the response must send
    :func:`content_security_policy` of the same nonce).

    :raises ValueError: ``nonce`` is not 16–64 URL-safe base64 characters.
    """
    check_nonce(nonce)
    sink = data.nodes[-1].node.name if data.nodes else "sink"
    refresh = max(1.0, data.refresh_seconds)
    return "".join(
        [
            "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
            f"<title>{_e(data.chain_id)} · {_e(sink)} · status</title>\n",
            f"<noscript><meta http-equiv=\"refresh\" content=\"{refresh:g}\"></noscript>\n",
            f"<style nonce=\"{nonce}\">{CSS}</style>\n</head>\n",
            f"<body data-refresh-seconds=\"{refresh:g}\" data-refreshes=\"0\">\n",
            f"<header><h1>Chain <code>{_e(data.chain_id)}</code></h1>",
            f"<p id=\"refresh-state\" class=\"muted\">refreshes every {refresh:g} s</p>",
            "</header>\n",
            render_content(data),
            f"\n<script nonce=\"{nonce}\">{SCRIPT}</script>\n</body>\n</html>\n",
        ]
    )


def render_content(data: PageData) -> str:
    """The page's ``<main id="content">`` element (what each refresh replaces)."""
    links = " · ".join(f"<a href=\"{_e(link)}\">{_e(link)}</a>" for link in data.links)
    return "".join(
        [
            f"<main id=\"content\" data-generated=\"{data.now:.3f}\">\n",
            _chain_section(data),
            _open_round_section(data),
            _results_section(data),
            _timings_section(data),
            f"<footer class=\"muted\">updated {_e(_clock_time(data.now))}",
            f" · JSON: {links}</footer>\n" if links else "</footer>\n",
            "</main>",
        ]
    )


def _role(view: NodeView, hops: int) -> str:
    """The node's role as it states it in its status, else as its hop implies."""
    role = view.status.get("role") if view.status is not None else None
    if isinstance(role, str) and role:
        return _cut(role)
    hop = view.node.hop
    if hop == 0:
        return "entry"
    return "sink" if hop == hops else "mix"


def _chain_section(data: PageData) -> str:
    hops = max((v.node.hop for v in data.nodes), default=0)
    items = []
    for view in data.nodes:
        node = view.node
        if view.status is not None:
            rounds = len(_node_rounds(view.status))
            state = f"<span class=\"up\">answering</span> · {rounds} recent rounds"
            css = "node up"
        else:
            state = f"<span class=\"down\">not answering</span>: {_e(view.error or '')}"
            css = "node down"
        url = f"<code class=\"url\">{_e(node.url)}</code>" if node.url else ""
        items.append(
            f"<li class=\"{css}\" data-node=\"{_e(node.name)}\">"
            f"<span class=\"hop\">hop {node.hop} · {_e(_role(view, hops))}</span>"
            f"<strong class=\"name\">{_e(node.name)}</strong>{url}"
            f"<span class=\"state\">{state}</span></li>"
        )
    note = f"<p class=\"muted\">{_e(data.note)}</p>" if data.note else ""
    return (
        "<section id=\"chain\"><h2>Chain</h2>"
        f"<ol class=\"hops\">{''.join(items)}</ol>{note}</section>\n"
    )


def _open_round_section(data: PageData) -> str:
    entry = next((v for v in data.nodes if v.node.hop == 0), None)
    taking: list[int] = []
    if entry is None or entry.status is None:
        why = "the entry mix is not listed" if entry is None else "the entry mix does not answer"
        text = f"<p id=\"open-round-state\">Not known: {_e(why)}.</p>"
    else:
        rounds = _node_rounds(entry.status)
        taking = [r for r, e in rounds.items() if e.get("status") in _TAKING]
        if not taking:
            text = "<p id=\"open-round-state\">No round is open.</p>"
        else:
            rid = max(taking)
            info = rounds[rid]
            opened = _time_of(info, "opened")
            since = (
                f" since {_e(_clock_time(opened))} ({_e(_duration(data.now - opened))})"
                if opened is not None
                else ""
            )
            state = _e(format_value(info.get("status")))
            text = (
                f"<p id=\"open-round-state\">Round <strong class=\"round\">{rid}</strong> "
                f"is <span class=\"{_status_class(info.get('status'))}\">{state}</span> at "
                f"{_e(entry.node.name)}{since}.</p>"
            )
    busy: dict[int, list[str]] = {}
    for view in data.nodes:
        for rid, info in _node_rounds(view.status).items():
            status = info.get("status")
            if rid not in taking and status in _MOVING:
                busy.setdefault(rid, []).append(
                    f"{_e(view.node.name)} {_e(format_value(status))}"
                )
    moving = "".join(
        f"<li>round <strong>{rid}</strong>: {', '.join(where)}</li>"
        for rid, where in sorted(busy.items(), reverse=True)
    )
    downstream = f"<p>In progress:</p><ul class=\"busy\">{moving}</ul>" if moving else ""
    return f"<section id=\"open-round\"><h2>Open round</h2>{text}{downstream}</section>\n"


def _results_section(data: PageData) -> str:
    if not data.results:
        return (
            "<section id=\"results\"><h2>Recent results</h2>"
            "<p class=\"muted\">No round has ended yet.</p></section>\n"
        )
    head = "".join(
        f"<th scope=\"col\" data-key=\"{_e(c.key)}\""
        + (f" title=\"{_e(c.description)}\"" if c.description else "")
        + f">{_e(c.label)}</th>"
        for c in data.columns
    )
    rows = []
    for result in data.results:
        rid = result.get("round")
        pending = isinstance(rid, int) and rid in data.pending
        status = "pending" if pending else result.get("status")
        cells = []
        for column in data.columns:
            if column.key == "status":
                shown = (
                    f"<span class=\"{_status_class(status)}\">{_e(format_value(status))}</span>"
                )
            elif pending and column.key != "round":
                shown = "—"
            else:
                value = result.get(column.key, column.default)
                shown = _e(format_value(value, column.format))
            cells.append(f"<td data-key=\"{_e(column.key)}\">{shown}</td>")
        rows.append(f"<tr data-round=\"{_e(format_value(rid))}\">{''.join(cells)}</tr>")
    return (
        "<section id=\"results\"><h2>Recent results</h2>"
        f"<div class=\"scroll\"><table id=\"results-table\"><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div></section>\n"
    )


def _timing_lines(entry: Mapping[str, object]) -> list[str]:
    """What one node's ``/status`` entry for one round says about time and volume."""
    times = {key: _time_of(entry, key) for key in _ROUND_TIMES}
    lines: list[tuple[str, str]] = []
    opened, closed, finished = times["opened"], times["closed"], times["finished"]
    if opened is not None and closed is not None:
        lines.append(("open", _duration(closed - opened)))
    for key, value in entry.items():
        if key.endswith("_seconds") and _is_number(value):
            lines.append((key[: -len("_seconds")], _duration(float(value))))  # type: ignore[arg-type]
    if closed is not None and finished is not None:
        lines.append(("hop", _duration(finished - closed)))
    for key, value in entry.items():
        if key in ("round", "status", *_ROUND_TIMES) or key.endswith("_seconds"):
            continue
        if _is_number(value) or isinstance(value, str):
            lines.append((key, format_value(value)))
    return [
        f"<div class=\"t\"><span>{_e(label)}</span> <b>{_e(value)}</b></div>"
        for label, value in lines
    ]


def _timings_section(data: PageData) -> str:
    per_node = [_node_rounds(view.status) for view in data.nodes]
    rounds = sorted({rid for rounds in per_node for rid in rounds}, reverse=True)
    if not rounds:
        return (
            "<section id=\"timings\"><h2>Hop timings</h2>"
            "<p class=\"muted\">No node reported a round yet.</p></section>\n"
        )
    head = "".join(
        f"<th scope=\"col\">hop {view.node.hop}<br>{_e(view.node.name)}</th>"
        for view in data.nodes
    )
    rows = []
    for rid in rounds[:TIMING_ROUNDS]:
        cells = []
        for view, known in zip(data.nodes, per_node, strict=True):
            entry = known.get(rid)
            if entry is None:
                text = "not answering" if view.status is None else "—"
                cells.append(f"<td class=\"muted\">{text}</td>")
                continue
            status = entry.get("status")
            badge = f"<span class=\"{_status_class(status)}\">{_e(format_value(status))}</span>"
            cells.append(f"<td>{badge}{''.join(_timing_lines(entry))}</td>")
        rows.append(
            f"<tr data-round=\"{rid}\"><th scope=\"row\">{rid}</th>{''.join(cells)}</tr>"
        )
    return (
        "<section id=\"timings\"><h2>Hop timings</h2>"
        "<p class=\"muted\">Per round and node: <i>open</i> from opening to closing, the "
        "work, and <i>hop</i> from closing to handing on.</p>"
        f"<div class=\"scroll\"><table id=\"timings-table\"><thead><tr><th scope=\"col\">"
        f"round</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
        "</section>\n"
    )
