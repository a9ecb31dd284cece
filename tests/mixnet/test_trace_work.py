"""The trace's proofs and checks split over a thread pool (mixnet/trace_work.py): the same
answers as one list checked or proved at once, duplicates still paired."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from hypothesis import given
from hypothesis import strategies as st

from mixnet.blame import Accusation, Failure, Step, prove_step
from mixnet.errors import MixnetError
from mixnet.onion import wrap
from mixnet.trace_work import LEAST_PER_PART, check_in_parts, prove_in_parts, split_indices
from tests.mixnet.test_blame import (
    CHAIN,
    MIXES,
    PAYLOAD,
    ROUND,
    keys,  # noqa: F401 - the module-scoped fixture
    layer,
    peel_path,
    publics,
    trace,
    twin_accusations,
    valid,
    verify_all,
)

POOL = ThreadPoolExecutor(4)


@given(count=st.integers(0, 100), parts=st.integers(1, 6))
def test_split_indices_covers_every_index_once_in_order(count: int, parts: int) -> None:
    split = split_indices(range(count), parts)
    assert [i for part in split for i in part] == list(range(count))
    assert all(part for part in split) and len(split) <= max(1, parts)
    if len(split) > 1:
        assert min(map(len, split)) >= LEAST_PER_PART
        assert max(map(len, split)) - min(map(len, split)) <= 1


async def test_accusations_checked_in_parts_answer_as_one_list(
    keys: list[tuple[bytes, bytes]],  # noqa: F811
) -> None:
    """Refused payloads (some with a forged step) and a pair of duplicates spread among
    them: split over four threads, each accusation gets the verdict of the whole list."""
    twins, _ = twin_accusations(keys)
    accusations: list[Accusation] = []
    for i in range(40):
        onion = wrap(bytes([0xFF, i]) + b"\0" * (PAYLOAD - 2), [pk for _, pk in keys],
                     chain_id=CHAIN, round_id=ROUND)  # fmt: skip
        accusation = trace(peel_path(onion, keys), keys, Failure.INVALID_PAYLOAD, MIXES - 1)
        if i % 7 == 3:  # a forged secret
            forged = Step(2, accusation.steps[-1].item, b"\1" * 32, accusation.steps[-1].proof)
            accusation = Accusation(accusation.failure, (*accusation.steps[:-1], forged))
        accusations.append(accusation)
    accusations[5:5] = twins[:1]
    accusations[30:30] = twins[1:]
    expected = verify_all(accusations, keys)
    assert expected.count(False) == 6 and expected[5] and expected[30]
    shape = {"chain_id": CHAIN, "round_id": ROUND, "mixes": MIXES, "validator": valid,
             "proven": False}  # fmt: skip
    got = await check_in_parts(POOL, 4, accusations, publics(keys), **shape)  # type: ignore[arg-type]
    assert got == expected
    alone = await check_in_parts(POOL, 4, twins[:1], publics(keys), **shape)  # type: ignore[arg-type]
    assert alone == [False]  # a duplicate of nothing, as before
    assert await check_in_parts(POOL, 4, [], publics(keys), **shape) == []  # type: ignore[arg-type]


async def test_steps_proved_in_parts_are_in_order_and_errors_stay_in_place(
    keys: list[tuple[bytes, bytes]],  # noqa: F811
) -> None:
    sk, pk = keys[1]
    items = [layer(pk, bytes([i]) * PAYLOAD, hop=1) for i in range(30)]
    items[17] = b"\0" * len(items[0])  # a small-order key: no step can be made
    steps = await prove_in_parts(POOL, 3, items, failures=0, secret=sk, public=pk,
                                 chain_id=CHAIN, round_id=ROUND, hop=1, proven=False)  # fmt: skip
    assert isinstance(steps[17], MixnetError)
    for index, (item, made) in enumerate(zip(items, steps, strict=True)):
        if index != 17:
            assert isinstance(made, Step) and made.item == item and made.hop == 1
            expected = prove_step(sk, pk, item, chain_id=CHAIN, round_id=ROUND, hop=1)
            assert made.shared_secret == expected.shared_secret  # the proofs' nonces differ
    none = await prove_in_parts(POOL, 3, [], failures=0, secret=sk, public=pk,
                                chain_id=CHAIN, round_id=ROUND, hop=1, proven=False)  # fmt: skip
    assert none == []
