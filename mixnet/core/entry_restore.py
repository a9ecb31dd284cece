"""Recovery of the entry mix: its round machine rebuilt from what the store holds (pure).

:func:`resume_entry` fills a fresh :class:`~mixnet.core.entry.EntryMachine` from the stored
records and returns the actions that resume unfinished work
(:meth:`EntryMachine.restore <mixnet.core.entry.EntryMachine.restore>` is the entry point).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixnet.core.actions import Action, Persist, Send
from mixnet.core.intake import EntryIntake, item_digest
from mixnet.core.outbound import derive_outbound
from mixnet.core.receipts import ReceiptTable
from mixnet.core.records import EraseKey, NodeRecords
from mixnet.core.rounds import RoundState
from mixnet.core.status import TERMINAL, RoundStatus
from mixnet.core.submissions import SubmissionTable
from mixnet.frames import AbortRound

if TYPE_CHECKING:
    from mixnet.core.entry import EntryMachine

__all__ = ["RECEIPT_ROUNDS", "resume_entry"]

#: Finished rounds whose receipts are kept, so that an exact retry of a stored submission is
#: acknowledged again even after the round closed or the node restarted.
RECEIPT_ROUNDS = 16


def resume_entry(m: EntryMachine, records: NodeRecords) -> list[Action]:
    """Fill the fresh machine ``m`` from ``records`` and return the actions that resume its
    unfinished work: a round left ``OPENING`` is aborted down the chain (its opening never
    completed); an ``OPEN`` round takes submissions again (until its stored deadline; a
    second one is aborted); a ``CLOSED`` round is mixed; a ``MIXED`` round's forwarding
    continues; a ``FORWARDED`` round's verdict is asked for again; an ``ABORTED`` round of
    the last ``RECEIPT_ROUNDS`` is announced to the chain again; keys of finished rounds are
    erased."""
    actions: list[Action] = []
    last = max((rec.round_id for rec in records.rounds), default=0)
    for rec in records.rounds:
        r = rec.round_id
        m.next_round_id = max(m.next_round_id, r + 1)
        st = RoundState(r, rec.status, rec.opened_at, rec.announcements, clients=rec.clients)
        stored = records.receipts.get(r, {})
        st.receipts = (
            stored if isinstance(stored, ReceiptTable) else ReceiptTable(stored.items())
        )
        if rec.status is not RoundStatus.OPEN:
            st.receipts.compact()  # its intake is over (no-op if the store compacted them)
        m.rounds[r] = st
        subs = records.submissions.get(r, ())
        if rec.status is RoundStatus.OPENING:
            actions += m._abort(st)
        elif rec.status is RoundStatus.OPEN and m.current is None:
            # the intake's clock starts where the stored deadline says
            started = (
                rec.opened_at
                if rec.deadline is None
                else rec.deadline - m.policy.deadline_seconds
            )
            st.entry = EntryIntake(r, m.messages, m.box_length, m.policy, started)
            for sub in subs:
                st.entry.restore(sub.client, sub.digest)
                st.submissions[sub.client] = sub.payloads
                if m.hops > 1:
                    st.payload_digests.update(item_digest(p) for p in sub.payloads)
            m.current = r
            if len(subs) >= m.policy.max_users:  # the closing write was lost in a crash
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
            # a batch stored as its seed is derived again from the submissions, in the order
            # they were stored, which is the order in which they were mixed
            outbound = derive_outbound(records.outbound[r], st.submissions.all_items())
            actions += m._resume_outbound(st, outbound)
        elif rec.status is RoundStatus.FORWARDED:
            st.submissions = SubmissionTable((sub.client, sub.payloads) for sub in subs)
            actions += m._forwarded(st)
        elif rec.status is RoundStatus.ABORTED and r > last - RECEIPT_ROUNDS:
            # the abort may not have reached the chain before the restart: say it again
            actions.append(Send(AbortRound(r)))
        if rec.secret_key is not None and rec.status in TERMINAL:
            actions.append(Persist((EraseKey(r),)))
    return actions
