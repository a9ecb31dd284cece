"""Typed exceptions of cloaknet. Every error the library raises on bad input derives from
:class:`CloakError`, so callers can catch one type; each subclass also derives from the
matching builtin (``ValueError``) where that is what it is."""

from __future__ import annotations

__all__ = [
    "CloakError",
    "InfeasiblePlanError",
    "InputRangeError",
    "ParameterError",
    "ShareCountError",
    "ShareError",
]


class CloakError(Exception):
    """Base class of every cloaknet error."""


class ParameterError(CloakError, ValueError):
    """Protocol or accounting parameters violate a precondition (e.g. even N, m < 4,
    epsilon <= 0, delta outside (0, 1)). The message names the parameter."""


class InputRangeError(CloakError, ValueError):
    """A user's input is non-finite or outside [0, 1] and clipping was not requested."""


class InfeasiblePlanError(CloakError):
    """The planner found no parameters meeting the requested guarantee within its search
    limits (e.g. the message cap). The message says which limit was hit."""


class ShareError(CloakError, ValueError):
    """A share is not an integer in [0, N) (or its fixed-width encoding has the wrong length)."""


class ShareCountError(CloakError, ValueError):
    """The analyzer received a number of shares other than n·m for the round's n users.
    A round with this error has no result: a wrong count never becomes a silently wrong sum."""
