"""Who delivered what: signed chunks in the round machines (pure).

Every mix but the last signs the chunks it sends (:mod:`mixnet.chunk_signature`; the last
mix's go to the sink, which checks none); a mix after the entry
checks the signature of every chunk it receives and stores it with the chunk's items, which
it reads back for the trace (:class:`~mixnet.core.actions.LoadIntake`; a restarted mix still
shows what it received before). An accusation it
makes or extends about one of its inputs then carries the predecessor's :class:`Delivery` of
that input, and a blame carries the refused accusation as evidence, which anyone judges the
same way (:func:`judge`): the mix whose signed item is provably bad and who refused to trace
it, or else the mix that could not back its accusation. The pages of accusations and the
refusals are signed too (:mod:`mixnet.trace_signature`), so that the judge has more than
the reporter's word for who accused and who refused.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from nacl.signing import VerifyKey

from mixnet.blame import Accusation, Failure, delivered_by
from mixnet.chunk_signature import ChunkTree, Delivery, root_of_leaves, verify_chunk
from mixnet.core.item_index import ItemIndex
from mixnet.errors import BadSignature
from mixnet.frames import Accused
from mixnet.trace_signature import (
    PageProof,
    Signer,
    page_proof,
    sign_page,
    sign_refusal,
    verify_on_page,
    verify_page,
    verify_refusal,
)

#: An identity key as a :class:`~nacl.signing.VerifyKey`, made once per key (one per chunk
#: otherwise).
_verify_key = functools.lru_cache(maxsize=64)(VerifyKey)

__all__ = [
    "ChunkSigning",
    "Judgement",
    "ReceivedChunk",
    "evidence_checked",
    "judge",
    "judge_blame",
]

#: ``sign(round_id, index, items)``: this node's signature over one outbound chunk.
ChunkSigner = Callable[[int, int, Sequence[bytes]], bytes]


@dataclass(frozen=True)
class ChunkSigning:
    """What a machine needs to sign and check chunks and trace pages: the ``chain_id``, the
    mixes' names in chain order (``names``), their Ed25519 identity public keys
    (``identities``, 32 bytes each), ``sign``, this node's chunk signer (``None``: it sends
    unsigned chunks), and ``sign_message``, its identity's signer of raw messages, for its
    trace pages and refusals (``None``: it signs neither)."""

    chain_id: str
    names: tuple[str, ...]
    identities: Mapping[str, bytes] = field(default_factory=dict)
    sign: ChunkSigner | None = None
    sign_message: Signer | None = None

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


    def sign_page(
        self, round_id: int, signer: str, accusations: Sequence[Accusation]
    ) -> bytes | None:
        """This node's (``signer``'s) signature over its page of ``accusations``; ``None``
        without a message signer or for an empty page."""
        if self.sign_message is None or not accusations:
            return None
        return sign_page(
            self.sign_message, accusations, chain_id=self.chain_id, round_id=round_id,
            signer=signer,
        )  # fmt: skip

    def page_signed(
        self, round_id: int, sender: str, accusations: Sequence[Accusation],
        signature: bytes | None,
    ) -> bool:  # fmt: skip
        """Whether a page of ``accusations`` from ``sender`` carries its valid signature
        (``True`` for an empty page, and when ``sender`` has no identity here: nothing to
        check, as for chunks)."""
        key = self.identities.get(sender)
        if key is None or not accusations:
            return True
        return verify_page(
            key, signature, accusations, chain_id=self.chain_id, round_id=round_id,
            signer=sender,
        )  # fmt: skip

    def refusal(
        self,
        round_id: int,
        refuser: str,
        page: Sequence[Accusation],
        position: int,
        signature: bytes | None,
    ) -> tuple[PageProof | None, bytes | None]:
        """What a refusal of ``page[position]`` (a page signed with ``signature``) carries
        beside it as evidence: the accusation's :class:`~mixnet.trace_signature.PageProof`
        (``None`` for an unsigned page) and this node's (``refuser``'s) signature over the
        refusal (``None`` without a message signer). A refused ``duplicate`` accusation also
        carries the whole page (see :func:`judge`)."""
        proof = None if signature is None else page_proof(page, position, signature)
        signed = None
        if self.sign_message is not None:
            signed = sign_refusal(
                self.sign_message, page[position], chain_id=self.chain_id,
                round_id=round_id, refuser=refuser,
            )  # fmt: skip
        return proof, signed


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


def evidence_checked(
    evidence: Accusation, proof: PageProof | None, page: Sequence[Accusation]
) -> tuple[tuple[Accusation, ...], int]:
    """What a judge verifies as accusations for a blame's ``evidence``, and the evidence's
    index in it: the whole ``page`` the blame came with, if it holds the evidence where
    ``proof`` says (a ``duplicate`` holds only beside its twins), else the evidence alone."""
    if page and proof is not None and proof.count == len(page):
        position = proof.position
        if position < len(page) and page[position] == evidence:
            return tuple(page), position
    return (evidence,), 0


@dataclass(frozen=True)
class Judgement:
    """Whom a blame names (``name``) and why (``reason``, one line). ``backed``: the
    evidence shows it to anyone, so the blame goes back with the evidence and every earlier
    mix judges it the same way; otherwise (the reporter is named: only it could have made
    the evidence up) it goes back without."""

    name: str
    reason: str
    backed: bool = True


def judge(
    evidence: Accusation,
    holds: bool,
    signing: ChunkSigning,
    round_id: int,
    *,
    proof: PageProof | None = None,
    refusal: bytes | None = None,
    reporter: str = "",
    page: Sequence[Accusation] = (),
) -> Judgement:
    """The mix a blame with ``evidence`` names (``holds``: the evidence verified as an
    accusation; ``reporter``: the mix that passed the blame to the judging one). The
    evidence is an accusation the mix at ``evidence.hop`` (the accuser) made about an input
    delivered by the mix before it (the refuser), which refused it; ``proof`` shows it on a
    page the accuser signed and ``refusal`` is the refuser's signature
    (:mod:`mixnet.trace_signature`). In order:

    1. the refuser has an identity here and ``refusal`` is not its signature over the
       evidence: the reporter made the refusal up (or passed on one that was); it is named,
       and the blame is not ``backed``;
    2. the accuser has an identity here and ``proof`` does not show the evidence on a page it
       signed: the refuser refused, and signed that it refused, an accusation its accuser
       never made; the refuser is named;
    3. a ``duplicate`` evidence without the whole page it was on (``page``, signed by the
       accuser: :func:`evidence_checked` then put it into ``holds``): only that page shows
       whether it had a twin, and the refuser withheld it; the refuser is named;
    4. the evidence holds and carries the refuser's signed delivery of the item: the refuser
       sent a provably bad item and would not trace it; it is named;
    5. otherwise the accuser could not back its accusation; it is named.

    A mix without an identity here (a chain without signed chunks) is taken at its word, as
    before signed pages: steps 1 to 3 do not apply to it.
    """
    accuser = signing.name_at(evidence.hop) or f"hop {evidence.hop}"
    refuser = signing.name_at(evidence.hop - 1)
    unbacked = Judgement(accuser, f"mix {accuser} could not back its accusations")
    if refuser is None:
        return unbacked
    chain = signing.chain_id
    refuser_key = signing.identities.get(refuser)
    if refuser_key is not None and not verify_refusal(
        refuser_key, refusal, evidence, chain_id=chain, round_id=round_id, refuser=refuser
    ):
        named = reporter or refuser
        if named == refuser:
            reason = f"mix {refuser} refused an accusation without signing its refusal"
        else:
            reason = f"mix {named} reported a refusal that mix {refuser} did not sign"
        return Judgement(named, reason, backed=False)
    accuser_key = signing.identities.get(accuser)
    if accuser_key is not None and not verify_on_page(
        evidence, proof, accuser_key, chain_id=chain, round_id=round_id, signer=accuser
    ):
        return Judgement(
            refuser, f"mix {refuser} refused an accusation that mix {accuser} did not sign"
        )
    if (
        accuser_key is not None
        and evidence.failure is Failure.DUPLICATE
        and not _on_signed_page(evidence, proof, page, accuser_key, chain, round_id, accuser)
    ):
        return Judgement(
            refuser, f"mix {refuser} refused a duplicate accusation without the page of its twins"
        )
    if not holds or refuser_key is None:
        return unbacked
    if delivered_by(evidence, refuser, refuser_key, chain_id=chain, round_id=round_id):
        return Judgement(
            refuser, f"mix {refuser} sent a provably bad item it had signed and would not trace it"
        )
    return unbacked


def judge_blame(
    blame: Accused, results: Sequence[bool], signing: ChunkSigning, *, reporter: str
) -> Judgement:
    """:func:`judge` for a ``blame`` reply with evidence, whose accusations
    :func:`evidence_checked` gave were verified to ``results`` (one each); ``reporter`` is the
    judging mix's successor, which sent the blame."""
    evidence = blame.evidence
    assert evidence is not None
    checked, at = evidence_checked(evidence, blame.proof, blame.evidence_page)
    holds = len(results) == len(checked) and results[at]
    return judge(
        evidence, holds, signing, blame.round_id, proof=blame.proof, refusal=blame.refusal,
        reporter=reporter, page=blame.evidence_page,
    )  # fmt: skip


def _on_signed_page(
    evidence: Accusation,
    proof: PageProof | None,
    page: Sequence[Accusation],
    identity: bytes,
    chain_id: str,
    round_id: int,
    accuser: str,
) -> bool:
    """Whether ``page`` is the whole page ``accuser`` signed with the evidence on it."""
    checked, _ = evidence_checked(evidence, proof, page)
    if proof is None or len(checked) != len(page) or not page:
        return False
    return verify_page(
        identity, proof.signature, page, chain_id=chain_id, round_id=round_id, signer=accuser
    )
