"""Trace and exclude through a real in-process chain: real onions, real Chaum–Pedersen steps,
real sqlite. One poisoned submission among honest ones no longer voids the round."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path

import pytest

from cloaknet.client import RoundAborted, connect
from cloaknet.encoding import encode_share, quantize
from cloaknet.localchain import local_chain
from cloaknet.params import CloakParams, share_width
from cloaknet.protocols import CloakProtocol
from mixnet.chain import RoundPolicy

USERS = 6
PARAMS = CloakParams(modulus=1_000_003, precision=100, messages=4, max_users=USERS + 1)
VALUES = [0.11, 0.25, 0.5, 0.01, 0.99, 0.42]


def policy(low: int, high: int) -> RoundPolicy:
    return RoundPolicy(min_users=low, max_users=high, deadline_seconds=60.0)


def honest_sum() -> Fraction:
    return Fraction(sum(quantize(v, PARAMS.precision) for v in VALUES), PARAMS.precision)


@pytest.mark.parametrize("poison", ["share >= N", "all ones"])
async def test_a_poisoned_submission_is_excluded_and_the_sum_is_exact(
    tmp_path: Path, poison: str
) -> None:
    """Six honest users and one whose last layer holds a payload the analyzer cannot take
    (a share >= N, or all ones): the round completes with the exact sum of the six honest
    users and ``excluded = 1``."""
    protocol = CloakProtocol(PARAMS)
    width = share_width(PARAMS.modulus)
    async with (
        local_chain(tmp_path, protocol, policy(USERS, USERS + 1), mixes=3) as chain,
        connect(chain.chain) as net,
    ):
        client = net.mixnet

        def poisoned_payloads() -> list[bytes]:
            good = [encode_share(1, PARAMS.modulus) for _ in range(PARAMS.messages)]
            if poison == "share >= N":
                good[1] = (PARAMS.modulus + 7).to_bytes(width, "big")
            else:
                good[1] = b"\xff" * width
            return good

        bad = client.submit(poisoned_payloads)
        receipts = await net.submit_many(VALUES, concurrency=3)
        bad_receipt = await bad
        assert {r.round for r in receipts} == {bad_receipt.round_id}
        result = await net.result(bad_receipt.round_id, timeout=60)
        metrics = chain.analyzer.metrics.render()[0].decode()
    assert 'mixnet_excluded_submissions_total{hop="3",node="analyzer"} 1.0' in metrics
    assert result.raw["status"] == "ok", result.raw
    assert result.raw["excluded"] == 1
    assert result.users == USERS
    assert Fraction(result.raw["estimate_exact"]) == honest_sum()


async def test_too_few_left_after_exclusion_aborts_the_round(tmp_path: Path) -> None:
    """min_users = all seven: excluding the poisoned one would leave six, so the round is
    aborted, with the reason in the analyzer's result."""
    protocol = CloakProtocol(PARAMS)
    width = share_width(PARAMS.modulus)
    strict = policy(USERS + 1, USERS + 1)
    async with (
        local_chain(tmp_path, protocol, strict, mixes=2) as chain,
        connect(chain.chain) as net,
    ):
        bad = net.mixnet.submit(lambda: [b"\xff" * width] * PARAMS.messages)
        receipts = await net.submit_many(VALUES, concurrency=3)
        round_id = (await bad).round_id
        assert {r.round for r in receipts} == {round_id}
        with pytest.raises(RoundAborted):
            await net.result(round_id, timeout=60)
        stored = await chain.analyzer.result(round_id)
    assert stored is not None and stored["status"] == "aborted"
    assert "fewer than min_users" in str(stored.get("reason"))


