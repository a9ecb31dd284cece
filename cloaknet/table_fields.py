"""The field readers shared by the chain file's ``[protocol]`` forms, and their error type.

:class:`ChainFileError` is the one error every problem with a chain file becomes; the helpers
read one TOML value each (an integer, a number, an exact fraction, a modulus written as a
decimal string) and raise it naming the field's path. :mod:`cloaknet.protocol_table` (the
scalar protocols) and :mod:`cloaknet.vector_table` (vector sums) both use them, so neither
imports the other's internals.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from cloaknet.errors import CloakError

__all__ = [
    "ChainFileError",
    "check_users",
    "fraction_field",
    "int_field",
    "modulus_field",
    "number_field",
    "plan_request",
    "required",
    "show",
    "type_name",
]

_DIGITS = re.compile(r"[0-9]+")
_FRACTION = re.compile(r"([0-9]+)(?:/([0-9]+))?")
_SHOWN_VALUE_LENGTH = 60


class ChainFileError(CloakError, ValueError):
    """A chain file cannot be read, written or used by cloaknet.

    The message is one line ``"<source>: <field path>: <problem>"`` (unknown parts left
    out), e.g. ``chain.toml: protocol.noise_scale: expected an exact fraction string like
    "208333/1", got float``. Errors of the generic chain (:class:`~mixnet.chain.ChainConfigError`)
    and of the planner or :class:`~cloaknet.params.CloakParams` are wrapped into this type,
    keeping their reason. The parts are also available as :attr:`source`, :attr:`field`
    and :attr:`problem`.
    """

    def __init__(
        self, problem: str, *, source: str | None = None, field: str | None = None
    ) -> None:
        self.source = source
        self.field = field
        self.problem = _one_line(problem)
        super().__init__(
            _one_line(": ".join(part for part in (source, field, self.problem) if part))
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle/copy with :attr:`source`, :attr:`field` and :attr:`problem` kept."""
        return (_rebuild_error, (self.problem, self.source, self.field))


def _rebuild_error(problem: str, source: str | None, field: str | None) -> ChainFileError:
    """Unpickling helper of :class:`ChainFileError`."""
    return ChainFileError(problem, source=source, field=field)


def _one_line(text: str) -> str:
    """``text`` with every non-printable character (newlines included) made a space."""
    return "".join(char if char.isprintable() else " " for char in text).strip()


def show(value: object) -> str:
    """``repr(value)``, shortened for messages."""
    text = repr(value)
    if len(text) > _SHOWN_VALUE_LENGTH:
        text = text[: _SHOWN_VALUE_LENGTH - 3] + "..."
    return text


def type_name(value: object) -> str:
    """The TOML name of ``value``'s type."""
    names = {bool: "boolean", int: "integer", float: "float", str: "string", dict: "table"}
    return names.get(type(value), type(value).__name__)


def int_field(value: object, path: str) -> int:
    """``value`` if it is an int (not a bool); else :class:`ChainFileError` naming ``path``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChainFileError(f"expected an integer, got {type_name(value)}", field=path)
    return value


def number_field(value: object, path: str, *, kind: str) -> float:
    """``value`` as a float if it is an int or float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ChainFileError(f"expected a number, got {kind}", field=path)
    return float(value)


def required(table: Mapping[str, Any], key: str, path: str) -> Any:
    """``table[key]``; :class:`ChainFileError` naming ``path.key`` if missing."""
    if key not in table:
        raise ChainFileError("missing", field=f"{path}.{key}")
    return table[key]


def check_users(users: int, min_users: int, *, field: str) -> None:
    """:class:`ChainFileError` at ``field`` if privacy was planned for more users than
    ``min_users`` (a round may close with that few)."""
    if users > min_users:
        raise ChainFileError(
            f"privacy is planned for {users} users, but rounds may close with "
            f"[round].min_users = {min_users}; must be <= {min_users}",
            field=field,
        )


def modulus_field(value: object, path: str = "protocol.modulus") -> int:
    """A modulus field (default ``protocol.modulus``): a decimal digit string or an int."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ChainFileError(
            f"expected a decimal string (or an integer), got {type_name(value)}",
            field=path,
        )
    if isinstance(value, int):
        return value
    if not _DIGITS.fullmatch(value):
        raise ChainFileError(
            f"expected a decimal string of digits, got {show(value)}", field=path
        )
    try:
        return int(value)
    except ValueError:  # beyond the interpreter's limit on digits
        raise ChainFileError(f"too many digits ({len(value)})", field=path) from None


def fraction_field(value: object, path: str) -> Fraction:
    """An exact rational from a ``"num/den"`` or ``"num"`` string or an int; floats refused."""
    if isinstance(value, float):
        raise ChainFileError(
            'expected an exact fraction string like "208333/1", got float (inexact)', field=path
        )
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ChainFileError(
            f'expected an exact fraction string like "208333/1", got {type_name(value)}',
            field=path,
        )
    if isinstance(value, int):
        return Fraction(value)
    match = _FRACTION.fullmatch(value)
    if match is None:
        raise ChainFileError(
            f'expected an exact fraction string like "208333/1", got {show(value)}', field=path
        )
    try:
        numerator = int(match.group(1))
        denominator = int(match.group(2)) if match.group(2) is not None else 1
        return Fraction(numerator, denominator)
    except ZeroDivisionError:
        raise ChainFileError(f"zero denominator in {show(value)}", field=path) from None
    except ValueError:  # beyond the interpreter's limit on digits
        raise ChainFileError(f"too many digits in {show(value)}", field=path) from None


def plan_request(request: object, allowed: Sequence[str], *, example: str) -> Mapping[str, Any]:
    """``[protocol].plan`` as given: a table whose keys are all in ``allowed`` and never
    ``max_users`` (a plan's ``max_users`` is always ``[round].max_users``).

    :raises ChainFileError: not a table (the message shows ``example``, e.g.
        ``"{ epsilon = 1.0, delta = 1e-6 }"``), ``max_users`` or another key not allowed
        (field ``protocol.plan[.key]``).
    """
    if not isinstance(request, Mapping):
        raise ChainFileError(
            f"expected a table like {example}, got {type_name(request)}", field="protocol.plan"
        )
    for key in request:
        if key == "max_users":
            raise ChainFileError(
                "not allowed: the plan's max_users is always [round].max_users",
                field="protocol.plan.max_users",
            )
        if key not in allowed:
            raise ChainFileError(
                f"unknown key (allowed: {', '.join(allowed)})", field=f"protocol.plan.{key}"
            )
    return request
