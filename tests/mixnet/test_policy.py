"""Tests for mixnet.core.policy: the one RoundPolicy and its validation (PolicyError names the
invalid field)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixnet.core.policy import (
    BELOW_MIN,
    DEFAULT_CHUNK_SIZE,
    MAX_CHUNK_SIZE,
    PolicyError,
    RoundPolicy,
)


def field_of(excinfo: pytest.ExceptionInfo[PolicyError]) -> str:
    return excinfo.value.field


class TestValidPolicies:
    def test_defaults(self) -> None:
        p = RoundPolicy(1, 1, 0.001)
        assert p.below_min == "wait"
        assert p.chunk_size == DEFAULT_CHUNK_SIZE
        assert (p.min_users, p.max_users, p.deadline_seconds) == (1, 1, 0.001)

    def test_every_field_by_keyword(self) -> None:
        p = RoundPolicy(
            min_users=2, max_users=5, deadline_seconds=30.0, below_min="abort", chunk_size=7
        )
        assert (p.min_users, p.max_users, p.deadline_seconds, p.below_min, p.chunk_size) == (
            2,
            5,
            30.0,
            "abort",
            7,
        )

    def test_min_equal_to_max(self) -> None:
        assert RoundPolicy(3, 3, 1.0).max_users == 3

    def test_integer_deadline_is_stored_as_float(self) -> None:
        p = RoundPolicy(1, 2, 10)
        assert p.deadline_seconds == 10.0
        assert type(p.deadline_seconds) is float
        assert p == RoundPolicy(1, 2, 10.0)

    @pytest.mark.parametrize("size", [1, 2, MAX_CHUNK_SIZE])
    def test_chunk_size_bounds_are_inclusive(self, size: int) -> None:
        assert RoundPolicy(1, 1, 1.0, chunk_size=size).chunk_size == size

    @pytest.mark.parametrize("below_min", BELOW_MIN)
    def test_below_min_choices(self, below_min: str) -> None:
        assert RoundPolicy(1, 1, 1.0, below_min).below_min == below_min  # type: ignore[arg-type]

    def test_frozen(self) -> None:
        p = RoundPolicy(1, 2, 10.0)
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.min_users = 5  # type: ignore[misc]

    def test_value_equality_and_hash(self) -> None:
        assert RoundPolicy(1, 2, 3.0, "abort", 4) == RoundPolicy(1, 2, 3.0, "abort", 4)
        assert hash(RoundPolicy(1, 2, 3.0)) == hash(RoundPolicy(1, 2, 3.0))
        assert RoundPolicy(1, 2, 3.0) != RoundPolicy(1, 2, 3.0, chunk_size=5)


class TestPolicyError:
    def test_is_a_value_error_naming_the_field(self) -> None:
        with pytest.raises(ValueError, match=r"^max_users: ") as exc:
            RoundPolicy(3, 2, 10.0)
        err = exc.value
        assert isinstance(err, PolicyError)
        assert err.field == "max_users"
        assert "min_users (3)" in err.problem
        assert str(err) == f"max_users: {err.problem}"

    def test_constructor(self) -> None:
        err = PolicyError("must be nice", field="chunk_size")
        assert (err.field, err.problem, str(err)) == (
            "chunk_size",
            "must be nice",
            "chunk_size: must be nice",
        )

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            # min_users: an int >= 1
            ({"min_users": 0}, "min_users"),
            ({"min_users": -1}, "min_users"),
            ({"min_users": True}, "min_users"),
            ({"min_users": 1.0}, "min_users"),
            ({"min_users": "1"}, "min_users"),
            ({"min_users": None}, "min_users"),
            # max_users: an int >= 1 and >= min_users
            ({"max_users": 0}, "max_users"),
            ({"max_users": -3}, "max_users"),
            ({"max_users": False}, "max_users"),
            ({"max_users": 2.5}, "max_users"),
            ({"min_users": 3, "max_users": 2}, "max_users"),
            ({"min_users": 5, "max_users": 1}, "max_users"),
            # deadline_seconds: a finite number > 0
            ({"deadline_seconds": 0.0}, "deadline_seconds"),
            ({"deadline_seconds": 0}, "deadline_seconds"),
            ({"deadline_seconds": -0.0}, "deadline_seconds"),
            ({"deadline_seconds": -1.0}, "deadline_seconds"),
            ({"deadline_seconds": math.nan}, "deadline_seconds"),
            ({"deadline_seconds": math.inf}, "deadline_seconds"),
            ({"deadline_seconds": -math.inf}, "deadline_seconds"),
            ({"deadline_seconds": True}, "deadline_seconds"),
            ({"deadline_seconds": "10"}, "deadline_seconds"),
            ({"deadline_seconds": None}, "deadline_seconds"),
            # below_min: "wait" or "abort"
            ({"below_min": "drop"}, "below_min"),
            ({"below_min": ""}, "below_min"),
            ({"below_min": "WAIT"}, "below_min"),
            ({"below_min": None}, "below_min"),
            # chunk_size: an int in 1..MAX_CHUNK_SIZE
            ({"chunk_size": 0}, "chunk_size"),
            ({"chunk_size": -1}, "chunk_size"),
            ({"chunk_size": MAX_CHUNK_SIZE + 1}, "chunk_size"),
            ({"chunk_size": True}, "chunk_size"),
            ({"chunk_size": 4.0}, "chunk_size"),
        ],
    )
    def test_invalid_field_is_named(self, kwargs: dict[str, object], field: str) -> None:
        args: dict[str, object] = {
            "min_users": 1,
            "max_users": 4,
            "deadline_seconds": 10.0,
            "below_min": "wait",
            "chunk_size": 16,
        }
        args.update(kwargs)
        with pytest.raises(PolicyError) as exc:
            RoundPolicy(**args)  # type: ignore[arg-type]
        assert field_of(exc) == field
        assert str(exc.value).startswith(f"{field}: ")

    def test_type_errors_say_what_was_given(self) -> None:
        with pytest.raises(PolicyError, match="expected an integer, got str"):
            RoundPolicy("2", 3, 1.0)  # type: ignore[arg-type]
        with pytest.raises(PolicyError, match="expected a number, got bool"):
            RoundPolicy(1, 3, True)
        with pytest.raises(PolicyError, match=r"in 1\.\.65536, got 65537"):
            RoundPolicy(1, 3, 1.0, chunk_size=MAX_CHUNK_SIZE + 1)

    def test_first_invalid_field_in_declaration_order_is_reported(self) -> None:
        with pytest.raises(PolicyError) as exc:
            RoundPolicy(0, 0, -1.0, "never", 0)  # type: ignore[arg-type]
        assert exc.value.field == "min_users"
        with pytest.raises(PolicyError) as exc:
            RoundPolicy(1, 1, -1.0, "never", 0)  # type: ignore[arg-type]
        assert exc.value.field == "deadline_seconds"
        with pytest.raises(PolicyError) as exc:
            RoundPolicy(1, 1, 1.0, "never", 0)  # type: ignore[arg-type]
        assert exc.value.field == "below_min"


@given(
    min_users=st.integers(1, 10_000),
    extra=st.integers(0, 10_000),
    deadline=st.floats(min_value=1e-9, max_value=1e9, allow_nan=False, allow_infinity=False),
    below_min=st.sampled_from(BELOW_MIN),
    chunk_size=st.integers(1, MAX_CHUNK_SIZE),
)
def test_every_valid_combination_constructs(
    min_users: int, extra: int, deadline: float, below_min: str, chunk_size: int
) -> None:
    p = RoundPolicy(min_users, min_users + extra, deadline, below_min, chunk_size)  # type: ignore[arg-type]
    assert p.min_users <= p.max_users
    assert p.deadline_seconds == deadline


@given(min_users=st.integers(-5, 5), max_users=st.integers(-5, 5))
def test_user_bounds_are_valid_exactly_when_1_le_min_le_max(
    min_users: int, max_users: int
) -> None:
    valid = 1 <= min_users <= max_users
    try:
        RoundPolicy(min_users, max_users, 1.0)
    except PolicyError as err:
        assert not valid
        assert err.field == ("min_users" if min_users < 1 else "max_users")
    else:
        assert valid
