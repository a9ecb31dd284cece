"""Field checks of the chain file (:mod:`mixnet.chain`, which re-exports
:func:`name_problem` and :data:`NAME_PATTERN`).

Each ``*_problem`` function returns why a value is invalid, as one line, or ``None``; the
caller adds the field path. Messages use TOML's type names (:func:`type_name`: ``boolean``,
``integer``, ``string``, ...) and show values shortened (:func:`show`), so that a hostile
value cannot flood a message.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from urllib.parse import urlsplit

from mixnet.core.policy import BELOW_MIN

__all__ = [
    "NAME_PATTERN",
    "name_problem",
    "policy_type_problem",
    "show",
    "type_name",
    "url_problem",
]

#: Chain ids and node names: 1 to 64 characters from ``[A-Za-z0-9._-]``.
NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")

_INT_FIELDS = ("min_users", "max_users", "chunk_size")
_URL_EXPECTED = "expected ws:// or wss:// URL with host and port"
_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_SHOWN_VALUE_LENGTH = 60


def show(value: object) -> str:
    """``repr(value)``, shortened so that a hostile value cannot flood a message."""
    text = repr(value)
    if len(text) > _SHOWN_VALUE_LENGTH:
        text = text[: _SHOWN_VALUE_LENGTH - 3] + "..."
    return text


def type_name(value: object) -> str:
    """The TOML name of the type of ``value`` (as :mod:`tomllib` produces it)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    if isinstance(value, (datetime.date, datetime.time)):
        return "date/time"
    return type(value).__name__


def name_problem(value: object) -> str | None:
    """Why ``value`` is not a valid chain id or node name, or ``None`` if it is valid.

    Valid: a str of 1 to 64 characters from ``[A-Za-z0-9._-]`` (safe as a file name stem).
    """
    if not isinstance(value, str):
        return f"expected a string, got {type_name(value)}"
    if not NAME_PATTERN.fullmatch(value):
        return f"expected 1 to 64 characters from [A-Za-z0-9._-], got {show(value)}"
    return None


def url_problem(value: object) -> str | None:
    """Why ``value`` is not an acceptable node URL, or ``None`` if it is.

    Acceptable: ``ws://`` or ``wss://``, a host name or IP address (IPv6 in brackets), an
    explicit port in 1..65535, and at most a ``/`` path; no user info, query or fragment.
    """
    if not isinstance(value, str):
        return f"expected a string, got {type_name(value)}"
    bad = f"{_URL_EXPECTED}, got {show(value)}"
    if not value.isascii() or not value.isprintable() or any(ch.isspace() for ch in value):
        return bad
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return bad
    host = parts.hostname
    if parts.scheme not in ("ws", "wss") or not host or port is None:
        return bad
    if not 1 <= port <= 65535:
        return f"port must be in 1..65535, got {show(value)}"
    if parts.netloc.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return bad
    elif not _HOST_NAME.fullmatch(host):
        return bad
    if "@" in parts.netloc or parts.path not in ("", "/") or parts.query or parts.fragment:
        return (
            "expected only scheme, host and port (no user, path, query or fragment), "
            f"got {show(value)}"
        )
    if "?" in value or "#" in value:
        return f"expected only scheme, host and port, got {show(value)}"
    return None


def policy_type_problem(key: str, value: object) -> str | None:
    """Why ``value`` is wrong for ``[round].<key>``, or ``None``.

    Checks what :class:`~mixnet.core.policy.RoundPolicy` would report less well for a file:
    the TOML type, and a ``below_min`` other than ``"wait"`` or ``"abort"`` (shown
    shortened). Ranges are left to ``RoundPolicy``.
    """
    if key in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected an integer, got {type_name(value)}"
    elif key == "deadline_seconds":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"expected a number, got {type_name(value)}"
    elif not isinstance(value, str):
        return f"expected a string, got {type_name(value)}"
    elif value not in BELOW_MIN:
        return f'expected "wait" or "abort", got {show(value)}'
    return None
