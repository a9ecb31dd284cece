"""An outbound batch as its permutation seed (mixnet.core.outbound, and the seeded
permutation of mixnet.core.intake)."""

from __future__ import annotations

import collections
import itertools
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nacl.bindings import randombytes_buf_deterministic
from scipy.stats import chisquare

from mixnet.core.intake import SEED_LENGTH, seeded_permutation, seeded_randbytes
from mixnet.core.outbound import chunk_sizes, derive_outbound, permuted_chunks
from mixnet.core.records import DerivedOutbound, OutboundBatch, OutboundChunk

SEED = bytes(range(SEED_LENGTH))


@pytest.mark.parametrize(
    ("count", "size", "sizes"),
    [(0, 4, (0,)), (1, 4, (1,)), (4, 4, (4,)), (5, 4, (4, 1)), (10, 5, (5, 5)), (11, 5, (5, 5, 1))],
)
def test_chunk_sizes_cut_as_the_mix_cuts(count: int, size: int, sizes: tuple[int, ...]) -> None:
    assert chunk_sizes(count, size) == sizes


@pytest.mark.parametrize(("count", "size"), [(-1, 4), (3, 0)])
def test_chunk_sizes_refuse_bad_arguments(count: int, size: int) -> None:
    with pytest.raises(ValueError):
        chunk_sizes(count, size)


def test_the_seed_draws_from_libsodium_and_a_repeated_draw_gets_new_bytes() -> None:
    draw = seeded_randbytes(SEED)
    first, second, third = draw(40), draw(40), draw(40)
    assert first == bytes(randombytes_buf_deterministic(40, SEED))
    assert len({first, second, third}) == 3  # a draw after a tie is not the same draw again
    again = seeded_randbytes(SEED)
    assert [again(40), again(40)] == [first, second]
    assert draw(0) == b""


@pytest.mark.parametrize("seed", [b"", b"s" * 31, b"s" * 33, "s" * 32, None])
def test_a_seed_must_be_32_bytes(seed: object) -> None:
    with pytest.raises(ValueError, match="seed must be 32 bytes"):
        seeded_permutation(3, seed)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed must be 32 bytes"):
        permuted_chunks([b"a"], seed, 1)  # type: ignore[arg-type]


@given(st.integers(0, 300), st.binary(min_size=SEED_LENGTH, max_size=SEED_LENGTH))
def test_a_seeded_permutation_is_a_permutation_and_the_same_again(size: int, seed: bytes) -> None:
    perm = seeded_permutation(size, seed)
    assert sorted(perm.tolist()) == list(range(size))
    assert perm.tolist() == seeded_permutation(size, seed).tolist()


def test_seeded_permutations_are_uniform() -> None:
    """Each of the 24 orders of 4 items, over 4,800 seeds from the OS CSPRNG, about equally
    often (chi-square; fails by chance with probability 1e-6)."""
    orders = list(itertools.permutations(range(4)))
    counts = collections.Counter(
        tuple(seeded_permutation(4, os.urandom(SEED_LENGTH)).tolist()) for _ in range(4800)
    )
    assert set(counts) <= set(orders)
    assert chisquare([counts[o] for o in orders]).pvalue > 1e-6


def test_permuted_chunks_hold_every_payload_once_and_repeat_for_the_seed() -> None:
    payloads = [bytes([i]) * 5 for i in range(11)]
    chunks = permuted_chunks(payloads, SEED, 4)
    assert [len(c) for c in chunks] == [4, 4, 3]
    flat = [p for c in chunks for p in c]
    assert sorted(flat) == payloads and flat != payloads
    assert [list(c) for c in permuted_chunks(payloads, SEED, 4)] == [list(c) for c in chunks]
    other = permuted_chunks(payloads, bytes(SEED_LENGTH), 4)
    assert [p for c in other for p in c] != flat
    (empty,) = permuted_chunks([], SEED, 4)
    assert len(empty) == 0


def test_a_derived_batch_is_the_batch_that_was_mixed() -> None:
    payloads = [bytes([i]) * 3 for i in range(7)]
    chunks = permuted_chunks(payloads, SEED, 3)
    stored = DerivedOutbound(4, 7, SEED, (3, 3, 1), frozenset({0, 2}), excluded=1)
    derived = derive_outbound(stored, payloads)
    assert derived == OutboundBatch(
        4,
        7,
        tuple(OutboundChunk(i, c, i in (0, 2)) for i, c in enumerate(chunks)),
        excluded=1,
        seed=SEED,
    )
    whole = OutboundBatch(1, 1, (OutboundChunk(0, (b"x",)),))
    assert derive_outbound(whole, payloads) is whole  # stored whole: as it is
    with pytest.raises(ValueError, match="do not fill"):
        derive_outbound(stored, payloads[:-1])
