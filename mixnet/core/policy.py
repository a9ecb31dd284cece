"""The round policy: when the entry mix closes a round, and how batches are cut.

One type for the whole mixnet: the chain file's ``[round]`` table parses into it
(:mod:`mixnet.chain`), the entry mix's intake applies it, and every node cuts its outbound
batch by its ``chunk_size``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "BELOW_MIN",
    "DEFAULT_CHUNK_SIZE",
    "MAX_CHUNK_SIZE",
    "BelowMin",
    "PolicyError",
    "RoundPolicy",
]

BelowMin = Literal["wait", "abort"]
BELOW_MIN: tuple[BelowMin, ...] = ("wait", "abort")

#: Payloads per batch frame between nodes, unless the chain file says otherwise.
DEFAULT_CHUNK_SIZE = 4096
#: Largest allowed ``chunk_size``.
MAX_CHUNK_SIZE = 65536


class PolicyError(ValueError):
    """A policy field is invalid; :attr:`field` names it (e.g. ``"max_users"``)."""

    def __init__(self, problem: str, *, field: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.problem = problem
        self.field = field


def _whole(value: object, field: str, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"expected an integer, got {type(value).__name__}", field=field)
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise PolicyError(f"must be {bound}, got {value}", field=field)


@dataclass(frozen=True)
class RoundPolicy:
    """When a round closes, and how batches are cut.

    * ``min_users`` (>= 1): a round never closes with fewer accepted submissions.
    * ``max_users`` (>= ``min_users``): a round closes as soon as it has this many.
    * ``deadline_seconds`` (finite, > 0): how long a round stays open; an int is accepted
      and stored as a float.
    * ``below_min``: at the deadline with fewer than ``min_users``, ``"wait"`` (close the
      moment ``min_users`` is reached) or ``"abort"`` (clients resubmit in the next round).
    * ``chunk_size`` (1..:data:`MAX_CHUNK_SIZE`): payloads per batch frame between nodes.

    :raises PolicyError: on construction, naming the invalid field.
    """

    min_users: int
    max_users: int
    deadline_seconds: float
    below_min: BelowMin = "wait"
    chunk_size: int = DEFAULT_CHUNK_SIZE

    def __post_init__(self) -> None:
        _whole(self.min_users, "min_users", 1)
        _whole(self.max_users, "max_users", 1)
        if self.max_users < self.min_users:
            raise PolicyError(
                f"must be >= min_users ({self.min_users}), got {self.max_users}",
                field="max_users",
            )
        deadline = self.deadline_seconds
        if isinstance(deadline, bool) or not isinstance(deadline, int | float):
            raise PolicyError(
                f"expected a number, got {type(deadline).__name__}", field="deadline_seconds"
            )
        if not math.isfinite(deadline) or deadline <= 0:
            raise PolicyError(
                f"must be a finite number > 0, got {deadline!r}", field="deadline_seconds"
            )
        object.__setattr__(self, "deadline_seconds", float(deadline))
        if self.below_min not in BELOW_MIN:
            raise PolicyError(
                f'expected "wait" or "abort", got {self.below_min!r}', field="below_min"
            )
        _whole(self.chunk_size, "chunk_size", 1, MAX_CHUNK_SIZE)
