"""The adversary's exact posterior over one honest input (Lemmas 3 and 10, made concrete).

Given the honest residual E of 2m shares and its subset-sum counts B_x
(:func:`cloaknet.adversary_views.subset_sum_counts`), the likelihood of the target's rounded
input x̄1 is, by Lemma 2 and the proof of Lemma 3 (sum-preserving changes; x̄1 + x̄2 known),

    P[E | x̄1, x̄2] ∝ B_{x̄1} · 1[ΣE ≡ x̄1 + x̄2 (mod N)],

and with the pre-randomizer's noise (single-user changes; x̄2 and both noise indicators
known, Lemma 10's proof averaged over both noises)

    P[E | x̄1, x̄2, b1, b2] ∝ Σ_{t ∈ Z_N} B_t · f1(t − x̄1) · f2(s − t − x̄2),    s = ΣE mod N,

with f_i the truncated discrete Laplace D_{N,p} for a noisy user and the point mass at 0
otherwise. The derivation, and why it holds for repeated shares too, is in the docstring of
:mod:`cloaknet.adversary`. :class:`Posterior` gives the realised privacy loss that Lemmas 3
and 10 bound by ln((1+γ)/(1−γ)) (plus k·ln(1/p) in the single-user case).

All functions raise :class:`~cloaknet.errors.ParameterError` on bad arguments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from cloaknet.adversary_views import as_int, checked_counts, share_list
from cloaknet.errors import ParameterError
from cloaknet.noise import truncated_laplace_pmf
from cloaknet.validation import check_int

__all__ = ["Posterior", "posterior_single_user", "posterior_sum_preserving"]


@dataclass(frozen=True, eq=False)
class Posterior:
    """The adversary's belief about the target's rounded input x̄1 after one view.

    ``support`` holds the feasible x̄1 (ascending), ``log_likelihood[i]`` is
    ln P[E | x̄1 = support[i]] up to one additive constant common to all entries (−inf where
    the view is impossible), and ``probabilities`` the posterior under the prior used
    (non-negative, sums to 1).
    """

    support: NDArray[np.int64]
    log_likelihood: NDArray[np.float64]
    probabilities: NDArray[np.float64]

    @property
    def map_guess(self) -> int:
        """The maximum a posteriori x̄1 (the smallest one on ties)."""
        return int(self.support[int(np.argmax(self.probabilities))])

    def privacy_loss(self) -> float:
        """max over a, b in the support of ln P[E|a] / P[E|b] (nats).

        The realised pointwise loss that Lemma 3 bounds by ln((1+γ)/(1−γ)) for a γ-smooth,
        distinct view, and Lemma 10 by that plus k·ln(1/p). It is +inf when some feasible
        input makes the view impossible, 0 for a one-point support.
        """
        if np.any(np.isneginf(self.log_likelihood)):
            return math.inf
        return float(np.max(self.log_likelihood) - np.min(self.log_likelihood))

    def _index(self, value: int) -> int:
        position = int(np.searchsorted(self.support, value))
        if position >= len(self.support) or int(self.support[position]) != value:
            raise ParameterError(f"{value} is not in the posterior's support")
        return position

    def loss_between(self, a: int, b: int) -> float:
        """ln P[E | a] − ln P[E | b] in nats; +inf / −inf when only b / only a is impossible.

        :raises ParameterError: a or b not in the support, or both impossible (0/0).
        """
        la = float(self.log_likelihood[self._index(a)])
        lb = float(self.log_likelihood[self._index(b)])
        if la == -math.inf and lb == -math.inf:
            raise ParameterError(f"both {a} and {b} are impossible for this view")
        return la - lb


def _log_counts(counts: NDArray[Any]) -> NDArray[np.float64]:
    """ln B_x elementwise (−inf where B_x = 0); exact ints go through math.log."""
    if counts.dtype == object:
        return np.array(
            [math.log(c) if c > 0 else -math.inf for c in counts.tolist()], dtype=np.float64
        )
    as_float = counts.astype(np.float64)
    out = np.full(as_float.shape, -np.inf, dtype=np.float64)
    np.log(as_float, out=out, where=as_float > 0)
    return out


def _prior_over(
    prior: NDArray[Any] | None, precision: int, support: NDArray[np.int64]
) -> NDArray[np.float64]:
    if prior is None:
        return np.ones(len(support), dtype=np.float64)
    arr = np.asarray(prior, dtype=np.float64)
    if arr.shape != (precision + 1,):
        raise ParameterError(f"prior must have shape ({precision + 1},) (over 0..k)")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ParameterError("prior must be finite and non-negative")
    weights: NDArray[np.float64] = arr[support]
    if not np.sum(weights) > 0:
        raise ParameterError("prior gives zero mass to every feasible input")
    return weights


def _make_posterior(
    support: NDArray[np.int64], log_likelihood: NDArray[np.float64], weights: NDArray[np.float64]
) -> Posterior:
    if not np.any(np.isfinite(log_likelihood)):
        raise ParameterError("the view is impossible for every feasible input")
    with np.errstate(divide="ignore"):
        log_post = log_likelihood + np.log(weights)
    top = float(np.max(log_post))
    if top == -math.inf:
        raise ParameterError("the prior gives zero mass to every input consistent with the view")
    unnormalised = np.exp(log_post - top)
    probabilities = unnormalised / np.sum(unnormalised)
    return Posterior(support=support, log_likelihood=log_likelihood, probabilities=probabilities)


def posterior_sum_preserving(
    honest_shares: Sequence[int] | NDArray[np.integer[Any]],
    m: int,
    modulus: int,
    precision: int,
    total: int,
    prior: NDArray[Any] | None = None,
    *,
    counts: NDArray[Any] | None = None,
) -> Posterior:
    """Posterior over the target's x̄1 given the honest residual E and x̄1 + x̄2 = ``total``.

    The sum-preserving neighbourhood of Lemmas 3 and 12: the support is
    {x̄1 ∈ 0..k : 0 <= total − x̄1 <= k} and, by Lemma 3's proof (valid for repeated shares
    too, see the module docstring), P[E | x̄1, total − x̄1] ∝ B_{x̄1 mod N}; the returned
    log-likelihood is exactly ln B_{x̄1 mod N}.

    :param honest_shares: the 2m honest shares E (ints in [0, N); order irrelevant).
    :param m: shares per user, >= 1.
    :param modulus: N >= 2.
    :param precision: k >= 1; inputs x̄ range over 0..k.
    :param total: x̄1 + x̄2 as an integer in 0..2k (known to the adversary).
    :param prior: optional weights over x̄1 = 0..k (shape (k+1,), finite, >= 0); x̄2's prior
        is taken uniform. Default: uniform over the support.
    :param counts: optional precomputed ``subset_sum_counts(honest_shares, m, modulus)``.
    :raises ParameterError: bad parameters; len(E) != 2m; total outside 0..2k; "view
        inconsistent with total" when ΣE ≢ total (mod N); a view impossible for every
        feasible x̄1; a prior with no mass on the possible inputs.
    """
    modulus = check_int("modulus", modulus, 2)
    m = check_int("m", m, 1)
    precision = check_int("precision", precision, 1)
    total = as_int("total", total)
    values = share_list(honest_shares, modulus, "honest_shares")
    if len(values) != 2 * m:
        raise ParameterError(f"expected 2m = {2 * m} honest shares, got {len(values)}")
    low, high = max(0, total - precision), min(precision, total)
    if low > high:
        raise ParameterError(f"total must lie in 0..2k = 0..{2 * precision}, got {total}")
    if sum(values) % modulus != total % modulus:
        raise ParameterError("view inconsistent with total: ΣE ≢ total (mod N)")
    counts = checked_counts(counts, values, m, modulus)
    support = np.arange(low, high + 1, dtype=np.int64)
    log_likelihood = _log_counts(counts)[support % modulus]
    return _make_posterior(support, log_likelihood, _prior_over(prior, precision, support))


def _log_kernel(modulus: int, p: float, noisy: bool) -> NDArray[np.float64]:
    """ln f(d) for d = 0..N−1 (d read mod N): ln D_{N,p}[centred d] if noisy, else ln 1[d≡0]."""
    if not noisy:
        kernel = np.full(modulus, -np.inf, dtype=np.float64)
        kernel[0] = 0.0
        return kernel
    distance = np.arange(modulus, dtype=np.int64)
    distance = np.minimum(distance, modulus - distance)  # |centred d|
    log_mass_zero = math.log(truncated_laplace_pmf(0, modulus, p))
    result: NDArray[np.float64] = log_mass_zero + distance.astype(np.float64) * math.log(p)
    return result


def _logsumexp(values: NDArray[np.float64]) -> float:
    top = float(np.max(values))
    if top == -math.inf:
        return -math.inf
    return top + math.log(float(np.sum(np.exp(values - top))))


def posterior_single_user(
    honest_shares: Sequence[int] | NDArray[np.integer[Any]],
    m: int,
    modulus: int,
    precision: int,
    *,
    other_input: int,
    noise_p: float,
    target_noisy: bool,
    other_noisy: bool,
    prior: NDArray[Any] | None = None,
    counts: NDArray[Any] | None = None,
) -> Posterior:
    """Posterior over the target's x̄1 ∈ 0..k when x̄2 = ``other_input`` is known (Lemmas 10, 13).

    The log-likelihood is ln Σ_t B_t · f1(t − x̄1) · f2(s − t − x̄2) with s = ΣE mod N and f_i
    as in the module docstring: the truncated discrete Laplace mass D_{N,p} for a noisy user,
    the point mass at 0 otherwise. The adversary knows both noise indicators
    (``target_noisy``, ``other_noisy``), a stronger adversary than Lemma 11/13's.

    Computed in float64 log space (B_t = 0 and far-out D masses, which would underflow, are
    handled exactly as −inf / as logs): a_t = ln B_t + ln f2(s − t − x̄2) once, then for
    each x̄1 a log-sum-exp of a_t + ln f1(t − x̄1) over t. Cost O(N·(k+1)) when the target
    is noisy (about 0.1 s for N = 10⁵, k = 100), O(N) otherwise.

    :param honest_shares: the 2m honest shares E.
    :param m: shares per user, >= 1.
    :param modulus: N, odd and >= 3 (the support of D_{N,p}).
    :param precision: k >= 1.
    :param other_input: x̄2 in 0..k.
    :param noise_p: p of D_{N,p}, 0 < p < 1 (p = exp(−1/scale), see
        :func:`cloaknet.noise.noise_p`); validated even if no user is noisy.
    :param prior: optional weights over x̄1 = 0..k (shape (k+1,)); default uniform.
    :param counts: optional precomputed ``subset_sum_counts(honest_shares, m, modulus)``.
    :raises ParameterError: bad parameters, len(E) != 2m, a view impossible for every x̄1,
        or a prior with no mass on the possible inputs.
    """
    modulus = check_int("modulus", modulus, 3)
    m = check_int("m", m, 1)
    precision = check_int("precision", precision, 1)
    truncated_laplace_pmf(0, modulus, noise_p)  # validates odd N and p in (0, 1)
    other = as_int("other_input", other_input)
    if not 0 <= other <= precision:
        raise ParameterError(f"other_input must lie in 0..k = 0..{precision}, got {other}")
    values = share_list(honest_shares, modulus, "honest_shares")
    if len(values) != 2 * m:
        raise ParameterError(f"expected 2m = {2 * m} honest shares, got {len(values)}")
    counts = checked_counts(counts, values, m, modulus)
    s = sum(values) % modulus
    t = np.arange(modulus, dtype=np.int64)
    log_f2 = _log_kernel(modulus, noise_p, bool(other_noisy))
    log_a = _log_counts(counts) + log_f2[(s - t - other) % modulus]
    support = np.arange(precision + 1, dtype=np.int64)
    if target_noisy:
        log_f1 = _log_kernel(modulus, noise_p, True)
        log_likelihood = np.array(
            [_logsumexp(log_a + np.roll(log_f1, int(x1))) for x1 in support], dtype=np.float64
        )
    else:
        log_likelihood = log_a[support % modulus]
    return _make_posterior(support, log_likelihood, _prior_over(prior, precision, support))
