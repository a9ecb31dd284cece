"""Who said what in a trace: the accuser's signature over its page of accusations, and the
refuser's signature over a refusal (``docs/protocol.md``, "Trace and exclude").

A blame is judged from its evidence, the accusation a mix refused (:func:`mixnet.core.
deliveries.judge`). Without signatures the judge has only the reporter's word for two
things: that the accuser made that accusation, and that the refuser refused it. A malicious
mix could then pin a blame on an honest one: a relay could make up an accusation that does
not hold and say its successor sent it; or, with four or more mixes, report that a later
honest mix refused an accusation that holds, which a colluding mix further on made. With them
the judge checks both:

* **The page.** A mix that answers ``trace`` with accusations signs the page: Ed25519 by its
  identity key over :func:`page_message`, whose root is the Merkle tree of
  :mod:`mixnet.chunk_signature` (RFC 6962 shape, BLAKE2b-256) over the accusations'
  canonical bytes (:func:`accusation_bytes`), in page order. The ``accused`` frame carries it
  as ``signature``. A :class:`PageProof` (the page's size, the accusation's position, its
  audit path and the signature) shows that one accusation was on a page its accuser signed,
  without the rest of the page.
* **The refusal.** A mix that refuses an accusation of its successor's signs
  :func:`refusal_message`: the refused accusation's leaf hash under its own name. The
  ``accused`` frame of the blame carries it as ``refusal``, beside the evidence and its page
  proof, and every mix that passes the blame back passes all three on unchanged.

The messages are domain-separated from each other and from the chunks' (``mixnet/chunk/v1``):
a signature of one kind never verifies as another. Pure functions; every check returns
``False`` for hostile values instead of raising.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from mixnet.blame import Accusation
from mixnet.chunk_signature import (
    MAX_PATH,
    SIGNATURE_LENGTH,
    chunk_root,
    inclusion_path,
    leaf_hash,
    path_root,
)
from mixnet.errors import BadLength

__all__ = [
    "PageProof",
    "Signer",
    "accusation_bytes",
    "page_message",
    "page_proof",
    "refusal_message",
    "sign_page",
    "sign_refusal",
    "verify_on_page",
    "verify_page",
    "verify_refusal",
]

_PAGE_DOMAIN = b"mixnet/accused-page/v1"
_REFUSAL_DOMAIN = b"mixnet/refusal/v1"
_HASH = 32

#: ``sign(message)``: a node's 64-byte Ed25519 signature by its identity key.
Signer = Callable[[bytes], bytes]


def _lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def accusation_bytes(accusation: Accusation) -> bytes:
    """The canonical bytes of ``accusation`` that a page's Merkle leaf hashes: its failure,
    every step (hop as ``u16be``, then item, secret and proof, each length-prefixed with
    ``u32be``) and its delivery, if any (a ``0x01`` byte, then the sender, chunk index,
    chunk size, position, audit path and signature; ``0x00`` without one). Two different
    accusations never have the same bytes."""
    failure = accusation.failure.value.encode("ascii")
    parts = [_lp(failure), struct.pack(">H", len(accusation.steps))]
    for step in accusation.steps:
        parts += (
            struct.pack(">H", step.hop),
            _lp(step.item),
            _lp(step.shared_secret),
            _lp(step.proof),
        )
    d = accusation.delivery
    if d is None:
        parts.append(b"\x00")
    else:
        parts += (
            b"\x01",
            _lp(d.sender.encode("utf-8")),
            struct.pack(">III", d.index, d.count, d.position),
            struct.pack(">H", len(d.path)),
            *d.path,
            d.signature,
        )
    return b"".join(parts)


def page_message(*, chain_id: str, round_id: int, signer: str, count: int, root: bytes) -> bytes:
    """The bytes a page's signature covers: ``u32be(len D) || D || u32be(len chain) || chain
    || u64be(round) || u32be(len signer) || signer || u32be(count) || root`` with
    ``D = "mixnet/accused-page/v1"``, ``count`` the page's accusations and ``root`` their
    Merkle root."""
    return b"".join(
        (
            _lp(_PAGE_DOMAIN),
            _lp(chain_id.encode("utf-8")),
            struct.pack(">Q", round_id),
            _lp(signer.encode("utf-8")),
            struct.pack(">I", count),
            root,
        )
    )


def refusal_message(*, chain_id: str, round_id: int, refuser: str, accusation: Accusation) -> bytes:
    """The bytes a refusal's signature covers: ``u32be(len D) || D || u32be(len chain) ||
    chain || u64be(round) || u32be(len refuser) || refuser || leaf`` with
    ``D = "mixnet/refusal/v1"`` and ``leaf`` the refused accusation's Merkle leaf hash."""
    return b"".join(
        (
            _lp(_REFUSAL_DOMAIN),
            _lp(chain_id.encode("utf-8")),
            struct.pack(">Q", round_id),
            _lp(refuser.encode("utf-8")),
            leaf_hash(accusation_bytes(accusation)),
        )
    )


