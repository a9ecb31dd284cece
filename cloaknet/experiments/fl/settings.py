"""The settings of ``cloaknet experiment fl`` (:class:`FLSettings`) and its presets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from cloaknet.errors import ParameterError

__all__ = [
    "DEFAULT_EPSILONS",
    "NETWORK_QUICK_CLIENTS",
    "NETWORK_QUICK_ROUNDS",
    "QUICK_EPSILONS",
    "FLSettings",
]

#: The ε values of the accuracy-vs-ε sweep (whole training); the headline ε is 3.
DEFAULT_EPSILONS: Final[tuple[float, ...]] = (1.0, 2.0, 3.0, 5.0, 8.0)
QUICK_EPSILONS: Final[tuple[float, ...]] = (1.0, 3.0)
#: ``--network --quick``: few clients (a real round costs d·m onions per client, and m grows
#: as n shrinks; n·m is smallest near n = 10) for few rounds, to finish in about a minute.
NETWORK_QUICK_CLIENTS: Final[int] = 10
NETWORK_QUICK_ROUNDS: Final[int] = 1


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
    ``network``: every cloaknet training round goes through a real local chain of ``mixes``
    mix processes and the analyzer (:mod:`cloaknet.experiments.fl.network`), one chain per
    ε; the baselines stay in process.
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
    network: bool = False
    mixes: int = 3

    def __post_init__(self) -> None:
        for name in ("clients", "rounds", "local_steps", "repeats", "mixes"):
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
        network: bool = False,
        mixes: int = 3,
    ) -> FLSettings:
        """The preset, with any argument given overriding it. In process: ``quick`` is
        ε ∈ {1, 3} and 2 repeats without the per-user timing round; the full run 5 ε
        values and 5 repeats. With ``network`` the sweep is the headline ε only, one
        repeat, no timing round (every round is a real one), and ``quick`` is
        :data:`NETWORK_QUICK_CLIENTS` clients for :data:`NETWORK_QUICK_ROUNDS` rounds."""
        base = cls()
        headline = base.epsilon if epsilon is None else epsilon
        if network:
            default_clients = NETWORK_QUICK_CLIENTS if quick else base.clients
            default_rounds = NETWORK_QUICK_ROUNDS if quick else base.rounds
            default_epsilons: tuple[float, ...] = (headline,)
            default_repeats = 1
        else:
            default_clients, default_rounds = base.clients, base.rounds
            default_epsilons = QUICK_EPSILONS if quick else DEFAULT_EPSILONS
            default_repeats = 2 if quick else 5
        return cls(
            clients=default_clients if clients is None else clients,
            rounds=default_rounds if rounds is None else rounds,
            epsilon=headline,
            epsilons=epsilons or default_epsilons,
            delta=base.delta if delta is None else delta,
            repeats=repeats or default_repeats,
            non_iid=non_iid,
            seed=seed,
            quick=quick,
            per_user_timing=not quick and not network,
            network=network,
            mixes=mixes,
        )
