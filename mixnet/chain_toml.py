"""TOML text of the chain file (:mod:`mixnet.chain`), written by :mod:`tomli_w`.

:func:`dumps` is :func:`tomli_w.dumps` made strict: whatever it returns loads back with
:mod:`tomllib` to an equal document (for the value types listed there), and whatever TOML
cannot hold is refused with ``ValueError`` instead of being written approximately or
failing later.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import tomli_w

__all__ = ["dumps", "key_text"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
#: Leaf types written exactly (besides int; ``datetime.datetime`` is a ``date``).
_SCALARS = (str, bool, float, datetime.date, datetime.time)
_MINUTE = datetime.timedelta(minutes=1)


def key_text(key: str) -> str:
    """``key`` as TOML writes it (bare when possible, else a quoted string), for field paths
    in messages."""
    return tomli_w.dumps({key: 0}).removesuffix(" = 0\n")


def _check(value: object, path: str) -> None:
    """Raise ``ValueError`` (naming ``path``) unless TOML can hold ``value`` exactly."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path or 'document'}: TOML keys must be strings, got {key!r}")
            _check(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]")
    elif isinstance(value, int) and not isinstance(value, bool):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"{path}: integer {value} does not fit TOML's 64 bits")
    elif not isinstance(value, _SCALARS):
        raise ValueError(f"{path}: cannot write a {type(value).__name__} value as TOML")
    elif isinstance(value, datetime.datetime):
        offset = value.utcoffset()
        if offset is not None and offset % _MINUTE:
            raise ValueError(f"{path}: TOML offsets are whole minutes, got {offset}")


def dumps(document: Mapping[str, Any]) -> str:
    """``document`` as TOML text, by :func:`tomli_w.dumps` (tables as ``[name]`` headers,
    nested tables as ``[name.sub]``, arrays one item per line).

    Values may be str, int (signed 64-bit), float, bool, date, naive time, datetime, and
    lists/tuples and mappings (with str keys) of those; they load back equal, except that
    tuples load as lists. Raises ``ValueError`` for anything else: an integer beyond 64 bits,
    a value of another type (``None``, bytes, ...), a key that is not a str, a string with a
    lone surrogate, a time with an offset (a datetime's offset must be whole minutes).
    """
    _check(document, "")
    text = tomli_w.dumps(document)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("strings with lone surrogates cannot be written as TOML") from None
    return text
