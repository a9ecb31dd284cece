"""One round's analysis: what the analyzer node computes, as a pure function of the batch.

:func:`analyze_round` checks the batch against n·m once, decodes the fixed-width messages and
runs the protocol's analyzer; every protocol (the cloak included) goes through the same path
and contributes its own result fields through
:meth:`~cloaknet.protocols.base.SummationProtocol.result_fields`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import CloakError, ShareError
from cloaknet.protocols import SummationProtocol
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource

__all__ = ["analyze_round", "decode_messages"]

_U64_BYTES = 8


def decode_messages(payloads: Sequence[bytes], modulus: int, width: int) -> NDArray[Any]:
    """Decode fixed-width big-endian payloads into a 1-D array of message values.

    Every payload must be exactly ``width`` bytes and hold a value in ``[0, modulus)``
    (the inverse of :func:`cloaknet.encoding.encode_share`). Returns dtype ``uint64`` when
    ``width <= 8`` (vectorized) and ``object`` (Python ints) otherwise, in payload order.

    :raises ShareError: a payload of another length, or a value >= ``modulus`` (the message
        names the first offending payload's index).
    """
    count = len(payloads)
    for index, payload in enumerate(payloads):
        if len(payload) != width:
            raise ShareError(f"message #{index} must be {width} bytes, got {len(payload)}")
    values: NDArray[Any]
    if width <= _U64_BYTES:
        raw = np.frombuffer(b"".join(payloads), dtype=np.uint8).reshape(count, width)
        padded = np.zeros((count, _U64_BYTES), dtype=np.uint8)
        padded[:, _U64_BYTES - width :] = raw
        values = padded.view(">u8").reshape(count).astype(np.uint64)
        too_big = (
            np.flatnonzero(values >= np.uint64(modulus))
            if modulus < 1 << 64
            else np.zeros(0, dtype=np.intp)
        )
    else:
        ints = [int.from_bytes(payload, "big") for payload in payloads]
        values = np.empty(count, dtype=object)
        values[:] = ints
        too_big = np.flatnonzero(np.array([v >= modulus for v in ints], dtype=np.bool_))
    if too_big.size:
        raise ShareError(f"message #{int(too_big[0])} is not below the modulus {modulus}")
    return values


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
        messages = decode_messages(payloads, protocol.message_modulus, protocol.bytes_per_message)
        fields = protocol.result_fields(messages, clients, rng=rng)
    except CloakError as exc:
        return {**base, "status": "error", "error": str(exc)}
    result: dict[str, Any] = {**base, "status": "ok"}
    for key, value in fields.items():
        result.setdefault(key, value)  # the common fields above always win
    return result
