"""Round intake bookkeeping, batch assembly and the permutation (pure).

Nothing here touches sockets, clocks or global randomness: time arrives as ``now`` (unix
seconds) and randomness through an injected ``randbelow`` (default :func:`secrets.randbelow`).
The round machines (:mod:`mixnet.core.entry`, :mod:`mixnet.core.relay`,
:mod:`mixnet.core.sink`) keep one of these per round:

* :class:`EntryIntake` — the first mix's round: client submissions (one box of ``m`` onions
  each), accepted all-or-none, at most one per client id (on a chain with admission the client id
  is the submission's credential, so at most one per credential), closed by the round
  policy.
* :class:`BatchIntake` — every later node's round (mixes and the sink): the predecessor's
  batch arriving in numbered chunks, deduplicated by (round, sender, chunk) and checked for
  consistent counts.

:func:`drop_replays` drops replayed ciphertexts; :func:`mix_batch` applies a uniform
permutation.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from mixnet.core.policy import RoundPolicy
from mixnet.errors import (
    BadLength,
    DuplicateClient,
    MalformedFrame,
    RoundClosed,
    UnknownRound,
    WrongCount,
)
from mixnet.frames import client_id

__all__ = [
    "ITEM_DIGEST_LENGTH",
    "BatchIntake",
    "ChunkOutcome",
    "EntryIntake",
    "drop_replays",
    "item_digest",
    "mix_batch",
    "split_chunks",
    "submission_digest",
    "uniform_permutation",
]


RandBelow = Callable[[int], int]


def submission_digest(box: bytes) -> bytes:
    """BLAKE2b-256 (personalised ``mixnet-submit``) of a submission box: recognises exact
    retries and replayed boxes, and is what an admission signature covers."""
    return hashlib.blake2b(box, digest_size=32, person=b"mixnet-submit").digest()


#: Bytes of one :func:`item_digest`.
ITEM_DIGEST_LENGTH = 16


def item_digest(item: bytes) -> bytes:
    """16-byte BLAKE2b digest of one incoming item (the replay filter's key)."""
    return hashlib.blake2b(item, digest_size=ITEM_DIGEST_LENGTH).digest()


_item_hash = item_digest


EntryStatus = Literal["open", "closed", "aborted"]


@dataclass
class EntryIntake:
    """One round at the entry mix.

    Use: :meth:`check` a submission (cheap, before any crypto), peel it, then :meth:`accept`
    it (after it is stored). :meth:`poll` applies the deadline. The intake only counts; the
    peeled payloads live in the node's store.
    """

    round_id: int
    messages: int
    box_length: int
    policy: RoundPolicy
    opened_at: float
    status: EntryStatus = "open"
    accepted: dict[str, bytes] = field(default_factory=dict)  # client -> digest
    _digests: set[bytes] = field(default_factory=set)  # digests of accepted boxes
    _deadline_seen: bool = False

    @property
    def deadline(self) -> float:
        return self.opened_at + self.policy.deadline_seconds

    @property
    def clients(self) -> int:
        return len(self.accepted)

    def check(self, client: str, box: bytes) -> bytes | None:
        """Validate a submission box before any cryptography.

        Returns the submission's digest (:func:`submission_digest`), or ``None`` if this
        exact submission was already accepted (an idempotent retry: answer it ``accepted``
        again without storing anything).

        :raises RoundClosed: the round no longer accepts submissions.
        :raises MalformedFrame: bad client id.
        :raises BadLength: the box is not ``box_length`` bytes.
        :raises DuplicateClient: the client already has a different accepted submission, or
            the box repeats one already in this round (a replay under another client id).
        """
        if self.status != "open":
            if self.status == "closed" and self._is_exact_retry(client, box):
                return None  # it is in the round: acknowledge it again
            raise RoundClosed(f"round {self.round_id} is {self.status}")
        if not isinstance(client, str):
            raise MalformedFrame("client id must be a string")
        client_id(client)
        if not isinstance(box, bytes) or len(box) != self.box_length:
            raise BadLength(f"the submission box must be {self.box_length} bytes")
        digest = submission_digest(box)
        previous = self.accepted.get(client)
        if previous == digest:
            return None
        if previous is not None:
            raise DuplicateClient(f"client {client!r} already submitted in round {self.round_id}")
        if digest in self._digests:
            raise DuplicateClient("submission repeats one already in this round")
        return digest

    def _is_exact_retry(self, client: object, box: object) -> bool:
        if not isinstance(client, str) or client not in self.accepted:
            return False
        if not isinstance(box, bytes) or len(box) != self.box_length:
            return False
        return submission_digest(box) == self.accepted[client]

    def accept(self, client: str, digest: bytes, now: float) -> bool:
        """Record an accepted (peeled and stored) submission with ``digest``. Returns True if
        the round closed because of it. Re-checks what may have changed while it was peeled.

        :raises RoundClosed: the round closed meanwhile (the caller must not acknowledge).
        :raises DuplicateClient: the client was accepted meanwhile with another submission,
            or another client with the same box.
        """
        if self.status != "open":
            raise RoundClosed(f"round {self.round_id} is {self.status}")
        if client in self.accepted:
            if self.accepted[client] == digest:
                return False
            raise DuplicateClient(f"client {client!r} already submitted in round {self.round_id}")
        if digest in self._digests:
            raise DuplicateClient("submission repeats one already in this round")
        self.accepted[client] = digest
        self._digests.add(digest)
        return self._maybe_close(now)

    def release(self, client: str, *, reopen: bool) -> None:
        """Undo :meth:`accept` for a submission that could not be stored. ``reopen`` re-opens
        the round if that accept closed it."""
        digest = self.accepted.pop(client, None)
        if digest is not None:
            self._digests.discard(digest)
        if reopen and self.status == "closed":
            self.status = "open"

    def restore(self, client: str, digest: bytes) -> None:
        """Re-register a stored submission after a restart (no checks, no closing)."""
        self.accepted[client] = digest
        self._digests.add(digest)

    def _maybe_close(self, now: float) -> bool:
        n = self.clients
        if n >= self.policy.max_users or (now >= self.deadline and n >= self.policy.min_users):
            self.status = "closed"
            return True
        return False

    def poll(self, now: float) -> EntryStatus:
        """Apply the deadline at time ``now``; returns the (possibly new) status."""
        if self.status == "open" and now >= self.deadline:
            self._deadline_seen = True
            if self.clients >= self.policy.min_users:
                self.status = "closed"
            elif self.policy.below_min == "abort":
                self.status = "aborted"
        return self.status

    def next_timer(self) -> float | None:
        """When :meth:`poll` should next be called (``None`` if never)."""
        if self.status != "open" or self._deadline_seen:
            return None  # past the deadline only an accept can close a waiting round
        return self.deadline


ChunkOutcome = Literal["stored", "duplicate", "complete"]


@dataclass
class BatchIntake:
    """One round's incoming batch at a node after the entry mix.

    The first chunk fixes ``chunks``, ``clients`` and ``count``; later chunks must agree.
    Chunks being stored (:meth:`reserve` → :meth:`record` or :meth:`release`) count too, so
    chunks in flight together can never exceed the batch's declared count or disagree.
    """

    round_id: int
    sender: str
    payload_length: int
    chunks: int | None = None
    clients: int | None = None
    count: int | None = None
    received: dict[int, int] = field(default_factory=dict)  # chunk index -> items it carried
    dropped: int = 0
    #: hash of each incoming item of the round -> the chunk index it first arrived in
    seen: dict[bytes, int] = field(default_factory=dict)
    #: chunks being stored: index -> (chunks, clients, count, items it carried)
    pending: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)

    def _shape(self) -> tuple[int, int, int] | None:
        if self.chunks is not None:
            assert self.clients is not None and self.count is not None
            return (self.chunks, self.clients, self.count)
        for chunks, clients, count, _ in self.pending.values():
            return (chunks, clients, count)
        return None

    def _agrees(self, index: int, chunks: int, clients: int, count: int, size: int) -> None:
        if chunks < 1 or not 0 <= index < chunks:
            raise WrongCount(f"chunk index {index} out of range for {chunks} chunks")
        if clients < 0 or count < 0:
            raise WrongCount("negative counts")
        shape = self._shape()
        if shape is not None and (chunks, clients, count) != shape:
            raise WrongCount("chunk counts disagree with earlier chunks of this batch")
        others = sum(v[3] for i, v in self.pending.items() if i != index)
        if self.total_received + others + size > count:
            raise WrongCount(f"batch holds more than its count of {count} payloads")

    def check(
        self,
        sender: str,
        index: int,
        chunks: int,
        clients: int,
        count: int,
        payloads: Sequence[bytes],
    ) -> bool:
        """Validate a chunk. Returns False if it is a duplicate of a stored chunk.

        :raises UnknownRound: wrong sender for this round.
        :raises WrongCount: counts disagree with earlier chunks (stored or being stored),
            index out of range, or more payloads than the batch's count.
        :raises BadLength: a payload of the wrong length.
        """
        if sender != self.sender:
            raise UnknownRound(f"round {self.round_id} expects batches from {self.sender!r}")
        if index in self.received:
            return False
        self._agrees(index, chunks, clients, count, len(payloads))
        for i, payload in enumerate(payloads):
            if not isinstance(payload, bytes) or len(payload) != self.payload_length:
                raise BadLength(f"payload {i} must be {self.payload_length} bytes")
        return True

    def reserve(self, index: int, chunks: int, clients: int, count: int, size: int) -> None:
        """Count a checked chunk of ``size`` items as being stored.

        :raises WrongCount: it no longer fits the batch (another chunk was reserved since
            :meth:`check`).
        """
        self._agrees(index, chunks, clients, count, size)
        self.pending[index] = (chunks, clients, count, size)

    def release(self, index: int) -> None:
        """A reserved chunk could not be stored."""
        self.pending.pop(index, None)

    def record(
        self, index: int, chunks: int, clients: int, count: int, size: int, dropped: int = 0
    ) -> ChunkOutcome:
        """Record a stored chunk that carried ``size`` items (``dropped`` of which were
        replays or failed to peel). Returns "complete" when every chunk is in."""
        self.pending.pop(index, None)
        if index in self.received:
            return "duplicate"
        self._agrees(index, chunks, clients, count, size)
        self.chunks, self.clients, self.count = chunks, clients, count
        self.received[index] = size
        self.dropped += dropped
        return "complete" if self.complete else "stored"

    @property
    def complete(self) -> bool:
        return self.chunks is not None and len(self.received) == self.chunks

    @property
    def total_received(self) -> int:
        return sum(self.received.values())


