"""The longest ``accused`` reply an honest mix sends fits its predecessor's frame limit
(``NodeSettings.successor_max_frame``) and parses under its limits, for every chain shape:
2 to 5 mixes, every hop, chunks of 1 to 65,536 items, small to large payloads, with and
without ownership proofs.

The reply is built here on its own terms — as many accusations as
:func:`~mixnet.core.trace_caps.accusation_cap` lets the replying mix name, each with a revealed
step at every hop from the replier's to the last mix's and a delivery by the receiver with an
honest audit path — and encoded with the wire codec. Before the limit took the accusations'
steps and deliveries into account, a full reply of a default chain (3 mixes, chunks of 4,096,
4-byte payloads) was twice the limit, so a round with a few hundred bad items could not be
traced."""

from __future__ import annotations

import math

import pytest

from mixnet.accusation_wire import MAX_PAGE_COUNT
from mixnet.blame import Accusation, Failure, Step
from mixnet.chunk_signature import Delivery
from mixnet.core.policy import RoundPolicy
from mixnet.core.trace_caps import accusation_cap
from mixnet.frames import Accused, parse_reply, to_wire
from mixnet.onion import onion_length
from mixnet.settings import NodeSettings
from mixnet.trace_signature import PageProof
from mixnet.wire import decode_frame, encode_frame

#: (chunk size, payload length): every pair whose replies stay below some 100 MB
SHAPES = [
    (chunk, payload)
    for chunk in (1, 2, 3, 7, 8, 64, 511, 4096, 65536)
    for payload in (4, 24, 1000, 16000)
    if chunk * payload <= 1 << 23
]


def settings(hops: int, hop: int, chunk: int, payload: int, proven: bool) -> NodeSettings:
    return NodeSettings(
        chain_id="sizes", name=f"mix{hop}", hop=hop, hops=hops,
        predecessor=None if hop == 0 else f"mix{hop - 1}", predecessor_identity=None,
        successor_url="ws://127.0.0.1:1", messages=6, payload_length=payload,
        policy=RoundPolicy(1, 10, 60.0, chunk_size=chunk), ownership_proofs=proven,
    )  # fmt: skip


def longest_reply(receiver: NodeSettings, *, blame: bool = False) -> bytes:
    """The replying mix (the receiver's successor) names every accusation it may, each an
    ``invalid-payload`` with revealed steps up to the last mix."""
    hops, first, chunk = receiver.hops, receiver.hop + 1, receiver.policy.chunk_size
    steps = tuple(
        Step(h, b"\x01" * onion_length(receiver.payload_length, hops - h,
                                       proven=receiver.ownership_proofs),
             b"\x02" * 32, b"\x03" * 96)
        for h in range(first, hops)
    )  # fmt: skip
    depth = math.ceil(math.log2(chunk)) if chunk > 1 else 0
    delivery = Delivery(receiver.name, 2**32 - 1, 2**32 - 1, 2**32 - 2,
                        (b"\x04" * 32,) * depth, b"\x05" * 64)  # fmt: skip
    one = Accusation(Failure.INVALID_PAYLOAD, steps, delivery)
    cap = accusation_cap(chunk, first + 1)
    frame = Accused(2**32 - 1, (one,) * cap, 2**32 - 1, signature=b"\x06" * 64)
    if blame:  # evidence from a page as long as any, and the refusal
        on_page = PageProof(MAX_PAGE_COUNT, 0, (b"\x07" * 32,) * 16, b"\x08" * 64)
        frame = Accused(
            2**32 - 1, (), 0, blame="x" * 64, evidence=one, proof=on_page, refusal=b"\x09" * 64,
            evidence_page=(one,) * cap,
        )
    return encode_frame(to_wire(frame))


@pytest.mark.parametrize("hops", [2, 3, 4, 5])
@pytest.mark.parametrize("proven", [False, True])
def test_the_longest_accused_reply_fits_and_parses(hops: int, proven: bool) -> None:
    for hop in range(hops - 1):  # receivers whose successor is a mix
        for chunk, payload in SHAPES:
            receiver = settings(hops, hop, chunk, payload, proven)
            limit = receiver.successor_max_frame()
            for blame in (True, False):
                raw = longest_reply(receiver, blame=blame)
                assert len(raw) <= limit, (hops, hop, chunk, payload, len(raw), limit)
                if chunk <= 4096:  # (parsing 16,384 accusations takes a second)
                    reply = parse_reply(decode_frame(raw, max_size=limit), receiver.limits())
                    assert isinstance(reply, Accused)
                    assert (reply.proof is not None) == blame


def test_a_reply_always_carries_a_pair_of_duplicate_accusations() -> None:
    """However small the chunks, a mix before the last may name a pair of ``duplicate``
    accusations (both inputs that peeled to one onion), and its predecessor takes them."""
    for hops in (3, 4, 5):
        for hop in range(hops - 2):
            receiver = settings(hops, hop, 1, 16000, False)
            assert accusation_cap(1, hop + 2) == 2
            steps = tuple(
                Step(h, b"\x01" * onion_length(16000, hops - h), b"\x02" * 32, b"\x03" * 96)
                for h in range(hop + 1, hops - 1)
            )
            pair = (Accusation(Failure.DUPLICATE, steps), Accusation(Failure.DUPLICATE, steps))
            raw = encode_frame(to_wire(Accused(1, pair)))
            assert len(raw) <= receiver.successor_max_frame()
            reply = parse_reply(decode_frame(raw, max_size=len(raw)), receiver.limits())
            assert isinstance(reply, Accused) and len(reply.accusations) == 2


def test_no_accused_reply_comes_from_the_sink() -> None:
    last = settings(3, 2, 4096, 4, False)
    assert last.accused_reply_length() == 0
    assert last.successor_max_frame() == 4096 * (4 + 8) + 64 * 1024
