"""Exact integer noise for the invisibility cloak (Ghazi, Pagh, Velingker, arXiv 1906.08320).

The single-user pre-randomizer of the protocol adds, with probability ``q``, a sample of the
*truncated discrete Laplace distribution* :math:`\\mathcal{D}_{N,p}` to the user's
discretised input. For odd ``N >= 3`` and ``p`` in ``(0, 1)`` it has support
``{-(N-1)/2, ..., (N-1)/2}`` and mass

    D_{N,p}[j] = (1 - p) * p**|j| / (1 + p - 2 * p**((N+1)/2)).

Here the noise is parameterised by a positive rational *scale* ``t`` with ``p = exp(-1/t)``,
so that every sampler can be exact: all sampling is done with integer arithmetic on top of
:func:`cloaknet.randomness.bernoulli_fraction` (an exact ``randbelow`` comparison), following
Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential Privacy" (arXiv 2004.00010),
Algorithms 1 (Bernoulli(exp(-gamma))) and 2 (discrete Laplace). No floating point is used in
any sampler; floats appear only in the reporting / accounting helpers
(:func:`noise_p`, :func:`truncated_laplace_pmf`, :func:`truncated_laplace_variance`).

All samplers take a :class:`~cloaknet.randomness.RandomSource`; the default is the OS CSPRNG.
Invalid parameters raise :class:`~cloaknet.errors.ParameterError` (a ``ValueError``).
"""

from __future__ import annotations

import math
from fractions import Fraction

from cloaknet.errors import ParameterError
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource, bernoulli_fraction

__all__ = [
    "bernoulli_exp_neg",
    "bernoulli_exp_neg_ratio",
    "noise_p",
    "sample_discrete_laplace",
    "sample_truncated_laplace",
    "sample_user_noise",
    "truncated_laplace_pmf",
    "truncated_laplace_variance",
]


# --------------------------------------------------------------------------------------------
# Parameter validation
# --------------------------------------------------------------------------------------------


def _as_fraction(value: object, name: str) -> Fraction:
    """Return ``value`` as a Fraction if it is a Fraction or an int (not a bool, not a float)."""
    if isinstance(value, bool) or not isinstance(value, Fraction | int):
        raise ParameterError(
            f"{name} must be a fractions.Fraction or int (exact rational), "
            f"got {type(value).__name__}: {value!r}"
        )
    return Fraction(value)


def _check_scale(scale: object) -> tuple[int, int]:
    """Validate a noise scale and return ``(numerator, denominator)`` (both positive)."""
    frac = _as_fraction(scale, "scale")
    if frac <= 0:
        raise ParameterError(f"scale must be > 0, got {frac}")
    return frac.numerator, frac.denominator


def _check_modulus(modulus: object) -> int:
    """Validate the modulus N (odd int >= 3) and return the half-width (N - 1) // 2."""
    if isinstance(modulus, bool) or not isinstance(modulus, int):
        raise ParameterError(f"modulus N must be an int, got {type(modulus).__name__}")
    if modulus < 3 or modulus % 2 == 0:
        raise ParameterError(f"modulus N must be an odd integer >= 3, got {modulus}")
    return (modulus - 1) // 2


def _check_p(p: object) -> float:
    """Validate the float parameter p of D_{N,p} (finite, strictly inside (0, 1))."""
    if isinstance(p, bool) or not isinstance(p, float | int):
        raise ParameterError(f"p must be a float, got {type(p).__name__}")
    pf = float(p)
    if not (0.0 < pf < 1.0):  # also rejects NaN
        raise ParameterError(f"p must lie strictly between 0 and 1, got {p!r}")
    return pf


# --------------------------------------------------------------------------------------------
# Exact samplers
# --------------------------------------------------------------------------------------------


def _bernoulli_exp_neg_unit(num: int, den: int, rng: RandomSource) -> bool:
    """Bernoulli(exp(-num/den)) for ``0 <= num <= den`` (CKS Algorithm 1, von Neumann).

    Draws Bernoulli(gamma/K) for K = 1, 2, ... until one fails and reports whether that K is
    odd; P[K odd] = sum_k (-gamma)^k / k! = exp(-gamma). Expected draws: exp(gamma) <= e.
    """
    if num == 0:
        return True
    k = 1
    while bernoulli_fraction(num, den * k, rng):
        k += 1
    return k % 2 == 1


