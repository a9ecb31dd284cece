"""Signed round-key announcements on the wire (``docs/wire.md`` § 6): written as maps and read
back with every field checked (their signatures are checked later, against the chain file:
:meth:`mixnet.keys.RoundKeyAnnouncement.verify`)."""

from __future__ import annotations

from collections.abc import Mapping

from mixnet.errors import MalformedFrame
from mixnet.keys import ROUND_KEY_LENGTH, SIGNATURE_LENGTH, RoundKeyAnnouncement
from mixnet.wire import MAX_NAME_LENGTH, ROUND_ID_MAX, get_bytes, get_int, get_str

__all__ = ["announcement_frame", "parse_announcement", "parse_announcements"]


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
    """Parse the ``announcements`` list of a frame (at most ``max_count`` maps)."""
    raw = frame.get("announcements")
    if not isinstance(raw, list) or len(raw) > max_count:
        raise MalformedFrame(f"announcements must be a list of at most {max_count} maps")
    return [parse_announcement(item, chain_id=chain_id) for item in raw]
