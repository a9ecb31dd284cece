"""The per-user steps before a vector is split: clipping to an L2 norm and conditional
unbiased randomized rounding to integers (Kairouz, Liu, Steinke, arXiv 2102.06387), used by
:mod:`cloaknet.protocols.vector`."""

from __future__ import annotations

import math
from typing import Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import InputRangeError, ParameterError
from cloaknet.protocols.base import uniform_bits
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.validation import check_int

__all__ = [
    "MAX_ROUNDING_ATTEMPTS",
    "as_rows",
    "clip_vectors",
    "conditional_round",
    "positive_float",
    "rounding_norm_bound_sq",
]

#: Rounding attempts per vector before giving up (each succeeds with probability >= 1/2).
MAX_ROUNDING_ATTEMPTS: Final[int] = 200
_TWO53: Final[float] = float(1 << 53)


def positive_float(name: str, value: object) -> float:
    """``value`` as a finite float > 0 (:class:`ParameterError` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    out = float(value)
    if not math.isfinite(out) or out <= 0.0:
        raise ParameterError(f"{name} must be a finite number > 0, got {value!r}")
    return out


def rounding_norm_bound_sq(scaled_clip: float, dimension: int, beta: float) -> int:
    """The conditional-rounding bound B² (an integer): for every y ∈ R^d with ‖y‖₂ <= a
    (a = ``scaled_clip`` = s·C), unbiased randomized rounding gives ‖ỹ‖₂² <= B² except with
    probability at most β, where

        B² = ⌈a² + d/4 + √(2 ln(1/β))·(a + √d/2)⌉.

    This is the bound of Kairouz, Liu, Steinke (arXiv 2102.06387; the form their reference
    code cites as Theorem 1). Derivation (ours): with e_j = ỹ_j − y_j,
    ‖ỹ‖² − ‖y‖² = Σ_j e_j(2y_j + e_j), a sum of independent terms with mean
    E[e_j²] = f_j(1 − f_j) <= 1/4 (f_j the fractional part) and range |2⌊y_j⌋ + 1| <= 2|y_j| + 1;
    Σ_j (2|y_j| + 1)² <= (2‖y‖ + √d)², so Hoeffding's inequality gives
    P[‖ỹ‖² > ‖y‖² + d/4 + t] <= exp(−2t²/(2a + √d)²) = β for t = √(2 ln(1/β))·(a + √d/2).

    :raises ParameterError: a not finite or negative, d < 1, β outside (0, 1).
    """
    if isinstance(scaled_clip, bool) or not isinstance(scaled_clip, int | float):
        raise ParameterError(f"scaled_clip must be a number, got {scaled_clip!r}")
    a = float(scaled_clip)
    if not math.isfinite(a) or a < 0:
        raise ParameterError(f"scaled_clip must be a finite number >= 0, got {scaled_clip!r}")
    d = check_int("dimension", dimension, 1)
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0.0 < beta < 1.0:
        raise ParameterError(f"beta must lie in (0, 1), got {beta!r}")
    slack = math.sqrt(2.0 * math.log(1.0 / beta)) * (a + math.sqrt(d) / 2.0)
    return math.ceil(a * a + d / 4.0 + slack)


def as_rows(x: object, dimension: int) -> NDArray[np.float64]:
    """``x`` as a finite float64 array of shape (n, d) (a single vector becomes one row)."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputRangeError(f"vectors must be arrays of real numbers: {exc}") from exc
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != dimension:
        raise InputRangeError(
            f"expected vectors of dimension {dimension}, got an array of shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise InputRangeError(
            f"vector {int(bad[0])} has a non-finite coordinate {int(bad[1])}: "
            f"{arr[bad[0], bad[1]]!r}"
        )
    return arr


def clip_vectors(x: NDArray[np.float64], clip: float) -> NDArray[np.float64]:
    """Every row scaled by min(1, C/‖row‖₂) (rows of norm <= C are unchanged).

    The norm is computed on the row divided by its largest |coordinate| (no overflow).
    """
    c = positive_float("clip", clip)
    rows = np.asarray(x, dtype=np.float64)
    peak = np.max(np.abs(rows), axis=1) if rows.shape[1] else np.zeros(rows.shape[0])
    safe = np.where(peak > 0, peak, 1.0)
    norms = peak * np.sqrt(np.sum((rows / safe[:, None]) ** 2, axis=1))
    factor = np.where(norms > c, c / np.where(norms > 0, norms, 1.0), 1.0)
    clipped: NDArray[np.float64] = rows * factor[:, None]
    return clipped


def _round_once(y: NDArray[np.float64], rng: RandomSource) -> NDArray[np.int64]:
    """Unbiased randomized rounding of every entry: ⌊y⌋ + [u < (y − ⌊y⌋)·2^53] with u a
    uniform 53-bit integer. The comparison is exact in binary64, so the rounding-up
    probability is ⌈f·2^53⌉/2^53 for the computed fractional part f: exactly f when |y| >= 1
    (f is then a multiple of 2^−52), within 2^−53 otherwise."""
    floor = np.floor(y)
    frac = y - floor
    u = uniform_bits(int(y.size), 53, rng).reshape(y.shape)
    up = u.astype(np.float64) < frac * _TWO53
    rounded: NDArray[np.int64] = floor.astype(np.int64) + up.astype(np.int64)
    return rounded


def conditional_round(
    y: NDArray[np.float64], norm_bound_sq: int, rng: RandomSource = SYSTEM_RANDOM
) -> NDArray[np.int64]:
    """Conditional randomized rounding of every row of ``y`` (module doc, step 2): each row
    is rounded (:func:`_round_once`) until its squared L2 norm, an exact int64 sum, is at most
    ``norm_bound_sq``; only rejected rows are redrawn.

    Every returned row satisfies ‖row‖₂² <= B² (deterministically). If one rounding passes
    the test with probability 1 − β' (β' <= β for B² from :func:`rounding_norm_bound_sq`),
    the conditioning moves each coordinate's mean by at most β'/(1 − β') grid units
    (|E[x̃_j | pass] − y_j| = |E[(x̃_j − y_j)·1{fail}]|/P[pass], and |x̃_j − y_j| < 1).

    :raises ParameterError: a row still fails after :data:`MAX_ROUNDING_ATTEMPTS` attempts
        (the bound is below what rounding can meet for that row).
    """
    rows = np.asarray(y, dtype=np.float64)
    out = np.zeros(rows.shape, dtype=np.int64)
    pending = np.arange(rows.shape[0])
    for _ in range(MAX_ROUNDING_ATTEMPTS):
        if pending.size == 0:
            return out
        rounded = _round_once(rows[pending], rng)
        norms = np.einsum("ij,ij->i", rounded, rounded)
        ok = norms <= norm_bound_sq
        out[pending[ok]] = rounded[ok]
        pending = pending[~ok]
    if pending.size == 0:
        return out
    raise ParameterError(
        f"conditional rounding: {pending.size} vector(s) still exceed the norm bound "
        f"B² = {norm_bound_sq} after {MAX_ROUNDING_ATTEMPTS} attempts"
    )
