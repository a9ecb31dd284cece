"""The whole protocol in one process: n users → encode → uniform shuffle → analyze.

This is the shuffled model of the paper with an ideal shuffler. It is used by the demo, by
simulations and by tests; the networked mixnet replaces :func:`shuffle` with real mix nodes.
Time and randomness are injected (``clock`` and ``rng``), so the core is testable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from cloaknet.encoding import AnalyzerResult, analyze_sum
from cloaknet.noise import sample_truncated_laplace
from cloaknet.params import CloakParams
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.vectorized import encode_many, quantize, shuffle, sum_mod, uniform_residues

__all__ = ["PipelineResult", "Progress", "noise_many", "run_pipeline"]

#: ``progress(stage, done, total)`` is called as each stage advances.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class PipelineResult:
    """What one run measured. Sums are in units of the input (x_i in [0, 1])."""

    users: int
    messages: int
    true_sum: float
    rounded_sum: Fraction  # Σ floor(x_i k) / k
    result: AnalyzerResult
    noisy_users: int
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def estimate(self) -> float:
        return self.result.estimate

    @property
    def error(self) -> float:
        """estimate − true sum."""
        return self.result.estimate - self.true_sum


def noise_many(params: CloakParams, users: int, rng: RandomSource) -> NDArray[np.int64]:
    """Pre-randomizer noise for ``users`` users: each independently, with probability q
    (exact Bernoulli from uniform integers below q's denominator), draws w ~ D_{N,p}.
    Zeros in sum-preserving mode. Values are in integer units (multiples of 1/k)."""
    out = np.zeros(users, dtype=np.int64)
    noise = params.noise
    if noise is None or users == 0:
        return out
    draws = uniform_residues(noise.q.denominator, (users,), rng)
    chosen = np.flatnonzero(draws < noise.q.numerator)
    for i in chosen:
        w = sample_truncated_laplace(params.modulus, noise.scale, rng)
        if not -(2**62) < w < 2**62:  # pragma: no cover - needs an astronomically rare draw
            raise OverflowError("noise sample exceeds the vectorized path's int64 range")
        out[i] = w
    return out


def run_pipeline(
    values: Sequence[float] | NDArray[np.float64],
    params: CloakParams,
    rng: RandomSource = SYSTEM_RANDOM,
    *,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> PipelineResult:
    """Encode every value (Algorithm 1, with the pre-randomizer in single-user mode), shuffle
    all n·m shares uniformly, and run Algorithm 2 with n = len(values).

    :raises InputRangeError: if a value is NaN or outside [0, 1].
    :raises ParameterError: if n exceeds ``params.max_users``.
    """
    report = progress or (lambda stage, done, total: None)
    x = np.asarray(values, dtype=np.float64)
    n = int(x.size)
    seconds: dict[str, float] = {}

    t0 = clock()
    xbar = quantize(x, params.precision)
    noise = noise_many(params, n, rng)
    report("encode", 0, n)
    shares = encode_many(xbar + noise, params.messages, params.modulus, rng)
    report("encode", n, n)
    t1 = clock()
    seconds["encode"] = t1 - t0

    report("shuffle", 0, shares.size)
    mixed = shuffle(shares, rng)
    report("shuffle", shares.size, shares.size)
    t2 = clock()
    seconds["shuffle"] = t2 - t1

    report("analyze", 0, mixed.size)
    result = analyze_sum(sum_mod(mixed, params.modulus), n, params)
    report("analyze", mixed.size, mixed.size)
    seconds["analyze"] = clock() - t2

    return PipelineResult(
        users=n,
        messages=params.messages,
        true_sum=float(np.sum(x, dtype=np.float64)),
        rounded_sum=Fraction(int(np.sum(xbar, dtype=np.int64)), params.precision),
        result=result,
        noisy_users=int(np.count_nonzero(noise)),
        seconds=seconds,
    )
