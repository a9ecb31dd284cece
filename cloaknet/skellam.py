"""Exact Poisson and Skellam noise on the integers, for distributed noise over vectors.

The symmetric Skellam distribution with variance v is the law of X − Y for independent
X, Y ~ Poisson(v/2). Poisson means add under independent sums, so symmetric Skellam variances
add too: if each of h honest users adds an independent Skellam(μ/h) draw to a coordinate, the
honest users' total is *exactly* Skellam(μ), the noise of the Skellam mechanism of Agarwal,
Kairouz and Liu, "The Skellam Mechanism for Differentially Private Federated Learning"
(NeurIPS 2021, arXiv 2110.04995). Its Rényi-DP curve is in :mod:`cloaknet.fl_accounting`.

**Exactness.** Every parameter is an exact rational (:class:`fractions.Fraction` or ``int``;
floats are refused). The samplers use integer arithmetic and uniform integers from a
:class:`~cloaknet.randomness.RandomSource` only (the OS CSPRNG by default), and their output
laws are *exactly* the Poisson and Skellam laws: no floating point anywhere on the sampling path
(``tests/cloaknet/test_skellam.py`` traces every local variable of this module to check it).
The construction (proofs in ``docs/protocols.md``, "Exact Skellam noise"):

* **Small means** (λ ≤ :data:`SMALL_MEAN`): Poisson(λ) is the sum of K = ⌈2λ⌉ independent
  Poisson(θ) parts, θ = λ/K ≤ 1/2. One part is von Neumann's scheme, as for the Poisson(1/2)
  draws of :mod:`cloaknet.protocols.polya`: propose n with P[n] = (1 − θ)θ^n (successes of
  an exact Bernoulli(θ) before the first failure) and accept with probability 1/n!
  (``randbelow(n!) == 0``); the accepted n has P[n] ∝ θ^n/n!, the Poisson(θ) law. A trial
  is accepted with probability (1 − θ)e^θ > 0.82.
* **Large means** (:class:`PoissonSampler` for λ > :data:`SMALL_MEAN`): rejection from a
  two-sided geometric proposal centred on the mode m = ⌊λ⌋, with the rational ratio
  ρ = (t − 1)/t, t = ⌊√m⌋ + 1. With w(k) = λ^(k−m)·m!/k! (so P[k] ∝ w(k), w ≤ 1), the
  proposal j = k − m has P[j] ∝ ρ^|j| and is accepted with probability
  w(m + j)·ρ^(−|j|)/c, where c = max_j w(m + j)ρ^(−|j|) is computed exactly (a rational).
  That acceptance is a product of rational factors each at most 1 — one per unit step
  between j and the maximiser — so it is a chain of exact rational coins, drawn 64 factors
  at a time. The geometric magnitude is G = L·Q + Σ_b 2^b·B_b (L = 2^ℓ >= t): ρ^G factors
  over these digits, so Q ~ Geometric(ρ^L) and the bits are independent with
  P[B_b = 1] = ρ^(2^b)/(1 + ρ^(2^b)). Coins with big rationals compare a uniform real with
  the fraction 64 bits at a time (:func:`_coin`). Expected cost: O(1) trials of
  O(log λ + √λ/64) coins; a trial is accepted with probability 0.6–0.8 for every λ.
* **Many draws at once** (:meth:`SkellamNoise.sample_many`): the Poisson splitting theorem.
  2·count independent Poisson(λ) variables have the law of N ~ Poisson(2·count·λ) balls
  thrown independently and uniformly into 2·count bins (the bin counts); the first count bins
  are the X's, the others the Y's. Bins are uniform residues by rejection
  (:func:`cloaknet.vectorized.uniform_residues`), so the counts are exact. Used while
  λ ≤ :data:`MULTINOMIAL_MAX_MEAN` (its cost grows like count·λ); above it each draw is
  made on its own (cost independent of λ).

Invalid arguments raise :class:`~cloaknet.errors.ParameterError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import ParameterError
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource, bernoulli_fraction
from cloaknet.vectorized import uniform_residues

__all__ = [
    "MULTINOMIAL_MAX_MEAN",
    "SMALL_MEAN",
    "PoissonSampler",
    "SkellamNoise",
    "distributed_skellam",
    "sample_poisson",
    "sample_skellam",
]

#: Means up to this use the sum-of-small-parts sampler; larger ones the rejection sampler.
SMALL_MEAN: Final[int] = 8
#: :meth:`SkellamNoise.sample_many` uses Poisson splitting while each Poisson mean is at most
#: this (its cost grows like the mean; the per-draw sampler's does not).
MULTINOMIAL_MAX_MEAN: Final[int] = 256
#: Factors multiplied into one exact coin by the rejection sampler's acceptance chain.
_COIN_BLOCK: Final[int] = 64
#: Balls thrown per ``uniform_residues`` call by the splitting sampler (bounds memory).
_BALL_BLOCK: Final[int] = 1 << 22
#: |value| above which a draw does not fit the int64 arrays of the vectorized path.
_INT64_SAFE: Final[int] = 1 << 62


def _exact(value: object, name: str, *, allow_zero: bool) -> Fraction:
    """``value`` as a Fraction (an int or Fraction; floats and bools refused), > 0 (or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, Fraction | int):
        raise ParameterError(
            f"{name} must be an exact rational (fractions.Fraction or int), "
            f"got {type(value).__name__}: {value!r}"
        )
    frac = Fraction(value)
    if frac < 0 or (frac == 0 and not allow_zero):
        raise ParameterError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {frac}")
    return frac


