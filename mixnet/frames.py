"""The chain protocol's frames as typed immutable objects (see ``docs/protocol.md``).

Each frame is decoded once, at the edge, into one of the frozen dataclasses below
(:func:`parse_request` for what a node receives, :func:`parse_reply` for the replies a link
or client expects); everything after that works on typed fields. :func:`to_wire` turns a frame
object back into the msgpack map :func:`mixnet.wire.encode_frame` sends. Parsers raise
:class:`~mixnet.errors.MixnetError` subclasses naming the field on any malformed input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mixnet.accusation_wire import (
    accusation_to_wire,
    evidence_to_wire,
    parse_accusations,
    parse_evidence,
)
from mixnet.admission import CREDENTIAL_LENGTH, TOKEN_LENGTH
from mixnet.announcement_wire import (
    announcement_frame,
    parse_announcement,
    parse_announcements,
)
from mixnet.blame import Accusation
from mixnet.errors import MalformedFrame, UnexpectedFrameType
from mixnet.keys import SIGNATURE_LENGTH, RoundKeyAnnouncement
from mixnet.trace_signature import PageProof
from mixnet.wire import (
    MAX_NAME_LENGTH,
    ROUND_ID_MAX,
    get_bool,
    get_bytes,
    get_bytes_list,
    get_float,
    get_int,
    get_str,
)

__all__ = [
    "MAX_CLIENT_ID_LENGTH",
    "MAX_NAME_LENGTH",
    "MAX_REASON_LENGTH",
    "PAGE_MAX",
    "ROUND_ID_MAX",
    "AbortRound",
    "Aborted",
    "Accepted",
    "Accused",
    "Authenticate",
    "Batch",
    "BatchAck",
    "Exclude",
    "Excluded",
    "Frame",
    "FrameLimits",
    "GetRound",
    "OpenRound",
    "RoundKeys",
    "RoundOffer",
    "Submit",
    "Subscribe",
    "Trace",
    "announcement_frame",
    "client_id",
    "parse_announcement",
    "parse_announcements",
    "parse_authenticate",
    "parse_reply",
    "parse_request",
    "parse_subscribe",
    "to_wire",
]

#: The largest page number of a paged trace or exclusion (and the most pages).
PAGE_MAX = (1 << 32) - 1
MAX_CLIENT_ID_LENGTH = 128
#: Longest reason an ``abort-round`` or ``exclude`` frame carries (characters).
MAX_REASON_LENGTH = 512


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True)
class GetRound:
    """client → entry mix: which round is open?"""


@dataclass(frozen=True)
class RoundOffer:
    """entry mix → client: the open round. ``deadline`` is unix seconds; ``announcements``
    are every mix's signed round key in chain order."""

    round_id: int
    deadline: float
    messages: int
    payload_length: int
    clients: int
    min_clients: int
    max_clients: int
    announcements: tuple[RoundKeyAnnouncement, ...]


@dataclass(frozen=True)
class Submit:
    """client → entry mix: one submission, ``box``: one onion layer for the entry mix
    around the submission's ``messages`` inner onions (:func:`mixnet.onion.wrap_submission`).

    On a chain with admission (:mod:`mixnet.admission`) it also carries ``credential`` (the
    client's 32-byte Ed25519 public key; the client id is then its base64 text),
    ``signature`` (64 bytes, by that key over (chain, round, submission digest)) and, for a
    client admitted by an issuer's token, ``token`` (72 bytes). All three are absent
    (``None``) otherwise; ``credential`` and ``signature`` come together, ``token`` only
    with them."""

    round_id: int
    client: str
    box: bytes
    credential: bytes | None = None
    token: bytes | None = None
    signature: bytes | None = None


@dataclass(frozen=True)
class Accepted:
    """entry mix → client: the submission is stored in the round."""

    round_id: int
    client: str


@dataclass(frozen=True)
class OpenRound:
    """mix → successor: open ``round_id`` (make and announce a round key)."""

    round_id: int


@dataclass(frozen=True)
class RoundKeys:
    """successor → mix: the signed round keys of the successor and every node after it."""

    round_id: int
    announcements: tuple[RoundKeyAnnouncement, ...]


