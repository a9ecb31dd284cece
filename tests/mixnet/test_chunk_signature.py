"""Tests for mixnet.chunk_signature: Merkle roots, audit paths and signed chunks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from mixnet.chunk_signature import (
    Delivery,
    chunk_root,
    delivery_of,
    inclusion_path,
    leaf_hash,
    path_root,
    sign_chunk,
    verify_chunk,
    verify_delivery,
)
from mixnet.errors import BadLength

KEY = SigningKey(b"\x07" * 32)
ARGS = {"chain_id": "c", "round_id": 3, "sender": "mix1"}


@settings(max_examples=80, deadline=None)
@given(
    items=st.lists(st.binary(min_size=1, max_size=8), min_size=1, max_size=40, unique=True),
    data=st.data(),
)
def test_every_item_has_a_path_to_the_root(items: list[bytes], data: st.DataObject) -> None:
    position = data.draw(st.integers(0, len(items) - 1))
    path = inclusion_path(items, position)
    assert path_root(items[position], position, len(items), path) == chunk_root(items)
    other = items[position] + b"x"
    assert path_root(other, position, len(items), path) != chunk_root(items)
    if len(items) > 1:  # the path does not fit another position's shape or value
        wrong = (position + 1) % len(items)
        assert path_root(items[position], wrong, len(items), path) != chunk_root(items)


def test_rfc6962_shape() -> None:
    a, b, c = b"a", b"b", b"c"
    assert chunk_root([a]) == leaf_hash(a)
    assert chunk_root([a, b, c]) != chunk_root([a, c, b])
    assert len(inclusion_path([a, b, c], 2)) == 1 and len(inclusion_path([a, b, c], 0)) == 2
    assert path_root(a, 0, 3, inclusion_path([a, b, c], 0)[:1]) is None
    with pytest.raises(IndexError):
        inclusion_path([a], 1)


def test_a_signed_chunk_verifies_only_as_signed() -> None:
    items = [bytes([i]) * 5 for i in range(9)]
    signature = sign_chunk(KEY, index=2, items=items, **ARGS)  # type: ignore[arg-type]
    vk = KEY.verify_key
    assert verify_chunk(vk, signature, index=2, items=items, **ARGS)  # type: ignore[arg-type]
    assert not verify_chunk(vk, signature, index=3, items=items, **ARGS)  # type: ignore[arg-type]
    assert not verify_chunk(vk, signature, index=2, items=items[:-1], **ARGS)  # type: ignore[arg-type]
    assert not verify_chunk(SigningKey.generate().verify_key, signature, index=2, items=items,
                            **ARGS)  # type: ignore[arg-type]  # fmt: skip
    assert not verify_chunk(vk, signature[:63], index=2, items=items, **ARGS)  # type: ignore[arg-type]


def test_a_delivery_proves_one_item_of_a_signed_chunk() -> None:
    items = [bytes([i]) * 5 for i in range(9)]
    signature = sign_chunk(KEY, index=2, items=items, **ARGS)  # type: ignore[arg-type]
    delivery = delivery_of(items, 6, sender="mix1", index=2, signature=signature)
    vk = KEY.verify_key
    assert verify_delivery(delivery, items[6], vk, chain_id="c", round_id=3)
    assert not verify_delivery(delivery, items[5], vk, chain_id="c", round_id=3)
    assert not verify_delivery(delivery, items[6], vk, chain_id="c", round_id=4)
    forged = Delivery("mix2", 2, 9, 6, delivery.path, signature)
    assert not verify_delivery(forged, items[6], vk, chain_id="c", round_id=3)
    with pytest.raises(BadLength):
        Delivery("mix1", 2, 9, 6, (b"short",), signature)
    with pytest.raises(TypeError):
        Delivery("mix1", -1, 9, 6, (), signature)
