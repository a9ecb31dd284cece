"""Tests for mixnet.wire: the msgpack frame codec, field accessors and error frames."""

from __future__ import annotations

import contextlib
import pickle

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixnet import errors
from mixnet.errors import (
    BadLength,
    FrameTooLarge,
    MalformedFrame,
    MixnetError,
    UnsupportedVersion,
    WrongCount,
)
from mixnet.wire import (
    WIRE_VERSION,
    decode_frame,
    encode_frame,
    error_frame,
    error_from_frame,
    get_bool,
    get_bytes,
    get_bytes_list,
    get_int,
    get_str,
    get_str_list,
    raise_for_error,
)

MAX = 1 << 16


def raw(obj: object) -> bytes:
    """Pack ``obj`` with msgpack directly, bypassing encode_frame's checks."""
    packed: bytes = msgpack.packb(obj, use_bin_type=True)
    return packed


# ------------------------------------------------------------------ codec


def test_round_trip() -> None:
    frame = {
        "type": "test",
        "n": 3,
        "big": (1 << 64) - 1,
        "neg": -5,
        "f": 0.5,
        "ok": True,
        "none": None,
        "blob": b"\x00\xff",
        "items": [b"a", b"b"],
        "nested": {"k": ["x", 1]},
    }
    decoded = decode_frame(encode_frame(frame), max_size=MAX)
    assert decoded == {**frame, "v": WIRE_VERSION}


def test_encode_sets_version() -> None:
    decoded = decode_frame(encode_frame({"type": "t", "v": 99}), max_size=MAX)
    assert decoded["v"] == WIRE_VERSION


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        ({"no": "type"}, TypeError),
        ({"type": 1}, TypeError),
        ({1: 2, "type": "t"}, TypeError),
        (["type", "t"], TypeError),
        ({"type": "t", "x": object()}, ValueError),
        ({"type": "t", "x": 1 << 64}, ValueError),
    ],
)
def test_encode_rejects_bad_frames(frame: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        encode_frame(frame)  # type: ignore[arg-type]


def test_oversize_is_refused_before_parsing() -> None:
    data = encode_frame({"type": "t", "pad": b"x" * 100})
    assert decode_frame(data, max_size=len(data))["type"] == "t"
    with pytest.raises(FrameTooLarge) as info:
        decode_frame(data, max_size=len(data) - 1)
    assert info.value.code == "frame-too-large"
    # Garbage that is too large is still reported as too large, not as malformed.
    with pytest.raises(FrameTooLarge):
        decode_frame(b"\xc1" * 10, max_size=9)


def test_declared_length_beyond_limit_is_malformed() -> None:
    # A bin header claiming 1 MiB inside a small frame must not allocate or parse it.
    data = b"\x82\xa1v\x01\xa4type\xc6\x00\x10\x00\x00"
    with pytest.raises(MalformedFrame):
        decode_frame(data, max_size=64)


V = WIRE_VERSION
VALID = raw({"v": V, "type": "t"})


@pytest.mark.parametrize(
    ("data", "error", "fragment"),
    [
        (b"", MalformedFrame, "empty"),
        (b"\xc1", MalformedFrame, "invalid msgpack"),
        (b"\xff\x00garbage", MalformedFrame, ""),
        (VALID[:-1], MalformedFrame, "truncated"),
        (VALID + b"\xc0", MalformedFrame, "trailing"),
        (VALID + VALID, MalformedFrame, "trailing"),
        (raw([1, 2]), MalformedFrame, "must be a map"),
        (raw("type"), MalformedFrame, "must be a map"),
        (raw({"v": V, "type": "t", "x": msgpack.ExtType(3, b"ab")}), MalformedFrame, "extension"),
        (raw({"v": V, "type": "t", "x": [msgpack.Timestamp(1, 0)]}), MalformedFrame, "Timestamp"),
        (raw(msgpack.ExtType(1, b"")), MalformedFrame, "extension"),
        (raw({"v": 1, "type": "t"}), UnsupportedVersion, "version 1"),
        (raw({"v": 0, "type": "t"}), UnsupportedVersion, ""),
        (raw({"type": "t"}), MalformedFrame, "'v'"),
        (raw({"v": True, "type": "t"}), MalformedFrame, "'v'"),
        (raw({"v": "1", "type": "t"}), MalformedFrame, "'v'"),
        (raw({"v": WIRE_VERSION}), MalformedFrame, "'type'"),
        (raw({"v": WIRE_VERSION, "type": b"t"}), MalformedFrame, "'type'"),
        (raw({"v": WIRE_VERSION, "type": "t", 7: 1}), MalformedFrame, ""),
        (raw({"v": WIRE_VERSION, "type": "t", b"k": 1}), MalformedFrame, "keys must be str"),
        (raw({"v": WIRE_VERSION, "type": "t", "m": {b"k": 1}}), MalformedFrame, "keys must be str"),
        (b"\x83\xa1v\x01\xa4type\xa1t\xa1v\x01", MalformedFrame, "duplicate"),
        (b"\x82\xa1v\x01\xa4type\xa2\xff\xfe", MalformedFrame, "invalid msgpack"),
        (b"\x91" * 5000 + b"\xc0", MalformedFrame, ""),
    ],
)
def test_decode_rejects(data: bytes, error: type[MixnetError], fragment: str) -> None:
    with pytest.raises(error) as info:
        decode_frame(data, max_size=MAX)
    assert type(info.value) is error
    assert fragment in str(info.value)


def test_text_message_is_malformed() -> None:
    with pytest.raises(MalformedFrame, match="binary"):
        decode_frame('{"type": "t"}', max_size=MAX)  # type: ignore[arg-type]


def test_max_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        decode_frame(VALID, max_size=0)
    with pytest.raises(TypeError):
        decode_frame(VALID, max_size=True)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=300))
