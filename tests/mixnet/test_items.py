"""The compact round storage: Items, RowArena, SubmissionTable, the digest tables, the
vectorized permutation and the peel batcher."""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from mixnet.core.digests import (
    _SCALAR_CALL,
    DigestSet,
    ReplayFilter,
    all_distinct,
    split_digests,
)
from mixnet.core.intake import (
    BatchIntake,
    drop_replays,
    filter_replays,
    item_digest,
    random_permutation,
    replay_positions,
)
from mixnet.core.items import Items, RowArena, allocate_rows
from mixnet.core.submissions import SubmissionTable
from mixnet.errors import MixnetError
from mixnet.peeling import PeelBatcher, in_pool

# ================================================================== Items


class TestItems:
    def test_behaves_like_a_tuple_of_bytes(self) -> None:
        items = Items.of([b"abc", b"def", b"ghi"])
        assert len(items) == 3 and items.width == 3 and items.nbytes == 9
        assert items == (b"abc", b"def", b"ghi") and items == (b"abc", b"def", b"ghi")
        assert items == [b"abc", b"def", b"ghi"]
        assert items != (b"abc", b"def") and items != (b"abc", b"def", b"xxx")
        assert list(items) == [b"abc", b"def", b"ghi"]
        assert items[0] == b"abc" and items[-1] == b"ghi"
        assert items[1:] == (b"def", b"ghi") and isinstance(items[1:], Items)
        assert b"def" in items and items.index(b"ghi") == 2
        assert hash(items) == hash((b"abc", b"def", b"ghi"))
        assert items.tobytes() == b"abcdefghi" and bytes(items.buffer()) == b"abcdefghi"
        with pytest.raises(IndexError):
            items[3]

    def test_take_reads_through_an_index_without_copying(self) -> None:
        items = Items.of([bytes([i]) * 4 for i in range(10)])
        taken = items.take(np.array([9, 0, 9, 3]))
        assert taken == (b"\t" * 4, b"\0" * 4, b"\t" * 4, b"\3" * 4)
        assert taken[1:3] == (b"\0" * 4, b"\t" * 4)
        assert taken.take(np.array([3, 0])) == (b"\3" * 4, b"\t" * 4)
        assert np.shares_memory(taken._rows, items._rows)

    def test_views_are_read_only(self) -> None:
        items = Items.of([b"ab", b"cd"])
        with pytest.raises(ValueError):
            items.array()[0, 0] = 1

    def test_empty_and_zero_width(self) -> None:
        assert Items.of([]) == () and len(Items.empty(5)) == 0 and Items.empty(5).width == 5
        assert Items.of([b"", b""]) == (b"", b"") and list(Items.of([b""])) == [b""]
        assert Items.from_bytes(b"", 0, 3) == (b"",) * 3

    def test_bad_input(self) -> None:
        with pytest.raises(ValueError):
            Items.of([b"a", b"bb"])
        with pytest.raises(TypeError):
            Items.of(["a"])  # type: ignore[list-item]
        with pytest.raises(ValueError):
            Items.from_bytes(b"abcd", 3)

    @given(st.lists(st.binary(min_size=3, max_size=3), max_size=40), st.integers(1, 7))
    def test_iteration_in_blocks_matches(self, raw: list[bytes], block: int) -> None:
        items = Items.of(raw, 3)
        assert list(items) == raw and tuple(items) == tuple(raw)


class TestRowArena:
    def test_appends_into_blocks_and_merges_them(self) -> None:
        arena = RowArena(2, capacity=3)
        first = arena.append([b"aa", b"bb"])
        second = arena.append(b"ccdd")  # does not fit the first block: a new one
        arena.append_row(b"ee")
        assert first == (b"aa", b"bb") and second == (b"cc", b"dd")
        assert len(arena) == 5 and arena.rows(1, 4) == (b"bb", b"cc", b"dd")
        assert arena.items() == (b"aa", b"bb", b"cc", b"dd", b"ee")
        assert first == (b"aa", b"bb")  # handed-out views stay valid after the merge
        with pytest.raises(ValueError):
            arena.append([b"abc"])

    def test_allocated_rows_are_zero_and_writable(self) -> None:
        rows = allocate_rows(1000, 7)
        assert rows.shape == (1000, 7) and not rows.any()
        rows[3] = 1


