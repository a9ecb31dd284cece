"""A real chain over sockets, with no cloaknet: mixes, a trivial summing sink, the generic
mixnet client. Every node has its own sqlite store; ports are 127.0.0.1:0."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from mixnet.client import MixnetClient
from mixnet.core.actions import DeliveredBatch
from mixnet.core.policy import RoundPolicy
from mixnet.errors import InternalError
from mixnet.limits import DEFAULT_LIMITS, Limits
from mixnet.localchain import RunningChain, run_local_chain
from mixnet.mix import MixNode
from mixnet.settings import NodeSettings
from mixnet.sink import SinkNode
from mixnet.store import NodeStore, StoreFailed
from tests.mixnet.small_disk import small_disk

HOST = "127.0.0.1"
WIDTH = 4


class SumApp:
    """The trivial application: payloads are 4-byte big-endian numbers; the result is their
    sum and count."""

    def __init__(self, messages: int) -> None:
        self.messages = messages

    def analyze(self, round_id: int, batch: DeliveredBatch) -> Mapping[str, object]:
        ok = len(batch.payloads) == batch.clients * self.messages == batch.count
        return {
            "round": round_id,
            "status": "ok" if ok else "error",
            "clients": batch.clients,
            "sum": sum(int.from_bytes(p, "big") for p in batch.payloads),
        }

    def aborted(self, round_id: int) -> Mapping[str, object]:
        return {"round": round_id, "status": "aborted"}


def running_chain(
    directory: Path,
    *,
    mixes: int,
    messages: int,
    policy: RoundPolicy,
    limits: Limits = DEFAULT_LIMITS,
) -> contextlib.AbstractAsyncContextManager[RunningChain]:
    """A local chain whose sink runs :class:`SumApp` (with the chain's ``[limits]``)."""

    def make_sink(settings: NodeSettings, store: NodeStore) -> SinkNode:
        return SinkNode(settings, store, SumApp(messages))

    return run_local_chain(
        directory,
        make_sink,
        policy,
        messages=messages,
        payload_length=WIDTH,
        mixes=mixes,
        chain_id="t",
        limits=limits,
    )


def payloads(values: Sequence[int]) -> list[bytes]:
    return [v.to_bytes(WIDTH, "big") for v in values]


async def http_get(url: str) -> str:
    """GET ``url`` in a thread (the nodes serve on this event loop)."""

    def get() -> str:
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())

    return await asyncio.to_thread(get)


async def result(client: MixnetClient, round_id: int) -> dict[str, object]:
    while True:
        reply = await client.sink_request({"type": "subscribe", "round": round_id})
        if reply["type"] == "result":
            reply.pop("v", None)
            return reply


async def test_a_chain_of_mixes_and_a_sink_sums_exactly(tmp_path: Path) -> None:
    policy = RoundPolicy(min_users=5, max_users=5, deadline_seconds=30.0, chunk_size=4)
    async with running_chain(tmp_path, mixes=3, messages=3, policy=policy) as chain:
        client = MixnetClient(
            chain.config,
            messages=3,
            payload_length=WIDTH,
            sink_url=chain.config.sink.url,
            retry_for=20,
        )
        async with client:
            values = [[i, 10 * i, 100 * i] for i in range(1, 6)]
            receipts = await asyncio.gather(
                *(client.submit(functools.partial(payloads, v)) for v in values)
            )
            rounds = {r.round_id for r in receipts}
            assert len(rounds) == 1
            out = await asyncio.wait_for(result(client, rounds.pop()), 30)
        assert out["status"] == "ok"
        assert out["clients"] == 5
        assert out["sum"] == sum(map(sum, values))
        status = json.loads(await http_get(f"http://{HOST}:{chain.mixes[0].port}/status"))
        assert status["rounds"][0]["status"] == "confirmed"
        metrics = await http_get(f"http://{HOST}:{chain.sink.port}/metrics")
        assert 'mixnet_rounds_total{hop="3",node="sink",outcome="done"} 1.0' in metrics
        # mix1 and mix2 sign the chunks they send to a mix (and mix2 and mix3 checked them);
        # the last mix's go to the sink, which checks none: unsigned (docs/wire.md § 6.3)
        signers = [m.machine.signing.sign if m.machine.signing else None for m in chain.mixes]
        assert [sign is not None for sign in signers] == [True, True, False]


async def test_an_exact_retry_after_a_restart_of_the_entry_mix_is_counted_once(
    tmp_path: Path,
) -> None:
    """The entry mix stores a submission, then restarts; the identical retry is
    acknowledged again (its receipt survived) and the value is counted once."""
    policy = RoundPolicy(min_users=2, max_users=2, deadline_seconds=30.0, chunk_size=4)
    async with running_chain(tmp_path, mixes=2, messages=2, policy=policy) as chain:
        client = MixnetClient(
            chain.config, messages=2, payload_length=WIDTH, sink_url=chain.config.sink.url
        )
        async with client:
            info = await client.current_round()
            box = client.wrap(payloads([7, 8]), info)
            frame = {"type": "submit", "round": info.round_id, "client": "alice", "box": box}
            first = await client._entry[0].request(frame)
            assert first["type"] == "accepted"
            entry = chain.mixes[0]
            port = entry.port
            assert port is not None
            await entry.stop()
            restarted = MixNode(entry.settings, entry.store, chain.identities["mix1"])
            await restarted.start(HOST, port)
            chain.mixes[0] = restarted
            again = await client._entry[0].request(frame)
            assert again["type"] == "accepted"
            await client.submit(lambda: payloads([1, 2]), client_id="bob")
            out = await asyncio.wait_for(result(client, info.round_id), 30)
        assert out == {
            "type": "result", "round": info.round_id, "status": "ok", "clients": 2, "sum": 18
        }


