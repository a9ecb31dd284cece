"""The cells of a compare run and their division into worker tasks.

A cell is one (row, n, ε) at the run's δ: the row's protocol instance (:func:`.lineup.build`:
the default plan of ``cloaknet plan`` or a protocol by name), or why it is infeasible, the
simulation method and the protocol's plan (what it runs, its bound and noise, communication
and predictions on the fixed inputs). Its ``trials`` rounds are cut into chunks of roughly
equal cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.experiments.compare.data import input_vector
from cloaknet.experiments.compare.lineup import Built, build
from cloaknet.experiments.compare.rows import Method, Plan
from cloaknet.experiments.compare.settings import CompareSettings
from cloaknet.experiments.compare.simulate import Task, choose_method, trial_cost
from cloaknet.protocols import SummationProtocol

__all__ = ["Cell", "build_cells", "plan_tasks"]


@dataclass(frozen=True)
class Cell:
    """One (row ``name``, n = ``users``, ε) cell (``name`` one of :data:`.lineup.ROWS`).
    Feasible cells have ``protocol``, ``method`` and ``plan``; infeasible ones only
    ``reason`` ("ErrorType: message")."""

    name: str
    users: int
    epsilon: float
    protocol: SummationProtocol | None
    reason: str | None
    method: Method | None
    plan: Plan | None = None


def _plan(built: Built, x: NDArray[np.float64], truth: float) -> Plan:
    protocol = built.protocol
    precision = protocol.describe().get("precision")
    return Plan(
        runs=protocol.name,
        bound=built.bound,
        noise=built.noise,
        messages_per_user=float(protocol.messages_per_user),
        bits_per_message=int(protocol.bits_per_message),
        bytes_per_message=int(protocol.bytes_per_message),
        bytes_per_user=float(protocol.bytes_per_user),
        modulus=int(protocol.message_modulus),
        precision=int(precision) if isinstance(precision, int) else None,
        predicted_rmse=float(protocol.predicted_rmse_for(x)),
        predicted_rmse_generic=float(protocol.predicted_rmse()),
        predicted_bias=float(protocol.expected_estimate(x)) - truth,
    )


def build_cells(settings: CompareSettings) -> list[Cell]:
    """Every cell of the grid, ordered by n, then ε, then the order of ``settings.protocols``
    (each row built by :func:`.lineup.build`). A row that cannot be planned
    (InfeasiblePlanError or ParameterError) gives an infeasible cell instead of an error."""
    cells = []
    for n in settings.users:
        x = input_vector(n, settings.seed)
        truth = math.fsum(x.tolist())
        for eps in settings.epsilons:
            for name in settings.protocols:
                try:
                    built = build(name, n, eps, settings.delta)
                except (InfeasiblePlanError, ParameterError) as exc:
                    cells.append(Cell(name, n, eps, None, f"{type(exc).__name__}: {exc}", None))
                    continue
                protocol = built.protocol
                method = choose_method(protocol, n, settings.max_messages_per_trial)
                cells.append(Cell(name, n, eps, protocol, None, method, _plan(built, x, truth)))
    return cells


def plan_tasks(settings: CompareSettings, cells: Sequence[Cell]) -> list[Task]:
    """The trials of every feasible cell, in chunks of about 1/(8·jobs) of the total cost
    (at least one trial each), heaviest first for a better load balance."""
    costed: list[tuple[float, Cell, Method]] = []
    for cell in cells:
        if cell.protocol is not None and cell.method is not None:
            costed.append((trial_cost(cell.protocol, cell.users, cell.method), cell, cell.method))
    if not costed:
        return []
    total = sum(cost for cost, _, _ in costed) * settings.trials
    target = max(1.0, total / (settings.jobs * 8.0))
    tasks: list[tuple[float, Task]] = []
    for cost, cell, method in costed:
        chunk = max(1, min(settings.trials, math.floor(target / max(cost, 1.0))))
        for first in range(0, settings.trials, chunk):
            count = min(chunk, settings.trials - first)
            task = Task(
                cell.name,
                cell.users,
                cell.epsilon,
                settings.delta,
                settings.seed,
                first,
                count,
                method,
            )
            tasks.append((cost * count, task))
    tasks.sort(key=lambda item: -item[0])  # heaviest first: better load balance
    return [task for _, task in tasks]
