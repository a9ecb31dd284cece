"""One in-process round of the vector sum: encode every user's vector, shuffle all n·d·m
messages with the ideal shuffler and analyze (:func:`run_vector_round`); what the FL experiment
and the tests run without a chain."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import ParameterError
from cloaknet.protocols.vector import VectorSumProtocol
from cloaknet.protocols.vector_rounding import as_rows
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.skellam import SkellamNoise
from cloaknet.vectorized import shuffle

__all__ = ["VectorRoundResult", "run_vector_round"]



@dataclass(frozen=True)
class VectorRoundResult:
    """One in-process round: the estimate, Σ clip(x_i) and the seconds of each stage."""

    users: int
    estimate: NDArray[np.float64]
    clipped_sum: NDArray[np.float64]
    messages: int
    seconds: dict[str, float]

    @property
    def error(self) -> NDArray[np.float64]:
        """estimate − Σ clip(x_i), per coordinate."""
        diff: NDArray[np.float64] = self.estimate - self.clipped_sum
        return diff


def run_vector_round(
    protocol: VectorSumProtocol,
    x: object,
    rng: RandomSource = SYSTEM_RANDOM,
    *,
    noise: Literal["per-user", "aggregate"] = "per-user",
    clock: Callable[[], float] = time.perf_counter,
) -> VectorRoundResult:
    """Encode every row of ``x``, shuffle all n·d·m messages uniformly
    (:func:`cloaknet.vectorized.shuffle`, the ideal shuffler) and analyze.

    ``noise="aggregate"`` is for accuracy simulations only: instead of every user's own
    Skellam draws it adds their exact total (Skellam of n times the per-user variance, the
    same law as the sum of the users' draws) to the first user's value, so the *estimate*
    has exactly the distribution of a real round but the messages do not (they would not
    be private). The default is the real protocol.
    """
    rows = as_rows(x, protocol.dimension)
    n = rows.shape[0]
    seconds: dict[str, float] = {}
    t0 = clock()
    quantized = protocol.quantize(rows, rng)
    if noise == "per-user":
        values = quantized + protocol.noise(n, rng)
    elif noise == "aggregate":
        total = SkellamNoise(protocol.params.noise_variance * n)
        values = quantized.copy()
        values[0] += total.sample_many(protocol.dimension, rng)
    else:
        raise ParameterError(f"noise must be 'per-user' or 'aggregate', got {noise!r}")
    messages = protocol.encode_values(values, rng)
    t1 = clock()
    seconds["encode"] = t1 - t0
    mixed = shuffle(messages, rng)
    t2 = clock()
    seconds["shuffle"] = t2 - t1
    estimate = protocol.analyze(mixed, n)
    seconds["analyze"] = clock() - t2
    return VectorRoundResult(
        users=n,
        estimate=estimate,
        clipped_sum=protocol.clip_vectors(rows).sum(axis=0),
        messages=int(mixed.size),
        seconds=seconds,
    )
