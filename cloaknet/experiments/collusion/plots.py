"""The four PNG plots of the collusion experiment, drawn from its summary tables.

Every probability is drawn with its 95% Wilson interval; a probability of which nothing was
observed is drawn as an open downward triangle at its upper bound ("0 observed"), never at a
floor as if measured. Series sharing an x value are offset so that neither hides the other,
and legends sit outside the data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Final

from cloaknet import accounting
from cloaknet.experiments.collusion.bounds import no_noise_share
from cloaknet.experiments.collusion.guessing import references
from cloaknet.experiments.collusion.rows import (
    ColludersRow,
    MessagesRow,
    ProfilePoint,
    SmoothnessRow,
)
from cloaknet.experiments.collusion.settings import MODES, CollusionSettings
from cloaknet.experiments.output import pyplot
from cloaknet.experiments.plotting import (
    ZERO_MARKER,
    draw_probabilities,
    legend_below,
    linear_offsets,
    log_floor,
    log_offsets,
    probability_points,
    save_figure,
)

__all__ = ["MODE_STYLE", "plot_colluders", "plot_messages", "plot_profile", "plot_smoothness"]

#: (colour, marker) per mode, the same in every plot.
MODE_STYLE: Final[dict[str, tuple[str, str]]] = {
    "sum-preserving": ("tab:blue", "o"),
    "single-user": ("tab:orange", "s"),
}


#: Top of the smoothness panels' y axis (η above it is off the plot, and said so).
_SMOOTH_TOP: Final[float] = 3.0


def _count(p: float, trials: int) -> int:
    """The count behind a proportion p of ``trials`` (the tables store p = count/trials)."""
    return round(p * trials) if math.isfinite(p) else 0


def plot_messages(path: Path, settings: CollusionSettings, table: Sequence[MessagesRow]) -> None:
    """Three panels against m, the two modes offset sideways: the 90th percentile of the
    finite losses (log scale; a percentile of 0 is marked at the bottom edge as "= 0"),
    P[loss = ∞] with the single-user share of rounds without noise, and the adversary's
    guessing accuracy with the prior, the no-noise baseline and the noise ceiling
    (:mod:`.guessing`); written to ``path`` as PNG."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    offsets = dict(zip(MODES, linear_offsets(len(MODES), 0.36), strict=True))
    for mode in MODES:
        color, marker = MODE_STYLE[mode]
        sub = [t for t in table if t.mode == mode]
        if not sub:
            continue
        ms = [t.m + offsets[mode] for t in sub]
        positive = [(x, t.p90_finite_loss) for x, t in zip(ms, sub, strict=True)]
        shown = [(x, v) for x, v in positive if v > 0 and math.isfinite(v)]
        zeros = [x for x, v in positive if v == 0]
        if shown:
            axes[0].plot(*zip(*shown, strict=True), color=color, marker=marker, label=mode)
        if zeros:
            axes[0].plot(
                zeros,
                [0.03] * len(zeros),
                transform=axes[0].get_xaxis_transform(),
                linestyle="none",
                marker=ZERO_MARKER,
                markerfacecolor="none",
                markeredgecolor=color,
                markersize=8,
                label=f"{mode}: 90th pct. = 0 (not on the log scale)",
            )
        draw_probabilities(
            axes[1],
            probability_points(
                ms, [_count(t.p_infinite_loss, t.trials) for t in sub], [t.trials for t in sub]
            ),
            color=color,
            marker=marker,
            label=f"{mode}: P[loss = ∞]",
            zero_label=f"{mode}: 0 observed (95% upper bound)",
        )
        draw_probabilities(
            axes[2],
            probability_points(ms, [t.correct for t in sub], [t.trials for t in sub]),
            color=color,
            marker=marker,
            label=f"{mode}: guess correct",
            zero_label=f"{mode}: 0 correct (95% upper bound)",
        )
        refs = [references(settings, t) for t in sub]
        plain = [t.m for t in sub]
        axes[2].plot(
            plain, [r.prior for r in refs], color=color, linestyle=":", label=f"{mode}: prior"
        )
        if mode == "single-user":
            share = refs[0].no_noise_share
            axes[1].axhline(
                share,
                color=color,
                linestyle="--",
                linewidth=1,
                label=f"single-user: no honest noise, (1−q)^{sub[0].honest} = {share:.3g}",
            )
            axes[2].plot(
                plain,
                [r.baseline for r in refs],
                color=color,
                linestyle="--",
                label="single-user: no-noise baseline",
            )
            axes[2].plot(
                plain,
                [r.ceiling for r in refs],
                color="grey",
                linestyle="-.",
                linewidth=1,
                label="single-user: most a noisy-sum-only view allows",
            )
    axes[0].set_yscale("log")
    axes[0].set_ylabel("90th percentile of the finite losses (nats)")
    axes[0].set_title("realized privacy loss")
    axes[1].set_ylim(-0.03, 1.03)
    axes[1].set_ylabel("fraction of rounds")
    axes[1].set_title("P[loss = ∞]: a feasible input excluded")
    axes[2].set_ylim(-0.03, 1.03)
    axes[2].set_ylabel("fraction of rounds guessed right")
    axes[2].set_title("the adversary's best guess of the target's input")
    for ax in axes:
        ax.set_xlabel("messages per user m")
        ax.set_xticks(sorted({t.m for t in table}))
        ax.grid(alpha=0.3)
        legend_below(ax, ncol=1)
    fig.suptitle(
        f"privacy loss vs m (N = {settings.modulus}, k = {settings.precision}, 2 honest users, "
        f"single-user q = {settings.single_user_q}; bars: 95% intervals)"
    )
    save_figure(fig, path)


