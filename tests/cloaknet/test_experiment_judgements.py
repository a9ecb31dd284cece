"""The reports say what their data support: synthetic rows in, headline and finding text out.

Collusion: the adversary's guessing accuracy against the prior, the no-noise baseline and
the noise ceiling, and causes stated only when the rounds show them. Compare: no trend,
ranking or monotonicity claimed where the 95% intervals overlap, and the cheu row named as the
project's calibrated variant with its rule. Plus the plot helpers that keep markers apart and
never draw a zero count as a measurement.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from cloaknet.experiments.collusion import CollusionSettings
from cloaknet.experiments.collusion.bounds import noise_guess_ceiling
from cloaknet.experiments.collusion.guessing import (
    first_clean_m,
    guess_headlines,
    guess_sentence,
    guess_verdict,
    references,
)
from cloaknet.experiments.collusion.rows import MessagesRow
from cloaknet.experiments.compare import CompareSettings
from cloaknet.experiments.compare.findings import cheu_rule, differences, findings, versus
from cloaknet.experiments.compare.plots import (
    infeasible_cells,
    plot_communication,
    plot_error,
    protocol_offsets,
)
from cloaknet.experiments.compare.report import report as compare_report
from cloaknet.experiments.compare.rows import CellRow, Measurement, Plan
from cloaknet.experiments.plotting import log_offsets, probability_points
from cloaknet.experiments.stats import overlap, relation, wilson_interval
from cloaknet.noise import noise_p, truncated_laplace_pmf

# --------------------------------------------------------------------------- collusion

SETTINGS = CollusionSettings.default(trials=200, jobs=1, seed=None, quick=True)
PRIOR = 1 / 11  # k = 10


def _single(correct: int, quiet: int, quiet_correct: int, **changes: object) -> MessagesRow:
    """200 single-user rounds at m = 20 with 2 honest users, ``quiet`` of them without
    noise."""
    row = MessagesRow(
        mode="single-user",
        m=20,
        honest=2,
        trials=200,
        p_infinite_loss=quiet / 200,
        median_loss=0.5,
        p90_finite_loss=0.5,
        correct=correct,
        guess_success=correct / 200,
        guess_ci_low=wilson_interval(correct, 200).low,
        guess_ci_high=wilson_interval(correct, 200).high,
        prior_success=PRIOR,
        p_distinct=1.0,
        quiet_rounds=quiet,
        quiet_correct=quiet_correct,
        quiet_infinite=quiet,
        noisy_correct=correct - quiet_correct,
    )
    return dataclasses.replace(row, **changes)  # type: ignore[arg-type]


def _sum_preserving(correct: int, m: int = 20, p_infinite: float = 0.0) -> MessagesRow:
    low, high = wilson_interval(correct, 200)
    return MessagesRow(
        mode="sum-preserving",
        m=m,
        honest=2,
        trials=200,
        p_infinite_loss=p_infinite,
        median_loss=0.0,
        p90_finite_loss=0.0,
        correct=correct,
        guess_success=correct / 200,
        guess_ci_low=low,
        guess_ci_high=high,
        prior_success=1 / 6,
        p_distinct=1.0,
    )


def test_references_of_a_single_user_row() -> None:
    refs = references(SETTINGS, _single(73, 47, 47))
    share = 0.25  # (1 − 1/2)², two honest users
    ceiling = math.exp(0.5) / (math.exp(0.5) + 10)
    assert refs.no_noise_share == share and refs.prior == PRIOR
    assert refs.baseline == pytest.approx(share + (1 - share) * PRIOR)
    assert refs.noisy_ceiling == pytest.approx(ceiling)
    assert refs.ceiling == pytest.approx(share + (1 - share) * ceiling)
    sp = references(SETTINGS, _sum_preserving(25))
    assert sp.prior == sp.baseline == sp.ceiling == 1 / 6 and sp.no_noise_share is None


def test_noise_ceiling_bounds_the_best_guess_from_a_noisy_sum() -> None:
    """The exact accuracy of the best guess of x̄ ∈ {0..k} from x̄ + w mod N, w ~ D_{N,p}
    (one noisy user, the view revealing only the sum), is at most the ceiling — and not far
    below it, so the ceiling is a meaningful reference."""
    k, modulus = SETTINGS.precision, SETTINGS.modulus
    p = noise_p(SETTINGS.noise_scale)
    half = (modulus - 1) // 2
    pmf = np.array([truncated_laplace_pmf(j, modulus, p) for j in range(-half, half + 1)])
    # likelihood of observation s (as an offset from 0) for input c: pmf[s − c]
    best = 0.0
    for s in range(-half, half + 1):
        best += max(pmf[(s - c + half) % modulus] for c in range(k + 1)) / (k + 1)
    ceiling = noise_guess_ceiling(SETTINGS)
    assert best <= ceiling + 1e-12
    assert best >= PRIOR


def test_above_the_prior_within_the_no_noise_baseline_says_so_and_why() -> None:
    """The issue's case: 0.365 correct against a prior of 0.09; the 47 rounds without noise
    were all guessed right and the others stay within what the noise allows."""
    row = _single(73, quiet=47, quiet_correct=47)
    verdict = guess_verdict(row, references(SETTINGS, row))
    assert verdict == "beats the prior, not the no-noise baseline"
    text = guess_sentence(SETTINGS, row)
    assert "against a prior of 0.0909 and a no-noise baseline of 0.318" in text
    assert "The data show why: in the 47 of 200 rounds in which no honest user added noise" in (
        text
    )
    assert "right 47 times" in text and "leak" not in text
    assert "no excess exposure" not in text


def test_no_cause_claimed_when_the_rounds_do_not_show_it() -> None:
    """Same accuracy, but the rounds without noise were not the ones guessed right: the noisy
    rounds beat what the noise allows, so the shares leak and no-noise is not the cause."""
    row = _single(73, quiet=47, quiet_correct=10)
    text = guess_sentence(SETTINGS, row)
    assert "The data show why" not in text
    assert "the shares themselves leak" in text


def test_verdicts_follow_the_interval() -> None:
    def verdict(row: MessagesRow) -> str:
        return guess_verdict(row, references(SETTINGS, row))

    assert verdict(_single(110, 52, 52)).startswith("broken")  # 0.55: above the ceiling
    assert verdict(_single(20, 47, 10)) == "beats neither the prior nor the no-noise baseline"
    assert verdict(_single(50, 47, 40)) == "beats the prior, below the no-noise baseline"
    assert verdict(_sum_preserving(25)) == "does not beat the prior (= the no-noise baseline)"
    assert verdict(_sum_preserving(119)).startswith("broken: beats the prior")


def test_guess_headlines_give_both_references_for_m_1_and_big_m() -> None:
    table = [
        _single(110, 52, 52, m=1),
        _single(80, 50, 50, m=8),
        _single(73, 47, 47),
        _sum_preserving(119, m=1, p_infinite=0.96),
        _sum_preserving(25),
    ]
    headlines = guess_headlines(SETTINGS, table)
    assert [h.claim.split(" (")[0] for h in headlines] == ["m = 1", "m = 20", "m = 1", "m = 20"]
    single = headlines[1]
    assert "prior 0.0909" in single.bound and "no-noise baseline 0.318" in single.bound
    assert "95% CI" in single.empirical
    assert single.verdict == "beats the prior, not the no-noise baseline"
    assert "no-noise baseline" in headlines[3].bound
    sp_text = guess_sentence(SETTINGS, table[-1])
    assert "none of the rounds" in sp_text and "does not beat the prior" in sp_text


def test_first_clean_m_uses_the_interval_against_the_no_noise_share() -> None:
    table = [
        _single(110, 52, 52, m=1, p_infinite_loss=0.5),
        _single(80, 50, 50, m=8, p_infinite_loss=0.33),  # interval above 0.25
        _single(73, 47, 47, m=12, p_infinite_loss=0.28),  # within
        _sum_preserving(119, m=1, p_infinite=0.96),
        _sum_preserving(30, m=8, p_infinite=0.005),
        _sum_preserving(25, m=12),
    ]
    assert first_clean_m(SETTINGS, table, "single-user") == 12
    assert first_clean_m(SETTINGS, table, "sum-preserving") == 12
    assert first_clean_m(SETTINGS, table[:2], "single-user") is None


# --------------------------------------------------------------------------- compare

COMPARE = CompareSettings(
    users=(100, 1000, 10_000), epsilons=(1.0,), delta=1e-6, trials=10, jobs=1, seed=1, quick=True
)


def _cell(
    protocol: str,
    n: int,
    rmse: float,
    ci: tuple[float, float],
    *,
    predicted: float = 12.6,
    messages: float = 49.0,
    bits: int = 33,
    precision: int | None = 1000,
    eps: float = 1.0,
    runs: str | None = None,
    bound: str = "optimized",
    noise: str = "truncated-laplace",
    modulus: int = 2**33 - 9,
) -> CellRow:
    plan = Plan(
        runs=runs or protocol,
        bound=bound,
        noise=noise,
        messages_per_user=messages,
        bits_per_message=bits,
        bytes_per_message=5,
        bytes_per_user=messages * 5,
        modulus=modulus,
        precision=precision,
        predicted_rmse=predicted,
        predicted_rmse_generic=predicted,
        predicted_bias=0.0,
    )
    measured = Measurement(rmse, ci[0], ci[1], 0.0, rmse, rmse, rmse / predicted, 10, 1.0)
    return CellRow(protocol, n, eps, 1e-6, None, "messages", plan, measured)


def _cloak_sentence(rows: list[CellRow]) -> str:
    return next(s for s in findings(COMPARE, rows, 1.0) if s.startswith("The single-user cloak"))


def test_identical_plans_and_overlapping_intervals_claim_no_trend() -> None:
    """The issue's case: the same plan at every n, measured 10.8, 8.16, 13.2 with overlapping
    intervals: no "not monotone" claim, the difference is sampling noise."""
    rows = [
        _cell("cloak-single-user", 100, 10.8, (7.55, 19.0), predicted=12.6453),
        _cell("cloak-single-user", 1000, 8.16, (5.7, 14.3), predicted=12.6453),
        _cell("cloak-single-user", 10_000, 13.2, (8.6, 27.8), predicted=12.6452),
    ]
    text = _cloak_sentence(rows)
    assert "monotone" not in text and "planner" not in text
    assert "within sampling noise" in text
    assert "the same at every n" in text


def test_disjoint_intervals_are_reported_as_a_difference() -> None:
    rows = [
        _cell("cloak-single-user", 100, 12.0, (10.0, 14.0)),
        _cell("cloak-single-user", 1000, 6.0, (5.0, 7.0)),
        _cell("cloak-single-user", 10_000, 11.0, (9.0, 13.5)),
    ]
    text = _cloak_sentence(rows)
    assert "beyond sampling noise" in text
    assert "lower at n = 10^3 (6 [5, 7]) than at n = 10^2" in text
    assert "higher at n = 10^4" in text
    assert "within sampling noise" not in text


def test_a_non_monotone_prediction_is_attributed_to_the_plans() -> None:
    rows = [
        _cell("cloak-single-user", 100, 12.0, (8.0, 18.0), predicted=12.0, messages=49),
        _cell("cloak-single-user", 1000, 8.0, (6.0, 12.0), predicted=8.0, messages=51),
        _cell("cloak-single-user", 10_000, 10.0, (7.0, 15.0), predicted=10.0, messages=51),
    ]
    text = _cloak_sentence(rows)
    assert "not monotone in n" in text and "within sampling noise" in text


def test_differences_needs_two_measured_cells() -> None:
    assert differences([]) == ""


def test_overlapping_ranking_is_within_sampling_noise() -> None:
    rows = [
        _cell("bbgn", 1000, 2.59, (1.49, 8.98), predicted=1.41),
        _cell("cloak-single-user", 1000, 8.16, (5.7, 14.3)),
        _cell("cheu", 1000, 30.0, (20.0, 45.0)),
    ]
    settings = dataclasses.replace(COMPARE, users=(1000,))
    lowest = next(s for s in findings(settings, rows, 1.0) if "lowest measured RMSE" in s)
    assert "overlaps cloak-single-user's" in lowest and "within sampling noise" in lowest
    assert "cheu's" not in lowest.split("(ranking")[0]
    clear = [_cell("bbgn", 1000, 1.2, (0.9, 1.8), predicted=1.41), rows[2]]
    lowest = next(s for s in findings(settings, clear, 1.0) if "lowest measured RMSE" in s)
    assert "lies below every other one's" in lowest


def test_cheu_is_named_as_the_calibrated_variant_with_its_rule() -> None:
    capped = [
        _cell("cheu", n, 9.0, (6.0, 15.0), messages=r, bits=1, precision=k)
        for n, k, r in ((100, 10, 153), (1000, 32, 151), (10_000, 100, 145))
    ]
    text = cheu_rule(capped)
    assert text.startswith("cheu is the project's calibrated variant of Cheu et al.")
    assert "k = ⌈ε√n⌉" in text and "p <= 1/2" in text
    assert "n = 10^2: k = 10, r = 153" in text
    assert "at every n the p <= 1/2 cap, not ε√n, sets the number of bits" in text
    mixed = [
        *capped[:2],
        _cell("cheu", 100_000, 9.0, (6.0, 15.0), messages=317, bits=1, precision=317),
    ]
    text = cheu_rule(mixed)
    assert "r = k = ⌈ε√n⌉ at n = 10^5" in text and "sets r at n = 10^2, 10^3" in text
    assert cheu_rule([]) == ""
    report = compare_report(COMPARE, capped, 1.0)
    assert "cheu (the project's calibrated variant of Cheu et al.)" in report
    assert "r >= ⌈ε√n⌉ bits, the first line" not in report


def test_bbgn_against_central_lists_where_the_intervals_are_disjoint() -> None:
    settings = dataclasses.replace(COMPARE, users=(100, 1000))
    rows = [
        _cell("central", 100, 1.0, (0.8, 1.3), predicted=1.0),
        _cell("bbgn", 100, 2.0, (1.6, 2.6), predicted=1.0),
        _cell("central", 1000, 1.0, (0.8, 1.3), predicted=1.0),
        _cell("bbgn", 1000, 1.1, (0.9, 1.4), predicted=1.0),
    ]
    bbgn = next(s for s in findings(settings, rows, 1.0) if s.startswith("bbgn's measured"))
    assert "1.1× (n = 10^3) to 2× (n = 10^2)" in bbgn
    assert "disjoint at n = 10^2: bbgn 2 [1.6, 2.6], central 1 [0.8, 1.3]" in bbgn
    assert "overlap (within sampling noise) at n = 10^3" in bbgn
    same = [rows[0], _cell("bbgn", 100, 1.2, (0.9, 1.6), predicted=1.0), *rows[2:]]
    bbgn = next(s for s in findings(settings, same, 1.0) if s.startswith("bbgn's measured"))
    assert "overlap at every n: the differences are within sampling noise" in bbgn


def test_versus_judges_by_the_intervals() -> None:
    a = _cell("bbgn", 100, 1.0, (0.8, 1.3))
    assert versus(a, _cell("cheu", 100, 1.2, (1.0, 1.6))) == "within"
    assert versus(a, _cell("cheu", 100, 9.0, (6.0, 15.0))) == "lower"
    assert versus(_cell("cheu", 100, 9.0, (6.0, 15.0)), a) == "higher"
    point = _cell("cloak-sum-preserving", 100, 0.05, (0.05, 0.05))
    assert versus(point, _cell("default-sum-preserving", 100, 0.05, (0.05, 0.05))) == "equal"
    assert versus(point, _cell("default-sum-preserving", 100, 0.06, (0.06, 0.06))) == "lower"
    infeasible = CellRow("blanket", 100, 1.0, 1e-6, "InfeasiblePlanError: gamma", None)
    assert versus(a, infeasible) is None and versus(None, a) is None


def _default_rows(default_rmse: tuple[float, float, float]) -> list[CellRow]:
    """default-single-user with bbgn's parameters, bbgn, and the seed-lemma cloak at
    n = 10^2, 10^3."""
    rows = []
    for n, m in ((100, 13.0), (1000, 9.0)):
        for name, rmse, ci in (
            ("default-single-user", default_rmse[0], default_rmse[1:]),
            ("bbgn", 1.2, (0.9, 1.8)),
        ):
            rows.append(
                _cell(
                    name,
                    n,
                    rmse,
                    (ci[0], ci[1]),
                    predicted=1.41,
                    messages=m,
                    bits=15,
                    precision=n,
                    runs="bbgn",
                    bound="bbgn",
                    noise="polya",
                    modulus=21643,
                )
            )
        rows.append(_cell("cloak-single-user", n, 10.0, (7.0, 15.0)))
    return rows


def _default_sentence(rows: list[CellRow], mode: str = "single-user") -> str:
    settings = dataclasses.replace(COMPARE, users=(100, 1000))
    return next(
        s for s in findings(settings, rows, 1.0) if s.startswith(f"The default plan for {mode}")
    )


def test_default_row_names_its_selection_and_is_judged_by_intervals() -> None:
    text = _default_sentence(_default_rows((1.1, 0.8, 1.6)))
    assert "the BBGN bound with polya noise, running bbgn, at n = 10^2, 10^3" in text
    assert "13, 9 messages per user against 49, 49 for cloak-single-user" in text
    assert "(seed lemmas (optimized))" in text
    assert "are those of the bbgn row at every n" in text
    assert "within sampling noise (overlapping 95% intervals) at n = 10^2, n = 10^3" in text
    assert "Against cloak-single-user its measured RMSE is lower (disjoint" in text
    # an overlap with the seed-lemma cloak is not claimed as a difference
    overlapping = _default_sentence(_default_rows((8.0, 6.0, 12.0)))
    assert "Against cloak-single-user its measured RMSE is within sampling noise" in overlapping
    seed_part = overlapping.split("Against cloak-single-user")[1]
    assert "lower" not in seed_part and "higher" not in seed_part
    # ... while bbgn's disjoint, lower intervals are
    assert "is higher (disjoint 95% intervals) at n = 10^2 (8 [6, 12] against 1.2" in overlapping


def test_default_row_with_other_parameters_has_no_twin() -> None:
    rows = [
        dataclasses.replace(
            r, plan=dataclasses.replace(r.plan, modulus=99991) if r.plan else None
        )
        if r.protocol == "default-single-user"
        else r
        for r in _default_rows((1.1, 0.8, 1.6))
    ]
    assert "bbgn row" not in _default_sentence(rows)


def test_default_sum_preserving_equal_to_the_seed_lemmas_when_deterministic() -> None:
    rows = []
    for n, m, seed_m in ((100, 13.0, 67.0), (1000, 9.0, 76.0)):
        for name, messages, bound in (
            ("default-sum-preserving", m, "bbgn"),
            ("cloak-sum-preserving", seed_m, "optimized"),
        ):
            rows.append(
                _cell(
                    name,
                    n,
                    0.05,
                    (0.05, 0.05),
                    messages=messages,
                    precision=10 * n,
                    runs="cloak-sum-preserving",
                    bound=bound,
                    noise="none",
                )
            )
    text = _default_sentence(rows, "sum-preserving")
    assert "the BBGN bound without noise, running cloak-sum-preserving" in text
    assert "against 67, 76 for cloak-sum-preserving" in text
    assert "with the same precision k at every n" in text
    assert "equal (both deterministic) at n = 10^2, n = 10^3" in text


def test_default_row_infeasible_is_said() -> None:
    rows = [CellRow("default-single-user", 100, 1.0, 1e-6, "InfeasiblePlanError: none", None)]
    settings = dataclasses.replace(COMPARE, users=(100,))
    text = next(s for s in findings(settings, rows, 1.0) if "default plan" in s)
    assert "is infeasible at n = 10^2: InfeasiblePlanError: none" in text


def test_report_labels_every_row_with_bound_and_noise() -> None:
    rows = _default_rows((1.1, 0.8, 1.6))
    settings = dataclasses.replace(
        COMPARE, users=(100, 1000), protocols=("default-single-user", "cloak-single-user", "bbgn")
    )
    text = compare_report(settings, rows, 1.0)
    assert (
        "| default-single-user (the default plan of `cloaknet plan --mode single-user`) — "
        "cloaknet plan's choice: BBGN bound; noise: polya; runs bbgn | protocol run |"
    ) in text
    seed = "| cloak-single-user (New, line 1) — seed lemmas (optimized); noise: truncated-laplace"
    assert seed in text
    assert "| bbgn (not in Figure 1) — BBGN bound; noise: polya | bound |" in text
    assert "|  | noise | — | polya | polya |" in text


# --------------------------------------------------------------------------- stats, plots


def test_relation_and_overlap() -> None:
    assert relation(0.3, 0.4, 0.25) == "above"
    assert relation(0.1, 0.2, 0.25) == "below"
    assert relation(0.2, 0.3, 0.25) == "within"
    assert relation(math.nan, math.nan, 0.5) == "within"
    assert overlap((1.0, 2.0), (2.0, 3.0)) and not overlap((1.0, 2.0), (2.1, 3.0))


def test_probability_points_draw_zero_counts_as_upper_bounds() -> None:
    points = probability_points([1.0, 2.0, 3.0], [0, 5, 3], [200, 200, 0])
    assert points.xs == [2.0] and points.ys == [0.025]
    assert points.zero_xs == [1.0]
    assert points.zero_uppers == [wilson_interval(0, 200).high]
    assert points.below[0] == pytest.approx(0.025 - wilson_interval(5, 200).low)
    with pytest.raises(ValueError, match="equal lengths"):
        probability_points([1.0], [0, 1], [2, 2])


def test_offsets_keep_protocols_apart() -> None:
    factors = log_offsets(4, 0.03)
    assert len(set(factors)) == 4 and math.prod(factors) == pytest.approx(1.0)
    offsets = protocol_offsets(["a", "b", "c"])
    assert len(set(offsets.values())) == 3 and offsets["b"] == pytest.approx(1.0)


def test_plots_draw_infeasible_cells_and_several_epsilons(tmp_path: Path) -> None:
    settings = dataclasses.replace(COMPARE, users=(100, 1000), epsilons=(0.5, 1.0))
    rows = [
        CellRow("blanket", 100, 0.5, 1e-6, "InfeasiblePlanError: too few users", None),
        _cell("blanket", 100, 20.0, (15.0, 30.0), eps=1.0, predicted=19.0),
        _cell("blanket", 1000, 20.0, (15.0, 30.0), eps=0.5, predicted=19.0),
        _cell("blanket", 1000, 18.0, (13.0, 28.0), eps=1.0, predicted=19.0),
        _cell("central", 100, 1.0, (0.8, 1.3), eps=0.5, predicted=1.4),
        _cell("central", 1000, 1.0, (0.8, 1.3), eps=1.0, predicted=1.4),
    ]
    assert infeasible_cells(rows, 0.5) == [("blanket", 100)]
    assert infeasible_cells(rows, 1.0) == []
    plot_error(tmp_path / "error.png", settings, rows)
    plot_communication(tmp_path / "comm.png", settings, rows)
    for name in ("error.png", "comm.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_guess_references_are_exact_fractions() -> None:
    """q is taken exactly from the settings' text (no float round trip in the share)."""
    odd = dataclasses.replace(SETTINGS, single_user_q="1/3")
    refs = references(odd, _single(73, 47, 47))
    assert refs.no_noise_share == float(Fraction(2, 3) ** 2)
