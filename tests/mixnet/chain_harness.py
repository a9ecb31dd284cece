"""An in-memory chain of round machines: no sockets, no sqlite, no threads, no crypto.

Nodes are the real machines of :mod:`mixnet.core` (an entry mix, relays, a sink). The
harness plays their adapters: it applies ``Persist`` writes to a :class:`MemoryStore` (and
feeds ``persisted``), peels fake onions (a layer is 8 random bytes appended to the item), runs
``Mix`` with a seeded permutation, delivers ``Send`` frames as link exchanges that a test may
deliver, answer, cut (the sender then resends the same frame, as a real link does), and
crashes and restarts nodes from their stored records only. A client is modelled like the
client library: it resends an identical submission after a cut and re-encodes for a new round
only when told the round is closed or unknown.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from nacl.signing import SigningKey

from mixnet.blame import Accusation, Failure, Step
from mixnet.chunk_signature import sign_chunk
from mixnet.core.actions import (
    Action,
    CompactReceipts,
    Deliver,
    LoadIntake,
    Mix,
    Peel,
    Persist,
    Prove,
    Publish,
    Reply,
    Send,
    Verify,
)
from mixnet.core.deliveries import ChunkSigning
from mixnet.core.entry import EntryMachine
from mixnet.core.intake import SEED_LENGTH
from mixnet.core.outbound import permuted_chunks
from mixnet.core.policy import RoundPolicy
from mixnet.core.records import (
    AckOutbound,
    AddChunk,
    AddSubmission,
    Chunk,
    DerivedOutbound,
    DropIntake,
    DropOutbound,
    EraseKey,
    ForgetReceipts,
    NewRound,
    NodeRecords,
    OutboundBatch,
    OutboundChunk,
    PutOutbound,
    PutResult,
    RoundRecord,
    SetRound,
    Submission,
    Write,
)
from mixnet.core.relay import RelayMachine
from mixnet.core.rounds import RoundKey
from mixnet.core.sink import SinkMachine
from mixnet.core.trace_caps import exclude_cap
from mixnet.errors import MixnetError, RoundClosed, UnknownRound
from mixnet.frames import (
    AbortRound,
    Accepted,
    Batch,
    Exclude,
    Frame,
    OpenRound,
    Submit,
    Trace,
)
from mixnet.keys import RoundKeyAnnouncement

LAYER = 8
VALUE = 8
#: The harness application's validator: a payload is valid if its value is below this.
VALID_BELOW = 1 << 32


def valid_payload(payload: bytes) -> bool:
    """The harness application's payload validator."""
    return int.from_bytes(payload, "big") < VALID_BELOW


def fake_peel(items: Sequence[bytes], split: int = 1) -> list[bytes | MixnetError]:
    """Peel fake onions (a layer is ``LAYER`` bytes appended) and cut each content into
    ``split`` equal items, as :func:`mixnet.onion.peel_many` does with real ones."""
    out: list[bytes | MixnetError] = []
    for item in items:
        inner = item[:-LAYER]
        width = len(inner) // split
        out.extend(inner[i * width : (i + 1) * width] for i in range(split))
    return out


