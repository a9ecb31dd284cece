"""The sentences of the compare report, computed from the result rows (nothing in them is
hard-coded): who has the lowest error, how the errors and the communication grow with n,
how the measurements agree with the predictions, which cells used the fast path, and what the
default plan (the rows ``default-single-user`` and ``default-sum-preserving``: what
``cloaknet plan`` selects) chose and how it compares with the seed-lemma cloak of its mode and
with any named row that has the same parameters.

Every comparison of measured errors is judged by the 95% intervals of the RMSEs (χ²
intervals from :func:`cloaknet.experiments.stats.rmse_interval`, on scipy): overlapping
intervals are "within sampling noise" and no difference, ranking or trend is claimed for
them (:func:`~cloaknet.experiments.stats.overlap`); a trend in n is stated only between
cells whose intervals are disjoint, and a cause only when the plans show it."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Final

from cloaknet.experiments.compare.cells import (
    Feasible,
    differences,
    feasible,
    find_cell,
    interval_of,
    measurement_of,
    overlaps,
    with_ci,
)
from cloaknet.experiments.compare.lineup import DEFAULT_ROWS, bound_label
from cloaknet.experiments.compare.notes import agreement, methods_note
from cloaknet.experiments.compare.rows import CellRow, Plan
from cloaknet.experiments.compare.settings import CompareSettings
from cloaknet.experiments.stats import loglog_slope, overlap
from cloaknet.experiments.text import fmt, integral, n_label, shorten, span

__all__ = [
    "SAME_PREDICTION",
    "SEED_ROW",
    "SINGLE_USER_SHUFFLED",
    "agreement",
    "cheu_rule",
    "differences",
    "find_cell",
    "findings",
    "methods_note",
    "versus",
]

#: Rows protecting single-user changes in the shuffled model (central is a trusted curator;
#: the sum-preserving rows protect a weaker neighbouring notion).
SINGLE_USER_SHUFFLED: Final[tuple[str, ...]] = (
    "default-single-user",
    "cloak-single-user",
    "blanket",
    "cheu",
    "bbgn",
)
#: The row of the cloak with the seed lemmas (optimized) for each mode of a default row.
SEED_ROW: Final[dict[str, str]] = {
    "single-user": "cloak-single-user",
    "sum-preserving": "cloak-sum-preserving",
}


def _lowest_errors(settings: CompareSettings, rows: Sequence[CellRow], eps: float) -> list[str]:
    out = []
    for n in settings.users:
        ranked = sorted(
            (
                r
                for r in rows
                if r.epsilon == eps
                and r.users == n
                and measurement_of(r) is not None
                and r.protocol in SINGLE_USER_SHUFFLED
            ),
            key=lambda r: r.measurement.measured_rmse if r.measurement else math.inf,
        )
        if not ranked:
            continue
        best = ranked[0]
        listing = ", ".join(
            f"{r.protocol} {fmt(r.measurement.measured_rmse)}" for r in ranked if r.measurement
        )
        tied = [r.protocol for r in ranked[1:] if overlaps(best, r)]
        verdict = (
            f"; its 95% interval overlaps {', '.join(tied)}'s, so the order among "
            f"{'them' if len(tied) > 1 else 'the two'} is within sampling noise"
            if tied
            else "; its 95% interval lies below every other one's"
            if len(ranked) > 1
            else ""
        )
        extra = []
        central = measurement_of(find_cell(rows, "central", n, eps))
        if central is not None:
            extra.append(f"the trusted curator (central) measured {fmt(central.measured_rmse)}")
        sp = measurement_of(find_cell(rows, "cloak-sum-preserving", n, eps))
        if sp is not None:
            extra.append(
                f"the sum-preserving cloak (a weaker neighbouring notion) {fmt(sp.measured_rmse)}"
            )
        best_rmse = best.measurement.measured_rmse if best.measurement else math.nan
        out.append(
            f"At n = {n_label(n)} the lowest measured RMSE among the shuffled-model protocols "
            f"protecting single-user changes is {best.protocol}'s {fmt(best_rmse)}"
            f"{verdict} (ranking: {listing})"
            + (f"; for reference, {' and '.join(extra)}." if extra else ".")
        )
    return out


def _bbgn_vs_central(settings: CompareSettings, rows: Sequence[CellRow], eps: float) -> list[str]:
    ratios: list[tuple[int, float]] = []
    predicted: list[float] = []
    for n in settings.users:
        b, c = find_cell(rows, "bbgn", n, eps), find_cell(rows, "central", n, eps)
        mb, mc = measurement_of(b), measurement_of(c)
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
    apart = [
        n
        for n, _ in ratios
        if not overlaps(find_cell(rows, "bbgn", n, eps), find_cell(rows, "central", n, eps))
    ]
    if not apart:
        judged = "the 95% intervals overlap at every n: the differences are within sampling noise."
    else:
        listing = "; ".join(
            f"n = {n_label(n)}: bbgn {with_ci(Feasible(b, b.plan))}, central "
            f"{with_ci(Feasible(c, c.plan))}"
            for n in apart
            if (b := find_cell(rows, "bbgn", n, eps)) is not None
            and (c := find_cell(rows, "central", n, eps)) is not None
            and b.plan is not None
            and c.plan is not None
        )
        same = [n_label(n) for n, _ in ratios if n not in apart]
        judged = (
            f"the 95% intervals are disjoint at {listing}"
            + (f"; they overlap (within sampling noise) at n = {', '.join(same)}" if same else "")
            + "."
        )
    return [
        f"bbgn's measured RMSE is {fmt(low[1])}× (n = {n_label(low[0])}) to "
        f"{fmt(high[1])}× (n = {n_label(high[0])}) that of the central discrete Laplace, "
        f"against a predicted ratio of {span(predicted)}; {judged}"
    ]


def _blanket(ref: Sequence[CellRow]) -> list[str]:
    blanket = feasible(ref, "blanket")
    if not blanket:
        return []
    infeasible = [r for r in ref if r.protocol == "blanket" and not r.feasible]
    pslope = loglog_slope([(f.users, f.plan.predicted_rmse) for f in blanket])
    text = (
        f"The privacy blanket is feasible from n = {n_label(blanket[0].users)}"
        + (
            f" (infeasible at n = {', '.join(n_label(r.users) for r in infeasible)}: "
            f"{shorten(infeasible[0].reason)})"
            if infeasible
            else ""
        )
        + f"; its measured RMSE is {with_ci(blanket[0])} at n = {n_label(blanket[0].users)}"
    )
    if len(blanket) > 1:
        text += f" and {with_ci(blanket[-1])} at n = {n_label(blanket[-1].users)}"
        trend = differences(blanket)
        if trend:
            text += f": {trend}"
        disjoint_ends = not overlaps(blanket[0].row, blanket[-1].row)
        slope = loglog_slope([(f.users, f.rmse) for f in blanket if f.rmse])
        if slope is not None and pslope is not None and disjoint_ends:
            text += f"; log-log slope {slope:.3f}"
        if pslope is not None:
            text += (
                f"; the predicted RMSE's log-log slope is {pslope:.3f} (Figure 1's n^(1/6): "
                f"{1 / 6:.3f})"
            )
    ks = [f.plan.precision for f in blanket]
    text += f"; its precision k is {', '.join(str(k) for k in ks)} at these n."
    return [text]


def cheu_rule(cells: Sequence[CellRow]) -> str:
    """What the ``cheu`` cells send, named as what it is: the project's calibrated variant of
    Cheu et al.'s unary randomized response, with the rule of
    :class:`cloaknet.protocols.CheuProtocol` and, per n, whether r = k or the p <= 1/2 cap
    set r. "" without feasible cheu cells."""
    cheu = sorted((r for r in cells if r.protocol == "cheu" and r.plan), key=lambda r: r.users)
    if not cheu:
        return ""
    capped = [
        r
        for r in cheu
        if r.plan and r.plan.precision is not None and r.plan.messages_per_user > r.plan.precision
    ]
    levelled = [r for r in cheu if r not in capped]
    per_n = ", ".join(
        f"n = {n_label(r.users)}: k = {r.plan.precision}, r = "
        f"{fmt(integral(r.plan.messages_per_user))}"
        for r in cheu
        if r.plan is not None
    )
    text = (
        "cheu is the project's calibrated variant of Cheu et al.'s unary randomized response, "
        "not the published parameterisation: each user rounds x randomly to k = ⌈ε√n⌉ levels "
        "and sends r >= k one-bit messages, each replaced by a uniform bit with probability p; "
        "p is calibrated numerically (exact binomial tails) so that the other users' replaced "
        "bits hide a shift of k at (ε, 0.9δ), failing with probability at most 0.1δ; r = k "
        "when that gives p <= 1/2, else the least r that does "
        f"(`cloaknet.protocols.cheu`). Here {per_n}"
    )
    if capped and not levelled:
        text += ": at every n the p <= 1/2 cap, not ε√n, sets the number of bits."
    elif capped:
        text += (
            f": the p <= 1/2 cap sets r at n = {', '.join(n_label(r.users) for r in capped)}, "
            f"and r = k = ⌈ε√n⌉ at n = {', '.join(n_label(r.users) for r in levelled)}."
        )
    else:
        text += ": r = k = ⌈ε√n⌉ at every n, Figure 1's first line."
    return text


def _cheu(ref: Sequence[CellRow]) -> list[str]:
    cheu = feasible(ref, "cheu")
    if not cheu:
        return []
    first, last = cheu[0], cheu[-1]
    bits = ", ".join(fmt(integral(f.plan.messages_per_user)) for f in cheu)
    text = (
        f"cheu (the calibrated variant, see above) sends {bits} one-bit messages per user at "
        f"n = {', '.join(n_label(f.users) for f in cheu)}"
    )
    if last is not first:
        slope = loglog_slope([(f.users, f.plan.messages_per_user) for f in cheu])
        text += f" (log-log slope {fmt(slope)}; Figure 1's ε√n has slope 0.5)"
        text += (
            f"; its measured RMSE is {with_ci(first)} at n = {n_label(first.users)} and "
            f"{with_ci(last)} at n = {n_label(last.users)}"
        )
        trend = differences(cheu)
        if trend:
            text += f": {trend}"
    else:
        text += f"; its measured RMSE is {with_ci(first)}"
    return [text + "."]


#: Predicted RMSEs closer than this (relative) count as the same: they differ only by the
#: exact rounding bias of each n's input vector, far below any measurable difference.
SAME_PREDICTION: Final[float] = 1e-3


def _same_plan(cells: Sequence[Feasible]) -> bool:
    """Same messages, bits per message and predicted RMSE (to :data:`SAME_PREDICTION`)."""
    first = cells[0].plan
    return all(
        f.plan.messages_per_user == first.messages_per_user
        and f.plan.bits_per_message == first.bits_per_message
        and math.isclose(f.plan.predicted_rmse, first.predicted_rmse, rel_tol=SAME_PREDICTION)
        for f in cells
    )


def _bounds(cells: Sequence[Feasible]) -> str:
    """The bound labels of ``cells``' plans, distinct, joined with " / "."""
    labels: list[str] = []
    for f in cells:
        label = bound_label(f.plan.bound)
        if label not in labels:
            labels.append(label)
    return " / ".join(labels)