def plot_colluders(path: Path, settings: CollusionSettings, table: Sequence[ColludersRow]) -> None:
    """P[loss = ∞] per mode against the colluder fraction on a log scale in 1 − |C|/n (so
    0.9–0.99 is not squeezed into a corner), with the single-user share (1 − q)^h of rounds
    without honest noise, Lemma 13's δ and the empirical P[loss > bound ε] where the lemma
    applies; written to ``path`` as PNG."""
    q = settings.colluder_q()
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 5))
    factors = log_offsets(len(MODES) + 1, 0.03)
    for factor, mode in zip(factors, MODES, strict=False):
        color, marker = MODE_STYLE[mode]
        sub = [t for t in table if t.mode == mode]
        draw_probabilities(
            ax,
            probability_points(
                [(1 - t.fraction) * factor for t in sub],
                [_count(t.p_infinite_loss, t.trials) for t in sub],
                [t.trials for t in sub],
            ),
            color=color,
            marker=marker,
            label=f"{mode}: P[loss = ∞]",
            zero_label=None,
        )
    single = [t for t in table if t.mode == "single-user"]
    if single:
        ax.plot(
            [1 - t.fraction for t in single],
            [no_noise_share(q, t.honest) for t in single],
            color=MODE_STYLE["single-user"][0],
            linestyle="--",
            linewidth=1,
            label="single-user: no honest noise, (1−q)^h",
        )
    bounded = [t for t in single if t.bound_delta is not None and t.empirical_delta is not None]
    if bounded:
        ax.plot(
            [1 - t.fraction for t in bounded],
            [t.bound_delta for t in bounded],
            "k--",
            label="Lemma 13 δ (ε = 2)",
        )
        draw_probabilities(
            ax,
            probability_points(
                [(1 - t.fraction) * factors[-1] for t in bounded],
                [_count(t.empirical_delta or 0.0, t.trials) for t in bounded],
                [t.trials for t in bounded],
            ),
            color="black",
            marker="D",
            linestyle="none",
            label="single-user: empirical P[loss > ε = 2]",
            zero_label="0 observed (drawn at the 95% upper bound)",
        )
    limit = 1 - accounting.MAX_COLLUDER_FRACTION
    ax.axvline(limit, color="grey", linestyle=":", label="Lemma 13 needs |C| ≤ 0.9 n")
    ax.set_xscale("log")
    fractions = sorted({t.fraction for t in table})
    ax.set_xticks([1 - f for f in fractions])
    ax.set_xticklabels([f"{f:g}" for f in fractions])
    ax.minorticks_off()
    lowest = min((1 - f for f in fractions if f < 1), default=limit)
    ax.set_xlim(1.4, lowest / 1.4)  # inverted: more colluders to the right
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("colluder fraction |C|/n (log scale in the honest share 1 − |C|/n)")
    ax.set_ylabel("fraction of rounds")
    ax.set_title(
        f"colluders (n = {settings.colluder_users}, q = {float(q):.3g}, m = {settings.big_m}; "
        "bars: 95% intervals)"
    )
    ax.grid(alpha=0.3)
    legend_below(ax, ncol=2)
    save_figure(fig, path)


