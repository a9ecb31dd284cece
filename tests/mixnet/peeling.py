"""Test helper: peel one onion, raising its error (the nodes peel in batches with
:func:`mixnet.onion.peel_many`)."""

from __future__ import annotations

from nacl.public import PrivateKey

from mixnet.errors import MixnetError
from mixnet.onion import peel_many


def peel(
    onion: bytes,
    secret_key: PrivateKey,
    *,
    chain_id: str,
    round_id: int,
    hop_index: int,
    expected_length: int,
) -> bytes:
    """The inner bytes of ``onion``, or raise the :class:`MixnetError` peeling found."""
    (result,) = peel_many(
        [onion],
        secret_key,
        chain_id=chain_id,
        round_id=round_id,
        hop_index=hop_index,
        expected_length=expected_length,
    )
    if isinstance(result, MixnetError):
        raise result
    return result