async def test_a_mix_that_accuses_an_honest_item_is_blamed_and_learns_no_link(
    tmp_path: Path,
) -> None:
    """The last mix lies: it calls an honest payload invalid and proves its own step for it
    (a real Chaum–Pedersen proof). Its predecessor checks the accusation with the real
    validator, refuses it without proving anything (no link of its own is revealed), and the
    round aborts naming the last mix."""
    protocol = CloakProtocol(PARAMS)
    async with (
        local_chain(tmp_path, protocol, policy(USERS, USERS), mixes=3) as chain,
        connect(chain.chain) as net,
    ):
        last, middle = chain.mixes[2], chain.mixes[1]
        target = encode_share(0, PARAMS.modulus)
        last.machine.validator = lambda payload: payload != target
        proofs: list[int] = []
        honest_prove = middle.prove

        async def counting_prove(action):  # type: ignore[no-untyped-def]
            proofs.append(len(action.items))
            return await honest_prove(action)

        middle.prove = counting_prove  # type: ignore[method-assign]

        def with_a_zero_share() -> list[bytes]:
            return [target] + [encode_share(1, PARAMS.modulus)] * (PARAMS.messages - 1)

        bad = net.mixnet.submit(with_a_zero_share)
        receipts = await net.submit_many(VALUES[:-1], concurrency=3)
        round_id = (await bad).round_id
        assert {r.round for r in receipts} == {round_id}
        with pytest.raises(RoundAborted):
            await net.result(round_id, timeout=60)
        stored = await chain.analyzer.result(round_id)
    assert stored is not None
    assert "mix mix3 could not back its accusations" in str(stored.get("reason"))
    assert proofs == []  # mix2 revealed no input