def plot_smoothness(path: Path, table: Sequence[SmoothnessRow]) -> None:
    """One panel per (m, N): the empirical P[not γ-smooth or not distinct] against γ (log-log,
    95% intervals, "0 observed" at the upper bound) next to Lemma 1's η(γ), the observed
    rate of repeated shares and the collision term 2m²/N; the vacuous region (≥ 1) shaded;
    written to ``path`` as PNG."""
    plt = pyplot()
    ms = sorted({t.m for t in table})
    moduli = sorted({t.modulus for t in table})
    fig, axes = plt.subplots(
        len(moduli),
        len(ms),
        figsize=(4.2 * len(ms) + 0.5, 3.6 * len(moduli) + 1.2),
        squeeze=False,
        sharex=True,
        sharey=True,
    )
    floor = log_floor(
        [t.empirical_failure for t in table]
        + [t.ci_high for t in table]
        + [t.eta_bound for t in table]
        + [t.collision_term for t in table]
    )
    for row_axes, modulus in zip(axes, moduli, strict=True):
        for ax, m in zip(row_axes, ms, strict=True):
            sub = sorted((t for t in table if t.m == m and t.modulus == modulus), key=_gamma)
            ax.axhspan(1.0, 10.0, color="grey", alpha=0.12, label="≥ 1: a vacuous bound")
            if sub:
                gammas = [t.gamma for t in sub]
                draw_probabilities(
                    ax,
                    probability_points(
                        gammas,
                        [_count(t.empirical_failure, t.trials) for t in sub],
                        [t.trials for t in sub],
                    ),
                    color="tab:blue",
                    marker="o",
                    label="empirical P[not γ-smooth or not distinct]",
                )
                finite = [t for t in sub if math.isfinite(t.eta_bound)]
                ax.plot(
                    [t.gamma for t in finite],
                    [t.eta_bound for t in finite],
                    "k--",
                    label="Lemma 1 bound η(γ)",
                )
                repeated = sub[0].p_not_distinct
                if repeated > 0:
                    ax.axhline(
                        repeated,
                        color="tab:red",
                        linestyle=":",
                        linewidth=2,
                        zorder=4,
                        label="observed P[repeated share]",
                    )
                ax.axhline(
                    sub[0].collision_term,
                    color="grey",
                    linestyle="-.",
                    linewidth=1,
                    label="collision term 2m²/N",
                )
                notes = []
                if not finite:
                    notes.append("Lemma 1 gives no η here")
                elif min(t.eta_bound for t in finite) > _SMOOTH_TOP:
                    notes.append(f"η(γ) > {_SMOOTH_TOP:g} at every γ (above the plot)")
                if repeated == 0:
                    notes.append("no repeated share observed")
                if notes:
                    ax.text(
                        0.03,
                        0.04,
                        "\n".join(notes),
                        transform=ax.transAxes,
                        fontsize=8.5,
                        bbox={"facecolor": "white", "edgecolor": "grey", "alpha": 0.9},
                    )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_ylim(floor, _SMOOTH_TOP)
            ax.set_title(f"m = {m}, N = {modulus}")
            ax.grid(alpha=0.3, which="major")
    for ax in axes[-1]:
        ax.set_xlabel("γ")
    for ax in axes[:, 0]:
        ax.set_ylabel("probability")
    seen: dict[str, object] = {}
    for row_axes in axes:
        for ax in row_axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                seen.setdefault(label, handle)
    fig.legend(
        list(seen.values()),
        list(seen.keys()),
        loc="lower center",
        ncol=3,
        fontsize=9,
        frameon=False,
        bbox_to_anchor=(0.5, -0.02),
    )
    fig.suptitle("Lemma 1: two users' 2m shares not γ-smooth or not distinct (bars: 95% intervals)")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save_figure(fig, path)


def _gamma(row: SmoothnessRow) -> float:
    return row.gamma


def plot_profile(
    path: Path,
    settings: CollusionSettings,
    points: Sequence[ProfilePoint],
    messages: Sequence[MessagesRow],
) -> None:
    """One panel per mode: the empirical P[loss > ε] (95% intervals; "0 observed" at the
    upper bound) and the lemma's δ(ε), log-log, with the share of rounds whose loss is
    infinite (from ``messages`` at m = ``big_m``: exceeded at every ε); written to ``path``
    as PNG."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(MODES), figsize=(13, 5.2))
    for ax, mode in zip(axes, MODES, strict=True):
        color, marker = MODE_STYLE[mode]
        curve = [c for c in points if c.mode == mode]
        draw_probabilities(
            ax,
            probability_points(
                [c.epsilon for c in curve], [c.over for c in curve], [c.trials for c in curve]
            ),
            color=color,
            marker=marker,
            label="empirical P[loss > ε]",
            zero_label="empirical P[loss > ε]: 0 observed (drawn at the 95% upper bound)",
        )
        bounded = [c for c in curve if c.bound_delta is not None]
        lemma = "Lemma 5" if mode == "sum-preserving" else "Lemma 13"
        if bounded:
            first = min(c.epsilon for c in bounded)
            ax.plot(
                [c.epsilon for c in bounded],
                [c.bound_delta for c in bounded],
                "k--",
                label=f"{lemma} δ(ε)"
                + (f" (no bound below ε = {first:.2g})" if first > curve[0].epsilon else ""),
            )
        row = next((t for t in messages if t.mode == mode and t.m == settings.big_m), None)
        if row is not None and row.p_infinite_loss > 0:
            ax.axhline(
                row.p_infinite_loss,
                color="grey",
                linestyle=":",
                label=f"P[loss = ∞] = {row.p_infinite_loss:.3g} (these rounds exceed every ε)",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(
            log_floor(
                [c.ci_high for c in curve]
                + [c.empirical_delta for c in curve]
                + [c.bound_delta for c in bounded if c.bound_delta is not None]
            ),
            2.0,
        )
        ax.set_xlabel("ε")
        ax.set_ylabel("δ")
        ax.set_title(mode)
        ax.grid(alpha=0.3, which="both")
        legend_below(ax, ncol=1)
    q = Fraction(settings.single_user_q)
    fig.suptitle(
        f"privacy profile, m = {settings.big_m}, N = {settings.modulus}, "
        f"k = {settings.precision}, single-user q = {q} (bars: 95% intervals)"
    )
    save_figure(fig, path)
