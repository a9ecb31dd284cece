"""What one view of the adversary looks like: subset-sum counts and realised γ-smoothness.

For a multiset E of shares (the honest residual of a round, after the colluders' revealed
messages are removed) and a subset size m, B_x is the number of size-m index subsets S with
Σ_{i∈S} E_i ≡ x (mod N) — the B_{y*,x} of Lemma 3's proof (``lemma:pair_pointwise_DP``; also
Lemma 10) in Ghazi, Pagh and Velingker (2019). A view of 2m shares is γ-smooth
(Definition 2, ``def:gamma_smooth``) when every B_x is within a factor 1 ± γ of its mean
C(2m, m)/N; Lemma 1 bounds the probability that two honest users' shares are not γ-smooth or
not distinct. The posteriors built on these counts are in :mod:`cloaknet.adversary_posterior`;
the model of the adversary is in :mod:`cloaknet.adversary`.

All functions raise :class:`~cloaknet.errors.ParameterError` on bad arguments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import ParameterError
from cloaknet.validation import check_int

__all__ = [
    "ViewStats",
    "as_int",
    "checked_counts",
    "is_gamma_smooth",
    "realized_gamma",
    "share_list",
    "subset_sum_counts",
    "view_stats",
]

# Counts that stay below this bound fit an int64 with room for one addition.
_INT64_LIMIT = 2**62


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def as_int(name: str, value: object) -> int:
    """``value`` as an int if it is a Python or numpy integer (not bool).

    :raises ParameterError: naming ``name``, otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ParameterError(f"{name} must be an integer, got {value!r}")
    return int(value)


def share_list(
    shares: Sequence[int] | NDArray[np.integer[Any]], modulus: int, name: str = "shares"
) -> list[int]:
    """The shares as Python ints, each checked to lie in [0, N).

    :raises ParameterError: not one-dimensional, a share not an integer, or outside [0, N).
    """
    if isinstance(shares, np.ndarray):
        if shares.ndim != 1:
            raise ParameterError(f"{name} must be one-dimensional, got shape {shares.shape}")
        items: list[object] = shares.tolist()
    else:
        items = list(shares)
    out: list[int] = []
    for index, value in enumerate(items):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ParameterError(f"{name}[{index}] is not an integer: {value!r}")
        share = int(value)
        if not 0 <= share < modulus:
            raise ParameterError(f"{name}[{index}] = {share} is not in [0, N) for N = {modulus}")
        out.append(share)
    return out


# --------------------------------------------------------------------------------------------
# Subset-sum counts and γ-smoothness (Definition 2, Lemma 1)
# --------------------------------------------------------------------------------------------