@dataclass(frozen=True)
class AbortRound:
    """mix → successor: the round ends without a result; ``reason`` says why (may be
    empty)."""

    round_id: int
    reason: str = ""


@dataclass(frozen=True)
class Aborted:
    """successor → mix: the abort is recorded here and further down the chain."""

    round_id: int


@dataclass(frozen=True)
class Batch:
    """One chunk of a node-to-node batch: chunk ``index`` of ``chunks``; the whole batch holds
    ``count`` items from ``clients`` clients; ``excluded`` submissions were traced and left
    out (only the last mix's batch to the sink has any). ``signature`` is the sender's
    Ed25519 signature over the chunk (:mod:`mixnet.chunk_signature`; ``None``: unsigned)."""

    round_id: int
    sender: str
    index: int
    chunks: int
    clients: int
    count: int
    payloads: tuple[bytes, ...]
    excluded: int = 0
    signature: bytes | None = None


@dataclass(frozen=True)
class BatchAck:
    """successor → mix: chunk ``index`` of the round is stored."""

    round_id: int
    index: int


@dataclass(frozen=True)
class Trace:
    """mix → successor (after its batch is acknowledged): which of my outputs are proven bad?
    ``page`` (from 0) asks for one page of the answer: the accusations come in pages of at
    most one reply each, and the reply says whether a next page follows (``Accused.more``)."""

    round_id: int
    page: int = 0


@dataclass(frozen=True)
class Accused:
    """successor → mix: evidence against items of the mix's output (``accusations``, each
    about an input of the successor; ``signature``: the sender's over this page), ``untraced``
    items dropped further down without evidence, ``more``: the next page (``Trace.page + 1``)
    may hold more. A blame names a mix (``blame``; the round then aborts) by ``evidence``, an
    accusation a mix made and its predecessor refused, with ``proof`` that it was on a page
    its accuser signed, the refuser's ``refusal`` and, for a ``duplicate``, the whole
    ``evidence_page`` (:func:`mixnet.core.deliveries.judge`, :mod:`mixnet.trace_signature`)."""

    round_id: int
    accusations: tuple[Accusation, ...] = ()
    untraced: int = 0
    blame: str = ""
    evidence: Accusation | None = None
    more: bool = False
    signature: bytes | None = None
    proof: PageProof | None = None
    refusal: bytes | None = None
    evidence_page: tuple[Accusation, ...] = ()


@dataclass(frozen=True)
class Exclude:
    """mix → successor: drop ``items`` (inputs of the successor) and everything they become;
    ``excluded`` submissions are left out in all. A non-empty ``abort`` ends the round
    without a result instead, for that reason. An exclusion too long for one frame comes in
    ``pages`` frames, ``page`` 0 to ``pages - 1``, each with the same ``excluded``; it is
    applied once every page has arrived, and the last page is answered only then."""

    round_id: int
    items: tuple[bytes, ...] = ()
    excluded: int = 0
    abort: str = ""
    page: int = 0
    pages: int = 1

    @property
    def final(self) -> bool:
        """Whether this is the exclusion's last page (an abort always is)."""
        return bool(self.abort) or self.page + 1 >= self.pages


@dataclass(frozen=True)
class Excluded:
    """successor → mix: the exclusion (or abort) has passed the rest of the chain."""

    round_id: int


@dataclass(frozen=True)
class Authenticate:
    """predecessor → node: proof that this end of the link is ``node`` (an Ed25519
    signature over the challenge; see :func:`mixnet.keys.sign_link_challenge`)."""

    node: str
    signature: bytes


@dataclass(frozen=True)
class Subscribe:
    """client → sink: wait for the result of ``round_id``."""

    round_id: int


def parse_authenticate(frame: Mapping[str, object]) -> Authenticate:
    """Decode an ``authenticate`` frame.

    :raises MalformedFrame, BadLength: a field is missing or wrong.
    """
    return Authenticate(
        node=get_str(frame, "node", max_length=MAX_NAME_LENGTH),
        signature=get_bytes(frame, "signature", length=SIGNATURE_LENGTH),
    )


