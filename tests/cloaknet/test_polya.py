"""The exact Pólya sampler behind the default (BBGN) path: its law, and that it uses no floats."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from types import FrameType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy import stats

from cloaknet.errors import ParameterError
from cloaknet.noise import noise_p
from cloaknet.plans import select_plan
from cloaknet.protocols import BBGNProtocol
from cloaknet.protocols.polya import (
    PolyaNoise,
    bernoulli_two_over_e,
    sample_poisson_half,
    sample_polya,
    sample_polya_differences,
    sample_polya_many,
)
from cloaknet.randomness import DeterministicRandom

# --------------------------------------------------------------------------- helpers


def chi_square_pvalue(samples: NDArray[np.int64], pmf: Callable[[int], float],
                      support: range) -> float:
    """Pearson's test of ``samples`` against ``pmf`` on the cells of ``support`` (each with
    an expected count >= 5) plus one cell for everything else."""
    count = samples.size
    cells = [z for z in support if pmf(z) * count >= 5]
    observed = [int(np.sum(samples == z)) for z in cells]
    expected = [pmf(z) * count for z in cells]
    observed.append(count - sum(observed))
    expected.append(count - sum(expected))
    assert expected[-1] > 0
    return float(stats.chisquare(observed, expected).pvalue)


def discrete_laplace(gamma: Fraction) -> Callable[[int], float]:
    """P[z] = (1−α)/(1+α)·α^|z| with α = exp(−γ)."""
    alpha = math.exp(-float(gamma))
    return lambda z: (1 - alpha) / (1 + alpha) * alpha ** abs(z)


# --------------------------------------------------------------------------- the law


def test_summed_noise_of_the_honest_users_is_discrete_laplace() -> None:
    honest, trials, gamma = 40, 4000, Fraction(2, 5)
    noise = sample_polya_differences(honest * trials, Fraction(1, honest), gamma,
                                     DeterministicRandom("polya-sum"))
    total = noise.reshape(trials, honest).sum(axis=1)
    assert chi_square_pvalue(total, discrete_laplace(gamma), range(-60, 61)) > 1e-3


def test_default_path_noise_is_exact_discrete_laplace() -> None:
    # what `cloaknet plan` (and so `cloaknet demo`) selects by default at n = 10^4
    chosen = select_plan(10_000, 1.0, 1e-6)
    assert (chosen.noise, chosen.bound, chosen.protocol_name) == ("polya", "bbgn", "bbgn")
    protocol = chosen.protocol()
    assert isinstance(protocol, BBGNProtocol)
    made = protocol.plan
    assert made.noise_gamma == Fraction(1, made.precision) and made.epsilon_exact == 1
    assert made.noise_shape == Fraction(1, 10_000)
    # its noise, summed over all 10^4 users, against the exact discrete Laplace: cells of
    # equal probability in |Z| (the scale is 1000, so single values are too rare to test)
    rng = DeterministicRandom("default-path")
    rounds = 300
    sums = np.array([int(protocol.noise_many(10_000, rng).sum()) for _ in range(rounds)])
    alpha = math.exp(-1 / made.precision)
    edges = [0]
    for quantile in (0.2, 0.4, 0.6, 0.8):  # P[|Z| >= z] = 2α^z/(1+α) for z >= 1
        edges.append(math.ceil(math.log((1 - quantile) * (1 + alpha) / 2) / math.log(alpha)))
    probability = [2 * alpha**z / (1 + alpha) if z else 1.0 for z in edges] + [0.0]
    magnitudes = np.abs(sums)
    observed = [int(np.sum((magnitudes >= lo) & (magnitudes < hi)))
                for lo, hi in zip(edges, [*edges[1:], math.inf], strict=True)]
    expected = [rounds * (probability[i] - probability[i + 1]) for i in range(len(edges))]
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # the same code path at a scale where every value can be tested
    small = BBGNProtocol(40, 1.0, 1e-6, precision=2)
    assert small.plan.noise_gamma == Fraction(1, 2)
    draws = small.noise_many(40 * 4000, DeterministicRandom("small-bbgn"))
    total = draws.reshape(4000, 40).sum(axis=1)
    assert chi_square_pvalue(total, discrete_laplace(Fraction(1, 2)), range(-40, 41)) > 1e-3


@pytest.mark.parametrize(
    ("shape", "gamma"),
    [
        (Fraction(3, 10), Fraction(1, 3)),  # two head blocks, then the tail
        (Fraction(1, 3), Fraction(2)),  # gamma >= 1: J0 = 0, every block in the tail
        (Fraction(1, 2), Fraction(1, 50)),  # six head blocks, shape split in parts
    ],
)
def test_marginal_is_negative_binomial(shape: Fraction, gamma: Fraction) -> None:
    count = 12_000
    draws = sample_polya_many(count, shape, gamma, DeterministicRandom(f"nb-{shape}-{gamma}"))
    assert draws.min() >= 0
    law = stats.nbinom(float(shape), -math.expm1(-float(gamma)))
    assert chi_square_pvalue(draws, lambda z: float(law.pmf(z)), range(0, 2000)) > 1e-3


def test_coins_of_the_construction() -> None:
    rng = DeterministicRandom("coins")
    poisson = np.array([sample_poisson_half(rng) for _ in range(20_000)])
    law = stats.poisson(0.5)
    assert chi_square_pvalue(poisson, lambda z: float(law.pmf(z)), range(0, 20)) > 1e-3
    hits = sum(bernoulli_two_over_e(rng) for _ in range(20_000))
    assert stats.binomtest(hits, 20_000, 2 / math.e).pvalue > 1e-3
    assert sample_polya(Fraction(1, 3), 1, rng) >= 0


# --------------------------------------------------------------------------- no floats


class IntegerOnlyRandom:
    """A RandomSource that serves integers only, refuses anything but int arguments and
    records every request (so a test can replay and inspect a draw)."""

    def __init__(self, seed: str) -> None:
        self._inner = DeterministicRandom(seed)
        self.calls: list[tuple[str, int]] = []

    def token_bytes(self, nbytes: int) -> bytes:
        assert type(nbytes) is int
        self.calls.append(("token_bytes", nbytes))
        return self._inner.token_bytes(nbytes)

    def randbelow(self, upper: int) -> int:
        assert type(upper) is int
        self.calls.append(("randbelow", upper))
        return self._inner.randbelow(upper)


_WATCHED = ("cloaknet/protocols/polya.py", "cloaknet/noise.py", "cloaknet/randomness.py",
            "cloaknet/vectorized.py")


def _floating(value: object) -> bool:
    if isinstance(value, float | complex | np.floating | np.complexfloating):
        return True
    return isinstance(value, np.ndarray) and value.dtype.kind in "fc"


@contextmanager
def float_watch() -> Iterator[list[str]]:
    """Record every local variable holding a float (or float array) in the watched
    modules, at every line they execute."""
    found: list[str] = []

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if not frame.f_code.co_filename.endswith(_WATCHED):
            return None
        for name, value in frame.f_locals.items():
            if _floating(value):
                found.append(f"{frame.f_code.co_name}:{frame.f_lineno}:{name}={value!r}")
        if event == "return" and _floating(arg):
            found.append(f"{frame.f_code.co_name} returned {arg!r}")
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield found
    finally:
        sys.settrace(previous)


def test_sampler_draws_no_floats() -> None:
    # the watch itself catches float arithmetic in a watched module
    with float_watch() as found:
        noise_p(Fraction(3, 2))
    assert found
    rng = IntegerOnlyRandom("no-floats")
    noise = PolyaNoise(Fraction(1, 3), Fraction(1, 40))  # head blocks, tail blocks, parts
    with float_watch() as found:
        draws = noise.differences(300, rng)
        single = noise.sample(rng)
    assert found == []
    assert draws.dtype == np.int64 and type(single) is int
    assert {kind for kind, _ in rng.calls} == {"token_bytes", "randbelow"}
    # a recorded draw replays exactly from the same integer stream
    again = IntegerOnlyRandom("no-floats")
    assert noise.differences(300, again).tolist() == draws.tolist()
    assert noise.sample(again) == single and again.calls == rng.calls


# --------------------------------------------------------------------------- parameters


@settings(max_examples=60, deadline=None)
@given(
    shape=st.fractions(min_value=Fraction(1, 10**6), max_value=5).filter(lambda x: x > 0),
    gamma=st.fractions(min_value=Fraction(1, 10**9), max_value=50).filter(lambda x: x > 0),
    seed=st.integers(0, 2**32),
)
def test_construction_invariants(shape: Fraction, gamma: Fraction, seed: int) -> None:
    noise = PolyaNoise(shape, gamma)
    j0 = noise.blocks
    assert gamma * 2**j0 >= 1 and (j0 == 0 or gamma * 2 ** (j0 - 1) < 1)  # J0 is minimal
    assert 0 < noise.theta <= Fraction(1, 2)
    assert noise.theta * noise.pieces == shape * (j0 + 2)
    for extra in range(12):  # every acceptance exponent γ·l − t is >= 0 (smallest l)
        assert gamma * 2 ** (j0 + extra) - extra >= 0
    value = noise.sample(DeterministicRandom(seed))
    assert type(value) is int and value >= 0


@pytest.mark.parametrize(
    ("shape", "gamma"),
    [(0.5, Fraction(1)), (Fraction(1), 0.5), (0, 1), (1, 0), (Fraction(-1), 1), (True, 1)],
)
def test_rejects_inexact_or_non_positive_parameters(shape: Any, gamma: Any) -> None:
    with pytest.raises(ParameterError):
        PolyaNoise(shape, gamma)
    with pytest.raises(ParameterError):
        sample_polya_many(3, shape, gamma)


def test_rejects_bad_counts() -> None:
    for count in (-1, 1.5, True):
        with pytest.raises(ParameterError):
            sample_polya_many(count, Fraction(1, 2), 1)  # type: ignore[arg-type]
    assert sample_polya_many(0, Fraction(1, 2), 1).shape == (0,)
