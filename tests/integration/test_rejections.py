"""Every rejection at the entry mix is an error frame, the connection keeps serving, and the
honest round running at the same time still ends with the exact sum."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path

import msgpack
import numpy as np
from nacl.signing import SigningKey
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from cloaknet.client import ChainClient, connect
from cloaknet.encoding import encode_share, quantize
from cloaknet.localchain import LocalChain, local_chain
from cloaknet.planner import plan
from cloaknet.protocols import CloakProtocol
from mixnet.chain import RoundPolicy
from mixnet.client import RoundInfo
from mixnet.keys import sign_link_challenge
from mixnet.limits import DEFAULT_LIMITS
from mixnet.onion import seal_layer, wrap
from mixnet.wire import decode_frame, encode_frame

HONEST = 12


async def ask(ws: ClientConnection, payload: bytes | str) -> dict[str, object]:
    await ws.send(payload)
    raw = await ws.recv()
    assert isinstance(raw, bytes)
    return decode_frame(raw, max_size=1 << 24)


async def still_serving(ws: ClientConnection) -> None:
    reply = await ask(ws, encode_frame({"type": "status"}))
    assert reply["type"] == "status"


async def expect_error(ws: ClientConnection, payload: bytes | str, code: str) -> None:
    reply = await ask(ws, payload)
    assert reply["type"] == "error", reply
    assert reply["code"] == code, reply
    assert isinstance(reply["reason"], str) and reply["reason"]
    await still_serving(ws)


def inner_onions(net: ChainClient, x: float, info: RoundInfo) -> list[bytes]:
    """A fresh encoding of ``x`` as the chain's payloads, each wrapped for the mixes after
    the entry mix (what ``net.submit(x)`` puts inside its box)."""
    chain = net.chain
    payloads = [encode_share(v, chain.message_modulus) for v in chain.protocol.encode_value(x)]
    chain_id = chain.config.chain_id
    return [
        wrap(p, info.public_keys[1:], chain_id=chain_id, round_id=info.round_id, first_hop=1)
        for p in payloads
    ]


def box_of(net: ChainClient, inner: list[bytes], info: RoundInfo, round_id: int = -1) -> bytes:
    """The entry layer around ``inner`` (bound to ``round_id``; default: the round's)."""
    return seal_layer(
        b"".join(inner), info.public_keys[0], chain_id=net.chain.config.chain_id,
        round_id=info.round_id if round_id < 0 else round_id, hop_index=0,
    )  # fmt: skip


async def attack(chain: LocalChain, net: ChainClient, round_id: int) -> None:
    info = await net.mixnet.current_round()
    assert info.round_id == round_id
    good_inner = inner_onions(net, 0.5, info)
    fresh_inner = inner_onions(net, 0.25, info)
    good, fresh = box_of(net, good_inner, info), box_of(net, fresh_inner, info)
    url = chain.chain.config.mixes[0].url
    async with ws_connect(url, compression=None, max_size=1 << 24) as ws:
        def submit(client: str, box: object, rnd: int = round_id) -> bytes:
            return encode_frame({"type": "submit", "round": rnd, "client": client, "box": box})

        await expect_error(ws, b"\xc1\xc1 not msgpack", "malformed-frame")
        await expect_error(ws, "a text frame", "malformed-frame")
        await expect_error(ws, msgpack.packb([1, 2, 3]), "malformed-frame")
        await expect_error(ws, msgpack.packb({"v": 99, "type": "submit"}), "unsupported-version")
        await expect_error(ws, encode_frame({"type": "launch-missiles"}), "unexpected-type")
        await expect_error(ws, encode_frame({"type": "batch", "round": round_id}),
                           "unexpected-type")
        await expect_error(ws, submit("a1", [good]), "malformed-frame")
        await expect_error(ws, submit("a2", good[:-1]), "bad-length")
        tampered = bytearray(good)
        tampered[40] ^= 1
        await expect_error(ws, submit("a3", bytes(tampered)), "decryption-failed")
        # bound to another round: the associated data differs, so it does not authenticate
        other_round = box_of(net, good_inner, info, round_id=round_id + 1)
        await expect_error(ws, submit("a4", other_round), "decryption-failed")
        await expect_error(ws, submit("a5", good, rnd=round_id + 1000), "unknown-round")
        await expect_error(ws, submit("", good), "malformed-frame")
        # over the entry mix's frame limit (room for a full submit-many, docs/wire.md § 3)
        limit = DEFAULT_LIMITS.max_submissions_per_frame * (len(good) + 512) + 65536
        oversize = submit("big", b"\x00" * (limit + 1000))
        await expect_error(ws, oversize, "frame-too-large")
        # a well-formed submission from one more user: counts, and its exact retry is
        # acknowledged again without counting twice
        reply = await ask(ws, submit("late-user", good))
        assert reply["type"] == "accepted"
        reply = await ask(ws, submit("late-user", good))
        assert reply["type"] == "accepted"
        await expect_error(ws, submit("late-user", fresh), "duplicate-client")
        await expect_error(ws, submit("replayer", good), "duplicate-client")
        replayed_inner = box_of(net, [good_inner[0], *fresh_inner[1:]], info)
        await expect_error(ws, submit("replayer", replayed_inner), "duplicate-client")
        self_dup = box_of(net, [fresh_inner[0]] * len(fresh_inner), info)
        await expect_error(ws, submit("self-dup", self_dup), "duplicate-client")
        # the last user of the round: its submission closes the round
        reply = await ask(ws, submit("closer", fresh))
        assert reply["type"] == "accepted"


async def test_rejections_leave_the_honest_round_exact(tmp_path: Path) -> None:
    users = HONEST + 2  # the honest clients, then "late-user" and "closer" over raw frames
    chosen = plan(users, 1.0, 1e-6, mode="sum-preserving")
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=120.0)
    values = np.random.default_rng(7).random(HONEST).tolist()
    async with (
        local_chain(tmp_path, CloakProtocol.from_plan(chosen), policy, mixes=2) as chain,
        connect(chain.chain) as net,
    ):
        receipts = await net.submit_many(values, concurrency=4)
        round_id = receipts[0].round
        await attack(chain, net, round_id)
        result = await net.result(round_id, timeout=60)
        # the round is closed now: a late submission is refused as such
        info = await net.mixnet.current_round(refresh=True)
        assert info.round_id == round_id + 1
        late = box_of(net, inner_onions(net, 0.5, info), info)
        async with ws_connect(chain.chain.config.mixes[0].url, compression=None,
                              max_size=1 << 24) as ws:
            await expect_error(ws, encode_frame({"type": "submit", "round": round_id,
                                                 "client": "too-late", "box": late}),
                               "round-closed")
    k = chosen.params.precision
    expected = Fraction(sum(quantize(v, k) for v in [*values, 0.5, 0.25]), k)
    assert result.users == users
    assert Fraction(result.raw["estimate_exact"]) == expected


