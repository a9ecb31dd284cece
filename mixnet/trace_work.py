"""The trace's cryptography at a mix, in its thread pool: proving its steps
(:class:`~mixnet.core.actions.Prove`) and checking accusations
(:class:`~mixnet.core.actions.Verify`), each split over the pool's threads.

A page of a trace carries hundreds of accusations, each a Chaum–Pedersen proof to make or
check (:mod:`mixnet.dleq`): about 0.6 ms of CPU each on this project's machine, partly in
libsodium (which releases the GIL) and partly in Python field arithmetic (which does not),
so two threads do a page about 1.25 times as fast as one. ``duplicate`` accusations hold only
beside their twins (:func:`mixnet.blame.verify_accusations` pairs them within the list it
gets), so they are all checked in one part.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import TypeVar

from mixnet.blame import (
    Accusation,
    Failure,
    PayloadValidator,
    Step,
    prove_failure,
    prove_step,
    verify_accusations,
)
from mixnet.errors import InternalError, MixnetError

__all__ = ["check_in_parts", "prove_in_parts", "split_indices"]

#: Fewest items worth a part of their own (a task's overhead is a few microseconds).
LEAST_PER_PART = 8

_R = TypeVar("_R")


def split_indices(indices: Sequence[int], parts: int) -> list[list[int]]:
    """``indices`` in at most ``parts`` contiguous parts of nearly equal size, none smaller
    than :data:`LEAST_PER_PART` unless there is only one (never an empty part)."""
    count = max(1, min(parts, len(indices) // LEAST_PER_PART))
    size, extra = divmod(len(indices), count)
    out: list[list[int]] = []
    start = 0
    for part in range(count):
        stop = start + size + (part < extra)
        if stop > start:
            out.append(list(indices[start:stop]))
        start = stop
    return out


async def _run_parts(
    pool: Executor, work: Callable[[list[int]], list[_R]], parts: list[list[int]], count: int
) -> list[_R]:
    """``work`` on each part of ``range(count)`` at once in ``pool``; results in index order."""
    loop = asyncio.get_running_loop()
    done = await asyncio.gather(*(loop.run_in_executor(pool, work, part) for part in parts))
    by_index: dict[int, _R] = {}
    for part, part_results in zip(parts, done, strict=True):
        by_index.update(zip(part, part_results, strict=True))
    return [by_index[index] for index in range(count)]


async def prove_in_parts(
    pool: Executor,
    threads: int,
    items: Sequence[bytes],
    *,
    failures: int,
    secret: bytes,
    public: bytes,
    chain_id: str,
    round_id: int,
    hop: int,
    proven: bool,
) -> list[Step | MixnetError]:
    """This mix's step about each of ``items`` (its round key ``secret``/``public``): for the
    first ``failures`` the evidence that they cannot be peeled
    (:func:`~mixnet.blame.prove_failure`), for the rest the shared secret and its proof
    (:func:`~mixnet.blame.prove_step`); a step that cannot be made is its
    :class:`MixnetError` (a :class:`ValueError` of ``prove_failure`` as an
    :class:`InternalError`). Run in up to ``threads`` parts in ``pool``."""
    items = list(items)

    def prove_one(index: int) -> Step:
        item = items[index]
        if index < failures:
            try:
                return prove_failure(
                    secret, public, item, chain_id=chain_id, round_id=round_id, hop=hop
                )
            except ValueError as exc:
                raise InternalError(str(exc)) from None
        return prove_step(
            secret, public, item, chain_id=chain_id, round_id=round_id, hop=hop, proven=proven
        )

    def prove_part(indices: list[int]) -> list[Step | MixnetError]:
        steps: list[Step | MixnetError] = []
        for index in indices:
            try:
                steps.append(prove_one(index))
            except MixnetError as exc:
                steps.append(exc)
        return steps

    if not items:
        return []
    parts = split_indices(range(len(items)), threads)
    return await _run_parts(pool, prove_part, parts, len(items))


async def check_in_parts(
    pool: Executor,
    threads: int,
    accusations: Sequence[Accusation],
    public_keys: Mapping[int, bytes],
    *,
    chain_id: str,
    round_id: int,
    mixes: int,
    validator: PayloadValidator,
    proven: bool,
) -> list[bool]:
    """Whether each of ``accusations`` (one reply's) holds, as
    :func:`~mixnet.blame.verify_accusations` decides for the whole list: run in up to
    ``threads`` parts in ``pool``, every ``duplicate`` accusation in the first part (they are
    paired with each other)."""
    accusations = list(accusations)

    def check_part(indices: list[int]) -> list[bool]:
        return verify_accusations(
            [accusations[i] for i in indices], public_keys, chain_id=chain_id,
            round_id=round_id, mixes=mixes, validator=validator, proven=proven,
        )  # fmt: skip

    if not accusations:
        return []
    twins = [i for i, a in enumerate(accusations) if a.failure is Failure.DUPLICATE]
    others = [i for i, a in enumerate(accusations) if a.failure is not Failure.DUPLICATE]
    parts = split_indices(others, threads) if others else []
    if twins:
        parts = [twins + parts[0], *parts[1:]] if parts else [twins]
    return await _run_parts(pool, check_part, parts, len(accusations))
