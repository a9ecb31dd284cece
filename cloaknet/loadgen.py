"""A load generator that can drive one hop of a chain at its own limit.

The client library (:class:`cloaknet.client.ChainClient`) encodes and wraps each user's
submission in a thread pool of one Python process, so a simulation of many users is limited
by that process long before the entry mix is. This module splits the client's work in two:

* **wrapping** — :func:`wrap_values` encodes users' values with the chain protocol's local
  randomizer (:meth:`~cloaknet.protocols.base.SummationProtocol.encode_many`, OS CSPRNG) and
  makes each user's submission box (onion format version 2,
  :func:`mixnet.onion.wrap_submission`, exactly what
  :meth:`mixnet.client.MixnetClient.wrap` makes): every payload wrapped for the mixes after
  the first, and the ``m`` inner onions sealed together in one layer for the entry mix. A
  :class:`LoadGenerator` runs it in a :class:`~concurrent.futures.ProcessPoolExecutor`
  with one worker per core; each worker receives the round's verified public keys and the
  protocol once, through the pool's initializer (:class:`RoundSpec`).
* **sending** — :meth:`LoadGenerator.send` submits the pre-wrapped boxes over several
  websocket connections to the entry mix, one ``submit {round, client, box}`` frame per
  user, through :class:`mixnet.link.Link`: a connection failure resends the *identical*
  frame bytes, which the entry mix acknowledges without counting twice (exact-retry
  semantics), and an ``internal-error`` (the entry mix could not store the submission) is
  answered by resending the identical frame after a backoff, for up to ``retry_for``
  seconds — the error policy of :meth:`mixnet.client.MixnetClient.submit`, except that a
  pre-wrapped box is never re-made for another round.

The open round is found and its announcements verified exactly as the client library does
it (:meth:`mixnet.client.MixnetClient.current_round`). Boxes are bound to their round: a
submission the entry mix refuses because the round closed (``round-closed``,
``unknown-round``) cannot be resent into the next round and raises :class:`RoundMissed`.
Each submission's digest — what the entry mix stores and a
:class:`~mixnet.client.Receipt` carries — is
:func:`mixnet.core.submission_digest` of its box (:meth:`WrappedChunk.digest`).

Every random bit — the encoding's and the layers' ephemeral keys — comes from the OS
CSPRNG in the worker (:data:`~cloaknet.randomness.SYSTEM_RANDOM`, ``secrets``, libsodium);
client ids are ``secrets.token_hex(16)``. Chains with ``[admission]`` are not supported
(every submission would need its own admitted client key).

The generator measures its own cost (:class:`LoadReport`): the workers' CPU time spent
encoding and wrapping (summed over tasks, from :func:`time.process_time` in each worker),
the workers' whole CPU time including their start-up, and the CPU time of the sending
process while it sends.

::

    async with LoadGenerator(chain) as load:
        info = await load.current_round()
        wrapped = await load.wrap(info, values)       # every core
        report = await load.send(info, wrapped)       # the entry mix at its own pace
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import multiprocessing
import os
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np

from cloaknet.chainfile import CloakChain
from cloaknet.encoding import check_input, encode_share
from cloaknet.protocols import SummationProtocol
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from mixnet.client import MixnetClient, RoundInfo
from mixnet.core import submission_digest
from mixnet.errors import InternalError, MalformedFrame, MixnetError, RoundClosed, UnknownRound
from mixnet.frames import MAX_CLIENT_ID_LENGTH, Submit, to_wire
from mixnet.link import Backoff, Link
from mixnet.onion import PUBLIC_KEY_LENGTH, onion_length, submission_length, wrap_submission
from mixnet.wire import get_int, get_str

__all__ = [
    "LoadGenerator",
    "LoadReport",
    "RoundMissed",
    "RoundSpec",
    "SendReport",
    "WrappedChunk",
    "WrappedRound",
    "chunk_sizes",
    "wrap_values",
]

#: Most users per worker task (bounds a task's result and keeps the load balanced).
MAX_CHUNK_USERS = 2048
#: Fewest users per worker task (below this the per-task overhead shows).
MIN_CHUNK_USERS = 16
#: Tasks per worker the users are split into, when the chunk size is not given.
TASKS_PER_WORKER = 8
#: Largest reply frame accepted from the entry mix, in bytes.
MAX_REPLY = 1 << 16

_DEFAULT_BACKOFF = Backoff()

#: One user's submission as it is sent: the client id and its box.
_User = tuple[str, bytes]


class RoundMissed(MixnetError):
    """The entry mix refused a pre-wrapped submission because its round is closed or
    unknown; the box is bound to that round and cannot be sent into another."""

    code = "round-missed"


@dataclass(frozen=True)
class RoundSpec:
    """What a wrapping worker needs, sent to it once (picklable): the chain id, the round
    id and the mixes' verified X25519 round ``public_keys`` in chain order, and the
    ``protocol`` whose local randomizer encodes the values.

    :raises TypeError, ValueError: no keys, a key that is not 32 bytes, or a protocol that
        is not a :class:`~cloaknet.protocols.base.SummationProtocol`.
    """

    chain_id: str
    round_id: int
    public_keys: tuple[bytes, ...]
    protocol: SummationProtocol

    def __post_init__(self) -> None:
        if not isinstance(self.protocol, SummationProtocol):
            raise TypeError(
                f"protocol must be a SummationProtocol, not {type(self.protocol).__name__}"
            )
        if not self.public_keys:
            raise ValueError("a round needs at least one public key")
        for key in self.public_keys:
            if not isinstance(key, bytes) or len(key) != PUBLIC_KEY_LENGTH:
                raise ValueError(f"public keys must be {PUBLIC_KEY_LENGTH} bytes")

    @classmethod
    def for_round(cls, chain: CloakChain, info: RoundInfo) -> RoundSpec:
        """The spec of the verified round ``info`` of ``chain``."""
        return cls(chain.config.chain_id, info.round_id, info.public_keys, chain.protocol)

    @property
    def messages(self) -> int:
        """m, the payloads (inner onions) per user."""
        return self.protocol.message_count

    @property
    def payload_length(self) -> int:
        """Bytes of one plaintext payload."""
        return self.protocol.bytes_per_message

    @property
    def inner_length(self) -> int:
        """Bytes of one inner onion (layers for the mixes after the first) as the entry mix
        takes it out of a box: the item length of hop 1."""
        return onion_length(self.payload_length, len(self.public_keys) - 1)

    @property
    def box_length(self) -> int:
        """Bytes of one user's submission box as the entry mix receives it
        (:func:`mixnet.onion.submission_length`)."""
        return submission_length(self.payload_length, len(self.public_keys), self.messages)


@dataclass(frozen=True)
class WrappedChunk:
    """The submissions of consecutive users, wrapped for one round.

    ``clients`` are their client ids (one per user); ``boxes`` holds every user's
    submission box back to back — user ``i``'s box of ``box_length`` bytes starts at byte
    ``i · box_length``. ``start`` is the index of the first user among the values given to
    the generator. ``cpu_seconds`` is the CPU time the worker spent on this chunk;
    ``worker`` identifies the worker (its process id, or its thread id for a thread) and
    ``worker_cpu_total`` is the worker's CPU time since it started, read when the chunk was
    done.

    :raises ValueError: ``boxes`` does not hold one box of ``box_length`` bytes per client.
    """

    start: int
    clients: tuple[str, ...]
    box_length: int
    boxes: bytes
    cpu_seconds: float = 0.0
    worker: int = 0
    worker_cpu_total: float = 0.0

    def __post_init__(self) -> None:
        if self.box_length < 1 or len(self.boxes) != len(self.clients) * self.box_length:
            raise ValueError("boxes do not hold one box of box_length bytes per client")

    def __len__(self) -> int:
        return len(self.clients)

    def submission(self, index: int) -> bytes:
        """The submission box of the chunk's ``index``-th user (0-based)."""
        if not 0 <= index < len(self.clients):
            raise IndexError(f"user {index} is not in this chunk of {len(self.clients)}")
        base = index * self.box_length
        return self.boxes[base : base + self.box_length]

    def digest(self, index: int) -> bytes:
        """The digest of the ``index``-th user's submission as the entry mix records it
        (:func:`mixnet.core.submission_digest` of the box; a
        :class:`~mixnet.client.Receipt`'s ``digest``)."""
        return submission_digest(self.submission(index))


