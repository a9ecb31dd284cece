"""The colluding analyzer of Lemmas 3, 10, 12 and 13, checked against brute force."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from fractions import Fraction
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cloaknet.adversary import (
    BEHAVIOURS,
    Behaviour,
    Mode,
    Posterior,
    Trial,
    ViewStats,
    analyze_trial,
    colluder_messages,
    is_gamma_smooth,
    posterior_single_user,
    posterior_sum_preserving,
    realized_gamma,
    remove_messages,
    simulate_trial,
    subset_sum_counts,
    view_stats,
)
from cloaknet.errors import ParameterError
from cloaknet.noise import noise_p, truncated_laplace_pmf
from cloaknet.randomness import DeterministicRandom

# --------------------------------------------------------------------------------------------
# subset_sum_counts
# --------------------------------------------------------------------------------------------


def brute_counts(shares: list[int], m: int, modulus: int) -> list[int]:
    counts = [0] * modulus
    for subset in itertools.combinations(range(len(shares)), m):
        counts[sum(shares[i] for i in subset) % modulus] += 1
    return counts


def counts_by_multiplicity(shares: list[int], m: int, modulus: int) -> list[int]:
    """Independent reference: choose j_v copies of each distinct value v, weight Π C(mult, j)."""
    multiplicity = sorted(Counter(shares).items())
    counts = [0] * modulus
    ranges = [range(mult + 1) for _, mult in multiplicity]
    for picks in itertools.product(*ranges):
        if sum(picks) != m:
            continue
        residue = sum(v * j for (v, _), j in zip(multiplicity, picks, strict=True)) % modulus
        counts[residue] += math.prod(
            math.comb(mult, j) for (_, mult), j in zip(multiplicity, picks, strict=True)
        )
    return counts


@settings(max_examples=150, deadline=None)
@given(data=st.data(), modulus=st.integers(2, 40), n=st.integers(2, 10))
def test_subset_sum_counts_matches_brute_force(data: st.DataObject, modulus: int, n: int) -> None:
    # a small value range forces repeated shares often
    top = data.draw(st.integers(0, modulus - 1))
    shares = data.draw(st.lists(st.integers(0, top), min_size=n, max_size=n))
    m = data.draw(st.integers(1, n))
    counts = subset_sum_counts(shares, m, modulus)
    assert counts.dtype == np.int64
    assert counts.shape == (modulus,)
    assert counts.tolist() == brute_counts(shares, m, modulus)
    assert int(counts.sum()) == math.comb(n, m)
    # a numpy array input gives the same answer
    assert subset_sum_counts(np.array(shares), m, modulus).tolist() == counts.tolist()


def test_subset_sum_counts_object_dtype_is_exact() -> None:
    shares = [1] * 20 + [2] * 20 + [4] * 15 + [6] * 15  # 70 shares
    counts = subset_sum_counts(shares, 35, 7)
    assert math.comb(70, 35) >= 2**62
    assert counts.dtype == object
    assert all(type(c) is int for c in counts.tolist())
    assert sum(counts.tolist()) == math.comb(70, 35)
    assert counts.tolist() == counts_by_multiplicity(shares, 35, 7)


def test_subset_sum_counts_large_intermediates_small_result() -> None:
    # C(66, 64) is small but the middle rows of the DP (C(66, 33) > 2**62) are not
    shares = [3] * 30 + [5] * 36
    counts = subset_sum_counts(shares, 64, 11)
    assert counts.dtype == np.int64
    assert counts.tolist() == counts_by_multiplicity(shares, 64, 11)


def test_subset_sum_counts_is_fast_at_protocol_size() -> None:
    rng = DeterministicRandom("fast")
    shares = [rng.randbelow(10**5) for _ in range(40)]
    counts = subset_sum_counts(shares, 20, 10**5)
    assert int(counts.sum()) == math.comb(40, 20)


@pytest.mark.parametrize(
    ("shares", "m", "modulus"),
    [
        ([1, 2], 0, 5),
        ([1, 2], 3, 5),
        ([1, 2], 1, 1),
        ([1, 5], 1, 5),
        ([1, -1], 1, 5),
        ([1, True], 1, 5),
        ([1, 2.0], 1, 5),
    ],
)
def test_subset_sum_counts_rejects_bad_arguments(
    shares: list[object], m: int, modulus: int
) -> None:
    with pytest.raises(ParameterError):
        subset_sum_counts(shares, m, modulus)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Realised γ (Definition 2)
# --------------------------------------------------------------------------------------------


def gamma_by_definition(shares: list[int], m: int, modulus: int) -> Fraction:
    counts = brute_counts(shares, m, modulus)
    size = math.comb(2 * m, m)
    return max(abs(Fraction(c * modulus, size) - 1) for c in counts)


def test_realized_gamma_of_a_smooth_view() -> None:
    rng = DeterministicRandom("smooth")
    m, modulus = 7, 101
    shares: list[int] = []
    while len(shares) < 2 * m:
        value = rng.randbelow(modulus)
        if value not in shares:
            shares.append(value)
    stats = view_stats(shares, m, modulus)
    assert stats.distinct
    assert stats.gamma == pytest.approx(float(gamma_by_definition(shares, m, modulus)), rel=1e-15)
    assert stats.gamma < 1
    assert is_gamma_smooth(stats, 1.0)


def test_realized_gamma_of_crafted_views() -> None:
    # all shares equal: every subset sums to 0, γ = N − 1, not distinct
    stats = view_stats([0] * 8, 4, 13)
    assert stats == ViewStats(gamma=12.0, distinct=False)
    assert not is_gamma_smooth(stats, 100.0)
    # distinct but concentrated: subset sums of 0..7 cover only a few residues mod 1009
    shares = list(range(8))
    stats = view_stats(shares, 4, 1009)
    assert stats.distinct
    assert stats.gamma == pytest.approx(float(gamma_by_definition(shares, 4, 1009)))
    assert stats.gamma > 1
    assert not is_gamma_smooth(stats, 0.5)
    # perfectly uniform: {0, 1} with m = 1 and N = 2
    stats = view_stats([0, 1], 1, 2)
    assert stats == ViewStats(gamma=0.0, distinct=True)
    assert is_gamma_smooth(stats, 0.0)


def test_gamma_smoothness_threshold() -> None:
    shares = [0, 1, 3, 7, 12, 20]
    stats = view_stats(shares, 3, 23)
    assert stats.distinct
    assert is_gamma_smooth(stats, stats.gamma)
    assert not is_gamma_smooth(stats, stats.gamma * 0.999)


def test_realized_gamma_validates_counts() -> None:
    with pytest.raises(ParameterError):
        realized_gamma(np.array([1, 1, 1]), 1, 2)  # wrong shape
    with pytest.raises(ParameterError):
        realized_gamma(np.array([3, 0]), 1, 2)  # sums to 3, not C(2, 1)
    with pytest.raises(ParameterError):
        view_stats([1, 2, 3], 1, 5)  # not 2m shares


# --------------------------------------------------------------------------------------------
# Posteriors against enumeration of every encoding
# --------------------------------------------------------------------------------------------

View = tuple[int, ...]


@cache
def encoding_table(modulus: int, m: int) -> dict[View, np.ndarray]:
    """For every multiset E, the matrix c[v1, v2] = number of (y, y') ∈ Z_N^{2(m−1)} whose
    encodings of v1 and v2 give E; P[E | v1, v2] = c[v1, v2] / N^{2(m−1)}."""
    table: dict[View, np.ndarray] = {}
    for v1, v2 in itertools.product(range(modulus), repeat=2):
        for free in itertools.product(range(modulus), repeat=2 * (m - 1)):
            first = list(free[: m - 1])
            second = list(free[m - 1 :])
            first.append((v1 - sum(first)) % modulus)
            second.append((v2 - sum(second)) % modulus)
            view = tuple(sorted(first + second))
            if view not in table:
                table[view] = np.zeros((modulus, modulus), dtype=np.int64)
            table[view][v1, v2] += 1
    return table


def assert_matches(posterior: Posterior, likelihood: list[float], support: list[int]) -> None:
    assert posterior.support.tolist() == support
    total = sum(likelihood)
    for probability, expected in zip(posterior.probabilities, likelihood, strict=True):
        assert probability == pytest.approx(expected / total, abs=1e-12)
    positive = [i for i, value in enumerate(likelihood) if value > 0]
    for i, value in enumerate(likelihood):
        if value == 0:
            assert posterior.log_likelihood[i] == -math.inf
    base = positive[0]
    for i in positive:
        expected_log_ratio = math.log(likelihood[i] / likelihood[base])
        actual = posterior.log_likelihood[i] - posterior.log_likelihood[base]
        assert actual == pytest.approx(expected_log_ratio, rel=1e-9, abs=1e-9)
    loss = math.inf if len(positive) < len(likelihood) else 0.0
    if len(positive) == len(likelihood):
        logs = [math.log(v) for v in likelihood]
        loss = max(logs) - min(logs)
    assert posterior.privacy_loss() == pytest.approx(loss, abs=1e-9)


@pytest.mark.parametrize(("modulus", "m"), [(5, 2), (5, 3), (7, 2), (7, 3)])
def test_sum_preserving_posterior_matches_enumeration(modulus: int, m: int) -> None:
    k = 2
    table = encoding_table(modulus, m)
    checked = 0
    for view, c in table.items():
        for total in range(2 * k + 1):
            support = [x1 for x1 in range(k + 1) if 0 <= total - x1 <= k]
            likelihood = [int(c[x1, total - x1]) for x1 in support]  # exact integers
            if sum(likelihood) == 0:
                continue
            posterior = posterior_sum_preserving(list(view), m, modulus, k, total)
            exact = [Fraction(v, sum(likelihood)) for v in likelihood]
            assert_matches(posterior, [float(v) for v in exact], support)
            checked += 1
    assert checked > 20


@pytest.mark.parametrize(("modulus", "m"), [(5, 2), (5, 3), (7, 2), (7, 3)])
@pytest.mark.parametrize(("b1", "b2"), [(True, True), (True, False), (False, True), (False, False)])
def test_single_user_posterior_matches_enumeration(
    modulus: int, m: int, b1: bool, b2: bool
) -> None:
    k, p = 2, 0.3
    half = (modulus - 1) // 2

    def kernel(noisy: bool, shift: int) -> np.ndarray:
        """row[v] = P[encoded value v | x̄ = shift]."""
        row = np.zeros(modulus)
        if not noisy:
            row[shift % modulus] = 1.0
            return row
        for w in range(-half, half + 1):
            row[(shift + w) % modulus] += truncated_laplace_pmf(w, modulus, p)
        return row

    def posterior(view: View, x2: int) -> Posterior:
        return posterior_single_user(
            list(view),
            m,
            modulus,
            k,
            other_input=x2,
            noise_p=p,
            target_noisy=b1,
            other_noisy=b2,
        )

    table = encoding_table(modulus, m)
    raised = 0
    for x2 in range(k + 1):
        f2 = kernel(b2, x2)
        for view, c in table.items():
            likelihood = [float(kernel(b1, x1) @ c @ f2) for x1 in range(k + 1)]
            if sum(likelihood) == 0:
                with pytest.raises(ParameterError):
                    posterior(view, x2)
                raised += 1
                continue
            assert_matches(posterior(view, x2), likelihood, list(range(k + 1)))
    if b1 and b2:  # both noisy: every view has positive likelihood
        assert raised == 0


def test_sum_preserving_posterior_rejects_inconsistent_views() -> None:
    with pytest.raises(ParameterError, match="view inconsistent with total"):
        posterior_sum_preserving([1, 2, 3, 4], 2, 11, 5, 9)
    with pytest.raises(ParameterError):
        posterior_sum_preserving([1, 2, 3, 4], 2, 11, 5, 11)  # total > 2k
    with pytest.raises(ParameterError):
        posterior_sum_preserving([1, 2, 3], 2, 11, 5, 6)  # not 2m shares


def test_custom_prior_reweights_the_posterior() -> None:
    shares, m, modulus, k, total = [1, 5, 9, 2, 7, 3], 3, 13, 6, 27 % 13
    uniform = posterior_sum_preserving(shares, m, modulus, k, total)
    prior = np.arange(1, k + 2, dtype=np.float64)
    weighted = posterior_sum_preserving(shares, m, modulus, k, total, prior)
    expected = uniform.probabilities * prior[uniform.support]
    np.testing.assert_allclose(weighted.probabilities, expected / expected.sum(), rtol=1e-12)
    np.testing.assert_array_equal(weighted.log_likelihood, uniform.log_likelihood)
    with pytest.raises(ParameterError):
        posterior_sum_preserving(shares, m, modulus, k, total, np.zeros(k + 1))
    with pytest.raises(ParameterError):
        posterior_sum_preserving(shares, m, modulus, k, total, np.ones(k))


def test_posterior_helpers() -> None:
    posterior = Posterior(
        support=np.array([2, 3, 4], dtype=np.int64),
        log_likelihood=np.array([0.0, 1.5, -math.inf]),
        probabilities=np.array([0.2, 0.8, 0.0]),
    )
    assert posterior.map_guess == 3
    assert posterior.privacy_loss() == math.inf
    assert posterior.loss_between(3, 2) == 1.5
    assert posterior.loss_between(3, 4) == math.inf
    assert posterior.loss_between(4, 2) == -math.inf
    with pytest.raises(ParameterError):
        posterior.loss_between(5, 2)
    tie = Posterior(
        support=np.array([0, 1], dtype=np.int64),
        log_likelihood=np.array([0.0, 0.0]),
        probabilities=np.array([0.5, 0.5]),
    )
    assert tie.map_guess == 0
    assert tie.privacy_loss() == 0.0


# --------------------------------------------------------------------------------------------
# Colluders, removal and the simulator
# --------------------------------------------------------------------------------------------

MODULUS, K = 101, 10
MODES: tuple[Mode, ...] = ("sum-preserving", "single-user")


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    behaviour=st.sampled_from(BEHAVIOURS),
    colluders=st.integers(0, 5),
    m=st.integers(1, 5),
    mode=st.sampled_from(MODES),
)
def test_removing_colluders_leaves_exactly_the_honest_shares(
    seed: int, behaviour: Behaviour, colluders: int, m: int, mode: Mode
) -> None:
    noisy = mode == "single-user"
    trial = simulate_trial(
        m=m,
        modulus=MODULUS,
        precision=K,
        colluders=colluders,
        behaviour=behaviour,
        mode=mode,
        rng=DeterministicRandom(seed),
        noise_scale=Fraction(3) if noisy else None,
        q=Fraction(1, 2) if noisy else None,
    )
    assert len(trial.view) == (2 + colluders) * m
    assert len(trial.honest_shares) == 2 * m
    assert len(trial.colluder_messages) == colluders
    assert all(len(message) == m for message in trial.colluder_messages)
    residual = remove_messages(trial.view, trial.colluder_messages)
    assert Counter(residual) == Counter(trial.honest_shares)
    expected_sum = trial.target_input + trial.other_input + trial.target_noise + trial.other_noise
    assert sum(residual) % MODULUS == expected_sum % MODULUS
    target_value = trial.target_input + trial.target_noise
    assert sum(trial.honest_shares[:m]) % MODULUS == target_value % MODULUS
    if not noisy:
        assert not trial.target_noisy and not trial.other_noisy
        assert trial.target_noise == trial.other_noise == 0
    analysis = analyze_trial(
        trial,
        m=m,
        modulus=MODULUS,
        precision=K,
        mode=mode,
        noise_p=noise_p(3) if noisy else None,
    )
    assert 0.0 <= analysis.posterior_target <= 1.0
    assert analysis.posterior_target > 0.0  # the truth is never ruled out
    assert analysis.neighbour_loss <= analysis.privacy_loss


def test_colluder_behaviours() -> None:
    rng = DeterministicRandom("behaviours")
    inputs = [3, 7, 9]
    honest = colluder_messages("honest", inputs, 4, MODULUS, rng)
    assert [sum(msg) % MODULUS for msg in honest] == inputs
    assert colluder_messages("zeros", inputs, 4, MODULUS, rng) == [[0] * 4] * 3
    reuse = colluder_messages("reuse", inputs, 4, MODULUS, rng)
    assert reuse[0] == reuse[1] == reuse[2]
    assert sum(reuse[0]) % MODULUS == 3
    assert colluder_messages("reuse", [], 4, MODULUS, rng) == []
    hint = [5, 17, 42]
    collide = colluder_messages("collide", inputs, 4, MODULUS, rng, honest_shares_hint=hint)
    assert all(y in hint for msg in collide for y in msg)
    uniform = colluder_messages("collide", inputs, 4, MODULUS, rng)
    assert all(0 <= y < MODULUS for msg in uniform for y in msg)
    with pytest.raises(ParameterError):
        colluder_messages("lie", inputs, 4, MODULUS, rng)  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        colluder_messages("collide", inputs, 4, MODULUS, rng, honest_shares_hint=[])


def test_remove_messages_is_a_multiset_difference() -> None:
    view = [4, 1, 4, 2, 4, 3]
    assert remove_messages(view, [[4, 4], [3]]) == [1, 2, 4]
    assert remove_messages(view, []) == view
    with pytest.raises(ParameterError):
        remove_messages(view, [[4, 4], [4, 4]])  # only three 4s in the view
    with pytest.raises(ParameterError):
        remove_messages(view, [[9]])


def test_one_message_per_user_lets_the_adversary_win() -> None:
    # m = 1: the shares are the inputs themselves, so only the two observed values remain
    trial = simulate_trial(
        m=1,
        modulus=MODULUS,
        precision=K,
        colluders=3,
        behaviour="honest",
        mode="sum-preserving",
        rng=DeterministicRandom("m=1"),
        target_input=3,
        other_input=5,
    )
    residual = remove_messages(trial.view, trial.colluder_messages)
    assert sorted(residual) == [3, 5]
    posterior = posterior_sum_preserving(residual, 1, MODULUS, K, 8)
    assert posterior.support.tolist() == list(range(9))
    possible = posterior.support[posterior.probabilities > 0].tolist()
    assert possible == [3, 5]
    np.testing.assert_allclose(posterior.probabilities[[3, 5]], [0.5, 0.5])
    assert posterior.privacy_loss() == math.inf
    analysis = analyze_trial(trial, m=1, modulus=MODULUS, precision=K, mode="sum-preserving")
    assert analysis.privacy_loss == math.inf
    assert analysis.neighbour_loss == math.inf  # 0 is the farthest feasible value from 3
    assert analysis.posterior_target == pytest.approx(0.5)
    assert analysis.prior_success == pytest.approx(1 / 9)
    assert analysis.guess_correct  # tie between 3 and 5: the smaller wins


def test_simulate_trial_is_reproducible() -> None:
    def run(seed: str) -> Trial:
        return simulate_trial(
            m=4,
            modulus=MODULUS,
            precision=K,
            colluders=2,
            behaviour="collide",
            mode="single-user",
            rng=DeterministicRandom(seed),
            noise_scale=Fraction(5, 2),
            q=Fraction(1),
        )

    assert run("a") == run("a")
    assert run("a") != run("b")
    trial = run("a")
    assert trial.target_noisy and trial.other_noisy  # q = 1
    assert abs(trial.target_noise) <= (MODULUS - 1) // 2


def test_simulate_trial_validates_mode_parameters() -> None:
    def attempt(
        modulus: int = MODULUS,
        mode: str = "sum-preserving",
        noise_scale: Fraction | None = None,
        q: Fraction | None = None,
        target_input: int | None = None,
    ) -> Trial:
        return simulate_trial(
            m=2,
            modulus=modulus,
            precision=K,
            colluders=0,
            behaviour="honest",
            mode=mode,  # type: ignore[arg-type]
            rng=DeterministicRandom(0),
            noise_scale=noise_scale,
            q=q,
            target_input=target_input,
        )

    attempt()
    attempt(mode="single-user", noise_scale=Fraction(1), q=Fraction(0))
    with pytest.raises(ParameterError):
        attempt(mode="single-user")  # no noise parameters
    with pytest.raises(ParameterError):
        attempt(q=Fraction(1))  # noise parameters in sum-preserving mode
    with pytest.raises(ParameterError):
        attempt(modulus=100, mode="single-user", noise_scale=Fraction(1), q=Fraction(1))
    with pytest.raises(ParameterError):
        attempt(mode="single-user", noise_scale=Fraction(1), q=Fraction(3, 2))
    with pytest.raises(ParameterError):
        attempt(target_input=K + 1)
    with pytest.raises(ParameterError):
        attempt(mode="neither")


def test_analyze_trial_rejects_a_tampered_trial() -> None:
    trial = simulate_trial(
        m=3,
        modulus=MODULUS,
        precision=K,
        colluders=1,
        behaviour="honest",
        mode="sum-preserving",
        rng=DeterministicRandom("tamper"),
    )
    shifted = [(trial.honest_shares[0] + 1) % MODULUS, *trial.honest_shares[1:]]
    bad = dataclasses.replace(trial, honest_shares=shifted)
    with pytest.raises(ParameterError):
        analyze_trial(bad, m=3, modulus=MODULUS, precision=K, mode="sum-preserving")
    with pytest.raises(ParameterError):
        analyze_trial(trial, m=3, modulus=MODULUS, precision=K, mode="single-user")  # no p


def test_analysis_of_a_protocol_sized_round() -> None:
    # m = 8, N = 10007, k = 10: the honest residual is almost surely distinct and smooth-ish
    modulus, m, k = 10007, 8, 10
    trial = simulate_trial(
        m=m,
        modulus=modulus,
        precision=k,
        colluders=4,
        behaviour="reuse",
        mode="single-user",
        rng=DeterministicRandom("round"),
        noise_scale=Fraction(10),
        q=Fraction(1),
    )
    analysis = analyze_trial(
        trial, m=m, modulus=modulus, precision=k, mode="single-user", noise_p=noise_p(10)
    )
    assert analysis.distinct
    # Lemma 10 (both users noisy): loss <= ln((1+γ)/(1−γ)) + k ln(1/p) whenever γ < 1
    if analysis.gamma < 1:
        bound = math.log((1 + analysis.gamma) / (1 - analysis.gamma)) + k / 10
        assert analysis.privacy_loss <= bound + 1e-9
    assert analysis.prior_success == pytest.approx(1 / (k + 1))