def _page_root(accusations: Sequence[Accusation]) -> bytes:
    return chunk_root([accusation_bytes(a) for a in accusations])


def sign_page(
    sign: Signer, accusations: Sequence[Accusation], *, chain_id: str, round_id: int, signer: str
) -> bytes:
    """``signer``'s signature (made by ``sign``) over its page of ``accusations``."""
    message = page_message(
        chain_id=chain_id, round_id=round_id, signer=signer,
        count=len(accusations), root=_page_root(accusations),
    )  # fmt: skip
    return sign(message)


def _verifies(identity: bytes, message: bytes, signature: object) -> bool:
    if not isinstance(signature, bytes) or len(signature) != SIGNATURE_LENGTH:
        return False
    try:
        VerifyKey(identity).verify(message, signature)
    except (BadSignatureError, TypeError, ValueError):
        return False
    return True


def verify_page(
    identity: bytes,
    signature: bytes | None,
    accusations: Sequence[Accusation],
    *,
    chain_id: str,
    round_id: int,
    signer: str,
) -> bool:
    """Whether ``signature`` is ``signer``'s (``identity``: its 32-byte Ed25519 public key)
    over its page of ``accusations`` in this chain and round."""
    if signature is None:
        return False
    message = page_message(
        chain_id=chain_id, round_id=round_id, signer=signer,
        count=len(accusations), root=_page_root(accusations),
    )  # fmt: skip
    return _verifies(identity, message, signature)


@dataclass(frozen=True, slots=True)
class PageProof:
    """That an accusation was on a signed page: the page held ``count`` accusations, this one
    at ``position``, ``path`` is its audit path and ``signature`` the accuser's over the
    page. Construction checks types and lengths only (``TypeError``,
    :class:`~mixnet.errors.BadLength`)."""

    count: int
    position: int
    path: tuple[bytes, ...]
    signature: bytes

    def __post_init__(self) -> None:
        for name in ("count", "position"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise TypeError(f"{name} must be a non-negative int")
        if not isinstance(self.path, tuple) or len(self.path) > MAX_PATH or any(
            not isinstance(p, bytes) or len(p) != _HASH for p in self.path
        ):
            raise BadLength(f"a path holds at most {MAX_PATH} hashes of {_HASH} bytes")
        if not isinstance(self.signature, bytes) or len(self.signature) != SIGNATURE_LENGTH:
            raise BadLength(f"signature must be {SIGNATURE_LENGTH} bytes")


def page_proof(accusations: Sequence[Accusation], position: int, signature: bytes) -> PageProof:
    """The :class:`PageProof` of ``accusations[position]`` on the page they form, signed
    with ``signature``.

    :raises IndexError: ``position`` is outside the page.
    """
    encoded = [accusation_bytes(a) for a in accusations]
    return PageProof(len(encoded), position, inclusion_path(encoded, position), signature)


def verify_on_page(
    accusation: Accusation,
    proof: PageProof | None,
    identity: bytes,
    *,
    chain_id: str,
    round_id: int,
    signer: str,
) -> bool:
    """Whether ``proof`` shows ``accusation`` on a page that ``signer`` (``identity``) signed
    in this chain and round."""
    if proof is None:
        return False
    root = path_root(accusation_bytes(accusation), proof.position, proof.count, proof.path)
    if root is None:
        return False
    message = page_message(
        chain_id=chain_id, round_id=round_id, signer=signer, count=proof.count, root=root
    )
    return _verifies(identity, message, proof.signature)


def sign_refusal(
    sign: Signer, accusation: Accusation, *, chain_id: str, round_id: int, refuser: str
) -> bytes:
    """``refuser``'s signature (made by ``sign``) saying it refused ``accusation``."""
    message = refusal_message(
        chain_id=chain_id, round_id=round_id, refuser=refuser, accusation=accusation
    )
    return sign(message)


def verify_refusal(
    identity: bytes,
    signature: bytes | None,
    accusation: Accusation,
    *,
    chain_id: str,
    round_id: int,
    refuser: str,
) -> bool:
    """Whether ``signature`` is ``refuser``'s (``identity``) refusal of ``accusation`` in this
    chain and round."""
    if signature is None:
        return False
    message = refusal_message(
        chain_id=chain_id, round_id=round_id, refuser=refuser, accusation=accusation
    )
    return _verifies(identity, message, signature)
