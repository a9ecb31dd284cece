"""End to end through a real in-process chain: websockets, onions, sqlite, the analyzer."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from cloaknet.client import connect
from cloaknet.encoding import quantize
from cloaknet.localchain import local_chain
from cloaknet.planner import plan
from cloaknet.protocols import CloakProtocol
from mixnet.chain import RoundPolicy


@pytest.mark.parametrize("mode", ["sum-preserving", "single-user"])
async def test_round_through_three_mixes(tmp_path: Path, mode: str) -> None:
    users = 40
    chosen = plan(users, 1.0, 1e-6, mode=mode)
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=60.0)
    values = np.random.default_rng(1).random(users).tolist()
    async with (
        local_chain(tmp_path, CloakProtocol.from_plan(chosen), policy, mixes=3) as chain,
        connect(chain.chain) as net,
    ):
        receipts = await net.submit_many(values, concurrency=8)
        rounds = {r.round for r in receipts}
        assert len(rounds) == 1
        result = await net.result(rounds.pop(), timeout=60)
    assert result.users == users
    rounded = Fraction(sum(quantize(v, chosen.params.precision) for v in values),
                       chosen.params.precision)
    if mode == "sum-preserving":
        assert Fraction(result.raw["estimate_exact"]) == rounded
    else:
        assert abs(result.estimate - float(rounded)) < 10 * chosen.expected_rmse + 1


async def test_equal_plaintext_shares_all_reach_the_analyzer(tmp_path: Path) -> None:
    """With N = 91 and 120 shares, equal share values are certain; mixes must keep them all
    (only replayed *ciphertexts* may be dropped)."""
    from cloaknet.params import CloakParams

    users = 30
    params = CloakParams(modulus=91, precision=1, messages=4, max_users=users)
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=60.0)
    values = [1.0 if i % 3 == 0 else 0.0 for i in range(users)]
    async with (
        local_chain(tmp_path, CloakProtocol(params), policy, mixes=2) as chain,
        connect(chain.chain) as net,
    ):
        receipts = await net.submit_many(values, concurrency=6)
        result = await net.result(receipts[0].round, timeout=60)
    assert result.raw["status"] == "ok"
    assert result.estimate == sum(values) == 10.0


@pytest.mark.parametrize("name", ["bbgn", "blanket", "cheu"])
async def test_comparison_protocols_through_the_chain(tmp_path: Path, name: str) -> None:
    """The chain carries any protocol's fixed-width messages; the analyzer node runs the
    protocol's analyzer and checks n·m."""
    from cloaknet.protocols import make_protocol

    users = 600
    protocol = make_protocol(name, users, 1.0, 1e-6)
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=120.0)
    values = np.random.default_rng(3).random(users)
    async with (
        local_chain(tmp_path, protocol, policy, mixes=2) as chain,
        connect(chain.chain, connections=4) as net,
    ):
        receipts = await net.submit_many(values.tolist(), concurrency=16)
        result = await net.result(receipts[0].round, timeout=120)
    assert result.raw["status"] == "ok" and result.raw["protocol"] == name
    assert result.users == users
    assert result.raw["messages"] == users * int(protocol.messages_per_user)
    assert abs(result.estimate - float(values.sum())) < 6 * protocol.predicted_rmse_for(values)


async def test_the_entry_mix_compacts_its_receipts_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real adapter, a confirmed round's receipts end up compact, and the
    compacting ran in a worker thread (the machine adopted that copy: nothing was compacted
    on the event loop's thread); it holds each client's digest of its accepted box."""
    import asyncio
    import threading

    from mixnet.core.receipts import ReceiptTable

    threads: list[threading.Thread] = []  # where receipts were moved into a table
    load = ReceiptTable._load

    def recording(self: ReceiptTable, source: dict[str, bytes]) -> None:
        if source:
            threads.append(threading.current_thread())
        load(self, source)

    monkeypatch.setattr(ReceiptTable, "_load", recording)
    users = 12
    params_plan = plan(users, 1.0, 1e-6, mode="sum-preserving")
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=60.0)
    async with (
        local_chain(tmp_path, CloakProtocol.from_plan(params_plan), policy, mixes=2) as chain,
        connect(chain.chain) as net,
    ):
        receipts = await net.submit_many([0.5] * users, concurrency=4)
        round_id = receipts[0].round
        await net.result(round_id, timeout=60)
        entry = chain.mixes[0]
        table = entry.machine.rounds[round_id].receipts
        for _ in range(200):  # the entry mix confirms the round after its trace
            if table.is_compact:
                break
            await asyncio.sleep(0.05)
        assert table.is_compact and len(table) == users
        assert threads and threading.main_thread() not in threads
        assert all(len(r.digest) == 32 and table.get(r.client) == r.digest for r in receipts)
        assert table.get("nobody") is None
        # operators see how many receipts the entry mix keeps (0 at a relay)
        body = entry._render_metrics()[0].decode()
        assert f'mixnet_receipts{{hop="0",node="{entry.settings.name}"}} {float(users)}' in body
        relay = chain.mixes[1]
        body = relay._render_metrics()[0].decode()
        assert f'mixnet_receipts{{hop="1",node="{relay.settings.name}"}} 0.0' in body
