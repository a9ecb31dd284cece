"""Round policy, HTTP endpoints and restarts, through a real in-process chain."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from fractions import Fraction
from pathlib import Path

import pytest

from cloaknet.client import RoundAborted, connect
from cloaknet.encoding import quantize
from cloaknet.localchain import local_chain
from cloaknet.planner import plan
from cloaknet.protocols import CloakProtocol
from mixnet.chain import RoundPolicy, host_port
from mixnet.mix import MixNode
from mixnet.store import NodeStore


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def http_base(ws_url: str) -> str:
    host, port = host_port(ws_url)
    return f"http://{host}:{port}"


async def test_below_min_at_deadline_aborts_and_clients_resubmit(tmp_path: Path) -> None:
    chosen = plan(3, 1.0, 1e-6, mode="sum-preserving")
    policy = RoundPolicy(min_users=3, max_users=3, deadline_seconds=0.4, below_min="abort")
    async with (
        local_chain(tmp_path, CloakProtocol.from_plan(chosen), policy, mixes=2) as chain,
        connect(chain.chain) as net,
    ):
        first = await net.submit(0.5)
        with pytest.raises(RoundAborted):
            await net.result(first.round, timeout=30)
        # the entry mix has opened the next round; three users now complete it
        receipts = await asyncio.gather(*(net.submit(v) for v in (0.1, 0.2, 0.3)))
        assert {r.round for r in receipts} == {first.round + 1}
        result = await net.result(first.round + 1, timeout=30)
        k = chosen.params.precision
        assert Fraction(result.raw["estimate_exact"]) == Fraction(
            sum(quantize(v, k) for v in (0.1, 0.2, 0.3)), k)


async def test_below_min_at_deadline_waits_then_closes_at_min(tmp_path: Path) -> None:
    chosen = plan(2, 1.0, 1e-6, mode="sum-preserving", max_users=10)
    policy = RoundPolicy(min_users=2, max_users=10, deadline_seconds=0.3, below_min="wait")
    async with (
        local_chain(tmp_path, CloakProtocol.from_plan(chosen), policy, mixes=1) as chain,
        connect(chain.chain) as net,
    ):
        first = await net.submit(0.25)
        await asyncio.sleep(0.8)  # past the deadline with 1 < min_users: still open
        status = chain.mixes[0].status()
        assert status["current_round"] is not None
        second = await net.submit(0.5)
        assert second.round == first.round
        result = await net.result(first.round, timeout=30)
        assert result.users == 2


async def test_http_endpoints(tmp_path: Path) -> None:
    chosen = plan(2, 1.0, 1e-6, mode="sum-preserving")
    policy = RoundPolicy(min_users=2, max_users=2, deadline_seconds=60)
    async with (
        local_chain(tmp_path, CloakProtocol.from_plan(chosen), policy, mixes=2) as chain,
        connect(chain.chain) as net,
    ):
        receipts = await asyncio.gather(net.submit(0.5), net.submit(0.25))
        await net.result(receipts[0].round, timeout=30)
        analyzer = http_base(chain.chain.config.sink.url)
        mix = http_base(chain.chain.config.mixes[0].url)
        for base in (analyzer, mix):
            assert await asyncio.to_thread(http_get, f"{base}/healthz") == (200, "ok\n")
            code, body = await asyncio.to_thread(http_get, f"{base}/status")
            assert code == 200 and json.loads(body)["chain"] == "local"
        code, body = await asyncio.to_thread(http_get, f"{analyzer}/rounds/{receipts[0].round}")
        assert code == 200
        data = json.loads(body)
        assert data["status"] == "ok" and data["users"] == 2 and data["estimate"] == 0.75
        code, body = await asyncio.to_thread(http_get, f"{analyzer}/rounds/999")
        assert code == 404 and json.loads(body)["status"] == "unknown"
        code, _ = await asyncio.to_thread(http_get, f"{analyzer}/rounds/abc")
        assert code == 400
        code, _ = await asyncio.to_thread(http_get, f"{mix}/nowhere")
        assert code == 404
        code, body = await asyncio.to_thread(http_get, f"{mix}/metrics")
        assert code == 200
        assert 'mixnet_rounds_total{hop="0",node="mix1",outcome="confirmed"} 1.0' in body
        assert "mixnet_messages_total" in body and "# TYPE mixnet_frames_total counter" in body


async def test_a_mix_restarted_mid_round_finishes_it_exactly(tmp_path: Path) -> None:
    users = 6
    chosen = plan(users, 1.0, 1e-6, mode="sum-preserving")
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=60)
    values = [i / 10 for i in range(users)]
    async with (
        local_chain(tmp_path, CloakProtocol.from_plan(chosen), policy, mixes=3) as chain,
        connect(chain.chain) as net,
    ):
        first = await net.submit(values[0])  # round 1 is open at every node now
        middle = chain.mixes[1]
        settings, port = middle.settings, middle.port
        assert port is not None
        await middle.stop()
        middle.store.close()
        # the round closes and mix1 forwards into the void: it retries until mix2 is back
        receipts = await asyncio.gather(*(net.submit(v) for v in values[1:]))
        assert {r.round for r in receipts} == {first.round}
        await asyncio.sleep(0.3)
        store = NodeStore(tmp_path / "mix2.db")
        reborn = MixNode(settings, store, middle.identity)
        await reborn.start("127.0.0.1", port)
        try:
            result = await net.result(first.round, timeout=60)
        finally:
            await reborn.stop()
            store.close()
    k = chosen.params.precision
    assert Fraction(result.raw["estimate_exact"]) == Fraction(
        sum(quantize(v, k) for v in values), k)


async def test_the_entry_mix_restarted_mid_round_keeps_what_it_acknowledged(
    tmp_path: Path,
) -> None:
    users = 6
    chosen = plan(users, 1.0, 1e-6, mode="sum-preserving")
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=60)
    values = [i / 8 for i in range(users)]
    async with (
        local_chain(tmp_path, CloakProtocol.from_plan(chosen), policy, mixes=2) as chain,
        connect(chain.chain) as net,
    ):
        early = await asyncio.gather(*(net.submit(v) for v in values[:3]))
        entry = chain.mixes[0]
        settings, port = entry.settings, entry.port
        assert port is not None
        await entry.stop()
        entry.store.close()
        store = NodeStore(tmp_path / "mix1.db")
        reborn = MixNode(settings, store, entry.identity)
        await reborn.start("127.0.0.1", port)
        try:
            late = await asyncio.gather(*(net.submit(v) for v in values[3:]))
            assert {r.round for r in early + late} == {early[0].round}
            result = await net.result(early[0].round, timeout=60)
        finally:
            await reborn.stop()
            store.close()
    k = chosen.params.precision
    assert result.users == users
    assert Fraction(result.raw["estimate_exact"]) == Fraction(
        sum(quantize(v, k) for v in values), k)