def _bernoulli_exp_neg_ratio(num: int, den: int, rng: RandomSource) -> bool:
    """Bernoulli(exp(-num/den)) for integers ``num >= 0``, ``den > 0`` (no validation).

    exp(-gamma) = exp(-1)**floor(gamma) * exp(-(gamma - floor(gamma))): the integer part is
    floor(gamma) independent Bernoulli(exp(-1)) trials, stopping at the first failure, so the
    expected cost is O(1) even for huge gamma.
    """
    whole, rest = divmod(num, den)
    remaining = whole
    while remaining > 0:
        if not _bernoulli_exp_neg_unit(1, 1, rng):
            return False
        remaining -= 1
    return _bernoulli_exp_neg_unit(rest, den, rng)


def bernoulli_exp_neg(gamma: Fraction | int, rng: RandomSource = SYSTEM_RANDOM) -> bool:
    """Exact Bernoulli(exp(-gamma)) trial for a rational ``gamma >= 0``.

    Implements Canonne-Kamath-Steinke (arXiv 2004.00010) Algorithm 1 for the fractional part and
    ``floor(gamma)`` independent Bernoulli(exp(-1)) trials (all must succeed) for the integer
    part. Every coin is an exact rational Bernoulli (:func:`bernoulli_fraction`); no floating
    point is involved, so ``P[True]`` is exactly ``exp(-gamma)``. Expected number of random
    draws is O(1) for every ``gamma``.

    Args:
        gamma: a :class:`fractions.Fraction` or ``int``, ``gamma >= 0`` (dimensionless).
        rng: source of randomness (default: the OS CSPRNG).

    Returns:
        ``True`` with probability exactly ``exp(-gamma)``.

    Raises:
        ParameterError: ``gamma`` is negative, or not a Fraction / int (floats and bools are
            rejected, since they would make the probability inexact or are likely bugs).
    """
    g = _as_fraction(gamma, "gamma")
    if g < 0:
        raise ParameterError(f"gamma must be >= 0, got {g}")
    return _bernoulli_exp_neg_ratio(g.numerator, g.denominator, rng)


def bernoulli_exp_neg_ratio(num: int, den: int, rng: RandomSource = SYSTEM_RANDOM) -> bool:
    """Exact Bernoulli(exp(-num/den)) for integers ``num >= 0`` and ``den > 0``.

    The integer form of :func:`bernoulli_exp_neg` (same construction, no Fraction built), for
    samplers that keep their parameters as numerator/denominator pairs (e.g. the Pólya
    sampler of :mod:`cloaknet.protocols.polya`).

    Raises:
        ParameterError: ``num`` negative, ``den`` not positive, or either not an int.
    """
    if (
        isinstance(num, bool)
        or isinstance(den, bool)
        or not isinstance(num, int)
        or not isinstance(den, int)
        or num < 0
        or den <= 0
    ):
        raise ParameterError(f"need integers num >= 0 and den > 0, got {num!r} and {den!r}")
    return _bernoulli_exp_neg_ratio(num, den, rng)


def _discrete_laplace(num: int, den: int, rng: RandomSource) -> int:
    """Discrete Laplace with P[x] proportional to exp(-|x| * den / num) (CKS Algorithm 2).

    Construction (t = num, s = den):
      * U uniform in {0..t-1}, kept with probability exp(-U/t);
      * V = number of successes of Bernoulli(exp(-1)) before the first failure, so that
        X = U + t*V has P[X = x] proportional to exp(-x/t) on {0, 1, 2, ...};
      * Y = floor(X / s) then has P[Y = y] proportional to exp(-y*s/t) (geometric);
      * a fair sign, rejecting the "negative zero" (sign -, Y = 0) so 0 is not counted twice.
    Each round succeeds with probability >= (1 - 1/e)/2, independently of the magnitude of
    ``num`` (U absorbs the fractional part of X/t, so big scales cost nothing extra).
    """
    while True:
        u = rng.randbelow(num)
        if not _bernoulli_exp_neg_ratio(u, num, rng):
            continue
        v = 0
        while _bernoulli_exp_neg_unit(1, 1, rng):
            v += 1
        y = (u + num * v) // den
        negative = bernoulli_fraction(1, 2, rng)
        if negative and y == 0:
            continue
        return -y if negative else y


