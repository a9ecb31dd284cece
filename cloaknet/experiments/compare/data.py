"""The input data and the randomness streams of the compare experiment.

The input vector x is *data*, not protocol randomness: drawn once per n from numpy's PCG64,
the same for every protocol and ε, so the cells are comparable. The protocol randomness of a
trial comes only from a :class:`~cloaknet.randomness.RandomSource`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from cloaknet.randomness import SYSTEM_RANDOM, DeterministicRandom, RandomSource

__all__ = ["input_vector", "trial_rng"]


def input_vector(users: int, seed: int | None) -> NDArray[np.float64]:
    """The fixed input data at n = ``users``: n floats uniform in [0, 1) from numpy's PCG64
    seeded with (seed or 0, n), the seed taken mod 2^64. The same for every protocol and ε."""
    data_seed = 0 if seed is None else seed & (2**64 - 1)
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence([data_seed, users])))
    x: NDArray[np.float64] = generator.random(users)
    return x


def trial_rng(
    seed: int | None, protocol: str, users: int, epsilon: float, delta: float, trial: int
) -> RandomSource:
    """The protocol randomness of one trial: the OS CSPRNG if ``seed`` is None, else a
    :class:`DeterministicRandom` keyed by every coordinate of the trial (so a seeded run
    replays bit for bit, whatever the number of processes and however trials are chunked)."""
    if seed is None:
        return SYSTEM_RANDOM
    return DeterministicRandom(
        f"cloaknet-compare/{seed}/{protocol}/{users}/{epsilon!r}/{delta!r}/{trial}"
    )
