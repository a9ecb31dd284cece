"""The websockets adapter around :mod:`mixnet.core`: mix nodes and the chain's sink.

One :class:`MixNode` per mix (hop 0 is the entry mix that runs the rounds) and one
:class:`SinkNode` subclass at the end of the chain (cloaknet's analyzer node). Each serves
websockets frames (``docs/protocol.md``) and plain HTTP GETs on one port:
``/healthz`` and ``/status``; subclasses add routes.

Contracts kept here:

* a frame is acknowledged (``accepted``, ``batch-ack``) only after the data is committed to
  the node's :class:`~mixnet.store.NodeStore`;
* every rejection is an error frame and the connection keeps serving;
* decryption runs in a thread pool in chunks (PyNaCl releases the GIL), never on the loop;
* forwarding retries until the successor acknowledges, across reconnects and restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http
import json
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from nacl.public import PrivateKey
from nacl.signing import SigningKey, VerifyKey
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.http11 import Request, Response

from mixnet.core import (
    BatchIntake,
    EntryIntake,
    IntakePolicy,
    drop_duplicates,
    mix_batch,
    split_chunks,
)
from mixnet.errors import (
    MalformedFrame,
    MixnetError,
    RoundClosed,
    Unauthorized,
    UnexpectedFrameType,
    UnknownRound,
)
from mixnet.frames import (
    MAX_NAME_LENGTH,
    ROUND_ID_MAX,
    Batch,
    announcement_frame,
    batch_frame,
    parse_announcements,
    parse_batch,
)
from mixnet.keys import (
    CHALLENGE_LENGTH,
    RoundKeyAnnouncement,
    RoundKeyring,
    announce_round_key,
    sign_link_challenge,
    verify_link_signature,
)
from mixnet.onion import onion_length, peel_many
from mixnet.store import Chunk, NodeStore, Submission
from mixnet.wire import (
    decode_frame,
    encode_frame,
    error_frame,
    get_bytes,
    get_bytes_list,
    get_int,
    get_str,
    raise_for_error,
)

__all__ = ["InternalError", "Link", "MixNode", "NodeSettings", "SinkNode"]

log = logging.getLogger("mixnet")

#: Bytes of frame overhead allowed on top of the payload bytes a frame carries.
FRAME_SLACK = 64 * 1024
#: Finished rounds whose client digests the entry mix keeps, to acknowledge exact retries.
KEEP_FINISHED_ROUNDS = 16
#: Onions handed to one thread-pool task.
PEEL_CHUNK = 1024


class InternalError(MixnetError):
    """A node-side failure that is not the peer's fault (logged with details locally)."""

    code = "internal-error"


@dataclass(frozen=True)
class NodeSettings:
    """What a node needs to know about its place in the chain.

    ``hop`` is the node's index (0 .. hops−1 for mixes, ``hops`` for the sink);
    ``payload_length`` is the length of the plaintext payload at the end of the chain;
    ``messages`` the number of onions in one client submission.
    """

    chain_id: str
    name: str
    hop: int
    hops: int
    predecessor: str | None
    successor_url: str | None
    messages: int
    payload_length: int
    policy: IntakePolicy
    chunk_size: int = 4096
    workers: int = max(2, os.cpu_count() or 2)
    #: Identity of the predecessor: only a peer proving it holds this key (link challenge)
    #: may send ``open-round``, ``abort-round`` and ``batch``.
    predecessor_identity: VerifyKey | None = None

    def onion_length_in(self) -> int:
        """Length of each item this node receives."""
        return onion_length(self.payload_length, self.hops - self.hop)

    def max_frame(self) -> int:
        """Largest frame this node accepts."""
        items = self.messages if self.hop == 0 else self.chunk_size
        return items * (self.onion_length_in() + 8) + FRAME_SLACK


def _json_response(conn: ServerConnection, status: int, body: object) -> Response:
    response = conn.respond(http.HTTPStatus(status), json.dumps(body, indent=2) + "\n")
    del response.headers["Content-Type"]
    response.headers["Content-Type"] = "application/json"
    return response


