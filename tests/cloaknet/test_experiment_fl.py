"""``cloaknet experiment fl`` on a tiny configuration: the JSON fields, a non-private accuracy
well above chance, and both private accuracies computed under the same (ε, δ) plan."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from cloaknet.errors import ParameterError
from cloaknet.experiments.fl import FLSettings, run_fl_experiment
from cloaknet.experiments.fl.model import DIMENSION
from cloaknet.experiments.fl.train import gaussian_noise
from cloaknet.fl_accounting import gaussian_epsilon_dp_accounting, plan_fl
from cloaknet.randomness import DeterministicRandom

FIELDS = (
    "clients", "dimension", "rounds", "epsilon", "delta", "accuracy", "accuracy_central_dp",
    "accuracy_nonprivate", "bytes_per_client_per_round", "seconds_per_round",
)


def test_tiny_run(tmp_path: Path) -> None:
    settings = FLSettings(
        clients=20, rounds=4, epsilon=3.0, epsilons=(3.0,), delta=1e-5, repeats=1, seed=7,
        per_user_timing=False,
    )
    result = run_fl_experiment(tmp_path, settings)
    for key in FIELDS:
        assert key in result
    assert result["clients"] == 20 and result["rounds"] == 4
    assert result["dimension"] == DIMENSION == 650
    assert result["epsilon"] == 3.0 and result["delta"] == 1e-5
    for key in ("accuracy", "accuracy_central_dp", "accuracy_nonprivate"):
        assert 0.0 <= result[key] <= 1.0
    assert result["accuracy_nonprivate"] > 0.5  # chance is 0.1
    assert result["seconds_per_round"] > 0.0
    json.dumps(result)  # JSON-ready

    # the same plan behind both private accuracies
    plan = plan_fl(DIMENSION, settings.clip, settings.rounds, 3.0, 1e-5, settings.clients)
    assert result["bytes_per_client_per_round"] == plan.bytes_per_user
    assert result["plan"]["epsilon"] == 3.0 and result["plan"]["delta"] == 1e-5
    assert result["plan"]["rounds"] == settings.rounds
    assert result["plan"]["epsilon_achieved"] <= 3.0
    assert result["plan"]["delta_achieved"] <= 1e-5
    assert result["cloaknet_noise_std"] == pytest.approx(plan.predicted_rmse)
    assert result["central_dp_noise_std"] == pytest.approx(plan.central_gaussian_rmse)
    # central: σ = z·2C, z from the same (ε, δ, T)
    assert result["central_dp_noise_std"] == pytest.approx(
        2 * settings.clip * result["central_dp_noise_multiplier"]
    )
    eps_central = gaussian_epsilon_dp_accounting(
        result["central_dp_noise_multiplier"], settings.rounds, 1e-5
    )
    assert eps_central <= 3.0 and eps_central == pytest.approx(3.0, rel=1e-3)

    for name in ("report.md", "accuracy_vs_round.png", "accuracy_vs_epsilon.png",
                 "rounds.csv", "summary.csv"):
        assert (tmp_path / name).stat().st_size > 0
    assert "Judgement" in (tmp_path / "report.md").read_text()


def test_gaussian_noise_moments() -> None:
    draws = gaussian_noise(20_000, 2.0, DeterministicRandom("fl-gauss"))
    assert abs(float(np.mean(draws))) < 0.1
    assert float(np.std(draws)) == pytest.approx(2.0, rel=0.05)
    assert all(math.isfinite(v) for v in draws.tolist())


def test_network_presets() -> None:
    quick = FLSettings.default(quick=True, network=True)
    assert quick.network and quick.mixes == 3
    assert (quick.clients, quick.rounds, quick.repeats) == (10, 1, 1)
    assert quick.epsilons == (3.0,) and not quick.per_user_timing
    full = FLSettings.default(network=True, epsilon=2.0, mixes=2)
    assert (full.clients, full.rounds, full.repeats, full.mixes) == (300, 10, 1, 2)
    assert full.epsilons == (2.0,)
    swept = FLSettings.default(network=True, epsilons=(1.0, 3.0), repeats=2)
    assert swept.epsilons == (1.0, 3.0) and swept.repeats == 2
    in_process = FLSettings.default(quick=True)
    assert not in_process.network and in_process.epsilons == (1.0, 3.0)
    with pytest.raises(ParameterError, match="mixes"):
        FLSettings(mixes=0)


def test_cli_takes_network_options() -> None:
    from cloaknet.cli import build_parser

    args = build_parser().parse_args(
        ["experiment", "fl", "--out", "x", "--network", "--mixes", "2", "--quick"]
    )
    assert args.network and args.mixes == 2 and args.quick
