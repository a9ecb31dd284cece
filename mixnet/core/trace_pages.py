"""The trace in pages (``docs/protocol.md``, "Trace and exclude"): how many bad items a
round can exclude is not limited by the size of one frame.

One ``accused`` reply carries at most :func:`~mixnet.core.trace_caps.accusation_cap`
accusations and one ``exclude`` frame at most :func:`~mixnet.core.trace_caps.exclude_cap`
items. Beyond that the answer comes in pages:

* **trace.** The entry mix asks ``trace {round, page}`` for page 0, 1, … while the reply says
  ``more``, each as soon as the previous page's answer comes (it checks that page
  meanwhile). A mix's pages are its *own* accusations first (:class:`OwnAccusations`: the inputs
  that did not peel, then the groups of inputs that peeled to one onion, then — at the last
  mix — the inputs whose payloads the validator refuses), then, at a relay, its successor's
  pages, each traced back through it: a relay with ``k`` pages of its own answers page
  ``p ≥ k`` by asking its successor for page ``p - k``. A page never splits a ``duplicate``
  group (such an accusation holds only next to its twins). The pages are a deterministic
  function of what the mix stored, so a restarted mix answers every page as before.
* **exclude.** The entry mix sends an exclusion that does not fit one frame as ``pages``
  frames (:func:`exclusion_pages`, whole submissions per page), one after the other. A relay
  passes each on; the last mix gathers them (:class:`ExclusionPages`) and applies the
  exclusion once it has all of them; it answers the last page only then. A restart that lost
  gathered pages makes it answer the last page ``not-ready``; the entry mix then starts the
  verdict over, from trace page 0.

Pure data and arithmetic: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mixnet.core.item_index import ItemIndex
from mixnet.errors import MalformedFrame
from mixnet.frames import Exclude

__all__ = [
    "EntryTrace",
    "ExclusionPages",
    "OwnAccusations",
    "OwnPage",
    "exclusion_pages",
    "own_pages",
]


@dataclass(frozen=True)
class OwnPage:
    """One page of a mix's own accusations: the inputs to prove, in order — first
    ``failures`` that did not peel, then ``duplicates`` whose layers hold a repeated onion,
    then (the last mix) those whose payloads the validator refuses."""

    items: tuple[bytes, ...]
    failures: int = 0
    duplicates: int = 0


@dataclass(frozen=True)
class OwnAccusations:
    """A mix's own accusations in a round, in ``pages``, and ``untraced``: how many of the
    items it dropped it cannot accuse (replays; layers that did not open on a chain without
    ownership proofs; a group of colliding onions larger than a page)."""

    pages: tuple[OwnPage, ...] = ()
    untraced: int = 0


def own_pages(
    failed: Sequence[bytes],
    twins: Sequence[Sequence[bytes]],
    refused: Sequence[bytes],
    *,
    cap: int,
    dropped: int,
) -> OwnAccusations:
    """Split a mix's own accusations into pages of at most ``cap`` items: ``failed`` inputs
    (one accusation each), ``twins`` (groups of inputs that peeled to one onion: a group is
    never split, and one larger than ``cap`` is not accused), ``refused`` inputs (payloads
    the validator refuses), packed in that order. ``dropped``: the items the mix dropped
    (failed, twins and replays); those not accused are ``untraced``.

    :raises ValueError: ``cap`` is below 1.
    """
    if cap < 1:
        raise ValueError(f"a page holds at least one accusation, not {cap}")
    pages: list[OwnPage] = []
    page: list[bytes] = []
    kinds = [0, 0]  # failures, duplicates on the page being filled
    accused_dropped = 0

    def close() -> None:
        if page:
            pages.append(OwnPage(tuple(page), kinds[0], kinds[1]))
            page.clear()
            kinds[0] = kinds[1] = 0

    groups: list[tuple[int, Sequence[bytes]]] = [(0, (item,)) for item in failed]
    groups += [(1, group) for group in twins]
    groups += [(2, (item,)) for item in refused]
    for kind, group in groups:
        if len(group) > cap:
            continue  # cannot be shown whole: untraced
        if len(page) + len(group) > cap:
            close()
        page.extend(group)
        if kind < 2:
            kinds[kind] += len(group)
            accused_dropped += len(group)
    close()
    return OwnAccusations(tuple(pages), max(0, dropped - accused_dropped))


def exclusion_pages(
    round_id: int, submissions: Sequence[Sequence[bytes]], cap: int
) -> tuple[Exclude, ...]:
    """The ``exclude`` frames that drop every item of ``submissions`` (each one excluded
    submission's hop-1 items): whole submissions, at most ``cap`` items a frame (one
    submission larger than ``cap`` gets a frame of its own), each frame naming the same
    ``excluded`` count and its ``page`` of ``pages``. No submission: one frame with none.

    :raises ValueError: ``cap`` is below 1.
    """
    if cap < 1:
        raise ValueError(f"an exclude frame holds at least one item, not {cap}")
    parts: list[list[bytes]] = [[]]
    for items in submissions:
        if parts[-1] and len(parts[-1]) + len(items) > cap:
            parts.append([])
        parts[-1].extend(items)
    count = len(submissions)
    return tuple(
        Exclude(round_id, tuple(part), count, page=page, pages=len(parts))
        for page, part in enumerate(parts)
    )


@dataclass
class ExclusionPages:
    """The last mix gathering the pages of one exclusion (memory only). ``limit``: the most
    items the round has here (an exclusion naming more is refused)."""

    pages: int
    excluded: int
    limit: int
    got: dict[int, tuple[bytes, ...]] = field(default_factory=dict)
    count: int = 0

    def matches(self, frame: Exclude) -> bool:
        """Whether ``frame`` is a page of this exclusion (same ``pages`` and ``excluded``)."""
        return (frame.pages, frame.excluded) == (self.pages, self.excluded)

    def add(self, frame: Exclude) -> bool:
        """Keep ``frame``'s items (a page seen before is kept as first seen); returns whether
        every page is here.

        :raises MalformedFrame: ``frame`` is not a page of this exclusion, or the pages
            name more items than the round has here.
        """
        if not self.matches(frame) or not 0 <= frame.page < self.pages:
            raise MalformedFrame("the page belongs to another exclusion")
        if frame.page not in self.got:
            if self.count + len(frame.items) > self.limit:
                raise MalformedFrame(
                    f"the exclusion names more items than the round's {self.limit} here"
                )
            self.got[frame.page] = frame.items
            self.count += len(frame.items)
        return len(self.got) == self.pages

    def whole(self, round_id: int) -> Exclude:
        """The gathered exclusion as one frame (every page's items, in page order).

        :raises ValueError: a page is missing.
        """
        if len(self.got) != self.pages:
            raise ValueError(f"{self.pages - len(self.got)} pages are missing")
        items = tuple(item for page in range(self.pages) for item in self.got[page])
        return Exclude(round_id, items, self.excluded)


@dataclass
class EntryTrace:
    """The entry mix's progress through one round's verdict (memory only: a restart asks
    again from page 0). ``attempt``: how many times the verdict started (a check made for
    an earlier one is not taken); ``page``: the trace page last asked for (the next is asked
    as soon as its answer comes, while that answer is checked); ``checked``: the pages
    checked; ``end``: the page that said no ``more``, once known; ``clients``: the
    submissions accused so far; ``origin``: the round's hop-1 items indexed (item → its
    position, whose submission is position // m), built once for the round's pages;
    ``exclusion``: the exclude frames being sent (once the trace is over; empty
    before), ``excluding`` the one in flight."""

    attempt: int = 0
    page: int = 0
    checked: set[int] = field(default_factory=set)
    end: int | None = None
    clients: set[str] = field(default_factory=set)
    origin: ItemIndex | None = None
    exclusion: tuple[Exclude, ...] = ()
    excluding: int = 0