def _cloak(settings: CompareSettings, ref: Sequence[CellRow], eps: float) -> list[str]:
    cloak = feasible(ref, "cloak-single-user")
    if not cloak:
        return []
    first, last = cloak[0], cloak[-1]
    decades = math.log10(last.users / first.users) if last is not first else 0.0
    formula = math.sqrt(math.log(1.0 / settings.delta)) / eps
    text = (
        f"The single-user cloak with the {_bounds(cloak)} and "
        f"{' / '.join(sorted({f.plan.noise for f in cloak}))} noise sends "
        f"{fmt(integral(first.plan.messages_per_user))} messages "
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
        if len(cloak) > 1 and _same_plan(cloak):
            text += (
                f"; messages, bits and predicted RMSE ({fmt(first.plan.predicted_rmse)}) are "
                "the same at every n"
            )
        elif len(cloak) > 1:
            predicted = [f.plan.predicted_rmse for f in cloak]
            text += f"; the predicted RMSE is {', '.join(fmt(p) for p in predicted)} at these n"
            if any(
                b < a and not math.isclose(a, b, rel_tol=SAME_PREDICTION)
                for a, b in itertools.pairwise(predicted)
            ):
                text += (
                    " — not monotone in n, because the planner takes the fewest messages "
                    "first and the error only among the cheapest plans"
                )
        trend = differences(cloak)
        if trend:
            text += f", and {trend}"
    return [text + "."]


def _sum_preserving(ref: Sequence[CellRow]) -> list[str]:
    sp = [f for f in feasible(ref, "cloak-sum-preserving") if f.rmse is not None]
    if not sp:
        return []
    rmses = [f.rmse for f in sp if f.rmse is not None]
    exact = all(
        f.rmse is not None and math.isclose(f.rmse, abs(f.plan.predicted_bias), rel_tol=1e-9)
        for f in sp
    )
    return [
        f"The sum-preserving cloak with the {_bounds(sp)}: its RMSE "
        f"({fmt(min(rmses))}–{fmt(max(rmses))}) "
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


#: How :func:`versus` words each outcome.
_VERSUS_TEXT: Final[dict[str, str]] = {
    "lower": "lower (disjoint 95% intervals)",
    "higher": "higher (disjoint 95% intervals)",
    "within": "within sampling noise (overlapping 95% intervals)",
    "equal": "equal (both deterministic)",
}


def versus(a: CellRow | None, b: CellRow | None) -> str | None:
    """How the measured RMSE of ``a`` compares with that of ``b``, judged by the 95%
    intervals: ``"equal"`` when both are the same point interval (deterministic errors, to
    1e-12 relative), ``"within"`` when the intervals overlap, else ``"lower"`` or
    ``"higher"``; None when either is not measured."""
    ia, ib = interval_of(a), interval_of(b)
    if ia is None or ib is None:
        return None
    if ia[0] == ia[1] and ib[0] == ib[1] and math.isclose(ia[0], ib[0], rel_tol=1e-12):
        return "equal"
    if overlap(ia, ib):
        return "within"
    return "lower" if ia[1] < ib[0] else "higher"


def _same_parameters(a: Plan, b: Plan) -> bool:
    """The same protocol, bound, noise, messages, message modulus and precision."""
    return (a.runs, a.bound, a.noise, a.messages_per_user, a.modulus, a.precision) == (
        b.runs,
        b.bound,
        b.noise,
        b.messages_per_user,
        b.modulus,
        b.precision,
    )


def _against(cells: Sequence[Feasible], other: str, ref: Sequence[CellRow], eps: float) -> str:
    """The measured RMSE of ``cells`` against row ``other``'s at the same n, grouped by
    :func:`versus` (with both values and intervals where they differ); "" without a measured
    pair."""
    groups: dict[str, list[str]] = {}
    for f in cells:
        theirs = find_cell(ref, other, f.users, eps)
        verdict = versus(f.row, theirs)
        if verdict is None or theirs is None or theirs.plan is None:
            continue
        detail = ""
        if verdict in ("lower", "higher"):
            detail = f" ({with_ci(f)} against {with_ci(Feasible(theirs, theirs.plan))})"
        groups.setdefault(verdict, []).append(f"n = {n_label(f.users)}{detail}")
    return "; ".join(
        f"{_VERSUS_TEXT[verdict]} at {', '.join(where)}" for verdict, where in groups.items()
    )


def _selection(cells: Sequence[Feasible]) -> str:
    """What the default plan selected, grouped by (bound, noise, protocol run) over n."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for f in cells:
        groups.setdefault((f.plan.bound, f.plan.noise, f.plan.runs), []).append(f.users)
    return "; ".join(
        f"the {bound_label(bound)} "
        + ("without noise" if noise == "none" else f"with {noise} noise")
        + f", running {runs}, at n = {', '.join(n_label(n) for n in ns)}"
        for (bound, noise, runs), ns in groups.items()
    )


def _defaults(settings: CompareSettings, ref: Sequence[CellRow], eps: float) -> list[str]:
    """One sentence per default row at ε = ``eps``: what ``cloaknet plan`` selected per n,
    its messages against the seed-lemma cloak of its mode, the named rows with the same
    parameters at every n, and its measured RMSE against both (by :func:`versus`)."""
    out = []
    for name, mode in DEFAULT_ROWS.items():
        if name not in settings.protocols:
            continue
        cells = feasible(ref, name)
        infeasible = [r for r in ref if r.protocol == name and r.plan is None]
        if not cells:
            if infeasible:
                out.append(
                    f"The default plan for {mode} changes ({name}) is infeasible at n = "
                    f"{', '.join(n_label(r.users) for r in infeasible)}: "
                    f"{shorten(infeasible[0].reason)}."
                )
            continue
        text = (
            f"The default plan for {mode} changes ({name}: what `cloaknet plan --mode {mode}` "
            f"selects, bound auto) takes {_selection(cells)}"
        )
        if infeasible:
            text += f" (infeasible at n = {', '.join(n_label(r.users) for r in infeasible)})"
        text += (
            f"; it sends {', '.join(fmt(integral(f.plan.messages_per_user)) for f in cells)} "
            "messages per user"
        )
        seed = SEED_ROW[mode]
        seeds = [find_cell(ref, seed, f.users, eps) for f in cells]
        seed_cells = [Feasible(s, s.plan) for s in seeds if s is not None and s.plan]
        if len(seed_cells) == len(cells):
            text += (
                f" against {', '.join(fmt(integral(c.plan.messages_per_user)) for c in seed_cells)}"
                f" for {seed} ({_bounds(seed_cells)})"
            )
            if all(
                c.plan.precision == f.plan.precision for c, f in zip(seed_cells, cells, strict=True)
            ):
                text += ", with the same precision k at every n"
        twins = [
            other
            for other in settings.protocols
            if other != name
            and all(
                (c := find_cell(ref, other, f.users, eps)) is not None
                and c.plan is not None
                and _same_parameters(f.plan, c.plan)
                for f in cells
            )
        ]
        for twin in twins:
            text += (
                f". Its parameters (protocol, bound, noise, messages, modulus, precision) are "
                f"those of the {twin} row at every n"
            )
            compared = _against(cells, twin, ref, eps)
            if compared:
                text += f"; its measured RMSE (independent rounds) is {compared} against {twin}'s"
        compared = _against(cells, seed, ref, eps) if seed not in twins else ""
        if compared:
            text += f". Against {seed} its measured RMSE is {compared}"
        out.append(text + ".")
    return out


def _communication(settings: CompareSettings, ref: Sequence[CellRow]) -> list[str]:
    largest = max(settings.users)
    comm = sorted(
        (Feasible(r, r.plan) for r in ref if r.users == largest and r.plan is not None),
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
        *_defaults(settings, ref, eps),
        *_lowest_errors(settings, rows, eps),
        *_bbgn_vs_central(settings, rows, eps),
        *_blanket(ref),
        *_cheu(ref),
        *_cloak(settings, ref, eps),
        *_sum_preserving(ref),
        *_communication(settings, ref),
    ]