@dataclass(frozen=True)
class WrappedRound:
    """Every user's submission for one round, in the order of the values, and what wrapping
    them cost: ``wall_seconds`` (from the first task to the last result),
    ``cpu_seconds`` (the workers' CPU on the tasks), ``worker_cpu_seconds`` (the workers'
    whole CPU time, start-up included) and ``workers``."""

    round_id: int
    chunks: tuple[WrappedChunk, ...]
    wall_seconds: float
    cpu_seconds: float
    worker_cpu_seconds: float
    workers: int

    @property
    def users(self) -> int:
        """Number of submissions."""
        return sum(len(chunk) for chunk in self.chunks)


@dataclass(frozen=True)
class SendReport:
    """What sending cost: ``submissions`` acknowledged, ``wall_seconds`` from the first
    frame sent to the last acknowledgement, ``cpu_seconds`` of the sending process over
    that time (:func:`time.process_time`: everything that process did meanwhile), and the
    number of ``connections`` used."""

    submissions: int
    wall_seconds: float
    cpu_seconds: float
    connections: int


@dataclass(frozen=True)
class LoadReport:
    """One round driven by :meth:`LoadGenerator.run`: its id, the wrapping and sending
    reports, and ``wall_seconds`` of the whole run (from the first task to the last
    acknowledgement; wrapping and sending overlap unless ``prewrap``)."""

    round_id: int
    wrapped: WrappedRound
    sent: SendReport
    wall_seconds: float
    prewrap: bool

    @property
    def cpu_seconds(self) -> float:
        """The generator's own CPU: the workers' (start-up included) plus the sender's."""
        return self.wrapped.worker_cpu_seconds + self.sent.cpu_seconds