def test_decode_arbitrary_bytes_only_raises_mixnet_errors(data: bytes) -> None:
    try:
        frame = decode_frame(data, max_size=256)
    except MixnetError:
        return
    assert frame["v"] == WIRE_VERSION
    assert isinstance(frame["type"], str)


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=10)
    | st.binary(max_size=10),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=5) | st.binary(max_size=3), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    value=st.dictionaries(st.text(max_size=5), msgpack_values, max_size=5),
    cut=st.integers(min_value=0, max_value=400),
    flip=st.integers(min_value=0, max_value=400),
)
def test_decode_mutated_frames_only_raises_mixnet_errors(
    value: dict[str, object], cut: int, flip: int
) -> None:
    # Start from structurally plausible msgpack, then truncate and flip a byte.
    data = bytearray(raw({"v": WIRE_VERSION, "type": "t", **value}))
    data = data[: max(1, len(data) - cut % len(data))]
    data[flip % len(data)] ^= 0x5A
    with contextlib.suppress(MixnetError):
        decode_frame(bytes(data), max_size=512)


# ------------------------------------------------------------------ accessors


FRAME: dict[str, object] = {
    "type": "t",
    "v": WIRE_VERSION,
    "name": "mix-a",
    "n": 5,
    "flag": True,
    "blob": b"12345678",
    "blobs": [b"aa", b"bb", b"cc"],
    "names": ["a", "b"],
    "mixed": [b"aa", "bb"],
}


def test_accessors_return_typed_values() -> None:
    assert get_str(FRAME, "name") == "mix-a"
    assert get_int(FRAME, "n", min_value=5, max_value=5) == 5
    assert get_bytes(FRAME, "blob", length=8) == b"12345678"
    assert get_bytes_list(FRAME, "blobs", count=3, item_length=2, max_count=3) == [
        b"aa",
        b"bb",
        b"cc",
    ]
    assert get_str_list(FRAME, "names", count=2) == ["a", "b"]
    assert get_int(FRAME, "missing", default=7) == 7  # absent: the default, unchecked
    assert get_int(FRAME, "n", min_value=5, default=7) == 5  # present: read as ever
    assert get_bool({"b": True}, "b") is True and get_bool({"b": False}, "b") is False