def sample_discrete_laplace(scale: Fraction | int, rng: RandomSource = SYSTEM_RANDOM) -> int:
    """Exact sample from the (untruncated) discrete Laplace distribution on the integers.

    ``P[x] = (1 - p) / (1 + p) * p**|x|`` with ``p = exp(-1/scale)``, i.e. ``P[x]`` is
    proportional to ``exp(-|x| / scale)``. The sampler is *exact*: it uses only integer
    arithmetic and exact rational coins (Canonne-Kamath-Steinke 2020, Algorithm 2, with
    Algorithm 1 for the Bernoulli(exp(-.)) coins), so the output distribution is precisely
    the one above, with no floating-point approximation. Expected running time is O(1)
    random draws for every scale (a small, scale-independent number of ``randbelow`` calls
    on integers of the size of the scale's numerator).

    Args:
        scale: the Laplace scale (in units of the integer lattice), a positive
            :class:`fractions.Fraction` or ``int``.
        rng: source of randomness (default: the OS CSPRNG).

    Returns:
        An integer (unbounded support).

    Raises:
        ParameterError: ``scale <= 0`` or not a Fraction / int.
    """
    num, den = _check_scale(scale)
    return _discrete_laplace(num, den, rng)


def noise_p(scale: Fraction | int) -> float:
    """Return ``p = exp(-1/scale)``, the parameter of ``D_{N,p}`` for a given noise scale.

    For reporting and accounting only (it is a float; the samplers never use it). For very
    large scales the result may round to ``1.0``.

    Raises:
        ParameterError: ``scale <= 0`` or not a Fraction / int.
    """
    num, den = _check_scale(scale)
    return math.exp(-float(Fraction(den, num)))


def _truncated_by_laplace(half: int, num: int, den: int, rng: RandomSource) -> int:
    """D_{N,p} by rejecting discrete Laplace samples with |x| > half."""
    while True:
        x = _discrete_laplace(num, den, rng)
        if -half <= x <= half:
            return x


def _truncated_by_uniform(half: int, num: int, den: int, rng: RandomSource) -> int:
    """D_{N,p} by proposing j uniform on the support, accepting w.p. exp(-|j| * den / num)."""
    width = 2 * half + 1
    while True:
        j = rng.randbelow(width) - half
        if _bernoulli_exp_neg_ratio(abs(j) * den, num, rng):
            return j


def sample_truncated_laplace(
    modulus: int, scale: Fraction | int, rng: RandomSource = SYSTEM_RANDOM
) -> int:
    """Exact sample from the truncated discrete Laplace distribution ``D_{N,p}``.

    ``N = modulus`` and ``p = exp(-1/scale)``; the result lies in
    ``{-(N-1)/2, ..., (N-1)/2}`` with ``P[j] = (1-p) p**|j| / (1 + p - 2 p**((N+1)/2))``.
    Works for arbitrarily large ``N`` (Python ints, e.g. ``N > 2**64``).

    Exactness: the sample is produced by one of two rejection samplers, both exact because
    rejection preserves the relative probabilities of the accepted values:

    * if the half-width ``(N-1)/2`` exceeds ``scale``: draw the untruncated discrete Laplace
      (:func:`sample_discrete_laplace`) until ``|x| <= (N-1)/2``;
    * otherwise (support narrower than the noise): draw ``j`` uniformly from the support and
      accept with probability ``exp(-|j|/scale)`` (an exact coin).

    The choice only affects speed; in either case each attempt is accepted with probability
    at least about ``1/e``, so the expected cost is O(1) for all ``N`` and ``scale``.

    Args:
        modulus: the protocol modulus N, an odd integer >= 3.
        scale: the noise scale (lattice units), a positive Fraction or int.
        rng: source of randomness (default: the OS CSPRNG).

    Raises:
        ParameterError: ``modulus`` is even, < 3 or not an int; ``scale <= 0`` or not a
            Fraction / int.
    """
    half = _check_modulus(modulus)
    num, den = _check_scale(scale)
    if half * den <= num:  # half <= scale
        return _truncated_by_uniform(half, num, den, rng)
    return _truncated_by_laplace(half, num, den, rng)


