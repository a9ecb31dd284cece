"""Judging the adversary's guesses: does its accuracy beat the prior, the no-noise baseline,
and what the noise allows?

Three reference values for the accuracy of the adversary's MAP guess of the target's input
(:class:`References`):

* the **prior**: the best guess without the view (single-user: 1/(k+1); sum-preserving: one
  over the number of inputs consistent with the sum, which this notion reveals by design);
* the **no-noise baseline**: an adversary that is right in every round in which no honest
  user added noise (single-user: probability π₀ = (1 − q)^h, the input is then determined by
  the sum and the other user's input) and guesses at the prior otherwise,
  π₀ + (1 − π₀)·prior; sum-preserving mode adds no noise and its prior already knows the sum,
  so there the baseline is the prior;
* the **noise ceiling**: the most a view revealing only the (noisy) sum allows,
  π₀ + (1 − π₀)·e^ε₀/(e^ε₀ + k) (:func:`~.bounds.noise_guess_ceiling`); the prior in
  sum-preserving mode.

A reference is "beaten" only when the whole 95% Wilson interval of the accuracy lies above
it (:func:`~cloaknet.experiments.stats.relation`). Accuracy above the ceiling means the
shares leak more than the sum: the verdict starts with "broken". Causes are stated only when
the rounds show them (:func:`guess_sentence`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from cloaknet.experiments.collusion.bounds import no_noise_share, noise_guess_ceiling
from cloaknet.experiments.collusion.rows import Headline, MessagesRow
from cloaknet.experiments.collusion.settings import CollusionSettings
from cloaknet.experiments.stats import overlap, relation, wilson_interval
from cloaknet.experiments.text import fmt

__all__ = [
    "References",
    "first_clean_m",
    "guess_headlines",
    "guess_sentence",
    "guess_verdict",
    "references",
]


@dataclass(frozen=True)
class References:
    """The reference accuracies of one (mode, m) row (module doc): ``prior``, ``baseline``
    (no-noise), ``ceiling`` (what a noisy-sum-only view allows), all in [0, 1] with
    prior <= baseline <= ceiling; ``no_noise_share`` π₀ and ``noisy_ceiling`` (the ceiling
    within the noisy rounds) are None in sum-preserving mode."""

    prior: float
    baseline: float
    ceiling: float
    no_noise_share: float | None
    noisy_ceiling: float | None


def references(settings: CollusionSettings, row: MessagesRow) -> References:
    """The references of ``row`` (a ``messages`` sweep row, whose noise probability is
    ``settings.single_user_q``)."""
    prior = row.prior_success
    if row.mode != "single-user":
        return References(prior, prior, prior, None, None)
    share = no_noise_share(Fraction(settings.single_user_q), row.honest)
    noisy = noise_guess_ceiling(settings)
    return References(
        prior=prior,
        baseline=share + (1 - share) * prior,
        ceiling=share + (1 - share) * noisy,
        no_noise_share=share,
        noisy_ceiling=noisy,
    )


def guess_verdict(row: MessagesRow, refs: References) -> str:
    """Which references the accuracy beats, in words (module doc for "beats")."""
    low, high = row.guess_ci_low, row.guess_ci_high
    if row.mode != "single-user":
        if relation(low, high, refs.prior) == "above":
            return "broken: beats the prior (= the no-noise baseline)"
        return "does not beat the prior (= the no-noise baseline)"
    if relation(low, high, refs.ceiling) == "above":
        return "broken: beats the prior, the no-noise baseline and what the noise allows"
    if relation(low, high, refs.baseline) == "above":
        return "beats the prior and the no-noise baseline (within what the noise allows)"
    if relation(low, high, refs.prior) == "above":
        below = relation(low, high, refs.baseline) == "below"
        return f"beats the prior, {'below' if below else 'not'} the no-noise baseline"
    return "beats neither the prior nor the no-noise baseline"


def _ci(low: float, high: float) -> str:
    return f"95% CI {fmt(low)}–{fmt(high)}"


def _cause(settings: CollusionSettings, row: MessagesRow, refs: References) -> str:
    """The split of single-user rounds by noise, when the rounds show it (else "")."""
    quiet, quiet_correct = row.quiet_rounds, row.quiet_correct
    if quiet is None or quiet_correct is None or row.noisy_correct is None:
        return ""
    if refs.noisy_ceiling is None or refs.no_noise_share is None:
        return ""
    noisy = row.trials - quiet
    if quiet == 0 or noisy == 0:
        return ""
    quiet_ci = wilson_interval(quiet_correct, quiet)
    noisy_ci = wilson_interval(row.noisy_correct, noisy)
    noisy_rate = row.noisy_correct / noisy
    eps0 = float(Fraction(settings.precision) / settings.noise_scale)
    side = relation(noisy_ci.low, noisy_ci.high, refs.noisy_ceiling)
    beyond = side == "above"
    allows = (
        f"the at most {fmt(refs.noisy_ceiling)} that the noise (k·ln(1/p) = {fmt(eps0)}) "
        "allows a view revealing only the noisy sum"
    )
    noisy_text = f"in the other {noisy} rounds it was right {fmt(noisy_rate)} of the time " + (
        f"({_ci(*noisy_ci)}), above {allows}: the shares themselves leak."
        if beyond
        else f"({_ci(*noisy_ci)}, "
        + ("below " if side == "below" else "which includes ")
        + f"{allows}; the prior is {fmt(refs.prior)})."
    )
    separated = not overlap(quiet_ci, noisy_ci) and quiet_ci.low > noisy_ci.high
    quiet_text = (
        f"in the {quiet} of {row.trials} rounds in which no honest user added noise "
        f"(expected share (1−q)^{row.honest} = {fmt(refs.no_noise_share)} at these toy "
        f"parameters, q = {settings.single_user_q}) it was right {quiet_correct} times and the "
        f"loss was infinite {row.quiet_infinite} times; "
    )
    if separated and not beyond:
        return " The data show why: " + quiet_text + noisy_text
    return " By rounds: " + quiet_text + noisy_text


def guess_sentence(settings: CollusionSettings, row: MessagesRow) -> str:
    """One sentence for the headline summary: the accuracy with its interval against the
    prior and the no-noise baseline, which one it beats, and — single-user — the split of the
    rounds by noise; "The data show why" only when the rounds without noise were guessed
    right clearly more often than the others (disjoint intervals) and the others stay within
    the noise ceiling."""
    refs = references(settings, row)
    verdict = guess_verdict(row, refs)
    head = (
        f"{row.mode}, m = {row.m}: the adversary guessed the target's input right "
        f"{fmt(row.guess_success)} of the time ({_ci(row.guess_ci_low, row.guess_ci_high)}) "
    )
    if row.mode != "single-user":
        return (
            head + f"against a prior of {fmt(refs.prior)} (the best guess from the sum alone; "
            f"this mode adds no noise, so that is also the no-noise baseline) — {verdict}; "
            "it excluded a feasible input outright (loss = ∞) in "
            + (
                f"{fmt(row.p_infinite_loss)} of the rounds."
                if row.p_infinite_loss > 0
                else "none of the rounds."
            )
        )
    return (
        head + f"against a prior of {fmt(refs.prior)} and a no-noise baseline of "
        f"{fmt(refs.baseline)} — {verdict}." + _cause(settings, row, refs)
    )


def guess_headlines(settings: CollusionSettings, table: Sequence[MessagesRow]) -> list[Headline]:
    """The headline rows for m = 1 and m = ``big_m``: the accuracy against the prior and the
    no-noise baseline (:func:`guess_verdict`)."""
    out = []
    for row in table:
        if row.m not in (1, settings.big_m):
            continue
        refs = references(settings, row)
        if row.mode == "single-user" and refs.no_noise_share is not None:
            share = refs.no_noise_share
            reference = (
                f"prior {fmt(refs.prior)}; no-noise baseline {fmt(refs.baseline)} "
                f"((1−q)^{row.honest} = {fmt(share)} of rounds without noise)"
            )
            exposure = f"P[loss=∞] {fmt(row.p_infinite_loss)} (no noise: {fmt(share)})"
        else:
            reference = f"prior {fmt(refs.prior)} (= no-noise baseline: no noise in this mode)"
            exposure = f"P[loss=∞] {fmt(row.p_infinite_loss)}"
        out.append(
            Headline(
                claim=f"m = {row.m} ({row.mode}): adversary's guess",
                bound=reference,
                empirical=(
                    f"guess correct {fmt(row.guess_success)} "
                    f"({_ci(row.guess_ci_low, row.guess_ci_high)}); {exposure}"
                ),
                verdict=guess_verdict(row, refs),
            )
        )
    return out


def first_clean_m(
    settings: CollusionSettings, table: Sequence[MessagesRow], mode: str
) -> int | None:
    """The least m of ``mode`` whose P[loss = ∞] shows no excess over the rounds without
    noise: none observed in sum-preserving mode; the 95% Wilson interval not above
    (1 − q)^h in single-user mode. None when no m qualifies."""
    clean = []
    for row in table:
        if row.mode != mode:
            continue
        infinite = round(row.p_infinite_loss * row.trials)
        if mode == "single-user":
            share = no_noise_share(Fraction(settings.single_user_q), row.honest)
            low, high = wilson_interval(infinite, row.trials)
            ok = relation(low, high, share) != "above"
        else:
            ok = infinite == 0
        if ok and not math.isnan(row.p_infinite_loss):
            clean.append(row.m)
    return min(clean) if clean else None