class TestSubmissionTable:
    def test_is_a_mapping_in_acceptance_order(self) -> None:
        table = SubmissionTable()
        table["b"] = (b"b1", b"b2")
        table["a"] = [b"a1", b"a2"]
        for i in range(2000):  # several blocks
            table[f"c{i}"] = (b"x" + bytes([i % 256]), b"yy")
        assert len(table) == 2002 and list(table)[:2] == ["b", "a"]
        assert table["a"] == (b"a1", b"a2") and "a" in table and "z" not in table
        assert next(iter(table.items())) == ("b", (b"b1", b"b2"))
        everything = table.all_items()
        assert len(everything) == 4004 and everything[:4] == (b"b1", b"b2", b"a1", b"a2")
        with pytest.raises(ValueError):
            table["a"] = (b"zz", b"zz")  # stored already (the index exists now)
        with pytest.raises(ValueError):
            table["new"] = (b"zz",)  # another shape
        del table["b"]
        assert list(table)[:1] == ["a"] and table.all_items()[:2] == (b"a1", b"a2")
        table.clear()
        assert len(table) == 0 and table.all_items() == ()


    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.integers(1, 3))
    def test_put_many_is_one_put_per_client(self, cuts: list[int], items: int) -> None:
        """Submissions stored in runs (as a frame's) are the table that storing each one
        makes; a run that fails a check stores nothing of itself."""
        subs = [(f"c{i}", tuple(bytes([i % 256, k]) * 3 for k in range(items))) for i in range(60)]
        one, many = SubmissionTable(), SubmissionTable()
        for client, row in subs:
            one[client] = row
        at = 0
        for cut in cuts:
            run = subs[at : at + cut]
            many.put_many([c for c, _ in run], [r for _, r in run])
            at += cut
        for client, row in subs[at:]:
            many[client] = row
        assert list(many.items()) == list(one.items())
        assert many.all_items() == one.all_items()
        before = list(many.items())
        wrong = tuple(b"zz" for _ in range(items + 1))
        with pytest.raises(ValueError):
            many.put_many(["x", "y"], [subs[0][1], wrong])  # another shape
        with pytest.raises(ValueError):
            many.put_many(["x"], [])  # one submission per client
        assert list(many.items()) == before
        assert "c0" in many  # builds the index
        with pytest.raises(ValueError):
            many.put_many(["x", "c0"], [subs[0][1], subs[0][1]])  # stored already
        with pytest.raises(ValueError):
            many.put_many(["x", "x"], [subs[0][1], subs[0][1]])  # twice in the run
        assert list(many.items()) == before


# ================================================================== digest tables


digests16 = st.binary(min_size=16, max_size=16)


