"""The summary tables of the collusion experiment, computed from the attacked rounds.

Each function takes the :class:`~cloaknet.experiments.collusion.rows.AttackRow` of every
round (it picks its own sweep) and returns typed rows sorted by their grid coordinates.
Proportions come with 95% Wilson intervals (:func:`~cloaknet.experiments.stats.wilson_interval`),
medians and percentiles are order statistics
(:func:`~cloaknet.experiments.stats.order_quantile`), so infinite losses are handled exactly.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, TypeVar

from cloaknet import accounting
from cloaknet.errors import ParameterError
from cloaknet.experiments.collusion.bounds import single_user_bound, swap_bound
from cloaknet.experiments.collusion.rows import (
    AttackRow,
    BehaviourRow,
    ColludersRow,
    MessagesRow,
    NetworkedRow,
    ProfilePoint,
    SmoothnessRow,
)
from cloaknet.experiments.collusion.settings import MODES, CollusionSettings
from cloaknet.experiments.stats import mean, order_quantile, proportion, wilson_interval

__all__ = [
    "PROFILE_EPSILONS",
    "behaviours_table",
    "colluders_table",
    "messages_table",
    "networked_table",
    "profile_group",
    "profile_table",
    "smoothness_table",
]

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

K = TypeVar("K", bound="SupportsRichComparison")

#: The ε of the privacy profile: 0.05·1.3^i for i = 0 … 19 (0.05 to about 7.3).
PROFILE_EPSILONS: tuple[float, ...] = tuple(0.05 * 1.3**i for i in range(20))


def _grouped(
    rows: Sequence[AttackRow], sweep: str, key: Callable[[AttackRow], K]
) -> list[tuple[K, list[AttackRow]]]:
    groups: dict[K, list[AttackRow]] = defaultdict(list)
    for row in rows:
        if row.sweep == sweep:
            groups[key(row)].append(row)
    return sorted(groups.items(), key=lambda item: item[0])


def _p_infinite(group: Sequence[AttackRow]) -> float:
    return proportion(math.isinf(r.privacy_loss) for r in group)


def _median_loss(group: Sequence[AttackRow]) -> float:
    return order_quantile([r.privacy_loss for r in group], 0.5)


def _guess_success(group: Sequence[AttackRow]) -> float:
    return proportion(r.guess_correct for r in group)


def messages_table(rows: Sequence[AttackRow]) -> list[MessagesRow]:
    """Privacy loss vs m, per (mode, m) of the ``messages`` sweep; single-user rows also
    split the rounds into those without any honest noise and the rest (:class:`MessagesRow`).
    """
    table = []
    for (mode, m), group in _grouped(rows, "messages", lambda r: (r.mode, r.m)):
        finite = [r.privacy_loss for r in group if math.isfinite(r.privacy_loss)]
        correct = sum(1 for r in group if r.guess_correct)
        interval = wilson_interval(correct, len(group))
        quiet = (
            [r for r in group if not r.target_noisy and not r.other_noisy]
            if mode == "single-user"
            else None
        )
        quiet_correct = None if quiet is None else sum(1 for r in quiet if r.guess_correct)
        table.append(
            MessagesRow(
                mode=mode,
                m=m,
                honest=group[0].honest,
                trials=len(group),
                p_infinite_loss=_p_infinite(group),
                median_loss=_median_loss(group),
                p90_finite_loss=order_quantile(finite, 0.9),
                correct=correct,
                guess_success=correct / len(group),
                guess_ci_low=interval.low,
                guess_ci_high=interval.high,
                prior_success=mean(r.prior_success for r in group),
                p_distinct=proportion(r.distinct for r in group),
                quiet_rounds=None if quiet is None else len(quiet),
                quiet_correct=quiet_correct,
                quiet_infinite=(
                    None if quiet is None else sum(1 for r in quiet if math.isinf(r.privacy_loss))
                ),
                noisy_correct=None if quiet_correct is None else correct - quiet_correct,
            )
        )
    return table


def colluders_table(settings: CollusionSettings, rows: Sequence[AttackRow]) -> list[ColludersRow]:
    """Privacy loss vs |C|, per (mode, |C|) of the ``colluders`` sweep; in single-user mode
    with Lemma 13's (ε, δ) at ε = 2 and the empirical P[loss > bound ε] where it applies."""
    q = settings.colluder_q()
    table = []
    for (mode, colluders), group in _grouped(rows, "colluders", lambda r: (r.mode, r.colluders)):
        n = group[0].users
        bound = (
            single_user_bound(settings, settings.big_m, settings.modulus, n, colluders, q, 2.0)
            if mode == "single-user"
            else None
        )
        over = sum(1 for r in group if r.privacy_loss > bound.epsilon) if bound else None
        interval = wilson_interval(over, len(group)) if over is not None else None
        table.append(
            ColludersRow(
                mode=mode,
                colluders=colluders,
                fraction=colluders / n,
                honest=n - colluders,
                trials=len(group),
                p_infinite_loss=_p_infinite(group),
                median_loss=_median_loss(group),
                bound_epsilon=bound.epsilon if bound else None,
                bound_delta=bound.delta if bound else None,
                empirical_delta=over / len(group) if over is not None else None,
                empirical_delta_ci_high=interval.high if interval else None,
                empirical_delta_ci_low=interval.low if interval else None,
                guess_success=_guess_success(group),
            )
        )
    return table


