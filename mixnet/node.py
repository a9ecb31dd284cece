"""The asyncio + websockets adapter shared by every node: it decides nothing.

A :class:`BaseNode` decodes each frame once into a typed object (:mod:`mixnet.frames`),
feeds it to the node's round machine (:mod:`mixnet.core`), and carries out the actions the
machine returns (:meth:`BaseNode.execute`): writes go to the :class:`~mixnet.writer.StoreWriter`
(in emission order; nothing is acknowledged before its write committed), frames to the
successor over one :class:`~mixnet.link.Link`, replies to the request being served, peeling
and permuting to worker threads. Its websocket side — serving connections, dispatching
frames, refusing with typed errors — is :mod:`mixnet.node_ws`. It also serves HTTP GETs on
the same port (:mod:`mixnet.node_http`): ``/healthz``,
``/status``, ``/metrics`` (Prometheus text); subclasses add routes. Node-to-node requests
(``open-round``, ``abort-round``, ``batch``) are accepted only from a peer that proved it
holds the predecessor's identity key (challenge–response).

Every connection passes the node's :class:`~mixnet.limits.ConnectionGuard` (the chain
file's ``[limits]``: connections, idleness, submissions per connection). Given a TLS server
context (:meth:`BaseNode.start`), the node serves ``wss://``; its URL in the chain file
must say so (:func:`mixnet.tls.check_server_tls`).

Shutdown (:meth:`BaseNode.stop`) is bounded: requests still being served are cancelled
(nothing unacknowledged is promised; clients resend), the forward link is closed, and
connections whose peers do not finish the closing handshake within
:data:`~mixnet.link.CLOSE_TIMEOUT` seconds are dropped — a node stops within about
:data:`STOP_TIMEOUT` seconds plus the time to commit the writes already queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from websockets.asyncio.server import Server, ServerConnection, serve

from mixnet.core.actions import (
    Action,
    CompactReceipts,
    Deliver,
    LoadIntake,
    Mix,
    Peel,
    Persist,
    Prove,
    Publish,
    Reply,
    Send,
    Verify,
)
from mixnet.core.status import TERMINAL, Role, RoundStatus
from mixnet.errors import (
    InternalError,
    MixnetError,
    NotReady,
    UnexpectedFrameType,
)
from mixnet.frames import (
    Frame,
    parse_reply,
    to_wire,
)
from mixnet.limits import ConnectionGuard
from mixnet.link import CLOSE_TIMEOUT, Link
from mixnet.logs import quiet_logger, round_extra
from mixnet.metrics import NodeMetrics
from mixnet.node_http import RoundTimes, ServesHttp, guarded_connection
from mixnet.node_many import ReplySink, ServesSubmitMany
from mixnet.node_ws import PREDECESSOR_FRAMES, ServesWebsockets
from mixnet.peer_auth import PeerAuthenticator
from mixnet.settings import NodeSettings
from mixnet.store import NodeStore, StoreError, StoreFailed
from mixnet.tls import check_server_tls
from mixnet.writer import StoreWriter

__all__ = ["HTTP_ROUTES", "PREDECESSOR_FRAMES", "STOP_TIMEOUT", "STORE_CACHE_KIB", "BaseNode"]

log = logging.getLogger("mixnet")

#: An action the node carries out in a background task (see ``_run_heavy``).
A = TypeVar("A", Mix, Deliver, CompactReceipts)

#: KiB of SQLite page cache a node's store may hold. A node writes each submission or chunk
#: once and reads it back only after a restart (it works from memory), so SQLite's default
#: (2000 KiB) would only fill with pages it never reads: 2 MB more per node at the peak of a
#: round, where a relay holds about 1.9 bytes per ciphertext byte it received.
STORE_CACHE_KIB = 128

#: The HTTP GET routes every node serves, with what they return.
HTTP_ROUTES: tuple[tuple[str, str], ...] = (
    ("/healthz", "200 ok while the node serves"),
    ("/status", "JSON: the node, its recent rounds and their timings"),
    ("/metrics", "Prometheus text: frames, errors, rounds, refusals, connections"),
)
#: Seconds :meth:`BaseNode.stop` waits for the server's connections to close before it
#: drops the rest.
STOP_TIMEOUT = 1.5
#: Seconds a small group of writes at the entry mix waits for more to share its commit
#: (:class:`~mixnet.writer.StoreWriter`'s ``window``).
COMMIT_WINDOW = 0.002

Outcome = list[Action] | MixnetError


class BaseNode(ServesSubmitMany, ServesHttp, ServesWebsockets):
    """The machinery every node shares. Subclasses provide the machine's event methods
    (:meth:`handle`, :meth:`on_reply`, :meth:`on_send_error`, :meth:`persisted`,
    :meth:`persist_failed`) and the heavy actions (:meth:`peel`, :meth:`mix`,
    :meth:`deliver`)."""

    role: Role
    #: The request types (besides ``status``, ``challenge``, ``authenticate`` and
    #: :meth:`extra_request`'s) this node's machine takes.
    accepts: frozenset[str] = frozenset()

    def __init__(
        self,
        settings: NodeSettings,
        store: NodeStore,
        *,
        clock: Callable[[], float] = time.time,
        link: Link | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.link = link
        self.metrics = NodeMetrics(settings.name, settings.hop, self.role.value)
        store.limit_cache(STORE_CACHE_KIB)  # before the writer thread first uses it
        self.writer: StoreWriter[Outcome] = StoreWriter(
            store,
            self._committed,
            name=settings.name,
            # many clients write at the entry mix at once; later nodes store one chunk at a
            # time, which its sender waits for
            window=COMMIT_WINDOW if settings.hop == 0 else 0.0,
            on_failure=self._store_failed,
        )
        self.guard = ConnectionGuard(settings.connection_limits, self.metrics.refuse)
        self.server: Server | None = None
        self.port: int | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._closing: set[ServerConnection] = set()
        self._pending: dict[int, asyncio.Future[Outcome]] = {}
        # set by start(): asking asyncio for the running loop on every request costs a
        # getpid() system call each time on Python 3.11
        self._loop: asyncio.AbstractEventLoop | None = None
        self.peers = PeerAuthenticator(settings, self.guard)
        self._changed = asyncio.Event()
        self._round_times = RoundTimes(self.metrics)
        self._stopping = False
        self._failed = asyncio.Event()
        self._max_frame = settings.max_frame()
        self._limits = settings.limits()

    # ------------------------------------------------------------------ machine hooks

    def handle(self, frame: Frame) -> list[Action]:
        """Feed a request frame to the machine (raises MixnetError to refuse it)."""
        raise UnexpectedFrameType(f"{self.settings.name} does not handle this frame")

    def on_reply(self, sent: Frame, reply: Frame) -> list[Action]:
        raise NotImplementedError

    def on_send_error(self, sent: Frame, error: MixnetError) -> list[Action]:
        raise NotImplementedError

    def persisted(self, token: object) -> list[Action]:
        raise NotImplementedError

    def persist_failed(self, token: object) -> list[Action]:
        raise NotImplementedError

    async def peel(self, action: Peel) -> list[Action]:
        raise NotImplementedError

    async def mix(self, action: Mix) -> list[Action]:
        raise NotImplementedError

    async def prove(self, action: Prove) -> list[Action]:
        raise TypeError("only a mix after the entry mix proves steps")

    async def verify(self, action: Verify) -> list[Action]:
        raise TypeError("only a mix checks accusations")

    async def load_intake(self, action: LoadIntake) -> list[Action]:
        raise TypeError("only a mix after the entry mix reads its intake back")

    async def compact_receipts(self, action: CompactReceipts) -> list[Action]:
        raise TypeError("only the entry mix keeps receipts")

    async def deliver(self, action: Deliver) -> list[Action]:
        raise NotImplementedError

    def published(self, round_id: int) -> None:
        """Hook: a result was stored (sink)."""

    def recover(self) -> list[Action]:
        """Rebuild the machine from the store; return the actions that resume work."""
        raise NotImplementedError

    def round_statuses(self) -> dict[int, RoundStatus]:
        """Every round the machine knows, with its status (for /status and metrics)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ life cycle

    async def start(self, host: str, port: int, *, tls: ssl.SSLContext | None = None) -> int:
        """Recover from the store, start serving on ``host:port`` (0: any free port),
        resume unfinished work; returns the bound port.

        ``tls`` is the server context (:func:`mixnet.tls.server_context`) of a node listed
        at a ``wss://`` URL; a node listed at ``ws://`` serves plain websockets.

        :raises TlsError: the node's URL in the chain is ``wss://`` and ``tls`` is ``None``,
            or ``ws://`` and ``tls`` is given (checked before anything else).
        :raises OSError: the port cannot be bound.
        """
        if self.settings.url:
            check_server_tls(self.settings.name, self.settings.url, has_certificate=tls is not None)
        limits = self.settings.connection_limits
        self._loop = asyncio.get_running_loop()
        actions = self.recover()
        self.server = await serve(
            self._serve_connection,
            host,
            port,
            compression=None,
            # Frames over twice the limit are dropped by the websocket layer (close 1009);
            # frames between the limit and that get a frame-too-large error frame.
            max_size=2 * self.settings.max_frame(),
            process_request=self._process_request,
            ping_interval=20,
            ping_timeout=60,
            max_queue=4,
            open_timeout=limits.handshake_seconds,  # also the TLS handshake's, with ssl
            close_timeout=CLOSE_TIMEOUT,
            create_connection=guarded_connection(self.guard),
            logger=quiet_logger("websockets.server"),
            ssl=tls,
        )
        sock = next(iter(self.server.sockets))
        self.port = int(sock.getsockname()[1])
        if actions:
            self.spawn(self.execute(actions), "recovery")
        self.spawn(self._sweep_idle(), "closing idle connections")
        self.after_start()
        self._update_gauges()
        scheme = "wss" if tls is not None else "ws"
        log.info("%s listening on %s://%s:%s", self.settings.name, scheme, host, self.port)
        return self.port

    @property
    def failure(self) -> StoreFailed | None:
        """The store's failure, once it failed a commit (:meth:`wait_failure`)."""
        return self.writer.failure

    def _store_failed(self, failure: StoreFailed) -> None:
        """The writer stopped (fail-stop, :mod:`mixnet.writer`): wake :meth:`wait_failure`."""
        self._failed.set()

    async def wait_failure(self) -> StoreFailed:
        """Wait until the node's store fails a commit and return the failure. Every request
        that needs a write is refused (``internal-error``) from then on, and ``/healthz``
        answers 503: whoever runs the node should :meth:`stop` it and start it again, which
        recovers from what the disk holds (``cloaknet node`` exits with an error)."""
        await self._failed.wait()
        assert self.failure is not None
        return self.failure

    def after_start(self) -> None:
        """Hook: start background tasks (the entry mix's round timer)."""

    async def stop(self) -> None:
        """Stop serving and cancel background work (what is acknowledged is stored).

        Bounded: requests in progress (a ``get-round`` or ``subscribe`` waiting, a link
        retrying) are cancelled, not awaited; the forward link is closed; connections still
        open after :data:`STOP_TIMEOUT` seconds are dropped. Then the writes already queued
        are committed or dropped (:meth:`~mixnet.writer.StoreWriter.close`). Idempotent.
        """
        self._stopping = True
        if self.server is not None:
            self.server.close()  # stop accepting; close connections (1001) in the background
        for task in list(self._handlers):
            task.cancel()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(self._close_link(), self._close_server(), self._reap_tasks())
        await asyncio.to_thread(self.writer.close)

    async def _close_link(self) -> None:
        if self.link is not None:
            await self.link.close()  # at most CLOSE_TIMEOUT for a peer that does not answer

    async def _reap_tasks(self) -> None:
        for task in list(self.tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _close_server(self) -> None:
        """Wait up to :data:`STOP_TIMEOUT` for the connections to close, then drop them."""
        if self.server is None:
            return
        try:
            async with asyncio.timeout(STOP_TIMEOUT):
                await self.server.wait_closed()
        except TimeoutError:
            dropped = self.guard.abort_all()
            log.debug("%s: dropped %d connections still closing", self.settings.name, dropped)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT / 2):
                    await self.server.wait_closed()

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task[Any]:
        """Run ``coro`` in the background; a failure is logged, never lost silently."""

        def done(task: asyncio.Task[Any]) -> None:
            self.tasks.discard(task)
            if not task.cancelled() and task.exception() is not None and not self._stopping:
                log.error(
                    "%s: %s failed", self.settings.name, what, exc_info=task.exception()
                )

        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(done)
        return task

    # ------------------------------------------------------------------ carrying out actions

    def emit(self, actions: Sequence[Action]) -> list[Action]:
        """Take actions just returned by the machine: queue their writes at once (so writes
        commit in emission order) and note round timings."""
        for action in actions:
            if isinstance(action, Persist):
                self._pending[id(action)] = self.writer.submit(action)
                self._note_writes(action)
        self._changed.set()
        return list(actions)

    def _committed(self, persist: Persist, error: StoreError | None) -> Outcome:
        """Writer callback, in commit order: tell the machine, queue what it returns."""
        if persist.token is None:
            if error is not None:
                log.error("%s: a write failed: %s", self.settings.name, error)
                return InternalError("the node could not store its state")
            return []
        try:
            if error is None:
                return self.emit(self.persisted(persist.token))
            log.error("%s: a write failed: %s", self.settings.name, error)
            return self.emit(self.persist_failed(persist.token))
        except MixnetError as exc:
            return exc

    async def execute(
        self,
        actions: Sequence[Action],
        reply: ReplySink | None = None,
        *,
        detach: bool = False,
    ) -> None:
        """Carry out ``actions`` (already emitted) in order, and what the machine returns
        for their outcomes. A :class:`Reply` resolves ``reply`` (a future, or
        :class:`~mixnet.node_many.SharedReplies` for several requests); a refusal by the machine
        resolves it with the error (or is logged if the request was answered already).
        With ``detach``, return as soon as ``reply`` is resolved: the rest goes on in a
        background task (a request is answered without waiting for the work it started)."""
        queue = deque(actions)
        try:
            while queue:
                action = queue.popleft()
                if type(action) is Reply:  # no coroutine per reply (a frame's are many)
                    if reply is not None and not reply.done():
                        reply.set_result(action.frame)
                else:
                    more = await self._do(action)
                    queue.extendleft(reversed(more))
                if detach and queue and reply is not None and reply.done():
                    rest = list(queue)
                    queue.clear()
                    self.spawn(self.execute(rest), "work after a reply")
                    return
        except MixnetError as exc:
            if reply is not None and not reply.done():
                reply.set_exception(exc)
            else:
                log.warning("%s: %s", self.settings.name, exc)
        except Exception:
            log.exception("%s: internal error", self.settings.name)
            if reply is not None and not reply.done():
                reply.set_exception(InternalError("internal error; see the node's log"))
        finally:
            # writes of actions never reached still commit (they were queued when emitted);
            # nobody waits for their outcome
            for action in queue:
                if isinstance(action, Persist):
                    self._pending.pop(id(action), None)

    async def _do(self, action: Action) -> list[Action]:
        """Carry out one action other than a :class:`Reply` (which :meth:`execute` resolves
        itself); return the actions its outcome leads to."""
        match action:
            case Persist():
                outcome = await self._pending.pop(id(action))
                if isinstance(outcome, MixnetError):
                    raise outcome
                return outcome
            case Send() if action.background:
                self.spawn(self.execute([Send(action.frame)]), f"sending {action.frame}")
                return []
            case Send():
                return await self._send(action.frame)
            case Peel():
                return self.emit(await self.peel(action))
            case Prove():
                return self.emit(await self.prove(action))
            case Verify():
                return self.emit(await self.verify(action))
            case LoadIntake():
                return self.emit(await self.load_intake(action))
            case Mix():
                self.spawn(
                    self._run_heavy(self.mix, action), f"mixing round {action.round_id}"
                )
                return []
            case Deliver():
                self.spawn(
                    self._run_heavy(self.deliver, action), f"delivering round {action.round_id}"
                )
                return []
            case Publish():
                self.published(action.round_id)
                return []
            case CompactReceipts():
                self.spawn(
                    self._run_heavy(self.compact_receipts, action),
                    f"compacting round {action.round_id}'s receipts",
                )
                return []
        raise TypeError(f"unknown action {action!r}")  # pragma: no cover

    async def _run_heavy(
        self, work: Callable[[A], Coroutine[Any, Any, list[Action]]], action: A
    ) -> None:
        # the coroutine is made here, when the task runs: a task cancelled before it
        # started (the node stopping) leaves no coroutine that was never awaited
        await self.execute(self.emit(await work(action)))

    async def _send(self, frame: Frame) -> list[Action]:
        assert self.link is not None
        try:
            raw = await self.link.request(to_wire(frame))
            reply = parse_reply(raw, self._limits)
        except MixnetError as exc:
            if self._stopping:
                raise
            # "not ready" is the trace's normal wait for a later mix: no warning
            log.log(
                logging.DEBUG if exc.code == NotReady.code else logging.WARNING,
                "%s: %s refused %s: %s",
                self.settings.name,
                self.settings.successor_url,
                type(frame).__name__,
                exc,
                extra=round_extra(getattr(frame, "round_id", None)),
            )
            return self.emit(self.on_send_error(frame, exc))
        return self.emit(self.on_reply(frame, reply))

    # ------------------------------------------------------------------ metrics

    def _note_writes(self, persist: Persist) -> None:
        if self._round_times.note_writes(persist, self.clock()):
            self._update_gauges()

    def note(self, round_id: int, **values: float) -> None:
        """Record per-round numbers shown in ``/status`` (messages, dropped, timings)."""
        self._round_times.note(round_id, **values)

    def _update_gauges(self) -> None:
        statuses = self.round_statuses()
        self.metrics.set_open_rounds(sum(1 for s in statuses.values() if s not in TERMINAL))
        self.metrics.set_queued(self.writer.pending)
        self.metrics.set_connections(self.guard.count)
        self.metrics.set_receipts(self.receipts_held())

    def receipts_held(self) -> int:
        """Receipts this node keeps for exact retries (the entry mix overrides it)."""
        return 0

    # ------------------------------------------------------------------ requests

    async def _serve(self, frame: Frame) -> dict[str, object]:
        """Run the machine on a request and answer once it replies (the rest of the work
        it started goes on in the background). The work up to the reply runs in the
        connection's own task: no task and no wait per request."""
        return await self._answer(self.emit(self.handle(frame)))

    async def _answer(self, actions: list[Action]) -> dict[str, object]:
        """Carry out a request's ``actions`` (emitted) up to its reply, which is returned
        (the rest goes on in the background).

        :raises MixnetError: the machine refused the request (``InternalError`` if it gave
            no answer or failed otherwise).
        """
        reply: asyncio.Future[Frame] = (self._loop or asyncio.get_running_loop()).create_future()
        await self.execute(actions, reply, detach=True)
        if not reply.done():
            raise InternalError("the node gave no answer")
        return to_wire(reply.result())