class MemoryStore:
    """What a node's sqlite store keeps, in dicts; applies the machines' writes."""

    def __init__(self) -> None:
        self.rounds: dict[int, RoundRecord] = {}
        self.submissions: dict[int, list[Submission]] = {}
        self.receipts: dict[int, dict[str, bytes]] = {}
        self.chunks: dict[int, dict[tuple[str, int], Chunk]] = {}
        self.outbound: dict[int, OutboundBatch] = {}
        self.results: dict[int, Mapping[str, object]] = {}
        self.writes = 0

    def apply(self, writes: Sequence[Write]) -> None:
        for w in writes:
            self._apply(w)
        self.writes += 1

    def kept(self, actions: list[Action]) -> list[Action]:
        """``actions``, after applying the writes of each :class:`Persist` among them (as
        if each committed)."""
        for action in actions:
            if isinstance(action, Persist):
                self.apply(action.writes)
        return actions

    def _apply(self, w: Write) -> None:
        match w:
            case NewRound():
                assert w.round_id not in self.rounds, f"round {w.round_id} stored twice"
                self.rounds[w.round_id] = RoundRecord(
                    w.round_id, w.status, w.opened_at, None, None, w.secret_key, w.announcements
                )
            case SetRound():
                old = self.rounds[w.round_id]
                self.rounds[w.round_id] = RoundRecord(
                    old.round_id,
                    w.status if w.status is not None else old.status,
                    old.opened_at,
                    w.deadline if w.deadline is not None else old.deadline,
                    w.clients if w.clients is not None else old.clients,
                    old.secret_key,
                    w.announcements if w.announcements is not None else old.announcements,
                )
            case EraseKey():
                old = self.rounds[w.round_id]
                self.rounds[w.round_id] = RoundRecord(
                    old.round_id, old.status, old.opened_at, old.deadline, old.clients, None,
                    old.announcements,
                )
            case AddSubmission():
                subs = self.submissions.setdefault(w.round_id, [])
                assert all(s.client != w.submission.client for s in subs), "client stored twice"
                subs.append(w.submission)
                self.receipts.setdefault(w.round_id, {})[w.submission.client] = w.submission.digest
            case ForgetReceipts():
                self.receipts.pop(w.round_id, None)
            case AddChunk():
                key = (w.chunk.sender, w.chunk.index)
                self.chunks.setdefault(w.round_id, {}).setdefault(key, w.chunk)
            case DropIntake():
                self.submissions.pop(w.round_id, None)
                self.chunks.pop(w.round_id, None)
            case PutOutbound():
                assert w.round_id not in self.outbound
                self.outbound[w.round_id] = w.batch
            case AckOutbound():
                batch = self.outbound[w.round_id]
                self.outbound[w.round_id] = OutboundBatch(
                    batch.clients,
                    batch.count,
                    tuple(
                        OutboundChunk(c.index, c.payloads, c.acked or c.index == w.index)
                        for c in batch.chunks
                    ),
                    batch.excluded,
                    batch.seed,
                )
            case DropOutbound():
                self.outbound.pop(w.round_id, None)
            case PutResult():
                self.results[w.round_id] = dict(w.result)

    def records(self, *, inputs: bool = True) -> NodeRecords:
        """As :meth:`mixnet.store.NodeStore.records`: without ``inputs`` the chunks come
        without their inputs, items as received and signature (as a relay recovers)."""

        def chunk(c: Chunk) -> Chunk:
            return c if inputs else replace(c, inputs=(), received=(), signature=b"")

        return NodeRecords(
            rounds=tuple(self.rounds[r] for r in sorted(self.rounds)),
            submissions={r: tuple(s) for r, s in self.submissions.items()},
            receipts={r: dict(c) for r, c in self.receipts.items()},
            chunks={
                r: tuple(chunk(c[k]) for k in sorted(c)) for r, c in self.chunks.items()
            },
            outbound={r: as_stored(b) for r, b in self.outbound.items()},
            results=dict(self.results),
        )


def as_stored(batch: OutboundBatch) -> OutboundBatch | DerivedOutbound:
    """An outbound batch as the sqlite store returns it: whole, or, with a seed, the seed,
    the chunks' sizes and acknowledgements."""
    if batch.seed is None:
        return batch
    return DerivedOutbound(
        batch.clients,
        batch.count,
        batch.seed,
        tuple(len(c.payloads) for c in batch.chunks),
        frozenset(c.index for c in batch.chunks if c.acked),
        batch.excluded,
    )


def _short(item: object) -> str:
    text = repr(item)
    return text if len(text) < 90 else text[:87] + "..."


