"""Exact Pólya (negative binomial) noise whose sum over the honest users is discrete Laplace.

If each of h honest users adds X_i − Y_i with X_i, Y_i ~ Pólya(1/h, α) independent, the total
is discrete Laplace, P[z] = (1−α)/(1+α)·α^|z|, which is ε-DP for sensitivity Δ when
α = exp(−ε/Δ) (Goryczka and Xiong; used for distributed noise by Balle, Bell, Gascón and
Nissim, arXiv 2002.00817). Pólya(r, α) has P[X = j] = Γ(j+r)/(j!Γ(r))·(1−α)^r·α^j.

**Exactness.** Both parameters are exact rationals: the shape ``r`` and ``γ`` with
α = exp(−γ). The sampler uses only integer arithmetic and uniform integers from the
:class:`~cloaknet.randomness.RandomSource` (the OS CSPRNG by default); its output law is
*exactly* Pólya(r, exp(−γ)), with no floating point anywhere. The construction
(derivation and proof in ``docs/protocols.md``):

* Pólya(r, α) is the sum of the points of a Poisson process on {1, 2, …} with intensity
  ρ_l = r·α^l/l (its generating function is exp(Σ ρ_l (s^l − 1)) = ((1−α)/(1−αs))^r).
* Von Neumann's scheme samples that process without ever evaluating its normaliser:
  propose n ~ Geometric (P[n] = (1−θ)θ^n), n labels l_i i.i.d. from a proposal q, and accept
  with probability (1/n!)·Π a(l_i), where θ·q(l)·a(l) = ρ_l; the accepted (n, l_1..l_n) has
  probability ∝ Π ρ_{l_i}/n!, the law of the Poisson process.
* The proposal groups l into dyadic blocks [2^j, 2^(j+1)): with J0 = min{j : γ·2^j ≥ 1} each
  block j < J0 has weight 1/(J0+2) and block J0+t weight 2^−t/(J0+2); l is uniform in its
  block; θ = r·(J0+2). The acceptance is a(l) = (2^j/l)·e^(−γl) in the first J0 blocks and
  a(l) = (2^j/l)·(2/e)^t·e^(−(γl − t)) in block J0+t, where γl − t >= 2^t − t > 0. Every
  factor is an exact coin: a rational Bernoulli, Canonne–Kamath–Steinke's Bernoulli(e^(−x))
  for rational x (arXiv 2004.00010, :func:`cloaknet.noise.bernoulli_exp_neg_ratio`), and
  Bernoulli(2/e) = P[Poisson(1) <= 1] with Poisson(1/2) drawn by the same von Neumann scheme.
* θ is kept at most 1/2 by splitting r into ⌈2θ⌉ equal parts (Pólya shapes add), so a trial
  is accepted with probability >= 1 − θ >= 1/2. Most draws stop at the first coin
  (probability 1 − θ of drawing 0); :func:`sample_polya_many` draws those first coins for all
  users at once with :func:`cloaknet.vectorized.uniform_residues` (uniform integers by
  rejection).

Invalid arguments raise :class:`~cloaknet.errors.ParameterError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import ParameterError
from cloaknet.noise import bernoulli_exp_neg_ratio
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource, bernoulli_fraction
from cloaknet.vectorized import uniform_residues

__all__ = [
    "PolyaNoise",
    "bernoulli_two_over_e",
    "sample_poisson_half",
    "sample_polya",
    "sample_polya_differences",
    "sample_polya_many",
]

#: |value| above which a draw does not fit the int64 arrays of the vectorized path.
_INT64_SAFE = 1 << 62


def _exact(value: object, name: str) -> Fraction:
    """``value`` as a positive Fraction (an int or Fraction; floats and bools refused)."""
    if isinstance(value, bool) or not isinstance(value, Fraction | int):
        raise ParameterError(
            f"{name} must be an exact rational (fractions.Fraction or int), "
            f"got {type(value).__name__}: {value!r}"
        )
    frac = Fraction(value)
    if frac <= 0:
        raise ParameterError(f"{name} must be > 0, got {frac}")
    return frac


def _check_count(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or int(count) < 0:
        raise ParameterError(f"count must be a non-negative integer, got {count!r}")
    return int(count)


def _fair_heads(rng: RandomSource) -> int:
    """Number of heads of a fair coin before the first tail: P[t] = 2^−(t+1)."""
    heads = 0
    while rng.randbelow(2):
        heads += 1
    return heads


def sample_poisson_half(rng: RandomSource = SYSTEM_RANDOM) -> int:
    """Exact Poisson(1/2) draw (von Neumann's scheme): propose n with P[n] = 2^−(n+1) and
    accept with probability 1/n! (an exact rational coin), so P[n] ∝ (1/2)^n/n!."""
    while True:
        n = _fair_heads(rng)
        if n < 2 or rng.randbelow(math.factorial(n)) == 0:
            return n


def bernoulli_two_over_e(rng: RandomSource = SYSTEM_RANDOM) -> bool:
    """Exact Bernoulli(2/e): ``True`` iff a Poisson(1) draw, the sum of two Poisson(1/2)
    draws, is at most 1 (P[Poisson(1) <= 1] = e^−1 + e^−1)."""
    first = sample_poisson_half(rng)
    if first > 1:
        return False
    return first + sample_poisson_half(rng) <= 1


@dataclass(frozen=True)
class PolyaNoise:
    """The exact sampler of Pólya(``shape``, exp(−``gamma``)) (module doc).

    ``shape`` r > 0 and ``gamma`` γ > 0 are exact rationals (Fraction or int; floats are
    refused, they would make the law inexact). ``blocks`` is J0, ``pieces`` the number of
    equal parts r is split into and ``theta`` the geometric parameter of one part.
    """

    shape: Fraction
    gamma: Fraction
    blocks: int = field(init=False)
    pieces: int = field(init=False)
    theta: Fraction = field(init=False)

    def __post_init__(self) -> None:
        shape = _exact(self.shape, "shape")
        gamma = _exact(self.gamma, "gamma")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "gamma", gamma)
        num, den = gamma.numerator, gamma.denominator
        blocks = max(0, den.bit_length() - num.bit_length() - 1)
        while (num << blocks) < den:  # J0 = min{j : γ·2^j >= 1}
            blocks += 1
        total = shape * (blocks + 2)
        pieces = max(1, math.ceil(2 * total))
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(self, "pieces", pieces)
        object.__setattr__(self, "theta", total / pieces)

    # ------------------------------------------------------------------ one point

    def _point(self, rng: RandomSource) -> int | None:
        """One label l from the dyadic-block proposal, kept with probability a(l); ``None``
        when rejected (the whole trial is then rejected)."""
        slot = rng.randbelow(self.blocks + 2)
        extra = 0 if slot < self.blocks else _fair_heads(rng)
        block = slot if slot < self.blocks else self.blocks + extra
        low = 1 << block
        size = low + rng.randbelow(low)
        if rng.randbelow(size) >= low:  # Bernoulli(2^j / l)
            return None
        for _ in range(extra):  # (2/e)^t
            if not bernoulli_two_over_e(rng):
                return None
        g_num, g_den = self.gamma.numerator, self.gamma.denominator
        # e^(−(γ·l − t)); γ·l >= 2^t > t in block J0 + t, and t = 0 in the first blocks
        if not bernoulli_exp_neg_ratio(g_num * size - extra * g_den, g_den, rng):
            return None
        return size

    def _finish(self, count: int, rng: RandomSource) -> int | None:
        """The rest of a trial that proposed ``count`` >= 1 points: the 1/n! coin and the
        points' acceptances. Returns their sum, or ``None`` if the trial is rejected."""
        if count > 1 and rng.randbelow(math.factorial(count)) != 0:
            return None
        total = 0
        for _ in range(count):
            size = self._point(rng)
            if size is None:
                return None
            total += size
        return total

    def _geometric(self, start: int, rng: RandomSource) -> int:
        """``start`` plus the number of successes of Bernoulli(θ) before the first failure."""
        count = start
        while bernoulli_fraction(self.theta.numerator, self.theta.denominator, rng):
            count += 1
        return count

    def _part(self, rng: RandomSource) -> int:
        """One Pólya(r / pieces, α) draw."""
        while True:
            count = self._geometric(0, rng)
            if count == 0:
                return 0
            total = self._finish(count, rng)
            if total is not None:
                return total

    # ------------------------------------------------------------------ public

    def sample(self, rng: RandomSource = SYSTEM_RANDOM) -> int:
        """One exact Pólya(r, exp(−γ)) draw (a non-negative Python int)."""
        return sum(self._part(rng) for _ in range(self.pieces))

    def sample_many(self, count: int, rng: RandomSource = SYSTEM_RANDOM) -> NDArray[np.int64]:
        """``count`` independent exact draws. The first coin of every part is drawn for all
        entries at once (``uniform_residues(θ's denominator) < θ's numerator``); only the
        entries whose first coin succeeds (probability θ) continue one by one, exactly as
        :meth:`sample` would.

        :raises OverflowError: a draw of at least 2^62 (astronomically unlikely).
        """
        n = _check_count(count)
        out = np.zeros(n, dtype=np.int64)
        if n == 0:
            return out
        num, den = self.theta.numerator, self.theta.denominator
        for _ in range(self.pieces):
            first = uniform_residues(den, (n,), rng)
            for index in np.flatnonzero(first < num).tolist():
                total = self._finish(self._geometric(1, rng), rng)
                if total is None:  # rejected: the trial starts again from scratch
                    total = self._part(rng)
                value = int(out[index]) + total
                if value >= _INT64_SAFE:  # pragma: no cover - needs an astronomically rare draw
                    raise OverflowError("Pólya draw exceeds the vectorized path's int64 range")
                out[index] = value
        return out

    def differences(self, count: int, rng: RandomSource = SYSTEM_RANDOM) -> NDArray[np.int64]:
        """``count`` draws of X − Y with X, Y ~ Pólya(r, α) independent."""
        plus = self.sample_many(count, rng)
        minus = self.sample_many(count, rng)
        diff: NDArray[np.int64] = plus - minus
        return diff


def sample_polya(
    shape: Fraction | int, gamma: Fraction | int, rng: RandomSource = SYSTEM_RANDOM
) -> int:
    """One exact Pólya(``shape``, exp(−``gamma``)) draw (:class:`PolyaNoise`).

    :raises ParameterError: ``shape`` or ``gamma`` not a positive Fraction / int.
    """
    return PolyaNoise(_exact(shape, "shape"), _exact(gamma, "gamma")).sample(rng)


def sample_polya_many(
    count: int, shape: Fraction | int, gamma: Fraction | int, rng: RandomSource = SYSTEM_RANDOM
) -> NDArray[np.int64]:
    """``count`` independent exact Pólya(``shape``, exp(−``gamma``)) draws.

    :raises ParameterError: a bad ``count``, ``shape`` or ``gamma``.
    """
    return PolyaNoise(_exact(shape, "shape"), _exact(gamma, "gamma")).sample_many(count, rng)


def sample_polya_differences(
    count: int, shape: Fraction | int, gamma: Fraction | int, rng: RandomSource = SYSTEM_RANDOM
) -> NDArray[np.int64]:
    """``count`` draws of X − Y with X, Y ~ Pólya(``shape``, exp(−``gamma``)) independent.
    With ``shape`` = 1/h, the sum of h such draws is exactly discrete Laplace with
    parameter α = exp(−``gamma``).

    :raises ParameterError: a bad ``count``, ``shape`` or ``gamma``.
    """
    return PolyaNoise(_exact(shape, "shape"), _exact(gamma, "gamma")).differences(count, rng)
