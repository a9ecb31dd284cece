"""Peeling many small requests together: one thread-pool task for many submissions.

The entry mix peels one box per submission. Handing each to the pool on its own costs a
thread hand-off and a loop wake-up per submission, more than the box's cryptography.
:class:`PeelBatcher` queues the requests that arrive in the same turn of the event loop, or
while the pool is busy, and peels them in one task (:func:`mixnet.onion.peel_many` takes a
list), at most ``tasks`` batches at a time — so under load the batches grow by themselves
and when idle a request waits for nothing but the current loop turn. What runs a batch is a
:data:`PeelRunner`: a thread pool (:func:`in_pool`) or the node's worker processes
(:meth:`mixnet.peel_processes.PeelProcesses.run`).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from concurrent.futures import Executor

from mixnet.core.items import Items
from mixnet.errors import MixnetError

__all__ = ["PEEL_BATCH", "PeelBatcher", "PeelPart", "PeelRunner", "in_pool"]

#: What peels a list of items: ``peel_many`` with everything but the items bound. It returns
#: the same number of entries (``split``) for every item, in order.
PeelPart = Callable[[Sequence[bytes]], list[bytes | MixnetError]]
#: What computes ``part(items)`` off the event loop and awaits it.
PeelRunner = Callable[[PeelPart, Sequence[bytes]], Awaitable[Sequence[bytes | MixnetError]]]
#: Most items one batch hands to one pool task.
PEEL_BATCH = 1024

_Request = tuple[Sequence[bytes], "asyncio.Future[Sequence[bytes | MixnetError]]"]


def in_pool(pool: Executor) -> PeelRunner:
    """A :data:`PeelRunner` that calls the part in a thread of ``pool``."""

    def run(part: PeelPart, items: Sequence[bytes]) -> Awaitable[Sequence[bytes | MixnetError]]:
        return asyncio.get_running_loop().run_in_executor(pool, part, items)

    return run


def _joined(requests: Sequence[Sequence[bytes]]) -> Sequence[bytes]:
    """The items of ``requests`` one after the other: a lone request as it is, requests
    that are all :class:`~mixnet.core.items.Items` of one width in one buffer (a relay's
    chunk then reaches its worker in one copy, with no object per item), else a list."""
    if len(requests) == 1:
        return requests[0]
    parts = [r for r in requests if isinstance(r, Items)]
    if len(parts) == len(requests) and len({part.width for part in parts}) == 1:
        return Items.concat(parts)
    return [item for request in requests for item in request]


class PeelBatcher:
    """Peels requests in batches with ``run`` (see the module docstring). Use from one
    event loop.

    Requests with the same ``key`` (e.g. round and split) go into the same batches and must
    come with an equivalent ``part`` (the first one queued is used for the batch).
    """

    def __init__(self, run: PeelRunner, tasks: int, max_items: int = PEEL_BATCH) -> None:
        self._run = run
        self._tasks = max(1, tasks)
        self._max_items = max(1, max_items)
        self._queue: dict[Hashable, tuple[PeelPart, deque[_Request]]] = {}
        self._running = 0
        self._scheduled = False
        #: pool tasks started (for tests and metrics)
        self.batches = 0

    async def peel(
        self, key: Hashable, part: PeelPart, items: Sequence[bytes]
    ) -> Sequence[bytes | MixnetError]:
        """``part(items)``, computed in the pool together with other queued requests.

        :raises Exception: whatever ``part`` raised for the batch.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Sequence[bytes | MixnetError]] = loop.create_future()
        entry = self._queue.get(key)
        if entry is None:
            entry = self._queue[key] = (part, deque())
        entry[1].append((items, future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._start, loop)
        return await future

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = False
        while self._queue and self._running < self._tasks:
            key = next(iter(self._queue))
            part, waiting = self._queue[key]
            batch: list[_Request] = []
            size = 0
            while waiting and (not batch or size + len(waiting[0][0]) <= self._max_items):
                request = waiting.popleft()
                if request[1].done():  # its requester was cancelled
                    continue
                batch.append(request)
                size += len(request[0])
            if not waiting:
                del self._queue[key]
            if not batch:
                continue
            items = _joined([request for request, _ in batch])
            self._running += 1
            self.batches += 1
            task = asyncio.ensure_future(self._run(part, items))
            task.add_done_callback(functools.partial(self._finished, loop, batch))

    def _finished(
        self,
        loop: asyncio.AbstractEventLoop,
        batch: list[_Request],
        done: asyncio.Future[Sequence[bytes | MixnetError]],
    ) -> None:
        self._running -= 1
        if self._queue and not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._start, loop)
        if done.cancelled():
            for _, future in batch:
                future.cancel()
            return
        error = done.exception()
        if error is not None:
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        results = done.result()
        total = sum(len(request) for request, _ in batch)
        per = len(results) // total if total else 0
        at = 0
        for request, future in batch:
            size = len(request) * per
            if not future.done():
                future.set_result(results[at : at + size])
            at += size
