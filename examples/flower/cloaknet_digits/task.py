"""The model and data of the example, shared by its ClientApp and ServerApp.

Multinomial logistic regression on scikit-learn's bundled handwritten digits (no download):
a ``weights`` array (64 × 10) and a ``bias`` array (10), d = 650 parameters — the model of
``cloaknet experiment fl``. The data split is public and deterministic (``data-seed``): 20% of
the images are held out for the server's evaluation, the rest dealt IID to the partitions.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from flwr.app import Array, ArrayRecord
from numpy.typing import NDArray

from cloaknet.experiments.fl.data import Digits, load_digits_split, split_clients
from cloaknet.experiments.fl.model import CLASSES, DIMENSION, FEATURES, accuracy, local_update

__all__ = [
    "DIMENSION",
    "evaluate",
    "initial_record",
    "partition",
    "to_record",
    "to_vector",
    "train",
]


@cache
def digits(seed: int) -> Digits:
    """The train/test split of the digits for ``seed``."""
    return load_digits_split(np.random.default_rng([seed, 0]))


def partition(seed: int, index: int, count: int) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Client ``index`` of ``count``: its training examples (x, y)."""
    data = digits(seed)
    parts = split_clients(data.y_train, count, np.random.default_rng([seed, 1]))
    part = parts[index]
    return data.x_train[part], data.y_train[part]


def to_record(w: NDArray[np.float64]) -> ArrayRecord:
    """The flat model (650) as an ArrayRecord: ``weights`` (64 × 10), ``bias`` (10)."""
    matrix = np.asarray(w, dtype=np.float64).reshape(FEATURES + 1, CLASSES)
    return ArrayRecord({
        "weights": Array(np.ascontiguousarray(matrix[:FEATURES])),
        "bias": Array(np.ascontiguousarray(matrix[FEATURES])),
    })


def to_vector(record: ArrayRecord) -> NDArray[np.float64]:
    """Inverse of :func:`to_record`."""
    weights = np.asarray(record["weights"].numpy(), dtype=np.float64)
    bias = np.asarray(record["bias"].numpy(), dtype=np.float64)
    flat: NDArray[np.float64] = np.vstack([weights, bias[None, :]]).reshape(-1)
    return flat


def initial_record(seed: int) -> ArrayRecord:
    """Small Gaussian initial weights (numpy generator seeded with ``seed``)."""
    return to_record(np.random.default_rng([seed, 2]).normal(0.0, 0.01, DIMENSION))


def train(w: NDArray[np.float64], x: NDArray[np.float64], y: NDArray[np.int64], *,
          steps: int, learning_rate: float) -> NDArray[np.float64]:
    """The local model after ``steps`` full-batch gradient steps from ``w``."""
    updated: NDArray[np.float64] = w + local_update(w, x, y, steps=steps,
                                                    learning_rate=learning_rate)
    return updated


def evaluate(w: NDArray[np.float64], seed: int) -> float:
    """Accuracy of ``w`` on the held-out images."""
    data = digits(seed)
    return accuracy(w, data.x_test, data.y_test)