async def test_an_entry_mix_whose_disk_fills_stops_and_keeps_every_acknowledged_submission(
    tmp_path: Path,
) -> None:
    """Fail-stop on a real full disk: the submission whose commit fails gets
    ``internal-error``, and so does every later one; ``wait_failure`` returns and
    ``/healthz`` answers 503; the store, opened again, holds every acknowledged submission
    in order (and possibly the failed one: its outcome is unknown)."""
    policy = RoundPolicy(min_users=2, max_users=100_000, deadline_seconds=60.0, chunk_size=4)
    with small_disk(tmp_path, 320) as disk:
        async with running_chain(disk, mixes=1, messages=2, policy=policy) as chain:
            client = MixnetClient(
                chain.config, messages=2, payload_length=WIDTH, sink_url=chain.config.sink.url
            )
            async with client:
                info = await client.current_round()

                def frame(i: int) -> dict[str, object]:
                    box = client.wrap(payloads([i, i]), info)
                    return {"type": "submit", "round": info.round_id, "client": f"c{i}", "box": box}

                accepted: list[str] = []
                for i in range(5_000):
                    try:
                        reply = await client._entry[0].request(frame(i))
                    except InternalError as exc:
                        assert "store failed a commit" in str(exc)
                        break
                    assert reply["type"] == "accepted"
                    accepted.append(f"c{i}")
                assert accepted and len(accepted) < 5_000
                entry = chain.mixes[0]
                failure = await asyncio.wait_for(entry.wait_failure(), 5)
                assert isinstance(failure, StoreFailed) and "a commit failed" in str(failure)
                with pytest.raises(InternalError, match="store failed a commit"):
                    await client._entry[0].request(frame(10_000))
                with pytest.raises(urllib.error.HTTPError) as health:
                    await http_get(f"http://{HOST}:{entry.port}/healthz")
                assert health.value.code == 503
                assert "a commit failed" in health.value.read().decode()
        with NodeStore(disk / "mix1.db") as store:
            stored = [s.client for s in store.records().submissions[info.round_id]]
    assert stored[: len(accepted)] == accepted and len(stored) - len(accepted) in (0, 1)


@pytest.mark.parametrize("bad", ["text", "huge", "garbage"])
async def test_bad_frames_get_typed_errors_and_the_node_keeps_serving(
    tmp_path: Path, bad: str
) -> None:
    from websockets.asyncio.client import connect

    from mixnet.wire import decode_frame, encode_frame

    policy = RoundPolicy(min_users=1, max_users=1, deadline_seconds=30.0)
    async with running_chain(tmp_path, mixes=1, messages=1, policy=policy) as chain:
        url = chain.config.mixes[0].url
        async with connect(url, max_size=None, compression=None) as ws:
            messages: dict[str, str | bytes] = {
                "text": "hello",
                "huge": encode_frame({"type": "submit", "pad": b"x" * 70_000}),
                "garbage": b"\xc1\xc1\xc1",
            }
            message = messages[bad]
            await ws.send(message)
            reply = decode_frame(await ws.recv(), max_size=1 << 20)  # type: ignore[arg-type]
            assert reply["type"] == "error"
            await ws.send(encode_frame({"type": "status"}))
            ok = decode_frame(await ws.recv(), max_size=1 << 20)  # type: ignore[arg-type]
            assert ok["type"] == "status"


async def test_the_sink_serves_results_it_no_longer_keeps_in_memory_from_its_store(
    tmp_path: Path,
) -> None:
    policy = RoundPolicy(min_users=1, max_users=1, deadline_seconds=30.0)
    async with running_chain(tmp_path, mixes=1, messages=1, policy=policy) as chain:
        client = MixnetClient(
            chain.config, messages=1, payload_length=WIDTH, sink_url=chain.config.sink.url
        )
        async with client:
            receipt = await client.submit(lambda: payloads([41]))
            out = await asyncio.wait_for(result(client, receipt.round_id), 30)
            assert out["sum"] == 41
            chain.sink.machine.results.clear()  # as pruning does for old rounds
            del chain.sink.machine.rounds[receipt.round_id]
            again = await asyncio.wait_for(result(client, receipt.round_id), 30)
        assert again == out
        base = f"http://{HOST}:{chain.sink.port}"
        body = json.loads(await http_get(f"{base}/rounds/{receipt.round_id}"))
        assert body["sum"] == 41
        assert receipt.round_id in json.loads(await http_get(f"{base}/rounds"))


async def test_probes_log_nothing_at_info_and_metrics_show_connections(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every /healthz, /status and /metrics GET (and the websocket library's per-connection
    lines) is logged at DEBUG only; /metrics counts connections and refusals."""
    policy = RoundPolicy(min_users=1, max_users=1, deadline_seconds=30.0)
    async with running_chain(tmp_path, mixes=1, messages=1, policy=policy) as chain:
        base = f"http://{HOST}:{chain.mixes[0].port}"
        await asyncio.sleep(0.2)  # let the first round open
        with caplog.at_level(logging.DEBUG):
            caplog.clear()
            assert await http_get(f"{base}/healthz") == "ok\n"
            json.loads(await http_get(f"{base}/status"))
            metrics = await http_get(f"{base}/metrics")
            await asyncio.sleep(0.1)
        probes = [r for r in caplog.records if "probe" in r.getMessage()]
        assert len(probes) == 3 and all(r.levelno == logging.DEBUG for r in probes)
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
        assert 'mixnet_connections{hop="0",node="mix1"}' in metrics
        assert 'mixnet_refused_total{hop="0",node="mix1",reason="evicted"} 0.0' in metrics