def chunk_sizes(users: int, workers: int, chunk_users: int | None = None) -> list[int]:
    """How ``users`` users are split into worker tasks: ``chunk_users`` each (the last one
    may be smaller), or by default about :data:`TASKS_PER_WORKER` tasks per worker of
    :data:`MIN_CHUNK_USERS` .. :data:`MAX_CHUNK_USERS` users. Sums to ``users``.

    :raises ValueError: ``users < 0``, ``workers < 1`` or ``chunk_users < 1``.
    """
    if users < 0 or workers < 1:
        raise ValueError(f"need users >= 0 and workers >= 1, got {users} and {workers}")
    if chunk_users is None:
        size = math.ceil(users / (workers * TASKS_PER_WORKER)) if users else 1
        size = max(MIN_CHUNK_USERS, min(MAX_CHUNK_USERS, size))
    elif chunk_users < 1:
        raise ValueError(f"chunk_users must be >= 1, got {chunk_users}")
    else:
        size = chunk_users
    full, rest = divmod(users, size)
    return [size] * full + ([rest] if rest else [])


def wrap_values(
    spec: RoundSpec,
    values: Sequence[float],
    *,
    start: int = 0,
    rng: RandomSource = SYSTEM_RANDOM,
) -> WrappedChunk:
    """Encode and wrap one submission per value for the round of ``spec``.

    Each value (a float in [0, 1]) becomes the protocol's ``m`` messages
    (:meth:`~cloaknet.protocols.base.SummationProtocol.encode_many` on the binary64
    values, with ``rng``), each message a fixed-width payload
    (:func:`cloaknet.encoding.encode_share`); the ``m`` payloads make one submission box
    (:func:`mixnet.onion.wrap_submission`: one layer per later mix around each payload,
    one layer for the entry mix around them all; ephemeral keys from the OS CSPRNG).
    Client ids are ``secrets.token_hex(16)``. ``rng`` is the OS CSPRNG unless a test
    injects another; only the encoding uses it.

    :raises InputRangeError: a value is not a number in [0, 1].
    :raises ShareError: the protocol produced a message outside ``[0, modulus)``.
    """
    xs = np.array([float(check_input(v)) for v in values], dtype=np.float64)
    modulus = spec.protocol.message_modulus
    parts: list[bytes] = []
    clients: list[str] = []
    if len(xs):
        encoded = np.asarray(spec.protocol.encode_many(xs, rng)).reshape(len(xs), spec.messages)
        keys = spec.public_keys
        chain_id, round_id = spec.chain_id, spec.round_id
        for row in encoded.tolist():
            clients.append(secrets.token_hex(16))
            payloads = [encode_share(int(value), modulus) for value in row]
            parts.append(wrap_submission(payloads, keys, chain_id=chain_id, round_id=round_id))
    return WrappedChunk(start, tuple(clients), spec.box_length, b"".join(parts))


# --------------------------------------------------------------------------- workers

_WORKER_SPEC: RoundSpec | None = None


def _init_worker(spec: RoundSpec) -> None:
    """Pool initializer: keep the round's spec for every task of this worker."""
    global _WORKER_SPEC
    _WORKER_SPEC = spec