def value_payload(value: int) -> bytes:
    return value.to_bytes(VALUE, "big")


def sink_app(messages: int) -> Callable[[int, Deliver], dict[str, object]]:
    """The trivial application at the sink: sums 8-byte big-endian values."""

    def analyze(round_id: int, action: Deliver) -> dict[str, object]:
        if action.batch is None:
            return {"round": round_id, "status": "aborted"}
        b = action.batch
        expected = b.clients * messages
        if len(b.payloads) != expected or b.count != expected:
            return {
                "round": round_id,
                "status": "error",
                "error": f"expected {expected}, got {len(b.payloads)}",
            }
        total = sum(int.from_bytes(p, "big") for p in b.payloads)
        return {
            "round": round_id,
            "status": "ok",
            "clients": b.clients,
            "sum": total,
            "excluded": b.excluded,
        }

    return analyze


@dataclass
class Exchange:
    """One request on a link (or from a client) and its reply."""

    ident: int
    src: int  # node index, or -1 for a client
    dst: int
    frame: Frame
    state: str = "queued"  # queued -> delivered -> answered
    reply: Frame | MixnetError | None = None
    client: int | None = None


@dataclass
class Task:
    """A sequence of actions a node still has to carry out."""

    actions: deque[Action]
    serving: Exchange | None = None
    waiting: Exchange | None = None
    incarnation: int = 0


@dataclass
class Node:
    index: int
    name: str
    store: MemoryStore = field(default_factory=MemoryStore)
    machine: EntryMachine | RelayMachine | SinkMachine | None = None
    tasks: list[Task] = field(default_factory=list)
    #: Persist actions emitted but not yet committed, in emission order (the writer's queue)
    queue: list[Persist] = field(default_factory=list)
    #: what ``persisted`` returned (or raised) at commit, until the Persist's task takes it
    committed: dict[int, list[Action] | MixnetError] = field(default_factory=dict)
    incarnation: int = 0
    alive: bool = True
    #: tokened writes whose token's type is named here fail (as a full disk would), one
    #: each, before they are applied: the machine hears ``persist_failed``
    fail_writes: list[str] = field(default_factory=list)

    def emit(self, actions: Sequence[Action]) -> list[Action]:
        """Actions just returned by the machine: their writes join the queue now."""
        self.queue.extend(a for a in actions if isinstance(a, Persist))
        return list(actions)


@dataclass
class Client:
    """A client holding one value vector; ``acked`` rounds it was told ``accepted`` in."""

    ident: str
    values: tuple[int, ...]
    #: its first two inner onions hold the same hop-2 onion under different hop-1 layers
    twins: bool = False
    submitted_round: int | None = None
    frame: Submit | None = None
    acked: list[int] = field(default_factory=list)
    exchange: Exchange | None = None
    done: bool = False


