"""``report.md`` of the compare experiment: Figure 1 of the paper next to the measurements,
the findings, the plots and the full table. Every row is labelled with the bound and the noise
its cells used (:func:`row_label`), and the tables give both per cell."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final

from cloaknet.experiments.compare.findings import (
    agreement,
    cheu_rule,
    find_cell,
    findings,
    methods_note,
)
from cloaknet.experiments.compare.lineup import DEFAULT_ROWS, bound_label, caption
from cloaknet.experiments.compare.rows import CellRow, Measurement, Plan
from cloaknet.experiments.compare.settings import CompareSettings
from cloaknet.experiments.text import delta_label, fmt, integral, markdown_table, n_label, shorten

__all__ = [
    "CALIBRATED",
    "FIGURE_DELTA",
    "FIGURE_EPSILON",
    "PAPER_FIGURE_1",
    "reference_epsilon",
    "report",
    "row_label",
]

#: The ε and δ of the reproduced Figure 1 table.
FIGURE_EPSILON: Final[float] = 1.0
FIGURE_DELTA: Final[float] = 1e-6

#: Protocols implemented as the project's own calibrated variant of the paper's reference
#: (named so in the table; their rule is stated above it).
CALIBRATED: Final[frozenset[str]] = frozenset({"cheu"})

#: Figure 1 of the paper, verbatim up to typography: (reference, messages per user, message
#: size in bits, expected error, neighbouring notion). None: the protocol is not in Figure 1.
PAPER_FIGURE_1: Final[dict[str, tuple[str, str, str, str, str] | None]] = {
    "cheu": (
        "Cheu et al.",
        "ε√n",
        "1",
        "(1/ε)·log(n/δ)",
        "single-user change",
    ),
    "blanket": (
        "Balle et al.",
        "1",
        "log n",
        "n^(1/6)·log^(1/3)(1/δ) / ε^(2/3)",
        "single-user change",
    ),
    "cloak-single-user": (
        "New (line 1)",
        "log(n/(εδ))",
        "log(n/δ)",
        "(1/ε)·√log(1/δ)",
        "single-user change",
    ),
    "cloak-sum-preserving": (
        "New (line 2)",
        "m > log(n/(εδ))",
        "m",
        "2^(−m)",
        "sum-preserving change",
    ),
    "central": None,
    "bbgn": None,
}


def reference_epsilon(settings: CompareSettings) -> float:
    """The ε of the grid closest to Figure 1's ε = 1 on a log scale (the smaller on ties)."""
    return min(settings.epsilons, key=lambda e: (abs(math.log(e / FIGURE_EPSILON)), e))


def _interval(m: Measurement | None) -> str:
    """ "[low, high]" of the RMSE interval; "[n/a, n/a]" without a measurement."""
    if m is None:
        return "[n/a, n/a]"
    return f"[{fmt(m.rmse_ci_low)}, {fmt(m.rmse_ci_high)}]"


def _rmse(r: CellRow, _: Plan) -> Any:
    return integral(r.measurement.measured_rmse) if r.measurement else None


def _rmse_interval(r: CellRow, _: Plan) -> str:
    return _interval(r.measurement)


def row_label(name: str, rows: Sequence[CellRow]) -> str:
    """The report's label of row ``name``: the name, its reference ("(New, line 1)",
    "(Balle et al.)", "(the default plan of `cloaknet plan --mode …`)", "(not in Figure
    1)", or the calibrated-variant note), then " — " and the bound and noise of its
    feasible cells among ``rows`` (:func:`.lineup.caption`)."""
    paper = PAPER_FIGURE_1.get(name)
    mode = DEFAULT_ROWS.get(name)
    label = f"{name} ({paper[0]})" if paper else f"{name} (not in Figure 1)"
    if mode is not None:
        label = f"{name} (the default plan of `cloaknet plan --mode {mode}`)"
    if name in CALIBRATED:
        label = f"{name} (the project's calibrated variant of {paper[0] if paper else name})"
    label = label.replace("(New (line ", "(New, line ").replace("))", ")")
    cells = [
        (r.plan.runs, r.plan.bound, r.plan.noise)
        for r in sorted(rows, key=lambda r: (r.users, r.epsilon))
        if r.protocol == name and r.plan is not None
    ]
    return f"{label} — {caption(name, cells)}"


