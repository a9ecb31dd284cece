"""Argument checks shared by the cores: one place for the contract, one wording for errors."""

from __future__ import annotations

import numpy as np

from cloaknet.errors import ParameterError

__all__ = ["check_int"]


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an ``int`` if it is an integer (Python or numpy; not ``bool``) that is at
    least ``minimum``.

    :raises ParameterError: naming ``name``, otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ParameterError(f"{name} must be an integer, got {value!r}")
    result = int(value)
    if result < minimum:
        raise ParameterError(f"{name} must be >= {minimum}, got {result}")
    return result
