"""Accusations on the wire: written and read back; every malformed shape is refused."""

from __future__ import annotations

import pytest

from mixnet.accusation_wire import accusation_to_wire, parse_accusations
from mixnet.blame import Accusation, Failure, Step
from mixnet.chunk_signature import Delivery
from mixnet.errors import BadLength, MalformedFrame, WrongCount

STEP = Step(2, b"i" * 80, b"s" * 32, b"p" * 96)
ACC = Accusation(Failure.INVALID_PAYLOAD, (STEP,))


def parse(raw: object) -> tuple[Accusation, ...]:
    return parse_accusations(raw, max_count=2, max_steps=3, max_item_length=100)


def test_round_trip() -> None:
    assert parse([accusation_to_wire(ACC), accusation_to_wire(ACC)]) == (ACC, ACC)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [accusation_to_wire(ACC)] * 3,  # more than max_count
        ["not a map"],
        [{**accusation_to_wire(ACC), "failure": "bored"}],
        [{**accusation_to_wire(ACC), "steps": []}],
        [{**accusation_to_wire(ACC), "steps": [accusation_to_wire(ACC)["steps"][0]] * 4}],  # type: ignore[index]
        [{**accusation_to_wire(ACC), "steps": ["x"]}],
        [{"failure": "invalid-payload", "steps": [{"hop": 2, "item": b"i", "secret": b"s",
                                                   "proof": b"p" * 96}]}],
    ],
)
def test_malformed_accusations_are_refused(raw: object) -> None:
    with pytest.raises((MalformedFrame, BadLength)):
        parse(raw)


def test_a_step_item_longer_than_the_chain_allows_is_refused() -> None:
    long = Accusation(Failure.INVALID_PAYLOAD, (Step(2, b"i" * 101, b"s" * 32, b"p" * 96),))
    with pytest.raises(BadLength):
        parse([accusation_to_wire(long)])


DELIVERY = Delivery("mix1", 3, 5, 4, (b"h" * 32, b"g" * 32), b"z" * 64)
DELIVERED = Accusation(Failure.NO_OWNER, (Step(1, b"i" * 80, b"", b""),), DELIVERY)


def test_deliveries_and_secretless_steps_round_trip() -> None:
    assert parse([accusation_to_wire(DELIVERED)]) == (DELIVERED,)


@pytest.mark.parametrize(
    "change",
    [
        {"position": 5},  # outside the chunk
        {"count": 0},
        {"signature": b"z" * 63},
        {"path": [b"h" * 31]},
        {"path": [b"h" * 32] * 33},
        {"sender": 7},
        {"sender": ""},
        {"count": 1 << 32, "position": 0},  # signed as a u32
        {"chunk": -1},
    ],
)
def test_malformed_deliveries_are_refused(change: dict[str, object]) -> None:
    wire = accusation_to_wire(DELIVERED)
    delivery = wire["delivery"]
    assert isinstance(delivery, dict)
    with pytest.raises((MalformedFrame, BadLength, WrongCount)):
        parse([{**wire, "delivery": {**delivery, **change}}])


def test_accused_and_batch_frames_carry_evidence_and_signatures() -> None:
    from mixnet.frames import Accused, Batch, FrameLimits, parse_reply, parse_request, to_wire

    limits = FrameLimits(chain_id="c", item_length=80, chunk_items=4, mixes=3)
    accused = Accused(7, (ACC,), 0, "mix3", DELIVERED)
    assert parse_reply(to_wire(accused), limits) == accused
    batch = Batch(7, "mix1", 0, 1, 1, 1, (b"i" * 80,), 0, b"s" * 64)
    assert parse_request("batch", to_wire(batch), limits) == batch
    with pytest.raises(BadLength):
        parse_request("batch", {**to_wire(batch), "signature": b"s"}, limits)


def test_an_exclude_frame_may_carry_more_items_than_a_chunk_up_to_its_cap() -> None:
    from mixnet.frames import Exclude, FrameLimits, parse_request, to_wire

    limits = FrameLimits(chain_id="c", item_length=80, chunk_items=4, mixes=3, exclude_items=7)
    seven = Exclude(7, tuple(bytes([i]) * 80 for i in range(7)), 1)
    assert parse_request("exclude", to_wire(seven), limits) == seven
    eight = Exclude(7, (*seven.items, b"x" * 80), 1)
    with pytest.raises(WrongCount):
        parse_request("exclude", to_wire(eight), limits)
    with pytest.raises(WrongCount):  # without a cap of its own: a chunk's worth
        parse_request("exclude", to_wire(seven), FrameLimits("c", item_length=80, chunk_items=4))


def test_a_signed_page_and_a_blame_with_its_evidence_round_trip() -> None:
    from mixnet.frames import Accused, FrameLimits, parse_reply, to_wire
    from mixnet.trace_signature import PageProof

    limits = FrameLimits(chain_id="c", item_length=80, chunk_items=4, mixes=3)
    page = Accused(7, (ACC, DELIVERED), 1, signature=b"s" * 64, more=True)
    assert parse_reply(to_wire(page), limits) == page
    twin = Accusation(Failure.DUPLICATE, (STEP,))
    blame = Accused(7, blame="mix3", evidence=twin, proof=PageProof(2, 1, (b"h" * 32,), b"g" * 64),
                    refusal=b"r" * 64, evidence_page=(ACC, twin))  # fmt: skip
    assert parse_reply(to_wire(blame), limits) == blame


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"signature": b"s" * 63}, BadLength),
        ({"signature": "text"}, MalformedFrame),
        ({"refusal": b"r" * 65}, BadLength),
        ({"evidence_proof": "no"}, MalformedFrame),
        ({"evidence_proof": {"count": 0, "position": 0, "path": [], "signature": b"g" * 64}},
         MalformedFrame),
        ({"evidence_proof": {"count": 2, "position": 2, "path": [], "signature": b"g" * 64}},
         MalformedFrame),
        ({"evidence_proof": {"count": 1 << 16, "position": 0, "path": [],
                             "signature": b"g" * 64}}, MalformedFrame),
        ({"evidence_proof": {"count": 2, "position": 0, "path": [b"h" * 31],
                             "signature": b"g" * 64}}, BadLength),
        ({"evidence_proof": {"count": 2, "position": 0, "path": [b"h" * 32] * 33,
                             "signature": b"g" * 64}}, WrongCount),
        ({"evidence_page": [accusation_to_wire(ACC)] * 5}, MalformedFrame),  # over a page
        ({"evidence_page": ["x"]}, MalformedFrame),
        ({"evidence_page": "x"}, MalformedFrame),
    ],
)
def test_malformed_signatures_and_evidence_are_refused(
    change: dict[str, object], error: type[Exception]
) -> None:
    from mixnet.frames import Accused, FrameLimits, parse_reply, to_wire

    limits = FrameLimits(chain_id="c", item_length=80, chunk_items=4, mixes=3)
    blame = to_wire(Accused(7, blame="mix3", evidence=ACC))
    with pytest.raises(error):
        parse_reply({**blame, **change}, limits)