@pytest.mark.parametrize(
    ("call", "error", "field"),
    [
        (lambda: get_str(FRAME, "missing"), MalformedFrame, "'missing'"),
        (lambda: get_str(FRAME, "n"), MalformedFrame, "'n'"),
        (lambda: get_str(FRAME, "name", max_length=3), MalformedFrame, "'name'"),
        (lambda: get_int(FRAME, "flag"), MalformedFrame, "'flag'"),
        (lambda: get_int(FRAME, "name"), MalformedFrame, "'name'"),
        (lambda: get_int(FRAME, "n", min_value=6), MalformedFrame, "'n'"),
        (lambda: get_int(FRAME, "n", max_value=4), MalformedFrame, "'n'"),
        (lambda: get_int(FRAME, "n", max_value=4, default=1), MalformedFrame, "'n'"),
        (lambda: get_bool(FRAME, "n"), MalformedFrame, "'n'"),
        (lambda: get_bool(FRAME, "missing"), MalformedFrame, "'missing'"),
        (lambda: get_bytes(FRAME, "name"), MalformedFrame, "'name'"),
        (lambda: get_bytes(FRAME, "blob", length=9), BadLength, "'blob'"),
        (lambda: get_bytes_list(FRAME, "blob"), MalformedFrame, "'blob'"),
        (lambda: get_bytes_list(FRAME, "mixed"), MalformedFrame, "'mixed' item 1"),
        (lambda: get_bytes_list(FRAME, "blobs", count=2), WrongCount, "'blobs'"),
        (lambda: get_bytes_list(FRAME, "blobs", max_count=2), WrongCount, "'blobs'"),
        (lambda: get_bytes_list(FRAME, "blobs", item_length=3), BadLength, "'blobs' item 0"),
        (lambda: get_str_list(FRAME, "mixed"), MalformedFrame, "'mixed' item 0"),
        (lambda: get_str_list(FRAME, "names", count=3), WrongCount, "'names'"),
    ],
)
def test_accessor_errors_name_the_field(call: object, error: type[MixnetError], field: str) -> None:
    with pytest.raises(error) as info:
        call()  # type: ignore[operator]
    assert field in str(info.value)


# ------------------------------------------------------------------ error frames


@pytest.mark.parametrize("cls", list(errors.ERRORS_BY_CODE.values()))
def test_error_frame_round_trip(cls: type[MixnetError]) -> None:
    sent = cls("something went wrong")
    frame = decode_frame(encode_frame(error_frame(sent)), max_size=MAX)
    reason = "something went wrong"
    assert frame == {"v": WIRE_VERSION, "type": "error", "code": cls.code, "reason": reason}
    with pytest.raises(cls) as info:
        raise_for_error(frame)
    assert type(info.value) is cls
    assert info.value.as_pair() == sent.as_pair()


def test_unknown_error_code_gives_base_error() -> None:
    frame = {"type": "error", "code": "new-fancy-code", "reason": "later version"}
    err = error_from_frame(frame)
    assert type(err) is MixnetError
    assert err.code == "new-fancy-code"
    assert err.reason == "later version"


def test_raise_for_error_ignores_other_frames() -> None:
    raise_for_error({"type": "ack", "v": WIRE_VERSION})


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "error", "reason": "no code"},
        {"type": "error", "code": 5, "reason": "x"},
        {"type": "error", "code": "Not Kebab", "reason": "x"},
        {"type": "error", "code": "a" * 65, "reason": "x"},
        {"type": "error", "code": "bad-length"},
        {"type": "error", "code": "bad-length", "reason": b"x"},
    ],
)
def test_malformed_error_frames(frame: dict[str, object]) -> None:
    with pytest.raises(MalformedFrame):
        raise_for_error(frame)


def test_received_reasons_are_cleaned() -> None:
    frame = {"type": "error", "code": "bad-length", "reason": "line\nforged log line\x1b[31m" * 50}
    err = error_from_frame(frame)
    assert isinstance(err, BadLength)
    assert "\n" not in err.reason
    assert "\x1b" not in err.reason
    assert len(err.reason) <= errors.MAX_REASON_LENGTH


def test_errors_survive_pickling() -> None:
    for err in (BadLength("short"), MixnetError("future", code="some-new-code")):
        copy = pickle.loads(pickle.dumps(err))
        assert type(copy) is type(err)
        assert copy.as_pair() == err.as_pair()
