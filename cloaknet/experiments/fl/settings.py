"""The settings of ``cloaknet experiment fl`` (:class:`FLSettings`) and its presets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from cloaknet.errors import ParameterError

__all__ = [
    "DEFAULT_EPSILONS",
    "QUICK_EPSILONS",
    "FLSettings",
]

#: The ε values of the accuracy-vs-ε sweep (whole training); the headline ε is 3.
DEFAULT_EPSILONS: Final[tuple[float, ...]] = (1.0, 2.0, 3.0, 5.0, 8.0)
QUICK_EPSILONS: Final[tuple[float, ...]] = (1.0, 3.0)


@dataclass(frozen=True)
class FLSettings:
    """One run of FedAvg on the digits.

    ``clients`` n (all take part in every round), ``rounds`` T, ``local_steps`` full-batch
    gradient steps at ``learning_rate`` per client and round, ``clip`` C (L2, per update),
    ``server_learning_rate`` (the global model moves by that times the mean update),
    ``epsilon`` the headline ε and ``epsilons`` the sweep (the headline included), ``delta``
    for the whole training, ``repeats`` independent trainings per ε (accuracies are their
    means), ``non_iid`` label shards, ``seed`` (None: fresh data split and model init; the
    pipeline's randomness then comes from the OS CSPRNG), ``per_user_timing``: time one round
    with every user's own noise (the real local randomizer) for ``seconds_per_round``.
    """

    clients: int = 300
    rounds: int = 10
    local_steps: int = 5
    learning_rate: float = 1.0
    clip: float = 1.0
    server_learning_rate: float = 3.0
    epsilon: float = 3.0
    epsilons: tuple[float, ...] = DEFAULT_EPSILONS
    delta: float = 1e-5
    repeats: int = 5
    non_iid: bool = False
    seed: int | None = None
    quick: bool = False
    per_user_timing: bool = True

    def __post_init__(self) -> None:
        for name in ("clients", "rounds", "local_steps", "repeats"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {value!r}")
        if self.clients < 3:
            raise ParameterError(f"clients must be at least 3, got {self.clients}")
        for name in ("learning_rate", "clip", "server_learning_rate", "epsilon"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ParameterError(f"{name} must be a finite number > 0, got {value!r}")
        if not self.epsilons or any(not math.isfinite(e) or e <= 0 for e in self.epsilons):
            raise ParameterError(f"epsilons must be finite numbers > 0, got {self.epsilons!r}")
        if not 0.0 < self.delta < 1.0:
            raise ParameterError(f"delta must lie in (0, 1), got {self.delta!r}")
        eps = tuple(sorted(set(float(e) for e in (*self.epsilons, self.epsilon))))
        object.__setattr__(self, "epsilons", eps)

    @classmethod
    def default(
        cls,
        *,
        quick: bool = False,
        clients: int | None = None,
        rounds: int | None = None,
        epsilon: float | None = None,
        epsilons: tuple[float, ...] | None = None,
        delta: float | None = None,
        repeats: int | None = None,
        non_iid: bool = False,
        seed: int | None = None,
    ) -> FLSettings:
        """The preset (``quick``: ε ∈ {1, 3} and 2 repeats; full: 5 ε values and 5
        repeats, no per-user timing round), with any argument given overriding it."""
        base = cls()
        return cls(
            clients=base.clients if clients is None else clients,
            rounds=base.rounds if rounds is None else rounds,
            epsilon=base.epsilon if epsilon is None else epsilon,
            epsilons=epsilons or (QUICK_EPSILONS if quick else DEFAULT_EPSILONS),
            delta=base.delta if delta is None else delta,
            repeats=repeats or (2 if quick else 5),
            non_iid=non_iid,
            seed=seed,
            quick=quick,
            per_user_timing=not quick,
        )
