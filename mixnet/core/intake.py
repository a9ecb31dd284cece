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
  consistent counts; it holds the round's replay filter (:class:`~mixnet.core.digests.
  ReplayFilter`) and the arenas its kept items are stored in (:class:`~mixnet.core.items.
  RowArena`: one buffer per round, not one object per item).

:func:`drop_replays` (:func:`filter_replays`, :func:`replay_positions`) drops replayed
ciphertexts; :func:`mix_batch` applies a uniform permutation drawn with an injected
``randbelow``, :func:`random_permutation` one drawn from random bytes (the OS CSPRNG by
default), vectorized, for whole rounds.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt
from nacl.bindings import randombytes_buf_deterministic

from mixnet.core.digests import ReplayFilter, split_digests
from mixnet.core.items import Items, RowArena
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
    "SEED_LENGTH",
    "BatchIntake",
    "ChunkOutcome",
    "EntryIntake",
    "drop_replays",
    "filter_replays",
    "item_digest",
    "item_digests",
    "mix_batch",
    "random_permutation",
    "replay_positions",
    "seeded_permutation",
    "seeded_randbytes",
    "split_chunks",
    "submission_digest",
    "uniform_permutation",
]


RandBelow = Callable[[int], int]
RandBytes = Callable[[int], bytes]
#: Most digests a batch's replay filter makes room for up front (the batch's declared count
#: comes from the predecessor; beyond this the filter grows as items arrive).
RESERVE_LIMIT = 1 << 26


#: An empty :func:`submission_digest` hash, copied for each box (cheaper than a new one).
_SUBMIT_HASH = hashlib.blake2b(digest_size=32, person=b"mixnet-submit")


def submission_digest(box: bytes) -> bytes:
    """BLAKE2b-256 (personalised ``mixnet-submit``) of a submission box: recognises exact
    retries and replayed boxes, and is what an admission signature covers.

    :raises TypeError: ``box`` is not a bytes-like object.
    """
    h = _SUBMIT_HASH.copy()
    h.update(box)
    return h.digest()


#: Bytes of one :func:`item_digest`.
ITEM_DIGEST_LENGTH = 16


def item_digest(item: bytes) -> bytes:
    """16-byte BLAKE2b digest of one incoming item (the replay filter's key)."""
    return hashlib.blake2b(item, digest_size=ITEM_DIGEST_LENGTH).digest()


#: An empty :func:`item_digest` hash, copied for each item (cheaper than a new one).
_ITEM_HASH = hashlib.blake2b(digest_size=ITEM_DIGEST_LENGTH)


def item_digests(items: Iterable[bytes]) -> list[bytes]:
    """``[item_digest(item) for item in items]``, faster (a copied hash per item)."""
    copy = _ITEM_HASH.copy
    digests: list[bytes] = []
    append = digests.append
    for item in items:
        h = copy()
        h.update(item)
        append(h.digest())
    return digests


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

    def fresh(self, clients: Sequence[str], digests: Sequence[bytes], now: float) -> bool:
        """Whether :meth:`accept_fresh` would take these submissions (``clients[i]``'s with
        ``digests[i]``): the round is open, the clients are distinct and none is accepted
        yet, the digests are distinct and none is accepted yet, and the round stays open with
        them all (fewer than ``max_users``, before the deadline). Changes nothing."""
        count = len(clients)
        if self.status != "open" or count != len(digests) or now >= self.deadline:
            return False
        if self.clients + count >= self.policy.max_users:
            return False
        if len(set(clients)) != count or len(set(digests)) != count:
            return False
        return self.accepted.keys().isdisjoint(clients) and self._digests.isdisjoint(digests)

    def accept_fresh(self, clients: Sequence[str], digests: Sequence[bytes], now: float) -> bool:
        """:meth:`accept` for several submissions at once, all or nothing: records every one
        of them and returns ``True`` if they are :meth:`fresh`; otherwise changes nothing and
        returns ``False`` (then accept them one by one, which decides each: a retry, a
        duplicate, the submission that closes the round)."""
        if not self.fresh(clients, digests, now):
            return False
        self.accepted.update(zip(clients, digests, strict=True))
        self._digests.update(digests)
        return True

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

    :meth:`keep` copies a chunk's kept outputs (what the node forwards or delivers) into the
    round's arena, which the first chunk sizes for the batch's declared count (pages are used
    only as rows are written). The arena outlives the intake: the views :meth:`keep` returns
    hold it.
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
    seen: ReplayFilter = field(default_factory=ReplayFilter)
    #: chunks being stored: index -> (chunks, clients, count, items it carried)
    pending: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    outputs: RowArena | None = None
    #: chunk index -> (first row, rows) of its kept outputs in ``outputs``
    output_rows: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: whether the first chunk sizes :attr:`seen` for the batch (a mix filters replays; the
    #: sink, whose items are plaintext payloads, does not)
    filters_replays: bool = True

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
        length = self.payload_length
        if isinstance(payloads, Items) and (payloads.width == length or not payloads):
            pass
        elif not (set(map(type, payloads)) <= {bytes} and set(map(len, payloads)) <= {length}):
            for i, payload in enumerate(payloads):  # the payload at fault
                if not isinstance(payload, bytes) or len(payload) != length:
                    raise BadLength(f"payload {i} must be {length} bytes")
        if self.filters_replays and self._shape() is None and not self.received:
            self.seen.reserve(min(count, RESERVE_LIMIT))  # the first chunk: size the filter
        return True

    def keep(self, index: int, outputs: Sequence[bytes]) -> Items:
        """Copy chunk ``index``'s kept ``outputs`` into the round's arena and return them as
        kept (a read-only view of the arena). A mix's inputs are not held here: they are in
        its store until a trace reads them back. Call it after :meth:`reserve` (which fixes
        the batch's count the arena is sized for).

        :raises ValueError, TypeError: items of unequal lengths, or not bytes.
        """
        return self._keep_outputs(index, Items.of(outputs))

    def _hint(self) -> int:
        shape = self._shape()
        return min(shape[2] if shape is not None else 0, RESERVE_LIMIT)

    def _keep_outputs(self, index: int, out: Items) -> Items:
        if not out:
            return out
        if self.outputs is None or self.outputs.width != out.width:
            self.outputs = RowArena(out.width, self._hint())
            self.output_rows.clear()
        self.output_rows[index] = (len(self.outputs), len(out))
        return self.outputs.append(out)

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

    def outputs_in_order(self, indices: Sequence[int]) -> Items | None:
        """The kept outputs of chunks ``indices`` (in that order) as one ``Items`` over the
        round's arena, without copying; ``None`` if some were not kept through :meth:`keep`
        (e.g. chunks read back after a restart)."""
        if self.outputs is None or any(i not in self.output_rows for i in indices):
            return None
        rows = [self.output_rows[i] for i in indices]
        everything = self.outputs.items()
        at = 0
        for start, count in rows:
            if start != at:
                break
            at += count
        else:
            if at == len(everything):
                return everything
        index = np.concatenate(
            [np.arange(start, start + count, dtype=np.intp) for start, count in rows]
            or [np.zeros(0, dtype=np.intp)]
        )
        return everything.take(index)

    def output_views(self) -> dict[int, Items]:
        """Chunk index → its kept outputs, as views of the arena as it is now (after
        :meth:`outputs_in_order` merged its blocks: views of the old blocks keep them
        mapped, these do not)."""
        if self.outputs is None:
            return {}
        everything = self.outputs.items()
        return {i: everything[s : s + n] for i, (s, n) in self.output_rows.items()}

    @property
    def complete(self) -> bool:
        return self.chunks is not None and len(self.received) == self.chunks

    @property
    def total_received(self) -> int:
        return sum(self.received.values())


def uniform_permutation(size: int, randbelow: RandBelow = secrets.randbelow) -> list[int]:
    """A uniformly random permutation of range(size): Fisher–Yates with exact ``randbelow``.
    (For a whole round use :func:`random_permutation`, which is vectorized.)"""
    perm = list(range(size))
    for i in range(size - 1, 0, -1):
        j = randbelow(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def random_permutation(size: int, randbytes: RandBytes = os.urandom) -> npt.NDArray[np.intp]:
    """A uniformly random permutation of ``range(size)`` as an index array, exactly.

    Each position gets an independent uniform 64-bit key from ``randbytes`` (the OS CSPRNG
    by default); the permutation sorts the keys. Given that the keys are distinct, every
    order of them is equally likely, so the permutation is uniform; if any two keys are
    equal (probability below ``size**2 / 2**65``) all keys are drawn again, so no tie is
    ever broken by position. No modulo, no floating point, no seeded generator.

    :raises ValueError: ``size < 0``.
    """
    if size < 0:
        raise ValueError("size must be >= 0")
    while True:
        keys = np.frombuffer(randbytes(8 * size), dtype=np.uint64)
        if keys.shape[0] != size:
            raise ValueError("randbytes returned the wrong number of bytes")
        order = np.argsort(keys)
        ordered = keys[order]
        tie = bool(size > 1 and np.any(ordered[1:] == ordered[:-1]))
        del keys, ordered
        if not tie:
            return order


#: Bytes of the seed of a :func:`seeded_permutation`.
SEED_LENGTH = 32
_SEED_PERSON = b"mixnet-perm-draw"


def seeded_randbytes(seed: bytes) -> RandBytes:
    """The byte source of :func:`seeded_permutation`: its ``k``-th call (from 0) returns the
    bytes asked for from libsodium's ``randombytes_buf_deterministic`` (ChaCha20) under a
    key derived from ``seed``: ``seed`` itself for the first call, BLAKE2b-256 of ``k``
    (8 bytes, big-endian) keyed with ``seed`` (personalised ``mixnet-perm-draw``) for a later
    one — so that a draw repeated after a tie gets new bytes.

    :raises ValueError: ``seed`` is not :data:`SEED_LENGTH` bytes.
    """
    if not isinstance(seed, bytes) or len(seed) != SEED_LENGTH:
        raise ValueError(f"seed must be {SEED_LENGTH} bytes")
    draws = itertools.count()

    def randbytes(size: int) -> bytes:
        k = next(draws)
        key = seed if k == 0 else hashlib.blake2b(
            k.to_bytes(8, "big"), key=seed, digest_size=SEED_LENGTH, person=_SEED_PERSON
        ).digest()
        return bytes(randombytes_buf_deterministic(size, key)) if size else b""

    return randbytes


def seeded_permutation(size: int, seed: bytes) -> npt.NDArray[np.intp]:
    """:func:`random_permutation` with its keys drawn from ``seed`` (:func:`seeded_randbytes`)
    instead of the OS CSPRNG: the same ``size`` and ``seed`` give the same permutation
    again. With a seed of :data:`SEED_LENGTH` bytes from the OS CSPRNG the permutation is
    uniform up to ChaCha20's indistinguishability from random bytes (the construction the
    kernel's own CSPRNG uses), and a mix that stores the seed can derive its outbound batch
    again after a restart instead of storing it (:mod:`mixnet.core.outbound`).

    :raises ValueError: ``size < 0``, or ``seed`` is not :data:`SEED_LENGTH` bytes.
    """
    return random_permutation(size, seeded_randbytes(seed))


def replay_positions(
    items: Sequence[bytes], seen: ReplayFilter | dict[bytes, int], chunk: int
) -> tuple[list[int], bytes]:
    """Which items of chunk number ``chunk`` to keep: not a replay of an item of another
    chunk of the round (its hash is in ``seen`` under another index) and not a repeat within
    ``items`` (the first copy is kept). Records the kept items in ``seen``; returns their
    positions in ``items`` (ascending) and the concatenated :func:`item_digest` of the items
    this call added to ``seen`` — each item is hashed once.

    Deterministic: a retransmitted copy of the same chunk keeps exactly what the first copy
    kept. Use it on *ciphertexts* arriving at a mix: two equal onions are a replay. Never on
    plaintext payloads, where equal values are legitimate.
    """
    hashes = [_item_hash(item) for item in items]
    if isinstance(seen, ReplayFilter):
        hi, lo = split_digests(hashes)
        owners = seen.owners(hi, lo)
    else:
        owners = [seen.get(h, -1) for h in hashes]
    positions: list[int] = []
    new: list[bytes] = []
    local: set[bytes] = set()
    for position, (h, owner) in enumerate(zip(hashes, owners, strict=True)):
        if h in local or (owner != -1 and owner != chunk):
            continue
        local.add(h)
        positions.append(position)
        if owner == -1:
            new.append(h)
    if isinstance(seen, ReplayFilter):
        hi, lo = split_digests(new)
        seen.add_new(hi, lo, chunk)
    else:
        seen.update(dict.fromkeys(new, chunk))
    return positions, b"".join(new)


def filter_replays(
    items: Sequence[bytes], seen: ReplayFilter | dict[bytes, int], chunk: int
) -> tuple[list[bytes], int, bytes]:
    """:func:`replay_positions` as (the kept items, the number dropped, the digests)."""
    positions, digests = replay_positions(items, seen, chunk)
    return [items[i] for i in positions], len(items) - len(positions), digests


def drop_replays(
    items: Sequence[bytes], seen: ReplayFilter | dict[bytes, int], chunk: int
) -> tuple[list[bytes], int]:
    """:func:`filter_replays` without the digests: (kept, number dropped)."""
    kept, dropped, _ = filter_replays(items, seen, chunk)
    return kept, dropped


def mix_batch(payloads: Sequence[bytes], randbelow: RandBelow = secrets.randbelow) -> list[bytes]:
    """The batch under a uniformly random permutation (equal payloads are all kept)."""
    return [payloads[i] for i in uniform_permutation(len(payloads), randbelow)]


def split_chunks(payloads: Sequence[bytes], size: int) -> list[list[bytes]]:
    """Cut a batch into chunks of at most ``size`` payloads (at least one chunk, maybe empty)."""
    if size < 1:
        raise ValueError("chunk size must be >= 1")
    chunks = [list(payloads[i : i + size]) for i in range(0, len(payloads), size)]
    return chunks or [[]]
