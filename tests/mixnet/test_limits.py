"""The [limits] of a running node (mixnet.limits): the connection cap evicts idle
connections first, busy ones are never evicted, idle connections are closed, a connection
is closed at its submission limit — and honest clients and node links carry on."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidHandshake

from mixnet.client import MixnetClient
from mixnet.core.policy import RoundPolicy
from mixnet.limits import REFUSALS, Limits
from mixnet.node import BaseNode
from mixnet.wire import decode_frame, encode_frame
from tests.mixnet.test_nodes import WIDTH, payloads, result, running_chain


def refused(node: BaseNode) -> dict[str, float]:
    """``mixnet_refused_total`` of ``node`` by reason."""
    body, _ = node.metrics.render()
    return {
        sample.labels["reason"]: sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == "mixnet_refused_total"
    }


def connections(node: BaseNode) -> float:
    node._update_gauges()
    body, _ = node.metrics.render()
    return next(
        sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == "mixnet_connections"
    )


async def eventually(check: object, timeout: float = 5.0) -> None:
    assert callable(check)
    loop = asyncio.get_running_loop()
    limit = loop.time() + timeout
    while not check():
        assert loop.time() < limit, "condition not reached"
        await asyncio.sleep(0.02)


async def test_the_cap_evicts_the_longest_idle_connection(tmp_path: Path) -> None:
    policy = RoundPolicy(min_users=2, max_users=2, deadline_seconds=30.0)
    limits = Limits(max_connections=4)
    async with running_chain(tmp_path, mixes=1, messages=1, policy=policy, limits=limits) as chain:
        entry = chain.mixes[0]
        assert refused(entry) == dict.fromkeys(REFUSALS, 0.0)
        port = entry.port
        assert port is not None
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(10)]
        await eventually(lambda: refused(entry)["evicted"] == 6)
        assert entry.guard.count == 4 and connections(entry) == 4
        # the six oldest were dropped (EOF), the four newest are still open
        closed = [await asyncio.wait_for(reader.read(1), 2) == b"" for reader, _ in held[:6]]
        assert all(closed)
        # an honest client is still served (it evicts an idle raw connection in turn)
        client = MixnetClient(chain.config, messages=1, payload_length=WIDTH,
                              sink_url=chain.config.sink.url, connections=1, retry_for=20)
        async with client:
            receipts = [await client.submit(functools.partial(payloads, [v])) for v in (3, 4)]
            out = await asyncio.wait_for(result(client, receipts[0].round_id), 30)
        assert out["sum"] == 7
        for _, writer in held:
            writer.close()


async def test_busy_connections_are_not_evicted_and_a_full_node_refuses(
    tmp_path: Path,
) -> None:
    policy = RoundPolicy(min_users=1, max_users=1, deadline_seconds=30.0)
    limits = Limits(max_connections=2)
    async with running_chain(tmp_path, mixes=1, messages=1, policy=policy, limits=limits) as chain:
        sink = chain.sink
        url = chain.config.sink.url
        # the mix's link and a client waiting for a round that will not finish soon
        await eventually(lambda: sink.guard.count == 1)  # the mix's authenticated link
        busy = [await connect(url, compression=None)]
        await busy[0].send(encode_frame({"type": "subscribe", "round": 10**6}))
        await eventually(lambda: sink.guard.count == 2)
        before = refused(sink)["connections"]
        try:
            async with connect(url, compression=None, open_timeout=2) as extra:
                await extra.recv()
        except (ConnectionClosed, InvalidHandshake, OSError, TimeoutError):
            pass
        assert refused(sink)["connections"] == before + 1
        assert refused(sink)["evicted"] == 0  # neither the busy one nor the link
        await busy[0].close()
        await eventually(lambda: sink.guard.count == 1)
        async with connect(url, compression=None) as later:  # a free slot again
            await later.send(encode_frame({"type": "status"}))
            reply = decode_frame(await later.recv(), max_size=1 << 20)  # type: ignore[arg-type]
            assert reply["type"] == "status"


async def test_idle_connections_are_closed_but_links_and_clients_carry_on(
    tmp_path: Path,
) -> None:
    policy = RoundPolicy(min_users=1, max_users=1, deadline_seconds=30.0)
    limits = Limits(idle_seconds=0.3)
    async with running_chain(tmp_path, mixes=2, messages=1, policy=policy, limits=limits) as chain:
        entry = chain.mixes[0]
        url = chain.config.mixes[0].url
        async with connect(url, compression=None) as idle:
            try:
                await asyncio.wait_for(idle.recv(), 3)
            except ConnectionClosedOK as exc:
                assert exc.rcvd is not None and exc.rcvd.code == 1001
                assert exc.rcvd.reason == "idle"
        assert refused(entry)["idle"] >= 1
        client = MixnetClient(chain.config, messages=1, payload_length=WIDTH,
                              sink_url=chain.config.sink.url, connections=1, retry_for=20)
        async with client:
            first = await client.submit(lambda: payloads([5]))
            assert (await asyncio.wait_for(result(client, first.round_id), 30))["sum"] == 5
            await asyncio.sleep(1.0)  # every connection and link idles past idle_seconds
            second = await client.submit(lambda: payloads([6]))
            assert (await asyncio.wait_for(result(client, second.round_id), 30))["sum"] == 6
        # the authenticated links between the nodes were never closed for idleness
        assert refused(chain.mixes[1])["idle"] == 0


async def test_a_connection_is_closed_at_its_submission_limit(tmp_path: Path) -> None:
    policy = RoundPolicy(min_users=5, max_users=5, deadline_seconds=30.0)
    limits = Limits(max_submissions_per_connection=2)
    async with running_chain(tmp_path, mixes=1, messages=1, policy=policy, limits=limits) as chain:
        client = MixnetClient(chain.config, messages=1, payload_length=WIDTH,
                              sink_url=chain.config.sink.url, connections=1, retry_for=20)
        async with client:
            receipts = [
                await client.submit(functools.partial(payloads, [v])) for v in range(1, 6)
            ]
            assert len({r.round_id for r in receipts}) == 1
            out = await asyncio.wait_for(result(client, receipts[0].round_id), 30)
        assert out["sum"] == 15 and out["clients"] == 5
        assert refused(chain.mixes[0])["submissions"] == 2