def parse_subscribe(frame: Mapping[str, object]) -> Subscribe:
    """Decode a ``subscribe`` frame.

    :raises MalformedFrame: the round is missing or out of range.
    """
    return Subscribe(_round(frame))


Frame = (
    GetRound
    | RoundOffer
    | Submit
    | Accepted
    | OpenRound
    | RoundKeys
    | AbortRound
    | Aborted
    | Batch
    | BatchAck
    | Trace
    | Accused
    | Exclude
    | Excluded
)


def to_wire(frame: Frame) -> dict[str, object]:
    """The msgpack map of ``frame`` (without ``v``, which :func:`encode_frame` adds)."""
    match frame:
        case GetRound():
            return {"type": "get-round"}
        case RoundOffer():
            return {
                "type": "round",
                "round": frame.round_id,
                "deadline": frame.deadline,
                "messages": frame.messages,
                "payload_length": frame.payload_length,
                "clients": frame.clients,
                "min_clients": frame.min_clients,
                "max_clients": frame.max_clients,
                "announcements": [announcement_frame(a) for a in frame.announcements],
            }
        case Submit():
            submit: dict[str, object] = {
                "type": "submit",
                "round": frame.round_id,
                "client": frame.client,
                "box": frame.box,
            }
            for key, value in (
                ("credential", frame.credential),
                ("token", frame.token),
                ("signature", frame.signature),
            ):
                if value is not None:
                    submit[key] = value
            return submit
        case Accepted():
            return {"type": "accepted", "round": frame.round_id, "client": frame.client}
        case OpenRound():
            return {"type": "open-round", "round": frame.round_id}
        case RoundKeys():
            return {
                "type": "round-keys",
                "round": frame.round_id,
                "announcements": [announcement_frame(a) for a in frame.announcements],
            }
        case AbortRound():
            return {"type": "abort-round", "round": frame.round_id, "reason": frame.reason}
        case Aborted():
            return {"type": "aborted", "round": frame.round_id}
        case Batch():
            return {
                "type": "batch",
                "round": frame.round_id,
                "sender": frame.sender,
                "chunk": frame.index,
                "chunks": frame.chunks,
                "clients": frame.clients,
                "count": frame.count,
                "payloads": list(frame.payloads),
                "excluded": frame.excluded,
                **({} if frame.signature is None else {"signature": frame.signature}),
            }
        case BatchAck():
            return {"type": "batch-ack", "round": frame.round_id, "chunk": frame.index}
        case Trace():
            return {
                "type": "trace",
                "round": frame.round_id,
                **({"page": frame.page} if frame.page else {}),
            }
        case Accused():
            accused: dict[str, object] = {
                "type": "accused",
                "round": frame.round_id,
                "accusations": [accusation_to_wire(a) for a in frame.accusations],
                "untraced": frame.untraced,
                "blame": frame.blame,
            }
            accused.update(
                evidence_to_wire(frame.evidence, frame.proof, frame.refusal, frame.evidence_page)
            )
            if frame.signature is not None:
                accused["signature"] = frame.signature
            if frame.more:
                accused["more"] = True
            return accused
        case Exclude():
            return {
                "type": "exclude",
                "round": frame.round_id,
                "items": list(frame.items),
                "excluded": frame.excluded,
                "abort": frame.abort,
                **({"page": frame.page, "pages": frame.pages} if frame.pages > 1 else {}),
            }
        case Excluded():
            return {"type": "excluded", "round": frame.round_id}
    raise TypeError(f"not a frame: {type(frame).__name__}")  # pragma: no cover


@dataclass(frozen=True)
class FrameLimits:
    """What a node accepts: submission boxes of ``submission_length`` bytes, batch chunks
    of at most ``chunk_items`` items of ``item_length`` bytes, ``exclude`` frames of at most
    ``exclude_items`` such items (0: ``chunk_items``), and ``announcements`` round keys at
    most in a ``round-keys`` reply."""

    chain_id: str
    submission_length: int = 0
    item_length: int = 0
    chunk_items: int = 0
    announcements: int = 0
    mixes: int = 0
    exclude_items: int = 0


