"""What one node lets its clients hold: the chain file's ``[limits]`` table and its guard.

:class:`Limits` is the parsed table (every key optional; the defaults are sensible for a
public entry mix)::

    [limits]
    max_connections = 512                   # open connections per node, 1..65536
    max_submissions_per_connection = 1000   # submit frames before the node closes it, >= 1
    max_submissions_per_frame = 256         # submissions in one submit-many frame, 1..4096
    idle_seconds = 60.0                     # no request in progress for this long: closed
    handshake_seconds = 10.0                # TLS and websocket opening handshakes, each

:class:`ConnectionGuard` enforces them for one node (:class:`mixnet.node.BaseNode` feeds it
every connection as the TCP connection is accepted and every request it serves):

* **Connections.** At most ``max_connections`` are kept open. A new connection beyond that
  evicts the connection that has been idle longest — one with no request in progress that
  is not the authenticated predecessor's link — or, if every connection is busy, is closed
  at once. Either way the socket is aborted immediately, so a flood of idle connections
  costs the node about ``max_connections`` file descriptors, however many there are: during
  a burst a few more are held briefly (asyncio accepts up to 100 connections — its listen
  backlog — before the guard sees them, and closes an aborted socket on the next turn of
  its loop), and on a ``wss://`` node so are the TLS handshakes in progress, which asyncio
  runs before a connection reaches the guard and which ``handshake_seconds`` bounds in
  time.
* **Idleness.** A connection with no request in progress and no frame for
  ``idle_seconds`` is closed (code 1001, reason ``idle``); one that has not finished its
  opening handshake within ``handshake_seconds`` is dropped by the websocket server. The
  authenticated predecessor's link is exempt (it is idle between rounds).
* **Submissions.** After answering the ``max_submissions_per_connection``-th submission
  on a connection (a ``submit`` frame counts one, a ``submit-many`` frame one per
  submission it carries) the node closes it (code 1000, reason ``submission limit``); the
  client library reconnects and goes on. A ``submit-many`` frame
  (:mod:`mixnet.submit_many`) holds at most ``max_submissions_per_frame`` submissions.

Every refusal is counted in ``mixnet_refused_total{reason}`` with a reason from
:data:`REFUSALS`: ``connections`` (a new connection closed: every slot busy), ``evicted``
(an idle connection closed to make room), ``idle`` (closed by the idle timeout),
``submissions`` (closed at the submission limit). ``mixnet_connections`` is the number of
open connections.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from websockets.asyncio.server import ServerConnection

__all__ = [
    "DEFAULT_LIMITS",
    "LIMIT_KEYS",
    "REFUSALS",
    "ConnectionGuard",
    "Limits",
    "LimitsError",
]

#: The reasons counted in ``mixnet_refused_total`` by the guard (their series start at 0).
REFUSALS: tuple[str, ...] = ("connections", "evicted", "idle", "submissions")
#: The keys of the ``[limits]`` table, in the order they are written.
LIMIT_KEYS: tuple[str, ...] = (
    "max_connections",
    "max_submissions_per_connection",
    "max_submissions_per_frame",
    "idle_seconds",
    "handshake_seconds",
)
#: Largest ``max_connections`` accepted.
MAX_CONNECTIONS = 65536
#: Largest ``max_submissions_per_frame`` accepted.
MAX_SUBMISSIONS_PER_FRAME = 4096
#: Largest ``idle_seconds`` / ``handshake_seconds`` accepted (one day).
MAX_SECONDS = 86400.0


class LimitsError(ValueError):
    """A ``[limits]`` value is invalid; :attr:`field` names it (e.g. ``"idle_seconds"``)
    and :attr:`problem` says why, in one line."""

    def __init__(self, problem: str, *, field: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.problem = problem
        self.field = field


def _type_name(value: object) -> str:
    return "boolean" if isinstance(value, bool) else type(value).__name__


def _whole(value: object, field: str, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LimitsError(f"expected an integer, got {_type_name(value)}", field=field)
    if not 1 <= value <= high:
        raise LimitsError(f"must be in 1..{high}, got {value}", field=field)


def _seconds(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LimitsError(f"expected a number, got {_type_name(value)}", field=field)
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise LimitsError(f"must be a number in (0, {MAX_SECONDS:g}], got {value}", field=field)
    return float(value)


@dataclass(frozen=True)
class Limits:
    """The ``[limits]`` table (see the module docstring for what each limit does).

    * ``max_connections``: open connections per node, in 1..65536 (default 512; keep it
      well below the process's open-file limit, ``ulimit -n``).
    * ``max_submissions_per_connection``: ``submit`` frames answered on one connection
      before the node closes it, in 1..2**31 (default 1000); a ``submit-many`` frame counts
      one per submission.
    * ``max_submissions_per_frame``: submissions one ``submit-many`` frame may carry, in
      1..4096 (default 256); the entry mix accepts frames up to that many boxes long.
    * ``idle_seconds``: seconds without a frame and with no request in progress after which
      a connection is closed, in (0, 86400] (default 60).
    * ``handshake_seconds``: seconds allowed for the TLS handshake and, separately, for the
      websocket opening handshake (or a plain HTTP GET), in (0, 86400] (default 10).

    Ints are accepted for the seconds and stored as floats.

    :raises LimitsError: a value has the wrong type or is out of range.
    """

    max_connections: int = 512
    max_submissions_per_connection: int = 1000
    max_submissions_per_frame: int = 256
    idle_seconds: float = 60.0
    handshake_seconds: float = 10.0

    def __post_init__(self) -> None:
        _whole(self.max_connections, "max_connections", MAX_CONNECTIONS)
        _whole(self.max_submissions_per_connection, "max_submissions_per_connection", 1 << 31)
        _whole(
            self.max_submissions_per_frame, "max_submissions_per_frame", MAX_SUBMISSIONS_PER_FRAME
        )
        object.__setattr__(self, "idle_seconds", _seconds(self.idle_seconds, "idle_seconds"))
        object.__setattr__(
            self, "handshake_seconds", _seconds(self.handshake_seconds, "handshake_seconds")
        )

    def table(self) -> dict[str, int | float]:
        """The ``[limits]`` table that parses back to these limits (every key)."""
        return {key: getattr(self, key) for key in LIMIT_KEYS}


#: The limits of a chain file without a ``[limits]`` table.
DEFAULT_LIMITS = Limits()


@dataclass
class _State:
    """What the guard knows about one open connection."""

    last: float  # monotonic time of the last frame or finished request
    busy: int = 0  # requests in progress
    peer: bool = False  # the authenticated predecessor's link
    submissions: int = 0
    closing: bool = False  # the guard already asked it to close


class ConnectionGuard:
    """Enforces :class:`Limits` over one node's server connections (see the module
    docstring). ``refuse(reason)`` is called once per refusal with a reason from
    :data:`REFUSALS`; ``clock`` gives monotonic seconds (tests inject one).

    Runs on the event loop thread only (no locking). The node calls :meth:`admit` from the
    connection's ``connection_made``, :meth:`release` from ``connection_lost``,
    :meth:`begin`/:meth:`end` around each request, :meth:`authenticated` when the peer
    proves it is the predecessor, :meth:`submitted` after answering a ``submit`` and
    :meth:`sweep` periodically.
    """

    def __init__(
        self,
        limits: Limits,
        refuse: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be Limits, not {type(limits).__name__}")
        self.limits = limits
        self._refuse = refuse
        self._clock = clock
        #: Open connections, least recently active first.
        self._open: OrderedDict[ServerConnection, _State] = OrderedDict()

    @property
    def count(self) -> int:
        """Connections open now (at most ``max_connections``)."""
        return len(self._open)

    def admit(self, conn: ServerConnection) -> bool:
        """Take a newly accepted connection: evict the longest-idle connection if the node
        is full, or abort ``conn`` itself if every connection is busy (returns ``False``)."""
        if len(self._open) >= self.limits.max_connections:
            victim = next(
                (c for c, st in self._open.items() if st.busy == 0 and not st.peer), None
            )
            if victim is None:
                self._refuse("connections")
                _abort(conn)
                return False
            del self._open[victim]
            self._refuse("evicted")
            _abort(victim)
        self._open[conn] = _State(last=self._clock())
        return True

    def release(self, conn: ServerConnection) -> None:
        """Forget a closed connection (a connection not tracked is ignored)."""
        self._open.pop(conn, None)

    def begin(self, conn: ServerConnection) -> None:
        """A frame arrived on ``conn`` and is being served: it is busy, hence not idle."""
        state = self._open.get(conn)
        if state is not None:
            state.busy += 1
            state.last = self._clock()
            self._open.move_to_end(conn)

    def end(self, conn: ServerConnection) -> None:
        """The request :meth:`begin` announced was answered (or failed)."""
        state = self._open.get(conn)
        if state is not None:
            state.busy = max(0, state.busy - 1)
            state.last = self._clock()
            self._open.move_to_end(conn)

    def authenticated(self, conn: ServerConnection) -> None:
        """``conn`` is the authenticated predecessor's link: never evicted nor idled."""
        state = self._open.get(conn)
        if state is not None:
            state.peer = True

    def submitted(self, conn: ServerConnection, count: int = 1) -> bool:
        """Count ``count`` submissions answered on ``conn``; ``True`` when they reached
        ``max_submissions_per_connection`` (the node then closes it; counted once)."""
        state = self._open.get(conn)
        if state is None:
            return False
        state.submissions += count
        if state.submissions >= self.limits.max_submissions_per_connection and not state.closing:
            state.closing = True
            self._refuse("submissions")
            return True
        return False

    def abort_all(self) -> int:
        """Drop every open connection now (shutdown); returns how many there were."""
        conns = list(self._open)
        self._open.clear()
        for conn in conns:
            _abort(conn)
        return len(conns)

    def sweep(self) -> list[ServerConnection]:
        """The connections to close now for idleness (each returned once, and counted)."""
        deadline = self._clock() - self.limits.idle_seconds
        idle: list[ServerConnection] = []
        for conn, state in self._open.items():
            if state.last > deadline:
                break  # ordered by activity: the rest were active more recently
            if state.busy or state.peer or state.closing:
                continue
            state.closing = True
            idle.append(conn)
        for _ in idle:
            self._refuse("idle")
        return idle


def _abort(conn: ServerConnection) -> None:
    """Close ``conn``'s socket now (no closing handshake)."""
    transport = getattr(conn, "transport", None)
    if transport is not None:
        transport.abort()
