"""Exact samplers for the experiments: every draw follows its distribution exactly, built from
uniform bytes and exact integers of a :class:`~cloaknet.randomness.RandomSource` (never
floating-point inversion, never numpy's generators).

* :func:`binomial_half` — Bin(n, 1/2): a popcount of n fresh bits, or for large n a rejection
  sampler with O(√n) binary64 work whose decisions are exact;
* :func:`binomial_dyadic` — Bin(n, a/2^b), by comparing uniform b-bit integers with a bit by
  bit (one Bin(·, 1/2) draw per level);
* :func:`bernoulli_any` — whether at least one of ``count`` independent Bernoulli(q) trials
  succeeds, drawn trial by trial.

The compare experiment's sufficient-statistic path draws Cheu et al.'s kept and flipped bits
with :func:`binomial_dyadic`; the collusion experiment decides whether an honest partner added
noise with :func:`bernoulli_any`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import ParameterError
from cloaknet.randomness import RandomSource, bernoulli_fraction

__all__ = [
    "DIRECT_LIMIT",
    "bernoulli_any",
    "binomial_dyadic",
    "binomial_half",
]

#: Below this many trials, Bin(count, 1/2) is the popcount of ``count`` fresh bits.
DIRECT_LIMIT: Final[int] = 1 << 16
_POPCOUNT_BLOCK: Final[int] = 1 << 22
_POPCOUNT8: Final[NDArray[np.uint8]] = np.array(
    [bin(i).count("1") for i in range(256)], dtype=np.uint8
)
_LN2: Final[float] = math.log(2.0)
# Relative slack on float results (exp, log1p, sums) in the rejection test: far beyond the
# few-ulp errors of binary64 libm functions; a decision inside the slack is made exactly.
_SLACK: Final[float] = 2.0**-40
_LOG_CHUNK: Final[int] = 1 << 20


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or int(value) < 0:
        raise ParameterError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _popcount_bits(count: int, rng: RandomSource) -> int:
    """Number of ones among ``count`` fresh uniform bits (ceil(count/8) bytes of ``rng``)."""
    full, rest = divmod(count, 8)
    total = 0
    for start in range(0, full, _POPCOUNT_BLOCK):
        size = min(_POPCOUNT_BLOCK, full - start)
        data = np.frombuffer(rng.token_bytes(size), dtype=np.uint8)
        total += int(_POPCOUNT8[data].sum(dtype=np.int64))
    if rest:
        total += (rng.token_bytes(1)[0] & ((1 << rest) - 1)).bit_count()
    return total


def _geometric_half(rng: RandomSource) -> int:
    """K with P[K = k] = 2^−(k+1): the number of zero bits before the first one."""
    skipped = 0
    while True:
        word = int.from_bytes(rng.token_bytes(8), "big")
        if word:
            return skipped + 64 - word.bit_length()
        skipped += 64


def _range_product(low: int, high: int) -> int:
    """Π_{v=low}^{high} v (1 if high < low), by balanced splitting."""
    if high < low:
        return 1
    if high - low < 16:
        return math.prod(range(low, high + 1))
    mid = (low + high) // 2
    return _range_product(low, mid) * _range_product(mid + 1, high)


def _log_ratio(mu: int, d: int) -> tuple[float, float]:
    """(L, E): L ≈ ln Π_{i=1}^{d} (μ+1−i)/(μ+i) in binary64 and E >= the absolute error of L
    (with a wide margin: 2^−40 relative per term plus the summation error)."""
    total = 0.0
    magnitude = 0.0
    sensitivity = 0.0
    for start in range(1, d + 1, _LOG_CHUNK):
        i = np.arange(start, min(d, start + _LOG_CHUNK - 1) + 1, dtype=np.float64)
        flip = (2.0 * i - 1.0) / (mu + i)  # 1 − (μ+1−i)/(μ+i), in (0, 1)
        terms = np.log1p(-flip)
        total += float(terms.sum())
        magnitude += float(-terms.sum())
        sensitivity += float(np.sum((2.0 * i - 1.0) / (mu + 1.0 - i)))  # flip/(1 − flip)
    error = _SLACK * ((d + 4) * magnitude + sensitivity + 1.0)
    return total, error


def _accept(mu: int, d: int, block: int, rng: RandomSource, *, force_exact: bool) -> bool:
    """One Bernoulli trial with probability a = 2^(block−1) · C(2μ, μ+d)/C(2μ, μ), which is
    <= 1 whenever d >= block·w with w > √μ (see :func:`_binomial_half_rejection`).

    U = (u + V)/2^64 with u a 64-bit uniform integer and V uniform in [0, 1); the trial
    succeeds iff U < a. It is decided from u and binary64 bounds on a when they are
    conclusive, and otherwise exactly with integers (V's comparison with a rational is a
    fresh exact Bernoulli trial), so the result is exact either way.
    """
    u = int.from_bytes(rng.token_bytes(8), "big")
    if not force_exact:
        # cheap exact rejection first: a <= 2^(block−1) · exp(−d²/(μ+d))
        cap = (block - 1) * _LN2 - d * d / (mu + d) + _SLACK * (block + 2)
        if cap < 0.0 and u >= math.ceil(math.ldexp(math.exp(cap) * (1 + _SLACK), 64)):
            return False
        log_ratio, error = _log_ratio(mu, d)
        log_a = (block - 1) * _LN2 + log_ratio
        low = math.exp(log_a - error) * (1 - _SLACK)
        high = math.exp(log_a + error) * (1 + _SLACK)
        if u + 1 <= math.floor(math.ldexp(min(low, 1.0), 64)):
            return True
        if high < 1.0 and u >= math.ceil(math.ldexp(high, 64)):
            return False
    numerator = _range_product(mu + 1 - d, mu)
    denominator = _range_product(mu + 1, mu + d)
    if block >= 1:
        numerator <<= block - 1
    else:
        denominator <<= 1
    gap = (numerator << 64) - u * denominator  # (a − u/2^64) · 2^64 · denominator
    if gap <= 0:
        return False
    if gap >= denominator:
        return True
    return rng.randbelow(denominator) < gap


def _binomial_half_rejection(count: int, rng: RandomSource, *, force_exact: bool = False) -> int:
    """Exact Bin(count, 1/2) by rejection, using O(√count) float work per attempt and a
    handful of random words (``force_exact`` decides every acceptance with integers; for
    tests).

    For count = 2μ + 1 the result is Bin(2μ, 1/2) plus one fair bit. For 2μ: let
    w = isqrt(μ) + 1 > √μ. Propose a sign s (fair bit), a block K with P[K = k] = 2^−(k+1)
    and an offset I uniform in [0, w); the deviation is d = K·w + I (s = +) or
    d = K·w + I + 1 (s = −, value μ − d). Every integer deviation j has exactly one
    proposal, of probability 2^−(k+2)/w. Accept with probability
    a = 2^(k−1)·r(d), r(d) = C(2μ, μ+d)/C(2μ, μ) (0 for d > μ). Then P[propose j and accept]
    = r(|j|)/(8w) ∝ P[Bin(2μ, 1/2) = μ + j], so accepted values have exactly the binomial law.
    a <= 1: r(d) <= exp(−Σ_{i<=d} (2i−1)/(μ+i)) <= exp(−d²/(2μ)) <= exp(−k²/2) for
    k·w <= d <= μ, and 2^(k−1)·exp(−k²/2) <= e^(−1/2) < 1 for every k >= 0. The acceptance
    rate is about Σ_j r(j)/(8w) ≈ √(πμ)/(8w) ≈ 0.22.
    """
    if count % 2:
        return _binomial_half_rejection(count - 1, rng, force_exact=force_exact) + (
            rng.token_bytes(1)[0] & 1
        )
    mu = count // 2
    if mu == 0:
        return 0
    width = math.isqrt(mu) + 1
    while True:
        block = _geometric_half(rng)
        offset = rng.randbelow(width)
        negative = rng.token_bytes(1)[0] & 1
        d = block * width + offset + negative
        if d > mu:
            continue
        if _accept(mu, d, block, rng, force_exact=force_exact):
            return mu - d if negative else mu + d


def binomial_half(count: int, rng: RandomSource, *, direct_limit: int = DIRECT_LIMIT) -> int:
    """An exact draw of Bin(``count``, 1/2) from ``rng``'s uniform bytes.

    ``count <= direct_limit``: the popcount of ``count`` fresh bits. Otherwise the rejection
    sampler :func:`_binomial_half_rejection` (constant expected number of attempts, each
    O(√count) binary64 work plus an exact integer fallback in the rare undecided cases).

    :raises ParameterError: ``count`` is not a non-negative integer.
    """
    n = _check_count("count", count)
    if n <= direct_limit:
        return _popcount_bits(n, rng)
    return _binomial_half_rejection(n, rng)


def binomial_dyadic(
    count: int,
    numerator: int,
    bits: int,
    rng: RandomSource,
    *,
    direct_limit: int = DIRECT_LIMIT,
) -> int:
    """An exact draw of Bin(``count``, numerator/2^bits).

    Each of the ``count`` Bernoulli trials compares a uniform ``bits``-bit integer U with
    T = ``numerator`` (success iff U < T), most significant bit first. At each level the
    trials still tied with T's prefix split into those whose next bit of U is 1 and 0
    (a Bin(active, 1/2) draw, :func:`binomial_half`); where T's bit is 1 the zeros succeed
    and the ones stay tied, where it is 0 the ones fail and the zeros stay tied; trials tied
    to the end have U = T and fail.

    :raises ParameterError: negative ``count``, ``bits`` < 0, or ``numerator`` outside
        [0, 2^bits].
    """
    n = _check_count("count", count)
    width = _check_count("bits", bits)
    t = _check_count("numerator", numerator)
    if t > 1 << width:
        raise ParameterError(f"numerator must be <= 2**bits, got {t} > 2**{width}")
    if t == 1 << width:
        return n
    active, successes = n, 0
    for level in range(width - 1, -1, -1):
        if active == 0:
            break
        ones = binomial_half(active, rng, direct_limit=direct_limit)
        if (t >> level) & 1:
            successes += active - ones
            active = ones
        else:
            active -= ones
    return successes


def bernoulli_any(q: Fraction, count: int, rng: RandomSource) -> bool:
    """Whether at least one of ``count`` independent Bernoulli(q) trials succeeds, i.e. an
    exact draw of Bernoulli(1 − (1 − q)^count); False for ``count`` = 0.

    The trials are drawn one by one with :func:`~cloaknet.randomness.bernoulli_fraction`
    and the draw stops at the first success, so the number of ``randbelow`` calls is random
    (a seeded stream is consumed in exactly this order).

    :raises ParameterError: ``count`` < 0, or ``q`` outside [0, 1].
    """
    trials = _check_count("count", count)
    if not 0 <= q <= 1:
        raise ParameterError(f"q must lie in [0, 1], got {q}")
    return any(bernoulli_fraction(q.numerator, q.denominator, rng) for _ in range(trials))