def _figure_table(settings: CompareSettings, rows: Sequence[CellRow], eps: float) -> str:
    headers = ["protocol", "quantity", "paper (Figure 1)"] + [
        f"n = {n_label(n)}" for n in settings.users
    ]
    table: list[list[Any]] = []
    at_eps = [r for r in rows if r.epsilon == eps]
    for name in settings.protocols:
        paper = PAPER_FIGURE_1.get(name)
        label = row_label(name, at_eps)

        def values(pick: Callable[[CellRow, Plan], Any], name: str = name) -> list[Any]:
            cells: list[Any] = []
            for n in settings.users:
                r = find_cell(rows, name, n, eps)
                cells.append("infeasible" if r is None or r.plan is None else pick(r, r.plan))
            return cells

        if name in DEFAULT_ROWS:
            table.append([label, "protocol run", "—", *values(lambda _, p: p.runs)])
            label = ""
        table.append([label, "bound", "—", *values(lambda _, p: bound_label(p.bound))])
        table.append(["", "noise", "—", *values(lambda _, p: p.noise)])
        table.append(
            [
                "",
                "messages / user",
                paper[1] if paper else "—",
                *values(lambda _, p: integral(p.messages_per_user)),
            ]
        )
        table.append(
            [
                "",
                "message size (bits)",
                paper[2] if paper else "—",
                *values(lambda _, p: p.bits_per_message),
            ]
        )
        table.append(["", "bytes / user", "—", *values(lambda _, p: integral(p.bytes_per_user))])
        table.append(
            ["", "expected error: measured RMSE", paper[3] if paper else "—", *values(_rmse)]
        )
        table.append(["", "  95% CI", "", *values(_rmse_interval)])
        table.append(["", "  predicted RMSE", "", *values(lambda _, p: integral(p.predicted_rmse))])
        table.append(["", "  method", "", *values(lambda r, _: r.method)])
    return markdown_table(headers, table)


def _full_table(rows: Sequence[CellRow]) -> str:
    lines: list[list[Any]] = []
    for r in rows:
        plan, m = r.plan, r.measurement
        lines.append(
            [
                r.protocol,
                r.users,
                r.epsilon,
                plan.runs if plan else "—",
                plan.bound if plan else "—",
                plan.noise if plan else "—",
                r.method or "—",
                integral(plan.messages_per_user) if plan else None,
                plan.bits_per_message if plan else None,
                integral(plan.bytes_per_user) if plan else None,
                plan.precision if plan else None,
                plan.predicted_rmse if plan else None,
                plan.predicted_rmse_generic if plan else None,
                m.measured_rmse if m else None,
                _interval(m) if plan else "—",
                m.mean_error if m else None,
                m.trials if m else None,
                m.seconds if m else None,
                shorten(r.reason) if r.reason else "",
            ]
        )
    return markdown_table(
        [
            "protocol",
            "n",
            "ε",
            "runs",
            "bound",
            "noise",
            "method",
            "m",
            "bits",
            "B/user",
            "k",
            "predicted",
            "generic",
            "measured",
            "95% CI",
            "mean error",
            "trials",
            "s",
            "note",
        ],
        lines,
    )


