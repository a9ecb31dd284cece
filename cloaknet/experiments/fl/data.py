"""The data of ``cloaknet experiment fl``: scikit-learn's bundled handwritten digits
(1,797 8×8 images, 10 classes; shipped with the package, no download), a held-out test set and
the split of the training set across clients (IID, or non-IID by label shards)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import ParameterError

__all__ = ["Digits", "load_digits_split", "split_clients"]


@dataclass(frozen=True)
class Digits:
    """Features scaled to [0, 1] (pixel / 16), labels 0..9; train and held-out test sets."""

    x_train: NDArray[np.float64]
    y_train: NDArray[np.int64]
    x_test: NDArray[np.float64]
    y_test: NDArray[np.int64]


def load_digits_split(rng: np.random.Generator, test_fraction: float = 0.2) -> Digits:
    """The digits, shuffled by ``rng`` and split into train and a held-out ``test_fraction``.

    :raises ParameterError: ``test_fraction`` not in (0, 1).
    """
    if not 0.0 < test_fraction < 1.0:
        raise ParameterError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]

    bunch = load_digits()
    x = np.asarray(bunch.data, dtype=np.float64) / 16.0
    y = np.asarray(bunch.target, dtype=np.int64)
    order = rng.permutation(x.shape[0])
    cut = round(x.shape[0] * test_fraction)
    test, train = order[:cut], order[cut:]
    return Digits(x[train], y[train], x[test], y[test])


def split_clients(
    labels: NDArray[np.int64], clients: int, rng: np.random.Generator, *, non_iid: bool = False
) -> list[NDArray[np.int64]]:
    """Indices of each client's examples.

    IID: a random permutation dealt into ``clients`` near-equal parts. Non-IID (McMahan et al.,
    AISTATS 2017): the examples sorted by label are cut into 2·``clients`` shards and every
    client gets two random shards, so most clients see only one or two digits.

    :raises ParameterError: fewer than 1 client or more clients than examples (2 per client
        for non-IID).
    """
    n = int(labels.shape[0])
    shards = 2 * clients if non_iid else clients
    if clients < 1 or shards > n:
        raise ParameterError(
            f"{clients} clients need at least {shards} training examples, there are {n}"
        )
    if not non_iid:
        return [np.sort(part) for part in np.array_split(rng.permutation(n), clients)]
    by_label = np.argsort(labels, kind="stable")
    pieces = np.array_split(by_label, shards)
    assignment = rng.permutation(shards)
    return [
        np.sort(np.concatenate([pieces[assignment[2 * c]], pieces[assignment[2 * c + 1]]]))
        for c in range(clients)
    ]
