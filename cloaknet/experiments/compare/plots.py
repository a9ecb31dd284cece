"""The two PNG plots of the compare experiment: error vs n and communication vs n."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

from cloaknet.experiments.compare.rows import CellRow, Measurement, Plan
from cloaknet.experiments.compare.settings import CompareSettings
from cloaknet.experiments.output import pyplot

__all__ = ["plot_communication", "plot_error"]

#: (colour, marker) per protocol.
STYLE: Final[dict[str, tuple[str, str]]] = {
    "cloak-single-user": ("tab:blue", "o"),
    "cloak-sum-preserving": ("tab:cyan", "D"),
    "blanket": ("tab:red", "v"),
    "cheu": ("tab:orange", "s"),
    "central": ("black", "x"),
    "bbgn": ("tab:green", "^"),
}
#: Line style per ε (cycled).
EPS_STYLE: Final[tuple[str, ...]] = ("-", "--", ":", "-.")


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


def plot_error(path: Path, settings: CompareSettings, rows: Sequence[CellRow]) -> None:
    """One panel per ε: measured RMSE with its 95% interval and the predicted RMSE
    (dashed) against n, log-log; written to ``path`` as PNG."""
    plt = pyplot()
    count = len(settings.epsilons)
    fig, axes = plt.subplots(1, count, figsize=(5.2 * count + 1, 4.6), squeeze=False)
    for ax, eps in zip(axes[0], settings.epsilons, strict=True):
        for name in settings.protocols:
            color, marker = STYLE.get(name, ("gray", "."))
            sub = _measured(rows, name, eps)
            if not sub:
                continue
            ns = [n for n, _, _ in sub]
            rmse = np.array([m.measured_rmse for _, _, m in sub])
            below = rmse - np.array([m.rmse_ci_low for _, _, m in sub])
            above = np.array([m.rmse_ci_high for _, _, m in sub]) - rmse
            ax.errorbar(
                ns,
                rmse,
                yerr=[below, above],
                color=color,
                marker=marker,
                linestyle="none",
                capsize=3,
                label=f"{name} measured",
            )
            ax.plot(
                ns,
                [plan.predicted_rmse for _, plan, _ in sub],
                color=color,
                linestyle="--",
                linewidth=1,
                label=f"{name} predicted",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("users n")
        ax.set_ylabel("RMSE of the estimated sum")
        ax.set_title(f"ε = {eps:g}, δ = {settings.delta:g}")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=6, ncol=2)
    fig.suptitle("error vs n: measured RMSE (95% CI) and prediction (dashed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_communication(path: Path, settings: CompareSettings, rows: Sequence[CellRow]) -> None:
    """Bytes per user and messages per user against n (log-log), one line per protocol and
    ε; written to ``path`` as PNG."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for name in settings.protocols:
        color, marker = STYLE.get(name, ("gray", "."))
        for index, eps in enumerate(settings.epsilons):
            sub = _planned(rows, name, eps)
            if not sub:
                continue
            ns = [n for n, _ in sub]
            style = EPS_STYLE[index % len(EPS_STYLE)]
            label = f"{name}, ε = {eps:g}"
            axes[0].plot(
                ns,
                [plan.bytes_per_user for _, plan in sub],
                color=color,
                marker=marker,
                linestyle=style,
                label=label,
            )
            axes[1].plot(
                ns,
                [plan.messages_per_user for _, plan in sub],
                color=color,
                marker=marker,
                linestyle=style,
                label=label,
            )
    for ax, what in zip(axes, ("bytes per user", "messages per user"), strict=True):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("users n")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3, which="both")
    axes[1].legend(fontsize=6, ncol=2)
    fig.suptitle(f"communication vs n (δ = {settings.delta:g}; line style: ε)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