class Link:
    """The outbound websocket to the successor: one request at a time, retried on connection
    loss with capped exponential backoff until a reply arrives. Error replies raise the
    matching :class:`MixnetError` (not retried)."""

    def __init__(
        self,
        url: str,
        *,
        max_size: int,
        name: str,
        chain_id: str,
        identity: SigningKey | None,
    ) -> None:
        self.url = url
        self.max_size = max_size
        self.name = name
        self.chain_id = chain_id
        self.identity = identity
        self._conn: ClientConnection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def request(self, frame: dict[str, object], *, expect: str) -> dict[str, object]:
        delay = 0.05
        async with self._lock:
            while True:
                if self._closed:
                    raise InternalError("link closed")
                try:
                    conn = self._conn
                    if conn is None:
                        conn = await self._open()
                        self._conn = conn
                    await conn.send(encode_frame(frame))
                    raw = await conn.recv()
                except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError) as exc:
                    log.info("%s: link to %s failed (%s); retrying", self.name, self.url, exc)
                    await self._drop()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                if not isinstance(raw, bytes):
                    raise MalformedFrame("successor sent a text frame")
                reply = decode_frame(raw, max_size=self.max_size)
                raise_for_error(reply)
                if reply.get("type") != expect:
                    raise UnexpectedFrameType(f"expected {expect!r}, got {reply.get('type')!r}")
                return reply

    async def _exchange(
        self, conn: ClientConnection, frame: dict[str, object], expect: str
    ) -> dict[str, object]:
        await conn.send(encode_frame(frame))
        raw = await conn.recv()
        if not isinstance(raw, bytes):
            raise MalformedFrame("successor sent a text frame")
        reply = decode_frame(raw, max_size=self.max_size)
        raise_for_error(reply)
        if reply.get("type") != expect:
            raise UnexpectedFrameType(f"expected {expect!r}, got {reply.get('type')!r}")
        return reply

    async def _open(self) -> ClientConnection:
        conn = await connect(
            self.url, compression=None, max_size=self.max_size, open_timeout=10, proxy=None
        )
        try:
            await self._authenticate(conn)
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.close()
            raise
        return conn

    async def _authenticate(self, conn: ClientConnection) -> None:
        """Prove to the successor that this end of the link is ``name`` (challenge-response
        with the identity key)."""
        if self.identity is None:
            return
        reply = await self._exchange(conn, {"type": "challenge"}, "challenge")
        nonce = get_bytes(reply, "nonce", length=CHALLENGE_LENGTH)
        signature = sign_link_challenge(
            self.identity, chain_id=self.chain_id, node=self.name, challenge=nonce
        )
        await self._exchange(
            conn,
            {"type": "authenticate", "node": self.name, "signature": signature},
            "authenticated",
        )

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        self._closed = True
        await self._drop()


Handler = Callable[[ServerConnection, dict[str, object]], Awaitable[dict[str, object]]]


