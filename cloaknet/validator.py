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

from cloaknet.params import share_width
from cloaknet.protocols import SummationProtocol
from cloaknet.protocols.vector_chain import VectorChainProtocol
from mixnet.blame import PayloadValidator

__all__ = ["payload_validator"]


def payload_validator(protocol: SummationProtocol) -> PayloadValidator:
    """The validator of ``protocol``'s messages: ``True`` iff a payload is
    ``share_width(protocol.message_modulus)`` bytes whose big-endian value is below the
    modulus (what :func:`cloaknet.encoding.decode_share` accepts); for vector sums
    (:class:`~cloaknet.protocols.vector_chain.VectorChainProtocol`) the payload's width,
    coordinate index (< d) and share (< q) are checked instead
    (:meth:`~cloaknet.protocols.vector_chain.VectorChainProtocol.valid_payload`). Pure and
    thread-safe.

    :raises TypeError: ``protocol`` is not a
        :class:`~cloaknet.protocols.base.SummationProtocol`.
    """
    if not isinstance(protocol, SummationProtocol):
        raise TypeError(f"protocol must be a SummationProtocol, not {type(protocol).__name__}")
    if isinstance(protocol, VectorChainProtocol):
        return protocol.valid_payload
    modulus = protocol.message_modulus
    width = share_width(modulus)

    def valid(payload: bytes) -> bool:
        return len(payload) == width and int.from_bytes(payload, "big") < modulus

    return valid