async def test_the_analyzer_logs_each_result(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A published result is logged once: INFO for ``ok`` (with ``excluded``), WARNING for an
    abort with its reason."""
    import logging

    protocol = CloakProtocol(PARAMS)
    width = share_width(PARAMS.modulus)
    caplog.set_level(logging.INFO, logger="mixnet")
    async with (
        local_chain(tmp_path, protocol, policy(USERS, USERS + 1), mixes=2) as chain,
        connect(chain.chain) as net,
    ):
        bad = net.mixnet.submit(lambda: [b"\xff" * width] * PARAMS.messages)
        await net.submit_many(VALUES, concurrency=3)
        await net.result((await bad).round_id, timeout=60)
    lines = [r for r in caplog.records if "result {" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelname == "INFO"
    assert '"excluded":1' in lines[0].getMessage() and '"status":"ok"' in lines[0].getMessage()


async def test_a_chain_of_one_mix_refuses_a_bad_payload_at_intake(tmp_path: Path) -> None:
    """One mix is entry and last mix at once: it refuses a submission with a payload the
    validator rejects (nothing to trace), and confirms the round without a trace."""
    from mixnet.core.status import RoundStatus
    from mixnet.errors import MalformedFrame

    protocol = CloakProtocol(PARAMS)
    width = share_width(PARAMS.modulus)
    async with (
        local_chain(tmp_path, protocol, policy(USERS, USERS), mixes=1) as chain,
        connect(chain.chain) as net,
    ):
        with pytest.raises(MalformedFrame):
            await net.mixnet.submit(lambda: [b"\xff" * width] * PARAMS.messages)
        receipts = await net.submit_many(VALUES, concurrency=3)
        result = await net.result(receipts[0].round, timeout=60)
        for _ in range(100):  # the entry mix confirms once the analyzer acknowledged
            if chain.mixes[0].machine.status(receipts[0].round) is RoundStatus.CONFIRMED:
                break
            await asyncio.sleep(0.05)
        assert chain.mixes[0].machine.status(receipts[0].round) is RoundStatus.CONFIRMED
    assert result.raw["status"] == "ok" and result.users == USERS
    assert Fraction(result.raw["estimate_exact"]) == honest_sum()


async def test_a_mix_that_corrupts_an_honest_item_is_named(tmp_path: Path) -> None:
    """mix2 swaps an honest item of its output for an onion of its own making with a payload
    the analyzer refuses. mix3 proves the payload bad and attaches mix2's signed delivery of
    the item; mix2 cannot trace it to any input and blames mix3, but its own signature over
    the chunk convicts it: the round aborts naming mix2, and no honest link is revealed."""
    from mixnet.onion import wrap

    protocol = CloakProtocol(PARAMS)
    width = share_width(PARAMS.modulus)
    async with (
        local_chain(tmp_path, protocol, policy(USERS, USERS), mixes=3) as chain,
        connect(chain.chain) as net,
    ):
        middle = chain.mixes[1]
        honest_mixed = middle.machine.mixed
        chain_id = chain.chain.config.chain_id

        def corrupting_mixed(round_id, chunks, signatures=None, *, seed=None):  # type: ignore[no-untyped-def]
            st = middle.machine.rounds[round_id]
            successor_key = st.announcements[1].public_key
            forged = wrap(b"\xff" * width, [successor_key], chain_id=chain_id,
                          round_id=round_id, first_hop=2)  # fmt: skip
            first = [forged, *list(chunks[0])[1:]]
            # the first chunk is a new object: signed anew (the cached signatures are of the
            # honest chunks the mix cut); no seed: the batch is no permutation of the intake,
            # so it is stored whole
            return honest_mixed(round_id, [first, *chunks[1:]], signatures)

        middle.machine.mixed = corrupting_mixed  # type: ignore[method-assign]
        receipts = await net.submit_many(VALUES, concurrency=3)
        round_id = receipts[0].round
        with pytest.raises(RoundAborted):
            await net.result(round_id, timeout=60)
        stored = await chain.analyzer.result(round_id)
    assert stored is not None and stored["status"] == "aborted"
    assert "mix mix2 sent a provably bad item it had signed" in str(stored.get("reason"))


async def test_a_mix_that_makes_up_its_successors_accusation_is_named(tmp_path: Path) -> None:
    """mix2 answers the trace of an honest round with a blame of mix3, whose evidence is an
    accusation it made up (one that does not hold) and its own signed refusal. Before the
    trace pages were signed, the entry mix named mix3, which had accused nothing; now the
    evidence is on no page mix3 signed, so mix2 — who signed that it refused it — is
    named."""
    from mixnet.blame import Accusation, Failure, Step
    from mixnet.core.actions import Reply
    from mixnet.frames import Accused, Trace
    from mixnet.onion import onion_length

    protocol = CloakProtocol(PARAMS)
    width = share_width(PARAMS.modulus)
    async with (
        local_chain(tmp_path, protocol, policy(USERS, USERS), mixes=3) as chain,
        connect(chain.chain) as net,
    ):
        middle = chain.mixes[1]
        honest_on_reply = middle.machine.on_reply

        def framing_on_reply(sent, reply, now):  # type: ignore[no-untyped-def]
            if not (isinstance(sent, Trace) and isinstance(reply, Accused)):
                return honest_on_reply(sent, reply, now)
            step = Step(2, b"\x01" * onion_length(width, 1), b"\x02" * 32, b"\x03" * 96)
            made_up = Accusation(Failure.INVALID_PAYLOAD, (step,))
            signing = middle.machine.signing
            assert signing is not None
            proof, refusal = signing.refusal(sent.round_id, "mix2", (made_up,), 0, None)
            assert proof is None and refusal is not None
            framed = Accused(sent.round_id, blame="mix3", evidence=made_up, refusal=refusal)
            return [Reply(framed)]

        middle.machine.on_reply = framing_on_reply  # type: ignore[method-assign]
        receipts = await net.submit_many(VALUES, concurrency=3)
        round_id = receipts[0].round
        with pytest.raises(RoundAborted):
            await net.result(round_id, timeout=60)
        stored = await chain.analyzer.result(round_id)
    assert stored is not None and stored["status"] == "aborted"
    assert "mix mix2 refused an accusation that mix mix3 did not sign" in str(
        stored.get("reason")
    )
