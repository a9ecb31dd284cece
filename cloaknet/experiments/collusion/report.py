"""``report.md`` of the collusion experiment: the headline table, then one section per sweep
(text computed from the tables, the plot, the table)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.experiments.collusion.guessing import first_clean_m, references
from cloaknet.experiments.collusion.rows import (
    BehaviourRow,
    ColludersRow,
    Headline,
    MessagesRow,
    NetworkedRow,
    ProfilePoint,
    SmoothnessRow,
)
from cloaknet.experiments.collusion.settings import MODES, CollusionSettings
from cloaknet.experiments.compare.lineup import bound_label
from cloaknet.experiments.stats import wilson_interval
from cloaknet.experiments.text import delta_label, fmt, markdown_table
from cloaknet.plans import select_plan

__all__ = [
    "CONTRAST_DELTA",
    "CONTRAST_EPSILON",
    "behaviours_section",
    "colluders_section",
    "messages_section",
    "networked_section",
    "parameters_note",
    "profile_section",
    "report",
    "smoothness_section",
]


#: The target of the planner's choice the report quotes for contrast (that of the compare
#: experiment's Figure 1 table).
CONTRAST_EPSILON = 1.0
CONTRAST_DELTA = 1e-6


def _planner_choice(users: int) -> str:
    """What ``cloaknet plan`` selects for ``users`` users at (ε, δ) = (1, 10⁻⁶) in each mode
    (:func:`cloaknet.plans.select_plan`): protocol, bound (named as in the compare report),
    noise, m, modulus and k."""
    parts = []
    for mode in MODES:
        try:
            chosen = select_plan(users, CONTRAST_EPSILON, CONTRAST_DELTA, mode=mode)
        except (InfeasiblePlanError, ParameterError) as exc:
            parts.append(f"{mode}: no plan ({exc})")
            continue
        runs = "the cloak" if chosen.protocol_name == "cloak" else "split-and-mix (bbgn)"
        noise = "no noise" if chosen.noise == "none" else f"{chosen.noise} noise"
        parts.append(
            f"{mode}: {runs} with the {bound_label(chosen.bound)} and {noise}, "
            f"m = {chosen.messages}, N = {chosen.modulus}, k = {chosen.precision}"
        )
    return "; ".join(parts)


def parameters_note(settings: CollusionSettings) -> str:
    """The report's opening statement about its parameters: they are fixed toy parameters
    set in :class:`CollusionSettings`, not the planner's, and why (to make the adversary's
    advantage measurable), naming every m, N and q the rounds use, with what
    ``cloaknet plan`` would select at the colluder sweep's n for contrast."""
    s = settings
    largest = max(s.modulus, *s.smooth_moduli, s.networked_modulus)
    half_width = 0.5 * (
        wilson_interval(s.trials // 2, s.trials).high
        - wilson_interval(s.trials // 2, s.trials).low
    )
    return (
        "**Fixed toy parameters, not the planner's.** Every round uses parameters fixed by "
        "hand (`CollusionSettings`), not those `cloaknet plan` selects: "
        f"m ∈ {{{', '.join(str(m) for m in s.m_values)}}} messages per user in the m sweep, "
        f"m = {s.big_m} in the colluder, profile and behaviour sweeps, "
        f"m ∈ {{{', '.join(str(m) for m in s.smooth_m)}}} in the smoothness grid and "
        f"m = {s.networked_m} in the networked chain; modulus N = {s.modulus} (the smoothness "
        f"grid: N ∈ {{{', '.join(str(n) for n in s.smooth_moduli)}}}; the networked chain: "
        f"N = {s.networked_modulus}); precision k = {s.precision}; single-user noise with "
        f"k·ln(1/p) = {s.noise_epsilon} added with probability q = {s.single_user_q} "
        f"(q = {fmt(float(s.colluder_q()))} in the colluder sweep, so that e^(−q·h) = 1% at "
        "the fewest honest users Lemma 13 allows). They are small on purpose, to make the "
        f"adversary's advantage measurable: with k = {s.precision} the target's input takes "
        f"one of {s.precision + 1} values (prior 1/{s.precision + 1} in single-user mode), "
        f"so {s.trials} rounds per point of the m and colluder sweeps pin its guessing "
        f"accuracy down to ±{fmt(half_width, 2)} or better (95% Wilson interval); "
        f"N ≤ {largest} keeps the exact posterior, which "
        "runs over all N residues, cheap; and the m sweep starts at m = 1, where the lemmas' "
        "bounds are vacuous and the attack should win. For contrast, at "
        f"n = {s.colluder_users}, ε = {CONTRAST_EPSILON:g}, δ = {delta_label(CONTRAST_DELTA)} "
        f"`cloaknet plan` selects: {_planner_choice(s.colluder_users)}. The verdicts below "
        "test the lemmas' bounds and the attack at the toy parameters; they do not measure "
        "the privacy of a planned deployment.\n"
    )


def _first_informative_m(modulus: int) -> int | None:
    """The least m in 4 … 199 with 18√m·N²/4^m < 1 (Lemma 1's smoothness term below 1/γ²)."""
    return next((m for m in range(4, 200) if 18 * math.sqrt(m) * modulus**2 / 4.0**m < 1.0), None)


def messages_section(settings: CollusionSettings, table: Sequence[MessagesRow]) -> str:
    """Privacy loss vs messages per user: where the adversary excluded inputs outright, the
    first m without excess infinite losses (:func:`~.guessing.first_clean_m`), and how the
    single-user rounds without noise fared over the whole sweep."""
    sentences = []
    for mode in MODES:
        sub = [t for t in table if t.mode == mode]
        small = [t.p_infinite_loss for t in sub if t.m <= 3]
        clean = first_clean_m(settings, table, mode)
        exposed = (
            f"at m ≤ 3 the adversary excluded some feasible input outright (loss = ∞) in "
            f"{fmt(min(small))}–{fmt(max(small))} of the rounds; "
            if small
            else ""
        )
        sentences.append(
            f"{mode}: {exposed}the smallest m in the grid without excess infinite losses "
            f"(95% interval) was {clean if clean is not None else 'none'}."
        )
    quiet = [t for t in table if t.quiet_rounds]
    quiet_rounds = sum(t.quiet_rounds or 0 for t in quiet)
    if quiet_rounds:
        infinite = sum(t.quiet_infinite or 0 for t in quiet)
        correct = sum(t.quiet_correct or 0 for t in quiet)
        sentences.append(
            f"Single-user rounds in which no honest user added noise: {quiet_rounds} over the "
            f"sweep, with infinite loss in {infinite} and the input guessed right in {correct} "
            "of them (the sum and the other user's input then determine the target's)."
        )
    text = (
        " ".join(sentences)
        + f" Lemma 1's smoothness term 18√m·N²/(γ²·2^(2m)) drops below 1/γ² only from m = "
        f"{_first_informative_m(settings.modulus)} at N = {settings.modulus}: with fewer "
        "messages the 2m shares have too few subset sums to cover every feasible input, which "
        "is what the adversary exploits. The guessing columns: 'guess correct' with its 95% "
        "Wilson interval, 'prior' the best guess without the view, 'no-noise baseline' an "
        "adversary right in every round without honest noise and at the prior otherwise "
        "(the prior in sum-preserving mode, which adds no noise)."
    )
    return (
        "## Privacy loss vs messages per user\n\n![loss vs m](loss_vs_m.png)\n\n"
        + text
        + "\n\n"
        + markdown_table(
            [
                "mode",
                "m",
                "trials",
                "P[loss=∞]",
                "median loss",
                "90% finite loss",
                "guess correct",
                "95% CI",
                "prior",
                "no-noise baseline",
                "rounds without noise",
                "distinct",
            ],
            [
                [
                    t.mode,
                    t.m,
                    t.trials,
                    t.p_infinite_loss,
                    t.median_loss,
                    t.p90_finite_loss,
                    t.guess_success,
                    f"{fmt(t.guess_ci_low)}–{fmt(t.guess_ci_high)}",
                    t.prior_success,
                    references(settings, t).baseline,
                    t.quiet_rounds,
                    t.p_distinct,
                ]
                for t in table
            ],
        )
    )


def colluders_section(table: Sequence[ColludersRow]) -> str:
    """Privacy loss vs the colluder fraction."""
    return (
        "## Colluder fraction\n\n![colluders](loss_vs_colluders.png)\n\n"
        "The adversary is handed every honest user but the target and one partner. "
        "In single-user mode what the colluders take away is noise: with h honest users the "
        "chance that none of them added noise is (1−q)^h, and then the target's input is "
        "exposed. Lemma 13 (ε = 2, γ taking what the noise terms leave) is evaluated where it "
        "applies (|C| ≤ 0.9 n). In sum-preserving mode the residual view of two honest users "
        "does not depend on |C|; with one honest user left there is no sum-preserving "
        "neighbour and the input is known.\n\n"
        + markdown_table(
            [
                "mode",
                "|C|",
                "|C|/n",
                "honest",
                "trials",
                "P[loss=∞]",
                "median loss",
                "bound ε",
                "bound δ",
                "P[loss > bound ε]",
                "95% CI high",
            ],
            [
                [
                    t.mode,
                    t.colluders,
                    t.fraction,
                    t.honest,
                    t.trials,
                    t.p_infinite_loss,
                    t.median_loss,
                    t.bound_epsilon,
                    t.bound_delta,
                    t.empirical_delta,
                    t.empirical_delta_ci_high,
                ]
                for t in table
            ],
        )
    )


def smoothness_section(table: Sequence[SmoothnessRow]) -> str:
    """Lemma 1: smoothness and distinctness, empirical vs η."""
    violations = [t for t in table if t.ci_low > t.eta_bound]
    informative = [t for t in table if t.eta_bound < 1]
    return (
        "## Lemma 1: smoothness and distinctness\n\n![smoothness](smoothness_vs_bound.png)\n\n"
        f"{len(informative)} of {len(table)} settings give a non-vacuous η (< 1); "
        f"{len(violations)} show an empirical failure rate above the bound (95% CI). "
        "Where the bound is informative, the collision term 2m²/N dominates and is close to "
        "the observed rate of repeated shares; the smoothness term is loose by orders of "
        "magnitude (the realized γ of two users' shares is far below the γ the lemma needs).\n\n"
        + markdown_table(
            [
                "m",
                "N",
                "γ",
                "trials",
                "empirical",
                "95% CI high",
                "P[not distinct]",
                "η bound",
                "2m²/N",
            ],
            [
                [
                    t.m,
                    t.modulus,
                    t.gamma,
                    t.trials,
                    t.empirical_failure,
                    t.ci_high,
                    t.p_not_distinct,
                    t.eta_bound,
                    t.collision_term,
                ]
                for t in table
            ],
        )
    )


def profile_section(points: Sequence[ProfilePoint]) -> str:
    """The privacy profile: empirical P[loss > ε] vs the lemmas' δ(ε)."""
    bounded = [c for c in points if c.bound_delta is not None]
    violations = [c for c in bounded if c.bound_delta is not None and c.ci_low > c.bound_delta]
    return (
        "## Privacy profile: empirical vs Lemma 5 / Lemma 13\n\n"
        "![profile](privacy_profile.png)\n\n"
        "For each ε the lemmas give δ(ε) with γ spending what ε leaves; the empirical "
        "P[loss > ε] over the simulated views upper-bounds the true δ(ε) of the view "
        f"(the hockey-stick divergence). Violations (95% CI above the bound): {len(violations)} "
        f"of {len(bounded)} points.\n\n"
        + markdown_table(
            ["mode", "ε", "trials", "empirical P[loss > ε]", "bound δ"],
            [[c.mode, c.epsilon, c.trials, c.empirical_delta, c.bound_delta] for c in bounded],
        )
    )


def behaviours_section(table: Sequence[BehaviourRow]) -> str:
    """Deviating colluders."""
    return (
        "## Colluder behaviours\n\n"
        "Colluders reveal exactly what they sent, so removing their messages leaves the honest "
        "users' shares whatever they sent: deviations change the analyzer's sum (column 'mean "
        "sum error', in units of the input), not the honest users' privacy. The lemmas condition "
        "on the colluders' messages, so they cover any messages chosen independently of the "
        "honest users' randomness (honest, zeros, reuse); 'collide' models colluders that copy "
        "honest shares, which needs access the lemmas do not grant.\n\n"
        + markdown_table(
            [
                "mode",
                "behaviour",
                "trials",
                "P[loss=∞]",
                "median loss",
                "guess correct",
                "mean sum error",
                "covered by the lemmas",
            ],
            [
                [
                    t.mode,
                    t.behaviour,
                    t.trials,
                    t.p_infinite_loss,
                    t.median_loss,
                    t.guess_success,
                    t.mean_sum_error,
                    t.covered_by_lemmas,
                ]
                for t in table
            ],
        )
    )


def networked_section(table: Sequence[NetworkedRow]) -> str:
    """Views captured from the networked chain next to simulated ones."""
    return (
        "## Views captured from the networked chain\n\n"
        "Rounds through a real in-process chain (2 mixes, websockets, onions, sqlite); the "
        "analyzer's `dump_dir` captured its input, the 8 colluders' revealed messages were "
        "removed and the residual attacked exactly as in the simulator. The statistics should "
        "agree with simulated views of the same parameters (the networked sample is small).\n\n"
        + markdown_table(
            [
                "source",
                "rounds",
                "m",
                "N",
                "mean realized γ",
                "distinct",
                "P[loss=∞]",
                "median loss",
                "guess correct",
            ],
            [
                [
                    t.source,
                    t.rounds,
                    t.m,
                    t.modulus,
                    t.mean_gamma,
                    t.p_distinct,
                    t.p_infinite_loss,
                    t.median_loss,
                    t.guess_success,
                ]
                for t in table
            ],
        )
    )


def report(
    settings: CollusionSettings,
    sections: Sequence[str],
    headline: Sequence[Headline],
    seconds: float,
    count: int,
    guessing: Sequence[str] = (),
) -> str:
    """The Markdown text of ``report.md``: the statement that the parameters are fixed toy
    parameters (:func:`parameters_note`), a summary of the verdicts, the ``guessing``
    sentences (:func:`~.guessing.guess_sentence`, up front because they carry the causes),
    the headline table, the ``sections`` in order, and the list of files; ``count``
    attacked rounds took ``seconds``."""
    held = sum(1 for h in headline if h.verdict == "held")
    violated = sum(1 for h in headline if h.verdict == "VIOLATED")
    broken = [h for h in headline if h.verdict.startswith("broken")]
    summary = (
        f"Of {held + violated} bound checks in the headline table, {held} held and "
        f"{violated} were violated. "
        + (f"Broken: {'; '.join(h.claim for h in broken)}. " if broken else "Nothing broke. ")
    )
    s = settings
    text = [
        "# Colluding users against the invisibility cloak\n",
        f"Generated by `cloaknet experiment collusion{' --quick' if s.quick else ''} "
        f"--trials {s.trials}` in {seconds:.0f} s ({count} attacked rounds, {s.jobs} processes"
        f"{'' if s.seed is None else f', seed {s.seed}'}).\n",
        parameters_note(s),
        "The adversary is the analyzer colluding with |C| users; it removes their revealed "
        "messages and computes the exact posterior of the target's input from the remaining "
        "shares (counts B_x of Lemma 3; in single-user mode convolved with D_{N,p}, and told "
        "the other honest user's input and who added noise).\n",
        "## Headline: empirical vs bound\n",
        summary + "\n",
    ]
    if guessing:
        text.append(
            "How often the adversary's best guess of the target's input was right, against "
            "the prior and the no-noise baseline (an adversary right in every round without "
            "honest noise and at the prior otherwise):\n"
        )
        text.append("".join(f"* {sentence}\n" for sentence in guessing))
    text.append(
        markdown_table(
            ["claim", "bound / reference", "empirical", "verdict"],
            [[h.claim, h.bound, h.empirical, h.verdict] for h in headline],
        )
    )
    text.extend(section + "\n" for section in sections)
    text.append(
        "## Files\n\n`trials.csv` (every attacked round), `loss_vs_m.csv`, "
        "`colluders.csv`, `smoothness.csv`, `privacy_profile.csv`, `behaviours.csv`, "
        "`networked.csv`, and the PNG plots above.\n"
    )
    return "\n".join(text)
