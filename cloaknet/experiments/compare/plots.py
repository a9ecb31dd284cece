"""The two PNG plots of the compare experiment: error vs n and communication vs n.

Protocols sharing an n are offset sideways (a few hundredths of a decade, so none hides
another), the legend sits outside the data with one entry per row (its name, then the bound
and noise its cells used: :func:`.lineup.caption`) plus one per line style, and every
infeasible cell is drawn as a labelled "infeasible" box at its n instead of being left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from cloaknet.experiments.compare.lineup import DEFAULT_ROWS, caption
from cloaknet.experiments.compare.rows import CellRow, Measurement, Plan
from cloaknet.experiments.compare.settings import CompareSettings
from cloaknet.experiments.output import pyplot
from cloaknet.experiments.plotting import log_offsets, save_figure

__all__ = [
    "STYLE",
    "infeasible_cells",
    "legend_label",
    "plot_communication",
    "plot_error",
    "protocol_offsets",
]

#: (colour, marker) per row.
STYLE: Final[dict[str, tuple[str, str]]] = {
    "default-single-user": ("tab:purple", "P"),
    "default-sum-preserving": ("tab:brown", "*"),
    "cloak-single-user": ("tab:blue", "o"),
    "cloak-sum-preserving": ("tab:cyan", "D"),
    "blanket": ("tab:red", "v"),
    "cheu": ("tab:orange", "s"),
    "central": ("black", "X"),
    "bbgn": ("tab:green", "^"),
}
#: Line style per ε (cycled).
EPS_STYLE: Final[tuple[Literal["-", "--", ":", "-."], ...]] = ("-", "--", ":", "-.")
#: Spacing of the protocols' sideways offsets, in decades of n.
OFFSET_DECADES: Final[float] = 0.035


def protocol_offsets(protocols: Sequence[str]) -> dict[str, float]:
    """The multiplicative x offset of each protocol (:func:`log_offsets`), distinct for
    distinct protocols, so markers at the same n do not hide each other."""
    return dict(zip(protocols, log_offsets(len(protocols), OFFSET_DECADES), strict=True))


def infeasible_cells(rows: Sequence[CellRow], eps: float) -> list[tuple[str, int]]:
    """(protocol, n) of every infeasible cell at ε = ``eps``, sorted by n then protocol."""
    return sorted(
        ((r.protocol, r.users) for r in rows if r.epsilon == eps and not r.feasible),
        key=lambda item: (item[1], item[0]),
    )


def _style(name: str) -> tuple[str, str]:
    return STYLE.get(name, ("gray", "."))


def _planned(rows: Sequence[CellRow], name: str, eps: float) -> list[tuple[int, Plan]]:
    found = [
        (r.users, r.plan)
        for r in rows
        if r.plan is not None and r.protocol == name and r.epsilon == eps
    ]
    return sorted(found, key=lambda item: item[0])


def _measured(
    rows: Sequence[CellRow], name: str, eps: float
) -> list[tuple[int, Plan, Measurement]]:
    found = [
        (r.users, r.plan, r.measurement)
        for r in rows
        if r.plan is not None
        and r.measurement is not None
        and r.measurement.measured_rmse > 0  # a log axis cannot show 0
        and r.protocol == name
        and r.epsilon == eps
    ]
    return sorted(found, key=lambda item: item[0])


def _mark_infeasible(
    ax: Any, cells: Sequence[tuple[str, int, str]], offsets: dict[str, float]
) -> None:
    """A dashed box "<protocol>: <note>" at each cell's (offset) n, in a strip added below
    the data of the log-scaled ``ax`` (so no box covers a measurement), stacked upwards when
    several share an n; the x range is widened so that a box at the smallest n fits."""
    if not cells:
        return
    bottom, top = ax.get_ylim()
    free = 0.14 + 0.09 * max(sum(1 for c in cells if c[1] == n) for _, n, _ in cells)
    span = np.log10(top) - np.log10(bottom)
    ax.set_ylim(10 ** (np.log10(bottom) - free / (1 - free) * span), top)
    stacked: dict[int, int] = {}
    for name, n, note in cells:
        color, _ = _style(name)
        level = stacked.get(n, 0)
        stacked[n] = level + 1
        ax.text(
            n * offsets.get(name, 1.0),
            0.02 + 0.09 * level,
            f"{name}: {note}",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=8,
            color=color,
            bbox={
                "boxstyle": "round,pad=0.3",
                "facecolor": "white",
                "edgecolor": color,
                "linestyle": "--",
            },
        )
    low_n = min(n for _, n, _ in cells)
    left, right = ax.get_xlim()
    ax.set_xlim(min(left, low_n / 2.2), right)


def _infeasible_notes(
    rows: Sequence[CellRow], epsilons: Sequence[float]
) -> list[tuple[str, int, str]]:
    """(protocol, n, "infeasible" or "infeasible at ε = …") for the infeasible cells at any
    of ``epsilons``."""
    found: dict[tuple[str, int], list[float]] = {}
    for eps in epsilons:
        for name, n in infeasible_cells(rows, eps):
            found.setdefault((name, n), []).append(eps)
    notes = []
    for (name, n), eps_list in sorted(found.items(), key=lambda item: (item[0][1], item[0][0])):
        every = len(eps_list) == len(epsilons)
        note = (
            "infeasible" if every else f"infeasible at ε = {', '.join(f'{e:g}' for e in eps_list)}"
        )
        notes.append((name, n, note))
    return notes


def legend_label(name: str, rows: Sequence[CellRow]) -> str:
    """The legend entry of row ``name``: the name (with "(cloaknet plan's choice)" for a
    default row), and on a second line the bound and noise of its feasible cells among
    ``rows`` (:func:`.lineup.caption`)."""
    cells = [
        (r.plan.runs, r.plan.bound, r.plan.noise)
        for r in sorted(rows, key=lambda r: (r.users, r.epsilon))
        if r.protocol == name and r.plan is not None
    ]
    chooser = " (cloaknet plan's choice)" if name in DEFAULT_ROWS else ""
    return f"{name}{chooser}\n  {caption(name, cells, chooser=False)}"


def _protocol_handles(settings: CompareSettings, rows: Sequence[CellRow]) -> list[Any]:
    from matplotlib.lines import Line2D

    present = {r.protocol for r in rows}
    return [
        Line2D(
            [],
            [],
            color=_style(name)[0],
            marker=_style(name)[1],
            linestyle="-",
            label=legend_label(name, rows),
        )
        for name in settings.protocols
        if name in present
    ]


def plot_error(path: Path, settings: CompareSettings, rows: Sequence[CellRow]) -> None:
    """One panel per ε: measured RMSE with its 95% interval (markers with bars) and the
    predicted RMSE (dashed) against n, log-log, protocols offset sideways, infeasible cells
    labelled; legend on the right; written to ``path`` as PNG."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    count = len(settings.epsilons)
    fig, axes = plt.subplots(1, count, figsize=(5.6 * count + 0.4, 5.2), squeeze=False)
    offsets = protocol_offsets(settings.protocols)
    for ax, eps in zip(axes[0], settings.epsilons, strict=True):
        for name in settings.protocols:
            color, marker = _style(name)
            sub = _measured(rows, name, eps)
            if not sub:
                continue
            ns = [n * offsets[name] for n, _, _ in sub]
            rmse = np.array([m.measured_rmse for _, _, m in sub])
            below = rmse - np.array([m.rmse_ci_low for _, _, m in sub])
            above = np.array([m.rmse_ci_high for _, _, m in sub]) - rmse
            ax.errorbar(
                ns,
                rmse,
                yerr=[below, above],
                color=color,
                marker=marker,
                markersize=7,
                linestyle="none",
                capsize=3,
            )
            ax.plot(
                ns,
                [plan.predicted_rmse for _, plan, _ in sub],
                color=color,
                linestyle="--",
                linewidth=1.2,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(list(settings.users))
        ax.set_xlabel("users n (protocols offset sideways at each n)")
        ax.set_ylabel("RMSE of the estimated sum")
        ax.set_title(f"ε = {eps:g}, δ = {settings.delta:g}")
        ax.grid(alpha=0.3, which="major")
        _mark_infeasible(ax, _infeasible_notes(rows, [eps]), offsets)
    handles = [
        *_protocol_handles(settings, rows),
        Line2D([], [], color="grey", marker="o", linestyle="none", label="measured (95% CI)"),
        Line2D([], [], color="grey", linestyle="--", label="predicted"),
    ]
    fig.legend(
        handles=handles,
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        fontsize=10,
        frameon=False,
    )
    fig.suptitle("error vs n: measured RMSE (bars: 95% CI) and prediction (dashed)")
    fig.tight_layout()
    save_figure(fig, path)


def plot_communication(path: Path, settings: CompareSettings, rows: Sequence[CellRow]) -> None:
    """Bytes per user and messages per user against n (log-log), one colour per protocol and
    one line style per ε, protocols offset sideways, infeasible cells labelled; legend below
    the panels (two columns); written to ``path`` as PNG."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 5.2))
    offsets = protocol_offsets(settings.protocols)
    for name in settings.protocols:
        color, marker = _style(name)
        for index, eps in enumerate(settings.epsilons):
            sub = _planned(rows, name, eps)
            if not sub:
                continue
            ns = [n * offsets[name] for n, _ in sub]
            style = EPS_STYLE[index % len(EPS_STYLE)]
            for ax, values in zip(
                axes,
                (
                    [plan.bytes_per_user for _, plan in sub],
                    [plan.messages_per_user for _, plan in sub],
                ),
                strict=True,
            ):
                ax.plot(ns, values, color=color, marker=marker, markersize=7, linestyle=style)
    infeasible = _infeasible_notes(rows, settings.epsilons)
    for ax, what in zip(axes, ("bytes per user", "messages per user"), strict=True):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(list(settings.users))
        ax.set_xlabel("users n (protocols offset sideways at each n)")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3, which="major")
        _mark_infeasible(ax, infeasible, offsets)
    handles = _protocol_handles(settings, rows)
    if len(settings.epsilons) > 1:
        handles += [
            Line2D(
                [], [], color="grey", linestyle=EPS_STYLE[i % len(EPS_STYLE)], label=f"ε = {e:g}"
            )
            for i, e in enumerate(settings.epsilons)
        ]
    fig.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=min(2, len(handles)),
        fontsize=10,
        frameon=False,
    )
    eps_text = f"ε = {settings.epsilons[0]:g}" if len(settings.epsilons) == 1 else "line style: ε"
    fig.suptitle(f"communication vs n (δ = {settings.delta:g}; {eps_text})")
    fig.tight_layout()
    save_figure(fig, path)
