"""One round's analysis: what the analyzer node computes, as a pure function of the batch.

:func:`analyze_round` checks the batch against n·m once, decodes the fixed-width messages and
runs the protocol's analyzer; every protocol (the cloak included) goes through the same path
and contributes its own result fields through
:meth:`~cloaknet.protocols.base.SummationProtocol.result_fields`.

Memory: a round's payloads arrive as an :class:`~mixnet.core.items.Items` (one contiguous
buffer). They are decoded straight from it, :data:`DECODE_BLOCK` at a time
(:func:`decode_blocks`), and folded into the protocol's
:meth:`~cloaknet.protocols.base.SummationProtocol.message_fold` — never one Python object
per payload, never an array of the whole round — so the analysis needs a few hundred KiB on
top of the batch whatever its size. Only a protocol without a fold (none of this package's)
gets the whole decoded array.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import CloakError, ShareError
from cloaknet.protocols import SummationProtocol
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from mixnet.core.items import Items

__all__ = ["DECODE_BLOCK", "analyze_round", "decode_blocks", "decode_messages"]

_U64_BYTES = 8
#: Payloads decoded at once (of at most 8 bytes: about 200 KiB of temporaries).
DECODE_BLOCK: Final[int] = 1 << 13
#: Payloads decoded at once when they are wider than 8 bytes (one Python int each).
_WIDE_BLOCK: Final[int] = 1 << 10


def _check_widths(payloads: Sequence[bytes], width: int) -> None:
    """:raises ShareError: the first payload that is not ``width`` bytes long (an
    :class:`~mixnet.core.items.Items` is checked once: all its items have one width)."""
    if isinstance(payloads, Items):
        if len(payloads) and payloads.width != width:
            raise ShareError(f"message #0 must be {width} bytes, got {payloads.width}")
        return
    for index, payload in enumerate(payloads):
        if len(payload) != width:
            raise ShareError(f"message #{index} must be {width} bytes, got {len(payload)}")


def _raw_blocks(payloads: Sequence[bytes], width: int, rows: int) -> Iterator[NDArray[np.uint8]]:
    """The payloads (all ``width`` bytes) as consecutive ``(k, width)`` byte arrays of at
    most ``rows`` rows: views of an :class:`~mixnet.core.items.Items`'s buffer, else joined
    one block at a time."""
    if isinstance(payloads, Items):
        yield from payloads.blocks(rows)
        return
    it = iter(payloads)
    while block := list(itertools.islice(it, rows)):
        yield np.frombuffer(b"".join(block), dtype=np.uint8).reshape(len(block), width)


def _decode_block(raw: NDArray[np.uint8], modulus: int, start: int) -> NDArray[Any]:
    """One block of payloads (rows of ``raw``; the first is message ``start``) as values:
    ``uint64`` for at most 8 bytes, else ``object``.

    :raises ShareError: a value >= ``modulus`` (naming the first, by its index in the batch).
    """
    count, width = raw.shape
    values: NDArray[Any]
    if width <= _U64_BYTES:
        padded = np.zeros((count, _U64_BYTES), dtype=np.uint8)
        padded[:, _U64_BYTES - width :] = raw
        values = padded.view(">u8").reshape(count).astype(np.uint64)
        if modulus < 1 << 64:
            too_big = np.flatnonzero(values >= np.uint64(modulus))
            if too_big.size:
                index = start + int(too_big[0])
                raise ShareError(f"message #{index} is not below the modulus {modulus}")
        return values
    blob = raw.tobytes()
    ints = [int.from_bytes(blob[i : i + width], "big") for i in range(0, len(blob), width)]
    for offset, value in enumerate(ints):
        if value >= modulus:
            raise ShareError(f"message #{start + offset} is not below the modulus {modulus}")
    values = np.empty(count, dtype=object)
    values[:] = ints
    return values


def decode_blocks(payloads: Sequence[bytes], modulus: int, width: int) -> Iterator[NDArray[Any]]:
    """Decode fixed-width big-endian payloads a block at a time: consecutive 1-D arrays of
    message values, in payload order (``uint64`` when ``width <= 8``, else ``object``
    holding Python ints), whose concatenation is :func:`decode_messages`. Every length is
    checked before the first block is yielded; each value as its block is decoded. Memory:
    one block of at most :data:`DECODE_BLOCK` messages (fewer when wider than 8 bytes) at
    a time, read straight from the buffer of an :class:`~mixnet.core.items.Items`.

    :raises ShareError: as :func:`decode_messages` — a payload of another length (before
        anything is yielded), or a value >= ``modulus`` (when its block is reached).
    """
    _check_widths(payloads, width)
    rows = DECODE_BLOCK if width <= _U64_BYTES else _WIDE_BLOCK
    start = 0
    for raw in _raw_blocks(payloads, width, rows):
        yield _decode_block(raw, modulus, start)
        start += int(raw.shape[0])


def decode_messages(payloads: Sequence[bytes], modulus: int, width: int) -> NDArray[Any]:
    """Decode fixed-width big-endian payloads into a 1-D array of message values.

    Every payload must be exactly ``width`` bytes and hold a value in ``[0, modulus)``
    (the inverse of :func:`cloaknet.encoding.encode_share`). Returns dtype ``uint64`` when
    ``width <= 8`` (vectorized) and ``object`` (Python ints) otherwise, in payload order.
    (:func:`decode_blocks` yields the same values a block at a time.)

    :raises ShareError: a payload of another length, or a value >= ``modulus`` (the message
        names the first offending payload's index; lengths are checked first).
    """
    blocks = list(decode_blocks(payloads, modulus, width))
    if not blocks:
        return np.zeros(0, dtype=np.uint64 if width <= _U64_BYTES else object)
    if len(blocks) == 1:
        return blocks[0]
    return np.concatenate(blocks)


def analyze_round(
    protocol: SummationProtocol,
    round_id: int,
    clients: int,
    count: int,
    payloads: Sequence[bytes],
    *,
    rng: RandomSource = SYSTEM_RANDOM,
    excluded: int = 0,
) -> dict[str, Any]:
    """The JSON result of round ``round_id``: ``clients`` accepted users, a batch announced
    as ``count`` messages, and the shuffled ``payloads``; ``excluded`` submissions were
    proven bad by the chain and left out (``clients`` counts the others).

    Always returns (never raises for bad input): ``round``, ``users`` (= ``clients``),
    ``messages`` (= ``len(payloads)``), ``excluded``, ``protocol`` (its name) and ``status``. With
    ``status == "ok"`` it adds the protocol's :meth:`result_fields` — ``estimate`` for every
    protocol, and e.g. ``estimate_exact``, ``raw_sum``, ``clamped``, ``precision`` for the
    cloak. With ``status == "error"`` it adds ``error``, a one-line reason: the batch does not
    hold n·m messages (``"expected n·m = ..."``; no estimate is ever computed from a wrong
    count), a payload has the wrong width or value, or the analyzer refused the round (e.g.
    more users than the parameters allow). Pure and deterministic for every protocol whose
    analyzer does not randomize; ``rng`` feeds the one that does (the trusted curator).
    """
    base: dict[str, Any] = {
        "round": round_id,
        "users": clients,
        "messages": len(payloads),
        "excluded": excluded,
        "protocol": protocol.name,
    }
    try:
        per_user = protocol.message_count
    except CloakError as exc:
        return {**base, "status": "error", "error": str(exc)}
    expected = clients * per_user
    if count != len(payloads) or len(payloads) != expected:
        return {
            **base,
            "status": "error",
            "error": f"expected n·m = {clients}·{per_user} = {expected} messages, "
            f"got {len(payloads)} (batch count {count})",
        }
    try:
        fields = _fields(protocol, payloads, clients, rng)
    except CloakError as exc:
        return {**base, "status": "error", "error": str(exc)}
    result: dict[str, Any] = {**base, "status": "ok"}
    for key, value in fields.items():
        result.setdefault(key, value)  # the common fields above always win
    return result


def _fields(
    protocol: SummationProtocol, payloads: Sequence[bytes], users: int, rng: RandomSource
) -> dict[str, object]:
    """The protocol's result fields for the payloads: folded a block at a time through its
    :meth:`~cloaknet.protocols.base.SummationProtocol.message_fold` (no array of the whole
    round), or — for a protocol without one — from the whole decoded batch.

    :raises CloakError: a bad payload (any one, before the protocol judges the messages),
        or what the protocol's analyzer raises.
    """
    modulus, width = protocol.message_modulus, protocol.bytes_per_message
    fold = protocol.message_fold()
    if fold is None:
        messages = decode_messages(payloads, modulus, width)
        return protocol.result_fields(messages, users, rng=rng)
    for block in decode_blocks(payloads, modulus, width):
        fold.add(block)
    return fold.result_fields(users, rng=rng)
