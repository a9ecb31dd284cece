"""The client library's own contracts: what it checks before sending, how ``submit_many``
fails, and how it reads the analyzer's replies. The network is replaced by fakes of the two
:class:`mixnet.client.MixnetClient` calls the library makes (``submit``, ``sink_request``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence

import pytest
from nacl.signing import SigningKey

from cloaknet.chainfile import CloakChain
from cloaknet.client import (
    ChainClient,
    RoundAborted,
    RoundFailed,
    RoundResult,
    SubmissionRejected,
)
from cloaknet.encoding import decode_share, quantize
from cloaknet.errors import InputRangeError
from cloaknet.planner import plan
from cloaknet.protocols import CloakProtocol
from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy
from mixnet.client import Receipt as MixnetReceipt
from mixnet.errors import DuplicateClient, MalformedFrame

USERS = 4


def offline_chain() -> CloakChain:
    """A chain whose nodes are never contacted (every test here fakes the network)."""
    config = ChainConfig(
        chain_id="offline",
        mixes=(NodeInfo("mix1", "ws://127.0.0.1:9", SigningKey.generate().verify_key),),
        sink=NodeInfo("analyzer", "ws://127.0.0.1:10", None),
        sink_table="analyzer",
        policy=RoundPolicy(min_users=USERS, max_users=USERS, deadline_seconds=10.0),
        sections={},
    )
    chosen = plan(USERS, 1.0, 1e-6, mode="sum-preserving")
    return CloakChain(config, CloakProtocol.from_plan(chosen))


class FakeEntry:
    """Stands in for ``MixnetClient.submit``: records every submission's payloads; the one
    numbered ``fail_at`` raises ``DuplicateClient``, the others block until cancelled (and
    record that they were)."""

    def __init__(self, fail_at: int | None = None, *, block: bool = False) -> None:
        self.fail_at = fail_at
        self.block = block
        self.payloads: list[Sequence[bytes]] = []
        self.cancelled = 0

    async def submit(
        self, make_payloads: Callable[[], Sequence[bytes]], *, client_id: str | None = None
    ) -> MixnetReceipt:
        index = len(self.payloads)
        self.payloads.append(make_payloads())
        await asyncio.sleep(0)
        if index == self.fail_at:
            raise DuplicateClient("this client already submitted")
        if self.block:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return MixnetReceipt(7, client_id or f"c{index}", b"\x00" * 32)


async def test_submit_many_sends_nothing_if_one_value_is_invalid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = ChainClient(offline_chain())
    fake = FakeEntry()
    monkeypatch.setattr(net.mixnet, "submit", fake.submit)
    try:
        for bad in (float("nan"), 1.5, -0.1, "0.5"):
            with pytest.raises(InputRangeError):
                await net.submit_many([0.1, 0.2, bad, 0.3])  # type: ignore[list-item]
        assert fake.payloads == []
        with pytest.raises(ValueError, match="concurrency"):
            await net.submit_many([0.1], concurrency=0)
        receipts = await net.submit_many([0.1, 1.5, 0.3], clip=True, concurrency=2)
    finally:
        await net.aclose()
    assert [r.round for r in receipts] == [7, 7, 7]
    assert len(fake.payloads) == 3
    modulus = net.chain.message_modulus
    protocol = net.chain.protocol
    assert isinstance(protocol, CloakProtocol)
    k = protocol.params.precision
    sums = sorted(sum(decode_share(p, modulus) for p in ps) % modulus for ps in fake.payloads)
    assert sums == sorted([quantize(0.1, k), k, quantize(0.3, k)])  # 1.5 was clipped to 1


async def test_submit_many_failure_leaves_no_task_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = ChainClient(offline_chain())
    fake = FakeEntry(fail_at=2, block=True)
    monkeypatch.setattr(net.mixnet, "submit", fake.submit)
    try:
        with pytest.raises(SubmissionRejected) as raised:
            await net.submit_many([0.5] * 10, concurrency=4)
    finally:
        await net.aclose()
    assert raised.value.code == "duplicate-client"
    assert isinstance(raised.value.__cause__, DuplicateClient)
    assert len(fake.payloads) == 4  # the four in flight; nothing started after the failure
    assert fake.cancelled == 3
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_submit_shares_checks_before_sending(monkeypatch: pytest.MonkeyPatch) -> None:
    net = ChainClient(offline_chain())
    fake = FakeEntry()
    monkeypatch.setattr(net.mixnet, "submit", fake.submit)
    m, modulus = net.chain.messages, net.chain.message_modulus
    try:
        with pytest.raises(SubmissionRejected) as raised:
            await net.submit_shares([1] * (m - 1))
        assert raised.value.code == "wrong-count"
        with pytest.raises(TypeError):
            await net.submit_shares([1.5] * m)  # type: ignore[list-item]
        with pytest.raises(ValueError):  # ShareError
            await net.submit_shares([modulus] * m)
        assert fake.payloads == []
        receipt = await net.submit_shares([3] * m, client_id="colluder")
    finally:
        await net.aclose()
    assert (receipt.round, receipt.client) == (7, "colluder")
    assert [decode_share(p, modulus) for p in fake.payloads[0]] == [3] * m


class FakeSink:
    """Stands in for ``MixnetClient.sink_request``: answers with ``replies`` in turn."""

    def __init__(self, *replies: dict[str, object]) -> None:
        self.replies = list(replies)
        self.asked: list[Mapping[str, object]] = []

    async def sink_request(
        self, frame: Mapping[str, object], *, expect: str | Collection[str] | None = None
    ) -> dict[str, object]:
        self.asked.append(frame)
        reply = self.replies.pop(0)
        assert expect is not None and reply["type"] in expect
        return reply


async def read_result(
    monkeypatch: pytest.MonkeyPatch, round_id: int, *replies: dict[str, object]
) -> tuple[RoundResult, FakeSink]:
    net = ChainClient(offline_chain())
    sink = FakeSink(*replies)
    monkeypatch.setattr(net.mixnet, "sink_request", sink.sink_request)
    try:
        return await net.result(round_id, timeout=10), sink
    finally:
        await net.aclose()


async def test_result_waits_through_pending_and_parses_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ok = {"v": 1, "type": "result", "round": 5, "status": "ok", "users": 4, "estimate": 1.5,
          "estimate_exact": "3/2", "protocol": "cloak-sum-preserving"}
    result, sink = await read_result(
        monkeypatch, 5, {"v": 1, "type": "pending", "round": 5}, ok
    )
    assert sink.asked == [{"type": "subscribe", "round": 5}] * 2
    assert (result.round, result.users, result.estimate) == (5, 4, 1.5)
    assert "type" not in result.raw and result.raw["estimate_exact"] == "3/2"


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ({"type": "result", "round": 6, "status": "ok", "users": 4, "estimate": 1.5},
         MalformedFrame),
        ({"type": "pending", "round": 4}, MalformedFrame),
        ({"type": "result", "round": 5, "status": "aborted"}, RoundAborted),
        ({"type": "result", "round": 5, "status": "error", "error": "expected n·m"},
         RoundFailed),
        ({"type": "result", "round": 5, "status": "ok", "users": 4}, MalformedFrame),
        ({"type": "result", "round": 5, "status": "ok", "users": True, "estimate": 1.0},
         MalformedFrame),
    ],
)
async def test_result_refuses_replies_about_other_rounds_and_reports_failures(
    monkeypatch: pytest.MonkeyPatch, reply: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        await read_result(monkeypatch, 5, {"v": 1, **reply})


async def test_result_checks_the_round_id() -> None:
    net = ChainClient(offline_chain())
    try:
        with pytest.raises(ValueError):
            await net.result(-1)
        with pytest.raises(TypeError):
            await net.result("5")  # type: ignore[arg-type]
    finally:
        await net.aclose()
