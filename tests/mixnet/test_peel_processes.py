"""Peeling in worker processes (mixnet.peel_job, mixnet.peel_worker, mixnet.peel_processes):
real child processes, real layers; every answer is compared with peel_many's in this process."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence

import pytest
from nacl.public import PrivateKey

from mixnet.core.items import Items
from mixnet.errors import BadLength, DecryptionFailed, InternalError, MixnetError
from mixnet.metrics import NodeMetrics
from mixnet.onion import (
    onion_length,
    peel_many,
    seal_layer,
    submission_length,
    wrap_submission,
)
from mixnet.peel_job import (
    FRAME_HEADER,
    PeelJob,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from mixnet.peel_processes import PeelProcesses, pack_items, unpack_results
from mixnet.peel_worker import peel_packed, serve

CHAIN = "test-chain"
KEY = PrivateKey.generate()
PUBLIC = bytes(KEY.public_key)


def job_for(length: int, *, hop: int = 1, split: int = 1, round_id: int = 7) -> PeelJob:
    return PeelJob(bytes(KEY), PUBLIC, CHAIN, round_id, hop, length, split)


def relay_items(count: int, *, hop: int = 1) -> list[bytes]:
    """``count`` onions of one layer for ``KEY`` at ``hop`` (payloads 4 bytes)."""
    return [
        seal_layer(os.urandom(4), PUBLIC, chain_id=CHAIN, round_id=7, hop_index=hop)
        for _ in range(count)
    ]


def reference(job: PeelJob, items: Sequence[object]) -> list[bytes | MixnetError]:
    return peel_many(
        items,  # type: ignore[arg-type]  # deliberately not all bytes
        KEY,
        chain_id=job.chain_id,
        round_id=job.round_id,
        hop_index=job.hop_index,
        expected_length=job.expected_length,
        split=job.split,
        proven=job.proven,
    )


def same(got: Sequence[bytes | MixnetError], want: Sequence[bytes | MixnetError]) -> bool:
    """Equal item by item; errors by class and message."""
    got, want = list(got), list(want)
    if len(got) != len(want):
        return False
    for a, b in zip(got, want, strict=True):
        if isinstance(b, MixnetError):
            if type(a) is not type(b) or str(a) != str(b):
                return False
        elif a != b:
            return False
    return True


@pytest.fixture
async def pool() -> AsyncIterator[PeelProcesses]:
    processes = PeelProcesses(2, name="test")
    await processes.start()
    try:
        yield processes
    finally:
        await processes.close()


# ------------------------------------------------------------------ the job and its codec


def test_a_job_checks_its_arguments_and_hides_its_secret() -> None:
    length = onion_length(4, 1)
    job = job_for(length)
    assert job.width == job.content_length == 4
    assert bytes(KEY).hex() not in repr(job) and bytes(KEY) not in repr(job).encode()
    with pytest.raises(TypeError):
        PeelJob(b"short", PUBLIC, CHAIN, 1, 1, length)
    with pytest.raises(TypeError):
        PeelJob(bytes(KEY), PUBLIC, CHAIN, 1, 1, length, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PeelJob(bytes(KEY), PUBLIC, CHAIN, 1, 1, length, 3)  # 4 bytes are not 3 items
    with pytest.raises(ValueError):
        PeelJob(bytes(KEY), PUBLIC, CHAIN, 1, 1, 10)  # shorter than a layer


def test_requests_and_responses_survive_their_encoding() -> None:
    job = job_for(onion_length(4, 1))
    blob = b"".join(relay_items(3))
    again, blob_again = decode_request(encode_request(job, blob))
    assert again == job and blob_again == blob and again.secret == job.secret
    failures = [(1, "DecryptionFailed", "no")]
    assert decode_response(encode_response(b"abcd", failures)) == (b"abcd", failures)


@pytest.mark.parametrize(
    "body",
    [b"", b"\xc1", b"\x93\x01\x02\x03", b"\x90"],
    ids=["empty", "not msgpack", "short list", "empty list"],
)
def test_unreadable_bodies_are_value_errors(body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_request(body)
    with pytest.raises(ValueError):
        decode_response(body)


def test_a_request_whose_items_do_not_divide_is_refused() -> None:
    job = job_for(onion_length(4, 1))
    with pytest.raises(ValueError, match="whole number"):
        decode_request(encode_request(job, b"x" * (job.expected_length + 1)))


# ------------------------------------------------------------------ packing and unpacking


def test_pack_and_unpack_give_peel_manys_answer_without_a_worker() -> None:
    job = job_for(onion_length(4, 1))
    good = relay_items(4)
    tampered = good[1][:-1] + bytes([good[1][-1] ^ 1])
    items: list[object] = [good[0], "text", tampered, good[2][:-1], good[3]]
    blob, sent, refused = pack_items(job, items)  # type: ignore[arg-type]
    assert sent == [0, 2, 4] and sorted(refused) == [1, 3]
    assert all(isinstance(e, BadLength) for e in refused.values())
    opened, failures = peel_packed(job, blob)
    assert [f[:2] for f in failures] == [(1, "DecryptionFailed")]
    got = unpack_results(job, len(items), sent, refused, opened, failures)
    assert same(got, reference(job, items))


def test_items_of_the_right_width_are_packed_whole() -> None:
    job = job_for(onion_length(4, 1))
    good = relay_items(5)
    blob, sent, refused = pack_items(job, Items.of(good))
    assert blob == b"".join(good) and sent == list(range(5)) and refused == {}


def test_a_clean_relay_answer_is_items_and_an_entry_answer_a_list() -> None:
    relay = job_for(onion_length(4, 1))
    items = relay_items(3)
    opened, failures = peel_packed(relay, b"".join(items))
    got = unpack_results(relay, 3, [0, 1, 2], {}, opened, failures)
    assert isinstance(got, Items) and same(got, reference(relay, items))
    keys = [PUBLIC, bytes(PrivateKey.generate().public_key)]
    boxes = [
        wrap_submission([v * 4, w * 4], keys, chain_id=CHAIN, round_id=7)
        for v, w in ((b"a", b"b"), (b"c", b"d"), (b"e", b"f"))
    ]
    entry = job_for(submission_length(4, 2, 2), hop=0, split=2)
    opened, failures = peel_packed(entry, b"".join(boxes))
    got = unpack_results(entry, 3, [0, 1, 2], {}, opened, failures)
    assert isinstance(got, list) and same(got, reference(entry, boxes))


@pytest.mark.parametrize(
    ("opened", "failures", "match"),
    [
        (b"x" * 3, [], "do not fit"),
        (b"x" * 8, [(5, "DecryptionFailed", "no")], "names item 5"),
        (b"x" * 4, [(0, "DecryptionFailed", "a"), (0, "DecryptionFailed", "b")], "names item 0"),
    ],
)
def test_an_answer_that_does_not_fit_the_request_is_refused(
    opened: bytes, failures: list[tuple[int, str, str]], match: str
) -> None:
    job = job_for(onion_length(4, 1))
    with pytest.raises(ValueError, match=match):
        unpack_results(job, 2, [0, 1], {}, opened, failures)


def test_an_unknown_error_name_reads_as_an_internal_error() -> None:
    job = job_for(onion_length(4, 1))
    got = unpack_results(job, 1, [0], {}, b"", [(0, "SomethingElse", "odd")])
    assert isinstance(got[0], InternalError)


# ------------------------------------------------------------------ the worker program


def test_the_worker_answers_every_request_in_order() -> None:
    job = job_for(onion_length(4, 1))
    batches = [relay_items(2), relay_items(3)]
    source = io.BytesIO()
    for batch in batches:
        body = encode_request(job, b"".join(batch))
        source.write(FRAME_HEADER.pack(len(body)) + body)
    source.seek(0)
    sink = io.BytesIO()
    assert serve(source, sink) == 2
    sink.seek(0)
    for batch in batches:
        (size,) = FRAME_HEADER.unpack(sink.read(FRAME_HEADER.size))
        opened, failures = decode_response(sink.read(size))
        assert failures == [] and opened == b"".join(
            p for p in reference(job, batch) if isinstance(p, bytes)
        )


def test_the_worker_program_exits_2_with_a_reason_on_garbage() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mixnet.peel_worker"],
        input=FRAME_HEADER.pack(3) + b"abc",
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2 and b"mixnet.peel_worker: unreadable peel request" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "mixnet.peel_worker"],
        input=FRAME_HEADER.pack(10) + b"abc",  # the input ends inside a frame
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2 and b"ended" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "mixnet.peel_worker"], input=b"", capture_output=True,
        timeout=30, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == b""


# ------------------------------------------------------------------ the pool


async def test_the_pool_answers_as_peel_many_for_relays_and_the_entry(
    pool: PeelProcesses,
) -> None:
    relay = job_for(onion_length(4, 1))
    good = relay_items(50)
    mixed: list[object] = [*good[:10], b"\x00" * relay.expected_length, 3, *good[10:]]
    got = await pool.run(relay, mixed)  # type: ignore[arg-type]
    assert same(got, reference(relay, mixed))
    assert isinstance(got[10], DecryptionFailed) and isinstance(got[11], BadLength)
    clean = await pool.run(relay, good)
    assert isinstance(clean, Items) and same(clean, reference(relay, good))
    keys = [
        PUBLIC,
        bytes(PrivateKey.generate().public_key),
        bytes(PrivateKey.generate().public_key),
    ]
    boxes = [
        wrap_submission([os.urandom(4) for _ in range(3)], keys, chain_id=CHAIN, round_id=7)
        for _ in range(6)
    ]
    entry = job_for(submission_length(4, 3, 3), hop=0, split=3)
    got = await pool.run(entry, boxes)
    assert isinstance(got, list) and len(got) == 18 and same(got, reference(entry, boxes))


async def test_jobs_spread_over_the_workers_side_by_side(pool: PeelProcesses) -> None:
    job = job_for(onion_length(4, 1))
    batches = [relay_items(40) for _ in range(6)]
    answers = await asyncio.gather(*(pool.run(job, batch) for batch in batches))
    for batch, answer in zip(batches, answers, strict=True):
        assert same(answer, reference(job, batch))
    assert len(pool.pids) == 2 and pool.replaced == 0


async def test_a_killed_worker_fails_its_job_and_is_replaced(pool: PeelProcesses) -> None:
    job = job_for(onion_length(4, 1))
    items = relay_items(8)
    for pid in pool.pids:
        os.kill(pid, signal.SIGKILL)
    outcomes = await asyncio.gather(
        pool.run(job, items), pool.run(job, items), return_exceptions=True
    )
    assert all(isinstance(o, InternalError) for o in outcomes), outcomes
    assert "exited" in str(outcomes[0])
    for _ in range(100):  # replacements start in the background
        if pool.replaced == 2:
            break
        await asyncio.sleep(0.05)
    assert pool.replaced == 2 and len(pool.pids) == 2
    assert same(await pool.run(job, items), reference(job, items))


async def test_a_cancelled_job_costs_its_worker_not_the_pool(pool: PeelProcesses) -> None:
    job = job_for(onion_length(4, 1))
    big = relay_items(2000)
    task = asyncio.create_task(pool.run(job, big))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    small = relay_items(5)
    for _ in range(3):  # the other worker serves meanwhile
        assert same(await pool.run(job, small), reference(job, small))
    for _ in range(100):  # the replacement starts in the background (a new process)
        if pool.replaced:
            break
        await asyncio.sleep(0.05)
    assert pool.replaced == 1 and len(pool.pids) == 2


async def test_closing_stops_every_worker_and_refuses_more_work() -> None:
    processes = PeelProcesses(2)
    with pytest.raises(RuntimeError):
        await processes.run(job_for(onion_length(4, 1)), [])
    await processes.start()
    children = [w.process for w in processes._workers]
    await processes.close()
    assert all(p.returncode == 0 for p in children)
    assert processes.pids == []
    with pytest.raises(RuntimeError):
        await processes.run(job_for(onion_length(4, 1)), [])
    await processes.close()  # idempotent


def test_a_pool_needs_a_worker() -> None:
    with pytest.raises(ValueError):
        PeelProcesses(0)


async def test_metrics_count_the_workers_and_their_cpu(pool: PeelProcesses) -> None:
    metrics = NodeMetrics("m", 1, "mix")
    metrics.add_peel_workers(lambda: pool.pids)

    def scrape() -> tuple[float, float]:
        text = metrics.render()[0].decode()
        values = {}
        for name in ("mixnet_peel_workers", "mixnet_peel_workers_cpu_seconds_total"):
            line = next(x for x in text.splitlines() if x.startswith(name + "{"))
            assert 'node="m"' in line and 'hop="1"' in line
            values[name] = float(line.rsplit(" ", 1)[1])
        return values["mixnet_peel_workers"], values["mixnet_peel_workers_cpu_seconds_total"]

    workers, before = scrape()
    assert workers == 2
    job = job_for(onion_length(4, 1))
    await asyncio.gather(*(pool.run(job, relay_items(1500)) for _ in range(2)))
    _, after = scrape()
    assert after - before >= 0.05  # 3,000 layers: about 0.1 s of the workers' CPU
    for pid in pool.pids:
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(InternalError):
        await pool.run(job, relay_items(1))
    for _ in range(100):
        if pool.replaced >= 1 and len(pool.pids) == 2:
            break
        await asyncio.sleep(0.05)
    _, later = scrape()
    assert later >= after  # a worker's CPU stays counted once it has ended (reaped)