def subset_sum_counts(
    shares: Sequence[int] | NDArray[np.integer[Any]], m: int, modulus: int
) -> NDArray[Any]:
    """B_x for every x in Z_N: the number of size-m index subsets S with Σ_{i∈S} shares_i ≡ x.

    This is B_{y*,x} of Lemma 3's proof (``lemma:pair_pointwise_DP``; also Lemma 10) for the
    multiset y* = ``shares``; equal values at different positions are different indices, so
    Σ_x B_x = C(len(shares), m) always.

    Exact dynamic programme over (elements, subset size, sum mod N): for each element y,
    dp[c] += dp[c−1] rotated by y, for c from min(i, m) down to 1 (sizes that can no longer
    reach m are skipped). Cost O(len(shares) · m · N) integer additions on numpy rows, e.g.
    about 0.05 s for 40 shares, m = 20, N = 10⁵; memory (m+1)·N counters.

    :param shares: the multiset, as ints in [0, N) (a sequence or a 1-d integer array).
    :param m: subset size, 1 <= m <= len(shares).
    :param modulus: N >= 2 (any N; oddness is not needed here).
    :returns: an array of length N; dtype int64 when C(len(shares), m) < 2**62, else dtype
        object holding exact Python ints. (Intermediate rows use Python ints whenever a
        partial count could exceed 2**62, so the result is exact in every case.)
    :raises ParameterError: m or N out of range, or a share not an int in [0, N).
    """
    modulus = check_int("modulus", modulus, 2)
    values = share_list(shares, modulus)
    n = len(values)
    m = check_int("m", m, 1)
    if m > n:
        raise ParameterError(f"m = {m} exceeds the number of shares {n}")
    # dp[c][x] <= C(i, c) <= C(n, min(m, n // 2)), the largest count any row can hold.
    peak = math.comb(n, min(m, n // 2))
    dtype: type[np.int64] | type[object] = np.int64 if peak < _INT64_LIMIT else object
    dp: NDArray[Any] = np.zeros((m + 1, modulus), dtype=dtype)
    dp[0, 0] = 1
    for i, y in enumerate(values, start=1):
        lowest = max(1, m - (n - i))
        for c in range(min(i, m), lowest - 1, -1):
            src = dp[c - 1]
            dst = dp[c]
            if y == 0:
                dst += src
            else:
                dst[y:] += src[: modulus - y]
                dst[:y] += src[modulus - y :]
    result: NDArray[Any] = dp[m].copy()
    if math.comb(n, m) < _INT64_LIMIT:
        return result.astype(np.int64)
    if result.dtype != object:
        return np.array([int(v) for v in result.tolist()], dtype=object)
    return result


def checked_counts(
    counts: NDArray[Any] | None, values: list[int], m: int, modulus: int
) -> NDArray[Any]:
    """``counts`` if given (shape and total checked), else :func:`subset_sum_counts`.

    :raises ParameterError: ``counts`` has the wrong shape or does not sum to
        C(len(values), m).
    """
    if counts is None:
        return subset_sum_counts(values, m, modulus)
    arr = np.asarray(counts)
    if arr.shape != (modulus,):
        raise ParameterError(f"counts must have shape ({modulus},), got {arr.shape}")
    total = sum(int(v) for v in arr.tolist())
    expected = math.comb(len(values), m)
    if total != expected:
        raise ParameterError(
            f"counts sum to {total}, not C({len(values)}, {m}) = {expected}: "
            "they are not the subset-sum counts of these shares"
        )
    return arr


@dataclass(frozen=True)
class ViewStats:
    """How far one 2m-share view is from the conditions of Lemma 3 / Lemma 10.

    ``gamma`` is the realised γ of Definition 2 (``def:gamma_smooth``), the least γ for which
    the view is γ-smooth: max_x |B_x · N / C(2m, m) − 1| (dimensionless, >= 0; 0 would mean
    perfectly uniform subset sums). ``distinct`` says whether the 2m shares are pairwise
    distinct (the other condition of the set of good views in Lemma 1).
    """

    gamma: float
    distinct: bool


def realized_gamma(counts: NDArray[Any], m: int, modulus: int) -> float:
    """The realised γ of Definition 2: max_x |B_x · N / C(2m, m) − 1|.

    Computed exactly with Python ints and rounded once to the nearest float.

    :param counts: B_x for x in Z_N (as from :func:`subset_sum_counts` of 2m shares).
    :param m: shares per user, >= 1 (the view has 2m shares).
    :param modulus: N >= 2.
    :raises ParameterError: wrong shape, negative counts, or counts not summing to C(2m, m).
    """
    modulus = check_int("modulus", modulus, 2)
    m = check_int("m", m, 1)
    arr = np.asarray(counts)
    if arr.shape != (modulus,):
        raise ParameterError(f"counts must have shape ({modulus},), got {arr.shape}")
    values = [int(v) for v in arr.tolist()]
    if min(values) < 0:
        raise ParameterError("counts must be non-negative")
    total = sum(values)
    expected = math.comb(2 * m, m)
    if total != expected:
        raise ParameterError(f"counts sum to {total}, not C(2m, m) = {expected} for m = {m}")
    deviation = max(max(values) * modulus - total, total - min(values) * modulus)
    return deviation / total  # int / int: correctly rounded


def view_stats(
    shares: Sequence[int] | NDArray[np.integer[Any]],
    m: int,
    modulus: int,
    counts: NDArray[Any] | None = None,
) -> ViewStats:
    """Realised γ and distinctness of a view of exactly 2m shares (Definition 2, Lemma 1).

    :param counts: optionally the precomputed ``subset_sum_counts(shares, m, modulus)``
        (only its shape and total are checked).
    :raises ParameterError: len(shares) != 2m, or as :func:`subset_sum_counts`.
    """
    modulus = check_int("modulus", modulus, 2)
    m = check_int("m", m, 1)
    values = share_list(shares, modulus)
    if len(values) != 2 * m:
        raise ParameterError(f"a view has 2m = {2 * m} shares, got {len(values)}")
    counts = checked_counts(counts, values, m, modulus)
    return ViewStats(
        gamma=realized_gamma(counts, m, modulus),
        distinct=len(set(values)) == len(values),
    )


def is_gamma_smooth(stats: ViewStats, gamma: float) -> bool:
    """Whether the view lies in the good set of Lemma 1: distinct and γ-smooth.

    True iff ``stats.distinct`` and ``stats.gamma <= gamma`` (the float comparison can err
    only when the exact γ is within one rounding of ``gamma``).
    """
    return stats.distinct and stats.gamma <= gamma