class TestDigestTables:
    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from("adr"), st.integers(0, 40)), max_size=300))
    def test_digest_set_is_a_set(self, ops: list[tuple[str, int]]) -> None:
        pool = [bytes(16), *(item_digest(bytes([i])) for i in range(40))]
        ours, model = DigestSet(), set[bytes]()
        for op, i in ops:
            d = pool[i]
            if op == "a":
                ours.add(d)
                model.add(d)
            elif op == "d":
                ours.discard(d)
                model.discard(d)
            assert (d in ours) == (d in model)
            assert ours.isdisjoint([d]) == model.isdisjoint([d])
        assert set(ours) == model and len(ours) == len(model)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.lists(st.integers(0, 100), max_size=90, unique=True), max_size=30))
    def test_digest_set_bulk_probe_and_insert_are_a_sets(self, groups: list[list[int]]) -> None:
        """``held_many`` and ``add_new`` (the entry mix's probe per ``submit-many`` frame)
        answer and add as a set does, the all-zero digest included — both for a few digests
        (probed one by one) and for many (vectorized; the cut is ``_SCALAR_CALL``)."""
        pool = [bytes(16), *(item_digest(bytes([i])) for i in range(100))]
        ours, model = DigestSet(), set[bytes]()
        for group in groups:
            wanted = b"".join(pool[i] for i in group)
            assert ours.held_many(wanted).tolist() == [pool[i] in model for i in group]
            new = [pool[i] for i in group if pool[i] not in model]
            ours.add_new(b"".join(new))
            model.update(new)
        assert set(ours) == model and len(ours) == len(model)
        for size in (17, 16 * _SCALAR_CALL + 1, 16 * _SCALAR_CALL + 17):
            with pytest.raises(ValueError):
                ours.held_many(bytes(size))
            with pytest.raises(ValueError):
                ours.add_new(bytes(size))

    def test_digest_set_bulk_calls_take_both_paths(self) -> None:
        """The one-by-one and the vectorized bulk calls agree on the same digests."""
        few, many = DigestSet(), DigestSet()
        digests = [os.urandom(16) for _ in range(4 * _SCALAR_CALL)]
        for at in range(0, len(digests), 4):  # few at a time: one by one
            few.add_new(b"".join(digests[at : at + 4]))
        many.add_new(b"".join(digests))  # all at once: vectorized
        probe = digests[::3] + [os.urandom(16) for _ in range(_SCALAR_CALL)]
        expected = [d in set(digests) for d in probe]
        for table in (few, many):
            assert set(table) == set(digests)
            assert table.held_many(b"".join(probe)).tolist() == expected
            assert [table.held_many(d).tolist() for d in probe] == [[e] for e in expected]

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.lists(st.integers(0, 150), max_size=120, unique=True), max_size=30))
    def test_add_absent_adds_all_or_nothing_as_a_set_would(self, groups: list[list[int]]) -> None:
        """``add_absent`` (the entry mix's fresh lane: probe and insert in one pass) adds a
        call's distinct digests exactly when a set holds none of them, and otherwise leaves
        the table as it was — for a few digests and for many, the all-zero one included,
        and across the table's growth."""
        pool = [bytes(16), *(item_digest(bytes([i])) for i in range(150))]
        ours, model = DigestSet(), set[bytes]()
        for group in groups:
            wanted = [pool[i] for i in group]
            fresh = model.isdisjoint(wanted)
            assert ours.add_absent(b"".join(wanted)) is fresh
            if fresh:
                model.update(wanted)
            assert set(ours) == model and len(ours) == len(model)
            assert ours.held_many(b"".join(pool)).tolist() == [d in model for d in pool]
            assert [d in ours for d in pool] == [d in model for d in pool]

    def test_all_distinct(self) -> None:
        digests = [os.urandom(16) for _ in range(100)]
        assert all_distinct(b"".join(digests)) and all_distinct(b"") and all_distinct(bytes(16))
        assert not all_distinct(b"".join([*digests, digests[37]]))
        twin = digests[5][:8] + os.urandom(8)  # the same first half, another digest
        assert all_distinct(b"".join([*digests, twin]))
        assert not all_distinct(b"".join([*digests, twin, twin]))
        with pytest.raises(ValueError):
            all_distinct(bytes(17))

    @settings(max_examples=15, deadline=None)
    @given(st.integers(1, 40), st.integers(0, 2**32 - 1))
    def test_bulk_calls_agree_with_a_set_in_long_clusters(self, homes: int, seed: int) -> None:
        """Digests that share their low half share their home slot: clusters longer than a
        vectorized round's window (``_WINDOW``), which must be followed across windows and
        around the table's end, with many keys choosing the same empty slot at once."""
        rng = np.random.Generator(np.random.PCG64(seed))  # test data, not secrets
        lows = rng.integers(1, 2**63, size=homes, dtype=np.uint64)

        def batch(size: int) -> list[bytes]:
            his = rng.integers(1, 2**63, size=size, dtype=np.uint64)
            los = lows[rng.integers(0, homes, size=size)]
            return [int(h).to_bytes(8, "little") + int(lo).to_bytes(8, "little")
                    for h, lo in zip(his, los, strict=True)]  # fmt: skip

        ours, model = DigestSet(), set[bytes]()
        absent = DigestSet()  # the same digests through add_absent
        for _ in range(6):
            fresh = list(dict.fromkeys(batch(300)))
            probe = fresh[::2] + list(model)[:200]
            assert ours.held_many(b"".join(probe)).tolist() == [d in model for d in probe]
            new = [d for d in fresh if d not in model]
            ours.add_new(b"".join(new))
            assert absent.add_absent(b"".join(new))
            assert absent.held_many(b"".join(new)).all() and all(d in absent for d in new)
            assert not absent.add_absent(b"".join(fresh))  # every one of them is held now
            model.update(new)
            assert ours.held_many(b"".join(new)).all()
        assert set(ours) == model and len(ours) == len(model)
        assert set(absent) == model and len(absent) == len(model)
        flt = ReplayFilter()
        hi, lo = split_digests(list(model))
        flt.add_new(hi, lo, 5)
        assert flt.owners(hi, lo) == [5] * len(model)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from("sdb"), st.integers(0, 30)), max_size=200))
    def test_replay_filter_is_a_dict(self, ops: list[tuple[str, int]]) -> None:
        pool = [bytes(16), *(item_digest(bytes([i])) for i in range(30))]
        ours, model = ReplayFilter(), dict[bytes, int]()
        for step, (op, i) in enumerate(ops):
            d = pool[i]
            if op == "s":
                ours[d] = step
                model[d] = step
            elif op == "d" and d in model:
                del ours[d]
                del model[d]
            else:
                wanted = pool[: i + 1]
                hi, lo = split_digests(wanted)
                assert ours.owners(hi, lo) == [model.get(w, -1) for w in wanted]
        assert dict(ours) == model and ours == model

    def test_grows_past_its_first_size(self) -> None:
        ours = DigestSet()
        many = [os.urandom(16) for _ in range(20_000)]
        ours.update(many)
        assert len(ours) == 20_000 and all(d in ours for d in many[::97])
        flt = ReplayFilter()
        hi, lo = split_digests(many)
        flt.add_new(hi, lo, 3)
        assert flt.owners(hi[:5], lo[:5]) == [3] * 5 and len(flt) == 20_000
        flt.setdefault_many(b"".join(many[:10]) + os.urandom(16), 9)
        assert len(flt) == 20_001 and flt[many[0]] == 3


