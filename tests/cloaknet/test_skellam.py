"""The exact Poisson and Skellam samplers: their laws (chi-square against scipy), the
distributed sum, and that no float appears on the sampling path."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from types import FrameType
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

import cloaknet.skellam as skellam_module
from cloaknet.errors import ParameterError
from cloaknet.randomness import DeterministicRandom
from cloaknet.skellam import (
    MULTINOMIAL_MAX_MEAN,
    SMALL_MEAN,
    PoissonSampler,
    SkellamNoise,
    distributed_skellam,
    sample_poisson,
    sample_skellam,
)

# --------------------------------------------------------------------------- helpers


def chi_square_pvalue(
    samples: NDArray[np.int64], pmf: Callable[[int], float], support: range
) -> float:
    """Pearson's test of ``samples`` against ``pmf`` on the cells of ``support`` with an
    expected count >= 5, plus one cell for everything else."""
    count = samples.size
    cells = [z for z in support if pmf(z) * count >= 5]
    observed = [int(np.sum(samples == z)) for z in cells]
    expected = [pmf(z) * count for z in cells]
    observed.append(count - sum(observed))
    expected.append(max(count - sum(expected), 1e-12))
    return float(stats.chisquare(observed, expected).pvalue)


def poisson_pmf(mean: Fraction) -> Callable[[int], float]:
    law = stats.poisson(float(mean))
    return lambda k: float(law.pmf(k))


def skellam_pmf(variance: Fraction) -> Callable[[int], float]:
    half = float(variance) / 2
    law = stats.skellam(half, half)
    return lambda k: float(law.pmf(k))


def around(mean: float, spread: float) -> range:
    return range(int(mean - 8 * spread) - 2, int(mean + 8 * spread) + 3)


# --------------------------------------------------------------------------- Poisson


@pytest.mark.parametrize(
    "mean", [Fraction(3, 7), Fraction(5, 2), Fraction(SMALL_MEAN), Fraction(61, 3), 4321]
)
def test_poisson_matches_the_poisson_pmf(mean: Fraction | int) -> None:
    sampler = PoissonSampler(Fraction(mean))
    rng = DeterministicRandom(f"poisson-{mean}")
    draws = np.array([sampler.sample(rng) for _ in range(6000)], dtype=np.int64)
    m = float(mean)
    assert chi_square_pvalue(draws, poisson_pmf(Fraction(mean)), around(m, m**0.5)) > 1e-3


@pytest.mark.parametrize("mean", [Fraction(1), Fraction(7, 2), Fraction(SMALL_MEAN + 1)])
def test_both_poisson_samplers_agree_with_the_pmf_at_the_boundary(mean: Fraction) -> None:
    # the rejection sampler also works below SMALL_MEAN, the parts sampler above it
    sampler = PoissonSampler(mean)
    rng = DeterministicRandom(f"boundary-{mean}")
    by_rejection = np.array([sampler.sample_by_rejection(rng) for _ in range(6000)])
    by_parts = np.array([sampler.sample_by_parts(rng) for _ in range(6000)])
    support = around(float(mean), float(mean) ** 0.5)
    assert chi_square_pvalue(by_rejection, poisson_pmf(mean), support) > 1e-3
    assert chi_square_pvalue(by_parts, poisson_pmf(mean), support) > 1e-3


def test_poisson_chi_square_detects_a_wrong_mean() -> None:
    # the test has power: draws of Poisson(20) are rejected as Poisson(21)
    rng = DeterministicRandom("power")
    sampler = PoissonSampler(Fraction(20))
    draws = np.array([sampler.sample(rng) for _ in range(6000)])
    assert chi_square_pvalue(draws, poisson_pmf(Fraction(21)), around(20, 5)) < 1e-6


def test_a_huge_mean_is_drawn_quickly_and_lands_near_the_mean() -> None:
    mean = Fraction(10**9, 7)
    sampler = PoissonSampler(mean)
    rng = DeterministicRandom("huge")
    draws = [sampler.sample(rng) for _ in range(40)]
    sd = float(mean) ** 0.5
    assert all(abs(x - float(mean)) < 7 * sd for x in draws)
    assert abs(float(np.mean(draws)) - float(mean)) < 7 * sd / 40**0.5


# --------------------------------------------------------------------------- Skellam


@pytest.mark.parametrize(
    "variance",
    [
        Fraction(1, 3),  # splitting, tiny means
        Fraction(90),  # splitting
        Fraction(2 * MULTINOMIAL_MAX_MEAN + 2),  # one draw at a time (rejection sampler)
    ],
)
def test_skellam_sample_many_matches_scipy(variance: Fraction) -> None:
    noise = SkellamNoise(variance)
    draws = noise.sample_many(8000, DeterministicRandom(f"skellam-{variance}"))
    assert draws.dtype == np.int64
    support = around(0.0, float(variance) ** 0.5)
    assert chi_square_pvalue(draws, skellam_pmf(variance), support) > 1e-3


def test_skellam_scalar_sampler_matches_scipy() -> None:
    noise = SkellamNoise(Fraction(37, 2))
    rng = DeterministicRandom("scalar")
    draws = np.array([noise.sample(rng) for _ in range(6000)], dtype=np.int64)
    assert chi_square_pvalue(draws, skellam_pmf(Fraction(37, 2)), around(0, 5)) > 1e-3


def test_distributed_noise_of_the_honest_users_sums_to_skellam_mu() -> None:
    # 40 users each add Skellam(μ/40); the column sums are exactly Skellam(μ)
    mu = Fraction(250)
    per_user = distributed_skellam(mu, 40)
    assert per_user.variance == Fraction(250, 40)
    noise = per_user.sample_vectors(40, 3000, DeterministicRandom("distributed"))
    assert noise.shape == (40, 3000)
    totals = noise.sum(axis=0)
    assert chi_square_pvalue(totals, skellam_pmf(mu), around(0, 16)) > 1e-3
    # the variance is μ (not, e.g., 300: a difference the sample's variance resolves)
    se = 250 * (2 / (totals.size - 1)) ** 0.5
    assert abs(float(totals.var()) - 250) < 4 * se < abs(float(totals.var()) - 300)


def test_zero_variance_is_the_noiseless_configuration() -> None:
    noise = SkellamNoise(Fraction(0))
    assert noise.sample(DeterministicRandom(1)) == 0
    assert not noise.sample_vectors(3, 4, DeterministicRandom(1)).any()
    assert sample_poisson(0) == 0 and sample_skellam(0) == 0


def test_draws_replay_from_the_same_stream() -> None:
    noise = SkellamNoise(Fraction(700, 3))
    first = noise.sample_many(500, DeterministicRandom("replay"))
    again = noise.sample_many(500, DeterministicRandom("replay"))
    assert first.tolist() == again.tolist()


@pytest.mark.parametrize(
    ("numerator", "denominator"),
    [(1, 3), ((1 << 70) + 1, 3 << 70), ((1 << 200) - 12345, (1 << 201) + 7)],
)
def test_exact_coins_have_the_right_frequency(numerator: int, denominator: int) -> None:
    rng = DeterministicRandom(f"coin-{denominator}")
    hits = sum(skellam_module._coin(numerator, denominator, rng) for _ in range(20000))
    p = numerator / denominator
    assert stats.binomtest(hits, 20000, p).pvalue > 1e-3


# --------------------------------------------------------------------------- no floats


class IntegerOnlyRandom:
    """A RandomSource that serves integers only and refuses anything but int arguments."""

    def __init__(self, seed: str) -> None:
        self._inner = DeterministicRandom(seed)
        self.calls = 0

    def token_bytes(self, nbytes: int) -> bytes:
        assert type(nbytes) is int
        self.calls += 1
        return self._inner.token_bytes(nbytes)

    def randbelow(self, upper: int) -> int:
        assert type(upper) is int
        self.calls += 1
        return self._inner.randbelow(upper)


_WATCHED = ("cloaknet/skellam.py", "cloaknet/randomness.py", "cloaknet/vectorized.py")


def _floating(value: object) -> bool:
    if isinstance(value, float | complex | np.floating | np.complexfloating):
        return True
    return isinstance(value, np.ndarray) and value.dtype.kind in "fc"


@contextmanager
def float_watch() -> Iterator[list[str]]:
    """Record every local variable holding a float (or float array) in the watched modules,
    at every line they execute."""
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


def test_the_watch_catches_floats_in_the_watched_module() -> None:
    with float_watch() as found, pytest.raises(TypeError):
        skellam_module._falling(3.0, 2)  # type: ignore[arg-type]
    assert found  # a float local in a watched frame is seen ...
    with float_watch() as found:
        skellam_module._falling(3, 2)
        skellam_module._check_count(np.int64(3))
    assert found == []  # ... and integer work leaves no trace


def test_sampling_uses_no_floats() -> None:
    rng = IntegerOnlyRandom("no-floats")
    with float_watch() as found:
        large = PoissonSampler(Fraction(10**6, 3))  # constants of the rejection sampler
        values = [large.sample(rng) for _ in range(20)]
        values.append(PoissonSampler(Fraction(7, 3)).sample(rng))
        small = SkellamNoise(Fraction(5, 2)).sample_many(200, rng)  # splitting
        big = SkellamNoise(Fraction(4 * MULTINOMIAL_MAX_MEAN)).sample_many(20, rng)  # per draw
        single = SkellamNoise(Fraction(41, 3)).sample(rng)
    assert found == []
    assert all(type(v) is int for v in values) and type(single) is int
    assert small.dtype == np.int64 and big.dtype == np.int64
    assert rng.calls > 0


# --------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("bad", [0.5, -1, Fraction(-1, 2), True, "3"])
def test_inexact_or_negative_parameters_are_refused(bad: Any) -> None:
    with pytest.raises(ParameterError):
        PoissonSampler(bad)
    with pytest.raises(ParameterError):
        SkellamNoise(bad)


def test_bad_counts_and_users_are_refused() -> None:
    with pytest.raises(ParameterError):
        SkellamNoise(Fraction(1)).sample_many(-1)
    with pytest.raises(ParameterError):
        distributed_skellam(10, 0)
    with pytest.raises(ParameterError):
        PoissonSampler(Fraction(1, 2)).sample_by_rejection(DeterministicRandom(0))


def test_rejection_constants_bound_the_acceptance() -> None:
    # the two base coins are at most 1 and one of them is exactly 1 (the global peak)
    for mean in (Fraction(9), Fraction(1000, 3), Fraction(123456)):
        sampler = PoissonSampler(mean)
        plus, minus = sampler._plus_base, sampler._minus_base
        assert plus[0] <= plus[1] and minus[0] <= minus[1]
        assert plus[0] == plus[1] or minus[0] == minus[1]
        assert sampler.scale * sampler.scale > sampler.mode
