"""What a round machine asks its adapter to do.

A machine's event handlers return a list of actions; the adapter carries them out **in
order** and feeds the outcome of some of them back as events:

* :class:`Persist` — apply ``writes`` in one transaction. The adapter starts no later action
  of the list before the transaction committed (so anything acknowledged after it is on
  disk). With a ``token``, it then calls the machine's ``persisted(token)`` and carries out
  the actions that returns; if the write fails it calls ``persist_failed(token)`` instead.
* :class:`Send` — send ``frame`` to the successor over the link (retried until a reply
  arrives), then call ``on_reply(frame, reply)`` — or ``on_send_error(frame, error)`` for an
  error reply — and carry out what that returns.
* :class:`Reply` — answer the request being handled with ``frame`` (exactly one per request
  that is answered with a frame rather than an error).
* :class:`Peel` — decrypt ``items`` with the round's key (in a thread pool), then call
  ``peeled(token, results)``.
* :class:`Mix` — apply a uniformly random permutation to ``payloads`` (from a seed from the
  OS CSPRNG, off the event loop: :func:`~mixnet.core.outbound.permuted_chunks`), cut it in
  chunks of ``chunk_size``, then call ``mixed(round_id, chunks, seed=seed)``.
* :class:`Prove` — make a :class:`~mixnet.blame.Step` for each of ``items`` (inputs of this
  mix) with the round's key, off the event loop, then call ``proved(token, steps)``.
* :class:`Verify` — check each accusation with the round keys ``keys`` (hop → X25519
  public key) and the application's payload validator, off the event loop, then call
  ``verified(token, results)`` (one bool per accusation).
* :class:`Deliver` — hand a complete batch to the sink's application (``batch`` is ``None``
  when the round was aborted, with ``reason``), then call ``delivered(round_id, result)``.
* :class:`Publish` — the round's result is stored: wake whoever waits for it.
* :class:`LoadIntake` — read round ``round_id``'s stored chunks (after the writes emitted
  before it committed, off the event loop), then call ``intake_loaded(token, chunks)``.
* :class:`CompactReceipts` — (entry mix) make ``receipts.compacted()`` off the event loop,
  then call ``receipts_compacted(round_id, compacted)``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from mixnet.blame import Accusation
from mixnet.core.receipts import ReceiptTable
from mixnet.core.records import Write
from mixnet.frames import Frame

__all__ = [
    "Action",
    "CompactReceipts",
    "Deliver",
    "DeliveredBatch",
    "LoadIntake",
    "Mix",
    "Peel",
    "Persist",
    "Prove",
    "Publish",
    "Reply",
    "Send",
    "Verify",
]


@dataclass(frozen=True)
class Persist:
    """Apply ``writes`` atomically; then ``persisted(token)`` if a token is given."""

    writes: tuple[Write, ...]
    token: Hashable | None = None


@dataclass(frozen=True)
class Send:
    """Send ``frame`` to the successor; its reply comes back through ``on_reply``. The
    actions after it wait for that reply and what it leads to, unless ``background``: then
    the adapter sends it in a task of its own and goes on at once (the machine does other
    work meanwhile, e.g. checks a trace page while the next is asked for)."""

    frame: Frame
    background: bool = False


@dataclass(frozen=True)
class Reply:
    """Answer the request being handled."""

    frame: Frame


@dataclass(frozen=True)
class Peel:
    """Peel ``items`` with round ``round_id``'s key; results go to ``peeled(token, ...)``:
    ``split`` entries per item (each layer's content cut into ``split`` equal items, or the
    item's error ``split`` times; :func:`mixnet.onion.peel_many`). The entry mix opens a
    submission box with ``split`` = its ``messages``; other mixes use 1."""

    round_id: int
    items: Sequence[bytes]
    token: Hashable
    split: int = 1


@dataclass(frozen=True)
class Mix:
    """Permute ``payloads`` uniformly at random and cut them in chunks of ``chunk_size``."""

    round_id: int
    payloads: Sequence[bytes]
    chunk_size: int


@dataclass(frozen=True)
class CompactReceipts:
    """Entry mix: make ``receipts.compacted()`` (the receipts of round ``round_id``, which
    has ended: nothing adds to them) off the event loop, and hand it to
    ``receipts_compacted(round_id, compacted)``. Compared by ``round_id`` alone."""

    round_id: int
    receipts: ReceiptTable = field(compare=False, repr=False)


@dataclass(frozen=True)
class Prove:
    """Prove this mix's step for each of ``items`` (its inputs) in round ``round_id``;
    results go to ``proved(token, ...)``. The first ``failures`` items are inputs this mix
    could not peel, on a chain with ownership proofs: each of them gets the evidence of
    :func:`mixnet.blame.prove_failure` instead of a step."""

    round_id: int
    items: Sequence[bytes]
    token: Hashable
    failures: int = 0


@dataclass(frozen=True)
class Verify:
    """Check ``accusations`` of round ``round_id`` against the round keys ``keys`` (hop →
    32-byte X25519 public key); results go to ``verified(token, ...)``."""

    round_id: int
    accusations: Sequence[Accusation]
    keys: Mapping[int, bytes]
    token: Hashable


@dataclass(frozen=True)
class Deliver:
    """Hand round ``round_id``'s complete batch (``None``: the round was aborted, for
    ``reason``) to the sink's application."""

    round_id: int
    batch: DeliveredBatch | None
    reason: str = ""


@dataclass(frozen=True)
class DeliveredBatch:
    """What the sink's application receives: ``payloads`` (in the last mix's order), the
    number of clients ``clients`` and the batch's declared ``count``; ``excluded``
    submissions were proven bad and left out by the chain (``clients`` counts the rest).

    The sink hands ``payloads`` over as an :class:`~mixnet.core.items.Items` (the round's
    one contiguous buffer, read-only): an application that reads it a block at a time
    (:meth:`~mixnet.core.items.Items.blocks`) needs no Python object per payload. Any other
    ``Sequence[bytes]`` is accepted too (tests, other callers)."""

    clients: int
    count: int
    payloads: Sequence[bytes]
    excluded: int = 0


@dataclass(frozen=True)
class Publish:
    """Round ``round_id``'s result is stored."""

    round_id: int


@dataclass(frozen=True)
class LoadIntake:
    """Read round ``round_id``'s stored chunks (a relay's inputs, for its trace); results go
    to ``intake_loaded(token, chunks)``."""

    round_id: int
    token: Hashable


Action = (
    Persist | Send | Reply | Peel | Mix | Prove | Verify | Deliver | Publish | LoadIntake
    | CompactReceipts
)