def _wrap_task(start: int, values: list[float]) -> WrappedChunk:
    """A worker process's task: :func:`wrap_values` for one chunk of the round its
    initializer gave it, with the chunk's CPU time and the worker's total."""
    spec = _WORKER_SPEC
    if spec is None:
        raise RuntimeError("the load generator's worker was not initialized")
    return _timed_wrap(spec, start, values, time.process_time)


def _thread_task(spec: RoundSpec, start: int, values: list[float]) -> WrappedChunk:
    """A worker thread's task (``processes=False``): as :func:`_wrap_task`, with the
    thread's CPU time (:func:`time.thread_time`)."""
    return _timed_wrap(spec, start, values, time.thread_time)


def _timed_wrap(
    spec: RoundSpec, start: int, values: list[float], clock: Callable[[], float]
) -> WrappedChunk:
    """:func:`wrap_values` with the CPU ``clock`` read around it (see :class:`WrappedChunk`)."""
    begin = clock()
    chunk = wrap_values(spec, values, start=start)
    end = clock()
    return WrappedChunk(
        chunk.start,
        chunk.clients,
        chunk.box_length,
        chunk.boxes,
        cpu_seconds=end - begin,
        worker=os.getpid() if clock is time.process_time else threading.get_ident(),
        worker_cpu_total=end,
    )


