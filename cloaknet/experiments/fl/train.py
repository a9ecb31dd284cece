"""FedAvg with three aggregators of the clients' clipped updates: the exact sum
(non-private), the sum plus a trusted server's Gaussian noise (central DP-FedAvg), and
cloaknet's vector pipeline (clip, round, Skellam noise, split-and-mix, ideal shuffle, analyze;
or with ``--network`` a real chain of node processes).

The evaluated model of round t is the global model up to round ⌊T/2⌋ and from then on the
average of the global models since round ⌊T/2⌋ (tail averaging: post-processing of the
released sums, so it costs no privacy, and it damps the noise of the last rounds).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np
from numpy.typing import NDArray

from cloaknet.experiments.fl.data import Digits, split_clients
from cloaknet.experiments.fl.model import accuracy, client_deltas, initial_model
from cloaknet.experiments.fl.settings import FLSettings
from cloaknet.protocols.base import uniform_bits
from cloaknet.protocols.vector import VectorSumProtocol
from cloaknet.protocols.vector_round import run_vector_round
from cloaknet.protocols.vector_rounding import clip_vectors
from cloaknet.randomness import RandomSource

__all__ = ["METHODS", "Method", "Training", "gaussian_noise", "train"]

Method = Literal["nonprivate", "central_dp", "cloaknet"]
METHODS: Final[tuple[Method, ...]] = ("nonprivate", "central_dp", "cloaknet")
_TWO53: Final[float] = float(1 << 53)


def gaussian_noise(count: int, std: float, rng: RandomSource) -> NDArray[np.float64]:
    """``count`` independent N(0, std²) draws by Box–Muller from 53-bit uniforms of ``rng``
    (the CSPRNG by default: the trusted server's noise, never numpy's generator)."""
    bits = uniform_bits(2 * count, 53, rng).astype(np.float64)
    u1 = (bits[:count] + 1.0) / _TWO53  # (0, 1]
    u2 = bits[count:] / _TWO53
    z: NDArray[np.float64] = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
    return z * std


@dataclass
class Training:
    """One training: the evaluated model's test accuracy after every round and the seconds
    each round's aggregation took."""

    method: Method
    epsilon: float | None
    repeat: int
    accuracy: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    @property
    def final(self) -> float:
        """Accuracy after the last round."""
        return self.accuracy[-1]


def train(
    method: Method,
    settings: FLSettings,
    data: Digits,
    *,
    repeat: int,
    numpy_rng: np.random.Generator,
    rng: RandomSource,
    protocol: VectorSumProtocol | None = None,
    central_std: float = 0.0,
    epsilon: float | None = None,
    aggregator: Callable[[NDArray[np.float64]], NDArray[np.float64]] | None = None,
) -> Training:
    """Run FedAvg for ``settings.rounds`` rounds with the aggregator ``method``.

    ``numpy_rng`` splits the data and initialises the model (pass generators seeded alike to
    give every method the same split and start); ``rng`` draws the noise and shares;
    ``protocol`` (cloaknet) is the planned :class:`VectorSumProtocol`, run with
    ``noise="aggregate"`` (the estimate has exactly the law of a real round's);
    ``central_std`` the per-coordinate standard deviation of the central Gaussian noise on
    the sum. ``aggregator`` (cloaknet only) replaces the in-process pipeline: it gets the
    round's (n, d) updates and returns the estimated sum (``--network``:
    :class:`~cloaknet.experiments.fl.network.ChainAggregator`, a real chain with every
    user's own noise); ``seconds`` then times it.
    """
    clients = split_clients(data.y_train, settings.clients, numpy_rng, non_iid=settings.non_iid)
    w = initial_model(numpy_rng)
    n = settings.clients
    aggregate: Callable[[NDArray[np.float64]], NDArray[np.float64]]
    if method == "nonprivate":
        def aggregate(d: NDArray[np.float64]) -> NDArray[np.float64]:
            total: NDArray[np.float64] = clip_vectors(d, settings.clip).sum(axis=0)
            return total
    elif method == "central_dp":
        def aggregate(d: NDArray[np.float64]) -> NDArray[np.float64]:
            total = clip_vectors(d, settings.clip).sum(axis=0)
            noisy: NDArray[np.float64] = total + gaussian_noise(d.shape[1], central_std, rng)
            return noisy
    elif aggregator is not None:
        aggregate = aggregator
    else:
        if protocol is None:
            raise ValueError("cloaknet needs a planned protocol or an aggregator")
        planned = protocol

        def aggregate(d: NDArray[np.float64]) -> NDArray[np.float64]:
            return run_vector_round(planned, d, rng, noise="aggregate").estimate

    out = Training(method=method, epsilon=epsilon, repeat=repeat)
    tail_start = settings.rounds // 2
    average: NDArray[np.float64] | None = None
    for r in range(settings.rounds):
        deltas = client_deltas(
            w, data.x_train, data.y_train, clients,
            steps=settings.local_steps, learning_rate=settings.learning_rate,
        )
        t0 = time.perf_counter()
        total = aggregate(deltas)
        out.seconds.append(time.perf_counter() - t0)
        w = w + settings.server_learning_rate * total / n
        if r >= tail_start:
            count = r - tail_start + 1
            average = w.copy() if average is None else average + (w - average) / count
        evaluated = w if average is None else average
        out.accuracy.append(accuracy(evaluated, data.x_test, data.y_test))
    return out
