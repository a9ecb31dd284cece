"""The application's payload validator over many payloads at once (pure).

A :data:`~mixnet.blame.PayloadValidator` checks one payload. The last mix checks every payload
of its batch before it forwards anything; a validator that can also check a whole buffer of
equal-width payloads (a :class:`RowValidator`, e.g. cloaknet's shares: one numpy comparison)
is given each chunk's :class:`~mixnet.core.items.Items` as one array instead of a call per
payload. Both must give the same answer: :func:`all_valid` is ``all(validator(p) ...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from mixnet.core.items import Items, Rows

__all__ = ["RowValidator", "all_valid"]


@runtime_checkable
class RowValidator(Protocol):
    """A payload validator that also checks many payloads of one width at once."""

    def __call__(self, payload: bytes, /) -> bool:
        """Whether ``payload`` is valid (the :data:`~mixnet.blame.PayloadValidator`)."""
        ...

    def valid_rows(self, rows: Rows, /) -> bool:
        """Whether every row of ``rows`` (a ``(count, width)`` ``uint8`` array, one payload
        per row) is valid: exactly ``all(self(bytes(row)) for row in rows)``."""
        ...


def all_valid(validator: Callable[[bytes], bool], payloads: Sequence[bytes]) -> bool:
    """Whether ``validator`` accepts every payload of ``payloads``: one
    :meth:`RowValidator.valid_rows` call when the validator has it and ``payloads`` is
    :class:`~mixnet.core.items.Items`, else one call per payload."""
    if isinstance(payloads, Items) and isinstance(validator, RowValidator):
        return bool(validator.valid_rows(payloads.array()))
    return all(validator(payload) for payload in payloads)
