"""Tests for mixnet.chunk_signature: Merkle roots, audit paths and signed chunks."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from mixnet.chunk_signature import (
    KEPT_SUBTREE,
    ChunkTree,
    Delivery,
    chunk_root,
    delivery_of,
    inclusion_path,
    leaf_hash,
    leaf_hashes,
    path_root,
    root_of_leaves,
    sign_chunk,
    verify_chunk,
    verify_delivery,
)
from mixnet.core.items import Items
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


def reference_path(items: list[bytes], position: int) -> list[bytes]:
    """RFC 6962 § 2.1.1 ``PATH(m, D[n])``, restated without any kept roots."""
    if len(items) <= 1:
        return []
    k = 1 << ((len(items) - 1).bit_length() - 1)
    if position < k:
        return [*reference_path(items[:k], position), chunk_root(items[k:])]
    return [*reference_path(items[k:], position - k), chunk_root(items[:k])]


@settings(max_examples=40, deadline=None)
@given(count=st.integers(1, 5 * KEPT_SUBTREE + 3), data=st.data())
def test_a_chunk_tree_gives_every_path_as_rfc6962_for_any_order_of_asking(
    count: int, data: st.DataObject
) -> None:
    """A tree that keeps its large subtrees' roots gives the same paths as the definition,
    whatever positions were asked before (from a plain list or a buffer)."""
    items = [i.to_bytes(4, "big") * 3 for i in range(count)]
    tree = ChunkTree(Items.of(items, 12) if data.draw(st.booleans()) else items)
    positions = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=12))
    for position in positions:
        path = tree.path(position)
        assert list(path) == reference_path(items, position)
        assert path_root(items[position], position, count, path) == chunk_root(items)
    with pytest.raises(IndexError):
        tree.path(count)


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


def _reference_root(leaves: list[bytes]) -> bytes:
    """RFC 6962's recursive definition (split at the largest power of two below n)."""
    if not leaves:
        return hashlib.blake2b(b"", digest_size=32).digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    left, right = _reference_root(leaves[:k]), _reference_root(leaves[k:])
    return hashlib.blake2b(b"\x01" + left + right, digest_size=32).digest()


@pytest.mark.parametrize("count", [*range(0, 70), 127, 128, 129, 1023, 1024, 1025, 4097])
def test_the_level_by_level_root_is_rfc6962s(count: int) -> None:
    items = [hashlib.sha256(i.to_bytes(4, "big")).digest()[:5] for i in range(count)]
    leaves = [leaf_hash(item) for item in items]
    assert leaf_hashes(items) == leaves == leaf_hashes(Items.of(items, 5))
    assert root_of_leaves(leaves) == _reference_root(leaves) == chunk_root(items)
    assert chunk_root(Items.of(items, 5)) == chunk_root(items)


def test_a_given_root_signs_and_verifies_as_the_items_do() -> None:
    items = [b"a", b"b", b"c"]
    root = chunk_root(items)
    args = {"chain_id": "c", "round_id": 3, "sender": "mix1", "index": 1, "items": items}
    signature = sign_chunk(KEY, root=root, **args)  # type: ignore[arg-type]
    assert signature == sign_chunk(KEY, **args)  # type: ignore[arg-type]
    vk = KEY.verify_key
    assert verify_chunk(vk, signature, root=root, **args)  # type: ignore[arg-type]
    wrong = chunk_root([b"a", b"b", b"d"])
    assert not verify_chunk(vk, signature, root=wrong, **args)  # type: ignore[arg-type]
