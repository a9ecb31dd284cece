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
  it, asks to store it) → :meth:`persisted` (acknowledges it): the mixin
  :class:`~mixnet.core.entry_submissions.EntrySubmissions`. A submission is acknowledged only
  after it is stored; a round is mixed only when every counted submission is stored.
* After a restart :meth:`EntryMachine.restore` rebuilds the machine from the stored records
  (:mod:`mixnet.core.entry_restore`).
* Time is the ``now`` argument (unix seconds); the machine reads no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mixnet.blame import PayloadValidator, accept_all
from mixnet.core.actions import Action, Persist, Send
from mixnet.core.deliveries import ChunkSigning
from mixnet.core.entry_restore import RECEIPT_ROUNDS, resume_entry
from mixnet.core.entry_submissions import (
    AwaitStored,
    EntrySubmissions,
    PeeledMany,
    Stored,
    SubmitPeeled,
)
from mixnet.core.intake import EntryIntake
from mixnet.core.policy import RoundPolicy
from mixnet.core.records import (
    EraseKey,
    ForgetReceipts,
    NewRound,
    NodeRecords,
    SetRound,
    Write,
)
from mixnet.core.rounds import KeyFactory, RoundState
from mixnet.core.status import TERMINAL, Role, RoundStatus
from mixnet.core.verdict import EntryVerdict
from mixnet.errors import (
    InternalError,
    MixnetError,
)
from mixnet.frames import (
    AbortRound,
    Batch,
    BatchAck,
    Frame,
    OpenRound,
    RoundKeys,
    RoundOffer,
)

__all__ = [
    "RECEIPT_ROUNDS",
    "AwaitStored",
    "EntryMachine",
    "Opened",
    "PeeledMany",
    "Stored",
    "SubmitPeeled",
]


@dataclass(frozen=True)
class Opened:
    """Token of the :class:`Persist` that makes a round ``OPEN``."""

    round_id: int

#: Seconds before re-trying to open a round the chain refused, doubled per refusal up to
#: :data:`OPEN_RETRY_CAP`, then jittered: the wait is uniform in [ceiling/2, ceiling).
OPEN_RETRY_BASE = 0.5
OPEN_RETRY_CAP = 30.0
#: Seconds an opening may take (the chain answering ``open-round``) before the entry mix
#: gives the round up and aborts it down the chain.
OPENING_TIMEOUT = 120.0


class EntryMachine(EntrySubmissions, EntryVerdict):
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
        due = [
            t
            for t in (self._round_timer(), self.verdict_timer(), self.resend_timer())
            if t is not None
        ]
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
        verdict of rounds whose ``trace`` was refused; send refused chunks again."""
        actions: list[Action] = self.handle_verdict_timer(now) + self.handle_resend_timer(now)
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
        next; a refused ``trace`` or ``exclude`` is asked again later; a refused chunk is
        sent again later (:meth:`~mixnet.core.rounds.MixRounds.chunk_refused`); other
        refusals leave the round where it is until a restart resumes it.
        """
        verdict = self.verdict_error(sent, error, now)
        if verdict is not None:
            return verdict
        if isinstance(sent, Batch):
            return self.chunk_refused(sent, now)
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

    def persisted(self, token: object, now: float) -> list[Action]:
        """Event: a :class:`Persist` with ``token`` committed."""
        if isinstance(token, Opened):
            if self.rounds[token.round_id].status is RoundStatus.OPEN:
                self.opening = None
                self.current = token.round_id
                self._refusals = 0
                self._retry_at = None
            return []
        if isinstance(token, Stored | AwaitStored):
            return self._stored(token)
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
            actions = self._store_failed(token)
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
        ``FORWARDED`` round's verdict is asked for again (:func:`~mixnet.core.entry_restore.
        resume_entry`)."""
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
        return m, resume_entry(m, records)
