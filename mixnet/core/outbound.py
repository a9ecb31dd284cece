"""A mix's outbound batch as a permutation seed (pure).

A mix permutes its round with :func:`~mixnet.core.intake.seeded_permutation` under a fresh
32-byte seed from the OS CSPRNG and cuts the result in chunks (:func:`permuted_chunks`). The
store then keeps the seed and each chunk's size instead of the permuted batch
(:class:`~mixnet.core.records.OutboundBatch` with ``seed``), and a restarted mix derives the
same chunks again from the seed and the round's stored intake (:func:`derive_outbound`):
the intake stays on disk until the round's trace is done, longer than the outbound batch.
What the seed adds to the intake on disk is exactly what a stored permuted batch added, the
link from inputs to outputs, and it is erased (zeroed) with the batch.

The last mix keeps storing its batch whole: after an exclusion it replaces the batch with
one that is no permutation of its intake (``mixnet.core.tracing``), and its batch of
plaintext payloads is small.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mixnet.core.intake import seeded_permutation
from mixnet.core.items import Items
from mixnet.core.records import DerivedOutbound, OutboundBatch, OutboundChunk

__all__ = ["chunk_sizes", "derive_outbound", "permuted_chunks"]


def chunk_sizes(count: int, chunk_size: int) -> tuple[int, ...]:
    """The sizes of the chunks ``count`` items are cut in, ``chunk_size`` each and the rest
    in the last; one empty chunk for no items.

    :raises ValueError: ``count < 0`` or ``chunk_size < 1``.
    """
    if count < 0 or chunk_size < 1:
        raise ValueError("count must be >= 0 and chunk_size >= 1")
    full, rest = divmod(count, chunk_size)
    return (chunk_size,) * full + ((rest,) if rest or not full else ())


def _permuted(payloads: Sequence[bytes], seed: bytes, sizes: Sequence[int]) -> list[Items]:
    items = Items.of(payloads)
    if sum(sizes) != len(items):
        raise ValueError(f"{len(items)} payloads do not fill chunks of {sum(sizes)} items")
    perm = seeded_permutation(len(items), seed)
    if len(items) < 1 << 31:
        perm = perm.astype(np.int32)
    mixed = items.take(perm)  # a view through the permutation: each chunk is gathered later
    del perm
    chunks: list[Items] = []
    at = 0
    for size in sizes:
        chunks.append(mixed[at : at + size])
        at += size
    return chunks


def permuted_chunks(payloads: Sequence[bytes], seed: bytes, chunk_size: int) -> list[Items]:
    """``payloads`` under :func:`~mixnet.core.intake.seeded_permutation` with ``seed``, cut
    in chunks of ``chunk_size`` (:func:`chunk_sizes`): views of the payloads' buffer read
    through the permutation (nothing is copied here; each chunk is gathered when it is stored
    or sent). The same payloads, seed and chunk size give the same chunks again.

    :raises ValueError: ``seed`` is not :data:`~mixnet.core.intake.SEED_LENGTH` bytes, the
        payloads differ in length, or ``chunk_size < 1``.
    """
    return _permuted(payloads, seed, chunk_sizes(len(payloads), chunk_size))


def derive_outbound(
    stored: OutboundBatch | DerivedOutbound, payloads: Sequence[bytes]
) -> OutboundBatch:
    """The outbound batch a mix stored: as it is, or, if the store kept only its seed
    (:class:`~mixnet.core.records.DerivedOutbound`), its chunks derived again from the
    round's ``payloads`` — the same payloads, in the same order, that were permuted — with
    their acknowledgements.

    :raises ValueError: ``payloads`` do not fill the stored chunks.
    """
    if isinstance(stored, OutboundBatch):
        return stored
    chunks = _permuted(payloads, stored.seed, stored.sizes)
    return OutboundBatch(
        clients=stored.clients,
        count=stored.count,
        chunks=tuple(
            OutboundChunk(i, chunk, i in stored.acked) for i, chunk in enumerate(chunks)
        ),
        excluded=stored.excluded,
        seed=stored.seed,
    )
