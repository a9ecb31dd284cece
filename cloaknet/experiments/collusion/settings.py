"""The grid of ``cloaknet experiment collusion``: :class:`CollusionSettings` and its presets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from cloaknet.adversary import Mode
from cloaknet.experiments.parallel import default_jobs

__all__ = ["MODES", "CollusionSettings"]

#: The two neighbouring notions, in the order of every table and plot.
MODES: Final[tuple[Mode, ...]] = ("sum-preserving", "single-user")


@dataclass(frozen=True)
class CollusionSettings:
    """The grid of one run. :meth:`default` gives the two presets.

    ``trials`` rounds per grid point; ``precision`` k and ``modulus`` N of the simulated
    views; ``m_values`` the messages-per-user sweep; ``big_m`` the m of the colluder,
    profile and behaviour sweeps; ``colluder_users`` n and ``colluder_counts`` the |C| of the
    colluder sweep; ``smooth_m`` × ``smooth_moduli`` × ``gammas`` the smoothness grid;
    ``noise_epsilon`` = k·ln(1/p) of the single-user noise; ``single_user_q`` the noise
    probability q (a fraction as text, e.g. "1/2"); ``networked_*`` the rounds, m and N of
    the networked chain. ``seed`` None draws every simulated round from the OS CSPRNG.
    """

    trials: int
    jobs: int
    seed: int | None
    quick: bool
    precision: int
    modulus: int
    m_values: tuple[int, ...]
    big_m: int
    colluder_users: int
    colluder_counts: tuple[int, ...]
    smooth_m: tuple[int, ...]
    smooth_moduli: tuple[int, ...]
    gammas: tuple[float, ...]
    noise_epsilon: float
    single_user_q: str
    networked_rounds: int
    networked_m: int
    networked_modulus: int

    @classmethod
    def default(
        cls, *, trials: int | None, jobs: int | None, seed: int | None, quick: bool
    ) -> CollusionSettings:
        """The preset grid (``quick``: 200 trials, a smaller grid, 6 networked rounds;
        otherwise 400 trials and 20 networked rounds), ``trials`` and ``jobs`` overriding
        it when given (``jobs`` defaults to the number of CPUs)."""
        if quick:
            return cls(
                trials=trials or 200,
                jobs=jobs or default_jobs(),
                seed=seed,
                quick=True,
                precision=10,
                modulus=10007,
                m_values=(1, 2, 3, 4, 8, 12, 20),
                big_m=20,
                colluder_users=100,
                colluder_counts=(0, 50, 90, 95, 98, 99),
                smooth_m=(12, 20),
                smooth_moduli=(1009, 10007),
                gammas=(0.01, 0.05, 0.1, 0.5),
                noise_epsilon=0.5,
                single_user_q="1/2",
                networked_rounds=6,
                networked_m=8,
                networked_modulus=1009,
            )
        return cls(
            trials=trials or 400,
            jobs=jobs or default_jobs(),
            seed=seed,
            quick=False,
            precision=10,
            modulus=10007,
            m_values=(1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20),
            big_m=20,
            colluder_users=100,
            colluder_counts=(0, 50, 80, 90, 95, 98, 99),
            smooth_m=(8, 12, 16, 20),
            smooth_moduli=(1009, 10007),
            gammas=(0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 0.9),
            noise_epsilon=0.5,
            single_user_q="1/2",
            networked_rounds=20,
            networked_m=8,
            networked_modulus=1009,
        )

    @property
    def noise_scale(self) -> Fraction:
        """Noise scale t with k·ln(1/p) = noise_epsilon (Lemma 11's noise term)."""
        return Fraction(self.precision) / Fraction(self.noise_epsilon).limit_denominator(1000)

    def colluder_q(self) -> Fraction:
        """q for the colluder sweep: the tail e^(−q·h) = 1% at h = 0.1·n honest users, the
        fewest Lemma 13 allows."""
        honest = max(1, round(0.1 * self.colluder_users))
        return Fraction(min(1.0, math.log(100) / honest)).limit_denominator(10**6)
