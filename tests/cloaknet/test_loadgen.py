"""The load generator (:mod:`cloaknet.loadgen`): what it wraps peels with the mixes' keys into
the right encodings, its chunks and reports hold together, and it drives a real in-process
chain to an exact result — pre-wrapped or streamed, in threads or (``slow``) in worker
processes — without resending into another round."""

from __future__ import annotations

import os
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from nacl.public import PrivateKey
from nacl.signing import SigningKey

from cloaknet.chainfile import CloakChain
from cloaknet.client import connect
from cloaknet.encoding import decode_share, quantize
from cloaknet.errors import InputRangeError
from cloaknet.loadgen import (
    LoadGenerator,
    RoundMissed,
    RoundSpec,
    WrappedChunk,
    chunk_sizes,
    wrap_values,
)
from cloaknet.loadgen_wrap import init_worker, wrap_task
from cloaknet.localchain import local_chain
from cloaknet.planner import plan
from cloaknet.protocols import CloakProtocol
from cloaknet.randomness import DeterministicRandom
from mixnet.admission import Admission
from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy
from mixnet.client import RoundInfo
from mixnet.core import submission_digest
from mixnet.errors import InternalError, MixnetError, RoundClosed, UnknownRound
from mixnet.link import Backoff
from mixnet.onion import LAYER_OVERHEAD, onion_length, peel_many, submission_length
from mixnet.wire import error_frame

MIXES = 3


def cloak(users: int) -> CloakProtocol:
    """The sum-preserving cloak for ``users`` users: its estimate is the rounded sum."""
    return CloakProtocol.from_plan(plan(users, 1.0, 1e-6, mode="sum-preserving"))


def rounded_sum(values: list[float], protocol: CloakProtocol) -> Fraction:
    k = protocol.params.precision
    return Fraction(sum(quantize(v, k) for v in values), k)


def peel_all(chunk: WrappedChunk, keys: list[PrivateKey], spec: RoundSpec) -> list[bytes]:
    """Every box of ``chunk`` opened by the entry mix into its ``m`` inner onions, and those
    peeled through every later hop with the mixes' secret keys: the payloads, in order."""
    items = [chunk.submission(i) for i in range(len(chunk))]
    for hop, key in enumerate(keys):
        if hop == 0:
            length, split = spec.box_length, spec.messages
        else:
            length, split = onion_length(spec.payload_length, len(keys) - hop), 1
        out = peel_many(items, key, chain_id=spec.chain_id, round_id=spec.round_id,
                        hop_index=hop, expected_length=length, split=split)
        assert all(isinstance(o, bytes) for o in out)
        items = [o for o in out if isinstance(o, bytes)]
        assert len(items) == len(chunk) * spec.messages
    return items


def test_wrapped_submissions_peel_with_the_mixes_keys_into_the_encoded_values() -> None:
    protocol = cloak(20)
    keys = [PrivateKey.generate() for _ in range(MIXES)]
    spec = RoundSpec("c1", 7, tuple(bytes(k.public_key) for k in keys), protocol)
    values = np.random.default_rng(5).random(20).tolist()
    chunk = wrap_values(spec, values, start=3)
    assert chunk.start == 3 and len(chunk) == 20
    m, width = protocol.message_count, protocol.bytes_per_message
    # one box per user: one entry layer around m inner onions of MIXES - 1 layers each
    assert chunk.box_length == spec.box_length == submission_length(width, MIXES, m)
    assert chunk.box_length == LAYER_OVERHEAD + m * (width + (MIXES - 1) * LAYER_OVERHEAD)
    assert spec.inner_length == onion_length(width, MIXES - 1)
    assert len(chunk.boxes) == 20 * chunk.box_length
    assert len(set(chunk.clients)) == 20
    assert len({chunk.digest(i) for i in range(20)}) == 20
    assert chunk.digest(4) == submission_digest(chunk.submission(4))
    assert all(re.fullmatch(r"[0-9a-f]{32}", c) for c in chunk.clients)
    payloads = peel_all(chunk, keys, spec)
    assert all(len(p) == protocol.bytes_per_message for p in payloads)
    shares = [decode_share(p, protocol.message_modulus) for p in payloads]
    # each user's m shares, in order, sum to that user's quantized value modulo N
    modulus, k = protocol.message_modulus, protocol.params.precision
    for i, value in enumerate(values):
        assert sum(shares[i * m : (i + 1) * m]) % modulus == quantize(value, k)
    assert protocol.analyze(np.array(shares, dtype=object), 20) == float(
        rounded_sum(values, protocol)
    )