def sample_user_noise(
    modulus: int, scale: Fraction | int, q: Fraction | int, rng: RandomSource = SYSTEM_RANDOM
) -> int:
    """The paper's single-user noise: ``b * w`` with ``b ~ Bernoulli(q)``, ``w ~ D_{N,p}``.

    With probability exactly ``q`` returns :func:`sample_truncated_laplace` ``(modulus,
    scale)``, otherwise returns ``0``. All parameters are validated up front, whether or not
    the noise is drawn.

    Args:
        modulus: the protocol modulus N, an odd integer >= 3.
        scale: the noise scale (lattice units), a positive Fraction or int; ``p =
            exp(-1/scale)``.
        q: the probability that this user adds noise, a Fraction (or the int 1) in ``(0, 1]``.
        rng: source of randomness (default: the OS CSPRNG).

    Returns:
        An integer in ``{-(N-1)/2, ..., (N-1)/2}``.

    Raises:
        ParameterError: bad ``modulus`` or ``scale`` (see :func:`sample_truncated_laplace`),
            or ``q`` not a Fraction / int in ``(0, 1]``.
    """
    half = _check_modulus(modulus)
    num, den = _check_scale(scale)
    qf = _as_fraction(q, "q")
    if not (0 < qf <= 1):
        raise ParameterError(f"q must lie in (0, 1], got {qf}")
    if not bernoulli_fraction(qf.numerator, qf.denominator, rng):
        return 0
    if half * den <= num:
        return _truncated_by_uniform(half, num, den, rng)
    return _truncated_by_laplace(half, num, den, rng)


# --------------------------------------------------------------------------------------------
# Floating-point analysis helpers (accounting / reporting; not used for sampling)
# --------------------------------------------------------------------------------------------


def _log_normaliser(half: int, p: float) -> float:
    """``log(1 + p - 2 p**(half+1))``, computed without cancellation.

    ``1 + p - 2 p**h = (1 - p) + 2 p (1 - p**(h-1))`` with ``h = half + 1``; both terms are
    non-negative and ``1 - p**half = -expm1(half * log p)`` is accurate even for p close to 1.
    """
    one_minus_p = 1.0 - p  # exact for p in [0.5, 1); relative error <= 2**-53 otherwise
    return math.log(one_minus_p - 2.0 * p * math.expm1(float(half) * math.log(p)))


def truncated_laplace_pmf(value: int, modulus: int, p: float) -> float:
    """Probability mass ``D_{N,p}[value]`` of the truncated discrete Laplace distribution.

    ``D_{N,p}[j] = (1-p) p**|j| / (1 + p - 2 p**((N+1)/2))`` for ``|j| <= (N-1)/2`` and ``0.0``
    outside the support. Computed in log space with ``expm1``/``log`` so it stays accurate for
    ``p`` close to 1 and for huge ``N`` (``p**((N+1)/2)`` may underflow to 0, harmlessly);
    masses below the float range underflow to ``0.0``. ``D[j] == D[-j]`` bit for bit.

    Args:
        value: the integer at which to evaluate.
        modulus: N, an odd integer >= 3 (any size).
        p: the float parameter, ``0 < p < 1`` (see :func:`noise_p`).

    Raises:
        ParameterError: bad ``modulus`` or ``p`` not in ``(0, 1)``.
    """
    half = _check_modulus(modulus)
    pf = _check_p(p)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f"value must be an int, got {type(value).__name__}")
    if abs(value) > half:
        return 0.0
    log_mass = math.log(1.0 - pf) + float(abs(value)) * math.log(pf) - _log_normaliser(half, pf)
    return math.exp(log_mass)


# Below this half-width the variance is a direct float sum (O(half) work, all terms positive).
_DIRECT_SUM_LIMIT = 2048
# Above this value of half*log(1/p) the closed form (untruncated value minus tail) loses at
# most a couple of bits to cancellation.
_CLOSED_FORM_MIN_DECAY = 1.0


