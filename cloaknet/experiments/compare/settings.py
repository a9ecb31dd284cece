"""The grid of ``cloaknet experiment compare``: :class:`CompareSettings` and its presets."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from cloaknet.errors import ParameterError
from cloaknet.experiments.compare.lineup import ROWS
from cloaknet.experiments.parallel import default_jobs

__all__ = [
    "DEFAULT_DELTA",
    "DEFAULT_EPSILONS",
    "DEFAULT_MESSAGE_LIMIT",
    "DEFAULT_TRIALS",
    "DEFAULT_USERS",
    "QUICK_EPSILONS",
    "QUICK_TRIALS",
    "QUICK_USERS",
    "CompareSettings",
]

DEFAULT_USERS: Final[tuple[int, ...]] = (100, 1000, 10_000, 100_000, 1_000_000)
QUICK_USERS: Final[tuple[int, ...]] = (100, 1000, 10_000)
DEFAULT_EPSILONS: Final[tuple[float, ...]] = (0.5, 1.0, 2.0)
QUICK_EPSILONS: Final[tuple[float, ...]] = (1.0,)
DEFAULT_DELTA: Final[float] = 1e-6
DEFAULT_TRIALS: Final[int] = 50
QUICK_TRIALS: Final[int] = 10
#: Largest n·m simulated message by message (encode → shuffle → analyze) per trial.
DEFAULT_MESSAGE_LIMIT: Final[int] = 2_000_000


@dataclass(frozen=True)
class CompareSettings:
    """The grid of one run; :meth:`default` fills in the presets.

    Invariants (ParameterError otherwise): ``users`` non-empty, each >= 2; ``epsilons``
    non-empty, each finite > 0; 0 < ``delta`` < 1; ``trials`` >= 2; ``jobs`` >= 1;
    ``protocols`` the rows to run: a non-empty subset of :data:`.lineup.ROWS` (the default
    plans of both modes and every protocol of :data:`cloaknet.protocols.PROTOCOLS`; all of
    them by default, in that order) without repeats;
    ``max_messages_per_trial`` >= 0 (0: every protocol with a sufficient-statistic sampler
    uses it). ``seed`` None draws the protocol randomness from the OS CSPRNG.
    """

    users: tuple[int, ...]
    epsilons: tuple[float, ...]
    delta: float
    trials: int
    jobs: int
    seed: int | None
    quick: bool
    protocols: tuple[str, ...] = ROWS
    max_messages_per_trial: int = DEFAULT_MESSAGE_LIMIT

    def __post_init__(self) -> None:
        if not self.users or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in self.users
        ):
            raise ParameterError(f"users must be integers >= 2, got {self.users!r}")
        if not self.epsilons or any(not math.isfinite(e) or e <= 0 for e in self.epsilons):
            raise ParameterError(f"epsilons must be finite numbers > 0, got {self.epsilons!r}")
        if not 0.0 < self.delta < 1.0:
            raise ParameterError(f"delta must lie in (0, 1), got {self.delta!r}")
        if self.trials < 2:
            raise ParameterError(f"trials must be >= 2, got {self.trials}")
        if self.jobs < 1:
            raise ParameterError(f"jobs must be >= 1, got {self.jobs}")
        unknown = [p for p in self.protocols if p not in ROWS]
        if not self.protocols or unknown or len(set(self.protocols)) != len(self.protocols):
            raise ParameterError(
                f"protocols must be distinct names from {', '.join(ROWS)}; "
                f"got {self.protocols!r}"
            )
        if self.max_messages_per_trial < 0:
            raise ParameterError("max_messages_per_trial must be >= 0")

    @classmethod
    def default(
        cls,
        *,
        users: Sequence[int] | None = None,
        epsilons: Sequence[float] | None = None,
        delta: float | None = None,
        trials: int | None = None,
        jobs: int | None = None,
        seed: int | None = None,
        quick: bool = False,
    ) -> CompareSettings:
        """The preset grid (``quick``: n ∈ {10², 10³, 10⁴}, ε = 1, 10 trials; otherwise
        n ∈ {10², …, 10⁶}, ε ∈ {0.5, 1, 2}, 50 trials), with any given argument overriding
        it; δ defaults to 10⁻⁶ and ``jobs`` to the number of CPUs. Users are sorted and
        deduplicated, as are the ε.

        :raises ParameterError: as the constructor.
        """
        chosen_users = tuple(users) if users else (QUICK_USERS if quick else DEFAULT_USERS)
        chosen_eps = (
            tuple(epsilons) if epsilons else (QUICK_EPSILONS if quick else DEFAULT_EPSILONS)
        )
        return cls(
            users=tuple(sorted({int(n) for n in chosen_users})),
            epsilons=tuple(sorted({float(e) for e in chosen_eps})),
            delta=DEFAULT_DELTA if delta is None else float(delta),
            trials=trials or (QUICK_TRIALS if quick else DEFAULT_TRIALS),
            jobs=jobs or default_jobs(),
            seed=seed,
            quick=quick,
        )
