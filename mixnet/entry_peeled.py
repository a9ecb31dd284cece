"""The entry mix's lone ``submit`` frames decided together once their boxes are open.

The entry mix opens the boxes of submissions that arrive together in one peel task
(:mod:`mixnet.peeling`). Each submission's request then used to hand its opened box to the
machine on its own (:meth:`~mixnet.core.entry.EntryMachine.peeled`): one write, one commit
event and one machine call per submission. :class:`PeeledTogether` collects the boxes whose
peel finished in the same turn of the event loop and decides them with one
:meth:`~mixnet.core.entry.EntryMachine.peeled_many`, as a ``submit-many`` frame's are: the
accepted submissions of a round are stored by one write, whose commit answers each with its
own ``accepted`` (routed as a frame's are, by :class:`~mixnet.node_many.SharedReplies`); a
refusal or an exact retry goes back to its own request at once. Nothing waits for a group
to fill: a submission's decision happens in the loop turn its box opened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol

from mixnet.core.actions import Action, Reply
from mixnet.core.entry import EntryMachine
from mixnet.core.entry_submissions import SubmitPeeled
from mixnet.core.relay import RelayMachine
from mixnet.errors import InternalError, MixnetError
from mixnet.node_many import ReplySink, SharedReplies

__all__ = ["PeeledTogether"]

_Waiting = tuple[SubmitPeeled, Sequence[bytes | MixnetError], "asyncio.Future[list[Action]]"]


class EntryNode(Protocol):
    """What :class:`PeeledTogether` uses of the entry mix's node."""

    @property
    def machine(self) -> EntryMachine | RelayMachine: ...

    def clock(self) -> float: ...

    def emit(self, actions: Sequence[Action]) -> list[Action]: ...

    async def execute(
        self, actions: Sequence[Action], reply: ReplySink | None = None, *, detach: bool = False
    ) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task[Any]: ...


class PeeledTogether:
    """Decides the opened boxes of lone submissions together (module docstring). Use from
    the node's event loop."""

    def __init__(self, node: EntryNode) -> None:
        self._node = node
        self._queue: list[_Waiting] = []
        self._scheduled = False
        #: calls of ``peeled_many`` and the submissions decided in them (tests, metrics)
        self.decisions = 0
        self.decided = 0

    async def decided_actions(
        self, token: SubmitPeeled, results: Sequence[bytes | MixnetError]
    ) -> list[Action]:
        """What :meth:`~mixnet.core.entry.EntryMachine.peeled` would return for this
        submission's opened box, except that an accepted one's write is shared: the actions
        leading to its reply (an exact retry's own, not emitted yet; or, once the shared
        write committed, ``[Reply(Accepted(round, client))]``).

        :raises MixnetError: the submission is refused, or the shared write failed.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Action]] = loop.create_future()
        self._queue.append((token, results, future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._decide)
        return await future

    def _decide(self) -> None:
        self._scheduled = False
        batch, self._queue = self._queue, []
        live = [w for w in batch if not w[2].done()]  # a cancelled requester: never decided
        if not live:
            return
        node = self._node
        try:
            machine = node.machine
            if not isinstance(machine, EntryMachine):
                raise InternalError("only the entry mix takes submissions")
            decided = machine.peeled_many([(t, r) for t, r, _ in live], node.clock())
        except Exception as exc:  # the machine failed: each request is answered with it
            for _, _, future in live:
                future.set_exception(exc)
            return
        self.decisions += 1
        self.decided += len(live)
        waiting: dict[tuple[int, str], asyncio.Future[list[Action]]] = {}
        for (token, _, future), outcome in zip(live, decided.outcomes, strict=True):
            if outcome is None:
                waiting[(token.round_id, token.client)] = future
        if decided.actions or waiting:
            # emitted now, before any request's own actions: its writes commit first
            shared = node.emit(decided.actions)
            node.spawn(self._store(shared, waiting), "storing submissions")
        for (_, _, future), outcome in zip(live, decided.outcomes, strict=True):
            if isinstance(outcome, MixnetError):
                future.set_exception(outcome)
            elif outcome is not None:
                future.set_result(outcome)

    async def _store(
        self, shared: list[Action], waiting: dict[tuple[int, str], asyncio.Future[list[Action]]]
    ) -> None:
        """Carry out the shared actions; each accepted submission's request gets
        ``[Reply(Accepted(round, client))]`` once its write committed, or what refused it
        (:class:`~mixnet.node_many.SharedReplies` routes the replies)."""
        keys = list(waiting)
        sink = SharedReplies({key: index for index, key in enumerate(keys)})
        try:
            await self._node.execute(shared, sink, detach=True)
        finally:  # also when cancelled: nobody is left waiting
            answers = sink.answers()
            for index, key in enumerate(keys):
                future, answer = waiting[key], answers[index]
                if future.done():
                    continue
                if isinstance(answer, BaseException):
                    future.set_exception(answer)
                else:
                    future.set_result([Reply(answer)])
