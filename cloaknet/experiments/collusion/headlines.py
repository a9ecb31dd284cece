"""The headline table of the collusion report: each bound next to what was measured, with a
verdict in plain words (the guessing rows are :mod:`.guessing`'s).

A bound "held" when the lower end of the 95% Wilson interval of the empirical probability
is at most the bound's δ (so a violation needs evidence, not one unlucky sample), and was
"VIOLATED" otherwise; "broken" marks settings where the protocol fails (too few messages,
too many colluders), again judged by the interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from cloaknet.experiments.collusion.bounds import (
    no_noise_share,
    single_user_bound,
    swap_bound,
)
from cloaknet.experiments.collusion.rows import (
    AttackRow,
    ColludersRow,
    Headline,
    SmoothnessRow,
)
from cloaknet.experiments.collusion.settings import CollusionSettings
from cloaknet.experiments.collusion.tables import profile_group
from cloaknet.experiments.stats import relation, wilson_interval
from cloaknet.experiments.text import fmt

__all__ = [
    "EXPOSURE_LIMIT",
    "colluders_headlines",
    "profile_headlines",
    "smoothness_headlines",
]

#: Beyond Lemma 13 no bound applies; the protocol counts as broken when the input is exposed
#: (loss = ∞) in more than this share of the rounds (the whole 95% interval above it).
EXPOSURE_LIMIT = 0.05


def colluders_headlines(
    settings: CollusionSettings, table: Sequence[ColludersRow]
) -> list[Headline]:
    """Lemma 13 at every |C| where it applies (single-user mode), then the |C| beyond it:
    "broken" when the 95% interval of P[loss = ∞] lies above :data:`EXPOSURE_LIMIT`, "held
    up" when below it, "inconclusive" otherwise; next to the share (1 − q)^h of rounds in
    which none of the h honest users adds noise (the exposed ones)."""
    headlines = []
    for t in table:
        if t.mode != "single-user" or t.bound_delta is None:
            continue
        held = t.empirical_delta_ci_low is not None and t.empirical_delta_ci_low <= t.bound_delta
        headlines.append(
            Headline(
                claim=f"Lemma 13, |C| = {t.colluders} of {settings.colluder_users}",
                bound=f"(ε, δ) = ({fmt(t.bound_epsilon)}, {fmt(t.bound_delta)})",
                empirical=f"P[loss > ε] = {fmt(t.empirical_delta)}",
                verdict="held" if held else "VIOLATED",
            )
        )
    q = settings.colluder_q()
    for t in table:
        if t.mode != "single-user" or t.bound_delta is not None:
            continue
        low, high = wilson_interval(round(t.p_infinite_loss * t.trials), t.trials)
        side = relation(low, high, EXPOSURE_LIMIT)
        verdict = {
            "above": f"broken: input exposed in more than {fmt(EXPOSURE_LIMIT)} of rounds",
            "below": "held up (no lemma applies)",
            "within": f"inconclusive (no lemma applies; {fmt(EXPOSURE_LIMIT)} within the CI)",
        }[side]
        headlines.append(
            Headline(
                claim=f"beyond Lemma 13: |C| = {t.colluders} of {settings.colluder_users}",
                bound=(
                    f"none (|C| > 0.9 n); no honest noise in (1−q)^{t.honest} = "
                    f"{fmt(no_noise_share(q, t.honest))} of rounds"
                ),
                empirical=(
                    f"P[loss = ∞] = {fmt(t.p_infinite_loss)} (95% CI {fmt(low)}–{fmt(high)})"
                ),
                verdict=verdict,
            )
        )
    return headlines


def smoothness_headlines(table: Sequence[SmoothnessRow]) -> list[Headline]:
    """Lemma 1 at the largest γ whose η is informative (< 1), for every (m, N)."""
    informative = [t for t in table if t.eta_bound < 1]
    if not informative:
        return []
    largest = max(t.gamma for t in informative)
    return [
        Headline(
            claim=f"Lemma 1, m = {t.m}, N = {t.modulus}, γ = {t.gamma}",
            bound=f"η = {fmt(t.eta_bound)}",
            empirical=f"{fmt(t.empirical_failure)} (CI high {fmt(t.ci_high)})",
            verdict="held" if t.ci_low <= t.eta_bound else "VIOLATED",
        )
        for t in informative
        if t.gamma == largest
    ]


def profile_headlines(settings: CollusionSettings, rows: Sequence[AttackRow]) -> list[Headline]:
    """Lemma 5 at ε = 1 (sum-preserving) and Lemma 13 at ε = 2 (single-user, 8 of 10
    colluding) at m = ``big_m``, each where the lemma applies and rounds exist."""
    q = Fraction(settings.single_user_q)
    headlines = []
    for mode, target in (("sum-preserving", 1.0), ("single-user", 2.0)):
        group = profile_group(settings, rows, mode)
        bound = (
            swap_bound(settings.big_m, settings.modulus, target)
            if mode == "sum-preserving"
            else single_user_bound(settings, settings.big_m, settings.modulus, 10, 8, q, target)
        )
        if not bound or not group:
            continue
        over = sum(1 for r in group if r.privacy_loss > bound.epsilon)
        held = wilson_interval(over, len(group)).low <= bound.delta
        headlines.append(
            Headline(
                claim=(
                    "Lemma 5 (one sum-preserving swap)"
                    if mode == "sum-preserving"
                    else "Lemma 13 (single-user, 8 of 10 colluding)"
                )
                + f", m = {settings.big_m}, N = {settings.modulus}",
                bound=f"(ε, δ) = ({fmt(bound.epsilon)}, {fmt(bound.delta)})",
                empirical=f"P[loss > ε] = {fmt(over / len(group))} over {len(group)} rounds",
                verdict="held" if held else "VIOLATED",
            )
        )
    return headlines