class MemoryChain:
    """``mixes`` round machines and a sink wired together in memory. With ``signed`` (the
    default) every mix has an Ed25519 identity, as on a real chain: mixes sign their chunks
    (all but the last) and their trace pages and refusals, and check their predecessor's
    chunks and their successor's pages."""

    def __init__(
        self, *, mixes: int, messages: int, policy: RoundPolicy, seed: int = 0,
        signed: bool = True,
    ) -> None:  # fmt: skip
        self.mixes = mixes
        self.messages = messages
        self.policy = policy
        self.rng = random.Random(seed)
        self.now = 1000.0
        self.nodes = [Node(i, f"mix{i + 1}") for i in range(mixes)] + [Node(mixes, "sink")]
        self.identities = {
            node.name: SigningKey(bytes([node.index + 101]) * 32) for node in self.nodes[:mixes]
        } if signed else {}  # fmt: skip
        self.exchanges: dict[int, Exchange] = {}
        self._ids = itertools.count(1)
        self.clients: list[Client] = []
        self.app = sink_app(messages)
        self.trace: list[str] = []
        #: run a node's actions as far as they go at once (False: one step at a time)
        self.eager = True
        self.stored_in: dict[int, dict[str, tuple[int, ...]]] = {}  # entry writes seen
        for node in self.nodes:
            self._boot(node)

    # ------------------------------------------------------------------ node set-up

    def _keys(self, node: Node) -> Callable[[int], RoundKey]:
        def make(round_id: int) -> RoundKey:
            secret = bytes([node.index + 1]) * 32
            ann = RoundKeyAnnouncement(
                chain_id="mem",
                node=node.name,
                round_id=round_id,
                public_key=bytes([node.index + 1]) * 32,
                signature=b"\0" * 64,
            )
            return RoundKey(secret, ann)

        return make

    def _signing(self, node: Node) -> ChunkSigning | None:
        """The node's signer and the chain's identities (``None`` on an unsigned chain)."""
        if not self.identities:
            return None
        key = self.identities[node.name]
        names = tuple(n.name for n in self.nodes[: self.mixes])
        public = {name: bytes(k.verify_key) for name, k in self.identities.items()}

        def sign(round_id: int, index: int, items: Sequence[bytes]) -> bytes:
            return sign_chunk(key, chain_id="mem", round_id=round_id, sender=node.name,
                              index=index, items=list(items))  # fmt: skip

        def sign_message(message: bytes) -> bytes:
            return bytes(key.sign(message).signature)

        last = node.index == self.mixes - 1
        return ChunkSigning("mem", names, public, None if last else sign, sign_message)

    def onion_length(self, hop: int) -> int:
        """What hop ``hop`` receives: a submission box at the entry mix (one fake layer
        around ``messages`` inner onions), an onion elsewhere."""
        if hop == 0:
            return LAYER + self.messages * (VALUE + LAYER * (self.mixes - 1))
        return VALUE + LAYER * (self.mixes - hop)

    def _boot(self, node: Node) -> None:
        # as the nodes recover: a mix's chunk inputs stay on disk (LoadIntake reads them)
        records = node.store.records(inputs=node.index == self.mixes)
        actions: list[Action]
        if node.index == 0:
            node.machine, actions = EntryMachine.restore(
                records,
                self.now,
                name=node.name,
                hops=self.mixes,
                messages=self.messages,
                box_length=self.onion_length(0),
                policy=self.policy,
                keys=self._keys(node),
                successor=self.nodes[1].name,
                validator=valid_payload,
                signing=self._signing(node),
            )
        elif node.index < self.mixes:
            node.machine, actions = RelayMachine.restore(
                records,
                self.now,
                name=node.name,
                predecessor=self.nodes[node.index - 1].name,
                item_length=self.onion_length(node.index),
                chunk_size=self.policy.chunk_size,
                keys=self._keys(node),
                hop=node.index,
                successor=self.nodes[node.index + 1].name,
                last=node.index == self.mixes - 1,
                validator=valid_payload,
                signing=self._signing(node),
            )
        else:
            node.machine, actions = SinkMachine.restore(
                records,
                self.now,
                predecessor=self.nodes[node.index - 1].name,
                item_length=VALUE,
            )
        if actions:
            node.tasks.append(Task(deque(node.emit(actions)), incarnation=node.incarnation))

    # ------------------------------------------------------------------ clients

    def add_client(self, values: Sequence[int], *, twins: bool = False) -> Client:
        """A client of ``values``; with ``twins`` (3 mixes or more) one whose first two
        inner onions collide at mix 2, which must leave them out and accuse them."""
        assert not twins or (self.mixes >= 3 and len(values) >= 2)
        client = Client(f"c{len(self.clients)}", tuple(values), twins)
        self.clients.append(client)
        return client

    def honest(self, ident: str, values: Sequence[int]) -> bool:
        """Whether the client's submission should be counted: no payload the validator
        refuses, and no colliding onions."""
        twins = any(c.twins for c in self.clients if c.ident == ident)
        return not twins and all(v < VALID_BELOW for v in values)

    def client_submit(self, client: Client) -> bool:
        """The client fetches the open round and submits (False: nothing to do now)."""
        entry = self.nodes[0]
        if client.done or client.exchange is not None or not entry.alive:
            return False
        assert isinstance(entry.machine, EntryMachine)
        offer = entry.machine.offer()
        if offer is None:
            return False
        onions = [self._wrap(value_payload(v), self.mixes - 1) for v in client.values]
        if client.twins:  # the same hop-2 onion under two hop-1 layers
            twin = self._wrap(value_payload(client.values[0]), self.mixes - 2)
            onions[0], onions[1] = self._wrap(twin, 1), self._wrap(twin, 1)
        inner = b"".join(onions)
        client.frame = Submit(offer.round_id, client.ident, self._wrap(inner, 1))
        client.exchange = self._new_exchange(-1, 0, client.frame, client=self.clients.index(client))
        return True

    def _wrap(self, payload: bytes, layers: int) -> bytes:
        return payload + bytes(self.rng.getrandbits(8) for _ in range(LAYER * layers))

    # ------------------------------------------------------------------ exchanges

    def _new_exchange(
        self, src: int, dst: int, frame: Frame, *, client: int | None = None
    ) -> Exchange:
        ex = Exchange(next(self._ids), src, dst, frame, client=client)
        self.exchanges[ex.ident] = ex
        return ex

    def deliverable(self) -> list[Exchange]:
        return [
            ex
            for ex in self.exchanges.values()
            if ex.state == "queued" and self.nodes[ex.dst].alive
        ]

    def answerable(self) -> list[Exchange]:
        return [ex for ex in self.exchanges.values() if ex.state == "answered"]

    def deliver(self, ex: Exchange) -> None:
        """The request reaches its node, which handles it."""
        node = self.nodes[ex.dst]
        assert node.alive and ex.state == "queued"
        ex.state = "delivered"
        self.trace.append(f"deliver #{ex.ident} {ex.src}->{ex.dst} {_short(ex.frame)}")
        task = Task(deque(), serving=ex, incarnation=node.incarnation)
        try:
            task.actions.extend(node.emit(self._handle(node, ex.frame)))
        except MixnetError as exc:
            ex.state, ex.reply = "answered", exc
            return
        node.tasks.append(task)
        if self.eager:
            self.run(node, task)

    def _handle(self, node: Node, frame: Frame) -> list[Action]:
        m = node.machine
        if isinstance(m, EntryMachine):
            assert isinstance(frame, Submit)
            return m.on_submit(frame)
        assert m is not None
        if isinstance(frame, OpenRound):
            return m.on_open_round(frame, self.now)
        if isinstance(frame, AbortRound):
            return m.on_abort_round(frame, self.now)
        if isinstance(m, RelayMachine) and isinstance(frame, Trace):
            return m.on_trace(frame, self.now)
        if isinstance(m, RelayMachine) and isinstance(frame, Exclude):
            return m.on_exclude(frame, self.now)
        assert isinstance(frame, Batch)
        return m.on_batch(frame)

    def answer(self, ex: Exchange) -> None:
        """The reply reaches the sender."""
        assert ex.state == "answered"
        del self.exchanges[ex.ident]
        self.trace.append(f"answer #{ex.ident} -> {ex.src}: {_short(ex.reply)}")
        if ex.src == -1:
            self._client_reply(ex)
            return
        node = self.nodes[ex.src]
        for task in node.tasks:
            if task.waiting is ex:
                task.waiting = None
                m = node.machine
                assert m is not None and not isinstance(m, SinkMachine)
                try:
                    if isinstance(ex.reply, MixnetError):
                        more = m.on_send_error(ex.frame, ex.reply, self.now)
                    else:
                        assert ex.reply is not None
                        more = m.on_reply(ex.frame, ex.reply, self.now)
                except MixnetError as exc:
                    self._fail_task(node, task, exc)
                    return
                task.actions.extendleft(reversed(node.emit(more)))
                if self.eager:
                    self.run(node, task)
                return

    def _client_reply(self, ex: Exchange) -> None:
        assert ex.client is not None
        client = self.clients[ex.client]
        client.exchange = None
        if isinstance(ex.reply, Accepted):
            client.acked.append(ex.reply.round_id)
            client.done = True
        elif isinstance(ex.reply, RoundClosed | UnknownRound):
            client.frame = None  # re-encode for the next round
        elif isinstance(ex.reply, MixnetError):
            if ex.reply.code == "internal-error":
                client.frame = None
            else:
                client.done = True  # refused for good

    def cut(self, ex: Exchange) -> None:
        """The connection carrying ``ex`` drops: any reply is lost; the sender resends."""
        self.trace.append(f"cut #{ex.ident} ({ex.state})")
        if ex.state in ("delivered", "answered"):
            replaced = Exchange(ex.ident, ex.src, ex.dst, ex.frame, client=ex.client)
            self.exchanges[ex.ident] = replaced
            for node in self.nodes:
                for task in node.tasks:
                    if task.waiting is ex:
                        task.waiting = replaced
            if ex.client is not None:
                self.clients[ex.client].exchange = replaced

    # ------------------------------------------------------------------ running actions

    def runnable(self) -> list[tuple[Node, Task]]:
        return [
            (n, t) for n in self.nodes if n.alive for t in n.tasks if t.waiting is None
        ]

    def run(self, node: Node, task: Task, *, limit: int | None = None) -> None:
        """Carry out ``task``'s actions until it waits for a reply or ends (or ``limit``
        actions are done: a schedule may then interleave other steps)."""
        m = node.machine
        assert m is not None
        while task.actions and task.waiting is None and limit != 0:
            limit = None if limit is None else limit - 1
            action = task.actions.popleft()
            try:
                more = self._do(node, task, action)
            except MixnetError as exc:
                self._fail_task(node, task, exc)
                return
            task.actions.extendleft(reversed(node.emit(more)))
        if not task.actions and task.waiting is None and task in node.tasks:
            node.tasks.remove(task)

    def _fail_task(self, node: Node, task: Task, exc: MixnetError) -> None:
        if task.serving is not None and task.serving.state == "delivered":
            task.serving.state, task.serving.reply = "answered", exc
        task.actions.clear()
        if task in node.tasks:
            node.tasks.remove(task)

    def _commit(self, node: Node, action: Persist) -> None:
        self.trace.append(
            f"commit {node.name} {[type(w).__name__ for w in action.writes]} {action.token!r}"[:160]
        )
        failing = type(action.token).__name__
        if action.token is not None and failing in node.fail_writes:
            node.fail_writes.remove(failing)
            self.trace.append(f"write of {node.name} failed")
            self._tell(node, action, failed=True)
            return
        node.store.apply(action.writes)
        if action.token is not None:
            self._tell(node, action, failed=False)
        if node.index == 0:
            for w in action.writes:
                if isinstance(w, AddSubmission):
                    values = tuple(int.from_bytes(p[:VALUE], "big") for p in w.submission.payloads)
                    stored = self.stored_in.setdefault(w.round_id, {})
                    assert w.submission.client not in stored
                    stored[w.submission.client] = values

    def _tell(self, node: Node, action: Persist, *, failed: bool) -> None:
        """Tell the machine that ``action``'s write committed (or ``failed``); keep what it
        returned, or raised, for the Persist's task."""
        m = node.machine
        assert m is not None and action.token is not None
        event = m.persist_failed if failed else m.persisted
        try:
            node.committed[id(action)] = node.emit(event(action.token, self.now))
        except MixnetError as exc:
            node.committed[id(action)] = exc

    def _do(self, node: Node, task: Task, action: Action) -> list[Action]:
        m = node.machine
        assert m is not None
        match action:
            case Persist():
                # a FIFO writer: committing this write commits every earlier one first, and
                # the machine hears of each commit in commit order
                while any(q is action for q in node.queue):
                    self._commit(node, node.queue.pop(0))
                outcome = node.committed.pop(id(action), [])
                if isinstance(outcome, MixnetError):
                    raise outcome
                return outcome
            case Send() if action.background:  # as the adapter: a task of its own
                node.tasks.append(
                    Task(deque([Send(action.frame)]), incarnation=node.incarnation)
                )
                return []
            case Send():
                frame = action.frame
                if isinstance(frame, Exclude):  # what every node's frame limits allow
                    cap = exclude_cap(self.policy.chunk_size, self.messages)
                    assert len(frame.items) <= cap, "exclude over its cap"
                ex = self._new_exchange(node.index, node.index + 1, action.frame)
                task.waiting = ex
                return []
            case Reply():
                served = task.serving
                if served is not None and served.state == "delivered":
                    served.state, served.reply = "answered", action.frame
                return []
            case Peel():
                assert not isinstance(m, SinkMachine)
                return m.peeled(action.token, fake_peel(action.items, action.split), self.now)
            case Mix():
                assert not isinstance(m, SinkMachine)
                # as the adapter: a permutation from a seed, which the store keeps instead
                # of the batch (at mixes before the last), so that a restart derives it
                seed = self.rng.randbytes(SEED_LENGTH)
                chunks = permuted_chunks(action.payloads, seed, action.chunk_size)
                node.tasks.append(
                    Task(
                        deque(node.emit(m.mixed(action.round_id, chunks, seed=seed))),
                        incarnation=node.incarnation,
                    )
                )
                return []
            case Prove():
                assert isinstance(m, RelayMachine)
                steps: list[Step | MixnetError] = [
                    Step(node.index, item, bytes(32), bytes(96)) for item in action.items
                ]
                return m.proved(action.token, steps, self.now)
            case Verify():
                assert not isinstance(m, SinkMachine)
                return m.verified(action.token, self._hold(action.accusations), self.now)
            case LoadIntake():
                # as the node's writer: a read after every write queued before it
                assert isinstance(m, RelayMachine)
                while node.queue:
                    self._commit(node, node.queue.pop(0))
                on_disk = node.store.records().chunks.get(action.round_id, ())
                return m.intake_loaded(action.token, on_disk, self.now)
            case Deliver():
                assert isinstance(m, SinkMachine)
                result = self.app(action.round_id, action)
                return m.delivered(action.round_id, result)
            case Publish():
                return []
            case CompactReceipts():
                assert isinstance(m, EntryMachine)
                return m.receipts_compacted(action.round_id, action.receipts.compacted())
        raise AssertionError(f"unknown action {action!r}")

    def _hold(self, accusations: Sequence[Accusation]) -> list[bool]:
        """The harness's :func:`mixnet.blame.verify_accusations`: each as :meth:`_holds`,
        and a ``duplicate`` one only with another about a different input at its hop whose
        fake layer holds the same onion."""
        results = [self._holds(a) for a in accusations]
        inputs: dict[tuple[int, bytes], set[bytes]] = {}
        for accusation, holds in zip(accusations, results, strict=True):
            if holds and accusation.failure is Failure.DUPLICATE:
                last = accusation.steps[-1]
                inputs.setdefault((last.hop, last.item[:-LAYER]), set()).add(last.item)
        for index, accusation in enumerate(accusations):
            if results[index] and accusation.failure is Failure.DUPLICATE:
                last = accusation.steps[-1]
                results[index] = len(inputs[last.hop, last.item[:-LAYER]]) > 1
        return results

    def _holds(self, accusation: Accusation) -> bool:
        """The harness's :func:`mixnet.blame.verify_accusation`: a fake layer "opens" to the
        item without its last ``LAYER`` bytes."""
        steps = accusation.steps
        first = steps[0].hop
        if any(s.hop != first + i for i, s in enumerate(steps)):
            return False
        for step, following in itertools.pairwise(steps):
            if step.item[:-LAYER] != following.item:
                return False
        last = steps[-1]
        if accusation.failure is Failure.DUPLICATE:  # paired by _hold
            return 0 < last.hop < self.mixes - 1
        return (
            accusation.failure is Failure.INVALID_PAYLOAD
            and last.hop == self.mixes - 1
            and len(last.item) == VALUE + LAYER
            and not valid_payload(last.item[:-LAYER])
        )

    # ------------------------------------------------------------------ time, crashes

    def tick(self, seconds: float) -> None:
        self.now += seconds
        self.trace.append(f"tick {self.now}")
        for node in self.nodes:  # every machine's timers: rounds, retries, trace timeouts
            m = node.machine
            if not node.alive or not isinstance(m, EntryMachine | RelayMachine):
                continue
            timer = m.next_timer()
            if timer is not None and timer <= self.now:
                task = Task(deque(node.emit(m.handle_timer(self.now))))
                node.tasks.append(task)
                if self.eager:
                    self.run(node, task)

    def crash(self, index: int) -> None:
        """Kill node ``index``: memory, tasks and connections are gone; the store stays."""
        node = self.nodes[index]
        self.trace.append(f"crash {node.name}")
        node.alive = False
        node.machine = None
        node.tasks.clear()
        node.queue.clear()
        node.committed.clear()
        node.incarnation += 1
        for ex in list(self.exchanges.values()):
            if ex.src == index:
                del self.exchanges[ex.ident]  # its link is gone; recovery resends
            elif ex.dst == index:
                self.cut(ex)

    def restart(self, index: int) -> None:
        node = self.nodes[index]
        node.alive = True
        self._boot(node)
        if self.eager:
            for task in list(node.tasks):
                self.run(node, task)

    # ------------------------------------------------------------------ draining

    def settle(self, *, max_steps: int = 100_000) -> None:
        """Deliver everything, in order, with no more faults, advancing time until no
        round is unfinished and every client is done or waits for nothing."""
        self.eager = True
        for node in self.nodes:
            if not node.alive:
                self.restart(node.index)
        for _ in range(max_steps):
            if not self.step(limit=None):
                return
        raise AssertionError("the chain did not settle")

    def step(self, *, limit: int | None = 1) -> bool:
        """One step of the default schedule (oldest first): run a task (by ``limit``
        actions), answer, deliver, let a client submit, or let time pass to the next
        deadline. False when nothing is left to do."""
        if self.runnable():
            node, task = self.runnable()[0]
            self.run(node, task, limit=limit)
        elif self.answerable():
            self.answer(self.answerable()[0])
        elif self.deliverable():
            self.deliver(self.deliverable()[0])
        elif any(self.client_submit(c) for c in self.clients if not c.done):
            pass
        elif self._unfinished():
            self.tick(self.policy.deadline_seconds)
        else:
            return False
        return True

    def _unfinished(self) -> bool:
        entry = self.nodes[0].machine
        assert isinstance(entry, EntryMachine)
        if any(not c.done for c in self.clients):
            return True
        if entry.verdict_timer() is not None:  # a trace waits to be asked again
            return True
        for node in self.nodes:  # a refused chunk waits to be sent again
            m = node.machine
            if isinstance(m, EntryMachine | RelayMachine) and m.resend_timer() is not None:
                return True
        if entry.current is None:
            return False
        intake = entry.rounds[entry.current].entry
        if intake is None or intake.clients == 0:
            return False
        return intake.clients >= self.policy.min_users or self.policy.below_min == "abort"
