"""ItemIndex and PairIndex: the trace's lookups, against a scan."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixnet.core import item_index
from mixnet.core.item_index import ItemIndex, PairIndex
from mixnet.core.items import Items
from mixnet.errors import InternalError

#: A small alphabet of items, so that repeats (and items shared by both sides) are common.
ITEMS = st.sampled_from([bytes([b]) * 3 for b in range(12)])


def _scan(
    inputs: dict[int, Sequence[bytes]], outputs: dict[int, Sequence[bytes]]
) -> list[tuple[bytes, bytes]]:
    return [
        pair
        for index in sorted(outputs)
        for pair in zip(inputs.get(index, ()), outputs[index], strict=True)
    ]


@st.composite
def rounds(draw: st.DrawFn) -> tuple[dict[int, Sequence[bytes]], dict[int, Sequence[bytes]]]:
    """Chunks (indices in any order, some empty) of equal-length input and output lists;
    each chunk held as a tuple or as :class:`Items`, as a mix holds them."""
    inputs: dict[int, Sequence[bytes]] = {}
    outputs: dict[int, Sequence[bytes]] = {}
    for index in draw(st.lists(st.integers(0, 50), unique=True, max_size=6)):
        pairs = draw(st.lists(st.tuples(ITEMS, ITEMS), max_size=8))
        ins, outs = [p[0] for p in pairs], [p[1] for p in pairs]
        compact = draw(st.booleans())
        inputs[index] = Items.of(ins, width=3) if compact else tuple(ins)
        outputs[index] = Items.of(outs, width=3) if compact else tuple(outs)
    return inputs, outputs


@settings(max_examples=300, deadline=None)
@given(rounds(), st.lists(ITEMS, max_size=8))
def test_lookups_match_a_scan(
    chunks: tuple[dict[int, Sequence[bytes]], dict[int, Sequence[bytes]]], wanted: list[bytes]
) -> None:
    inputs, outputs = chunks
    pairs = _scan(inputs, outputs)
    index = PairIndex(inputs, outputs)
    assert len(index) == len(pairs)
    wanted_set = set(wanted)
    # the last pair in chunk order wins, as in the dict comprehensions the index replaced
    assert index.inputs_of(wanted) == {o: i for i, o in pairs if o in wanted_set}
    assert index.outputs_of(wanted) == {i: o for i, o in pairs if i in wanted_set}
    # asked again (the sides are built once), and with nothing
    assert index.outputs_of(wanted_set) == {i: o for i, o in pairs if i in wanted_set}
    assert index.inputs_of(()) == {} and index.outputs_of([]) == {}


def test_a_chunk_without_inputs_has_no_pairs() -> None:
    index = PairIndex({}, {3: ()})
    assert len(index) == 0 and index.inputs_of([b"x"]) == {}


def test_inputs_and_outputs_of_different_lengths_are_refused() -> None:
    with pytest.raises(InternalError, match="chunk 2 has 1 inputs for 2 outputs"):
        PairIndex({2: (b"a",)}, {2: (b"b", b"c")})


def test_a_large_round_is_looked_up_by_position() -> None:
    """Many chunks of onion-like items: each wanted item found in the right chunk."""
    inputs = {c: Items.of([c.to_bytes(2, "big") + i.to_bytes(4, "big") for i in range(500)])
              for c in range(40)}  # fmt: skip
    outputs = {c: Items.of([b"o" + bytes(item) for item in part]) for c, part in inputs.items()}
    index = PairIndex(inputs, outputs)
    wanted = [inputs[c][i] for c in (0, 17, 39) for i in (0, 250, 499)]
    assert index.outputs_of(wanted) == {item: b"o" + item for item in wanted}
    assert index.inputs_of([b"o" + item for item in wanted]) == {
        b"o" + item: item for item in wanted
    }
    assert index.outputs_of([b"absent"]) == {}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(ITEMS, max_size=6), max_size=5),
    st.lists(ITEMS, max_size=8),
    st.sampled_from([item_index.PACKED_SORT_LIMIT, 0]),  # 0: the stable argsort instead
)
def test_item_index_finds_each_items_last_or_first_position(
    parts: list[list[bytes]], wanted: list[bytes], limit: int
) -> None:
    item_index.PACKED_SORT_LIMIT = limit  # restored below (hypothesis runs it many times)
    try:
        _check_positions(parts, wanted)
    finally:
        item_index.PACKED_SORT_LIMIT = 2**31


def _check_positions(parts: list[list[bytes]], wanted: list[bytes]) -> None:
    flat = [item for part in parts for item in part]
    index = ItemIndex([Items.of(part, width=3) if i % 2 else part for i, part in enumerate(parts)])
    assert len(index) == len(flat)
    expected = {item: position for position, item in enumerate(flat) if item in set(wanted)}
    assert index.positions(wanted) == expected
    first = {item: position for position, item in reversed(list(enumerate(flat)))
             if item in set(wanted)}  # fmt: skip
    assert index.positions(wanted, last=False) == first
    for position in expected.values():
        part, offset = index.locate(position)
        assert parts[part][offset] == flat[position]


def test_items_whose_keys_collide_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every item in one bucket (as if all their keys were equal): each is still found by
    comparing the candidates whole."""
    monkeypatch.setattr(item_index._Keys, "of", lambda self, part: np.zeros(len(part), np.int32))
    parts = [[b"a", b"b", b"a"], [b"c", b"b"]]
    index = ItemIndex(parts)
    assert index.positions([b"a", b"b", b"c", b"d"]) == {b"a": 2, b"b": 4, b"c": 3}
    assert index.positions([b"a", b"b"], last=False) == {b"a": 0, b"b": 1}
    pairs = PairIndex({0: (b"i1", b"i2")}, {0: (b"o1", b"o2")})
    assert pairs.inputs_of([b"o2"]) == {b"o2": b"i2"}
    assert pairs.outputs_of([b"i1", b"x"]) == {b"i1": b"o1"}


