"""The last mix's share validator: one payload at a time and a chunk's rows at once agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cloaknet.params import share_width
from cloaknet.validator import ShareValidator
from mixnet.core.items import Items
from mixnet.core.validate import RowValidator, all_valid


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 2**80),
    st.lists(st.integers(0, 2**80), max_size=40),
    st.integers(-1, 1),
)
def test_rows_agree_with_one_call_per_payload(modulus: int, values: list[int], skew: int) -> None:
    """Any modulus (shares of 1 to 11 bytes), values below and above it, and rows one byte
    too narrow or too wide (``skew``): ``valid_rows`` is ``all(valid(p) ...)``."""
    valid = ShareValidator(modulus)
    assert isinstance(valid, RowValidator)
    width = share_width(modulus) + skew
    if width < 1:
        return
    payloads = [(v % (1 << (8 * width))).to_bytes(width, "big") for v in values]
    rows = np.frombuffer(b"".join(payloads), dtype=np.uint8).reshape(len(payloads), width)
    expected = all(valid(p) for p in payloads)
    assert valid.valid_rows(rows) is expected
    assert all_valid(valid, Items(rows)) is expected
    assert all_valid(valid, payloads) is expected


def test_the_edges_of_the_modulus() -> None:
    valid = ShareValidator(1000)  # 2 bytes
    below, at = (999).to_bytes(2, "big"), (1000).to_bytes(2, "big")
    assert valid(below) and not valid(at) and not valid(b"\x00")
    rows = np.frombuffer(below * 3 + at, dtype=np.uint8).reshape(4, 2)
    assert valid.valid_rows(rows[:3]) and not valid.valid_rows(rows)
    assert valid.valid_rows(rows[:0])  # no payload: nothing invalid
    full = ShareValidator(1 << 64)  # 8 bytes, every value below it
    assert full.valid_rows(np.full((5, 8), 255, dtype=np.uint8))
    with pytest.raises(ValueError):
        ShareValidator(0)


def test_a_plain_function_is_called_per_payload() -> None:
    """A validator without ``valid_rows`` (e.g. the vector protocol's) is called for each."""
    seen: list[bytes] = []

    def valid(payload: bytes) -> bool:
        seen.append(payload)
        return payload != b"bad"

    items = Items.of([b"one", b"two", b"bad"])
    assert not isinstance(valid, RowValidator)
    assert all_valid(valid, items) is False and seen == [b"one", b"two", b"bad"]
