"""Hundreds of bad payloads in one round, through a real in-process chain with the default
chunk size: the trace replies that name them all are the longest a chain sends.

100 clients submit boxes whose every share is not reduced mod N (the last mix's validator
refuses 600 payloads); 4 honest clients submit values. The last mix accuses the 600 payloads
in one reply, mix 2 extends each accusation with its step, the entry mix excludes the 100
submissions, and the round ends with the honest users' exact sum. Each reply is several times
a chunk of the receiver's items: before frame limits allowed for accusations, mix 2's link
refused the last mix's reply as too large, and the round never ended.

With chunks of 64 the same round needs pages: the last mix names 10 accusations a reply, so the
trace runs to 60 pages, and one ``exclude`` frame carries 16 submissions, so the exclusion
runs to 7. Before pages, the accusations beyond the first reply were untraced and the round
aborted."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path

import pytest

from cloaknet.client import connect
from cloaknet.encoding import encode_share, quantize
from cloaknet.localchain import local_chain
from cloaknet.params import CloakParams
from cloaknet.protocols import CloakProtocol
from mixnet.chain import RoundPolicy
from mixnet.core.trace_caps import accusation_cap, exclude_cap
from mixnet.link import Link
from mixnet.settings import FRAME_SLACK

BAD, VALUES = 100, [0.11, 0.25, 0.5, 0.99]
PARAMS = CloakParams(modulus=1_000_003, precision=100, messages=6, max_users=BAD + 4)


@pytest.mark.parametrize("chunk_size", [None, 64], ids=["one-reply", "pages"])
async def test_hundreds_of_bad_payloads_are_traced_and_excluded(
    tmp_path: Path, chunk_size: int | None
) -> None:
    policy = RoundPolicy(min_users=len(VALUES), max_users=BAD + len(VALUES),
                         deadline_seconds=120.0)  # fmt: skip
    if chunk_size is None:
        assert accusation_cap(policy.chunk_size, 3) >= BAD * PARAMS.messages  # one reply
    else:
        policy = RoundPolicy(policy.min_users, policy.max_users, policy.deadline_seconds,
                             chunk_size=chunk_size)  # fmt: skip
        assert accusation_cap(chunk_size, 3) == 10  # 60 pages of trace
        assert exclude_cap(chunk_size, PARAMS.messages) == 96  # 7 pages of exclusion
    async with (
        local_chain(tmp_path, CloakProtocol(PARAMS), policy, mixes=3) as chain,
        connect(chain.chain) as net,
    ):
        info = await net.mixnet.current_round()
        width = len(encode_share(0, PARAMS.modulus))
        # a chunk of mix 2's output items is far shorter than the last mix's reply
        assert policy.chunk_size * (width + 8) + FRAME_SLACK < 600 * 400
        bad = [b"\xff" * width] * PARAMS.messages
        boxes = await asyncio.to_thread(
            lambda: [net.mixnet.wrap(bad, info) for _ in range(BAD)]
        )
        link = Link(chain.chain.config.mixes[0].url, max_size=1 << 20, name="bad",
                    retry_for=30)  # fmt: skip
        try:
            for i, box in enumerate(boxes):
                frame = {"type": "submit", "round": info.round_id, "client": f"bad{i}",
                         "box": box}  # fmt: skip
                await link.request(frame, expect="accepted")
        finally:
            await link.close()
        receipts = await net.submit_many(VALUES, concurrency=4)
        assert {r.round for r in receipts} == {info.round_id}
        result = await asyncio.wait_for(net.result(info.round_id, timeout=90), 100)
    assert result.raw["status"] == "ok", result.raw
    assert result.raw["excluded"] == BAD
    assert result.users == len(VALUES)
    honest = sum(quantize(v, PARAMS.precision) for v in VALUES)
    assert Fraction(result.raw["estimate_exact"]) == Fraction(honest, PARAMS.precision)
