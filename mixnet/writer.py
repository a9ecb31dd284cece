"""The node's store writer: every write off the event loop, in the order it was asked for.

The round machines rely on one ordering rule (see :mod:`mixnet.core.actions`): writes commit
in the order the machine emitted them, and the machine hears of each commit in that order.
:class:`StoreWriter` keeps it: :meth:`StoreWriter.submit` queues a
:class:`~mixnet.core.actions.Persist` the moment the machine returns it; one writer thread
applies everything queued so far as one group commit (:meth:`NodeStore.apply`, one
transaction with a savepoint per write group); back on the event loop, ``on_commit`` is called
for each item in queue order, and its outcome resolves the item's future. With a ``window``,
a small group waits that long for company before it commits (group commit under load; the
durability contract is the same: an item's future resolves only after its commit).

Fail-stop: when the store raises :class:`~mixnet.store.StoreFailed` (a ``COMMIT`` failed, so
what it wrote may or may not be on disk), the writer stops. No ``on_commit`` runs for that
batch (the machine must not hear "stored" or "failed" when neither is known); its futures and
every later one fail with :class:`~mixnet.errors.InternalError`, and ``on_failure`` is called
once, so that the node stops and its restart recovers from the disk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from mixnet.core.actions import Persist
from mixnet.core.records import Write
from mixnet.errors import InternalError
from mixnet.store import NodeStore, StoreError, StoreFailed

__all__ = ["GROUP_TARGET", "StoreWriter"]

#: Writes queued at which a commit starts at once, without waiting for the window.
GROUP_TARGET = 64

log = logging.getLogger("mixnet")

T = TypeVar("T")
R = TypeVar("R")


class StoreWriter(Generic[T]):
    """Applies :class:`Persist` actions to ``store`` in submission order.

    ``on_commit(persist, error)`` runs on the event loop for every item, in submission
    order, right after its group commit (``error`` is the item's :class:`StoreError`, or
    ``None`` when it committed); its return value (or the exception it raises) becomes the
    result of the future :meth:`submit` returned. Use from one event loop only.
    """

    def __init__(
        self,
        store: NodeStore,
        on_commit: Callable[[Persist, StoreError | None], T],
        *,
        name: str = "store",
        window: float = 0.0,
        on_failure: Callable[[StoreFailed], None] | None = None,
    ) -> None:
        """``window``: seconds to wait, before each commit of fewer than
        :data:`GROUP_TARGET` writes, for more writes to share it (fewer commits under load;
        every write waits at most that much longer for its commit). ``on_failure``: called
        on the event loop, once, when the store fails a commit (module docstring)."""
        self.store = store
        self.on_commit = on_commit
        self.window = window
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-writer")
        self._queue: list[tuple[Persist, asyncio.Future[T]]] = []
        self._flushing = False
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False
        self.on_failure = on_failure
        #: The store's failure once it failed a commit (then every write is refused).
        self.failure: StoreFailed | None = None
        self.commits = 0
        # the loop of the first submit (one loop only, see the class): asking asyncio for it
        # on every write costs a getpid() system call each time on Python 3.11
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, persist: Persist) -> asyncio.Future[T]:
        """Queue ``persist``; the future resolves after its commit (see the class)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._closed:
            future.set_exception(self._refusal())
            return future
        self._queue.append((persist, future))
        if not self._flushing:
            self._flushing = True
            self._flusher = loop.create_task(self._flush())
        return future

    @property
    def pending(self) -> int:
        """Items queued and not yet committed."""
        return len(self._queue)

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.sleep(0)  # let writes emitted together share one commit
            while self._queue:
                if self.window > 0 and len(self._queue) < GROUP_TARGET:
                    await asyncio.sleep(self.window)
                    if not self._queue:  # close() refused them meanwhile
                        return
                batch, self._queue = self._queue, []
                groups = [p.writes for p, _ in batch]
                try:
                    errors = await loop.run_in_executor(self._pool, self._apply, groups)
                except StoreFailed as exc:
                    self._fail(exc, batch)
                    return
                except RuntimeError:  # the pool is shut down: only close() does that
                    if not self._closed:
                        raise
                    errors = None
                if errors is None:  # the node stopped meanwhile: nothing more runs
                    self._refuse(batch)
                    return
                self.commits += 1
                for (persist, future), error in zip(batch, errors, strict=True):
                    try:
                        outcome = self.on_commit(persist, error)
                    except BaseException as exc:
                        if not future.done():
                            future.set_exception(exc)
                        continue
                    if not future.done():
                        future.set_result(outcome)
        finally:
            self._flushing = False

    def _refusal(self) -> InternalError:
        if self.failure is not None:
            return InternalError("the node stopped: its store failed a commit")
        return InternalError("the node is stopping")

    def _refuse(self, batch: list[tuple[Persist, asyncio.Future[T]]]) -> None:
        for _, future in batch:
            if not future.done():
                future.set_exception(self._refusal())

    def _fail(self, failure: StoreFailed, batch: list[tuple[Persist, asyncio.Future[T]]]) -> None:
        """Fail-stop (module docstring): refuse ``batch`` and everything after it, and tell
        ``on_failure``."""
        log.critical("%s", failure)
        self.failure = failure
        self._closed = True
        self._refuse(batch)
        queued, self._queue = self._queue, []
        self._refuse(queued)
        if self.on_failure is not None:
            try:
                self.on_failure(failure)
            except Exception:
                log.exception("the store failure callback failed")

    def _apply(self, groups: list[tuple[Write, ...]]) -> list[StoreError | None] | None:
        """On the writer thread: one group commit; if a malformed write makes the store
        refuse the whole batch, each group on its own (``None`` instead when the node stopped
        meanwhile). :raises StoreFailed: a commit failed."""
        try:
            return self.store.apply(groups)
        except StoreFailed:
            raise
        except Exception:
            return None if self._closed else self._one_by_one(groups)

    def _one_by_one(self, groups: list[tuple[Write, ...]]) -> list[StoreError | None]:
        """Apply each group in its own transaction, so that a malformed one fails alone.

        :raises StoreFailed: a commit failed (the groups before it are committed)."""
        errors: list[StoreError | None] = []
        for group in groups:
            try:
                errors.append(self.store.apply([group])[0])
            except StoreFailed:
                raise
            except Exception as exc:
                log.error("store refused a write: %s", exc)
                errors.append(StoreError(f"store refused the write: {exc}"))
        return errors

    async def read(self, fn: Callable[..., R], *args: object) -> R:
        """Run a read of the store on the writer's thread (the store is used by one thread
        at a time), after every write queued before it was called has been applied."""
        await self.drain()
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def drain(self) -> None:
        """Wait until everything queued so far is committed."""
        while self._flushing and self._flusher is not None:
            await asyncio.shield(self._flusher)

    def close(self) -> None:
        """Refuse further writes and stop the thread (queued writes are dropped: a crash
        at this moment would drop them too, and nothing unacknowledged is promised)."""
        self._closed = True
        self._refuse(self._queue)
        self._queue.clear()
        self._pool.shutdown(wait=True)