def _pool_context() -> Any:
    """``forkserver`` where it exists (no fork of a process running threads), else
    ``spawn``."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


@dataclass
class _Wrapping:
    """Wrapping in progress: the pool, its futures in value order, and the clock."""

    pool: concurrent.futures.Executor
    futures: list[concurrent.futures.Future[WrappedChunk]]
    started: float
    workers: int
    done: list[WrappedChunk] = field(default_factory=list)


# --------------------------------------------------------------------------- generator


class LoadGenerator:
    """Wraps many users' submissions on every core and sends them to ``chain``'s entry mix.

    ``workers`` wrapping processes (default: one per core, ``os.cpu_count()``) each take
    chunks of ``chunk_users`` users (default: :func:`chunk_sizes`); ``connections``
    websockets to the entry mix carry the submissions, one request in flight on each.
    ``retry_for`` (seconds) bounds how long a request retries connection failures and how
    long :meth:`current_round` waits for an open round; ``backoff`` spaces the retries.
    ``processes=False`` wraps in ``workers`` threads of this process instead (libsodium
    releases the GIL, the encoding does not): for tests and small runs, without starting
    processes.

    Construction opens nothing; :meth:`aclose` (or ``async with``) closes the connections.

    :raises TypeError: ``chain`` is not a :class:`~cloaknet.chainfile.CloakChain`.
    :raises ValueError: ``workers``, ``connections`` or ``chunk_users`` below 1, or a chain
        with ``[admission]`` (not supported).
    """

    def __init__(
        self,
        chain: CloakChain,
        *,
        workers: int | None = None,
        connections: int = 16,
        chunk_users: int | None = None,
        retry_for: float = 120.0,
        backoff: Backoff = _DEFAULT_BACKOFF,
        processes: bool = True,
    ) -> None:
        if not isinstance(chain, CloakChain):
            raise TypeError(f"chain must be a CloakChain, not {type(chain).__name__}")
        if chain.config.admission is not None:
            raise ValueError("the load generator does not sign submissions ([admission])")
        count = workers if workers is not None else (os.cpu_count() or 1)
        if count < 1 or connections < 1:
            raise ValueError(f"need workers >= 1 and connections >= 1, got {count}, {connections}")
        if chunk_users is not None and chunk_users < 1:
            raise ValueError(f"chunk_users must be >= 1, got {chunk_users}")
        self.chain = chain
        self.workers = count
        self.connections = connections
        self.chunk_users = chunk_users
        self.processes = processes
        self.retry_for = retry_for
        self.backoff = backoff
        config = chain.config
        self._client = MixnetClient(
            config,
            messages=chain.messages,
            payload_length=chain.payload_length,
            sink_url=config.sink.url,
            connections=1,
            retry_for=retry_for,
            backoff=backoff,
        )
        context = None if config.tls is None else config.tls.client_context()
        self._links = [
            Link(
                config.mixes[0].url,
                max_size=MAX_REPLY,
                name=f"loadgen->{config.mixes[0].name}",
                retry_for=retry_for,
                backoff=backoff,
                ssl_context=context,
            )
            for _ in range(connections)
        ]

    async def aclose(self) -> None:
        """Close every connection (idempotent)."""
        await self._client.aclose()
        for link in self._links:
            await link.close()

    async def __aenter__(self) -> LoadGenerator:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ round

    async def current_round(self, *, wait: bool = True) -> RoundInfo:
        """The entry mix's open round, its announcements verified against the chain's
        identity keys (:meth:`mixnet.client.MixnetClient.current_round`). With ``wait``,
        an entry mix without an open round yet is asked again (backoff) for up to
        ``retry_for`` seconds.

        :raises UnknownRound: no open round (after ``retry_for`` seconds with ``wait``).
        :raises MixnetError, OSError, ...: as :meth:`MixnetClient.current_round`.
        """
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.retry_for
        attempt = 0
        while True:
            try:
                return await self._client.current_round(refresh=True)
            except UnknownRound:
                if not wait or loop.time() >= give_up:
                    raise
            await asyncio.sleep(self.backoff.delay(attempt))
            attempt += 1

    # ------------------------------------------------------------------ wrapping

    def _start_wrapping(self, info: RoundInfo, values: Sequence[float]) -> _Wrapping:
        """Check ``values`` and hand every chunk to a new worker pool for round ``info``."""
        items = [float(check_input(v)) for v in values]
        spec = RoundSpec.for_round(self.chain, info)
        sizes = chunk_sizes(len(items), self.workers, self.chunk_users)
        pool: concurrent.futures.Executor
        if self.processes:
            pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=_pool_context(),
                initializer=_init_worker,
                initargs=(spec,),
            )
        else:
            pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix="loadgen-wrap"
            )
        started = time.perf_counter()
        futures: list[concurrent.futures.Future[WrappedChunk]] = []
        try:
            offset = 0
            for size in sizes:
                part = items[offset : offset + size]
                if self.processes:
                    futures.append(pool.submit(_wrap_task, offset, part))
                else:
                    futures.append(pool.submit(_thread_task, spec, offset, part))
                offset += size
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        return _Wrapping(pool, futures, started, self.workers)

    @staticmethod
    def _finish_wrapping(info: RoundInfo, work: _Wrapping) -> WrappedRound:
        """The :class:`WrappedRound` of finished wrapping ``work`` (chunks in value order)."""
        chunks = tuple(sorted(work.done, key=lambda c: c.start))
        totals: dict[int, float] = {}
        for chunk in chunks:
            totals[chunk.worker] = max(totals.get(chunk.worker, 0.0), chunk.worker_cpu_total)
        return WrappedRound(
            round_id=info.round_id,
            chunks=chunks,
            wall_seconds=time.perf_counter() - work.started,
            cpu_seconds=sum(chunk.cpu_seconds for chunk in chunks),
            worker_cpu_seconds=sum(totals.values()),
            workers=work.workers,
        )

    async def wrap(self, info: RoundInfo, values: Sequence[float]) -> WrappedRound:
        """Encode and wrap one submission per value for round ``info`` on every core
        (a fresh pool whose workers get the round's keys once), and return them all.

        :raises InputRangeError: a value is not a number in [0, 1] (nothing is wrapped).
        """
        work = self._start_wrapping(info, values)
        try:
            for future in work.futures:
                work.done.append(await asyncio.wrap_future(future))
        except BaseException:
            work.pool.shutdown(wait=False, cancel_futures=True)
            raise
        work.pool.shutdown(wait=True)
        return self._finish_wrapping(info, work)

    # ------------------------------------------------------------------ sending

    async def send(
        self, info: RoundInfo, submissions: WrappedRound | Iterable[WrappedChunk]
    ) -> SendReport:
        """Submit every pre-wrapped submission into round ``info``, ``connections`` at a
        time; returns once the entry mix has acknowledged (stored) all of them.

        A connection failure resends the identical frame (the entry mix acknowledges an
        exact retry without counting it twice), and so does an ``internal-error`` reply,
        after a backoff, for up to ``retry_for`` seconds. The first failure cancels the
        other requests in flight and is raised; submissions acknowledged before it stay in
        the round.

        :raises RoundMissed: the round closed (or is unknown) before a submission arrived.
        :raises MalformedFrame: the entry mix acknowledged another submission.
        :raises InternalError: the entry mix could not store a submission for ``retry_for``
            seconds.
        :raises MixnetError: the entry mix refused a submission (not retried).
        :raises OSError, ConnectionClosed, InvalidHandshake, TimeoutError: the entry mix
            was unreachable for ``retry_for`` seconds.
        """
        chunks = submissions.chunks if isinstance(submissions, WrappedRound) else submissions
        return await self._send(info, _iter_users(iter(chunks)))

    async def _send(
        self, info: RoundInfo, users: Iterator[_User] | AsyncIterator[_User]
    ) -> SendReport:
        """Send every ``(client id, box)`` of ``users`` over the links (see :meth:`send`)."""
        cpu0 = time.process_time()
        wall0 = time.perf_counter()
        sent = 0
        lock = asyncio.Lock()

        async def next_user() -> _User | None:
            async with lock:
                if isinstance(users, Iterator):
                    return next(users, None)
                try:
                    return await anext(users)
                except StopAsyncIteration:
                    return None

        async def sender(link: Link) -> None:
            nonlocal sent
            while (item := await next_user()) is not None:
                client, box = item
                await self._submit(link, info, client, box)
                sent += 1

        failure: BaseException | None = None
        try:
            async with asyncio.TaskGroup() as group:
                for link in self._links:
                    group.create_task(sender(link))
        except BaseExceptionGroup as errors:
            failure = _first_leaf(errors)
        if failure is not None:
            raise failure  # outside the except block: not chained to the group
        return SendReport(
            submissions=sent,
            wall_seconds=time.perf_counter() - wall0,
            cpu_seconds=time.process_time() - cpu0,
            connections=len(self._links),
        )

    async def _submit(self, link: Link, info: RoundInfo, client: str, box: bytes) -> None:
        """One ``submit {round, client, box}`` over ``link`` (exact resends, also after an
        ``internal-error``), checked against its ``accepted``."""
        frame = to_wire(Submit(round_id=info.round_id, client=client, box=box))
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.retry_for
        attempt = 0
        while True:
            try:
                reply = await link.request(frame, expect="accepted")
                break
            except (RoundClosed, UnknownRound) as exc:
                raise RoundMissed(
                    f"round {info.round_id} refused a pre-wrapped submission: {exc.reason}"
                ) from exc
            except InternalError:
                if loop.time() >= give_up:
                    raise
            await asyncio.sleep(self.backoff.delay(attempt))
            attempt += 1
        if (
            get_int(reply, "round", min_value=0) != info.round_id
            or get_str(reply, "client", max_length=MAX_CLIENT_ID_LENGTH) != client
        ):
            raise MalformedFrame("the entry mix acknowledged another submission")

    # ------------------------------------------------------------------ both

    async def run(self, values: Sequence[float], *, prewrap: bool = True) -> LoadReport:
        """Drive one round with one submission per value: find the open round, wrap on
        every core and send. With ``prewrap`` (default) everything is wrapped before the
        first frame is sent, so the entry mix is measured at its own pace; without it,
        chunks are sent as soon as a worker finishes them.

        The values should fit one round (at most ``[round].max_users``; else the round
        closes and the rest raise :class:`RoundMissed`).

        :raises: as :meth:`current_round`, :meth:`wrap` and :meth:`send`.
        """
        info = await self.current_round()
        started = time.perf_counter()
        if prewrap:
            wrapped = await self.wrap(info, values)
            sent = await self.send(info, wrapped)
        else:
            work = self._start_wrapping(info, values)
            try:
                sent = await self._send(info, _stream_users(work))
            except BaseException:
                work.pool.shutdown(wait=False, cancel_futures=True)
                raise
            work.pool.shutdown(wait=True)
            wrapped = self._finish_wrapping(info, work)
        return LoadReport(
            round_id=info.round_id,
            wrapped=wrapped,
            sent=sent,
            wall_seconds=time.perf_counter() - started,
            prewrap=prewrap,
        )


def _first_leaf(errors: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception of a (possibly nested) exception group."""
    first = errors.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def _iter_users(chunks: Iterator[WrappedChunk]) -> Iterator[_User]:
    """Every (client id, box) of ``chunks``, in order."""
    for chunk in chunks:
        for index, client in enumerate(chunk.clients):
            yield client, chunk.submission(index)


async def _stream_users(work: _Wrapping) -> AsyncIterator[_User]:
    """Every (client id, box) of ``work``, chunk by chunk as the workers finish them
    (any order); finished chunks are recorded in ``work.done``."""
    pending = {asyncio.wrap_future(future) for future in work.futures}
    while pending:
        finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for future in finished:
            chunk = future.result()
            work.done.append(chunk)
            for index, client in enumerate(chunk.clients):
                yield client, chunk.submission(index)
