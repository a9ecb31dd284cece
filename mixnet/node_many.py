"""How a node serves a ``submit-many`` frame (:mod:`mixnet.submit_many`): each submission
exactly as a lone ``submit``, with the work shared across the frame.

:class:`ServesSubmitMany` is a mixin of :class:`~mixnet.node.BaseNode`; the entry mix
(:class:`~mixnet.mix.MixNode`) overrides :meth:`ServesSubmitMany.peel_submissions` to open a
frame's boxes in one request and decide them in one
:meth:`~mixnet.core.entry.EntryMachine.peeled_many`, which stores the accepted submissions of
a round with one write: one commit, one machine event and one reply per frame, not per
submission.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from mixnet.core.actions import Action, Peel
from mixnet.errors import InternalError, MixnetError
from mixnet.frames import Accepted, Frame, Submit, to_wire
from mixnet.submit_many import receipts_frame

__all__ = ["ReplySink", "ServesSubmitMany", "SharedReplies"]


class ReplySink(Protocol):
    """Where :meth:`~mixnet.node.BaseNode.execute` puts a request's answer: an
    ``asyncio.Future[Frame]``, or :class:`SharedReplies` for several requests at once."""

    def done(self) -> bool: ...

    def set_result(self, result: Frame, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class SharedReplies:
    """The :class:`ReplySink` of actions that answer several submissions: each
    ``Reply(Accepted(round, client))`` answers the submission waiting under
    ``(round, client)``; an error answers every one not answered yet. Done when every
    submission is answered."""

    def __init__(self, waiting: Mapping[tuple[int, str], int]) -> None:
        """``waiting``: ``(round, client)`` → the submission's index in its frame."""
        self._waiting = dict(waiting)
        self._indices = list(waiting.values())
        self._frames: dict[int, Frame] = {}
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._error is not None or not self._waiting

    def set_result(self, result: Frame, /) -> None:
        if isinstance(result, Accepted):
            index = self._waiting.pop((result.round_id, result.client), None)
            if index is not None:
                self._frames[index] = result

    def set_exception(self, exception: BaseException, /) -> None:
        if self._error is None:
            self._error = exception

    def answers(self) -> dict[int, Frame | BaseException]:
        """Per index: its reply, or what refuses it (the error, or ``InternalError`` if
        nothing answered it)."""
        error = self._error or InternalError("the node gave no answer")
        return {i: self._frames.get(i, error) for i in self._indices}


class ServesSubmitMany:
    """Mixin: :meth:`_serve_many` and its hook :meth:`peel_submissions`, on top of the
    node's request path (:meth:`~mixnet.node.BaseNode.handle`, ``emit``, ``execute``,
    ``peel``, ``_answer``, ``_refusal``)."""

    if TYPE_CHECKING:

        def handle(self, frame: Frame) -> list[Action]: ...

        def emit(self, actions: Sequence[Action]) -> list[Action]: ...

        async def execute(
            self,
            actions: Sequence[Action],
            reply: ReplySink | None = None,
            *,
            detach: bool = False,
        ) -> None: ...

        async def peel(self, action: Peel) -> list[Action]: ...

        async def _answer(self, actions: list[Action]) -> dict[str, object]: ...

        def _refusal(self, exc: Exception) -> dict[str, object]: ...

    async def peel_submissions(
        self, actions: Sequence[Peel]
    ) -> tuple[list[list[Action] | BaseException | None], list[Action]]:
        """:meth:`peel` for each of several submissions' :class:`Peel` actions (a
        ``submit-many`` frame's), in order. Returns per submission the machine's actions,
        what it raised, or ``None`` (accepted: a ``Reply(Accepted(round, client))`` among the
        outcomes of the shared actions answers it); and the shared actions, which are
        carried out before the submissions' own (their writes commit first). This default
        runs :meth:`peel` side by side and shares nothing; the entry mix opens the boxes
        together and stores them with one write."""
        outcomes = await asyncio.gather(*(self.peel(a) for a in actions), return_exceptions=True)
        return list(outcomes), []

    async def _serve_many(self, submissions: Sequence[Frame | MixnetError]) -> dict[str, object]:
        """Serve the submissions of a ``submit-many`` frame, each exactly as a lone
        ``submit`` (:meth:`_serve`), and answer with their replies in order
        (:mod:`mixnet.submit_many`).

        Done in steps over the whole frame, so that the work is shared: the machine takes
        every submission first; the boxes it asks to open are opened together
        (:meth:`peel_submissions`); the shared writes, then every other write the machine
        asked for, are queued before any is waited for (one group commit); then the shared
        actions run, which answer the accepted submissions, and each other submission's
        actions run in order, which resolves its reply."""
        replies: dict[int, dict[str, object]] = {}
        waiting: list[tuple[int, list[Action]]] = []
        peels: list[tuple[int, Peel]] = []
        for index, submission in enumerate(submissions):
            try:
                if isinstance(submission, MixnetError):
                    raise submission
                actions = self.handle(submission)
                if len(actions) == 1 and isinstance(actions[0], Peel):
                    peels.append((index, actions[0]))  # nothing to emit: it only asks
                else:
                    waiting.append((index, self.emit(actions)))
            except Exception as exc:  # each submission is answered on its own
                replies[index] = self._refusal(exc)
        opened, shared = (
            await self.peel_submissions([action for _, action in peels]) if peels else ([], [])
        )
        shared = self.emit(shared)
        accepted: dict[tuple[int, str], int] = {}
        for (index, _), outcome in zip(peels, opened, strict=True):
            try:
                if isinstance(outcome, BaseException):
                    raise outcome
                if outcome is None:
                    frame = submissions[index]
                    assert isinstance(frame, Submit)
                    accepted[(frame.round_id, frame.client)] = index
                else:
                    waiting.append((index, self.emit(outcome)))
            except Exception as exc:
                replies[index] = self._refusal(exc)
        if shared or accepted:
            sink = SharedReplies(accepted)
            await self.execute(shared, sink, detach=True)
            for index, answer in sink.answers().items():
                if isinstance(answer, Exception):
                    replies[index] = self._refusal(answer)
                elif isinstance(answer, BaseException):
                    raise answer
                else:
                    replies[index] = to_wire(answer)
        for index, actions in waiting:
            try:
                replies[index] = await self._answer(actions)
            except Exception as exc:
                replies[index] = self._refusal(exc)
        return receipts_frame([replies[index] for index in range(len(submissions))])