async def test_inner_nodes_only_take_orders_from_their_authenticated_predecessor(
    tmp_path: Path,
) -> None:
    chosen = plan(4, 1.0, 1e-6, mode="sum-preserving")
    policy = RoundPolicy(min_users=4, max_users=4, deadline_seconds=60.0)
    async with (
        local_chain(tmp_path, CloakProtocol.from_plan(chosen), policy, mixes=2) as chain,
        connect(chain.chain) as net,
    ):
        await net.mixnet.current_round()  # round 1 is open along the whole chain
        mix2 = chain.chain.config.mixes[1].url
        batch = {"type": "batch", "round": 1, "sender": "mix1", "chunk": 0, "chunks": 1,
                 "clients": 1, "count": 0, "payloads": []}
        async with ws_connect(mix2, compression=None, max_size=1 << 24) as ws:
            await expect_error(ws, encode_frame({"type": "submit", "round": 1, "client": "x",
                                                 "onions": []}), "unexpected-type")
            # a stranger can neither inject a batch nor open or abort rounds
            await expect_error(ws, encode_frame(batch), "unauthorized")
            await expect_error(ws, encode_frame({"type": "abort-round", "round": 1}),
                               "unauthorized")
            await expect_error(ws, encode_frame({"type": "open-round", "round": 5}),
                               "unauthorized")
            # claiming to be mix1 without a challenge, or with a wrong key, fails
            await expect_error(ws, encode_frame({"type": "authenticate", "node": "mix1",
                                                 "signature": b"\x00" * 64}), "unauthorized")
            challenge = await ask(ws, encode_frame({"type": "challenge"}))
            nonce = challenge["nonce"]
            assert isinstance(nonce, bytes)
            forged = sign_link_challenge(SigningKey.generate(), chain_id="local", node="mix1",
                                         challenge=nonce)
            await expect_error(ws, encode_frame({"type": "authenticate", "node": "mix1",
                                                 "signature": forged}), "bad-signature")
            await expect_error(ws, encode_frame(batch), "unauthorized")
            # the real mix1 key authenticates; then the batch checks themselves apply
            nonce = (await ask(ws, encode_frame({"type": "challenge"})))["nonce"]
            assert isinstance(nonce, bytes)
            real = sign_link_challenge(chain.mixes[0].identity, chain_id="local", node="mix1",
                                       challenge=nonce)
            reply = await ask(ws, encode_frame({"type": "authenticate", "node": "mix1",
                                                "signature": real}))
            assert reply["type"] == "authenticated"
            await expect_error(ws, encode_frame({**batch, "sender": "impostor"}),
                               "unknown-round")
            await expect_error(ws, encode_frame({**batch, "round": 77}), "unknown-round")
            await expect_error(ws, encode_frame({**batch, "chunk": 5}), "wrong-count")
        # the round still completes with the honest users
        receipts = await asyncio.gather(*(net.submit(v) for v in (0.1, 0.2, 0.3, 0.4)))
        result = await net.result(receipts[0].round, timeout=60)
        k = chosen.params.precision
        assert result.users == 4
        assert Fraction(result.raw["estimate_exact"]) == Fraction(
            sum(quantize(v, k) for v in (0.1, 0.2, 0.3, 0.4)), k)
