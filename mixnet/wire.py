"""The msgpack frame codec and typed field accessors shared by every mixnet endpoint.

A frame is a msgpack map with ``str`` keys holding at least ``"v"`` (the protocol version,
:data:`WIRE_VERSION`) and ``"type"`` (a ``str``). Values may be nil, bool, int, float, str,
bin, arrays and maps (with ``str`` keys) of those; msgpack extension types (timestamps
included) are refused. This module defines no protocol frame types except the generic
``"error"`` frame (:func:`error_frame`, :func:`raise_for_error`).

:func:`decode_frame` treats its input as hostile: the size is checked before parsing, each
frame gets a fresh bounded ``Unpacker``, and every failure is a :class:`MixnetError`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, cast

import msgpack

from mixnet.errors import (
    BadLength,
    FrameTooLarge,
    MalformedFrame,
    MixnetError,
    UnsupportedVersion,
    WrongCount,
    error_from_code,
)

#: Version of the frame format; a frame with another ``"v"`` is refused.
WIRE_VERSION = 2
#: The largest round id (and count) a frame carries: a msgpack int fits 64 bits signed.
ROUND_ID_MAX = (1 << 63) - 1
#: Longest node name in a frame, in characters.
MAX_NAME_LENGTH = 64
#: Type of the generic error frame.
ERROR_TYPE = "error"

_ERROR_CODE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_MAX_ERROR_CODE_LENGTH = 64
_SCALAR_TYPES = (type(None), bool, int, float, str, bytes)
_CONTAINER_TYPES = (list, dict)
#: Every type a decoded value may have (:func:`_check_value`).
_ALLOWED_TYPES = frozenset(_SCALAR_TYPES + _CONTAINER_TYPES)


# --------------------------------------------------------------------------- encoding


def encode_frame(frame: Mapping[str, object]) -> bytes:
    """Encode ``frame`` as a msgpack map (bin type for ``bytes``) with ``"v"`` set.

    ``frame`` must have ``str`` keys and a ``str`` ``"type"``; a ``"v"`` key in ``frame`` is
    replaced by :data:`WIRE_VERSION`. Raises ``TypeError`` if ``frame`` is not such a
    mapping, and ``ValueError`` if a value cannot be encoded (an unsupported type, an int
    outside msgpack's range, ...).
    """
    if not isinstance(frame, Mapping):
        raise TypeError(f"frame must be a mapping, not {type(frame).__name__}")
    for key in frame:
        if not isinstance(key, str):
            raise TypeError(f"frame keys must be str, not {type(key).__name__}")
    if not isinstance(frame.get("type"), str):
        raise TypeError('frame must have a str "type"')
    body = {**frame, "v": WIRE_VERSION}
    try:
        packed: bytes = msgpack.packb(body, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"frame of type {frame['type']!r} cannot be encoded: {exc}") from None
    return packed


# --------------------------------------------------------------------------- decoding


def _reject_ext(code: int, data: bytes) -> object:
    """``ext_hook`` for the unpacker: extension types are never allowed."""
    raise MalformedFrame(f"msgpack extension type {code} is not allowed")


def _check_value(value: object) -> None:
    """Raise :class:`MalformedFrame` unless ``value`` decoded to an allowed type.

    Containers were already checked by the hooks that built them, so only the type of the
    value itself is looked at (this catches e.g. msgpack timestamps, which bypass
    ``ext_hook``).
    """
    if type(value) not in _SCALAR_TYPES and type(value) not in _CONTAINER_TYPES:
        raise MalformedFrame(f"value of type {type(value).__name__} is not allowed")


def _build_list(items: list[Any]) -> list[Any]:
    """``list_hook``: check every element of a decoded array (their types at once; the
    element at fault is looked for only when one is not allowed)."""
    if not _ALLOWED_TYPES.issuperset(map(type, items)):
        for item in items:
            _check_value(item)
    return items


def _build_map(pairs: list[tuple[Any, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: build a map, refusing non-str and duplicate keys."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if not isinstance(key, str):
            raise MalformedFrame("map keys must be str")
        if key in result:
            raise MalformedFrame(f"duplicate map key {key[:40]!r}")
        _check_value(value)
        result[key] = value
    return result


def _new_unpacker(max_size: int) -> Any:
    """Return a fresh msgpack ``Unpacker`` bounded by ``max_size`` bytes."""
    return msgpack.Unpacker(
        None,
        raw=False,
        strict_map_key=True,
        use_list=True,
        ext_hook=_reject_ext,
        list_hook=_build_list,
        object_pairs_hook=_build_map,
        max_buffer_size=max_size,
        # Every string/bin byte, array element and map entry (key + value) takes at least
        # one, one and two bytes of input, so these never refuse a frame that fits.
        max_str_len=max_size,
        max_bin_len=max_size,
        max_array_len=max_size,
        max_map_len=max(1, max_size // 2),
        max_ext_len=max_size,
    )


def decode_frame(data: bytes, *, max_size: int) -> dict[str, object]:
    """Decode one frame from ``data`` (untrusted input) and return it as a dict.

    Raises, before any parsing, :class:`FrameTooLarge` if ``len(data) > max_size`` and
    :class:`MalformedFrame` if ``data`` is not ``bytes``/``bytearray`` (e.g. a websocket
    text message). Then raises :class:`MalformedFrame` for invalid or truncated msgpack,
    trailing bytes, a top level that is not a map, non-str or duplicate map keys, any
    extension type, a missing or non-int ``"v"`` or a missing or non-str ``"type"``; and
    :class:`UnsupportedVersion` if ``"v"`` is not :data:`WIRE_VERSION`. Never raises any
    other exception for any input bytes. ``max_size`` must be a positive int (else
    ``ValueError``/``TypeError``).
    """
    if not isinstance(max_size, int) or isinstance(max_size, bool):
        raise TypeError("max_size must be int")
    if max_size < 1:
        raise ValueError("max_size must be positive")
    if not isinstance(data, (bytes, bytearray)):
        raise MalformedFrame(f"frame must be binary, not {type(data).__name__}")
    if len(data) > max_size:
        raise FrameTooLarge(f"frame of {len(data)} bytes exceeds the limit of {max_size}")
    if not data:
        raise MalformedFrame("empty frame")

    unpacker = _new_unpacker(max_size)
    try:
        unpacker.feed(data)
        obj = unpacker.unpack()
        consumed = unpacker.tell()
    except MixnetError:
        raise
    except msgpack.OutOfData:
        raise MalformedFrame("truncated msgpack frame") from None
    except (msgpack.UnpackException, ValueError, TypeError, OverflowError) as exc:
        raise MalformedFrame(f"invalid msgpack: {str(exc) or type(exc).__name__}") from None
    if consumed != len(data):
        raise MalformedFrame(f"{len(data) - consumed} trailing bytes after the frame")
    if not isinstance(obj, dict):
        raise MalformedFrame(f"frame must be a map, not {type(obj).__name__}")
    frame: dict[str, object] = obj

    if "v" not in frame:
        raise MalformedFrame("missing field 'v'")
    version = frame["v"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise MalformedFrame("field 'v' must be int")
    if version != WIRE_VERSION:
        raise UnsupportedVersion(
            f"protocol version {version} is not supported (want {WIRE_VERSION})"
        )
    if "type" not in frame:
        raise MalformedFrame("missing field 'type'")
    if not isinstance(frame["type"], str):
        raise MalformedFrame("field 'type' must be str")
    return frame


# --------------------------------------------------------------------------- accessors


def _field(frame: Mapping[str, object], key: str) -> object:
    """Return ``frame[key]``; :class:`MalformedFrame` naming ``key`` if it is missing."""
    try:
        return frame[key]
    except KeyError:
        raise MalformedFrame(f"missing field {key!r}") from None


def get_str(frame: Mapping[str, object], key: str, *, max_length: int | None = None) -> str:
    """Return the str field ``key``.

    Raises :class:`MalformedFrame` naming the field if it is missing, not a str, or longer
    than ``max_length`` characters.
    """
    value = _field(frame, key)
    if not isinstance(value, str):
        raise MalformedFrame(f"field {key!r} must be str")
    if max_length is not None and len(value) > max_length:
        raise MalformedFrame(f"field {key!r} is longer than {max_length} characters")
    return value


def get_int(
    frame: Mapping[str, object],
    key: str,
    *,
    min_value: int | None = None,
    max_value: int | None = None,
    default: int | None = None,
) -> int:
    """Return the int field ``key`` (a bool is not an int here); ``default``, if given, when
    the field is absent.

    Raises :class:`MalformedFrame` naming the field if it is missing (and has no
    ``default``), not an int, or outside ``[min_value, max_value]`` (each bound optional,
    inclusive).
    """
    if default is not None and key not in frame:
        return default
    value = _field(frame, key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedFrame(f"field {key!r} must be int")
    if min_value is not None and value < min_value:
        raise MalformedFrame(f"field {key!r} must be >= {min_value}")
    if max_value is not None and value > max_value:
        raise MalformedFrame(f"field {key!r} must be <= {max_value}")
    return value


def get_bool(frame: Mapping[str, object], key: str) -> bool:
    """Return the bool field ``key``.

    Raises :class:`MalformedFrame` naming the field if it is missing or not a bool (an int
    is not a bool here).
    """
    value = _field(frame, key)
    if not isinstance(value, bool):
        raise MalformedFrame(f"field {key!r} must be bool")
    return value


def get_float(frame: Mapping[str, object], key: str) -> float:
    """Return the number field ``key`` as a float (ints accepted, bools and non-finite
    values refused with :class:`MalformedFrame` naming the field)."""
    if key not in frame:
        raise MalformedFrame(f"missing field {key!r}")
    value = frame[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedFrame(f"field {key!r} must be a number")
    result = float(value)
    if not math.isfinite(result):
        raise MalformedFrame(f"field {key!r} must be finite")
    return result


def get_bytes(frame: Mapping[str, object], key: str, *, length: int | None = None) -> bytes:
    """Return the bytes field ``key``.

    Raises :class:`MalformedFrame` naming the field if it is missing or not bytes (msgpack
    bin), and :class:`BadLength` naming it if ``length`` is given and differs.
    """
    value = _field(frame, key)
    if not isinstance(value, bytes):
        raise MalformedFrame(f"field {key!r} must be bytes")
    if length is not None and len(value) != length:
        raise BadLength(f"field {key!r} must be {length} bytes, got {len(value)}")
    return value


def _get_list(
    frame: Mapping[str, object], key: str, count: int | None, max_count: int | None
) -> list[object]:
    """Return the list field ``key`` after checking its number of items."""
    value = _field(frame, key)
    if not isinstance(value, list):
        raise MalformedFrame(f"field {key!r} must be a list")
    if count is not None and len(value) != count:
        raise WrongCount(f"field {key!r} must hold {count} items, got {len(value)}")
    if max_count is not None and len(value) > max_count:
        raise WrongCount(f"field {key!r} holds {len(value)} items, more than {max_count}")
    return value


def get_bytes_list(
    frame: Mapping[str, object],
    key: str,
    *,
    count: int | None = None,
    item_length: int | None = None,
    max_count: int | None = None,
) -> list[bytes]:
    """Return the field ``key`` as a list of bytes.

    Raises :class:`MalformedFrame` naming the field if it is missing, not a list, or has an
    item that is not bytes; :class:`WrongCount` if it does not hold exactly ``count`` items
    or holds more than ``max_count``; :class:`BadLength` (naming field and index) if an item
    is not ``item_length`` bytes. Counts are checked before any item.
    """
    items = _get_list(frame, key, count, max_count)
    if set(map(type, items)) <= {bytes}:
        blobs = cast("list[bytes]", items)
        if item_length is None or set(map(len, blobs)) <= {item_length}:
            return blobs
    for index, item in enumerate(items):  # find the item at fault
        if not isinstance(item, bytes):
            raise MalformedFrame(f"field {key!r} item {index} must be bytes")
        if item_length is not None and len(item) != item_length:
            raise BadLength(
                f"field {key!r} item {index} must be {item_length} bytes, got {len(item)}"
            )
    return items  # type: ignore[return-value]  # every item checked above


def get_str_list(
    frame: Mapping[str, object],
    key: str,
    *,
    count: int | None = None,
    max_count: int | None = None,
) -> list[str]:
    """Return the field ``key`` as a list of str.

    Raises :class:`MalformedFrame` naming the field if it is missing, not a list, or has an
    item that is not a str; :class:`WrongCount` if it does not hold exactly ``count`` items
    or holds more than ``max_count``.
    """
    items = _get_list(frame, key, count, max_count)
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise MalformedFrame(f"field {key!r} item {index} must be str")
    return items  # type: ignore[return-value]  # every item checked above


# --------------------------------------------------------------------------- error frames


def error_frame(err: MixnetError) -> dict[str, object]:
    """Return the frame ``{"type": "error", "code": err.code, "reason": err.reason}``."""
    if not isinstance(err, MixnetError):
        raise TypeError(f"err must be a MixnetError, not {type(err).__name__}")
    code, reason = err.as_pair()
    return {"type": ERROR_TYPE, "code": code, "reason": reason}


def error_from_frame(frame: Mapping[str, object]) -> MixnetError:
    """Turn a received error frame back into the matching :class:`MixnetError` subclass.

    An unknown but well-formed code gives a plain :class:`MixnetError` carrying that code.
    Raises :class:`MalformedFrame` if ``frame`` is not an error frame, or its ``"code"``
    is not a kebab-case str of at most 64 characters, or its ``"reason"`` is not a str.
    The reason is cleaned to one short printable line.
    """
    if frame.get("type") != ERROR_TYPE:
        raise MalformedFrame("not an error frame")
    code = get_str(frame, "code", max_length=_MAX_ERROR_CODE_LENGTH)
    if not _ERROR_CODE.fullmatch(code):
        raise MalformedFrame("field 'code' must be a kebab-case error code")
    reason = get_str(frame, "reason")
    return error_from_code(code, reason)


def raise_for_error(frame: Mapping[str, object]) -> None:
    """Raise the :class:`MixnetError` carried by ``frame`` if it is an error frame.

    Returns ``None`` for any other frame type. See :func:`error_from_frame` for how the
    error is rebuilt (a malformed error frame raises :class:`MalformedFrame`).
    """
    if frame.get("type") == ERROR_TYPE:
        raise error_from_frame(frame)
