"""Queries over the compare experiment's cells that the findings share: the feasible rows of
a protocol, one cell, its measurement and 95% interval, and how measured errors differ
(judged by the intervals, :func:`cloaknet.experiments.stats.overlap`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from cloaknet.experiments.compare.rows import CellRow, Measurement, Plan
from cloaknet.experiments.stats import overlap
from cloaknet.experiments.text import fmt, n_label

__all__ = [
    "Feasible",
    "differences",
    "feasible",
    "find_cell",
    "interval_of",
    "measurement_of",
    "overlaps",
    "with_ci",
]


@dataclass(frozen=True)
class Feasible:
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


def feasible(rows: Sequence[CellRow], name: str) -> list[Feasible]:
    found = [Feasible(r, r.plan) for r in rows if r.plan is not None and r.protocol == name]
    return sorted(found, key=lambda f: f.users)


def find_cell(rows: Sequence[CellRow], name: str, n: int, eps: float) -> CellRow | None:
    """The row of (protocol ``name``, n, ε), or None."""
    for r in rows:
        if r.protocol == name and r.users == n and r.epsilon == eps:
            return r
    return None


def measurement_of(row: CellRow | None) -> Measurement | None:
    return row.measurement if row is not None and row.plan is not None else None


def interval_of(row: CellRow | None) -> tuple[float, float] | None:
    m = measurement_of(row)
    return None if m is None else (m.rmse_ci_low, m.rmse_ci_high)


def overlaps(a: CellRow | None, b: CellRow | None) -> bool:
    ia, ib = interval_of(a), interval_of(b)
    return ia is not None and ib is not None and overlap(ia, ib)


def with_ci(f: Feasible) -> str:
    m = f.measurement
    if m is None:
        return "not measured"
    return f"{fmt(m.measured_rmse)} [{fmt(m.rmse_ci_low)}, {fmt(m.rmse_ci_high)}]"


def differences(cells: Sequence[Feasible]) -> str:
    """How the measured RMSEs of ``cells`` (one protocol, sorted by n) differ, judged by
    their 95% intervals: "within sampling noise" when every pair overlaps, else the pairs
    that are disjoint, each "higher" or "lower" at the larger n. "" for fewer than two
    measured cells."""
    measured = [f for f in cells if f.measurement is not None]
    if len(measured) < 2:
        return ""
    disjoint = [
        (a, b) for a, b in itertools.combinations(measured, 2) if not overlaps(a.row, b.row)
    ]
    if not disjoint:
        return "the measured values differ only within sampling noise (all 95% intervals overlap)"
    pairs = "; ".join(
        f"{'lower' if (b.rmse or 0.0) < (a.rmse or 0.0) else 'higher'} at "
        f"n = {n_label(b.users)} ({with_ci(b)}) than at n = {n_label(a.users)} ({with_ci(a)})"
        for a, b in disjoint
    )
    return f"beyond sampling noise (disjoint 95% intervals) the error is {pairs}"