def uniform_permutation(size: int, randbelow: RandBelow = secrets.randbelow) -> list[int]:
    """A uniformly random permutation of range(size): Fisher–Yates with exact ``randbelow``."""
    perm = list(range(size))
    for i in range(size - 1, 0, -1):
        j = randbelow(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def drop_replays(
    items: Sequence[bytes], seen: dict[bytes, int], chunk: int
) -> tuple[list[bytes], int]:
    """Drop the items of chunk number ``chunk`` that replay an item of another chunk of the
    round (their hash is in ``seen`` under another index) or repeat within ``items`` (the
    first copy is kept); record the kept items in ``seen``. Returns (kept, number dropped).

    Deterministic: a retransmitted copy of the same chunk keeps exactly what the first copy
    kept. Use it on *ciphertexts* arriving at a mix: two equal onions are a replay. Never on
    plaintext payloads, where equal values are legitimate.
    """
    kept: list[bytes] = []
    local: set[bytes] = set()
    for item in items:
        h = _item_hash(item)
        owner = seen.get(h)
        if h in local or (owner is not None and owner != chunk):
            continue
        local.add(h)
        seen[h] = chunk
        kept.append(item)
    return kept, len(items) - len(kept)


def mix_batch(payloads: Sequence[bytes], randbelow: RandBelow = secrets.randbelow) -> list[bytes]:
    """The batch under a uniformly random permutation (equal payloads are all kept)."""
    return [payloads[i] for i in uniform_permutation(len(payloads), randbelow)]


def split_chunks(payloads: Sequence[bytes], size: int) -> list[list[bytes]]:
    """Cut a batch into chunks of at most ``size`` payloads (at least one chunk, maybe empty)."""
    if size < 1:
        raise ValueError("chunk size must be >= 1")
    chunks = [list(payloads[i : i + size]) for i in range(0, len(payloads), size)]
    return chunks or [[]]
