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
  websocket connections to the entry mix through :class:`mixnet.link.Link`: one
  ``submit {round, client, box}`` frame per user, or with ``per_frame > 1`` up to that many
  users' submissions in one ``submit-many`` frame (:mod:`mixnet.submit_many`; each is
  accepted or refused on its own). A connection failure resends the *identical* frame
  bytes, which the entry mix acknowledges without counting twice (exact-retry semantics),
  and an ``internal-error`` (the entry mix could not store a submission) is answered by
  resending it after a backoff, for up to ``retry_for`` seconds — the error policy of
  :meth:`mixnet.client.MixnetClient.submit`, except that a pre-wrapped box is never re-made
  for another round.

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
import os
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from cloaknet.chainfile import CloakChain
from cloaknet.encoding import check_input
from cloaknet.loadgen_wrap import (
    RoundSpec,
    WrappedChunk,
    WrappedRound,
    chunk_sizes,
    init_worker,
    pool_context,
    thread_task,
    wrap_task,
    wrap_values,
)
from mixnet.client import MixnetClient, RoundInfo, send_submission, send_submissions
from mixnet.errors import MixnetError, RoundClosed, UnknownRound
from mixnet.frames import Submit, to_wire
from mixnet.link import Backoff, Link

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

#: Largest reply frame accepted from the entry mix, in bytes (a ``receipts`` reply to a
#: ``submit-many`` frame of 4,096 refused submissions fits).
MAX_REPLY = 1 << 21

_DEFAULT_BACKOFF = Backoff()

#: One user's submission as it is sent: the client id and its box.
_User = tuple[str, bytes]


class RoundMissed(MixnetError):
    """The entry mix refused a pre-wrapped submission because its round is closed or
    unknown; the box is bound to that round and cannot be sent into another."""

    code = "round-missed"


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
    websockets to the entry mix carry the submissions, one request in flight on each, each
    request a ``submit`` (``per_frame == 1``, the default) or a ``submit-many`` of up to
    ``per_frame`` submissions (at most the entry mix's
    ``[limits].max_submissions_per_frame``).
    ``retry_for`` (seconds) bounds how long a request retries connection failures and how
    long :meth:`current_round` waits for an open round; ``backoff`` spaces the retries.
    ``processes=False`` wraps in ``workers`` threads of this process instead (libsodium
    releases the GIL, the encoding does not): for tests and small runs, without starting
    processes.

    Construction opens nothing; :meth:`aclose` (or ``async with``) closes the connections.

    :raises TypeError: ``chain`` is not a :class:`~cloaknet.chainfile.CloakChain`.
    :raises ValueError: ``workers``, ``connections``, ``chunk_users`` or ``per_frame`` below
        1, ``per_frame`` above the chain's ``max_submissions_per_frame``, or a chain with
        ``[admission]`` (not supported).
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
        per_frame: int = 1,
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
        most = chain.config.limits.max_submissions_per_frame
        if not 1 <= per_frame <= most:
            raise ValueError(
                f"per_frame must be in 1..{most} ([limits].max_submissions_per_frame), "
                f"got {per_frame}"
            )
        self.per_frame = per_frame
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
                mp_context=pool_context(),
                initializer=init_worker,
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
                    futures.append(pool.submit(wrap_task, offset, part))
                else:
                    futures.append(pool.submit(thread_task, spec, offset, part))
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
            if self.per_frame == 1:
                while (item := await next_user()) is not None:
                    client, box = item
                    await self._submit(link, info, client, box)
                    sent += 1
                return
            while True:
                group: list[_User] = []
                while len(group) < self.per_frame and (item := await next_user()) is not None:
                    group.append(item)
                if not group:
                    return
                await self._submit_many(link, info, group)
                sent += len(group)

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
        """One ``submit {round, client, box}`` over ``link``, exactly as the mixnet client
        sends it (:func:`mixnet.client.send_submission`), and a closed round as
        :class:`RoundMissed`."""
        frame = to_wire(Submit(round_id=info.round_id, client=client, box=box))
        give_up = asyncio.get_running_loop().time() + self.retry_for
        try:
            await send_submission(link, frame, round_id=info.round_id, client=client,
                                  give_up=give_up, backoff=self.backoff)  # fmt: skip
        except (RoundClosed, UnknownRound) as exc:
            raise RoundMissed(
                f"round {info.round_id} refused a pre-wrapped submission: {exc.reason}"
            ) from exc

    async def _submit_many(self, link: Link, info: RoundInfo, users: Sequence[_User]) -> None:
        """One ``submit-many`` of ``users`` over ``link``
        (:func:`mixnet.client.send_submissions`); the first refusal is raised, a closed
        round as :class:`RoundMissed`."""
        frames = [Submit(round_id=info.round_id, client=c, box=box) for c, box in users]
        give_up = asyncio.get_running_loop().time() + self.retry_for
        outcomes = await send_submissions(link, frames, give_up=give_up, backoff=self.backoff)
        for error in outcomes:
            if isinstance(error, RoundClosed | UnknownRound):
                raise RoundMissed(
                    f"round {info.round_id} refused a pre-wrapped submission: {error.reason}"
                )
            if error is not None:
                raise error

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
