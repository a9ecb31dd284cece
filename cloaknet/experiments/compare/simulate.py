"""One round of a summation protocol, and chunks of rounds for the worker processes.

Two methods (the ``method`` column of the results):

``messages``
    The real protocol: ``encode_many`` → :func:`cloaknet.vectorized.shuffle` → ``analyze``.
``sufficient-statistic``
    The exact sampler of the analyzer's sufficient statistic
    (:mod:`cloaknet.experiments.compare.sufficient`).

:func:`choose_method` picks ``messages`` whenever n·m is at most the per-trial message limit,
and always for the protocols without a sufficient-statistic sampler.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from cloaknet.experiments.compare.data import input_vector, trial_rng
from cloaknet.experiments.compare.lineup import build_protocol
from cloaknet.experiments.compare.rows import Method, TrialRow
from cloaknet.experiments.compare.sufficient import (
    FAST_PATH_PROTOCOLS,
    SufficientStatisticSampler,
)
from cloaknet.experiments.samplers import DIRECT_LIMIT
from cloaknet.protocols import BBGNProtocol, SummationProtocol
from cloaknet.randomness import RandomSource
from cloaknet.vectorized import shuffle

__all__ = [
    "Task",
    "choose_method",
    "run_task",
    "simulate_trial",
    "trial_cost",
]


def choose_method(protocol: SummationProtocol, users: int, limit: int) -> Method:
    """``messages`` if n·m <= ``limit`` or the protocol has no sufficient-statistic sampler,
    else ``sufficient-statistic``."""
    if protocol.name not in FAST_PATH_PROTOCOLS:
        return "messages"
    if users * protocol.messages_per_user <= limit:
        return "messages"
    return "sufficient-statistic"


class _Round:
    """One protocol instance on one input vector, by one method (the sufficient-statistic
    sampler's deterministic parts are computed once, for every round)."""

    def __init__(
        self,
        protocol: SummationProtocol,
        x: NDArray[np.float64],
        method: Method,
        direct_limit: int = DIRECT_LIMIT,
    ) -> None:
        self.protocol = protocol
        self.x = x
        self.sampler = (
            SufficientStatisticSampler(protocol, x, direct_limit)
            if method == "sufficient-statistic"
            else None
        )

    def estimate(self, rng: RandomSource) -> float:
        if self.sampler is not None:
            return self.sampler.estimate(rng)
        messages = self.protocol.encode_many(self.x, rng)
        mixed = shuffle(messages, rng)
        return self.protocol.analyze(mixed, int(self.x.shape[0]), rng=rng)


def simulate_trial(
    protocol: SummationProtocol,
    x: NDArray[np.float64],
    method: Method,
    rng: RandomSource,
    *,
    direct_limit: int = DIRECT_LIMIT,
) -> float:
    """The analyzer's estimate of Σ x (units of x) for one round of ``protocol`` on inputs
    ``x``, by ``method`` (module doc), every random choice from ``rng``; ``direct_limit`` is
    passed to the exact binomial sampler.

    :raises ParameterError: ``sufficient-statistic`` for a protocol without that path.
    """
    return _Round(protocol, x, method, direct_limit).estimate(rng)


@dataclass(frozen=True)
class Task:
    """Trials ``first`` … ``first + count − 1`` of one (row ``protocol``, n, ε) cell
    (picklable; the row is one of :data:`.lineup.ROWS`)."""

    protocol: str
    users: int
    epsilon: float
    delta: float
    seed: int | None
    first: int
    count: int
    method: Method


def run_task(task: Task) -> list[TrialRow]:
    """Simulate one chunk of trials (a picklable top-level worker); one row per trial, in
    trial order. The row's protocol is rebuilt by :func:`.lineup.build_protocol` (the same
    parameters as the cell's). Trial i draws from :func:`trial_rng` keyed by the row's name
    and i, so the rows do not depend on how the trials are chunked."""
    x = input_vector(task.users, task.seed)
    truth = math.fsum(x.tolist())
    protocol = build_protocol(task.protocol, task.users, task.epsilon, task.delta)
    simulator = _Round(protocol, x, task.method)
    rows = []
    for trial in range(task.first, task.first + task.count):
        rng = trial_rng(task.seed, task.protocol, task.users, task.epsilon, task.delta, trial)
        started = time.perf_counter()
        estimate = simulator.estimate(rng)
        rows.append(
            TrialRow(
                protocol=task.protocol,
                users=task.users,
                epsilon=task.epsilon,
                delta=task.delta,
                trial=trial,
                method=task.method,
                estimate=estimate,
                true_sum=truth,
                error=estimate - truth,
                seconds=time.perf_counter() - started,
            )
        )
    return rows


def trial_cost(protocol: SummationProtocol, users: int, method: Method) -> float:
    """Rough cost of one trial in bytes of randomness plus sorting (for load balancing
    only; > 0)."""
    if method == "messages":
        return users * protocol.messages_per_user * (protocol.bytes_per_message + 12.0)
    if isinstance(protocol, BBGNProtocol):
        return 21.0 * users + 8.0 * users * protocol.messages_per_user
    return 8.0 * users
