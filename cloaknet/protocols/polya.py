"""Pólya (negative binomial) noise whose sum over the honest users is discrete Laplace.

If each of n_h users adds X_i − Y_i with X_i, Y_i ~ Pólya(1/n_h, α) independent, the total is
discrete Laplace, P[z] = (1−α)/(1+α)·α^|z|, which is ε-DP for sensitivity Δ when
α = exp(−ε/Δ). Pólya(r, α) is sampled as a compound Poisson sum of logarithmic variables,
both by inversion of binary64 uniforms with 53 random bits from the CSPRNG.

**Approximation:** the inversions use binary64 arithmetic, so each probability is realised
up to a few ulps; this is not an exact sampler in the sense of :mod:`cloaknet.noise`, and
the privacy statements that rely on this noise (BBGN) inherit the approximation. Invalid
arguments raise :class:`~cloaknet.errors.ParameterError`. Derivation: ``docs/protocols.md``.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import ParameterError
from cloaknet.protocols.base import uniform_bits
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource

__all__ = [
    "sample_logarithmic",
    "sample_poisson",
    "sample_polya",
    "sample_polya_differences",
]

_BITS: Final[int] = 53
_SCALE: Final[float] = 2.0**-53


def _unit_uniforms(count: int, rng: RandomSource) -> NDArray[np.float64]:
    """``count`` uniforms in (0, 1] with 53 random bits each: (u + 1)·2^-53."""
    u = uniform_bits(count, _BITS, rng).astype(np.float64)
    out: NDArray[np.float64] = (u + 1.0) * _SCALE
    return out


def _check_count(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or int(count) < 0:
        raise ParameterError(f"count must be a non-negative integer, got {count!r}")
    return int(count)


def _check_log_alpha(log_alpha: object) -> float:
    """ln α, which must be a finite negative number (0 < α < 1)."""
    if isinstance(log_alpha, bool) or not isinstance(log_alpha, int | float | np.floating):
        raise ParameterError(f"log_alpha must be a number, got {log_alpha!r}")
    value = float(log_alpha)
    if not math.isfinite(value) or value >= 0.0:
        raise ParameterError(f"log_alpha = ln(alpha) must be finite and < 0, got {log_alpha!r}")
    return value


def sample_poisson(count: int, rate: float, rng: RandomSource = SYSTEM_RANDOM) -> NDArray[np.int64]:
    """``count`` Poisson(rate) draws by CDF inversion (binary64; see the module doc).

    Requires 0 <= rate <= 700 (e^−rate must not underflow); meant for small rates.
    """
    n = _check_count(count)
    if not (isinstance(rate, int | float) and math.isfinite(rate) and 0.0 <= rate <= 700.0):
        raise ParameterError(f"rate must lie in [0, 700], got {rate!r}")
    out = np.zeros(n, dtype=np.int64)
    if n == 0 or rate == 0.0:
        return out
    u = _unit_uniforms(n, rng)
    mass = math.exp(-rate)
    cdf = mass
    pending = np.flatnonzero(u > cdf)
    j = 0
    while pending.size:
        j += 1
        mass *= rate / j
        cdf += mass
        if mass == 0.0 and j > rate:  # the CDF cannot grow any more (binary64)
            out[pending] = j
            break
        still = u[pending] > cdf
        out[pending[~still]] = j
        pending = pending[still]
    return out


def sample_logarithmic(
    count: int, log_alpha: float, rng: RandomSource = SYSTEM_RANDOM
) -> NDArray[np.int64]:
    """``count`` Logarithmic(α) draws, α = exp(log_alpha): P[L = l] = α^l/(l·ln(1/(1−α)))."""
    n = _check_count(count)
    la = _check_log_alpha(log_alpha)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    log_one_minus_alpha = math.log(-math.expm1(la))  # ln(1 − α), accurate for α near 1
    u = _unit_uniforms(n, rng)
    v = _unit_uniforms(n, rng)
    y = -np.expm1(u * log_one_minus_alpha)  # 1 − (1−α)^U ∈ (0, α]
    ratio = np.log(v) / np.log(y)
    out: NDArray[np.int64] = 1 + np.floor(ratio).astype(np.int64)
    return out


def sample_polya(
    count: int, shape: float, log_alpha: float, rng: RandomSource = SYSTEM_RANDOM
) -> NDArray[np.int64]:
    """``count`` independent Pólya(shape, α) draws with α = exp(log_alpha) (module doc).

    :param shape: r > 0 (1/n_h for the distributed discrete Laplace).
    :param log_alpha: ln α < 0 (−ε/Δ for sensitivity Δ).
    :raises ParameterError: on a bad count, shape or log_alpha.
    """
    n = _check_count(count)
    la = _check_log_alpha(log_alpha)
    if isinstance(shape, bool) or not isinstance(shape, int | float) or not (
        math.isfinite(shape) and shape > 0
    ):
        raise ParameterError(f"shape must be a finite number > 0, got {shape!r}")
    rate = float(shape) * -math.log(-math.expm1(la))  # r · ln(1/(1−α))
    if rate > 700.0:
        raise ParameterError(f"shape·ln(1/(1−alpha)) = {rate:.3g} is too large for this sampler")
    jumps = sample_poisson(n, rate, rng)
    total_jumps = int(jumps.sum())
    out = np.zeros(n, dtype=np.int64)
    if total_jumps:
        sizes = sample_logarithmic(total_jumps, la, rng)
        owners = np.repeat(np.arange(n), jumps)
        np.add.at(out, owners, sizes)
    return out


def sample_polya_differences(
    count: int, shape: float, log_alpha: float, rng: RandomSource = SYSTEM_RANDOM
) -> NDArray[np.int64]:
    """``count`` draws of X − Y with X, Y ~ Pólya(shape, α) independent. The sum of
    1/shape such draws (an integer number) is discrete Laplace with parameter α."""
    plus = sample_polya(count, shape, log_alpha, rng)
    minus = sample_polya(count, shape, log_alpha, rng)
    diff: NDArray[np.int64] = plus - minus
    return diff
