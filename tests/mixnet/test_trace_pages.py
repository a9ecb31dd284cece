"""The trace in pages: how a mix splits its own accusations, how the entry mix splits an
exclusion, how the last mix gathers it, and the frames' page fields on the wire."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixnet.core.trace_pages import ExclusionPages, exclusion_pages, own_pages
from mixnet.errors import MalformedFrame
from mixnet.frames import Accused, Exclude, FrameLimits, Trace, parse_reply, parse_request, to_wire

ITEM = 16


def items(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}{i}".encode().ljust(ITEM, b".") for i in range(count)]


# --------------------------------------------------------------------------- own pages


@given(
    failed=st.integers(0, 6),
    groups=st.lists(st.integers(2, 5), max_size=5),
    refused=st.integers(0, 9),
    cap=st.integers(2, 6),
    replays=st.integers(0, 3),
)
def test_own_pages_keep_every_accusation_in_order_and_groups_whole(
    failed: int, groups: list[int], refused: int, cap: int, replays: int
) -> None:
    f = items("f", failed)
    twins = [items(f"t{g}-", size) for g, size in enumerate(groups)]
    r = items("r", refused)
    dropped = failed + sum(groups) + replays
    own = own_pages(f, twins, r, cap=cap, dropped=dropped)
    shown = [twin for twin in twins if len(twin) <= cap]
    flat = [i for page in own.pages for i in page.items]
    assert flat == f + [i for twin in shown for i in twin] + r  # nothing lost, order kept
    for page in own.pages:
        assert 0 < len(page.items) <= cap
        assert page.items[: page.failures] == tuple(i for i in page.items if i in f)
        kinds = page.items[page.failures : page.failures + page.duplicates]
        assert all(i not in f and i not in r for i in kinds)
        assert all(i in r for i in page.items[page.failures + page.duplicates :])
        for twin in shown:  # a group on a page is on it whole
            on_page = [i for i in twin if i in page.items]
            assert on_page in ([], twin)
    assert own.untraced == replays + sum(len(t) for t in twins if len(t) > cap)


def test_own_pages_with_nothing_to_accuse() -> None:
    own = own_pages([], [], [], cap=4, dropped=2)
    assert own.pages == () and own.untraced == 2
    with pytest.raises(ValueError, match="at least one"):
        own_pages([], [], [], cap=0, dropped=0)


# --------------------------------------------------------------------------- exclusion


@given(sizes=st.lists(st.integers(1, 5), max_size=12), cap=st.integers(1, 9))
def test_exclusion_pages_carry_whole_submissions_within_the_cap(
    sizes: list[int], cap: int
) -> None:
    subs = [items(f"s{n}-", size) for n, size in enumerate(sizes)]
    frames = exclusion_pages(7, subs, cap)
    assert [i for f in frames for i in f.items] == [i for s in subs for i in s]
    assert [f.page for f in frames] == list(range(len(frames)))
    assert {(f.round_id, f.pages, f.excluded) for f in frames} == {(7, len(frames), len(subs))}
    assert [f.final for f in frames] == [False] * (len(frames) - 1) + [True]
    for f in frames:
        assert len(f.items) <= max(cap, *sizes) if sizes else not f.items
        whole = [s for s in subs if set(s) & set(f.items)]
        assert all(set(s) <= set(f.items) for s in whole)  # a submission is never split


def test_no_submission_is_one_empty_frame() -> None:
    assert exclusion_pages(3, [], 5) == (Exclude(3, (), 0),)


def test_the_last_mix_gathers_pages_once_each_and_refuses_too_many_items() -> None:
    a, b, c = items("a", 2), items("b", 2), items("c", 1)
    frames = exclusion_pages(1, [a, b, c], 4)
    assert len(frames) == 2
    pages = ExclusionPages(2, 3, limit=5)
    assert pages.add(frames[1]) is False
    assert pages.add(frames[1]) is False and pages.count == 1  # a page again: kept once
    with pytest.raises(ValueError, match="1 pages are missing"):
        pages.whole(1)
    assert pages.add(frames[0]) is True
    assert pages.whole(1) == Exclude(1, (*a, *b, *c), 3)
    with pytest.raises(MalformedFrame, match="another exclusion"):
        pages.add(Exclude(1, (), 2, page=0, pages=2))
    small = ExclusionPages(2, 3, limit=4)
    small.add(frames[0])
    with pytest.raises(MalformedFrame, match="more items than the round's 4"):
        small.add(frames[1])


# --------------------------------------------------------------------------- on the wire

LIMITS = FrameLimits("chain", item_length=ITEM, chunk_items=4, mixes=3)


def test_page_fields_round_trip_and_are_absent_on_one_page() -> None:
    for frame in (Trace(4), Trace(4, 3)):
        wire = to_wire(frame)
        assert ("page" in wire) is bool(frame.page)
        assert parse_request("trace", wire, LIMITS) == frame
    for exclude in (Exclude(4, tuple(items("x", 2)), 3), Exclude(4, (), 3, page=1, pages=2)):
        wire = to_wire(exclude)
        assert ("pages" in wire) is (exclude.pages > 1)
        assert parse_request("exclude", wire, LIMITS) == exclude
    for accused in (Accused(4), Accused(4, more=True)):
        wire = to_wire(accused)
        assert ("more" in wire) is accused.more
        assert parse_reply(wire, LIMITS) == accused


@pytest.mark.parametrize(
    ("kind", "fields", "message"),
    [
        ("trace", {"page": -1}, "'page' must be >= 0"),
        ("trace", {"page": "2"}, "'page' must be int"),
        ("trace", {"page": 1 << 32}, "'page' must be <= 4294967295"),
        ("exclude", {"page": 2, "pages": 2}, "'page' must be < pages"),
        ("exclude", {"pages": 0}, "'pages' must be >= 1"),
        ("exclude", {"page": 1}, "'page' must be < pages (1)"),
        ("exclude", {"pages": True}, "'pages' must be int"),
    ],
)
def test_bad_page_fields_are_malformed(
    kind: str, fields: dict[str, object], message: str
) -> None:
    base = to_wire(Trace(4) if kind == "trace" else Exclude(4, (), 0))
    with pytest.raises(MalformedFrame, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_request(kind, {**base, **fields}, LIMITS)


def test_more_must_be_a_bool() -> None:
    with pytest.raises(MalformedFrame, match="'more' must be bool"):
        parse_reply({**to_wire(Accused(4)), "more": 1}, LIMITS)
