"""The entry mix taking submissions: the part of :class:`~mixnet.core.entry.EntryMachine`
between a client's ``submit`` and its acknowledgement (pure).

A submission goes :meth:`EntrySubmissions.on_submit` (cheap checks; an exact retry of a
stored submission is answered at once) → :class:`~mixnet.core.actions.Peel` →
:meth:`~EntrySubmissions.peeled` (re-checks, counts it, asks to store it; or
:meth:`~EntrySubmissions.peeled_many` for a ``submit-many`` frame's boxes at once, whose
accepted submissions of one round share one write) → the commit
(:meth:`~EntrySubmissions._stored`: acknowledged). A submission is acknowledged only after
it is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from mixnet.admission import check_credential_client
from mixnet.blame import PayloadValidator
from mixnet.core.actions import Action, Peel, Persist, Reply
from mixnet.core.digests import all_distinct
from mixnet.core.intake import item_digests, submission_digest
from mixnet.core.records import AddSubmission, Submission
from mixnet.core.rounds import RoundState
from mixnet.core.status import RoundStatus
from mixnet.errors import (
    DuplicateClient,
    InternalError,
    MalformedFrame,
    MixnetError,
    RoundClosed,
    UnknownRound,
)
from mixnet.frames import Accepted, Submit

__all__ = ["AwaitStored", "EntrySubmissions", "PeeledMany", "Stored", "SubmitPeeled"]


@dataclass(frozen=True)
class SubmitPeeled:
    """Token of the :class:`Peel` of a submission."""

    round_id: int
    client: str
    digest: bytes


@dataclass(frozen=True)
class Stored:
    """Token of the :class:`Persist` of one or more submissions of round ``round_id``:
    ``clients[i]``'s, whose box has digest ``digests[i]`` (the two tuples are aligned; no
    client twice)."""

    round_id: int
    clients: tuple[str, ...]
    digests: tuple[bytes, ...]


@dataclass(frozen=True)
class PeeledMany:
    """What :meth:`EntrySubmissions.peeled_many` decided for several opened submissions.

    ``outcomes[i]`` is the ``i``-th submission's: the :class:`MixnetError` refusing it; the
    actions that lead to its reply (an exact retry's :class:`Reply`, or the empty
    :class:`Persist` it waits behind); or ``None``: accepted. ``actions`` is the work the
    accepted ones share, to be carried out before the outcomes' own actions (their writes
    commit in that order): per round, one :class:`Persist` of all its accepted submissions
    (token :class:`Stored`), whose commit answers each of them with a
    ``Reply(Accepted(round, client))``, and what closing the round asks for.
    """

    outcomes: tuple[list[Action] | MixnetError | None, ...]
    actions: tuple[Action, ...]


@dataclass(frozen=True)
class AwaitStored:
    """Token of an empty :class:`Persist` that lets an exact retry wait for its original."""

    round_id: int
    client: str


class EntrySubmissions:
    """Mixin of :class:`~mixnet.core.entry.EntryMachine` (see the module docstring), which
    sets the attributes below and provides ``_close`` and ``_mix_if_ready``."""

    rounds: dict[int, RoundState]
    credentials: bool
    hops: int
    messages: int
    validator: PayloadValidator
    #: Whether :meth:`~EntrySubmissions.peeled_many` first tries to decide a call whose
    #: submissions are all fresh at once (:meth:`~EntrySubmissions._peeled_fresh`); tests
    #: turn it off to compare with the submission-by-submission path.
    fresh_lane: bool = True

    if TYPE_CHECKING:

        def _close(self, st: RoundState) -> list[Action]: ...

        def _mix_if_ready(self, st: RoundState) -> list[Action]: ...

    def on_submit(self, frame: Submit) -> list[Action]:
        """Event: a client's ``submit`` frame (lengths already checked by the parser).

        An exact retry of a stored submission is acknowledged again in every round status
        (for :data:`RECEIPT_ROUNDS` rounds after its own), before and after a restart.

        :raises Unauthorized: ``credentials`` is on and the frame has no credential.
        :raises MalformedFrame: ``credentials`` is on and the client id is not the
            credential's.
        :raises RoundClosed: the round is known but no longer takes submissions (and this is
            not an exact retry of a submission stored in it).
        :raises UnknownRound: this node never opened the round (or forgot it).
        :raises MalformedFrame, WrongCount, BadLength, DuplicateClient: see
            :meth:`EntryIntake.check`.
        """
        if self.credentials:
            check_credential_client(frame.client, frame.credential)
        known = self.rounds.get(frame.round_id)
        if known is not None and known.entry is None and frame.client in known.receipts:
            retry = self._retry(known, frame.client, submission_digest(frame.box))
            if retry is not None:
                return retry
        st = self._intake_round(frame.round_id)
        assert st.entry is not None
        digest = st.entry.check(frame.client, frame.box)
        if digest is None:  # this exact submission was accepted before
            return self._ack_when_stored(st, frame.client)
        token = SubmitPeeled(frame.round_id, frame.client, digest)
        return [Peel(frame.round_id, (frame.box,), token, split=self.messages)]

    def _intake_round(self, r: int) -> RoundState:
        st = self.rounds.get(r)
        if st is None or st.entry is None:
            if st is not None and st.status is not RoundStatus.OPENING:
                raise RoundClosed(f"round {r} is {st.status.value}")
            raise UnknownRound(f"round {r} is unknown")
        return st

    def _retry(self, st: RoundState, client: str, digest: bytes) -> list[Action] | None:
        """The answer to an exact retry of a submission accepted in ``st`` (``None`` if it
        is not one)."""
        if st.receipts.get(client) == digest:
            return [Reply(Accepted(st.round_id, client))]
        if st.entry is not None and st.entry.accepted.get(client) == digest:
            return self._ack_when_stored(st, client)
        return None

    def _ack_when_stored(self, st: RoundState, client: str) -> list[Action]:
        if client in st.receipts:
            return [Reply(Accepted(st.round_id, client))]
        # still being stored: an empty transaction commits after it (writes are in order)
        return [Persist((), token=AwaitStored(st.round_id, client))]

    def peeled(
        self, token: object, results: Sequence[bytes | MixnetError], now: float
    ) -> list[Action]:
        """Event: the adapter opened a submission's box into its ``messages`` items
        (:class:`Peel` with ``token``).

        :raises MixnetError: the box failed to open (the submission is refused whole), or
            the round closed or the client was accepted meanwhile.
        """
        decided = self.peeled_many([(token, results)], now)
        (outcome,) = decided.outcomes
        if isinstance(outcome, MixnetError):
            raise outcome
        return list(decided.actions) if outcome is None else outcome

    def peeled_many(
        self,
        opened: Sequence[tuple[object, Sequence[bytes | MixnetError]]],
        now: float,
    ) -> PeeledMany:
        """Event: the adapter opened the boxes of several submissions (e.g. one
        ``submit-many`` frame's), given as ``(token, results)`` in order.

        Each submission is decided as :meth:`peeled` would decide it, called for each in
        turn, with the inner onions' digests checked against the round's replay filter in
        one vectorized probe; the accepted submissions of a round are stored by one write
        (see :class:`PeeledMany`).

        :raises TypeError: a token is not a submission token.
        """
        if self.fresh_lane:
            at_once = self._peeled_fresh(opened, now)
            if at_once is not None:
                return at_once
        outcomes: list[list[Action] | MixnetError | None] = []
        # equal onions peel to equal payloads: this catches a replay the in-memory onion
        # filter misses after a restart. With one mix the payloads are plaintext, where equal
        # values are legitimate, so only the onion filter applies.
        filtered = self.hops > 1
        pending: list[tuple[int, SubmitPeeled, tuple[bytes, ...], list[bytes]]] = []
        for index, (token, results) in enumerate(opened):
            if not isinstance(token, SubmitPeeled):
                raise TypeError(f"not a submission token: {token!r}")
            opened_items = tuple(results)
            if not set(map(type, opened_items)) <= {bytes}:  # the box did not open
                outcomes.append(
                    next(
                        (e for e in results if isinstance(e, MixnetError)),
                        InternalError("a box opened to something other than items"),
                    )
                )
                continue
            payloads = cast("tuple[bytes, ...]", opened_items)
            if len(payloads) != self.messages:
                outcomes.append(
                    InternalError(f"a box opened to {len(payloads)} items, not {self.messages}")
                )
            else:
                outcomes.append([])
                digests = item_digests(payloads) if filtered else []
                pending.append((index, token, payloads, digests))
        held = self._held(pending)
        fresh: dict[int, set[bytes]] = {}  # round -> digests accepted by this call
        batches: dict[int, list[Submission]] = {}  # round -> submissions accepted by this call
        closing: dict[int, list[Action]] = {}  # round -> what closing it asks for
        for index, token, payloads, digests in pending:
            try:
                outcomes[index] = self._accept_peeled(
                    token, payloads, digests, held.get(index, False),
                    fresh.setdefault(token.round_id, set()), batches, closing, now,
                )  # fmt: skip
            except MixnetError as exc:
                outcomes[index] = exc
        for r, accepted in fresh.items():
            st = self.rounds[r] if accepted else None
            if st is not None and st.status is RoundStatus.OPEN:  # closed: filter cleared
                st.payload_digests.add_new(b"".join(accepted))
        actions: list[Action] = []
        for r, subs in batches.items():
            token_out = Stored(r, tuple(s.client for s in subs), tuple(s.digest for s in subs))
            actions.append(
                Persist(tuple(AddSubmission(r, s) for s in subs), token=token_out)
            )
            actions += closing.pop(r, [])
        return PeeledMany(tuple(outcomes), tuple(actions))

    def _peeled_fresh(
        self,
        opened: Sequence[tuple[object, Sequence[bytes | MixnetError]]],
        now: float,
    ) -> PeeledMany | None:
        """:meth:`peeled_many` for its common call, decided at once: every submission of
        one open round, every box opened into ``messages`` items, no client or box already
        in the round or twice in the call, no item digest already in the round's filter or
        twice in the call, and the round not closing with them (a chain of more than one
        mix). Then every submission is accepted and stored by one write, exactly as the
        submission-by-submission path would decide them. Returns ``None``, having changed
        nothing, when any of that does not hold (that path then decides the call)."""
        if self.hops < 2 or not opened:
            return None
        first = opened[0][0]
        if type(first) is not SubmitPeeled:
            return None
        r = first.round_id
        st = self.rounds.get(r)
        if st is None or st.entry is None or st.status is not RoundStatus.OPEN:
            return None
        if not all(type(t) is SubmitPeeled and t.round_id == r for t, _ in opened):
            return None
        tokens = cast("list[SubmitPeeled]", [token for token, _ in opened])
        results = [tuple(items) for _, items in opened]
        if any(len(p) != self.messages for p in results):
            return None
        flat = [item for p in results for item in p]
        if set(map(type, flat)) != {bytes}:  # a box that did not open: decided one by one
            return None
        payloads = cast("list[tuple[bytes, ...]]", results)
        clients = [t.client for t in tokens]
        # a receipt answers a retry first, as in _retry (a client pending or accepted is in
        # the intake's accepted clients, which fresh checks)
        if not st.receipts.isdisjoint(clients):
            return None
        boxes = [t.digest for t in tokens]
        if not st.entry.fresh(clients, boxes, now):
            return None
        digests = b"".join(item_digests(cast("list[bytes]", flat)))
        if not all_distinct(digests) or not st.payload_digests.add_absent(digests):
            return None
        accepted = st.entry.accept_fresh(clients, boxes, now)
        assert accepted  # fresh, and nothing changed since
        st.pending.update(zip(clients, payloads, strict=True))
        writes = tuple(
            AddSubmission(r, Submission(c, d, p))
            for c, d, p in zip(clients, boxes, payloads, strict=True)
        )
        persist = Persist(writes, token=Stored(r, tuple(clients), tuple(boxes)))
        return PeeledMany((None,) * len(opened), (persist,))

    def _held(
        self, pending: Sequence[tuple[int, SubmitPeeled, tuple[bytes, ...], list[bytes]]]
    ) -> dict[int, bool]:
        """Per index of ``pending``: whether one of its digests is in its round's replay
        filter (one vectorized probe per round; open rounds only)."""
        by_round: dict[int, list[tuple[int, list[bytes]]]] = {}
        for index, token, _, digests in pending:
            if digests:
                by_round.setdefault(token.round_id, []).append((index, digests))
        held: dict[int, bool] = {}
        for r, group in by_round.items():
            st = self.rounds.get(r)
            if st is None or st.entry is None:
                continue  # the per-submission checks refuse these
            flags: list[bool] = st.payload_digests.held_many(
                b"".join(d for _, ds in group for d in ds)
            ).tolist()
            at = 0  # per submission whether any flag of its run is set
            for index, ds in group:
                held[index] = any(flags[at : at + len(ds)])
                at += len(ds)
        return held

    def _accept_peeled(
        self,
        token: SubmitPeeled,
        payloads: tuple[bytes, ...],
        digests: list[bytes],
        held: bool,
        earlier: set[bytes],
        batches: dict[int, list[Submission]],
        closing: dict[int, list[Action]],
        now: float,
    ) -> list[Action] | None:
        """:meth:`peeled` for one opened submission whose ``digests`` (of its items; empty
        with one mix) were probed in the round's filter (``held``: one is in it) and are
        checked against ``earlier``, those of its round accepted earlier in the same call
        (to which it adds its own when it accepts). Returns an exact retry's actions, or
        ``None`` when it accepts the submission: then it is added to its round's list in
        ``batches`` (stored together by the caller), and what closing the round asks for to
        ``closing``.

        :raises MixnetError: the submission is refused.
        """
        r, client, digest = token.round_id, token.client, token.digest
        known = self.rounds.get(r)
        retry = None if known is None else self._retry(known, client, digest)
        if retry is not None:
            return retry
        st = self._intake_round(r)
        assert st.entry is not None
        if self.hops == 1 and not all(self.validator(p) for p in payloads):
            raise MalformedFrame("a payload of the submission is not valid for the round")
        unique = set(digests)
        # a round closed meanwhile (by an earlier submission of the same call) has cleared
        # its filter: then, as in peeled, only the submission's own repeats count here (and
        # accept refuses it)
        probed = st.status is RoundStatus.OPEN
        if len(unique) != len(digests) or (probed and (held or not earlier.isdisjoint(unique))):
            raise DuplicateClient("submission repeats an onion already in this round")
        closes = st.entry.accept(client, digest, now)
        earlier.update(unique)
        st.pending[client] = payloads
        batches.setdefault(r, []).append(Submission(client, digest, payloads))
        if closes:
            closing.setdefault(r, []).extend(self._close(st))
        return None

    def _stored(self, token: Stored | AwaitStored) -> list[Action]:
        """Submissions' write (``Stored``), or the empty write an exact retry waited
        behind (``AwaitStored``), committed: acknowledge each of them.

        :raises RoundClosed: the round was aborted meanwhile (it dropped every submission
            still being stored, so none of the write's is acknowledged).
        :raises InternalError: the original of a retry was not stored (submit it again).
        """
        st = self.rounds[token.round_id]
        if isinstance(token, AwaitStored):
            if token.client in st.receipts:
                return [Reply(Accepted(token.round_id, token.client))]
            raise InternalError("the submission could not be stored; submit it again")
        if not all(c in st.pending for c in token.clients):  # the round was aborted meanwhile
            raise RoundClosed(f"round {token.round_id} is {st.status.value}")
        st.submissions.put_many(token.clients, [st.pending.pop(c) for c in token.clients])
        st.receipts.add(token.clients, token.digests)
        replies: list[Action] = [Reply(Accepted(token.round_id, c)) for c in token.clients]
        return [*replies, *self._mix_if_ready(st)]

    def _store_failed(self, token: Stored) -> list[Action]:
        """Submissions' write failed: they leave the round (their onions leave the filter,
        their client ids are free again) and a closed round is mixed if they were the last
        ones pending.
        """
        st = self.rounds[token.round_id]
        for client in token.clients:
            failed = st.pending.pop(client, ())
            st.payload_digests.difference_update(item_digests(failed))
            if st.entry is not None:
                st.entry.release(client, reopen=False)
        return self._mix_if_ready(st)