def test_a_layer_for_another_round_or_chain_does_not_peel() -> None:
    protocol = cloak(4)
    keys = [PrivateKey.generate() for _ in range(2)]
    spec = RoundSpec("c1", 7, tuple(bytes(k.public_key) for k in keys), protocol)
    chunk = wrap_values(spec, [0.5])
    m = protocol.message_count
    for chain_id, round_id, hop in (("c1", 8, 0), ("c2", 7, 0), ("c1", 7, 1)):
        out = peel_many([chunk.submission(0)], keys[0], chain_id=chain_id, round_id=round_id,
                        hop_index=hop, expected_length=spec.box_length, split=m)
        assert len(out) == m and not any(isinstance(o, bytes) for o in out)
    out = peel_many([chunk.submission(0)], keys[0], chain_id="c1", round_id=7, hop_index=0,
                    expected_length=spec.box_length, split=m)
    assert all(isinstance(o, bytes) for o in out)


def test_encoding_uses_the_rng_given_and_wrapping_is_fresh_each_time() -> None:
    protocol = cloak(4)
    keys = [PrivateKey.generate()]
    spec = RoundSpec("c", 1, (bytes(keys[0].public_key),), protocol)
    a = wrap_values(spec, [0.25, 0.75], rng=DeterministicRandom(1))
    b = wrap_values(spec, [0.25, 0.75], rng=DeterministicRandom(1))
    assert peel_all(a, keys, spec) == peel_all(b, keys, spec)  # same shares
    assert a.boxes != b.boxes and a.clients != b.clients  # fresh ephemeral keys and ids
    assert a.digest(0) != b.digest(0)


def test_values_are_checked() -> None:
    spec = RoundSpec("c", 1, (bytes(PrivateKey.generate().public_key),), cloak(4))
    with pytest.raises(InputRangeError):
        wrap_values(spec, [0.5, 1.5])
    assert len(wrap_values(spec, [])) == 0


def test_round_spec_checks_its_keys_and_protocol() -> None:
    protocol = cloak(4)
    with pytest.raises(ValueError):
        RoundSpec("c", 1, (), protocol)
    with pytest.raises(ValueError):
        RoundSpec("c", 1, (b"short",), protocol)
    with pytest.raises(TypeError):
        RoundSpec("c", 1, (bytes(32),), "cloak")  # type: ignore[arg-type]


def test_chunk_submission_bounds_and_shape() -> None:
    chunk = WrappedChunk(0, ("a", "b"), 6, bytes(range(12)))
    assert chunk.submission(0) == bytes(range(6))
    assert chunk.submission(1) == bytes(range(6, 12))
    assert chunk.digest(1) == submission_digest(bytes(range(6, 12)))
    for index in (2, -1):
        with pytest.raises(IndexError):
            chunk.submission(index)
    with pytest.raises(ValueError):
        WrappedChunk(0, ("a",), 6, bytes(5))
    with pytest.raises(ValueError):
        WrappedChunk(0, (), 0, b"")


@pytest.mark.parametrize(("users", "workers", "chunk"), [(0, 2, None), (1, 2, None),
                                                         (1000, 2, None), (10**6, 2, None),
                                                         (10, 3, 4)])  # fmt: skip
def test_chunk_sizes_cover_every_user(users: int, workers: int, chunk: int | None) -> None:
    sizes = chunk_sizes(users, workers, chunk)
    assert sum(sizes) == users and all(s >= 1 for s in sizes)
    if chunk is None and users:
        assert max(sizes) <= 2048
    with pytest.raises(ValueError):
        chunk_sizes(users, 0)
    with pytest.raises(ValueError):
        chunk_sizes(users, 1, 0)


