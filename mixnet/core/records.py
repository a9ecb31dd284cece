"""What a node stores, as immutable records, and the writes that change it.

The round machines never touch the store: they return :class:`~mixnet.core.actions.Persist`
actions holding :data:`Write` values, which the store applies in one transaction
(:meth:`mixnet.store.NodeStore.apply`) and an in-memory test store applies to dicts. After a
restart a machine is rebuilt from a :class:`NodeRecords` snapshot alone (each machine's
``restore``), so every fact recovery needs is in these records.

Item lists that can be long (a chunk's payloads and inputs, an outbound chunk) are any
``Sequence[bytes]`` of equal-length items: a tuple in tests, an
:class:`~mixnet.core.items.Items` view of a round's buffer in the nodes (no object per item).
Records compare equal whatever the sequence type (``Items`` equals a tuple of the same bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mixnet.core.receipts import ReceiptTable
from mixnet.core.status import RoundStatus
from mixnet.keys import RoundKeyAnnouncement

__all__ = [
    "AckOutbound",
    "AddChunk",
    "AddSubmission",
    "Chunk",
    "DerivedOutbound",
    "DropIntake",
    "DropOutbound",
    "EraseKey",
    "ForgetReceipts",
    "NewRound",
    "NodeRecords",
    "OutboundBatch",
    "OutboundChunk",
    "PutOutbound",
    "PutResult",
    "RoundRecord",
    "SetRound",
    "Submission",
    "Write",
]


@dataclass(frozen=True)
class RoundRecord:
    """One round as stored.

    ``opened_at`` and ``deadline`` are unix seconds; ``clients`` is ``n`` once known;
    ``secret_key`` is the round's 32-byte X25519 secret, or ``None`` once erased (and always
    at the sink); ``announcements`` are the signed round keys: at the entry mix every mix's in
    chain order, at a relay its own only.
    """

    round_id: int
    status: RoundStatus
    opened_at: float
    deadline: float | None = None
    clients: int | None = None
    secret_key: bytes | None = None
    announcements: tuple[RoundKeyAnnouncement, ...] = ()


@dataclass(frozen=True)
class Submission:
    """A client's accepted submission at the entry mix.

    ``digest`` identifies the submitted (unpeeled) onions, so an identical retry is
    recognised; ``payloads`` are the peeled payloads, all of one length.
    """

    client: str
    digest: bytes
    payloads: tuple[bytes, ...]


@dataclass(frozen=True)
class Chunk:
    """One received batch chunk after peeling.

    ``index`` is in ``[0, chunks)``; ``count`` is the number of items in the sender's whole
    batch; ``dropped`` counts items of this chunk that were replays or failed to peel (not
    stored); ``len(payloads) + dropped`` is the number of items the chunk carried.
    ``digests`` are the 16-byte replay digests (concatenated; at a relay
    :func:`mixnet.core.digests.replay_digests`, the first 16 bytes of each item's Merkle leaf
    hash) of the incoming items this chunk brought into the round's replay filter,
    so that a restarted relay still drops their replays. At a mix, ``inputs`` are the
    received ciphertexts the ``payloads`` were peeled from (aligned with them; kept until
    the round's trace is done, to prove a step); at the sink it is empty. ``excluded`` is the
    batch's number of excluded submissions (the sink's only).

    At a mix after the entry, ``signature`` is the sender's signature over the chunk as it
    was received (:mod:`mixnet.chunk_signature`; empty: unsigned) and ``received`` the
    chunk's items as received and signed when they differ from ``inputs`` (some were
    dropped; empty: ``inputs`` are the received chunk whole): what the mix shows as the
    sender's delivery of an input in the trace (:mod:`mixnet.core.deliveries`), read back
    from the store then, not held in memory.
    """

    sender: str
    index: int
    chunks: int
    clients: int
    count: int
    dropped: int
    payloads: Sequence[bytes]
    digests: bytes = b""
    inputs: Sequence[bytes] = ()
    excluded: int = 0
    signature: bytes = b""
    received: Sequence[bytes] = ()

    def as_received(self) -> Sequence[bytes]:
        """The chunk's items as received and signed (``received``, else ``inputs``)."""
        return self.received if len(self.received) else self.inputs


@dataclass(frozen=True)
class OutboundChunk:
    """One chunk of the node's outbound batch and whether the successor acknowledged it."""

    index: int
    payloads: Sequence[bytes]
    acked: bool = False