def client_id(value: str) -> str:
    """Return ``value`` if it is a valid client id: 1 to :data:`MAX_CLIENT_ID_LENGTH`
    printable characters (no control characters, so no NUL).

    :raises MalformedFrame: otherwise.
    """
    if not 0 < len(value) <= MAX_CLIENT_ID_LENGTH or not value.isprintable():
        raise MalformedFrame(
            f"client id must be 1..{MAX_CLIENT_ID_LENGTH} printable characters"
        )
    return value


def _round(frame: Mapping[str, object]) -> int:
    return get_int(frame, "round", min_value=0, max_value=ROUND_ID_MAX)


def parse_request(kind: str, frame: Mapping[str, object], limits: FrameLimits) -> Frame:
    """Decode a request a node receives (``get-round``, ``submit``, ``open-round``,
    ``abort-round``, ``batch``), checking every length against ``limits``.

    :raises UnexpectedFrameType: ``kind`` is not one of those.
    :raises MalformedFrame, BadLength, WrongCount: a field is missing or wrong.
    """
    if kind == "get-round":
        return GetRound()
    if kind == "submit":
        return _parse_submit(frame, limits)
    if kind == "open-round":
        return OpenRound(_round(frame))
    if kind == "abort-round":
        return AbortRound(_round(frame), _reason(frame, "reason"))
    if kind == "batch":
        return Batch(
            round_id=_round(frame),
            sender=get_str(frame, "sender", max_length=MAX_NAME_LENGTH),
            index=get_int(frame, "chunk", min_value=0, max_value=ROUND_ID_MAX),
            chunks=get_int(frame, "chunks", min_value=1, max_value=ROUND_ID_MAX),
            clients=get_int(frame, "clients", min_value=0, max_value=ROUND_ID_MAX),
            count=get_int(frame, "count", min_value=0, max_value=ROUND_ID_MAX),
            payloads=tuple(
                get_bytes_list(
                    frame, "payloads", item_length=limits.item_length, max_count=limits.chunk_items
                )
            ),
            excluded=get_int(frame, "excluded", min_value=0, max_value=ROUND_ID_MAX, default=0),
            signature=_optional_bytes(frame, "signature", SIGNATURE_LENGTH),
        )
    if kind == "trace":
        return Trace(_round(frame), _page(frame, "page", 0))
    if kind == "exclude":
        return Exclude(
            round_id=_round(frame),
            items=tuple(
                get_bytes_list(
                    frame,
                    "items",
                    item_length=limits.item_length,
                    max_count=limits.exclude_items or limits.chunk_items,
                )
            ),
            excluded=get_int(frame, "excluded", min_value=0, max_value=ROUND_ID_MAX),
            abort=_reason(frame, "abort"),
            **_exclude_pages(frame),
        )
    raise UnexpectedFrameType(f"unexpected frame type {kind!r}")


def _page(frame: Mapping[str, object], key: str, default: int) -> int:
    """An optional page field: ``default`` (0 or 1) if absent, else ``default`` to
    :data:`PAGE_MAX`."""
    return get_int(frame, key, min_value=default, max_value=PAGE_MAX, default=default)


def _exclude_pages(frame: Mapping[str, object]) -> dict[str, int]:
    """An ``exclude`` frame's optional ``page`` and ``pages`` (absent: page 0 of 1).

    :raises MalformedFrame: a field is not an int in range, or ``page`` is not below
        ``pages``.
    """
    pages, page = _page(frame, "pages", 1), _page(frame, "page", 0)
    if page >= pages:
        raise MalformedFrame(f"field 'page' must be < pages ({pages})")
    return {"page": page, "pages": pages}


