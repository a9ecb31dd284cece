"""The payload check the chain's last mix runs for cloaknet (a
:data:`mixnet.blame.PayloadValidator`).

A payload is valid for a protocol when it decodes as one of the protocol's messages: exactly
the message width (``share_width(N)`` bytes, big-endian) and a value below the message modulus
``N`` (for vector sums: the width, a coordinate index below d and a share below q). The
last mix refuses anything else before it forwards, and the chain traces and
excludes the submission it came from (``docs/protocol.md``, "Trace and exclude"), so one
client can no longer void a round with a share ``>= N``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from cloaknet.params import share_width
from cloaknet.protocols import SummationProtocol
from cloaknet.protocols.vector_chain import VectorChainProtocol
from mixnet.blame import PayloadValidator

__all__ = ["ShareValidator", "payload_validator"]

#: Widest share :meth:`ShareValidator.valid_rows` compares as ``uint64`` words (wider ones
#: are checked one payload at a time).
_WORD = 8


class ShareValidator:
    """The validator of scalar shares mod ``modulus``: a payload is valid iff it is
    ``share_width(modulus)`` bytes whose big-endian value is below ``modulus``. Also a
    :class:`mixnet.core.validate.RowValidator`: :meth:`valid_rows` checks a chunk of payloads
    with one numpy comparison. Pure and thread-safe.

    :raises ValueError: ``modulus`` below 1.
    """

    def __init__(self, modulus: int) -> None:
        if modulus < 1:
            raise ValueError(f"the modulus must be at least 1, got {modulus}")
        self.modulus = modulus
        self.width = share_width(modulus)

    def __call__(self, payload: bytes) -> bool:
        return len(payload) == self.width and int.from_bytes(payload, "big") < self.modulus

    def valid_rows(self, rows: npt.NDArray[np.uint8]) -> bool:
        """Whether every row of ``rows`` (``(count, width)`` ``uint8``, one payload each) is
        valid: ``all(self(bytes(row)) for row in rows)``, computed on the array."""
        count, width = rows.shape
        if count == 0:
            return True
        if width != self.width:
            return False
        if width > _WORD:
            return all(self(row.tobytes()) for row in rows)
        if self.modulus >= 1 << (8 * width):  # every value of this width is below it
            return True
        words = np.zeros((count, _WORD), dtype=np.uint8)
        words[:, _WORD - width :] = rows
        values = words.view(">u8").ravel()
        return bool((values < np.uint64(self.modulus)).all())


def payload_validator(protocol: SummationProtocol) -> PayloadValidator:
    """The validator of ``protocol``'s messages: ``True`` iff a payload is
    ``share_width(protocol.message_modulus)`` bytes whose big-endian value is below the
    modulus (what :func:`cloaknet.encoding.decode_share` accepts); for vector sums
    (:class:`~cloaknet.protocols.vector_chain.VectorChainProtocol`) the payload's width,
    coordinate index (< d) and share (< q) are checked instead
    (:meth:`~cloaknet.protocols.vector_chain.VectorChainProtocol.valid_payload`). Pure and
    thread-safe; for scalar shares a :class:`ShareValidator`, which the last mix runs on a
    chunk's payloads at once.

    :raises TypeError: ``protocol`` is not a
        :class:`~cloaknet.protocols.base.SummationProtocol`.
    """
    if not isinstance(protocol, SummationProtocol):
        raise TypeError(f"protocol must be a SummationProtocol, not {type(protocol).__name__}")
    if isinstance(protocol, VectorChainProtocol):
        return protocol.valid_payload
    return ShareValidator(protocol.message_modulus)