def smoothness_table(settings: CollusionSettings, rows: Sequence[AttackRow]) -> list[SmoothnessRow]:
    """Lemma 1 per (m, N) of the ``smoothness`` sweep and γ of ``settings.gammas``: how
    often the view is not γ-smooth or not distinct, against η (NaN where the accountant
    rejects the parameters)."""
    table = []
    for (m, modulus), group in _grouped(rows, "smoothness", lambda r: (r.m, r.modulus)):
        for gamma in settings.gammas:
            fails = sum(1 for r in group if not r.distinct or r.gamma > gamma)
            try:
                eta = accounting.smoothness_failure(m, modulus, gamma)
            except ParameterError:
                eta = math.nan
            interval = wilson_interval(fails, len(group))
            table.append(
                SmoothnessRow(
                    m=m,
                    modulus=modulus,
                    gamma=gamma,
                    trials=len(group),
                    empirical_failure=fails / len(group),
                    ci_low=interval.low,
                    ci_high=interval.high,
                    p_not_distinct=proportion(not r.distinct for r in group),
                    eta_bound=eta,
                    collision_term=2 * m * m / modulus,
                )
            )
    return table


def profile_group(
    settings: CollusionSettings, rows: Sequence[AttackRow], mode: str
) -> list[AttackRow]:
    """The rounds of the privacy profile: the ``messages`` sweep at m = ``big_m`` in
    ``mode`` (2 honest users, 8 colluders of 10)."""
    return [r for r in rows if r.sweep == "messages" and r.mode == mode and r.m == settings.big_m]


def profile_table(settings: CollusionSettings, rows: Sequence[AttackRow]) -> list[ProfilePoint]:
    """Empirical P[loss > ε] against the lemmas' δ(ε) (Lemma 5 for sum-preserving swaps,
    Lemma 13 with 8 of 10 colluding for single-user changes) at every ε of
    :data:`PROFILE_EPSILONS`, mode by mode in :data:`MODES` order."""
    q = Fraction(settings.single_user_q)
    points = []
    for mode in MODES:
        group = profile_group(settings, rows, mode)
        for eps in PROFILE_EPSILONS:
            bound = (
                swap_bound(settings.big_m, settings.modulus, eps)
                if mode == "sum-preserving"
                else single_user_bound(settings, settings.big_m, settings.modulus, 10, 8, q, eps)
            )
            over = sum(1 for r in group if r.privacy_loss > eps)
            interval = wilson_interval(over, len(group))
            points.append(
                ProfilePoint(
                    mode=mode,
                    epsilon=eps,
                    trials=len(group),
                    over=over,
                    empirical_delta=over / len(group) if group else math.nan,
                    ci_low=interval.low,
                    ci_high=interval.high,
                    bound_delta=bound.delta if bound else None,
                )
            )
    return points


def behaviours_table(rows: Sequence[AttackRow]) -> list[BehaviourRow]:
    """Per (mode, behaviour) of the ``behaviours`` sweep; only "collide" is outside the
    lemmas' assumptions."""
    table = []
    for (mode, behaviour), group in _grouped(rows, "behaviours", lambda r: (r.mode, r.behaviour)):
        table.append(
            BehaviourRow(
                mode=mode,
                behaviour=behaviour,
                trials=len(group),
                p_infinite_loss=_p_infinite(group),
                median_loss=_median_loss(group),
                guess_success=_guess_success(group),
                mean_sum_error=mean(r.sum_error for r in group if r.sum_error is not None),
                covered_by_lemmas=behaviour != "collide",
            )
        )
    return table


def networked_table(rows: Sequence[AttackRow]) -> list[NetworkedRow]:
    """The networked views next to their simulated twins (a source without rounds is left
    out)."""
    table = []
    for source, sweep in (("networked", "networked"), ("simulated", "networked-sim")):
        group = [r for r in rows if r.sweep == sweep]
        if not group:
            continue
        table.append(
            NetworkedRow(
                source=source,
                rounds=len(group),
                m=group[0].m,
                modulus=group[0].modulus,
                mean_gamma=mean(r.gamma for r in group),
                p_distinct=proportion(r.distinct for r in group),
                p_infinite_loss=_p_infinite(group),
                median_loss=_median_loss(group),
                guess_success=_guess_success(group),
            )
        )
    return table
