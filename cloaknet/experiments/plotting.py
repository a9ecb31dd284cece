"""Plot helpers shared by the experiments: offsets so that markers at the same x do not hide
each other, probabilities with Wilson intervals where a zero count is drawn as an upper
bound (never at a made-up floor as if measured), legends outside the data, and saving.

The pure parts (:func:`log_offsets`, :func:`linear_offsets`, :func:`probability_points`)
are tested on their own; the drawing functions take a matplotlib ``Axes``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from cloaknet.experiments.output import pyplot
from cloaknet.experiments.stats import wilson_interval

__all__ = [
    "ZERO_MARKER",
    "ProbabilityPoints",
    "draw_probabilities",
    "legend_below",
    "linear_offsets",
    "log_floor",
    "log_offsets",
    "probability_points",
    "save_figure",
]

#: The marker of "0 observed, drawn at the 95% upper bound": an open downward triangle.
ZERO_MARKER = "v"


def log_offsets(count: int, decades: float = 0.03) -> list[float]:
    """``count`` multiplicative factors centred on 1, ``decades`` (> 0) of a decade apart,
    for spreading series that share x values on a log axis (index i gets
    10^((i − (count − 1)/2)·decades)). Empty for ``count`` <= 0."""
    return [10.0 ** ((i - (count - 1) / 2.0) * decades) for i in range(max(0, count))]


def linear_offsets(count: int, width: float) -> list[float]:
    """``count`` additive offsets centred on 0, ``width`` apart (linear-axis counterpart of
    :func:`log_offsets`)."""
    return [(i - (count - 1) / 2.0) * width for i in range(max(0, count))]


class ProbabilityPoints(NamedTuple):
    """Probabilities ready to draw: the points with a positive count (``xs``, ``ys`` and the
    error-bar lengths ``below``/``above`` to the 95% Wilson interval) and the points where
    nothing was observed (``zero_xs``, drawn at their Wilson upper bound ``zero_uppers``).
    Points without trials are left out."""

    xs: list[float]
    ys: list[float]
    below: list[float]
    above: list[float]
    zero_xs: list[float]
    zero_uppers: list[float]


def probability_points(
    xs: Sequence[float], counts: Sequence[int], trials: Sequence[int]
) -> ProbabilityPoints:
    """Split ``counts`` of ``trials`` at ``xs`` (equal lengths) into measured proportions with
    their Wilson intervals and zero counts with their upper bounds (:class:`ProbabilityPoints`).

    :raises ValueError: the sequences differ in length.
    :raises ParameterError: a count outside [0, trials].
    """
    if not len(xs) == len(counts) == len(trials):
        raise ValueError("xs, counts and trials must have equal lengths")
    out = ProbabilityPoints([], [], [], [], [], [])
    for x, count, total in zip(xs, counts, trials, strict=True):
        if total == 0:
            continue
        low, high = wilson_interval(count, total)
        if count == 0:
            out.zero_xs.append(x)
            out.zero_uppers.append(high)
            continue
        p = count / total
        out.xs.append(x)
        out.ys.append(p)
        out.below.append(max(0.0, p - low))
        out.above.append(max(0.0, high - p))
    return out


def draw_probabilities(
    ax: Any,
    points: ProbabilityPoints,
    *,
    color: str,
    marker: str,
    label: str,
    linestyle: str = "-",
    zero_label: str | None = "0 observed (drawn at the 95% upper bound)",
) -> None:
    """Draw ``points`` on ``ax``: measured proportions as ``marker`` with Wilson error bars
    joined by ``linestyle`` ("none" for no line), zero counts as open :data:`ZERO_MARKER` at
    their upper bound with ``zero_label`` (None: no legend entry)."""
    if points.xs:
        ax.errorbar(
            points.xs,
            points.ys,
            yerr=[points.below, points.above],
            color=color,
            marker=marker,
            linestyle=linestyle,
            capsize=3,
            label=label,
        )
    if points.zero_xs:
        ax.plot(
            points.zero_xs,
            points.zero_uppers,
            linestyle="none",
            marker=ZERO_MARKER,
            markersize=8,
            markerfacecolor="none",
            markeredgecolor=color,
            label=zero_label if zero_label else "_nolegend_",
        )


def legend_below(ax: Any, ncol: int = 2, handles: Sequence[Any] | None = None) -> None:
    """A legend under ``ax`` (outside the data), readable size; ``handles`` default to the
    axes' labelled artists. Nothing when there is nothing to show."""
    if handles is None:
        handles, _ = ax.get_legend_handles_labels()
    if not handles:
        return
    ax.legend(
        handles=list(handles),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=ncol,
        fontsize=8.5,
        frameon=False,
    )


def save_figure(fig: Any, path: Path) -> None:
    """Write ``fig`` to ``path`` as PNG at 120 dpi, cropped to what was drawn (legends
    outside the axes included), and close it."""
    fig.savefig(path, dpi=120, bbox_inches="tight")
    pyplot().close(fig)


def log_floor(values: Sequence[float], fallback: float = 1e-3) -> float:
    """A lower y limit for a log axis: a third of the smallest positive finite value, or
    ``fallback`` when there is none."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    return min(positive) / 3.0 if positive else fallback