def _check_count(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or int(count) < 0:
        raise ParameterError(f"count must be a non-negative integer, got {count!r}")
    return int(count)


def _coin(numerator: int, denominator: int, rng: RandomSource) -> bool:
    """Exact Bernoulli(numerator/denominator) for integers 0 <= numerator, 0 < denominator
    (a numerator >= the denominator is a sure success).

    Small denominators (at most 64 bits) use one ``randbelow``. Larger ones compare a uniform
    real U in [0, 1) with the fraction 64 bits at a time (the fraction's binary expansion by
    long division, U's bits from ``rng.token_bytes``): success iff U < numerator/denominator,
    which has probability exactly numerator/denominator, and the first 64-bit digit almost
    always decides (each further digit is needed with probability 2^−64).
    """
    if numerator >= denominator:
        return True
    if numerator <= 0:
        return False
    if denominator.bit_length() <= 64:
        return rng.randbelow(denominator) < numerator
    rest = numerator
    while True:
        digit, rest = divmod(rest << 64, denominator)
        drawn = int.from_bytes(rng.token_bytes(8), "big")
        if drawn != digit:
            return drawn < digit
        if rest == 0:
            return False  # U >= the fraction from here on (equality has probability 0)


# --------------------------------------------------------------------------- small means


def _poisson_part(num: int, den: int, rng: RandomSource) -> int:
    """Exact Poisson(θ) for θ = num/den <= 1/2 (von Neumann): n successes of Bernoulli(θ)
    before the first failure (P[n] = (1 − θ)θ^n), kept with probability 1/n!."""
    while True:
        n = 0
        while bernoulli_fraction(num, den, rng):
            n += 1
        if n < 2 or rng.randbelow(math.factorial(n)) == 0:
            return n


def _poisson_by_parts(mean: Fraction, rng: RandomSource) -> int:
    """Exact Poisson(mean): the sum of ⌈2·mean⌉ Poisson parts of mean at most 1/2."""
    if mean == 0:
        return 0
    parts = math.ceil(2 * mean)
    part = mean / parts
    return sum(_poisson_part(part.numerator, part.denominator, rng) for _ in range(parts))


# --------------------------------------------------------------------------- large means


def _falling(top: int, count: int) -> int:
    """top·(top − 1)···(top − count + 1) (1 for count = 0)."""
    return math.prod(range(top - count + 1, top + 1)) if count > 0 else 1


def _rising(bottom: int, count: int) -> int:
    """bottom·(bottom + 1)···(bottom + count − 1) (1 for count = 0)."""
    return math.prod(range(bottom, bottom + count)) if count > 0 else 1


@dataclass(frozen=True)
class PoissonSampler:
    """The exact sampler of Poisson(``mean``) (module doc); ``mean`` an exact rational >= 0.

    For a mean of at least 1 the rejection sampler's constants are computed once here (as
    integers; no floats): ``mode`` m = ⌊λ⌋, ``scale`` t (ρ = (t − 1)/t), ``plus_steps`` J₊
    and ``minus_steps`` K₋ (where w(m + j)ρ^(−|j|) peaks on each side), the two base coins
    (each side's peak over the global maximum c, at most 1) and the proposal's coins.
    """

    mean: Fraction
    mode: int = field(init=False)
    scale: int = field(init=False)
    plus_steps: int = field(init=False)
    minus_steps: int = field(init=False)
    _plus_base: tuple[int, int] = field(init=False, repr=False)
    _minus_base: tuple[int, int] = field(init=False, repr=False)
    _block: int = field(init=False, repr=False)
    _block_coin: tuple[int, int] = field(init=False, repr=False)
    _bit_coins: tuple[tuple[int, int], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        lam = _exact(self.mean, "mean", allow_zero=True)
        object.__setattr__(self, "mean", lam)
        p, q = lam.numerator, lam.denominator
        m = p // q
        t = math.isqrt(m) + 1
        object.__setattr__(self, "mode", m)
        object.__setattr__(self, "scale", t)
        plus = minus = 0
        plus_base = minus_base = block_coin = (1, 1)
        bit_coins: tuple[tuple[int, int], ...] = ()
        block = 1
        if m >= 1:  # the rejection sampler's constants (t >= 2, so 0 < ρ < 1)
            r, s = t - 1, t
            # a_i = λ/(ρ(m + i)) = ps/(qr(m + i)) >= 1  <=>  i <= ps/(qr) − m
            plus = max(0, (p * s) // (q * r) - m)
            # b_i = (m − i)/(λρ) = (m − i)qs/(pr) >= 1  <=>  i <= m − pr/(qs)
            minus = max(0, m + (p * r) // -(q * s) + 1)  # m − ⌈pr/(qs)⌉ + 1
            # the peaks h₊(J₊) = Π a_i and h₋(K₋) = Π b_i, as num/den pairs
            pn, pd = (p * s) ** plus, (q * r) ** plus * _rising(m + 1, plus)
            mn, md = (q * s) ** minus * _falling(m, minus), (p * r) ** minus
            if pn * md >= mn * pd:  # c = h₊(J₊): base coins 1 and h₋(K₋)/c
                plus_base, minus_base = (1, 1), (mn * pd, md * pn)
            else:
                plus_base, minus_base = (pn * md, pd * mn), (1, 1)
            # proposal: G = L·Q + R, L = 2^ℓ >= t; Q ~ Geometric(ρ^L); R's ℓ bits are
            # independent, bit b is 1 with probability ρ^(2^b)/(1 + ρ^(2^b))
            levels = (t - 1).bit_length()
            block = 1 << levels
            block_coin = (r**block, s**block)
            bit_coins = tuple(
                (r ** (1 << b), s ** (1 << b) + r ** (1 << b)) for b in range(levels)
            )
        object.__setattr__(self, "plus_steps", plus)
        object.__setattr__(self, "minus_steps", minus)
        object.__setattr__(self, "_plus_base", plus_base)
        object.__setattr__(self, "_minus_base", minus_base)
        object.__setattr__(self, "_block", block)
        object.__setattr__(self, "_block_coin", block_coin)
        object.__setattr__(self, "_bit_coins", bit_coins)

    # ------------------------------------------------------------------ the proposal

    def _geometric(self, rng: RandomSource) -> int:
        """G with P[G = g] ∝ ρ^g: since ρ^g factors over g = L·Q + Σ_b 2^b·B_b, the block
        count Q ~ Geometric(ρ^L) and the bits B_b (b < ℓ) are independent, with
        P[B_b = 1] = ρ^(2^b)/(1 + ρ^(2^b))."""
        num, den = self._block_coin
        blocks = 0
        while _coin(num, den, rng):
            blocks += 1
        rest = 0
        for bit, (bit_num, bit_den) in enumerate(self._bit_coins):
            if _coin(bit_num, bit_den, rng):
                rest |= 1 << bit
        return self._block * blocks + rest

    # ------------------------------------------------------------------ the acceptance

    def _chain(self, low: int, high: int, rising: bool, up: bool, rng: RandomSource) -> bool:
        """The product over i in [low, high) of exact coins, _COIN_BLOCK factors at a time.

        With λ = p/q and ρ = r/s, the factors are (module doc):
        ``rising`` (positive side, m + i) — ``up``: a_i = ps/(qr(m+i)), else 1/a_i;
        not ``rising`` (negative side, m − i) — ``up``: b_i = (m−i)qs/(pr), else 1/b_i.
        The caller only asks for factors that are at most 1.
        """
        p, q = self.mean.numerator, self.mean.denominator
        t = self.scale
        r, s = t - 1, t
        m = self.mode
        for start in range(low, high, _COIN_BLOCK):
            length = min(_COIN_BLOCK, high - start)
            if rising:
                small, big = (p * s) ** length, (q * r) ** length * _rising(m + start, length)
            else:
                small, big = (q * s) ** length * _falling(m - start, length), (p * r) ** length
            num, den = (small, big) if up else (big, small)
            if not _coin(num, den, rng):
                return False
        return True

    def _accept(self, j: int, rng: RandomSource) -> bool:
        """Exact Bernoulli(w(m + j)·ρ^(−|j|)/c) for j >= −m."""
        if j >= 0:
            peak = self.plus_steps
            if not _coin(*self._plus_base, rng):
                return False
            if j >= peak:  # factors a_i, i = J₊+1..j, each < 1
                return self._chain(peak + 1, j + 1, rising=True, up=True, rng=rng)
            return self._chain(j + 1, peak + 1, rising=True, up=False, rng=rng)
        k = -j
        peak = self.minus_steps
        if not _coin(*self._minus_base, rng):
            return False
        if k >= peak:  # factors b_i, i = K₋..k−1, each < 1
            return self._chain(peak, k, rising=False, up=True, rng=rng)
        return self._chain(k, peak, rising=False, up=False, rng=rng)

    # ------------------------------------------------------------------ public

    def sample(self, rng: RandomSource = SYSTEM_RANDOM) -> int:
        """One exact Poisson(``mean``) draw (a non-negative Python int)."""
        if self.mean <= SMALL_MEAN:
            return _poisson_by_parts(self.mean, rng)
        return self.sample_by_rejection(rng)

    def sample_by_rejection(self, rng: RandomSource = SYSTEM_RANDOM) -> int:
        """One draw by the rejection sampler (any mean >= 1; :meth:`sample` uses it above
        :data:`SMALL_MEAN`, the tests below it too).

        :raises ParameterError: the mean is below 1.
        """
        if self.mode < 1:
            raise ParameterError(f"the rejection sampler needs mean >= 1, got {self.mean}")
        m = self.mode
        while True:
            g = self._geometric(rng)
            negative = rng.randbelow(2) == 1
            if negative and g == 0:
                continue  # 0 would otherwise be proposed twice as often
            j = -g if negative else g
            if j < -m:
                continue  # k < 0 has probability 0
            if self._accept(j, rng):
                return m + j

    def sample_by_parts(self, rng: RandomSource = SYSTEM_RANDOM) -> int:
        """One draw by the sum of small parts (any mean; cost grows like the mean)."""
        return _poisson_by_parts(self.mean, rng)


def sample_poisson(mean: Fraction | int, rng: RandomSource = SYSTEM_RANDOM) -> int:
    """One exact Poisson(``mean``) draw (:class:`PoissonSampler`).

    :raises ParameterError: ``mean`` negative or not a Fraction / int.
    """
    return PoissonSampler(_exact(mean, "mean", allow_zero=True)).sample(rng)


# --------------------------------------------------------------------------- Skellam


@dataclass(frozen=True)
class SkellamNoise:
    """The exact sampler of the symmetric Skellam law with variance ``variance`` (an exact
    rational >= 0): X − Y with X, Y ~ Poisson(variance/2) independent (module doc). A
    variance of 0 gives 0 (the noiseless configuration)."""

    variance: Fraction
    poisson: PoissonSampler = field(init=False)

    def __post_init__(self) -> None:
        v = _exact(self.variance, "variance", allow_zero=True)
        object.__setattr__(self, "variance", v)
        object.__setattr__(self, "poisson", PoissonSampler(v / 2))

    def sample(self, rng: RandomSource = SYSTEM_RANDOM) -> int:
        """One exact draw (a Python int)."""
        if self.variance == 0:
            return 0
        return self.poisson.sample(rng) - self.poisson.sample(rng)

    def sample_many(self, count: int, rng: RandomSource = SYSTEM_RANDOM) -> NDArray[np.int64]:
        """``count`` independent exact draws: by Poisson splitting while the Poisson mean is
        at most :data:`MULTINOMIAL_MAX_MEAN`, else one :meth:`sample` per entry.

        :raises OverflowError: a draw of at least 2^62 (astronomically unlikely).
        """
        n = _check_count(count)
        out = np.zeros(n, dtype=np.int64)
        if n == 0 or self.variance == 0:
            return out
        mean = self.poisson.mean
        if mean > MULTINOMIAL_MAX_MEAN:
            for index in range(n):
                value = self.sample(rng)
                if not -_INT64_SAFE < value < _INT64_SAFE:  # pragma: no cover - astronomical
                    raise OverflowError("Skellam draw exceeds the vectorized path's int64 range")
                out[index] = value
            return out
        return self._split(n, rng)

    def _split(self, n: int, rng: RandomSource) -> NDArray[np.int64]:
        """Poisson splitting: N ~ Poisson(2nλ) balls, each in a uniform one of 2n bins."""
        bins = 2 * n
        balls = PoissonSampler(bins * self.poisson.mean).sample(rng)
        counts = np.zeros(bins, dtype=np.int64)
        for start in range(0, balls, _BALL_BLOCK):
            size = min(_BALL_BLOCK, balls - start)
            drawn = np.asarray(uniform_residues(bins, (size,), rng), dtype=np.uint64)
            counts += np.bincount(drawn.astype(np.int64), minlength=bins)
        diff: NDArray[np.int64] = counts[:n] - counts[n:]
        return diff

    def sample_vectors(
        self, users: int, dimension: int, rng: RandomSource = SYSTEM_RANDOM
    ) -> NDArray[np.int64]:
        """A ``(users, dimension)`` array of independent exact draws (one noise vector per
        user, every coordinate independent)."""
        rows = _check_count(users)
        cols = _check_count(dimension)
        return self.sample_many(rows * cols, rng).reshape(rows, cols)


def sample_skellam(variance: Fraction | int, rng: RandomSource = SYSTEM_RANDOM) -> int:
    """One exact symmetric Skellam draw with the given variance (:class:`SkellamNoise`).

    :raises ParameterError: ``variance`` negative or not a Fraction / int.
    """
    return SkellamNoise(_exact(variance, "variance", allow_zero=True)).sample(rng)


def distributed_skellam(total_variance: Fraction | int, honest: int) -> SkellamNoise:
    """Each user's share of Skellam(``total_variance``) noise when ``honest`` users add it:
    Skellam(total_variance / honest). The honest users' draws sum to exactly
    Skellam(total_variance) (variances add); more users only add independent noise.

    :raises ParameterError: ``total_variance`` negative or inexact, ``honest`` < 1.
    """
    total = _exact(total_variance, "total_variance", allow_zero=True)
    if isinstance(honest, bool) or not isinstance(honest, int | np.integer) or honest < 1:
        raise ParameterError(f"honest must be a positive integer, got {honest!r}")
    return SkellamNoise(total / int(honest))
