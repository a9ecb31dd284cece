"""Argument types and the option groups several ``cloaknet`` commands share.

Each ``type=`` function raises :class:`argparse.ArgumentTypeError` with a one-line reason,
which argparse turns into exit code 2.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from cloaknet.params import MODES

__all__ = [
    "add_experiment_args",
    "add_privacy_args",
    "float_list",
    "int_list",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "probability",
]


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def probability(text: str) -> float:
    """A number in (0, 1)."""
    value = positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def int_list(text: str) -> tuple[int, ...]:
    """Comma-separated positive integers (at least one)."""
    values = tuple(positive_int(part.strip()) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError("expected comma-separated positive integers")
    return values


def float_list(text: str) -> tuple[float, ...]:
    """Comma-separated finite numbers > 0 (at least one)."""
    values = tuple(positive_float(part.strip()) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError("expected comma-separated positive numbers")
    return values


def add_privacy_args(p: argparse.ArgumentParser, *, users_default: int | None) -> None:
    """--users/-n, --epsilon/-e, --delta/-d, --precision/-k and --mode; with
    ``users_default`` None the first three are required, else they have defaults
    (``users_default``, 1, 1e-6)."""
    if users_default is None:
        p.add_argument(
            "--users",
            "-n",
            type=positive_int,
            required=True,
            help="number of users n the guarantee is planned for",
        )
    else:
        p.add_argument(
            "--users",
            "-n",
            type=positive_int,
            default=users_default,
            help=f"number of users (default {users_default})",
        )
    p.add_argument(
        "--epsilon",
        "-e",
        type=positive_float,
        required=users_default is None,
        default=None if users_default is None else 1.0,
        help="target epsilon > 0" + ("" if users_default is None else " (default 1)"),
    )
    p.add_argument(
        "--delta",
        "-d",
        type=probability,
        required=users_default is None,
        default=None if users_default is None else 1e-6,
        help="target delta in (0, 1)" + ("" if users_default is None else " (default 1e-6)"),
    )
    p.add_argument(
        "--precision",
        "-k",
        type=positive_int,
        default=None,
        help="precision k: inputs are rounded down to multiples of 1/k "
        "(default 10·n, as in the paper's theorems)",
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default="single-user",
        help="neighbouring datasets: one user's input changes (single-user, adds "
        "pre-randomizer noise) or the rounded sum is kept (sum-preserving, "
        "no noise); default single-user",
    )


def add_experiment_args(p: argparse.ArgumentParser, *, quick: str, trials: str) -> None:
    """The options every experiment takes: --out, --quick, --trials, --jobs, --seed."""
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--trials", type=positive_int, default=None, help=trials)
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        help="worker processes (default: the number of CPUs)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="replayable simulation randomness (default: the OS CSPRNG)",
    )
