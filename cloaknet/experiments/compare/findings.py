"""The sentences of the compare report, computed from the result rows (nothing in them is
hard-coded): who has the lowest error, how the errors and the communication grow with n,
how the measurements agree with the predictions, which cells used the fast path."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from cloaknet.experiments.compare.rows import CellRow, Measurement, Plan
from cloaknet.experiments.compare.settings import CompareSettings
from cloaknet.experiments.stats import loglog_slope
from cloaknet.experiments.text import fmt, integral, n_label, shorten, span

__all__ = ["SINGLE_USER_SHUFFLED", "agreement", "find_cell", "findings", "methods_note"]

#: Protocols protecting single-user changes in the shuffled model (central is a trusted
#: curator; the sum-preserving cloak protects a weaker neighbouring notion).
SINGLE_USER_SHUFFLED: Final[tuple[str, ...]] = ("cloak-single-user", "blanket", "cheu", "bbgn")


@dataclass(frozen=True)
class _Feasible:
    """A feasible row with its plan (and its measurement, if any trial ran)."""

    row: CellRow
    plan: Plan

    @property
    def users(self) -> int:
        return self.row.users

    @property
    def measurement(self) -> Measurement | None:
        return self.row.measurement

    @property
    def rmse(self) -> float | None:
        return self.row.measurement.measured_rmse if self.row.measurement else None


def _feasible(rows: Sequence[CellRow], name: str) -> list[_Feasible]:
    found = [_Feasible(r, r.plan) for r in rows if r.plan is not None and r.protocol == name]
    return sorted(found, key=lambda f: f.users)


def find_cell(rows: Sequence[CellRow], name: str, n: int, eps: float) -> CellRow | None:
    """The row of (protocol ``name``, n, ε), or None."""
    for r in rows:
        if r.protocol == name and r.users == n and r.epsilon == eps:
            return r
    return None


def _measurement(row: CellRow | None) -> Measurement | None:
    return row.measurement if row is not None and row.plan is not None else None


def _overlap(a: CellRow | None, b: CellRow | None) -> bool:
    ma, mb = _measurement(a), _measurement(b)
    if ma is None or mb is None:
        return False
    return ma.rmse_ci_low <= mb.rmse_ci_high and mb.rmse_ci_low <= ma.rmse_ci_high


def _lowest_errors(settings: CompareSettings, rows: Sequence[CellRow], eps: float) -> list[str]:
    out = []
    for n in settings.users:
        ranked = sorted(
            (
                (r.protocol, m.measured_rmse)
                for r in rows
                if r.epsilon == eps
                and r.users == n
                and (m := _measurement(r)) is not None
                and r.protocol in SINGLE_USER_SHUFFLED
            ),
            key=lambda item: item[1],
        )
        if not ranked:
            continue
        listing = ", ".join(f"{name} {fmt(rmse)}" for name, rmse in ranked)
        extra = []
        central = _measurement(find_cell(rows, "central", n, eps))
        if central is not None:
            extra.append(f"the trusted curator (central) measured {fmt(central.measured_rmse)}")
        sp = _measurement(find_cell(rows, "cloak-sum-preserving", n, eps))
        if sp is not None:
            extra.append(
                f"the sum-preserving cloak (a weaker neighbouring notion) {fmt(sp.measured_rmse)}"
            )
        out.append(
            f"At n = {n_label(n)} the lowest measured RMSE among the shuffled-model protocols "
            f"protecting single-user changes is {ranked[0][0]}'s "
            f"{fmt(ranked[0][1])} (ranking: {listing})"
            + (f"; for reference, {' and '.join(extra)}." if extra else ".")
        )
    return out


def _bbgn_vs_central(settings: CompareSettings, rows: Sequence[CellRow], eps: float) -> list[str]:
    ratios: list[tuple[int, float]] = []
    predicted: list[float] = []
    for n in settings.users:
        b, c = find_cell(rows, "bbgn", n, eps), find_cell(rows, "central", n, eps)
        mb, mc = _measurement(b), _measurement(c)
        if b is None or c is None or b.plan is None or c.plan is None:
            continue
        if mb is None or mc is None or not mb.measured_rmse or not mc.measured_rmse:
            continue
        ratios.append((n, mb.measured_rmse / mc.measured_rmse))
        predicted.append(b.plan.predicted_rmse / c.plan.predicted_rmse)
    if not ratios:
        return []
    low = min(ratios, key=lambda t: t[1])
    high = max(ratios, key=lambda t: t[1])
    overlapping = all(
        _overlap(find_cell(rows, "bbgn", n, eps), find_cell(rows, "central", n, eps))
        for n, _ in ratios
    )
    return [
        f"bbgn's measured RMSE is {fmt(low[1])}× (n = {n_label(low[0])}) to "
        f"{fmt(high[1])}× (n = {n_label(high[0])}) that of the central discrete Laplace; "
        f"the predicted ratio is {span(predicted)}, so the "
        "difference is within sampling noise when the 95% intervals overlap "
        + (
            "(they do at every n)."
            if overlapping
            else "(they do not at every n: see the full table)."
        )
    ]


def _blanket(ref: Sequence[CellRow]) -> list[str]:
    blanket = _feasible(ref, "blanket")
    if not blanket:
        return []
    infeasible = [r for r in ref if r.protocol == "blanket" and not r.feasible]
    slope = loglog_slope([(f.users, f.rmse) for f in blanket if f.rmse])
    pslope = loglog_slope([(f.users, f.plan.predicted_rmse) for f in blanket])
    text = (
        f"The privacy blanket is feasible from n = {n_label(blanket[0].users)}"
        + (
            f" (infeasible at n = {', '.join(n_label(r.users) for r in infeasible)}: "
            f"{shorten(infeasible[0].reason)})"
            if infeasible
            else ""
        )
        + f"; its measured RMSE goes from {fmt(blanket[0].rmse)} to "
        f"{fmt(blanket[-1].rmse)} between n = {n_label(blanket[0].users)} "
        f"and n = {n_label(blanket[-1].users)}"
    )
    if slope is not None and pslope is not None:
        text += (
            f", a log-log slope of {slope:.3f} (predicted {pslope:.3f}; Figure 1's "
            f"n^(1/6) is {1 / 6:.3f})"
        )
    ks = [f.plan.precision for f in blanket]
    text += f"; its precision k is {', '.join(str(k) for k in ks)} at these n."
    return [text]


def _cheu(ref: Sequence[CellRow]) -> list[str]:
    cheu = _feasible(ref, "cheu")
    if len(cheu) < 2:
        return []
    slope = loglog_slope([(f.users, f.plan.messages_per_user) for f in cheu])
    equal = [f for f in cheu if f.plan.precision == f.plan.messages_per_user]
    first, last = cheu[0], cheu[-1]
    return [
        f"Cheu et al. send {fmt(integral(first.plan.messages_per_user))} one-bit messages per "
        f"user at n = {n_label(first.users)} and "
        f"{fmt(integral(last.plan.messages_per_user))} at "
        f"n = {n_label(last.users)} (log-log slope {fmt(slope)}; Figure 1: ε√n, "
        f"slope 0.5)"
        + (
            f"; r equals the ε√n levels k from n = {n_label(equal[0].users)} on, while "
            "at smaller n more bits than levels are sent to keep the replacement "
            "probability <= 1/2."
            if equal and equal[0] is not first
            else "."
        )
        + f" Their error goes from {fmt(first.rmse)} to {fmt(last.rmse)}."
    ]


def _cloak(settings: CompareSettings, ref: Sequence[CellRow], eps: float) -> list[str]:
    cloak = _feasible(ref, "cloak-single-user")
    if not cloak:
        return []
    first, last = cloak[0], cloak[-1]
    decades = math.log10(last.users / first.users) if last is not first else 0.0
    formula = math.sqrt(math.log(1.0 / settings.delta)) / eps
    text = (
        f"The single-user cloak sends {fmt(integral(first.plan.messages_per_user))} messages "
        f"of {first.plan.bits_per_message} bits at n = {n_label(first.users)}"
    )
    if decades > 0:
        growth = (last.plan.messages_per_user - first.plan.messages_per_user) / decades
        text += (
            f" and {fmt(integral(last.plan.messages_per_user))} of "
            f"{last.plan.bits_per_message} bits at "
            f"n = {n_label(last.users)}: {growth:+.1f} messages per decade of n "
            "(Figure 1: log(n/(εδ)) messages, i.e. a constant increase per decade)"
        )
    errors = [f.rmse for f in cloak if f.rmse is not None]
    if errors:
        text += (
            f". Its measured RMSE ranges over {fmt(min(errors))}–{fmt(max(errors))}, "
            f"against Figure 1's (1/ε)√log(1/δ) = {fmt(formula)} without constants (a "
            f"factor {fmt(min(errors) / formula)}–{fmt(max(errors) / formula)})"
        )
        if any(b < a for a, b in itertools.pairwise(errors)):
            text += (
                "; the error is not monotone in n: the planner minimises bits per user "
                "first and the error only among the cheapest plans"
            )
    return [text + "."]


def _sum_preserving(ref: Sequence[CellRow]) -> list[str]:
    sp = [f for f in _feasible(ref, "cloak-sum-preserving") if f.rmse is not None]
    if not sp:
        return []
    rmses = [f.rmse for f in sp if f.rmse is not None]
    exact = all(
        f.rmse is not None and math.isclose(f.rmse, abs(f.plan.predicted_bias), rel_tol=1e-9)
        for f in sp
    )
    return [
        f"The sum-preserving cloak's RMSE ({fmt(min(rmses))}–{fmt(max(rmses))}) "
        + (
            "is exactly its deterministic rounding bias Σ frac(x_i·k)/k in every row"
            if exact
            else "differs from its deterministic rounding bias in some row (see the table)"
        )
        + "; n/(2k) (uniform fractional parts) is "
        + ", ".join(
            f"{fmt(f.users / (2 * f.plan.precision))} at n = {n_label(f.users)}"
            for f in sp
            if f.plan.precision
        )
        + f". Figure 1's 2^(−m) with m = {fmt(integral(sp[0].plan.messages_per_user))}–"
        f"{fmt(integral(sp[-1].plan.messages_per_user))} would be "
        f"{fmt(2.0 ** -sp[0].plan.messages_per_user)} or less"
        + (": the precision k alone sets this protocol's error." if exact else ".")
    ]


def _communication(settings: CompareSettings, ref: Sequence[CellRow]) -> list[str]:
    largest = max(settings.users)
    comm = sorted(
        (_Feasible(r, r.plan) for r in ref if r.users == largest and r.plan is not None),
        key=lambda f: f.plan.bytes_per_user,
    )
    if not comm:
        return []
    return [
        f"Communication at n = {n_label(largest)}: "
        + ", ".join(
            f"{f.row.protocol} {fmt(integral(f.plan.bytes_per_user))} B/user "
            f"({fmt(integral(f.plan.messages_per_user))} × {f.plan.bits_per_message} bits)"
            for f in comm
        )
        + "."
    ]


def findings(settings: CompareSettings, rows: Sequence[CellRow], eps: float) -> list[str]:
    """The sentences of "What the numbers say" for the rows at ε = ``eps``, in report order
    (a topic without the rows it needs is left out)."""
    ref = [r for r in rows if r.epsilon == eps]
    return [
        *_lowest_errors(settings, rows, eps),
        *_bbgn_vs_central(settings, rows, eps),
        *_blanket(ref),
        *_cheu(ref),
        *_cloak(settings, ref, eps),
        *_sum_preserving(ref),
        *_communication(settings, ref),
    ]


def agreement(rows: Sequence[CellRow]) -> str:
    """How often the predicted RMSE lies inside the measured 95% interval (to 1e-12), the
    range of measured/predicted, and the cells outside."""
    measured = [
        (r, r.plan, r.measurement) for r in rows if r.plan is not None and r.measurement is not None
    ]
    if not measured:
        return "No feasible cell was measured."
    inside = [
        item
        for item in measured
        if item[2].rmse_ci_low - 1e-12 <= item[1].predicted_rmse <= item[2].rmse_ci_high + 1e-12
    ]
    outside = [item for item in measured if item not in inside]
    ratios = [
        m.measured_over_predicted for _, _, m in measured if m.measured_over_predicted is not None
    ]
    text = (
        f"The prediction lies inside the measured 95% interval in {len(inside)} of "
        f"{len(measured)} cells; measured/predicted RMSE ranges over "
        f"{fmt(min(ratios))}–{fmt(max(ratios))}."
    )
    if outside:
        listing = "; ".join(
            f"{r.protocol} n = {n_label(r.users)} ε = {r.epsilon:g} "
            f"(measured {fmt(m.measured_rmse)}, predicted {fmt(plan.predicted_rmse)})"
            for r, plan, m in outside
        )
        expected = 0.05 * len(measured)
        text += (
            f" Outside: {listing}. With nominal 95% intervals about {expected:.1f} of "
            f"{len(measured)} cells would fall outside by chance alone (somewhat more for the "
            "heavy-tailed Laplace-like errors, whose intervals are approximate)."
        )
    return text


def methods_note(rows: Sequence[CellRow]) -> str:
    """Which cells used the sufficient-statistic sampler (by protocol, n and ε)."""
    fast = [r for r in rows if r.method == "sufficient-statistic"]
    if not fast:
        return "Every cell was simulated message by message (encode → shuffle → analyze)."
    grouped: dict[str, dict[int, list[float]]] = {}
    for r in fast:
        grouped.setdefault(r.protocol, {}).setdefault(r.users, []).append(r.epsilon)
    listing = "; ".join(
        f"{name} at "
        + ", ".join(
            f"n = {n_label(n)} (ε = {', '.join(f'{e:g}' for e in sorted(eps))})"
            for n, eps in sorted(by_n.items())
        )
        for name, by_n in grouped.items()
    )
    return (
        "Cells simulated with the exact sufficient-statistic sampler (n·m above the "
        f"per-trial message limit): {listing}. Every other feasible cell ran the real "
        "encode → shuffle → analyze pipeline."
    )