@dataclass(frozen=True)
class OutboundBatch:
    """A round's permuted outbound batch: ``count`` payloads from ``clients`` clients, with
    ``excluded`` submissions traced and left out (the last mix's, after the trace).

    ``seed``: the 32-byte seed whose permutation of the round's intake the chunks are
    (:func:`mixnet.core.outbound.permuted_chunks`), or ``None``. With a seed the store keeps
    the seed and the chunks' sizes instead of their payloads, and returns a
    :class:`DerivedOutbound`, from which recovery derives the chunks again."""

    clients: int
    count: int
    chunks: tuple[OutboundChunk, ...]
    excluded: int = 0
    seed: bytes | None = None


@dataclass(frozen=True)
class DerivedOutbound:
    """An outbound batch the store kept as its permutation's ``seed``: ``sizes[i]`` items
    in chunk ``i``, the chunks in ``acked`` acknowledged by the successor.
    :func:`mixnet.core.outbound.derive_outbound` rebuilds the :class:`OutboundBatch` from
    the round's intake."""

    clients: int
    count: int
    seed: bytes
    sizes: tuple[int, ...]
    acked: frozenset[int] = frozenset()
    excluded: int = 0


# --------------------------------------------------------------------------- writes


@dataclass(frozen=True)
class NewRound:
    """Insert round ``round_id`` (it must not exist)."""

    round_id: int
    status: RoundStatus
    opened_at: float
    secret_key: bytes | None = None
    announcements: tuple[RoundKeyAnnouncement, ...] = ()


@dataclass(frozen=True)
class SetRound:
    """Change fields of an existing round; ``None`` leaves a field as it is."""

    round_id: int
    status: RoundStatus | None = None
    clients: int | None = None
    deadline: float | None = None
    announcements: tuple[RoundKeyAnnouncement, ...] | None = None


@dataclass(frozen=True)
class EraseKey:
    """Erase the round's secret key (zeroed in the database pages, WAL checkpointed)."""

    round_id: int


@dataclass(frozen=True)
class AddSubmission:
    """Store an accepted submission at the entry mix, and its receipt (the client must have
    none yet in the round)."""

    round_id: int
    submission: Submission


@dataclass(frozen=True)
class AddChunk:
    """Store a received chunk (an existing ``(round, sender, index)`` is kept unchanged)."""

    round_id: int
    chunk: Chunk


@dataclass(frozen=True)
class DropIntake:
    """Delete the round's submissions and chunks (they link clients to payloads). The entry
    mix's receipts (client → submission digest) stay until :class:`ForgetReceipts`."""

    round_id: int


@dataclass(frozen=True)
class ForgetReceipts:
    """Delete the round's receipts: exact retries of its submissions are no longer
    recognised (the round is older than the retention)."""

    round_id: int


@dataclass(frozen=True)
class PutOutbound:
    """Store the round's permuted outbound batch, no chunk acknowledged yet (the round must
    have none: drop the old one first to replace it)."""

    round_id: int
    batch: OutboundBatch


@dataclass(frozen=True)
class AckOutbound:
    """Mark outbound chunk ``index`` acknowledged by the successor."""

    round_id: int
    index: int


@dataclass(frozen=True)
class DropOutbound:
    """Delete the round's outbound batch. ``delivered``: the successor acknowledged every
    chunk, so the rows hold only what it has (this mix's outputs; what links them to its
    inputs is in the intake, which is zeroed when dropped): the store may leave their bytes
    in its free pages instead of zeroing them (:class:`mixnet.store.NodeStore`, "Erasure").
    A batch dropped for any other reason (replaced after an exclusion, a round given up) is
    zeroed."""

    round_id: int
    delivered: bool = False


@dataclass(frozen=True)
class PutResult:
    """Store the sink application's result for the round (a JSON-able mapping)."""

    round_id: int
    result: Mapping[str, object]


Write = (
    NewRound
    | SetRound
    | EraseKey
    | AddSubmission
    | AddChunk
    | DropIntake
    | ForgetReceipts
    | PutOutbound
    | AckOutbound
    | DropOutbound
    | PutResult
)


@dataclass(frozen=True)
class NodeRecords:
    """Everything a node has stored, as recovery reads it: rounds, the intake of unfinished
    rounds (submissions in acceptance order, chunks), the entry mix's receipts (client →
    submission digest, kept after the intake is dropped: the store reads them as a
    :class:`~mixnet.core.receipts.ReceiptTable` per round, compacted unless the round is
    ``OPEN``), outbound batches and results."""

    rounds: tuple[RoundRecord, ...] = ()
    submissions: Mapping[int, tuple[Submission, ...]] = field(default_factory=dict)
    receipts: Mapping[int, ReceiptTable | Mapping[str, bytes]] = field(default_factory=dict)
    chunks: Mapping[int, tuple[Chunk, ...]] = field(default_factory=dict)
    outbound: Mapping[int, OutboundBatch | DerivedOutbound] = field(default_factory=dict)
    results: Mapping[int, Mapping[str, object]] = field(default_factory=dict)
