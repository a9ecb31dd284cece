"""The entry mix's round machine (hop 0): it runs the rounds.

Life of a round here (statuses from :mod:`mixnet.core.status`)::

    OPENING --RoundKeys--> OPEN --policy--> CLOSED --mixed--> MIXED --last ack--> FORWARDED
       |  \\--refused--> FAILED      \\--below min_users--> ABORTED
    FORWARDED --exclusions passed--> CONFIRMED    (or ABORTED: see mixnet.core.verdict)

* :meth:`EntryMachine.handle_timer` opens a round when none is open or opening (making the
  round key through the injected :data:`~mixnet.core.rounds.KeyFactory`, storing it, and
  sending ``open-round`` down the chain), and applies the deadline to the open round.
* A submission goes :meth:`on_submit` (cheap checks; an exact retry of a stored submission is
  answered at once) → :class:`~mixnet.core.actions.Peel` → :meth:`peeled` (re-checks, counts
  it, asks to store it) → :meth:`persisted` (acknowledges it). A submission is acknowledged
  only after it is stored; a round is mixed only when every counted submission is stored.
* Time is the ``now`` argument (unix seconds); the machine reads no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mixnet.admission import check_credential_client
from mixnet.blame import PayloadValidator, accept_all
from mixnet.core.actions import Action, Peel, Persist, Reply, Send
from mixnet.core.deliveries import ChunkSigning
from mixnet.core.intake import EntryIntake, item_digest, submission_digest
from mixnet.core.policy import RoundPolicy
from mixnet.core.records import (
    AddSubmission,
    EraseKey,
    ForgetReceipts,
    NewRound,
    NodeRecords,
    SetRound,
    Submission,
    Write,
)
from mixnet.core.rounds import KeyFactory, RoundState
from mixnet.core.status import TERMINAL, Role, RoundStatus
from mixnet.core.submissions import SubmissionTable
from mixnet.core.verdict import EntryVerdict
from mixnet.errors import (
    DuplicateClient,
    InternalError,
    MalformedFrame,
    MixnetError,
    RoundClosed,
    UnknownRound,
)
from mixnet.frames import (
    AbortRound,
    Accepted,
    Batch,
    BatchAck,
    Frame,
    OpenRound,
    RoundKeys,
    RoundOffer,
    Submit,
)

__all__ = ["AwaitStored", "EntryMachine", "Opened", "Stored", "SubmitPeeled"]


@dataclass(frozen=True)
class SubmitPeeled:
    """Token of the :class:`Peel` of a submission."""

    round_id: int
    client: str
    digest: bytes


@dataclass(frozen=True)
class Stored:
    """Token of the :class:`Persist` of a submission."""

    round_id: int
    client: str
    digest: bytes


@dataclass(frozen=True)
class AwaitStored:
    """Token of an empty :class:`Persist` that lets an exact retry wait for its original."""

    round_id: int
    client: str


@dataclass(frozen=True)
class Opened:
    """Token of the :class:`Persist` that makes a round ``OPEN``."""

    round_id: int

#: Seconds before re-trying to open a round the chain refused, doubled per refusal up to
#: :data:`OPEN_RETRY_CAP`, then jittered: the wait is uniform in [ceiling/2, ceiling).
OPEN_RETRY_BASE = 0.5
OPEN_RETRY_CAP = 30.0
#: Finished rounds whose receipts are kept, so that an exact retry of a stored submission is
#: acknowledged again even after the round closed or the node restarted.
RECEIPT_ROUNDS = 16
#: Seconds an opening may take (the chain answering ``open-round``) before the entry mix
#: gives the round up and aborts it down the chain.
OPENING_TIMEOUT = 120.0


class EntryMachine(EntryVerdict):
    """The rounds of the entry mix. Construct it empty, or from stored records with
    :meth:`restore` after a restart.

    A submission is one box of ``box_length`` bytes holding ``messages`` inner onions
    (:func:`mixnet.onion.wrap_submission`); ``hops`` is the
    number of mixes (the ``round-keys`` reply must carry ``hops - 1`` announcements).
    With ``credentials`` (a chain with admission) every submission must carry a credential
    and use it as its client id (:func:`mixnet.admission.check_credential_client`), so the
    one-submission-per-client-id rule — receipts and restarts included — is one submission
    per credential per round; the credential's signature and admission are checked by the
    adapter before the frame reaches the machine.
    """

    role = Role.ENTRY

    def __init__(
        self,
        *,
        name: str,
        hops: int,
        messages: int,
        box_length: int,
        policy: RoundPolicy,
        keys: KeyFactory,
        jitter: Callable[[], float] = lambda: 1.0,
        successor: str = "",
        credentials: bool = False,
        validator: PayloadValidator = accept_all,
        signing: ChunkSigning | None = None,
    ) -> None:
        """``jitter()`` gives a uniform number in [0, 1] that spreads the back-off after a
        refused opening (the adapter passes the OS CSPRNG's; the default 1.0 waits the full
        ceiling). ``successor`` names the next mix (in the reasons of aborted rounds).
        ``validator`` is the application's payload check: in a chain of one mix the entry mix
        is also the last, sees every plaintext payload at intake and refuses a submission
        with one it rejects (whole; there is nothing to trace). ``signing`` signs its
        outbound chunks and judges blames (:mod:`mixnet.core.deliveries`)."""
        super().__init__(name=name, chunk_size=policy.chunk_size, keys=keys, signing=signing)
        self.jitter = jitter
        self.successor = successor
        self.validator = validator
        self.hops = hops
        self.messages = messages
        self.box_length = box_length
        self.policy = policy
        self.credentials = credentials
        self.next_round_id = 1
        self.current: int | None = None
        self.opening: int | None = None
        self._refusals = 0
        self._retry_at: float | None = None

    # ------------------------------------------------------------------ queries

    def offer(self) -> RoundOffer | None:
        """The ``round`` reply for clients, or ``None`` while no round takes submissions."""
        if self.current is None:
            return None
        st = self.rounds[self.current]
        assert st.entry is not None
        return RoundOffer(
            round_id=st.round_id,
            deadline=st.entry.deadline,
            messages=self.messages,
            payload_length=0,  # the adapter fills in the application's payload length
            clients=st.entry.clients,
            min_clients=self.policy.min_users,
            max_clients=self.policy.max_users,
            announcements=st.announcements,
        )

    def next_timer(self) -> float | None:
        """When :meth:`handle_timer` must next be called (``None``: only after an event).
        A value in the past means "now"."""
        due = [t for t in (self._round_timer(), self.verdict_timer()) if t is not None]
        return min(due, default=None)

    def _round_timer(self) -> float | None:
        if self.current is not None:
            st = self.rounds[self.current]
            assert st.entry is not None
            return st.entry.next_timer()
        if self.opening is not None:
            return self.rounds[self.opening].opened_at + OPENING_TIMEOUT
        return self._retry_at if self._retry_at is not None else 0.0

    # ------------------------------------------------------------------ timer

    def handle_timer(self, now: float) -> list[Action]:
        """Apply the deadline to the open round; abandon a round whose opening took longer
        than :data:`OPENING_TIMEOUT` (it is aborted down the chain, so nodes that did open
        it erase its key; the next opening backs off as after a refusal); open a new round
        when none is open or opening (and no back-off is running); ask again for the
        verdict of rounds whose ``trace`` was refused."""
        actions: list[Action] = self.handle_verdict_timer(now)
        if self.opening is not None:
            st = self.rounds[self.opening]
            if now >= st.opened_at + OPENING_TIMEOUT:
                actions += self._abort(st)
                self._back_off(now)
        if self.current is not None:
            st = self.rounds[self.current]
            assert st.entry is not None
            verdict = st.entry.poll(now)
            if verdict == "closed":
                actions += self._close(st)
            elif verdict == "aborted":
                actions += self._abort(st)
        idle = self.current is None and self.opening is None
        if idle and (self._retry_at is None or now >= self._retry_at):
            actions += self._open(now)
        return actions

    def _open(self, now: float) -> list[Action]:
        r = self.next_round_id
        self.next_round_id += 1
        key = self.keys(r)
        forget = [
            old
            for old, st in self.rounds.items()
            if old <= r - RECEIPT_ROUNDS and st.status in TERMINAL
        ]
        for old in forget:
            del self.rounds[old]
        self.rounds[r] = RoundState(r, RoundStatus.OPENING, now, (key.announcement,))
        self.opening = r
        writes: list[Write] = [ForgetReceipts(old) for old in forget]
        writes.append(NewRound(r, RoundStatus.OPENING, now, key.secret, (key.announcement,)))
        return [Persist(tuple(writes)), Send(OpenRound(r))]

    # ------------------------------------------------------------------ chain replies

    def on_reply(self, sent: Frame, reply: Frame, now: float) -> list[Action]:
        """Event: the successor answered ``sent`` with ``reply``."""
        verdict = self.verdict_reply(sent, reply, now)
        if verdict is not None:
            return verdict
        if isinstance(sent, OpenRound) and isinstance(reply, RoundKeys):
            return self._keys_arrived(sent.round_id, reply, now)
        if isinstance(sent, Batch) and isinstance(reply, BatchAck):
            if (reply.round_id, reply.index) != (sent.round_id, sent.index):
                raise InternalError("successor acknowledged another chunk")
            return self._batch_acked(reply)
        return []

    def _keys_arrived(self, r: int, reply: RoundKeys, now: float) -> list[Action]:
        st = self.rounds.get(r)
        if st is None or st.status is not RoundStatus.OPENING:
            return []
        downstream = reply.announcements
        if (
            reply.round_id != r
            or len(downstream) != self.hops - 1
            or any(a.round_id != r for a in downstream)
        ):
            return self.on_send_error(
                OpenRound(r), InternalError("successor announced keys for another round"), now
            )
        self._move(st, RoundStatus.OPEN)
        st.announcements = (*st.announcements, *downstream)
        st.entry = EntryIntake(r, self.messages, self.box_length, self.policy, now)
        if self.hops > 1:  # room for every onion of a full round, up front
            st.payload_digests.reserve(min(self.policy.max_users * self.messages, 1 << 21))
        return [
            Persist(
                (
                    SetRound(
                        r,
                        status=RoundStatus.OPEN,
                        deadline=st.entry.deadline,
                        announcements=st.announcements,
                    ),
                ),
                token=Opened(r),
            )
        ]

    def on_send_error(self, sent: Frame, error: MixnetError, now: float) -> list[Action]:
        """Event: the successor answered ``sent`` with an error (not retried by the link).

        A refused ``open-round`` fails the round (key erased) and backs off before the
        next; a refused ``trace`` or ``exclude`` is asked again later; other refusals leave
        the round where it is until a restart resumes it.
        """
        verdict = self.verdict_error(sent, error, now)
        if verdict is not None:
            return verdict
        if isinstance(sent, OpenRound):
            st = self.rounds.get(sent.round_id)
            if st is None or st.status is not RoundStatus.OPENING:
                return []
            self._move(st, RoundStatus.FAILED)
            self.opening = None
            self._back_off(now)
            # nodes that did open it must not keep it (and its keys) forever
            return [
                Persist((EraseKey(st.round_id), SetRound(st.round_id, status=st.status))),
                Send(AbortRound(st.round_id)),
            ]
        return []

    def _back_off(self, now: float) -> None:
        """Wait before the next opening: capped exponential in the refusals so far,
        jittered (uniform in [ceiling/2, ceiling])."""
        self._refusals += 1
        ceiling = min(OPEN_RETRY_CAP, OPEN_RETRY_BASE * 2 ** (self._refusals - 1))
        self._retry_at = now + ceiling * (0.5 + 0.5 * min(1.0, max(0.0, self.jitter())))

    # ------------------------------------------------------------------ submissions

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

    def peeled(self, token: object, results: Sequence[bytes | MixnetError], now: float) -> (
        list[Action]
    ):
        """Event: the adapter opened a submission's box into its ``messages`` items
        (:class:`Peel` with ``token``).

        :raises MixnetError: the box failed to open (the submission is refused whole), or
            the round closed or the client was accepted meanwhile.
        """
        (outcome,) = self.peeled_many([(token, results)], now)
        if isinstance(outcome, MixnetError):
            raise outcome
        return outcome

    def peeled_many(
        self,
        opened: Sequence[tuple[object, Sequence[bytes | MixnetError]]],
        now: float,
    ) -> list[list[Action] | MixnetError]:
        """Event: the adapter opened the boxes of several submissions (e.g. one
        ``submit-many`` frame's): per ``(token, results)``, in order, what :meth:`peeled`
        returns for it or the :class:`MixnetError` it raises — the same as calling
        :meth:`peeled` for each in turn, with the inner onions' digests checked against the
        round's replay filter in one vectorized probe.

        :raises TypeError: a token is not a submission token.
        """
        out: list[list[Action] | MixnetError] = []
        checked: list[tuple[SubmitPeeled, tuple[bytes, ...]]] = []
        for token, results in opened:
            if not isinstance(token, SubmitPeeled):
                raise TypeError(f"not a submission token: {token!r}")
            failed = next((item for item in results if isinstance(item, MixnetError)), None)
            if failed is None and len(results) != self.messages:
                failed = InternalError(
                    f"a box opened to {len(results)} items, not {self.messages}"
                )
            checked.append((token, tuple(p for p in results if isinstance(p, bytes))))
            out.append(failed if failed is not None else [])
        # equal onions peel to equal payloads: this catches a replay the in-memory onion
        # filter misses after a restart. With one mix the payloads are plaintext, where equal
        # values are legitimate, so only the onion filter applies.
        filtered = self.hops > 1
        digests = [[item_digest(p) for p in payloads] for _, payloads in checked]
        held: list[bool] = []
        if filtered:
            by_round: dict[int, list[int]] = {}
            for index, (token, _) in enumerate(checked):
                if not isinstance(out[index], MixnetError):
                    by_round.setdefault(token.round_id, []).append(index)
            held_by_index: dict[int, bool] = {}
            for r, indices in by_round.items():
                st = self.rounds.get(r)
                if st is None or st.entry is None:
                    continue  # the per-submission checks below refuse these
                blob = b"".join(d for i in indices for d in digests[i])
                flags = st.payload_digests.held_many(blob).tolist()
                for k, i in enumerate(indices):
                    held_by_index[i] = any(flags[k * self.messages : (k + 1) * self.messages])
            held = [held_by_index.get(i, False) for i in range(len(checked))]
        added: dict[int, list[bytes]] = {}  # round -> digests accepted by this call
        fresh: dict[int, set[bytes]] = {}  # ... the same, for the later submissions' checks
        for index, (token, payloads) in enumerate(checked):
            if isinstance(out[index], MixnetError):
                continue
            try:
                out[index] = self._accept_peeled(
                    token, payloads, digests[index] if filtered else [],
                    held[index] if filtered else False, fresh, added, now,
                )  # fmt: skip
            except MixnetError as exc:
                out[index] = exc
        for r, new in added.items():
            st = self.rounds[r]
            if st.status is RoundStatus.OPEN and new:  # closed: the filter was cleared
                st.payload_digests.add_new(b"".join(new))
        return out

    def _accept_peeled(
        self,
        token: SubmitPeeled,
        payloads: tuple[bytes, ...],
        digests: list[bytes],
        held: bool,
        fresh: dict[int, set[bytes]],
        added: dict[int, list[bytes]],
        now: float,
    ) -> list[Action]:
        """:meth:`peeled` for one opened submission whose ``digests`` (of its items; empty
        with one mix) were probed in the round's filter (``held``: one is in it) and are
        checked against ``fresh[round]``, those accepted earlier in the same call (which
        records what it accepts in ``fresh`` and ``added``)."""
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
        earlier = fresh.setdefault(r, set())
        if len(unique) != len(digests) or (probed and (held or not earlier.isdisjoint(unique))):
            raise DuplicateClient("submission repeats an onion already in this round")
        closes = st.entry.accept(client, digest, now)
        earlier.update(unique)
        added.setdefault(r, []).extend(digests)
        st.pending[client] = payloads
        actions: list[Action] = [
            Persist(
                (AddSubmission(r, Submission(client, digest, payloads)),),
                token=Stored(r, client, digest),
            )
        ]
        if closes:
            actions += self._close(st)
        return actions

    def persisted(self, token: object, now: float) -> list[Action]:
        """Event: a :class:`Persist` with ``token`` committed."""
        if isinstance(token, Opened):
            if self.rounds[token.round_id].status is RoundStatus.OPEN:
                self.opening = None
                self.current = token.round_id
                self._refusals = 0
                self._retry_at = None
            return []
        if isinstance(token, Stored):
            st = self.rounds[token.round_id]
            if token.client not in st.pending:  # the round was aborted meanwhile
                raise RoundClosed(f"round {token.round_id} is {st.status.value}")
            st.submissions[token.client] = st.pending.pop(token.client)
            st.receipts[token.client] = token.digest
            return [Reply(Accepted(token.round_id, token.client)), *self._mix_if_ready(st)]
        if isinstance(token, AwaitStored):
            if token.client in self.rounds[token.round_id].receipts:
                return [Reply(Accepted(token.round_id, token.client))]
            raise InternalError("the submission could not be stored; submit it again")
        raise TypeError(f"unknown token {token!r}")

    def persist_failed(self, token: object, now: float) -> list[Action]:
        """Event: a :class:`Persist` with ``token`` failed; nothing of it is stored.

        :raises InternalError: for a submission (the client gets an error and may retry).
        """
        if isinstance(token, Opened):
            st = self.rounds[token.round_id]
            if st.status is not RoundStatus.OPEN:
                return []
            return self._abort(st)
        if isinstance(token, Stored):
            st = self.rounds[token.round_id]
            failed = st.pending.pop(token.client, ())
            st.payload_digests.difference_update(item_digest(p) for p in failed)
            if st.entry is not None:
                st.entry.release(token.client, reopen=False)
            actions = self._mix_if_ready(st)
            if actions:
                return actions
        raise InternalError("the node could not store the submission; submit it again")

    # ------------------------------------------------------------------ closing

    def _close(self, st: RoundState) -> list[Action]:
        assert st.entry is not None
        self._move(st, RoundStatus.CLOSED)
        st.payload_digests.clear()  # no new submission can come
        self.current = None
        return [
            Persist((SetRound(st.round_id, status=RoundStatus.CLOSED, clients=st.entry.clients),)),
            *self._mix_if_ready(st),
        ]

    def _mix_if_ready(self, st: RoundState) -> list[Action]:
        """Mix a closed round once none of its submissions is still being stored."""
        if st.status is not RoundStatus.CLOSED or st.pending or st.clients is not None:
            return []
        if len(st.submissions) < self.policy.min_users:  # a store failure cost a user
            return self._abort(st)
        return self._start_mix(st, st.submissions.all_items(), len(st.submissions))

    def _abort(self, st: RoundState) -> list[Action]:
        """End ``st`` without a result: its intake and receipts go (an exact retry is then
        told the round is closed and the client submits afresh), its key is erased, and the
        chain is told."""
        if st.round_id == self.current:
            self.current = None
        if st.round_id == self.opening:
            self.opening = None
        self._move(st, RoundStatus.ABORTED)
        st.receipts.clear()
        erase = self._erase_and(st, RoundStatus.ABORTED)
        return [
            Persist((ForgetReceipts(st.round_id), *erase.writes)),
            Send(AbortRound(st.round_id)),
        ]

    # ------------------------------------------------------------------ recovery

    @classmethod
    def restore(
        cls,
        records: NodeRecords,
        now: float,
        *,
        name: str,
        hops: int,
        messages: int,
        box_length: int,
        policy: RoundPolicy,
        keys: KeyFactory,
        jitter: Callable[[], float] = lambda: 1.0,
        successor: str = "",
        credentials: bool = False,
        validator: PayloadValidator = accept_all,
        signing: ChunkSigning | None = None,
    ) -> tuple[EntryMachine, list[Action]]:
        """Rebuild the machine from what the store holds, and the actions that resume
        unfinished work: a round left ``OPENING`` is aborted down the chain (its opening
        never completed); an ``OPEN`` round takes submissions again (until its stored
        deadline); a ``CLOSED`` round is mixed; a ``MIXED`` round's forwarding continues; a
        ``FORWARDED`` round's verdict is asked for again."""
        m = cls(
            name=name,
            hops=hops,
            messages=messages,
            box_length=box_length,
            policy=policy,
            keys=keys,
            jitter=jitter,
            successor=successor,
            credentials=credentials,
            validator=validator,
            signing=signing,
        )
        actions: list[Action] = []
        last = max((rec.round_id for rec in records.rounds), default=0)
        for rec in records.rounds:
            r = rec.round_id
            m.next_round_id = max(m.next_round_id, r + 1)
            st = RoundState(r, rec.status, rec.opened_at, rec.announcements, clients=rec.clients)
            st.receipts = dict(records.receipts.get(r, {}))
            m.rounds[r] = st
            subs = records.submissions.get(r, ())
            if rec.status is RoundStatus.OPENING:
                actions += m._abort(st)
            elif rec.status is RoundStatus.OPEN and m.current is None:
                # the intake's clock starts where the stored deadline says
                started = (
                    rec.opened_at
                    if rec.deadline is None
                    else rec.deadline - policy.deadline_seconds
                )
                st.entry = EntryIntake(r, messages, box_length, policy, started)
                for sub in subs:
                    st.entry.restore(sub.client, sub.digest)
                    st.submissions[sub.client] = sub.payloads
                    if hops > 1:
                        st.payload_digests.update(item_digest(p) for p in sub.payloads)
                m.current = r
                if len(subs) >= policy.max_users:  # the closing write was lost in a crash
                    st.entry.status = "closed"
                    actions += m._close(st)
            elif rec.status is RoundStatus.OPEN:  # a second open round cannot happen: abort
                actions += m._abort(st)
            elif rec.status is RoundStatus.CLOSED:
                st.clients = None
                st.submissions = SubmissionTable((sub.client, sub.payloads) for sub in subs)
                actions += m._mix_if_ready(st)
            elif rec.status is RoundStatus.MIXED and r in records.outbound:
                st.submissions = SubmissionTable((sub.client, sub.payloads) for sub in subs)
                actions += m._resume_outbound(st, records.outbound[r])
            elif rec.status is RoundStatus.FORWARDED:
                st.submissions = SubmissionTable((sub.client, sub.payloads) for sub in subs)
                actions += m._forwarded(st)
            elif rec.status is RoundStatus.ABORTED and r > last - RECEIPT_ROUNDS:
                # the abort may not have reached the chain before the restart: say it again
                actions.append(Send(AbortRound(r)))
            if rec.secret_key is not None and rec.status in TERMINAL:
                actions.append(Persist((EraseKey(r),)))
        return m, actions
