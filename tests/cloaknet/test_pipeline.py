"""The in-process pipeline: encode → shuffle → analyze with an ideal shuffler."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from cloaknet.errors import InputRangeError
from cloaknet.pipeline import run_pipeline
from cloaknet.planner import plan
from cloaknet.randomness import DeterministicRandom


@pytest.mark.parametrize("users", [1, 17, 2000])
def test_sum_preserving_pipeline_is_exact(users: int) -> None:
    params = plan(max(users, 2), 1.0, 1e-6, mode="sum-preserving").params
    values = np.random.default_rng(users).random(users)
    out = run_pipeline(values, params, DeterministicRandom(users))
    assert out.result.estimate_exact == out.rounded_sum
    expected = Fraction(sum(int(Fraction(float(v)) * params.precision) for v in values),
                        params.precision)
    assert out.rounded_sum == expected
    assert 0 <= out.true_sum - out.estimate <= users / params.precision + 1e-9
    assert out.noisy_users == 0


def test_single_user_pipeline_error_is_plausible() -> None:
    chosen = plan(2000, 1.0, 1e-6)
    values = np.random.default_rng(0).random(2000)
    errors = []
    for trial in range(20):
        out = run_pipeline(values, chosen.params, DeterministicRandom(trial))
        errors.append(out.error)
    rmse = float(np.sqrt(np.mean(np.square(errors))))
    # the planner's prediction is an upper estimate (Lemma 8 bound, no clamping credit)
    assert rmse < 3 * chosen.expected_rmse
    assert any(e != errors[0] for e in errors)  # noise really varies


def test_pipeline_rejects_bad_values() -> None:
    params = plan(10, 1.0, 1e-6, mode="sum-preserving").params
    with pytest.raises(InputRangeError):
        run_pipeline([0.5, float("nan")], params)


def test_progress_is_reported() -> None:
    params = plan(10, 1.0, 1e-6, mode="sum-preserving").params
    seen: list[str] = []
    run_pipeline([0.1] * 10, params, progress=lambda stage, done, total: seen.append(stage))
    assert {"encode", "shuffle", "analyze"} <= set(seen)