def test_worker_task_reports_its_cpu_and_process() -> None:
    spec = RoundSpec("c", 1, (bytes(PrivateKey.generate().public_key),), cloak(4))
    init_worker(spec)
    try:
        chunk = wrap_task(5, [0.1, 0.2])
    finally:
        init_worker(None)  # type: ignore[arg-type]
    assert chunk.start == 5 and len(chunk) == 2
    assert chunk.worker == os.getpid()
    assert 0 <= chunk.cpu_seconds <= chunk.worker_cpu_total
    with pytest.raises(RuntimeError):
        wrap_task(0, [0.1])


def _offline(admission: Admission | None = None) -> CloakChain:
    config = ChainConfig(
        chain_id="offline",
        mixes=(NodeInfo("mix1", "ws://127.0.0.1:9", SigningKey.generate().verify_key),),
        sink=NodeInfo("analyzer", "ws://127.0.0.1:10", None),
        sink_table="analyzer",
        policy=RoundPolicy(min_users=4, max_users=4, deadline_seconds=10.0),
        sections={},
        admission=admission,
    )
    return CloakChain(config, cloak(4))


def test_generator_arguments_are_checked() -> None:
    with pytest.raises(TypeError):
        LoadGenerator("chain.toml")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        LoadGenerator(_offline(), workers=0)
    with pytest.raises(ValueError):
        LoadGenerator(_offline(), connections=0)
    with pytest.raises(ValueError):
        LoadGenerator(_offline(), chunk_users=0)
    for per_frame in (0, 257):
        with pytest.raises(ValueError, match="max_submissions_per_frame"):
            LoadGenerator(_offline(), per_frame=per_frame)
    issuer = SigningKey.generate().verify_key
    with pytest.raises(ValueError, match="admission"):
        LoadGenerator(_offline(Admission(issuer=issuer)))


async def drive_chain(
    tmp_path: Path, *, prewrap: bool, processes: bool, per_frame: int = 1
) -> None:
    """A chain of two mixes driven by the generator to the exact sum of 24 users
    (``per_frame`` submissions per frame)."""
    users = 24
    protocol = cloak(users)
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=60.0)
    values = np.random.default_rng(2).random(users).tolist()
    async with local_chain(tmp_path, protocol, policy, mixes=2) as running:
        async with LoadGenerator(running.chain, workers=2, connections=3, chunk_users=5,
                                 retry_for=30.0, processes=processes,
                                 per_frame=per_frame) as load:  # fmt: skip
            report = await load.run(values, prewrap=prewrap)
        async with connect(running.chain) as net:
            result = await net.result(report.round_id, timeout=60)
    assert report.sent.submissions == users == report.wrapped.users
    assert [c.start for c in report.wrapped.chunks] == [0, 5, 10, 15, 20]
    assert report.wrapped.workers == 2 and report.sent.connections == 3
    assert 0 < report.wrapped.cpu_seconds <= report.wrapped.worker_cpu_seconds
    assert report.cpu_seconds >= report.wrapped.worker_cpu_seconds
    assert report.prewrap is prewrap
    assert result.users == users
    assert Fraction(result.raw["estimate_exact"]) == rounded_sum(values, protocol)


@pytest.mark.parametrize("prewrap", [True, False])
async def test_drives_a_real_chain_to_the_exact_sum(tmp_path: Path, prewrap: bool) -> None:
    await drive_chain(tmp_path, prewrap=prewrap, processes=False)


@pytest.mark.parametrize("prewrap", [True, False])
async def test_submit_many_frames_drive_a_real_chain_to_the_exact_sum(
    tmp_path: Path, prewrap: bool
) -> None:
    await drive_chain(tmp_path, prewrap=prewrap, processes=False, per_frame=5)


@pytest.mark.slow
@pytest.mark.parametrize("prewrap", [True, False])
async def test_worker_processes_drive_a_real_chain(tmp_path: Path, prewrap: bool) -> None:
    await drive_chain(tmp_path, prewrap=prewrap, processes=True)


