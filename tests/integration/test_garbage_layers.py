"""Garbage inner layers on a chain with ownership proofs, through a real in-process chain.

A client hides an item that cannot be peeled — random bytes (no ownership proof: ``no-owner``)
or random ciphertext under a valid ownership proof (``undecryptable``) — at hop 1 or hop 2 of
a 3-mix chain. The mix that cannot peel it proves so, the trace runs back to the entry mix,
the submission is excluded, and the round ends with the exact sum of the honest users."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from websockets.asyncio.client import connect as ws_connect

from cloaknet.client import ChainClient, RoundAborted, connect
from cloaknet.encoding import encode_share, quantize
from cloaknet.localchain import LocalChain, local_chain
from cloaknet.params import CloakParams
from cloaknet.protocols import CloakProtocol
from mixnet.chain import RoundPolicy
from mixnet.client import RoundInfo
from mixnet.onion import binding_data, onion_length, seal_layer, wrap
from mixnet.ownership import ciphertext_digest, new_ephemeral, prove_ownership
from mixnet.wire import decode_frame, encode_frame

USERS = 6
PARAMS = CloakParams(modulus=1_000_003, precision=100, messages=4, max_users=USERS + 1)
VALUES = [0.11, 0.25, 0.5, 0.01, 0.99, 0.42]
MIXES = 3


def honest_sum() -> Fraction:
    return Fraction(sum(quantize(v, PARAMS.precision) for v in VALUES), PARAMS.precision)


def garbage(hop: int, length: int, *, owned: bool, chain_id: str, round_id: int) -> bytes:
    """An item for ``hop`` that no key opens: random-looking bytes, or (``owned``) random
    ciphertext under a valid ownership proof."""
    filler = bytes((7 * i + hop) % 256 for i in range(length - 80))
    if not owned:
        return bytes(range(32)) + bytes(48) + filler
    key = new_ephemeral()
    binding = binding_data(chain_id=chain_id, round_id=round_id, hop_index=hop)
    return key.public + prove_ownership(key, ciphertext_digest(filler), binding) + filler


def poisoned_box(net: ChainClient, info: RoundInfo, at: int, owned: bool) -> bytes:
    """A submission whose first inner onion turns into garbage at hop ``at``."""
    chain_id = net.chain.config.chain_id
    keys = info.public_keys
    width = net.chain.payload_length
    shares = [encode_share(1, PARAMS.modulus) for _ in range(PARAMS.messages)]
    items = [
        wrap(s, keys[1:], chain_id=chain_id, round_id=info.round_id, first_hop=1, proven=True)
        for s in shares
    ]
    bad = garbage(at, onion_length(width, MIXES - at, proven=True), owned=owned,
                  chain_id=chain_id, round_id=info.round_id)  # fmt: skip
    if at > 1:
        bad = wrap(bad, keys[1:at], chain_id=chain_id, round_id=info.round_id, first_hop=1,
                   proven=True)  # fmt: skip
    items[0] = bad
    return seal_layer(b"".join(items), keys[0], chain_id=chain_id, round_id=info.round_id,
                      hop_index=0)  # fmt: skip


async def submit_poisoned(chain: LocalChain, net: ChainClient, at: int, owned: bool) -> int:
    info = await net.mixnet.current_round()
    box = poisoned_box(net, info, at, owned)
    frame = {"type": "submit", "round": info.round_id, "client": "poisoner", "box": box}
    async with ws_connect(chain.chain.config.mixes[0].url, compression=None,
                          max_size=1 << 22) as ws:  # fmt: skip
        await ws.send(encode_frame(frame))
        raw = await ws.recv()
    assert isinstance(raw, bytes)
    reply = decode_frame(raw, max_size=1 << 22)
    assert reply["type"] == "accepted", reply  # the entry mix cannot see inside
    return info.round_id


def dropped_in(status: dict[str, object], round_id: int) -> int:
    """Items of ``round_id`` a node dropped, from its ``/status``."""
    rounds = status["rounds"]
    assert isinstance(rounds, list)
    (entry,) = [r for r in rounds if r["round"] == round_id]
    return int(entry.get("dropped", 0))


def policy() -> RoundPolicy:
    return RoundPolicy(min_users=USERS, max_users=USERS + 1, deadline_seconds=60.0)


@pytest.mark.parametrize(
    ("at", "owned"), [(1, False), (1, True), (2, False), (2, True)],
    ids=["hop1-no-owner", "hop1-undecryptable", "hop2-no-owner", "hop2-undecryptable"],
)
async def test_a_garbage_layer_is_traced_and_excluded(tmp_path: Path, at: int, owned: bool) -> None:
    protocol = CloakProtocol(PARAMS)
    async with (
        local_chain(tmp_path, protocol, policy(), mixes=MIXES, ownership_proofs=True) as chain,
        connect(chain.chain) as net,
    ):
        round_id = await submit_poisoned(chain, net, at, owned)
        receipts = await net.submit_many(VALUES, concurrency=3)
        assert {r.round for r in receipts} == {round_id}
        result = await net.result(round_id, timeout=60)
        dropped = [dropped_in(mix.status(), round_id) for mix in chain.mixes]
    assert dropped == [1 if hop == at else 0 for hop in range(MIXES)]  # where it surfaced
    assert result.raw["status"] == "ok", result.raw
    assert result.raw["excluded"] == 1
    assert result.users == USERS
    assert Fraction(result.raw["estimate_exact"]) == honest_sum()


async def test_chunks_smaller_than_a_submission_still_exclude_it(tmp_path: Path) -> None:
    """With chunks of 2 items, the poisoner's 4 items do not fit a chunk's frame; every mix
    still accepts them in one ``exclude`` (its cap: mix 2's accusations' submissions, whole),
    so the submission is excluded and the round exact (it used to hang the round)."""
    small = RoundPolicy(min_users=USERS, max_users=USERS + 1, deadline_seconds=60.0,
                        chunk_size=2)  # fmt: skip
    async with (
        local_chain(tmp_path, CloakProtocol(PARAMS), small, mixes=MIXES,
                    ownership_proofs=True) as chain,
        connect(chain.chain) as net,
    ):  # fmt: skip
        round_id = await submit_poisoned(chain, net, 2, owned=False)
        await net.submit_many(VALUES, concurrency=3)
        result = await net.result(round_id, timeout=60)
    assert result.raw["status"] == "ok", result.raw
    assert result.raw["excluded"] == 1
    assert Fraction(result.raw["estimate_exact"]) == honest_sum()


async def submit_twins(chain: LocalChain, net: ChainClient, *, collide_at: int,
                       proven: bool) -> int:  # fmt: skip
    """Submit, as client ``twins``, a box whose first two onions are distinct up to mix
    ``collide_at`` (a 0-based hop after the entry's) and peel there to one onion; returns the
    round."""
    info = await net.mixnet.current_round()
    cid, keys, r = chain.chain.config.chain_id, info.public_keys, info.round_id
    share = encode_share(1, PARAMS.modulus)
    items = [wrap(share, keys[1:], chain_id=cid, round_id=r, first_hop=1, proven=proven)
             for _ in range(PARAMS.messages)]  # fmt: skip
    twin = wrap(share, keys[collide_at:], chain_id=cid, round_id=r, first_hop=collide_at,
                proven=proven)  # fmt: skip
    items[0], items[1] = (wrap(twin, keys[1:collide_at], chain_id=cid, round_id=r, first_hop=1,
                               proven=proven) for _ in range(2))  # fmt: skip
    assert items[0] != items[1]  # distinct at the entry mix and at mix 2
    box = seal_layer(b"".join(items), keys[0], chain_id=cid, round_id=r, hop_index=0)
    frame = {"type": "submit", "round": r, "client": "twins", "box": box}
    async with ws_connect(chain.chain.config.mixes[0].url, compression=None) as ws:
        await ws.send(encode_frame(frame))
        assert decode_frame(await ws.recv(), max_size=1 << 20)["type"] == "accepted"  # type: ignore[arg-type]
    return r


@pytest.mark.parametrize("proven", [False, True], ids=["plain", "proven"])
async def test_two_onions_that_collide_at_a_later_mix_are_traced_and_excluded(
    tmp_path: Path, proven: bool
) -> None:
    """One client wraps the same hop-2 onion in two different hop-1 layers. The entry mix and
    mix 2 see two distinct items; mix 2 peels both to the same onion, leaves both copies out
    of its batch (else mix 3 would drop the second as an untraced replay and the round would
    abort) and accuses both inputs (``duplicate``, each step revealing a layer its maker
    knew); the entry mix verifies the pair and excludes the submission: the round is exact."""
    async with (
        local_chain(tmp_path, CloakProtocol(PARAMS), policy(), mixes=MIXES,
                    ownership_proofs=proven) as chain,
        connect(chain.chain) as net,
    ):  # fmt: skip
        r = await submit_twins(chain, net, collide_at=2, proven=proven)
        await net.submit_many(VALUES, concurrency=3)
        result = await net.result(r, timeout=60)
        dropped = [dropped_in(mix.status(), r) for mix in chain.mixes]
    assert dropped == [0, 2, 0]  # both copies, at mix 2, in its /status
    assert result.raw["status"] == "ok", result.raw
    assert result.raw["excluded"] == 1 and result.users == USERS
    assert Fraction(result.raw["estimate_exact"]) == honest_sum()


async def test_honest_rounds_on_a_proven_chain_are_exact(tmp_path: Path) -> None:
    protocol = CloakProtocol(PARAMS)
    async with (
        local_chain(tmp_path, protocol, policy(), mixes=MIXES, ownership_proofs=True) as chain,
        connect(chain.chain) as net,
    ):
        receipts = await net.submit_many([*VALUES, 0.3], concurrency=3)
        result = await net.result(receipts[0].round, timeout=60)
    assert result.raw["status"] == "ok" and result.raw["excluded"] == 0
    expected = honest_sum() + Fraction(quantize(0.3, PARAMS.precision), PARAMS.precision)
    assert Fraction(result.raw["estimate_exact"]) == expected


async def test_without_ownership_proofs_a_garbage_layer_aborts_the_round(tmp_path: Path) -> None:
    """The same garbage on a chain without proofs cannot be traced without risking a
    Diffie–Hellman oracle: the round aborts (never a wrong sum, never a revealed link)."""
    protocol = CloakProtocol(PARAMS)
    async with (
        local_chain(tmp_path, protocol, policy(), mixes=MIXES) as chain,
        connect(chain.chain) as net,
    ):
        info = await net.mixnet.current_round()
        chain_id = chain.chain.config.chain_id
        keys = info.public_keys
        width = chain.chain.payload_length
        items = [
            wrap(encode_share(1, PARAMS.modulus), keys[1:], chain_id=chain_id,
                 round_id=info.round_id, first_hop=1)
            for _ in range(PARAMS.messages)
        ]  # fmt: skip
        items[0] = bytes(onion_length(width, MIXES - 1))
        box = seal_layer(b"".join(items), keys[0], chain_id=chain_id, round_id=info.round_id,
                         hop_index=0)  # fmt: skip
        frame = {"type": "submit", "round": info.round_id, "client": "poisoner", "box": box}
        async with ws_connect(chain.chain.config.mixes[0].url, compression=None) as ws:
            await ws.send(encode_frame(frame))
            assert decode_frame(await ws.recv(), max_size=1 << 20)["type"] == "accepted"  # type: ignore[arg-type]
        await net.submit_many(VALUES, concurrency=3)
        with pytest.raises(RoundAborted):
            await net.result(info.round_id, timeout=60)
        stored = await chain.analyzer.result(info.round_id)
    assert (stored is not None and "untraced" in str(stored.get("reason"))) or "without" in str(
        stored
    )


@pytest.mark.parametrize("withheld", [True, False], ids=["page withheld", "page sent"])
async def test_a_mix_that_refuses_a_true_duplicate_is_named_not_its_accuser(
    tmp_path: Path, withheld: bool
) -> None:
    """Four mixes; one client's two onions collide at mix 3, which accuses both inputs
    (``duplicate``, a true pair). mix 2 refuses the first and blames mix 3. Alone a duplicate
    never holds, so before the whole page travelled with such a blame the entry mix named
    mix 3; now mix 2 is named: for withholding the page of the twins, or — with the page,
    where the pair holds — for refusing an accusation that holds against an item it signed."""
    from mixnet.blame import Failure
    from mixnet.core.actions import Reply
    from mixnet.core.trace_tokens import TraceVerified
    from mixnet.frames import Accused

    async with (
        local_chain(tmp_path, CloakProtocol(PARAMS), policy(), mixes=4) as chain,
        connect(chain.chain) as net,
    ):
        middle = chain.mixes[1]
        honest_verified = middle.machine.verified

        def refusing_verified(token, results, now):  # type: ignore[no-untyped-def]
            if not isinstance(token, TraceVerified):
                return honest_verified(token, results, now)
            page = token.reply.accusations
            at = next(i for i, a in enumerate(page) if a.failure is Failure.DUPLICATE)
            signing = middle.machine.signing
            assert signing is not None
            signature = token.reply.signature
            proof, refusal = signing.refusal(token.round_id, "mix2", page, at, signature)
            framed = Accused(token.round_id, blame="mix3", evidence=page[at], proof=proof,
                             refusal=refusal, evidence_page=() if withheld else page)  # fmt: skip
            return [Reply(framed)]

        middle.machine.verified = refusing_verified  # type: ignore[method-assign]
        r = await submit_twins(chain, net, collide_at=3, proven=False)
        await net.submit_many(VALUES, concurrency=3)
        with pytest.raises(RoundAborted):
            await net.result(r, timeout=60)
        stored = await chain.analyzer.result(r)
    assert stored is not None and stored["status"] == "aborted"
    reason = str(stored.get("reason"))
    if withheld:
        assert reason == "mix mix2 refused a duplicate accusation without the page of its twins"
    else:
        assert reason.startswith("mix mix2 sent a provably bad item it had signed"), reason