# ================================================================== intake helpers


class TestFilterReplays:
    def test_a_filter_and_a_dict_give_the_same_answers(self) -> None:
        a, b, c = (bytes([i]) * 8 for i in range(3))
        chunks = [[a, b, a], [b, c], [c, a, b], [a, b, a]]
        flt, plain = ReplayFilter(), dict[bytes, int]()
        for index in (0, 1, 2, 0):
            assert filter_replays(chunks[index], flt, index) == filter_replays(
                chunks[index], plain, index
            )
        assert dict(flt) == plain

    def test_returns_the_digests_it_recorded(self) -> None:
        a, b = b"a" * 8, b"b" * 8
        kept, dropped, digests = filter_replays([a, b, a], ReplayFilter(), 0)
        assert (kept, dropped, digests) == ([a, b], 1, item_digest(a) + item_digest(b))
        assert drop_replays([a], {}, 0) == ([a], 0)

    def test_admit_with_precomputed_digests_is_replay_positions(self) -> None:
        """``ReplayFilter.admit`` (digests given) keeps, records and returns what
        ``replay_positions`` (which hashes the items itself) does, also for repeats within a
        chunk, items of other chunks, a chunk sent again and the all-zero digest."""
        pool = [bytes([i]) * 8 for i in range(6)]
        chunks = [[0, 1, 0, 2], [1, 3, 3], [4, 0, 5, 4], [5], [0, 1, 0, 2]]
        ours, model = ReplayFilter(), ReplayFilter()
        for index, chunk in zip((0, 1, 2, 3, 0), chunks, strict=True):
            items = [pool[i] for i in chunk]
            digests = b"".join(item_digest(i) for i in items)
            positions, added = ours.admit(digests, index)
            assert (positions.tolist(), added) == replay_positions(items, model, index)
        assert dict(ours) == dict(model)
        zero = ReplayFilter()
        positions, added = zero.admit(bytes(16) * 2 + b"\x01" * 16, 7)
        assert positions.tolist() == [0, 2] and added == bytes(16) + b"\x01" * 16
        assert zero[bytes(16)] == 7 and zero.admit(b"", 7)[1] == b""

    def test_admit_fills_a_large_table_like_a_dict(self) -> None:
        """Bulk probes (and their one-by-one tails) answer as a dict does in a table filled
        to its limit, replays of earlier chunks included."""
        chunks = [[os.urandom(16) for _ in range(4096)] for _ in range(6)]
        chunks.append(chunks[0][:100] + chunks[3][-50:] + [os.urandom(16) for _ in range(10)])
        flt, model = ReplayFilter(), dict[bytes, int]()
        flt.reserve(sum(map(len, chunks)))
        for index, chunk in enumerate(chunks):
            positions, added = flt.admit(b"".join(chunk), index)
            kept = [i for i, d in enumerate(chunk) if model.get(d, index) == index]
            assert positions.tolist() == kept
            assert added == b"".join(chunk[i] for i in kept if chunk[i] not in model)
            model.update((chunk[i], index) for i in kept if chunk[i] not in model)
        assert dict(flt) == model


