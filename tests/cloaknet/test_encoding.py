"""Algorithms 1 and 2, one user at a time."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from cloaknet.encoding import (
    analyze,
    analyze_sum,
    check_input,
    decode_share,
    encode,
    encode_share,
    quantize,
    split,
)
from cloaknet.errors import InputRangeError, ParameterError, ShareCountError, ShareError
from cloaknet.params import CloakParams, NoiseParams
from cloaknet.randomness import DeterministicRandom

USERS = 50
K = 10 * USERS
PARAMS = CloakParams(modulus=3 * USERS * K + 1, precision=K, messages=6, max_users=USERS)

unit = st.floats(0.0, 1.0, allow_nan=False)


@settings(max_examples=60)
@given(xs=st.lists(unit, min_size=1, max_size=USERS), seed=st.integers(0, 2**32))
def test_sum_preserving_estimate_is_the_rounded_sum_exactly(xs: list[float], seed: int) -> None:
    rng = DeterministicRandom(seed)
    shares = [y for x in xs for y in encode(x, PARAMS, rng)]
    rng_order = DeterministicRandom(seed + 1)
    shuffled = sorted(shares, key=lambda _: rng_order.randbelow(2**64))
    result = analyze(shuffled, len(xs), PARAMS)
    expected = sum(Fraction(math.floor(Fraction(x) * K)) for x in xs) / K
    assert result.estimate_exact == expected
    assert result.clamped is None


@given(value=st.integers(-(10**30), 10**30), m=st.integers(1, 12),
       modulus=st.integers(2, 2**90), seed=st.integers(0, 2**16))
def test_split_sums_to_value(value: int, m: int, modulus: int, seed: int) -> None:
    shares = split(value, m, modulus, DeterministicRandom(seed))
    assert len(shares) == m
    assert all(0 <= y < modulus for y in shares)
    assert sum(shares) % modulus == value % modulus


@pytest.mark.parametrize("dropped", [0, 2, 3])
def test_any_m_minus_one_shares_are_jointly_uniform(dropped: int) -> None:
    """Algorithm 1 with m = 4, N = 7: the 3 shares left after dropping any one are uniform
    over Z_7^3 (343 cells), whichever share is dropped (incl. the computed last share)."""
    modulus, m, trials = 7, 4, 40_000
    rng = DeterministicRandom(f"uniform-{dropped}")
    counts: Counter[tuple[int, ...]] = Counter()
    for _ in range(trials):
        shares = split(5, m, modulus, rng)
        counts[tuple(y for i, y in enumerate(shares) if i != dropped)] += 1
    cells = list(itertools.product(range(modulus), repeat=m - 1))
    observed = [counts[c] for c in cells]
    assert chisquare(observed).pvalue > 1e-4


def test_all_m_shares_are_not_uniform() -> None:
    """Sanity check that the chi-square above can fail: all m shares sum to the value."""
    rng = DeterministicRandom("not-uniform")
    for _ in range(200):
        assert sum(split(5, 4, 7, rng)) % 7 == 5


def test_analyzer_clamps_per_algorithm_2() -> None:
    n, k, m = 4, 10, 4
    params = CloakParams(modulus=3 * n * k + 1, precision=k, messages=m, max_users=n)
    nk = n * k

    def crafted(total: int) -> list[int]:
        shares = [0] * (n * m)
        shares[0] = total
        return shares

    assert analyze(crafted(0), n, params).estimate_exact == 0
    assert analyze(crafted(nk), n, params).estimate_exact == n
    assert analyze(crafted(nk), n, params).clamped is None
    assert analyze(crafted(nk + 1), n, params).estimate_exact == n
    assert analyze(crafted(nk + 1), n, params).clamped == "high"
    assert analyze(crafted(2 * nk), n, params).estimate_exact == n
    assert analyze(crafted(2 * nk + 1), n, params).estimate_exact == 0
    assert analyze(crafted(2 * nk + 1), n, params).clamped == "low"
    assert analyze(crafted(3 * nk), n, params).clamped == "low"
    assert analyze(crafted(17), n, params).estimate_exact == Fraction(17, k)


def test_analyzer_uses_the_rounds_actual_user_count() -> None:
    params = CloakParams(modulus=3 * 100 * 10 + 1, precision=10, messages=4, max_users=100)
    # z̄ = 35 with n = 3: nk = 30 < 35 <= 60 → clamp to n = 3 (with n = 100 it would be 3.5)
    assert analyze_sum(35, 3, params).estimate_exact == 3
    assert analyze_sum(35, 100, params).estimate_exact == Fraction(7, 2)
    with pytest.raises(ParameterError, match="at most 100"):
        analyze_sum(35, 101, params)


def test_analyzer_rejects_bad_shares_and_counts() -> None:
    with pytest.raises(ShareError):
        analyze([PARAMS.modulus] + [0] * (PARAMS.messages - 1), 1, PARAMS)
    with pytest.raises(ShareError):
        analyze([-1] + [0] * (PARAMS.messages - 1), 1, PARAMS)
    with pytest.raises(ShareError):
        analyze([True] + [0] * (PARAMS.messages - 1), 1, PARAMS)
    with pytest.raises(ShareCountError, match="expected"):
        analyze([0] * (PARAMS.messages + 1), 1, PARAMS)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -0.001, 1.0000001, 2.0])
def test_bad_inputs_are_rejected(bad: float) -> None:
    with pytest.raises(InputRangeError):
        encode(bad, PARAMS)


def test_clipping_only_when_asked() -> None:
    assert quantize(1.5, 100, clip=True) == 100
    assert quantize(-3.0, 100, clip=True) == 0
    assert quantize(math.inf, 100, clip=True) == 100
    with pytest.raises(InputRangeError, match="NaN"):
        quantize(math.nan, 100, clip=True)
    with pytest.raises(InputRangeError):
        quantize("0.5", 100)  # type: ignore[arg-type]


def test_quantize_is_exact() -> None:
    assert quantize(0.29, 100) == 28  # the double nearest 0.29 is just below it
    assert quantize(0.5, 10) == 5
    assert quantize(1.0, 7) == 7
    assert quantize(Fraction(2, 3), 3) == 2  # type: ignore[arg-type] # exact input


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"modulus": 3 * USERS * K + 2}, "odd"),
        ({"modulus": 3 * USERS * K - 1}, "exceed"),
        ({"messages": 3}, "m must be >= 4"),
        ({"precision": 0}, "precision"),
        ({"mode": "single-user"}, "noise"),
    ],
)
def test_params_validation(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {
        "modulus": 3 * USERS * K + 1, "precision": K, "messages": 6, "max_users": USERS,
    }
    args.update(kwargs)
    with pytest.raises(ParameterError, match=match):
        CloakParams(**args)  # type: ignore[arg-type]


def test_single_user_encoding_carries_noise_in_the_support() -> None:
    noise = NoiseParams(scale=Fraction(5), q=Fraction(1))
    params = CloakParams(PARAMS.modulus, K, 6, USERS, "single-user", noise)
    rng = DeterministicRandom("noise")
    half = (params.modulus - 1) // 2
    noisy = 0
    for _ in range(300):
        total = sum(encode(0.5, params, rng)) % params.modulus
        w = (total - 250 + half) % params.modulus - half  # centred representative
        assert -half <= w <= half
        noisy += w != 0
    assert noisy > 200  # q = 1 and scale 5: P[w = 0] ≈ 0.1


def test_share_bytes_round_trip_and_checks() -> None:
    modulus = 2**89 + 1
    for value in (0, 1, modulus - 1):
        data = encode_share(value, modulus)
        assert len(data) == 12
        assert decode_share(data, modulus) == value
    with pytest.raises(ShareError):
        decode_share(b"\x00" * 11, modulus)
    with pytest.raises(ShareError):
        decode_share(b"\xff" * 12, modulus)
    with pytest.raises(ShareError):
        encode_share(modulus, modulus)


def test_check_input_validates_and_clips() -> None:
    assert check_input(0.25) == 0.25
    assert check_input(Fraction(1, 3)) == Fraction(1, 3)  # type: ignore[arg-type]
    assert check_input(1) == 1
    assert check_input(1.5, clip=True) == 1 and check_input(-3, clip=True) == 0
    assert check_input(float("-inf"), clip=True) == 0
    for bad in (1.5, -0.0001, float("inf"), float("nan"), True, "0.5"):
        with pytest.raises(InputRangeError):
            check_input(bad)  # type: ignore[arg-type]
    with pytest.raises(InputRangeError, match="NaN"):
        check_input(float("nan"), clip=True)
