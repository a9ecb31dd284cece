"""A mix node: the entry mix (hop 0, which runs the rounds) or a relay.

The adapter around :class:`~mixnet.core.entry.EntryMachine` or
:class:`~mixnet.core.relay.RelayMachine`: round keys are X25519 keys from the OS CSPRNG signed
with the mix's Ed25519 identity (held in a :class:`~mixnet.keys.RoundKeyring` that mirrors
the store: adopted when written, dropped when erased); peeling runs in parts of
:data:`PEEL_CHUNK` onions in the node's worker processes
(:class:`~mixnet.peel_processes.PeelProcesses`, ``settings.peel_processes`` of them) or, with
none, in a thread pool (libsodium releases the GIL), and small requests — the entry mix's
submission boxes — are peeled many per task (:class:`~mixnet.peeling.PeelBatcher`);
the permutation (:func:`~mixnet.core.outbound.permuted_chunks`, from a seed drawn from the
OS CSPRNG, which the store keeps instead of the permuted batch) runs in a thread too and
yields views of the round's buffer, not copies; the outbound chunks are signed in
that thread as well (their Merkle roots are off the event loop). The entry mix also answers
``get-round``, drives the machine's timer and, on a chain
with ``[admission]``, checks each submission's credential, token and signature
(:meth:`mixnet.admission.Admission.check`) before the machine sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from nacl.public import PrivateKey
from nacl.signing import SigningKey

from mixnet.blame import (
    PayloadValidator,
    accept_all,
)
from mixnet.chunk_signature import sign_chunk
from mixnet.core.actions import (
    Action,
    CompactReceipts,
    LoadIntake,
    Mix,
    Peel,
    Persist,
    Prove,
    Verify,
)
from mixnet.core.deliveries import ChunkSigning
from mixnet.core.entry import EntryMachine
from mixnet.core.entry_submissions import SubmitPeeled
from mixnet.core.intake import SEED_LENGTH, submission_digest
from mixnet.core.items import Items
from mixnet.core.outbound import permuted_chunks
from mixnet.core.records import EraseKey, NewRound
from mixnet.core.relay import RelayMachine
from mixnet.core.rounds import RoundKey
from mixnet.core.status import Role, RoundStatus
from mixnet.entry_peeled import PeeledTogether
from mixnet.errors import MixnetError, UnknownRound
from mixnet.frames import (
    AbortRound,
    Batch,
    Exclude,
    Frame,
    OpenRound,
    RoundOffer,
    Submit,
    Trace,
    to_wire,
)
from mixnet.keys import RoundKeyring, announce_round_key
from mixnet.link import Link, challenge_response, system_uniform
from mixnet.node import PREDECESSOR_FRAMES, BaseNode
from mixnet.peel_job import PeelJob
from mixnet.peel_processes import PeelProcesses
from mixnet.peeling import PeelBatcher, PeelPart, PeelRunner, in_pool
from mixnet.settings import NodeSettings
from mixnet.store import NodeStore
from mixnet.trace_work import check_in_parts, prove_in_parts

__all__ = ["PEEL_CHUNK", "MixNode"]

#: Onions handed to one thread-pool task.
PEEL_CHUNK = 1024
#: Seconds a mix waits for its successor's reply before it treats the link as lost and
#: resends (every node-to-node request is idempotent; a chunk is acknowledged once stored).
LINK_REPLY_TIMEOUT = 30.0
#: Seconds ``get-round`` waits for a round to open before answering ``unknown-round``.
GET_ROUND_WAIT = 30.0
#: Seconds the timer loop waits after a change before it looks at the machine's timer again.
TIMER_SETTLE = 0.005


class MixNode(BaseNode):
    """A mix of the chain (``settings.hop < settings.hops``). Its forward link trusts the
    chain's CA bundle (``settings.tls``) for a ``wss://`` successor.

    :raises ValueError: ``settings`` are not a mix's.
    :raises TlsError: the chain's CA bundle cannot be read.
    """

    def __init__(
        self,
        settings: NodeSettings,
        store: NodeStore,
        identity: SigningKey,
        *,
        clock: Callable[[], float] = time.time,
        validator: PayloadValidator = accept_all,
    ) -> None:
        if settings.successor_url is None or settings.is_sink:
            raise ValueError("a mix needs a successor")
        self.validator = validator
        if settings.hop == 0:
            self.role = Role.ENTRY
        else:
            self.role = Role.LAST if settings.hop == settings.hops - 1 else Role.RELAY
        self.accepts = frozenset({"submit"}) if settings.hop == 0 else PREDECESSOR_FRAMES
        link = Link(
            settings.successor_url,
            max_size=settings.successor_max_frame(),
            name=settings.name,
            authenticate=challenge_response(
                identity, chain_id=settings.chain_id, node=settings.name
            ),
            reply_timeout=LINK_REPLY_TIMEOUT,
            ssl_context=None if settings.tls is None else settings.tls.client_context(),
        )
        super().__init__(settings, store, clock=clock, link=link)
        self.identity = identity
        self.keyring = RoundKeyring()
        self.pool = ThreadPoolExecutor(
            max_workers=settings.workers, thread_name_prefix=f"peel-{settings.name}"
        )
        self.machine: EntryMachine | RelayMachine = self._fresh_machine()
        self._peeling: dict[int, int] = {}
        self._peel_started: dict[int, float] = {}
        self._item_length = settings.item_length_in()
        self.peel_processes = (
            PeelProcesses(settings.peel_processes, name=settings.name)
            if settings.peel_processes
            else None
        )
        if self.peel_processes is not None:
            workers = self.peel_processes
            self.metrics.add_peel_workers(lambda: workers.pids)
        self._peel_run: PeelRunner = (
            in_pool(self.pool) if self.peel_processes is None else self._run_in_process
        )
        tasks = settings.peel_processes or settings.workers
        self._batches = PeelBatcher(self._peel_run, tasks)
        self._together = PeeledTogether(self)

    # ------------------------------------------------------------------ the machine

    def _make_key(self, round_id: int) -> RoundKey:
        key = self.keyring.open_round(round_id)
        announcement = announce_round_key(
            self.identity,
            chain_id=self.settings.chain_id,
            node=self.settings.name,
            round_id=round_id,
            public_key=bytes(key.public_key),
        )
        return RoundKey(bytes(key), announcement)

    def _signing(self) -> ChunkSigning:
        """Signing this mix's outbound chunks and trace pages with its identity, and checking
        others'.

        The last mix signs nothing: its chunks go to the sink, which checks no signature and
        is never accused, so a signature there would prove nothing to anyone (about 0.35 s of
        the last mix's CPU in a round of 10^5 users, ``docs/wire.md`` § 6.3)."""
        s = self.settings
        identity = self.identity

        def sign(round_id: int, index: int, items: Sequence[bytes]) -> bytes:
            return sign_chunk(identity, chain_id=s.chain_id, round_id=round_id,
                              sender=s.name, index=index, items=items)  # fmt: skip

        def sign_message(message: bytes) -> bytes:
            return bytes(identity.sign(message).signature)

        names = tuple(name for name, _ in s.mix_identities)
        signer = sign if s.hop < s.hops - 1 else None
        return ChunkSigning(s.chain_id, names, dict(s.mix_identities), signer, sign_message)

    def _machine_args(self) -> dict[str, Any]:
        """What the machine of this node is built with, fresh or restored."""
        s = self.settings
        if s.hop == 0:
            return {
                "name": s.name,
                "hops": s.hops,
                "messages": s.messages,
                "box_length": s.item_length_in(),
                "policy": s.policy,
                "keys": self._make_key,
                "jitter": system_uniform,
                "successor": s.successor or "",
                "credentials": s.admission is not None,
                "validator": self.validator,
                "signing": self._signing(),
            }
        assert s.predecessor is not None
        return {
            "name": s.name,
            "predecessor": s.predecessor,
            "item_length": s.item_length_in(),
            "chunk_size": s.policy.chunk_size,
            "keys": self._make_key,
            "hop": s.hop,
            "successor": s.successor or "",
            "last": self.role is Role.LAST,
            "proven": s.ownership_proofs,
            "validator": self.validator,
            "signing": self._signing(),
        }

    def _fresh_machine(self) -> EntryMachine | RelayMachine:
        if self.settings.hop == 0:
            return EntryMachine(**self._machine_args())
        return RelayMachine(**self._machine_args())

    def recover(self) -> list[Action]:
        # a relay's inputs stay on disk until a trace reads them back (LoadIntake)
        records = self.store.records(inputs=False)
        for rec in records.rounds:
            if rec.secret_key is not None and not self.keyring.is_open(rec.round_id):
                self.keyring.adopt(rec.round_id, PrivateKey(rec.secret_key))
        now = self.clock()
        actions: list[Action]
        if self.settings.hop == 0:
            self.machine, actions = EntryMachine.restore(records, now, **self._machine_args())
        else:
            self.machine, actions = RelayMachine.restore(records, now, **self._machine_args())
        return self.emit(actions)

    def emit(self, actions: Sequence[Action]) -> list[Action]:
        for action in actions:
            if isinstance(action, Persist):
                for write in action.writes:
                    if isinstance(write, EraseKey):
                        self.keyring.erase(write.round_id)
                    elif (
                        isinstance(write, NewRound)
                        and write.secret_key is not None
                        and not self.keyring.is_open(write.round_id)
                    ):
                        self.keyring.adopt(write.round_id, PrivateKey(write.secret_key))
        return super().emit(actions)

    def handle(self, frame: Frame) -> list[Action]:
        m = self.machine
        now = self.clock()
        if isinstance(m, EntryMachine) and isinstance(frame, Submit):
            self._admit(frame, now)
            return m.on_submit(frame)
        if isinstance(m, RelayMachine):
            if isinstance(frame, OpenRound):
                return m.on_open_round(frame, now)
            if isinstance(frame, AbortRound):
                return m.on_abort_round(frame, now)
            if isinstance(frame, Batch):
                return m.on_batch(frame)
            if isinstance(frame, Trace):
                return m.on_trace(frame, now)
            if isinstance(frame, Exclude):
                return m.on_exclude(frame, now)
        return super().handle(frame)

    def _admit(self, frame: Submit, now: float) -> None:
        """On a chain with ``[admission]``: the submission's credential is admitted and its
        signature verifies (lengths and types were checked by the parser; nothing is peeled
        yet). Without ``[admission]`` every submission passes and its admission fields, if
        any, are ignored.

        :raises Unauthorized: no credential, or one that is not admitted.
        :raises MalformedFrame, BadLength: an admission field is missing or malformed.
        :raises BadSignature: the submission's signature does not verify.
        """
        admission = self.settings.admission
        if admission is not None:
            admission.check(
                frame, chain_id=self.settings.chain_id, digest=submission_digest(frame.box), now=now
            )

    def on_reply(self, sent: Frame, reply: Frame) -> list[Action]:
        return self.machine.on_reply(sent, reply, self.clock())

    def on_send_error(self, sent: Frame, error: MixnetError) -> list[Action]:
        return self.machine.on_send_error(sent, error, self.clock())

    def persisted(self, token: object) -> list[Action]:
        return self.machine.persisted(token, self.clock())

    def persist_failed(self, token: object) -> list[Action]:
        return self.machine.persist_failed(token, self.clock())

    def round_statuses(self) -> dict[int, RoundStatus]:
        return {r: st.status for r, st in self.machine.rounds.items()}

    # ------------------------------------------------------------------ heavy actions

    async def peel(self, action: Peel) -> list[Action]:
        """Peel the items with the round's key in the pool, in parts, then tell the machine.

        ``peel_seconds`` in ``/status`` is the wall time during which at least one peel of
        the round ran (concurrent submissions overlap; their times are not added twice).
        """
        flat = await self._peel_items(action.round_id, action.split, action.items)
        if isinstance(action.token, SubmitPeeled):  # a lone submit: decided with the others
            return await self._together.decided_actions(action.token, flat)
        return self.machine.peeled(action.token, flat, self.clock())

    async def peel_submissions(
        self, actions: Sequence[Peel]
    ) -> tuple[list[list[Action] | BaseException | None], list[Action]]:
        """The entry mix's :meth:`peel` for the submissions of one ``submit-many`` frame: the
        boxes of each round are opened together (one request to the batcher), and the machine
        takes them in one :meth:`~mixnet.core.entry.EntryMachine.peeled_many`, which stores
        the accepted ones of a round with one write (``None`` in their place; the shared
        actions answer them)."""
        if not isinstance(self.machine, EntryMachine):
            return await super().peel_submissions(actions)
        groups: dict[tuple[int, int], list[int]] = {}
        for index, action in enumerate(actions):
            groups.setdefault((action.round_id, action.split), []).append(index)
        opened: list[Sequence[bytes | MixnetError] | BaseException] = [[] for _ in actions]
        for (r, split), indices in groups.items():
            items = [item for i in indices for item in actions[i].items]
            try:
                flat = await self._peel_items(r, split, items)
            except MixnetError as exc:
                for i in indices:
                    opened[i] = exc
                continue
            at = 0
            for i in indices:
                size = len(actions[i].items) * split
                opened[i] = flat[at : at + size]
                at += size
        out: list[list[Action] | BaseException | None] = [
            o if isinstance(o, BaseException) else [] for o in opened
        ]  # errors stay in place
        ready = [i for i, o in enumerate(opened) if not isinstance(o, BaseException)]
        if not ready:
            return out, []
        decided = self.machine.peeled_many(
            [(actions[i].token, cast("list[bytes | MixnetError]", opened[i])) for i in ready],
            self.clock(),
        )
        for i, result in zip(ready, decided.outcomes, strict=True):
            out[i] = result
        return out, list(decided.actions)

    async def _peel_items(
        self, r: int, split: int, items: Sequence[bytes]
    ) -> Sequence[bytes | MixnetError]:
        """Peel ``items`` with round ``r``'s key in the pool (``split`` items out of each:
        the entry mix's boxes), timing it for ``/status``. A relay's chunk that opened whole
        in worker processes comes back as :class:`~mixnet.core.items.Items` (no object per
        item); the entry mix always gets a list.

        :raises MixnetError: the round's key is gone (``keyring.secret``).
        """
        key = self.keyring.secret(r)
        active = self._peeling.get(r, 0)
        if active == 0:
            self._peel_started[r] = self.clock()
        self._peeling[r] = active + 1
        s = self.settings
        job = PeelJob(
            bytes(key),
            bytes(key.public_key),
            chain_id=s.chain_id,
            round_id=r,
            hop_index=s.hop,
            expected_length=self._item_length,
            split=split,
            proven=s.ownership_proofs and s.hop > 0,
        )
        try:
            if len(items) * split < PEEL_CHUNK:  # e.g. a submission: peeled with others
                results = [await self._batches.peel((r, split), job, items)]
            else:
                parts = [items[i : i + PEEL_CHUNK] for i in range(0, len(items), PEEL_CHUNK)]
                results = await asyncio.gather(*(self._peel_run(job, part) for part in parts))
        finally:
            self._peeling[r] -= 1
            if self._peeling[r] == 0:
                del self._peeling[r]
                started = self._peel_started.pop(r)
                times = self._round_times.setdefault(r, {})
                times["peel_seconds"] = times.get("peel_seconds", 0.0) + self.clock() - started
        if self.role is not Role.ENTRY and all(isinstance(part, Items) for part in results):
            if len(results) == 1:
                return results[0]
            return Items.concat(cast("list[Items]", results))
        return [item for part in results for item in part]

    async def prove(self, action: Prove) -> list[Action]:
        """Prove this mix's step for each item (its shared secret and a Chaum–Pedersen
        proof) — for the first ``failures`` items the evidence that they cannot be peeled
        instead — in the pool's threads (:func:`~mixnet.trace_work.prove_in_parts`); then
        tell the machine."""
        r = action.round_id
        key = self.keyring.secret(r)
        s = self.settings
        steps = await prove_in_parts(
            self.pool, s.workers, action.items, failures=action.failures, secret=bytes(key),
            public=bytes(key.public_key), chain_id=s.chain_id, round_id=r, hop=s.hop,
            proven=s.ownership_proofs and s.hop > 0,
        )  # fmt: skip
        assert isinstance(self.machine, RelayMachine)
        return self.machine.proved(action.token, steps, self.clock())

    async def load_intake(self, action: LoadIntake) -> list[Action]:
        """Read the round's stored chunks back (on the writer's thread, after the writes
        queued before), then tell the machine."""
        if not isinstance(self.machine, RelayMachine):
            raise TypeError("only a mix after the entry mix reads its intake back")
        chunks = await self.writer.read(self.store.chunks, action.round_id)
        return self.machine.intake_loaded(action.token, chunks, self.clock())

    async def verify(self, action: Verify) -> list[Action]:
        """Check accusations (proofs, layers, the validator) in the pool's threads
        (:func:`~mixnet.trace_work.check_in_parts`); then tell the machine."""
        s = self.settings
        results = await check_in_parts(
            self.pool, s.workers, action.accusations, action.keys, chain_id=s.chain_id,
            round_id=action.round_id, mixes=s.hops, validator=self.validator,
            proven=s.ownership_proofs,
        )  # fmt: skip
        return self.machine.verified(action.token, results, self.clock())

    async def mix(self, action: Mix) -> list[Action]:
        """Permute the round (OS CSPRNG) and cut it in chunks, off the event loop."""
        started = self.clock()
        signing = self.machine.signing
        sign = None if signing is None else signing.sign
        chunks, signatures, seed = await asyncio.get_running_loop().run_in_executor(
            self.pool, _mix_cut_and_sign, action.payloads, action.chunk_size, action.round_id,
            sign,
        )  # fmt: skip
        # every item the round's stored chunks dropped (replays, layers that did not peel,
        # copies of an onion that several inputs peeled to), counted by the machine: also
        # after a restart, which re-derives it from the store
        st = self.machine.rounds.get(action.round_id)
        self.note(
            action.round_id,
            messages=len(action.payloads),
            mix_seconds=self.clock() - started,
            dropped=0 if st is None else st.dropped,
        )
        return self.machine.mixed(action.round_id, chunks, signatures, seed=seed)

    def receipts_held(self) -> int:
        """Receipts the entry mix keeps, over the rounds it keeps them for (0 at a relay)."""
        return sum(len(st.receipts) for st in self.machine.rounds.values())

    async def compact_receipts(self, action: CompactReceipts) -> list[Action]:
        """Compact an ended round's receipts in a worker thread (the event loop goes on
        answering, reading the receipts as they are meanwhile); the machine takes the copy."""
        compacted = await asyncio.get_running_loop().run_in_executor(
            self.pool, action.receipts.compacted
        )
        assert isinstance(self.machine, EntryMachine)
        return self.machine.receipts_compacted(action.round_id, compacted)

    # ------------------------------------------------------------------ entry mix

    def after_start(self) -> None:
        self.spawn(self._run_timers(), "round timer")

    async def _run_timers(self) -> None:
        """Call the machine's timer when it is due (and after every change): the entry
        mix's rounds, a later mix's trace timeout."""
        while not self._stopping:
            machine = self.machine
            now = self.clock()
            due = machine.next_timer()
            if due is not None and due <= now:
                actions = self.emit(machine.handle_timer(now))
                if actions:
                    self.spawn(self.execute(actions), "round timer actions")
                await asyncio.sleep(0)
                continue
            self._changed.clear()
            timeout = 1.0 if due is None else min(1.0, max(0.0, due - now))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=timeout)
            # changes come in bursts (every write of every submission): look again at most
            # every TIMER_SETTLE seconds, not once per change
            await asyncio.sleep(TIMER_SETTLE)

    def extra_request(
        self, kind: str
    ) -> Callable[[dict[str, object]], Coroutine[Any, Any, dict[str, object]]] | None:
        if kind == "get-round" and isinstance(self.machine, EntryMachine):
            return self._on_get_round
        return None

    async def _on_get_round(self, raw: dict[str, object]) -> dict[str, object]:
        machine = self.machine
        assert isinstance(machine, EntryMachine)
        deadline = asyncio.get_running_loop().time() + GET_ROUND_WAIT
        offer = machine.offer()
        while offer is None:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise UnknownRound("no round is open; try again")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 1.0))
            offer = machine.offer()
        return to_wire(
            RoundOffer(
                round_id=offer.round_id,
                deadline=offer.deadline,
                messages=offer.messages,
                payload_length=self.settings.payload_length,
                clients=offer.clients,
                min_clients=offer.min_clients,
                max_clients=offer.max_clients,
                announcements=offer.announcements,
            )
        )

    def status(self) -> dict[str, object]:
        out = super().status()
        if isinstance(self.machine, EntryMachine):
            offer = self.machine.offer()
            out["current_round"] = (
                None
                if offer is None
                else {"round": offer.round_id, "clients": offer.clients, "deadline": offer.deadline}
            )
        if self.peel_processes is not None:
            # their CPU is their own: process_cpu_seconds_total in /metrics is this process's
            out["peel_workers"] = {
                "pids": self.peel_processes.pids,
                "replaced": self.peel_processes.replaced,
            }
        return out

    async def _run_in_process(
        self, part: PeelPart, items: Sequence[bytes]
    ) -> Sequence[bytes | MixnetError]:
        """The :data:`~mixnet.peeling.PeelRunner` of a node with peel worker processes."""
        assert self.peel_processes is not None and isinstance(part, PeelJob)
        return await self.peel_processes.run(part, items)

    async def start(self, host: str, port: int, *, tls: ssl.SSLContext | None = None) -> int:
        """:meth:`BaseNode.start <mixnet.node.BaseNode.start>`, the peel worker processes
        started first (if the settings ask for them).

        :raises OSError: also when a worker process cannot be started.
        """
        if self.peel_processes is not None:
            await self.peel_processes.start()
        return await super().start(host, port, tls=tls)

    async def stop(self) -> None:
        await super().stop()
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.peel_processes is not None:
            await self.peel_processes.close()


def _mix_cut_and_sign(
    payloads: Sequence[bytes],
    chunk_size: int,
    round_id: int,
    sign: Callable[[int, int, Sequence[bytes]], bytes] | None,
) -> tuple[list[Items], list[bytes] | None, bytes]:
    """The round under a uniform permutation drawn from a fresh seed from the OS CSPRNG,
    cut in chunks of ``chunk_size`` (:func:`~mixnet.core.outbound.permuted_chunks`: views of
    the round's buffer, each gathered when it is stored or sent), each chunk's signature by
    ``sign`` (``None``: no signatures), and the seed (the store keeps it instead of the
    batch) — in the calling (worker) thread rather than on the event loop."""
    seed = os.urandom(SEED_LENGTH)
    chunks = permuted_chunks(payloads, seed, chunk_size)
    if sign is None:
        return chunks, None, seed
    return chunks, [sign(round_id, index, chunk) for index, chunk in enumerate(chunks)], seed
