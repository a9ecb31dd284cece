"""How a node serves a ``submit-many`` frame (:mod:`mixnet.submit_many`): each submission
exactly as a lone ``submit``, with the work shared across the frame.

:class:`ServesSubmitMany` is a mixin of :class:`~mixnet.node.BaseNode`; the entry mix
(:class:`~mixnet.mix.MixNode`) overrides :meth:`ServesSubmitMany.peel_submissions` to open a
frame's boxes in one request and check them in one
:meth:`~mixnet.core.entry.EntryMachine.peeled_many`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mixnet.core.actions import Action, Peel
from mixnet.errors import MixnetError
from mixnet.frames import Frame
from mixnet.submit_many import receipts_frame

__all__ = ["ServesSubmitMany"]


class ServesSubmitMany:
    """Mixin: :meth:`_serve_many` and its hook :meth:`peel_submissions`, on top of the
    node's request path (:meth:`~mixnet.node.BaseNode.handle`, ``emit``, ``peel``,
    ``_answer``, ``_refusal``)."""

    if TYPE_CHECKING:

        def handle(self, frame: Frame) -> list[Action]: ...

        def emit(self, actions: Sequence[Action]) -> list[Action]: ...

        async def peel(self, action: Peel) -> list[Action]: ...

        async def _answer(self, actions: list[Action]) -> dict[str, object]: ...

        def _refusal(self, exc: Exception) -> dict[str, object]: ...

    async def peel_submissions(
        self, actions: Sequence[Peel]
    ) -> list[list[Action] | BaseException]:
        """:meth:`peel` for each of several submissions' :class:`Peel` actions (a
        ``submit-many`` frame's), in order: the machine's actions, or what it raised. This
        default runs them side by side; the entry mix opens them together."""
        return await asyncio.gather(*(self.peel(a) for a in actions), return_exceptions=True)

    async def _serve_many(self, submissions: Sequence[Frame | MixnetError]) -> dict[str, object]:
        """Serve the submissions of a ``submit-many`` frame, each exactly as a lone
        ``submit`` (:meth:`_serve`), and answer with their replies in order
        (:mod:`mixnet.submit_many`).

        Done in steps over the whole frame, so that the work is shared: the machine takes
        every submission first; the boxes it asks to open are opened together (:meth:`peel`
        runs side by side, and the entry mix's batcher opens them in one pool task); the
        writes the machine then asks for are all queued before any is waited for (one group
        commit); then each submission's remaining actions run in order, which resolves its
        reply (:meth:`peel_submissions`)."""
        replies: dict[int, dict[str, object]] = {}
        waiting: list[tuple[int, list[Action]]] = []
        peels: list[tuple[int, Peel]] = []
        for index, submission in enumerate(submissions):
            try:
                if isinstance(submission, MixnetError):
                    raise submission
                actions = self.emit(self.handle(submission))
            except Exception as exc:  # each submission is answered on its own
                replies[index] = self._refusal(exc)
                continue
            if len(actions) == 1 and isinstance(actions[0], Peel):
                peels.append((index, actions[0]))
            else:
                waiting.append((index, actions))
        opened = await self.peel_submissions([action for _, action in peels]) if peels else []
        for (index, _), outcome in zip(peels, opened, strict=True):
            try:
                if isinstance(outcome, BaseException):
                    raise outcome
                waiting.append((index, self.emit(outcome)))
            except Exception as exc:
                replies[index] = self._refusal(exc)
        for index, actions in waiting:
            try:
                replies[index] = await self._answer(actions)
            except Exception as exc:
                replies[index] = self._refusal(exc)
        return receipts_frame([replies[index] for index in range(len(submissions))])