def _parse_submit(frame: Mapping[str, object], limits: FrameLimits) -> Submit:
    """A ``submit`` frame: the round, the client id, a ``box`` of exactly
    ``limits.submission_length`` bytes, and the optional admission fields (``credential`` 32
    bytes and ``signature`` 64 bytes together, ``token`` 72 bytes only with them).

    :raises MalformedFrame, BadLength, WrongCount: a field is missing, of the wrong type or
        length, or an admission field comes without the others it needs.
    """
    submit = Submit(
        round_id=_round(frame),
        client=client_id(get_str(frame, "client", max_length=MAX_CLIENT_ID_LENGTH)),
        box=get_bytes(frame, "box", length=limits.submission_length),
        credential=_optional_bytes(frame, "credential", CREDENTIAL_LENGTH),
        token=_optional_bytes(frame, "token", TOKEN_LENGTH),
        signature=_optional_bytes(frame, "signature", SIGNATURE_LENGTH),
    )
    if (submit.credential is None) != (submit.signature is None):
        raise MalformedFrame("fields 'credential' and 'signature' come together")
    if submit.token is not None and submit.credential is None:
        raise MalformedFrame("field 'token' needs 'credential' and 'signature'")
    return submit


def _optional_bytes(frame: Mapping[str, object], key: str, length: int) -> bytes | None:
    """An optional bytes field of exactly ``length`` bytes (absent: ``None``)."""
    if key not in frame:
        return None
    return get_bytes(frame, key, length=length)


def parse_reply(frame: Mapping[str, object], limits: FrameLimits) -> Frame:
    """Decode a non-error reply (``round``, ``accepted``, ``round-keys``, ``aborted``,
    ``batch-ack``).

    :raises UnexpectedFrameType: another type.
    :raises MalformedFrame, BadLength: a field is missing or wrong.
    """
    kind = get_str(frame, "type", max_length=32)
    if kind == "round":
        return RoundOffer(
            round_id=_round(frame),
            deadline=get_float(frame, "deadline"),
            messages=get_int(frame, "messages", min_value=1),
            payload_length=get_int(frame, "payload_length", min_value=0),
            clients=get_int(frame, "clients", min_value=0),
            min_clients=get_int(frame, "min_clients", min_value=0),
            max_clients=get_int(frame, "max_clients", min_value=0),
            announcements=tuple(
                parse_announcements(
                    frame, chain_id=limits.chain_id, max_count=limits.announcements
                )
            ),
        )
    if kind == "accepted":
        return Accepted(_round(frame), get_str(frame, "client", max_length=MAX_CLIENT_ID_LENGTH))
    if kind == "round-keys":
        return RoundKeys(
            _round(frame),
            tuple(
                parse_announcements(
                    frame, chain_id=limits.chain_id, max_count=limits.announcements
                )
            ),
        )
    if kind == "aborted":
        return Aborted(_round(frame))
    if kind == "batch-ack":
        return BatchAck(_round(frame), get_int(frame, "chunk", min_value=0, max_value=ROUND_ID_MAX))
    if kind == "accused":
        shape = {"max_steps": max(limits.mixes, 1), "max_item_length": limits.item_length}
        cap = max(2, limits.chunk_items)  # as many as a page: at most accusation_cap
        evidence, proof, refusal, page = parse_evidence(frame, max_count=cap, **shape)
        return Accused(
            round_id=_round(frame),
            accusations=parse_accusations(frame.get("accusations"), max_count=cap, **shape),
            untraced=get_int(frame, "untraced", min_value=0, max_value=ROUND_ID_MAX),
            blame=get_str(frame, "blame", max_length=MAX_NAME_LENGTH),
            evidence=evidence,
            more=get_bool(frame, "more") if "more" in frame else False,
            signature=_optional_bytes(frame, "signature", SIGNATURE_LENGTH),
            proof=proof,
            refusal=refusal,
            evidence_page=page,
        )
    if kind == "excluded":
        return Excluded(_round(frame))
    raise UnexpectedFrameType(f"unexpected reply type {kind!r}")


def _reason(frame: Mapping[str, object], key: str) -> str:
    """An optional free-text field (absent: empty), at most :data:`MAX_REASON_LENGTH`."""
    if key not in frame:
        return ""
    return get_str(frame, key, max_length=MAX_REASON_LENGTH)