class TestBatchKeep:
    def test_kept_outputs_read_in_chunk_order_without_copying(self) -> None:
        intake = BatchIntake(1, "m", 4)
        for index, outputs in ((1, [b"c", b"d"]), (0, [b"a", b"b"])):
            intake.reserve(index, 2, 1, 4, 2)
            assert intake.keep(index, outputs) == outputs
        ordered = intake.outputs_in_order([0, 1])
        assert ordered == (b"a", b"b", b"c", b"d")
        assert intake.outputs_in_order([1, 0]) == (b"c", b"d", b"a", b"b")
        assert intake.outputs_in_order([0, 2]) is None
        assert intake.output_views() == {0: (b"a", b"b"), 1: (b"c", b"d")}


class TestRandomPermutation:
    def test_is_a_permutation(self) -> None:
        for size in (0, 1, 2, 17, 5000):
            perm = random_permutation(size)
            assert sorted(perm.tolist()) == list(range(size))

    def test_redraws_ties(self) -> None:
        draws = iter([bytes(16), bytes(8) + b"\1" * 8])  # first: two equal keys

        def randbytes(n: int) -> bytes:
            return next(draws)

        assert random_permutation(2, randbytes).tolist() == [0, 1]

    def test_uniform_over_orders(self) -> None:
        index = {p: k for k, p in enumerate(itertools.permutations(range(4)))}
        counts = Counter(index[tuple(random_permutation(4).tolist())] for _ in range(24_000))
        assert len(counts) == 24
        assert chisquare([counts[k] for k in range(24)]).pvalue > 1e-4

    def test_every_position_is_uniform(self) -> None:
        trials, size = 3000, 50
        seen = np.zeros((size, size), dtype=np.int64)
        for _ in range(trials):
            seen[np.arange(size), random_permutation(size)] += 1
        assert chisquare(seen.ravel()).pvalue > 1e-4


# ================================================================== peel batcher


class TestPeelBatcher:
    async def test_requests_of_one_turn_share_a_task_and_get_their_own_results(self) -> None:
        calls: list[int] = []

        def part(items: Sequence[bytes]) -> list[bytes | MixnetError]:
            calls.append(len(items))
            return [piece for item in items for piece in (item + b"1", item + b"2")]

        with ThreadPoolExecutor(2) as pool:
            batcher = PeelBatcher(in_pool(pool), tasks=1)
            results = await asyncio.gather(
                *(batcher.peel("k", part, [bytes([i])]) for i in range(10))
            )
        assert results == [[bytes([i]) + b"1", bytes([i]) + b"2"] for i in range(10)]
        assert sum(calls) == 10 and len(calls) <= 2

    async def test_a_failing_batch_fails_each_request(self) -> None:
        def part(items: Sequence[bytes]) -> list[bytes | MixnetError]:
            raise ValueError("boom")

        with ThreadPoolExecutor(1) as pool:
            batcher = PeelBatcher(in_pool(pool), tasks=1)
            outcomes = await asyncio.gather(
                batcher.peel("k", part, [b"x"]), batcher.peel("k", part, [b"y"]),
                return_exceptions=True,
            )
        assert all(isinstance(o, ValueError) for o in outcomes)


def test_secrets_not_numpy_for_permutations() -> None:
    # the permutation's randomness is the OS CSPRNG's bytes: a known stream gives a known
    # order (argsort of the keys), nothing else is consulted
    stream = secrets.token_bytes(8 * 6)
    keys = np.frombuffer(stream, dtype=np.uint64)
    assert random_permutation(6, lambda n: stream).tolist() == np.argsort(keys).tolist()

