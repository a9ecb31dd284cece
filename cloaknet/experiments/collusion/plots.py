"""The four PNG plots of the collusion experiment, drawn from its summary tables."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from cloaknet import accounting
from cloaknet.experiments.collusion.rows import (
    ColludersRow,
    MessagesRow,
    ProfilePoint,
    SmoothnessRow,
)
from cloaknet.experiments.collusion.settings import MODES, CollusionSettings
from cloaknet.experiments.output import pyplot

__all__ = ["plot_colluders", "plot_messages", "plot_profile", "plot_smoothness"]


def plot_messages(path: Path, settings: CollusionSettings, table: Sequence[MessagesRow]) -> None:
    """Finite losses (90th percentile, log scale) and P[loss = ∞] with the guessing
    success, against m; written to ``path`` as PNG."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for mode, marker in zip(MODES, "os", strict=True):
        sub = [t for t in table if t.mode == mode]
        ms = [t.m for t in sub]
        axes[0].plot(
            ms,
            [t.p90_finite_loss if t.p90_finite_loss > 0 else math.nan for t in sub],
            marker=marker,
            label=f"{mode}: 90th pct. of finite losses",
        )
        axes[1].plot(ms, [t.p_infinite_loss for t in sub], marker=marker, label=mode)
        axes[1].plot(
            ms,
            [t.guess_success for t in sub],
            marker=marker,
            linestyle=":",
            label=f"{mode}: adversary's guess correct",
        )
    axes[0].set_yscale("log")
    axes[0].set_title("finite losses (0 not shown on the log scale)")
    axes[0].set_xlabel("messages per user m")
    axes[0].set_ylabel("realized privacy loss (nats)")
    axes[1].set_xlabel("messages per user m")
    axes[1].set_ylabel("fraction of rounds")
    axes[1].set_title("P[loss = ∞] and guessing success")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"privacy loss vs m (N = {settings.modulus}, k = {settings.precision}, 2 honest users)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_colluders(path: Path, settings: CollusionSettings, table: Sequence[ColludersRow]) -> None:
    """P[loss = ∞] against the colluder fraction, with Lemma 13's δ and the empirical
    P[loss > bound ε] where the lemma applies; written to ``path`` as PNG."""
    q = settings.colluder_q()
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for mode, marker in zip(MODES, "os", strict=True):
        sub = [t for t in table if t.mode == mode]
        ax.plot(
            [t.fraction for t in sub],
            [t.p_infinite_loss for t in sub],
            marker=marker,
            label=f"{mode}: P[loss = ∞]",
        )
    su = [t for t in table if t.mode == "single-user" and t.bound_delta is not None]
    ax.plot(
        [t.fraction for t in su],
        [t.bound_delta for t in su],
        "k--",
        label="Lemma 13 δ (ε = 2)",
    )
    ax.plot(
        [t.fraction for t in su],
        [t.empirical_delta for t in su],
        "k.",
        label="empirical P[loss > ε_bound]",
    )
    ax.axvline(accounting.MAX_COLLUDER_FRACTION, color="grey", linestyle=":")
    ax.set_xlabel("colluder fraction |C|/n")
    ax.set_ylabel("probability")
    ax.set_title(
        f"colluders (n = {settings.colluder_users}, q = {float(q):.3g}, m = {settings.big_m})"
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_smoothness(path: Path, table: Sequence[SmoothnessRow]) -> None:
    """Empirical smoothness failure against Lemma 1's η (both log scale, η capped at 10,
    colour: log10 γ); written to ``path`` as PNG."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 5))
    finite = [t for t in table if math.isfinite(t.eta_bound)]
    xs = [min(t.eta_bound, 10.0) for t in finite]
    ys = [max(t.empirical_failure, 1e-4) for t in finite]
    ax.scatter(xs, ys, c=[math.log10(t.gamma) for t in finite], cmap="viridis")
    ax.plot([1e-4, 10], [1e-4, 10], "k--", label="empirical = bound")
    ax.axvline(1.0, color="grey", linestyle=":", label="bound vacuous (η ≥ 1)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("Lemma 1 bound η (capped at 10)")
    ax.set_ylabel("empirical P[not γ-smooth or not distinct]")
    ax.set_title("Lemma 1: smoothness failure, empirical vs bound")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_profile(path: Path, settings: CollusionSettings, points: Sequence[ProfilePoint]) -> None:
    """One panel per mode: empirical P[loss > ε] and the lemma's δ(ε), log-log; written to
    ``path`` as PNG."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, mode in zip(axes, MODES, strict=True):
        curve = [c for c in points if c.mode == mode]
        ax.plot(
            [c.epsilon for c in curve],
            [max(c.empirical_delta, 1e-4) for c in curve],
            "o-",
            label="empirical P[loss > ε]",
        )
        bounded = [c for c in curve if c.bound_delta is not None]
        ax.plot(
            [c.epsilon for c in bounded],
            [c.bound_delta for c in bounded],
            "k--",
            label="Lemma 5 δ(ε)" if mode == "sum-preserving" else "Lemma 13 δ(ε)",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ε")
        ax.set_ylabel("δ")
        ax.set_title(mode)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"privacy profile, m = {settings.big_m}, N = {settings.modulus}, k = {settings.precision}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