class BaseNode:
    """Shared machinery: the server, frame dispatch, HTTP routes, batch intake, forwarding."""

    def __init__(
        self,
        settings: NodeSettings,
        store: NodeStore,
        *,
        clock: Callable[[], float] = time.time,
        randbelow: Callable[[int], int] = secrets.randbelow,
        identity: SigningKey | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.randbelow = randbelow
        self.server: Server | None = None
        self.port: int | None = None
        self.link: Link | None = None
        if settings.successor_url is not None:
            self.link = Link(
                settings.successor_url,
                max_size=self._successor_max_frame(),
                name=settings.name,
                chain_id=settings.chain_id,
                identity=identity,
            )
        self.handlers: dict[str, Handler] = {
            "status": self._on_status,
            "challenge": self._on_challenge,
            "authenticate": self._on_authenticate,
        }
        self._recovered: list[tuple[Callable[[], Coroutine[Any, Any, None]], int]] = []
        self._challenges: dict[ServerConnection, bytes] = {}
        self._peers: dict[ServerConnection, str] = {}
        self.batches: dict[int, BatchIntake] = {}
        self._batch_locks: dict[int, asyncio.Lock] = {}
        self.metrics: dict[str, Any] = {"frames": 0, "errors": 0, "rounds": {}}
        self.tasks: set[asyncio.Task[None]] = set()
        self._stopping = False

    # ---------------------------------------------------------------- lifecycle

    def _successor_max_frame(self) -> int:
        out_item = onion_length(
            self.settings.payload_length, self.settings.hops - self.settings.hop - 1
        )
        return self.settings.chunk_size * (out_item + 8) + FRAME_SLACK

    async def start(self, host: str, port: int) -> int:
        """Recover state from the store, start serving; returns the bound port."""
        self.recover()
        self.server = await serve(
            self._handle,
            host,
            port,
            compression=None,
            # Frames over twice the limit are dropped by the websocket layer (close code 1009);
            # frames between the limit and that get a frame-too-large error frame.
            max_size=2 * self.settings.max_frame(),
            process_request=self._process_request,
            ping_interval=20,
            ping_timeout=60,
            max_queue=4,
        )
        sock = next(iter(self.server.sockets))
        self.port = int(sock.getsockname()[1])
        for make, round_id in self._recovered:
            self.spawn(make(), f"recovered round {round_id}")
        self._recovered.clear()
        self.after_start()
        log.info("%s listening on %s:%s", self.settings.name, host, self.port)
        return self.port

    def after_start(self) -> None:
        """Hook: start background tasks."""

    def recover(self) -> None:
        """Hook: rebuild in-memory state from the store; queue unfinished work with
        :meth:`resume`."""

    def resume(self, make: Callable[[], Coroutine[Any, Any, None]], round_id: int) -> None:
        """Queue work found by :meth:`recover`; it starts once the node serves."""
        self._recovered.append((make, round_id))

    def restore_batch(self, round_id: int) -> BatchIntake:
        """Rebuild a round's :class:`BatchIntake` from the chunks in the store."""
        intake = self.open_batch(round_id)
        for chunk in self.store.chunks(round_id):
            intake.record(
                chunk.index,
                chunk.chunks,
                chunk.clients,
                chunk.count,
                len(chunk.payloads) + chunk.dropped,
                chunk.dropped,
            )
        return intake

    def spawn(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        """Run ``coro`` in the background; a failure is logged, never lost silently."""

        def done(task: asyncio.Task[None]) -> None:
            self.tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.error(
                    "%s: background task %s failed",
                    self.settings.name,
                    what,
                    exc_info=task.exception(),
                )

        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(done)

    async def stop(self) -> None:
        self._stopping = True
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(BaseException):
                await task
        if self.link is not None:
            await self.link.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    # ---------------------------------------------------------------- websockets

    async def _handle(self, conn: ServerConnection) -> None:
        try:
            async for message in conn:
                reply = await self._dispatch(conn, message)
                await conn.send(encode_frame(reply))
        except ConnectionClosed:
            pass
        finally:
            self._challenges.pop(conn, None)
            self._peers.pop(conn, None)

    async def _on_challenge(
        self, conn: ServerConnection, frame: dict[str, object]
    ) -> dict[str, object]:
        nonce = secrets.token_bytes(CHALLENGE_LENGTH)
        self._challenges[conn] = nonce
        return {"type": "challenge", "nonce": nonce}

    async def _on_authenticate(
        self, conn: ServerConnection, frame: dict[str, object]
    ) -> dict[str, object]:
        node = get_str(frame, "node", max_length=MAX_NAME_LENGTH)
        signature = get_bytes(frame, "signature")
        nonce = self._challenges.pop(conn, None)
        identity = self.settings.predecessor_identity
        if nonce is None:
            raise Unauthorized("ask for a challenge first")
        if node != self.settings.predecessor or identity is None:
            raise Unauthorized(f"{node!r} is not this node's predecessor")
        verify_link_signature(
            identity, signature, chain_id=self.settings.chain_id, node=node, challenge=nonce
        )
        self._peers[conn] = node
        return {"type": "authenticated", "node": node}

    def require_predecessor(self, conn: ServerConnection) -> None:
        """Raise :class:`Unauthorized` unless ``conn`` proved to be the predecessor."""
        if self.settings.predecessor_identity is None:
            raise Unauthorized("this node has no predecessor identity configured")
        if self._peers.get(conn) != self.settings.predecessor:
            raise Unauthorized("only the predecessor may send this frame; authenticate first")

    async def _dispatch(self, conn: ServerConnection, message: str | bytes) -> dict[str, object]:
        self.metrics["frames"] += 1
        try:
            if not isinstance(message, bytes):
                raise MalformedFrame("frames must be binary msgpack")
            frame = decode_frame(message, max_size=self.settings.max_frame())
            kind = get_str(frame, "type", max_length=32)
            handler = self.handlers.get(kind)
            if handler is None:
                raise UnexpectedFrameType(f"{self.settings.name} does not handle {kind!r}")
            return await handler(conn, frame)
        except MixnetError as exc:
            self.metrics["errors"] += 1
            return error_frame(exc)
        except Exception:
            self.metrics["errors"] += 1
            log.exception("%s: internal error", self.settings.name)
            return error_frame(InternalError("internal error; see the node's log"))

    # ---------------------------------------------------------------- HTTP

    def routes(self, path: str) -> tuple[int, object] | None:
        """Hook for extra GET routes: return (status, JSON body) or None."""
        return None

    def prometheus(self) -> str:
        """Counters in the Prometheus text format (``GET /metrics``)."""
        labels = f'node="{self.settings.name}",hop="{self.settings.hop}"'
        rounds: dict[str, dict[str, Any]] = self.metrics["rounds"]
        done = [r for r in rounds.values() if "messages" in r]
        lines = [
            "# HELP mixnet_frames_total Websocket frames received.",
            "# TYPE mixnet_frames_total counter",
            f"mixnet_frames_total{{{labels}}} {self.metrics['frames']}",
            "# HELP mixnet_errors_total Frames answered with an error frame.",
            "# TYPE mixnet_errors_total counter",
            f"mixnet_errors_total{{{labels}}} {self.metrics['errors']}",
            "# HELP mixnet_rounds_total Rounds this node finished (mixed or analyzed).",
            "# TYPE mixnet_rounds_total counter",
            f"mixnet_rounds_total{{{labels}}} {len(done)}",
            "# HELP mixnet_messages_total Messages this node mixed or analyzed.",
            "# TYPE mixnet_messages_total counter",
            f"mixnet_messages_total{{{labels}}} {sum(int(r['messages']) for r in done)}",
            "# HELP mixnet_dropped_total Items dropped (replayed or failing to peel).",
            "# TYPE mixnet_dropped_total counter",
            f"mixnet_dropped_total{{{labels}}} {sum(int(r.get('dropped', 0)) for r in done)}",
        ]
        return "\n".join(lines) + "\n"

    def status(self) -> dict[str, object]:
        return {
            "chain": self.settings.chain_id,
            "node": self.settings.name,
            "hop": self.settings.hop,
            "metrics": self.metrics,
        }

    def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        if "upgrade" in request.headers.get("Connection", "").lower():
            return None
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            return conn.respond(http.HTTPStatus.OK, "ok\n")
        if path == "/status":
            return _json_response(conn, 200, self.status())
        if path == "/metrics":
            response = conn.respond(http.HTTPStatus.OK, self.prometheus())
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
            return response
        routed = self.routes(path)
        if routed is not None:
            return _json_response(conn, routed[0], routed[1])
        return conn.respond(http.HTTPStatus.NOT_FOUND, "not found\n")

    async def _on_status(
        self, conn: ServerConnection, frame: dict[str, object]
    ) -> dict[str, object]:
        return {"type": "status", **self.status()}

    # ---------------------------------------------------------------- batch intake

    def open_batch(self, round_id: int) -> BatchIntake:
        intake = self.batches.get(round_id)
        if intake is None:
            assert self.settings.predecessor is not None
            intake = BatchIntake(
                round_id, self.settings.predecessor, self.settings.onion_length_in()
            )
            self.batches[round_id] = intake
        return intake

    async def _on_batch(
        self, conn: ServerConnection, frame: dict[str, object]
    ) -> dict[str, object]:
        self.require_predecessor(conn)
        batch = parse_batch(
            frame,
            payload_length=self.settings.onion_length_in(),
            max_count=self.settings.chunk_size,
        )
        ack = {"type": "batch-ack", "round": batch.round_id, "chunk": batch.index}
        intake = self.batches.get(batch.round_id)
        if intake is None:
            record = self.store.get_round(batch.round_id)
            if (
                record is not None
                and record.status not in ("open", "opening", "aborted")
                and batch.sender == self.settings.predecessor
            ):
                return ack  # a retry of a chunk of a batch that is already complete here
            raise UnknownRound(f"round {batch.round_id} is not open here")
        lock = self._batch_locks.setdefault(batch.round_id, asyncio.Lock())
        async with lock:  # chunks of one round are checked, stored and recorded one at a time
            fresh = intake.check(
                batch.sender,
                batch.index,
                batch.chunks,
                batch.clients,
                batch.count,
                batch.payloads,
            )
            if not fresh:
                return ack
            await self._store_chunk(batch, intake)
        return ack

    async def _store_chunk(self, batch: Batch, intake: BatchIntake) -> None:
        kept, dropped = await self.transform_chunk(batch)
        stored = self.store.add_chunk(
            batch.round_id,
            Chunk(
                sender=batch.sender,
                index=batch.index,
                chunks=batch.chunks,
                clients=batch.clients,
                count=batch.count,
                dropped=dropped,
                payloads=tuple(kept),
            ),
        )
        outcome = (
            intake.record(
                batch.index, batch.chunks, batch.clients, batch.count, len(batch.payloads), dropped
            )
            if stored
            else "duplicate"
        )
        if outcome == "complete":
            self._round_metrics(batch.round_id)["received_at"] = self.clock()
            self._batch_locks.pop(batch.round_id, None)
            self.spawn(self.batch_complete(batch.round_id), f"round {batch.round_id}")

    async def transform_chunk(self, batch: Batch) -> tuple[list[bytes], int]:
        """Hook: what to keep of an incoming chunk (mixes peel; the sink keeps it as is)."""
        return batch.payloads, 0

    async def batch_complete(self, round_id: int) -> None:
        """Hook: the whole batch of ``round_id`` is stored."""
        raise NotImplementedError

    def _round_metrics(self, round_id: int) -> dict[str, Any]:
        rounds: dict[str, Any] = self.metrics["rounds"]
        return rounds.setdefault(str(round_id), {})  # type: ignore[no-any-return]


class MixNode(BaseNode):
    """A mix: peels its layer, buffers the round's batch, permutes it and forwards it.

    Hop 0 (the entry mix) also runs the rounds: it opens them down the chain, takes client
    submissions and closes rounds by the policy.
    """

    def __init__(
        self,
        settings: NodeSettings,
        store: NodeStore,
        identity: SigningKey,
        *,
        clock: Callable[[], float] = time.time,
        randbelow: Callable[[int], int] = secrets.randbelow,
    ) -> None:
        super().__init__(settings, store, clock=clock, randbelow=randbelow, identity=identity)
        if self.link is None:
            raise ValueError("a mix needs a successor")
        self.identity = identity
        self.keyring = RoundKeyring()
        self.pool = ThreadPoolExecutor(
            max_workers=settings.workers, thread_name_prefix=f"peel-{settings.name}"
        )
        self._peeling: dict[int, int] = {}
        self._peel_started: dict[int, float] = {}
        self.announcements: dict[int, list[RoundKeyAnnouncement]] = {}
        self.entry: dict[int, EntryIntake] = {}
        self.current: EntryIntake | None = None
        self._round_ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._pending: list[tuple[int, Submission, asyncio.Future[None]]] = []
        self._flushing = False
        self._idle = asyncio.Event()
        self._idle.set()
        if settings.hop == 0:
            self.handlers.update({"get-round": self._on_get_round, "submit": self._on_submit})
        else:
            self.handlers.update(
                {
                    "open-round": self._on_open_round,
                    "abort-round": self._on_abort_round,
                    "batch": self._on_batch,
                }
            )

    async def stop(self) -> None:
        await super().stop()
        self.pool.shutdown(wait=False, cancel_futures=True)

    # ---------------------------------------------------------------- keys

    def _open_key(self, round_id: int) -> RoundKeyAnnouncement:
        if self.keyring.is_open(round_id):
            key = self.keyring.secret(round_id)
        else:
            key = self.keyring.open_round(round_id)
        return announce_round_key(
            self.identity,
            chain_id=self.settings.chain_id,
            node=self.settings.name,
            round_id=round_id,
            public_key=bytes(key.public_key),
        )

    def _erase_key(self, round_id: int) -> None:
        self.keyring.erase(round_id)
        if self.store.get_round(round_id) is not None:
            self.store.erase_round_key(round_id)

    async def _peel(self, round_id: int, onions: Sequence[bytes]) -> list[bytes | MixnetError]:
        # peel_seconds is wall time during which at least one peel of the round ran
        # (concurrent submissions overlap; their times are not added up twice).
        m = self._round_metrics(round_id)
        active = self._peeling.get(round_id, 0)
        if active == 0:
            self._peel_started[round_id] = self.clock()
        self._peeling[round_id] = active + 1
        try:
            return await self._peel_in_pool(round_id, onions)
        finally:
            self._peeling[round_id] -= 1
            if self._peeling[round_id] == 0:
                del self._peeling[round_id]
                started = self._peel_started.pop(round_id)
                m["peel_seconds"] = m.get("peel_seconds", 0.0) + (self.clock() - started)

    async def _peel_in_pool(
        self, round_id: int, onions: Sequence[bytes]
    ) -> list[bytes | MixnetError]:
        key = self.keyring.secret(round_id)
        loop = asyncio.get_running_loop()
        parts = [onions[i : i + PEEL_CHUNK] for i in range(0, len(onions), PEEL_CHUNK)]
        results = await asyncio.gather(
            *(
                loop.run_in_executor(self.pool, _peel_part, part, key, self.settings, round_id)
                for part in parts
            )
        )
        return [r for part in results for r in part]

    # ---------------------------------------------------------------- recovery

    def recover(self) -> None:
        for record in self.store.rounds():
            r = record.round_id
            if record.secret_key is not None and not self.keyring.is_open(r):
                self.keyring.adopt(r, PrivateKey(record.secret_key))
            if record.status in ("open", "opening") and self.settings.hop > 0:
                if self.restore_batch(r).complete:
                    self.resume(functools.partial(self.batch_complete, r), r)
            elif record.status == "open" and self.settings.hop == 0:
                raw = self.store.get_meta(f"announcements:{r}")
                if raw is None or record.deadline is None:
                    continue
                self.announcements[r] = _load_announcements(raw, self.settings.chain_id)
                intake = EntryIntake(
                    r,
                    self.settings.messages,
                    self.settings.onion_length_in(),
                    self.settings.policy,
                    record.deadline - self.settings.policy.deadline_seconds,
                )
                for sub in self.store.submissions(r):
                    intake.restore(sub.client, sub.digest)
                self.entry[r] = intake
            elif record.status == "closed":
                self.resume(functools.partial(self._finish_intake, r), r)
            elif record.status == "mixed":
                self.resume(functools.partial(self._forward, r), r)
            if record.status not in ("open", "opening", "closed") and self.keyring.is_open(r):
                self._erase_key(r)

    def after_start(self) -> None:
        if self.settings.hop == 0:
            self.spawn(self._run_rounds(), "rounds")

    # ---------------------------------------------------------------- entry mix: rounds

    async def _run_rounds(self) -> None:
        restored = sorted(self.entry)
        while not self._stopping:
            if restored:
                r = restored.pop(0)
                intake = self.entry[r]
            else:
                r = (self.store.last_round_id() or 0) + 1
                try:
                    intake = await self._open_round(r)
                except MixnetError as exc:
                    # the chain refused (e.g. a successor that does not recognise our
                    # identity): log it, give the id up, and try a fresh round later
                    log.error("%s: opening round %d failed: %s", self.settings.name, r, exc)
                    self._erase_key(r)
                    self.store.update_round(r, status="failed")
                    await asyncio.sleep(1.0)
                    continue
            self.current = intake
            self._round_ready.set()
            while intake.status == "open":
                timer = intake.next_timer()
                timeout = max(
                    0.0, (timer if timer is not None else self.clock() + 1) - self.clock()
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=min(timeout, 1.0))
                self._changed.clear()
                intake.poll(self.clock())
            self._round_ready.clear()
            self.current = None
            if intake.status == "aborted":
                self.store.update_round(r, status="aborted")
                self._erase_key(r)
                assert self.link is not None
                await self.link.request({"type": "abort-round", "round": r}, expect="aborted")
                log.info(
                    "%s: round %d aborted with %d clients", self.settings.name, r, intake.clients
                )
                continue
            await self._wait_idle()
            self.store.update_round(r, status="closed", clients=intake.clients)
            self._round_metrics(r)["closed_at"] = self.clock()
            self.spawn(self._finish_intake(r), f"round {r}")

    async def _open_round(self, r: int) -> EntryIntake:
        own = self._open_key(r)
        self.store.put_round(
            r,
            status="opening",
            opened_at=self.clock(),
            deadline=None,
            secret_key=bytes(self.keyring.secret(r)),
        )
        assert self.link is not None
        reply = await self.link.request({"type": "open-round", "round": r}, expect="round-keys")
        downstream = parse_announcements(
            reply, chain_id=self.settings.chain_id, max_count=self.settings.hops
        )
        anns = [own, *downstream]
        if [a.node for a in anns[1:]] and any(a.round_id != r for a in anns):
            raise InternalError("successor announced keys for another round")
        self.announcements[r] = anns
        self.store.set_meta(f"announcements:{r}", _dump_announcements(anns))
        intake = EntryIntake(
            r,
            self.settings.messages,
            self.settings.onion_length_in(),
            self.settings.policy,
            self.clock(),
        )
        self.store.update_round(r, status="open", deadline=intake.deadline)
        self.entry[r] = intake
        log.info("%s: round %d open", self.settings.name, r)
        return intake

    async def _on_get_round(
        self, conn: ServerConnection, frame: dict[str, object]
    ) -> dict[str, object]:
        try:
            await asyncio.wait_for(self._round_ready.wait(), timeout=30)
        except TimeoutError:
            raise UnknownRound("no round is open; try again") from None
        intake = self.current
        if intake is None:
            raise UnknownRound("no round is open; try again")
        return {
            "type": "round",
            "round": intake.round_id,
            "deadline": intake.deadline,
            "messages": self.settings.messages,
            "payload_length": self.settings.payload_length,
            "clients": intake.clients,
            "min_clients": self.settings.policy.min_clients,
            "max_clients": self.settings.policy.max_clients,
            "announcements": [announcement_frame(a) for a in self.announcements[intake.round_id]],
        }

    async def _on_submit(
        self, conn: ServerConnection, frame: dict[str, object]
    ) -> dict[str, object]:
        r = get_int(frame, "round", min_value=0, max_value=ROUND_ID_MAX)
        client = get_str(frame, "client", max_length=128)
        onions = get_bytes_list(
            frame,
            "onions",
            count=self.settings.messages,
            item_length=self.settings.onion_length_in(),
        )
        intake = self.entry.get(r)
        if intake is None:
            record = self.store.get_round(r)
            if record is not None and record.status not in ("open", "opening"):
                raise RoundClosed(f"round {r} is {record.status}")
            raise UnknownRound(f"round {r} is unknown")
        accepted = {"type": "accepted", "round": r, "client": client}
        digest = intake.check(client, onions)
        if digest is None:
            return accepted
        peeled = await self._peel(r, onions)
        for item in peeled:
            if isinstance(item, MixnetError):
                raise item
        payloads = tuple(p for p in peeled if isinstance(p, bytes))
        closed = intake.accept(client, onions, digest, self.clock())
        try:
            await self._commit(r, Submission(client=client, digest=digest, payloads=payloads))
        except BaseException:
            intake.release(client, onions, reopen=closed)
            raise
        if closed:
            self._changed.set()
        return accepted

    async def _commit(self, round_id: int, sub: Submission) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((round_id, sub, future))
        if not self._flushing:
            self._flushing = True
            self._idle.clear()
            self.spawn(self._flush(), "commit")
        await future

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0)  # let submissions arriving together share one commit
            while self._pending:
                batch, self._pending = self._pending, []
                by_round: dict[int, list[tuple[Submission, asyncio.Future[None]]]] = {}
                for r, sub, fut in batch:
                    by_round.setdefault(r, []).append((sub, fut))
                for r, items in by_round.items():
                    try:
                        self.store.add_submissions(r, [s for s, _ in items])
                    except Exception as exc:
                        log.exception("%s: commit failed", self.settings.name)
                        for _, fut in items:
                            if not fut.done():
                                fut.set_exception(InternalError(f"store failed: {exc}"))
                        continue
                    for _, fut in items:
                        if not fut.done():
                            fut.set_result(None)
        finally:
            self._flushing = False
            self._idle.set()

    async def _wait_idle(self) -> None:
        while self._flushing or self._pending:
            await self._idle.wait()
            await asyncio.sleep(0)

    # ---------------------------------------------------------------- inner mixes

    async def _on_open_round(
        self, conn: ServerConnection, frame: dict[str, object]
    ) -> dict[str, object]:
        self.require_predecessor(conn)
        r = get_int(frame, "round", min_value=0, max_value=ROUND_ID_MAX)
        if self.keyring.erased(r):
            raise RoundClosed(f"round {r} is finished here")
        own = self._open_key(r)
        if self.store.get_round(r) is None:
            self.store.put_round(
                r,
                status="open",
                opened_at=self.clock(),
                deadline=None,
                secret_key=bytes(self.keyring.secret(r)),
            )
        self.open_batch(r)
        assert self.link is not None
        reply = await self.link.request({"type": "open-round", "round": r}, expect="round-keys")
        downstream = parse_announcements(
            reply, chain_id=self.settings.chain_id, max_count=self.settings.hops
        )
        return {
            "type": "round-keys",
            "round": r,
            "announcements": [announcement_frame(a) for a in (own, *downstream)],
        }

    async def _on_abort_round(
        self, conn: ServerConnection, frame: dict[str, object]
    ) -> dict[str, object]:
        self.require_predecessor(conn)
        r = get_int(frame, "round", min_value=0, max_value=ROUND_ID_MAX)
        if self.store.get_round(r) is not None:
            self.store.update_round(r, status="aborted")
            self.store.drop_intake(r)
        self._erase_key(r)
        self.batches.pop(r, None)
        assert self.link is not None
        await self.link.request({"type": "abort-round", "round": r}, expect="aborted")
        return {"type": "aborted", "round": r}

    async def transform_chunk(self, batch: Batch) -> tuple[list[bytes], int]:
        """Drop onions replayed within the round, peel the rest; both kinds of loss are
        counted (the analyzer then sees fewer than n·m shares and reports an error)."""
        unique, replayed = drop_duplicates(batch.payloads, self.batches[batch.round_id].seen)
        peeled = await self._peel(batch.round_id, unique)
        kept = [p for p in peeled if isinstance(p, bytes)]
        return kept, replayed + len(peeled) - len(kept)

    async def batch_complete(self, round_id: int) -> None:
        self.store.update_round(round_id, status="closed", clients=self.batches[round_id].clients)
        await self._finish_intake(round_id)

    # ---------------------------------------------------------------- mixing and forwarding

    async def _finish_intake(self, r: int) -> None:
        started = self.clock()
        record = self.store.get_round(r)
        assert record is not None
        if self.store.outbound(r) is not None:  # mixed before a restart: only forward
            self.store.update_round(r, status="mixed")
            await self._forward(r)
            return
        if self.settings.hop == 0:
            submissions = self.store.submissions(r)
            payloads = [p for sub in submissions for p in sub.payloads]
            clients = len(submissions)
            dropped = 0
        else:
            chunks = self.store.chunks(r)
            payloads = [p for c in chunks for p in c.payloads]
            clients = chunks[0].clients if chunks else record.clients or 0
            dropped = sum(c.dropped for c in chunks)
        mixed = await asyncio.to_thread(mix_batch, payloads, self.randbelow)
        chunks_out = split_chunks(mixed, self.settings.chunk_size)
        self.store.put_outbound(r, clients=clients, count=len(mixed), chunks=chunks_out)
        self.store.drop_intake(r)
        self._erase_key(r)
        self.store.update_round(r, status="mixed")
        # keep recent intakes so that exact retries of accepted submissions are recognised
        for old_round in [x for x in self.entry if x < r - KEEP_FINISHED_ROUNDS]:
            del self.entry[old_round]
        self.batches.pop(r, None)
        m = self._round_metrics(r)
        m.update(
            {
                "clients": clients,
                "messages": len(mixed),
                "dropped": dropped,
                "mix_seconds": self.clock() - started,
            }
        )
        await self._forward(r)

    async def _forward(self, r: int) -> None:
        started = self.clock()
        stored = self.store.outbound(r)
        if stored is None:
            return
        clients, count, chunks = stored
        assert self.link is not None
        for chunk in chunks:
            if chunk.acked:
                continue
            frame = batch_frame(
                Batch(
                    r,
                    self.settings.name,
                    chunk.index,
                    len(chunks),
                    clients,
                    count,
                    list(chunk.payloads),
                )
            )
            reply = await self.link.request(frame, expect="batch-ack")
            if reply.get("chunk") != chunk.index or reply.get("round") != r:
                raise InternalError("successor acknowledged another chunk")
            self.store.ack_outbound(r, chunk.index)
        self.store.drop_outbound(r)
        self.store.update_round(r, status="forwarded")
        m = self._round_metrics(r)
        m["forward_seconds"] = self.clock() - started
        m["forwarded_at"] = self.clock()
        log.info(
            "%s: round %d forwarded (%d messages, %d clients)",
            self.settings.name,
            r,
            count,
            clients,
        )

    def status(self) -> dict[str, object]:
        out = super().status()
        current = self.current
        out["current_round"] = (
            None
            if current is None
            else {
                "round": current.round_id,
                "clients": current.clients,
                "deadline": current.deadline,
            }
        )
        return out


def _peel_part(
    part: Sequence[bytes], key: PrivateKey, settings: NodeSettings, round_id: int
) -> list[bytes | MixnetError]:
    return peel_many(
        part,
        key,
        chain_id=settings.chain_id,
        round_id=round_id,
        hop_index=settings.hop,
        expected_length=settings.onion_length_in(),
    )


def _dump_announcements(anns: Sequence[RoundKeyAnnouncement]) -> str:
    return json.dumps(
        [
            {
                "node": a.node,
                "round": a.round_id,
                "public_key": a.public_key.hex(),
                "signature": a.signature.hex(),
            }
            for a in anns
        ]
    )


def _load_announcements(raw: str, chain_id: str) -> list[RoundKeyAnnouncement]:
    return [
        RoundKeyAnnouncement(
            chain_id=chain_id,
            node=d["node"],
            round_id=d["round"],
            public_key=bytes.fromhex(d["public_key"]),
            signature=bytes.fromhex(d["signature"]),
        )
        for d in json.loads(raw)
    ]


class SinkNode(BaseNode):
    """The end of the chain: receives the last mix's batch; subclasses decide what to do with
    it (:meth:`on_batch`). Knows nothing about what the payloads mean."""

    def __init__(
        self,
        settings: NodeSettings,
        store: NodeStore,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(settings, store, clock=clock)
        self.handlers.update(
            {
                "open-round": self._on_open_round,
                "abort-round": self._on_abort_round,
                "batch": self._on_batch,
            }
        )

    async def on_batch(
        self, round_id: int, clients: int, count: int, payloads: list[bytes]
    ) -> None:
        """Hook: the complete batch of a round (``count`` payloads from ``clients`` clients)."""
        raise NotImplementedError

    def on_abort(self, round_id: int) -> None:
        """Hook: the round was aborted."""

    def recover(self) -> None:
        for record in self.store.rounds():
            r = record.round_id
            if record.status == "open" and self.restore_batch(r).complete:
                self.resume(functools.partial(self.batch_complete, r), r)

    async def _on_open_round(
        self, conn: ServerConnection, frame: dict[str, object]
    ) -> dict[str, object]:
        self.require_predecessor(conn)
        r = get_int(frame, "round", min_value=0, max_value=ROUND_ID_MAX)
        if self.store.get_round(r) is None:
            self.store.put_round(
                r, status="open", opened_at=self.clock(), deadline=None, secret_key=None
            )
        self.open_batch(r)
        return {"type": "round-keys", "round": r, "announcements": []}

    async def _on_abort_round(
        self, conn: ServerConnection, frame: dict[str, object]
    ) -> dict[str, object]:
        self.require_predecessor(conn)
        r = get_int(frame, "round", min_value=0, max_value=ROUND_ID_MAX)
        if self.store.get_round(r) is None:
            self.store.put_round(
                r, status="aborted", opened_at=self.clock(), deadline=None, secret_key=None
            )
        else:
            self.store.update_round(r, status="aborted")
            self.store.drop_intake(r)
        self.batches.pop(r, None)
        self.on_abort(r)
        return {"type": "aborted", "round": r}

    async def batch_complete(self, round_id: int) -> None:
        chunks = self.store.chunks(round_id)
        payloads = [p for c in chunks for p in c.payloads]
        clients = chunks[0].clients if chunks else 0
        count = chunks[0].count if chunks else 0
        await self.on_batch(round_id, clients, count, payloads)
        self.store.update_round(round_id, status="done", clients=clients)
        self.store.drop_intake(round_id)
        self.batches.pop(round_id, None)
