"""Accusations on the wire: the ``accusations`` field of an ``accused`` reply
(``docs/wire.md``, § 13).

An accusation is the map ``{failure: str, steps: [{hop, item, secret, proof}, ...],
delivery?: {sender, chunk, count, position, path: [bin 32, ...], signature}}``
(``secret`` and ``proof`` are empty in the last step of a ``no-owner`` accusation);
:func:`accusation_to_wire` writes one and :func:`parse_accusations` reads a list of them,
checking every type and length before anything else looks at them. The evidence itself is
checked by :func:`mixnet.blame.verify_accusation`. A blame's ``evidence_proof`` is the map
``{count, position, path: [bin 32, ...], signature}`` (:class:`~mixnet.trace_signature.
PageProof`): :func:`page_proof_to_wire` and :func:`parse_page_proof`.
"""

from __future__ import annotations

from collections.abc import Mapping

from mixnet.blame import SECRET_LENGTH, Accusation, Failure, Step
from mixnet.chunk_signature import MAX_PATH, SIGNATURE_LENGTH, Delivery
from mixnet.dleq import PROOF_LENGTH
from mixnet.errors import BadLength, MalformedFrame
from mixnet.trace_signature import PageProof
from mixnet.wire import MAX_NAME_LENGTH, get_bytes, get_bytes_list, get_int, get_str

__all__ = [
    "accusation_to_wire",
    "evidence_to_wire",
    "page_proof_to_wire",
    "parse_accusations",
    "parse_evidence",
    "parse_page_proof",
]

#: Most accusations a signed page may claim to hold (a page holds at most a chunk's worth).
MAX_PAGE_COUNT = (1 << 16) - 1


_FAILURES = {f.value: f for f in Failure}


def accusation_to_wire(accusation: Accusation) -> dict[str, object]:
    """The msgpack map of ``accusation``."""
    wire: dict[str, object] = {
        "failure": accusation.failure.value,
        "steps": [
            {"hop": s.hop, "item": s.item, "secret": s.shared_secret, "proof": s.proof}
            for s in accusation.steps
        ],
    }
    d = accusation.delivery
    if d is not None:
        wire["delivery"] = {
            "sender": d.sender, "chunk": d.index, "count": d.count, "position": d.position,
            "path": list(d.path), "signature": d.signature,
        }  # fmt: skip
    return wire


def _parse_delivery(raw: object) -> Delivery:
    if not isinstance(raw, dict):
        raise MalformedFrame("a delivery must be a map")
    count = get_int(raw, "count", min_value=1, max_value=(1 << 32) - 1)  # signed as u32
    sender = get_str(raw, "sender", max_length=MAX_NAME_LENGTH)
    if not sender:
        raise MalformedFrame("a delivery's sender must not be empty")
    return Delivery(
        sender=sender,
        index=get_int(raw, "chunk", min_value=0, max_value=(1 << 32) - 1),
        count=count,
        position=get_int(raw, "position", min_value=0, max_value=count - 1),
        path=tuple(get_bytes_list(raw, "path", item_length=32, max_count=MAX_PATH)),
        signature=get_bytes(raw, "signature", length=SIGNATURE_LENGTH),
    )


def _parse_step(step: object, max_item_length: int) -> Step:
    if not isinstance(step, dict):
        raise MalformedFrame("a step must be a map")
    item = get_bytes(step, "item")
    if len(item) > max_item_length:
        raise BadLength(f"a step's item is longer than {max_item_length} bytes")
    secret = get_bytes(step, "secret")
    revealed = bool(secret)  # a no-owner accusation's last step reveals nothing
    return Step(
        hop=get_int(step, "hop", min_value=0, max_value=0xFFFF),
        item=item,
        shared_secret=get_bytes(step, "secret", length=SECRET_LENGTH if revealed else 0),
        proof=get_bytes(step, "proof", length=PROOF_LENGTH if revealed else 0),
    )


