"""Builders and parsers for the chain protocol's frames (see ``docs/protocol.md``).

Parsers take a decoded frame (a dict from :func:`mixnet.wire.decode_frame`) and raise
:class:`~mixnet.errors.MixnetError` subclasses naming the field on any malformed input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mixnet.errors import MalformedFrame
from mixnet.keys import ROUND_KEY_LENGTH, SIGNATURE_LENGTH, RoundKeyAnnouncement
from mixnet.wire import get_bytes, get_bytes_list, get_int, get_str

__all__ = [
    "MAX_NAME_LENGTH",
    "ROUND_ID_MAX",
    "Batch",
    "announcement_frame",
    "batch_frame",
    "parse_announcement",
    "parse_announcements",
    "parse_batch",
]

ROUND_ID_MAX = (1 << 63) - 1
MAX_NAME_LENGTH = 64


def announcement_frame(a: RoundKeyAnnouncement) -> dict[str, object]:
    """The wire form of a signed round-key announcement (chain id is implied by the link)."""
    return {
        "node": a.node,
        "round": a.round_id,
        "public_key": a.public_key,
        "signature": a.signature,
    }


def parse_announcement(item: object, *, chain_id: str) -> RoundKeyAnnouncement:
    """Parse one announcement map (authenticity is checked later, against the chain file)."""
    if not isinstance(item, Mapping):
        raise MalformedFrame("announcement must be a map")
    return RoundKeyAnnouncement(
        chain_id=chain_id,
        node=get_str(item, "node", max_length=MAX_NAME_LENGTH),
        round_id=get_int(item, "round", min_value=0, max_value=ROUND_ID_MAX),
        public_key=get_bytes(item, "public_key", length=ROUND_KEY_LENGTH),
        signature=get_bytes(item, "signature", length=SIGNATURE_LENGTH),
    )


def parse_announcements(
    frame: Mapping[str, object], *, chain_id: str, max_count: int
) -> list[RoundKeyAnnouncement]:
    raw = frame.get("announcements")
    if not isinstance(raw, list) or len(raw) > max_count:
        raise MalformedFrame(f"announcements must be a list of at most {max_count} maps")
    return [parse_announcement(item, chain_id=chain_id) for item in raw]


@dataclass(frozen=True)
class Batch:
    """One chunk of a node-to-node batch."""

    round_id: int
    sender: str
    index: int
    chunks: int
    clients: int
    count: int
    payloads: list[bytes]


def batch_frame(batch: Batch) -> dict[str, object]:
    return {
        "type": "batch",
        "round": batch.round_id,
        "sender": batch.sender,
        "chunk": batch.index,
        "chunks": batch.chunks,
        "clients": batch.clients,
        "count": batch.count,
        "payloads": batch.payloads,
    }


def parse_batch(frame: Mapping[str, object], *, payload_length: int, max_count: int) -> Batch:
    """Parse a ``batch`` frame; payload lengths and the item count are checked here."""
    return Batch(
        round_id=get_int(frame, "round", min_value=0, max_value=ROUND_ID_MAX),
        sender=get_str(frame, "sender", max_length=MAX_NAME_LENGTH),
        index=get_int(frame, "chunk", min_value=0, max_value=ROUND_ID_MAX),
        chunks=get_int(frame, "chunks", min_value=1, max_value=ROUND_ID_MAX),
        clients=get_int(frame, "clients", min_value=0, max_value=ROUND_ID_MAX),
        count=get_int(frame, "count", min_value=0, max_value=ROUND_ID_MAX),
        payloads=get_bytes_list(frame, "payloads", item_length=payload_length, max_count=max_count),
    )
