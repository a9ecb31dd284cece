"""The compare report's notes on the measurements as a whole: how the predictions agree with
the measured intervals, and which cells used the exact sufficient-statistic sampler."""

from __future__ import annotations

from collections.abc import Sequence

from cloaknet.experiments.compare.rows import CellRow
from cloaknet.experiments.text import fmt, n_label

__all__ = ["agreement", "methods_note"]


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