def _parse_accusation(entry: object, max_steps: int, max_item_length: int) -> Accusation:
    if not isinstance(entry, dict):
        raise MalformedFrame("an accusation must be a map")
    failure = _FAILURES.get(get_str(entry, "failure", max_length=32))
    if failure is None:
        raise MalformedFrame("unknown accusation failure")
    steps = entry.get("steps")
    if not isinstance(steps, list) or not 0 < len(steps) <= max_steps:
        raise MalformedFrame(f"an accusation needs 1 to {max_steps} steps")
    delivery = _parse_delivery(entry["delivery"]) if "delivery" in entry else None
    return Accusation(failure, tuple(_parse_step(s, max_item_length) for s in steps), delivery)


def parse_accusations(
    raw: object, *, max_count: int, max_steps: int, max_item_length: int
) -> tuple[Accusation, ...]:
    """Read the ``accusations`` list: at most ``max_count`` accusations of 1 to
    ``max_steps`` steps, each step's item at most ``max_item_length`` bytes.

    :raises MalformedFrame, BadLength: a type, count or length is wrong.
    """
    if not isinstance(raw, list):
        raise MalformedFrame("field 'accusations' must be a list")
    if len(raw) > max_count:
        raise MalformedFrame(f"field 'accusations' has more than {max_count} items")
    return tuple(_parse_accusation(entry, max_steps, max_item_length) for entry in raw)


def page_proof_to_wire(proof: PageProof) -> dict[str, object]:
    """The msgpack map of a blame's ``evidence_proof``."""
    return {
        "count": proof.count,
        "position": proof.position,
        "path": list(proof.path),
        "signature": proof.signature,
    }


def parse_page_proof(raw: object) -> PageProof:
    """Read a blame's ``evidence_proof`` map: ``count`` 1 to 65,535, ``position`` below it,
    at most :data:`~mixnet.chunk_signature.MAX_PATH` 32-byte path hashes and a 64-byte
    signature.

    :raises MalformedFrame, BadLength: a type, count or length is wrong.
    """
    if not isinstance(raw, dict):
        raise MalformedFrame("field 'evidence_proof' must be a map")
    count = get_int(raw, "count", min_value=1, max_value=MAX_PAGE_COUNT)
    return PageProof(
        count=count,
        position=get_int(raw, "position", min_value=0, max_value=count - 1),
        path=tuple(get_bytes_list(raw, "path", item_length=32, max_count=MAX_PATH)),
        signature=get_bytes(raw, "signature", length=SIGNATURE_LENGTH),
    )


def evidence_to_wire(
    evidence: Accusation | None,
    proof: PageProof | None,
    refusal: bytes | None,
    page: tuple[Accusation, ...],
) -> dict[str, object]:
    """A blame's optional fields of an ``accused`` reply: ``evidence``, ``evidence_proof``,
    ``refusal`` and ``evidence_page``, those that are set."""
    wire: dict[str, object] = {}
    if evidence is not None:
        wire["evidence"] = accusation_to_wire(evidence)
    if proof is not None:
        wire["evidence_proof"] = page_proof_to_wire(proof)
    if refusal is not None:
        wire["refusal"] = refusal
    if page:
        wire["evidence_page"] = [accusation_to_wire(a) for a in page]
    return wire


def parse_evidence(
    frame: Mapping[str, object], *, max_count: int, max_steps: int, max_item_length: int
) -> tuple[Accusation | None, PageProof | None, bytes | None, tuple[Accusation, ...]]:
    """Read a blame's optional fields (:func:`evidence_to_wire`) of an ``accused`` reply:
    ``(evidence, proof, refusal, page)``, absent ones ``None`` (``()`` for the page, of at
    most ``max_count`` accusations, each read as :func:`parse_accusations` reads them).

    :raises MalformedFrame, BadLength, WrongCount: a type, count or length is wrong.
    """
    shape = {"max_steps": max_steps, "max_item_length": max_item_length}
    evidence = None
    if "evidence" in frame:
        (evidence,) = parse_accusations([frame["evidence"]], max_count=1, **shape)
    proof = parse_page_proof(frame["evidence_proof"]) if "evidence_proof" in frame else None
    refusal = None
    if "refusal" in frame:
        refusal = get_bytes(frame, "refusal", length=SIGNATURE_LENGTH)
    page: tuple[Accusation, ...] = ()
    if "evidence_page" in frame:
        page = parse_accusations(frame["evidence_page"], max_count=max_count, **shape)
    return evidence, proof, refusal, page