def report(settings: CompareSettings, rows: Sequence[CellRow], seconds: float) -> str:
    """The Markdown text of ``report.md`` for a run of ``settings`` that took ``seconds``."""
    eps = reference_epsilon(settings)
    quick = " --quick" if settings.quick else ""
    trials = sum(r.measurement.trials for r in rows if r.measurement)
    figure_note = (
        ""
        if eps == FIGURE_EPSILON and settings.delta == FIGURE_DELTA
        else f" (the paper's setting ε = 1, δ = 10^-6 is not in this grid; closest: "
        f"ε = {eps:g}, δ = {settings.delta:g})"
    )
    sentences = "\n".join(f"* {s}" for s in findings(settings, rows, eps))
    at_eps = [r for r in rows if r.epsilon == eps]
    text = [
        "# Figure 1, measured: summation protocols in the shuffled model\n",
        f"Generated by `cloaknet experiment compare{quick} --trials {settings.trials}` in "
        f"{seconds:.1f} s ({trials} rounds in {settings.jobs} processes"
        f"{'' if settings.seed is None else f', seed {settings.seed}'}"
        f"{'; protocol randomness from the OS CSPRNG' if settings.seed is None else ''}). "
        f"Grid: n ∈ {{{', '.join(n_label(n) for n in settings.users)}}}, "
        f"ε ∈ {{{', '.join(f'{e:g}' for e in settings.epsilons)}}}, "
        f"δ = {delta_label(settings.delta)}; "
        f"protocols: {', '.join(settings.protocols)}.\n",
        "Each cell fixes one input vector x ∈ [0, 1)^n (drawn once per n from a seeded numpy "
        "generator: this is the *data*, identical for every protocol and ε; protocol "
        "randomness comes only from cloaknet's random sources) and measures the error "
        "estimate − Σx over the rounds. Message sizes are the wire format's fixed widths.\n",
        f"## Figure 1 reproduced (ε = {eps:g}, δ = {delta_label(settings.delta)}){figure_note}\n",
        "The paper's column is its asymptotic formula (constants suppressed, as in the "
        "paper); the other columns are measured. Every row names the bound and the noise "
        "its cells used (bound `optimized`: the seed lemmas with the optimized search; for "
        "blanket, cheu and central, which have no choice of bound, the protocol's own "
        "analysis). The two default rows run exactly what `cloaknet plan` selects for each "
        "(n, ε, δ) in each mode (`select_plan(n, ε, δ, mode=…)`, bound auto: whichever of "
        "the seed lemmas and the BBGN bound needs fewer messages), so they may run another "
        "protocol than their name says (the `protocol run` line); the cloak rows keep the "
        "seed lemmas (optimized) whatever the default selects. The central curator and bbgn "
        "(split-and-mix with distributed discrete Laplace noise) are not in Figure 1 and "
        "serve as references. Figure 1 gives the new protocol two lines, next to its two "
        "privacy notions (single-user change, sum-preserving change); they are paired here "
        "with cloak-single-user and cloak-sum-preserving.\n",
        *([cheu_rule(at_eps) + "\n"] if cheu_rule(at_eps) else []),
        _figure_table(settings, rows, eps),
        "\n## What the numbers say\n",
        sentences + "\n",
        "* " + agreement(rows) + "\n",
        "* " + methods_note(rows) + "\n",
        "\n## Error vs n\n",
        "![error vs users](error_vs_users.png)\n",
        "\n## Communication vs n\n",
        "![communication vs users](communication_vs_users.png)\n",
        "\n## How to read the predictions\n",
        "* `predicted` is `predicted_rmse_for(x)` on the fixed inputs: exact for blanket, "
        "cheu, central and bbgn (rounding variance plus noise; bbgn ignores decoding failures "
        "of probability <= 2^-40); for the cloak it combines the exact bias −Σ frac(x_i k)/k "
        "with the exact noise variance, ignoring the clamps of Algorithm 2.\n"
        "* `generic` is `predicted_rmse()`: an upper bound over all inputs for blanket, cheu, "
        "central and bbgn, but for the cloak the **planner's model** (uniform fractional "
        "parts, Lemma 8's variance bound), not a worst case.\n"
        "* The 95% interval treats ν·MSE/σ² as χ²_ν with Satterthwaite's effective degrees "
        "of freedom ν = 2t/(κ − 1) from the sample kurtosis κ = t·Σe⁴/(Σe²)², clamped to "
        "[1, t]: the exact χ² interval for Gaussian errors, wider for heavy tails (the "
        "discrete Laplace noise of central and bbgn has κ ≈ 6; the single-user cloak's noise "
        "is a sum of a few Laplace draws). It remains approximate for non-Gaussian errors "
        "(about 90% coverage for Laplace errors at 50 trials); a deterministic error (the "
        "sum-preserving cloak) gets the point interval.\n"
        "* `sufficient-statistic` cells draw the exact distribution of the sum the analyzer "
        "uses (the cloak: Σ floor(x k) plus the pre-randomizer noise, mod N; bbgn: randomized "
        "rounding plus Pólya noise, mod q; cheu: kept and flipped bits by exact binomials) "
        "and run the protocol's own analyzer on it; see "
        "`cloaknet/experiments/compare/sufficient.py`.\n",
        "\n## Full table\n",
        _full_table(rows),
        "\n## Files\n\n`compare.csv` (the table above, unrounded, with the message modulus), "
        "`trials.csv` (every round), "
        "`error_vs_users.png`, `communication_vs_users.png`, `settings.json`.\n",
    ]
    return "\n".join(text)