def test_the_index_keeps_eight_bytes_an_item_per_side_built() -> None:
    inputs = {0: Items.of([i.to_bytes(4, "big") for i in range(1000)])}
    outputs = {0: Items.of([b"o" + bytes(item) for item in inputs[0]])}
    index = PairIndex(inputs, outputs)
    assert index.nbytes == 0
    index.inputs_of([b"x"])
    assert 8000 <= index.nbytes <= 8100  # keys and positions, and the parts' ends
    index.outputs_of([b"x"])
    assert 16000 <= index.nbytes <= 16200


def _reference_key(keys: item_index._Keys, item: bytes) -> int:
    """The key as docs state it, in Python integers: (Σ aᵢ·wᵢ + a₀·len) mod 2⁶⁴ >> 32."""
    mult = [int(a) for a in keys._mult]
    padded = item + bytes(-len(item) % 8)
    words = [int.from_bytes(padded[i : i + 8], "little") for i in range(0, len(padded), 8)]
    total = sum(a * w for a, w in zip(mult, words, strict=False)) + mult[keys.words] * len(item)
    top = (total % 2**64) >> 32
    return top - 2**32 if top >= 2**31 else top  # as int32


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40), st.lists(st.binary(min_size=0, max_size=40), max_size=6))
def test_the_key_is_the_multilinear_hash_whatever_holds_the_items(
    width: int, extra: list[bytes]
) -> None:
    keys = item_index._Keys(words=5)
    rows = [bytes([(7 * i + j) % 256 for j in range(width)]) for i in range(4)]
    expected = [_reference_key(keys, row) for row in rows]
    assert keys.of(Items.of(rows, width=width)).tolist() == expected  # numpy, wrapping
    assert keys.of(tuple(rows)).tolist() == expected  # bytes of one length
    mixed = rows + extra  # bytes of several lengths, grouped by length
    assert keys.of(mixed).tolist() == expected + [_reference_key(keys, e) for e in extra]


def test_items_longer_than_any_indexed_are_not_found() -> None:
    index = ItemIndex([Items.of([b"abcd", b"efgh"]), (b"ij",)])
    assert index.positions([b"abcdefghijkl", b"abcd", b"ij", b""]) == {b"abcd": 0, b"ij": 2}
    empty = ItemIndex([(b"", b"")])
    assert empty.positions([b"", b"x"]) == {b"": 1}
