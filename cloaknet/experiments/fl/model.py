"""Multinomial logistic regression in numpy: 64 features + bias, 10 classes, so the model is a
65 × 10 matrix, flattened to d = 650 parameters (the vector every client sends)."""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "CLASSES",
    "DIMENSION",
    "FEATURES",
    "accuracy",
    "client_deltas",
    "initial_model",
    "local_update",
]

FEATURES: Final[int] = 64
CLASSES: Final[int] = 10
#: (64 + 1) · 10 parameters.
DIMENSION: Final[int] = (FEATURES + 1) * CLASSES


def _with_bias(x: NDArray[np.float64]) -> NDArray[np.float64]:
    out: NDArray[np.float64] = np.hstack([x, np.ones((x.shape[0], 1))])
    return out


def initial_model(rng: np.random.Generator, scale: float = 0.01) -> NDArray[np.float64]:
    """A flat model of d = 650 small Gaussian weights (numpy ``rng``: model init only)."""
    w: NDArray[np.float64] = rng.normal(0.0, scale, DIMENSION)
    return w


def _probabilities(w: NDArray[np.float64], xb: NDArray[np.float64]) -> NDArray[np.float64]:
    logits = xb @ w.reshape(FEATURES + 1, CLASSES)
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    p: NDArray[np.float64] = e / e.sum(axis=1, keepdims=True)
    return p


def local_update(
    w: NDArray[np.float64],
    x: NDArray[np.float64],
    y: NDArray[np.int64],
    *,
    steps: int,
    learning_rate: float,
) -> NDArray[np.float64]:
    """The model delta after ``steps`` full-batch gradient steps on the cross-entropy of the
    client's examples (x, y), starting from the global model ``w``."""
    xb = _with_bias(x)
    onehot = np.eye(CLASSES)[y]
    local = w.copy()
    for _ in range(steps):
        grad = xb.T @ (_probabilities(local, xb) - onehot) / max(1, x.shape[0])
        local -= learning_rate * grad.reshape(-1)
    delta: NDArray[np.float64] = local - w
    return delta


def client_deltas(
    w: NDArray[np.float64],
    x: NDArray[np.float64],
    y: NDArray[np.int64],
    clients: list[NDArray[np.int64]],
    *,
    steps: int,
    learning_rate: float,
) -> NDArray[np.float64]:
    """An (n, d) array: every client's :func:`local_update` from ``w`` on its own examples."""
    return np.stack(
        [
            local_update(w, x[idx], y[idx], steps=steps, learning_rate=learning_rate)
            for idx in clients
        ]
    )


def accuracy(w: NDArray[np.float64], x: NDArray[np.float64], y: NDArray[np.int64]) -> float:
    """Fraction of (x, y) the model ``w`` classifies correctly."""
    pred = np.argmax(_with_bias(x) @ w.reshape(FEATURES + 1, CLASSES), axis=1)
    return float(np.mean(pred == y))
