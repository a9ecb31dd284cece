"""Who delivered what: signed chunks in the round machines (pure).

Every mix but the last signs the chunks it sends (:mod:`mixnet.chunk_signature`; the last
mix's go to the sink, which checks none); a mix after the entry
checks the signature of every chunk it receives and stores it with the chunk's items, which
it reads back for the trace (:class:`~mixnet.core.actions.LoadIntake`; a restarted mix still
shows what it received before). An accusation it
makes or extends about one of its inputs then carries the predecessor's :class:`Delivery` of
that input, and a blame carries the refused accusation as evidence, which anyone judges the
same way (:func:`judge`): the mix whose signed item is provably bad and who refused to trace
it, or else the mix that could not back its accusation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from nacl.signing import VerifyKey

from mixnet.blame import Accusation, delivered_by
from mixnet.chunk_signature import ChunkTree, Delivery, root_of_leaves, verify_chunk
from mixnet.core.item_index import ItemIndex
from mixnet.errors import BadSignature

#: An identity key as a :class:`~nacl.signing.VerifyKey`, made once per key (one per chunk
#: otherwise).
_verify_key = functools.lru_cache(maxsize=64)(VerifyKey)

__all__ = ["ChunkSigning", "ReceivedChunk", "judge"]

#: ``sign(round_id, index, items)``: this node's signature over one outbound chunk.
ChunkSigner = Callable[[int, int, Sequence[bytes]], bytes]


@dataclass(frozen=True)
class ChunkSigning:
    """What a machine needs to sign and check chunks: the ``chain_id``, the mixes' names in
    chain order (``names``), their Ed25519 identity public keys (``identities``, 32 bytes
    each) and ``sign``, this node's signer (``None``: it sends unsigned chunks)."""

    chain_id: str
    names: tuple[str, ...]
    identities: Mapping[str, bytes] = field(default_factory=dict)
    sign: ChunkSigner | None = None

    def name_at(self, hop: int) -> str | None:
        """The name of the mix at ``hop`` (``None`` outside the chain)."""
        return self.names[hop] if 0 <= hop < len(self.names) else None

    def check(self, round_id: int, sender: str, index: int, items: Sequence[bytes],
              signature: bytes | None, *,
              leaves: Sequence[bytes] | None = None) -> None:  # fmt: skip
        """Check a received chunk's signature (``leaves``, if given, must be the items' leaf
        hashes, :func:`~mixnet.chunk_signature.leaf_hashes`: computed already).

        :raises BadSignature: it is missing while the sender is known to sign, or does not
            verify under the sender's identity key.
        """
        key = self.identities.get(sender)
        if key is None:
            return  # the sender has no identity here (e.g. a test chain): nothing to check
        if signature is None:
            raise BadSignature(f"chunk {index} from {sender} is not signed")
        if not verify_chunk(_verify_key(key), signature, chain_id=self.chain_id,
                            round_id=round_id, sender=sender, index=index,
                            items=items,
                            root=None if leaves is None else root_of_leaves(leaves),
                            ):  # fmt: skip
            raise BadSignature(f"chunk {index} from {sender}: the signature does not verify")


@dataclass(frozen=True)
class ReceivedChunk:
    """A received chunk as it was signed: its ``sender``, ``index``, ``items`` and
    ``signature``."""

    sender: str
    index: int
    items: Sequence[bytes]
    signature: bytes

    @functools.cached_property
    def tree(self) -> ChunkTree:
        """The chunk's Merkle tree, built as paths are asked for and kept (while the chunk
        is: until the round's trace is over)."""
        return ChunkTree(self.items)

    def delivery(self, position: int) -> Delivery:
        """The :class:`Delivery` of ``items[position]``.

        :raises IndexError: ``position`` is outside the chunk.
        """
        path = self.tree.path(position)
        return Delivery(self.sender, self.index, len(self.items), position, path, self.signature)


def received_index(received: Mapping[int, ReceivedChunk]) -> ItemIndex:
    """The items of ``received`` chunks (in its order) indexed for :func:`deliveries`; valid
    while ``received`` does not change."""
    return ItemIndex([chunk.items for chunk in received.values()])


def deliveries(
    received: Mapping[int, ReceivedChunk],
    wanted: Sequence[bytes],
    index: ItemIndex | None = None,
) -> dict[bytes, Delivery]:
    """The :class:`Delivery` of each of ``wanted`` found in ``received`` chunks (of its
    first copy, in ``received``'s order). ``index``: :func:`received_index` of ``received``,
    if kept (a trace's pages then cost no scan of the round); built here otherwise."""
    chunks = list(received.values())
    index = received_index(received) if index is None else index
    found: dict[bytes, Delivery] = {}
    for item, position in index.positions(wanted, last=False).items():
        part, offset = index.locate(position)
        found[item] = chunks[part].delivery(offset)
    return found


def judge(evidence: Accusation, holds: bool, signing: ChunkSigning, round_id: int) -> str:
    """The mix a blame with ``evidence`` names (``holds``: the evidence verified as an
    accusation). The evidence is an accusation the mix at ``evidence.hop`` made about an
    input delivered by the mix before it, which refused it: if it holds and carries that
    predecessor's signed delivery of the item, the predecessor is the culprit (it sent a
    provably bad item and would not trace it); otherwise the accuser is."""
    accuser = signing.name_at(evidence.hop) or f"hop {evidence.hop}"
    sender = signing.name_at(evidence.hop - 1)
    if not holds or sender is None:
        return accuser
    identity = signing.identities.get(sender)
    if identity is not None and delivered_by(
        evidence, sender, identity, chain_id=signing.chain_id, round_id=round_id
    ):
        return sender
    return accuser
