"""The cloak's guarantee over a range of round sizes, at the size where it is weakest.

A chain's rounds close with any number of users n in ``[min_users, max_users]``, and every
bound of arXiv 1906.08320 depends on n. Each is monotone in n, so it holds over the whole
range iff it holds at one end:

sum-preserving changes (Lemma 6, ``lemma:sum_swap_series``, with t = n − 1 swaps as in the
proof of Theorem 2; Lemma 12, ``lemma:resilient_privacy_sum_preserving``, with colluders)
    ε = (n − 1)·ln β and δ = η·(β^(n−1) − 1)/(β − 1) both grow with n: weakest at
    ``max_users``. Parameters planned for the smallest round are *not* private for larger
    ones (ε = 0.97 at n = 1,000 is ε = 9.7 at n = 10,000 with the same γ).
single-user changes (Lemma 11, ``lemma:subset_DP_single_user_changes``; Lemma 13,
``lemma:resilient_privacy_single_user``, with colluders)
    ln β and k·ln(1/p) do not depend on n; the tail terms −ln(1 − e^(−q·h)) and e^(−q·h)
    shrink as the honest count h = n − |C| grows: weakest at ``min_users``.
the BBGN bound (arXiv 1909.11225; sum-preserving, the cloak's encoder)
    the σ that m messages achieve grows with the honest count: weakest at ``min_users``.

:func:`weakest_round_size` says which end; :func:`guarantee_at` evaluates the bound at one n;
:func:`guarantee_over_rounds` does both; :func:`range_problem` compares the result with a
stated (ε, δ). The planner (:mod:`cloaknet.planner`) and the chain
file's loader (:mod:`cloaknet.protocol_table`) use them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from cloaknet import accounting
from cloaknet.errors import ParameterError
from cloaknet.params import CloakParams, Mode

__all__ = [
    "BBGN_LEMMA",
    "guarantee_at",
    "guarantee_over_rounds",
    "range_problem",
    "weakest_round_size",
]

#: The ``lemma`` of a :class:`~cloaknet.accounting.PrivacyBound` from the BBGN bound.
BBGN_LEMMA = "BBGN (arXiv 1909.11225)"


def weakest_round_size(mode: Mode, bound: str, min_users: int, max_users: int) -> int:
    """The n in ``[min_users, max_users]`` at which the bound is weakest (module doc):
    ``max_users`` for the sum-preserving lemmas (Lemmas 6 and 12), ``min_users`` for the
    single-user lemmas (Lemmas 11 and 13) and for the BBGN bound.

    :raises ParameterError: ``min_users`` > ``max_users``.
    """
    if min_users > max_users:
        raise ParameterError(f"min_users ({min_users}) exceeds max_users ({max_users})")
    if mode == "sum-preserving" and bound != "bbgn":
        return max_users
    return min_users


def guarantee_at(
    params: CloakParams, gamma: float, bound: str, users: int, colluders: int = 0
) -> accounting.PrivacyBound:
    """(ε, δ) of ``params`` for a round of exactly ``users`` users, ``colluders`` of them
    colluding: Lemma 6 (or 12) with t = n − 1 swaps in sum-preserving mode, or with
    ``bound == "bbgn"`` the BBGN bound (0, 2^−σ) for the n − |C| honest users; Lemma 11 (or
    13) in single-user mode. ``gamma`` is the smoothness slack of Lemma 1 (unused by BBGN).

    :raises ParameterError: as the accountant's functions do (e.g. γ out of range, fewer
        than 3 honest users for BBGN, more than 0.9·n colluders in single-user mode).
    """
    if colluders >= users:
        raise ParameterError(f"colluders ({colluders}) must be fewer than users ({users})")
    if params.mode == "sum-preserving":
        if bound == "bbgn":
            sigma = accounting.bbgn_achieved_sigma(
                params.messages, users - colluders, params.modulus
            )
            return accounting.PrivacyBound(
                epsilon=0.0,
                delta=math.inf if sigma < -1000 else 2.0**-sigma,
                log_delta=-sigma * math.log(2.0),
                lemma=BBGN_LEMMA,
                terms={"sigma": sigma},
                epsilon_exact=Fraction(0),
            )
        return accounting.sum_preserving_bound(
            params.messages, params.modulus, gamma, users - 1,
            lemma="Lemma 12" if colluders else "Lemma 6",
        )
    noise = params.noise
    assert noise is not None  # CloakParams: single-user mode has noise
    return accounting.single_user_bound(
        params.messages, params.modulus, gamma, params.precision, noise.p, noise.q,
        users, colluders, noise_scale=noise.scale,
    )


def guarantee_over_rounds(
    params: CloakParams,
    gamma: float,
    bound: str,
    min_users: int,
    max_users: int,
    colluders: int = 0,
) -> tuple[int, accounting.PrivacyBound]:
    """The worst (ε, δ) of ``params`` over rounds of ``min_users`` to ``max_users`` users,
    and the round size it is attained at (:func:`weakest_round_size`,
    :func:`guarantee_at`)."""
    n = weakest_round_size(params.mode, bound, min_users, max_users)
    return n, guarantee_at(params, gamma, bound, n, colluders)


#: Relative slack when a recomputed ε or δ is compared with a stated one (float rounding).
_SLACK = 1e-12


def range_problem(
    params: CloakParams,
    gamma: float,
    bound: str,
    min_users: int,
    max_users: int,
    colluders: int,
    limits: Mapping[str, float],
    *,
    stated: str,
    prefix: str,
) -> tuple[str, str] | None:
    """``None`` if the guarantee of ``params`` stays within ``limits`` (``{"epsilon": ...,
    "delta": ...}``, either may be left out) for every round of ``min_users`` to
    ``max_users`` users; otherwise the first failing key and a one-line problem naming the
    bound, the ``[round]`` field where it fails (Lemma 6/12: ``max_users``; Lemma 11/13 and
    BBGN: ``min_users``), the achieved values, the exceeded ones (``stated`` says what they
    are, ``prefix`` where: ``"claimed"`` and ``"protocol"`` give ``the claimed
    protocol.epsilon = 1``), and the remedy.

    :raises ParameterError: as :func:`guarantee_at`.
    """
    n, got = guarantee_over_rounds(params, gamma, bound, min_users, max_users, colluders)
    achieved = {"epsilon": got.epsilon, "delta": got.delta}
    failed = [key for key, limit in limits.items() if not achieved[key] <= limit * (1 + _SLACK)]
    if not failed:
        return None
    grows = n == max_users and weakest_round_size(params.mode, bound, 1, 2) == 2
    side, which = ("max_users", "largest") if grows else ("min_users", "smallest")
    shown = ", ".join(f"{prefix}.{key} = {limits[key]:.4g}" for key in failed)
    fix = (
        f"plan for rounds of up to {max_users} users (cloaknet plan --users {min_users} "
        f"--max-users {max_users})"
        if grows
        else f"plan for rounds of at least {min_users} users"
    )
    return failed[0], (
        f"{got.lemma} is weakest in the {which} round: at [round].{side} = {n} users these "
        f"parameters give epsilon = {got.epsilon:.4g}, delta = {got.delta:.3g}, above the "
        f"{stated} {shown}; {fix}"
    )