async def test_a_submission_after_its_round_closed_is_not_resent(tmp_path: Path) -> None:
    users = 4
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=60.0)
    async with (
        local_chain(tmp_path, cloak(users), policy, mixes=1) as running,
        LoadGenerator(running.chain, workers=1, connections=1, processes=False) as load,
    ):
        info = await load.current_round()
        wrapped = await load.wrap(info, [0.5] * (users + 1))
        with pytest.raises(RoundMissed):
            await load.send(info, wrapped)


class _FlakyLink:
    """A stand-in for the entry mix's link: answers ``internal-error`` ``failures`` times,
    then ``accepted``; records every frame sent."""

    def __init__(self, failures: int, error: MixnetError | None = None) -> None:
        self.failures = failures
        self.error = error
        self.frames: list[dict[str, object]] = []

    async def request(self, frame: dict[str, object], *, expect: str) -> dict[str, object]:
        self.frames.append(frame)
        if self.error is not None:
            raise self.error
        if len(self.frames) <= self.failures:
            raise InternalError("could not store the submission")
        return {"type": "accepted", "round": frame["round"], "client": frame["client"]}


async def test_an_internal_error_resends_the_identical_box_frame() -> None:
    info = RoundInfo(3, 0.0, (bytes(32),))
    box = bytes(range(100))
    async with LoadGenerator(_offline(), workers=1, connections=1, processes=False,
                             retry_for=5.0, backoff=Backoff(0.001, 0.002)) as load:  # fmt: skip
        link = _FlakyLink(failures=2)
        await load._submit(link, info, "user-1", box)  # type: ignore[arg-type]
        assert len(link.frames) == 3
        assert all(f == {"type": "submit", "round": 3, "client": "user-1", "box": box}
                   for f in link.frames)  # fmt: skip
        for error in (RoundClosed("closed"), UnknownRound("gone")):
            with pytest.raises(RoundMissed):
                await load._submit(_FlakyLink(0, error), info, "u", box)  # type: ignore[arg-type]
    async with LoadGenerator(_offline(), workers=1, connections=1, processes=False,
                             retry_for=0.0) as load:  # fmt: skip
        with pytest.raises(InternalError):
            await load._submit(_FlakyLink(failures=5), info, "u", box)  # type: ignore[arg-type]


class _FlakyManyLink:
    """A stand-in for the entry mix's link taking ``submit-many``: refuses the client
    ``flaky`` with ``internal-error`` ``failures`` times and ``closed`` with round-closed;
    records every frame sent."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.frames: list[dict[str, object]] = []

    async def request(self, frame: dict[str, object], *, expect: str) -> dict[str, object]:
        self.frames.append(frame)
        results: list[dict[str, object]] = []
        submissions = frame["submissions"]
        assert isinstance(submissions, list)
        for element in submissions:
            client = element["client"]
            if client == "flaky" and len(self.frames) <= self.failures:
                results.append(error_frame(InternalError("could not store it")))
            elif client == "closed":
                results.append(error_frame(RoundClosed("round 3 is closed")))
            else:
                results.append({"type": "accepted", "round": 3, "client": client})
        return {"type": "receipts", "results": results}


async def test_submit_many_resends_only_what_the_entry_mix_could_not_store() -> None:
    info = RoundInfo(3, 0.0, (bytes(32),))
    box = bytes(range(100))
    async with LoadGenerator(_offline(), workers=1, connections=1, processes=False,
                             retry_for=5.0, backoff=Backoff(0.001, 0.002),
                             per_frame=4) as load:  # fmt: skip
        link = _FlakyManyLink(failures=2)
        users = [("a", box), ("flaky", box), ("b", box)]
        await load._submit_many(link, info, users)  # type: ignore[arg-type]
        assert [len(f["submissions"]) for f in link.frames] == [3, 1, 1]  # type: ignore[arg-type]
        with pytest.raises(RoundMissed):
            users = [("a", box), ("closed", box)]
            await load._submit_many(_FlakyManyLink(0), info, users)  # type: ignore[arg-type]