def _scaled_incomplete_gamma3(y: float) -> float:
    """``P(3, y) / y**3 = exp(-y) * sum_{k>=0} y**k / (k+3)!`` for ``0 <= y <= 1``."""
    term = 1.0 / 6.0
    total = term
    k = 0
    while term > 1e-18 * total:
        k += 1
        term *= y / (k + 3)
        total += term
    return math.exp(-y) * total


def truncated_laplace_variance(modulus: int, p: float) -> float:
    """Exact variance ``2 * sum_{j=1}^{(N-1)/2} j**2 D_{N,p}[j]`` of ``D_{N,p}`` (a float).

    The mean is 0 by symmetry, so this is also the second moment. Three numerically stable
    regimes are used, giving close to full double precision for any odd ``N >= 3`` (tested
    up to ``N ~ 2**80``) and any float ``p`` in ``(0, 1)``:

    * half-width ``M = (N-1)/2 <= 2048``: direct summation (all terms positive);
    * ``M log(1/p) >= 1``: closed form -- the untruncated sum ``p(1+p)/(1-p)**3`` minus the
      exact tail ``p**(M+1) [(M+1)**2 (1-p)**2 + 2(M+1) p (1-p) + p(1+p)] / (1-p)**3``; the
      tail underflows to 0 harmlessly for huge ``M``;
    * otherwise (``M > 2048`` but the truncation dominates, so ``1 - p < 1/2048``):
      Euler-Maclaurin summation of ``j**2 p**j`` with a series for the incomplete-gamma
      integral, whose remainder is far below double precision in this regime.

    The result is at most the Lemma 8 bound ``2p(1+p) / ((1-p)**2 (1+p-2p**((N+1)/2)))``.

    Args:
        modulus: N, an odd integer >= 3 (any size).
        p: the float parameter, ``0 < p < 1``.

    Returns:
        The variance in squared lattice units.

    Raises:
        ParameterError: bad ``modulus`` or ``p`` not in ``(0, 1)``.
    """
    half = _check_modulus(modulus)
    pf = _check_p(p)
    u = 1.0 - pf
    log_p = math.log(pf)
    # Normaliser Z = sum_{|j| <= M} p**|j| = (1 + p - 2 p**(M+1)) / (1 - p).
    normaliser = math.exp(_log_normaliser(half, pf)) / u

    if half <= _DIRECT_SUM_LIMIT:
        second = math.fsum(float(j * j) * pf**j for j in range(1, half + 1))
        return 2.0 * second / normaliser

    m = float(half)
    decay = -m * log_p  # M * log(1/p) > 0
    if decay >= _CLOSED_FORM_MIN_DECAY:
        h = m + 1.0
        tail_power = math.exp(h * log_p)  # p**(M+1), may underflow to 0
        one_minus_tail = -math.expm1(h * log_p)
        # p(1+p) - p**h [h**2 u**2 + 2 h p u + p(1+p)], regrouped to avoid cancellation:
        numerator = pf * (1.0 + pf) * one_minus_tail - tail_power * (
            h * h * u * u + 2.0 * h * pf * u
        )
        # Var = 2 (1-p) S_M / (1+p-2p**(M+1)), S_M = numerator / (1-p)**3.
        return 2.0 * numerator / (u * u * u * normaliser)

    # Euler-Maclaurin for S_M = sum_{j=0}^{M} f(j), f(j) = j**2 exp(-x j), x = log(1/p):
    #   S_M = int_0^M f + f(M)/2 + (f'(M) - f'(0))/12 - (f'''(M) - f'''(0))/720 + R,
    # with f(0) = f'(0) = 0, f'''(0) = -6x; |R| is O(x**3) while S_M >= M**3/3 * exp(-1).
    x = -log_p
    y = decay  # x * M < 1
    e = math.exp(-y)
    integral = 2.0 * m * m * m * _scaled_incomplete_gamma3(y)  # (2/x**3) * P(3, x M)
    f_m = m * m * e
    d1_m = (2.0 * m - x * m * m) * e
    d3_m = (-6.0 * x + 6.0 * x * x * m - x * x * x * m * m) * e
    second = integral + f_m / 2.0 + d1_m / 12.0 - (d3_m + 6.0 * x) / 720.0
    return 2.0 * second / normaliser
