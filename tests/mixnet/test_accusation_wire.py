"""Accusations on the wire: written and read back; every malformed shape is refused."""

from __future__ import annotations

import pytest

from mixnet.accusation_wire import accusation_to_wire, parse_accusations
from mixnet.blame import Accusation, Failure, Step
from mixnet.errors import BadLength, MalformedFrame

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
