"""What a user's submission costs on the wire, hop by hop (onion format 2).

A user's ``m`` messages of ``w`` bytes travel as one submission box to the entry mix
(:func:`mixnet.onion.submission_length`), then as ``m`` onions that lose one 48-byte layer
(96 with ownership proofs) at every mix, and reach the analyzer as ``m`` payloads. Framing
(msgpack keys, the client id, batch headers) is not counted: it is a few dozen bytes per
frame, and a batch frame carries thousands of items.
"""

from __future__ import annotations

from dataclasses import dataclass

from mixnet.onion import onion_length, submission_length

__all__ = ["WireCost", "wire_cost"]


@dataclass(frozen=True)
class WireCost:
    """Bytes of one user's messages arriving at each node: ``per_hop[0]`` at the entry
    mix (the submission box, which is also what the user sends: :attr:`per_user`), then at
    each later mix, and last at the analyzer."""

    mixes: int
    proven: bool
    per_hop: tuple[int, ...]

    @property
    def per_user(self) -> int:
        """Bytes a user sends (its submission box)."""
        return self.per_hop[0]

    def hop_names(self) -> tuple[str, ...]:
        """``mix1`` … ``mixL`` and ``analyzer``, aligned with :attr:`per_hop`."""
        return (*(f"mix{i + 1}" for i in range(self.mixes)), "analyzer")

    def to_json(self) -> dict[str, object]:
        return {
            "wire_bytes_per_user": self.per_user,
            "wire_bytes_per_hop": dict(zip(self.hop_names(), self.per_hop, strict=True)),
            "ownership_proofs": self.proven,
        }

    def describe(self) -> str:
        """e.g. ``741 bytes (mix1 741, mix2 693, mix3 357, analyzer 21)``."""
        hops = ", ".join(f"{n} {b:,}" for n, b in zip(self.hop_names(), self.per_hop, strict=True))
        return f"{self.per_user:,} bytes ({hops})"


def wire_cost(messages: int, payload_length: int, mixes: int, *, proven: bool = False) -> WireCost:
    """The :class:`WireCost` of ``messages`` payloads of ``payload_length`` bytes through a
    chain of ``mixes`` mixes (``proven``: with ownership proofs).

    :raises ValueError, TypeError: a count is not a positive int (``payload_length`` may not
        be 0 either).
    """
    for name, value in (("messages", messages), ("payload_length", payload_length),
                        ("mixes", mixes)):  # fmt: skip
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be int, not {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    per_hop = [submission_length(payload_length, mixes, messages, proven=proven)]
    per_hop += [
        messages * onion_length(payload_length, mixes - hop, proven=proven)
        for hop in range(1, mixes + 1)
    ]
    return WireCost(mixes, proven, tuple(per_hop))
