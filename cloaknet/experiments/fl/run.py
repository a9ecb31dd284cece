"""Running ``cloaknet experiment fl``: train, then write the CSV files, plots and report."""

from __future__ import annotations

import secrets
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from cloaknet.experiments.fl.data import load_digits_split
from cloaknet.experiments.fl.model import DIMENSION, client_deltas, initial_model
from cloaknet.experiments.fl.network import ChainAggregator, network_chain
from cloaknet.experiments.fl.report import plot_accuracy, report
from cloaknet.experiments.fl.settings import FLSettings
from cloaknet.experiments.fl.train import Training, train
from cloaknet.experiments.output import write_csv, write_json
from cloaknet.fl_accounting import FLPlan, gaussian_epsilon_dp_accounting, plan_fl
from cloaknet.protocols.vector import VectorSumProtocol
from cloaknet.protocols.vector_round import run_vector_round
from cloaknet.randomness import SYSTEM_RANDOM, DeterministicRandom, RandomSource

__all__ = ["ROUND_COLUMNS", "SUMMARY_COLUMNS", "run_fl_experiment"]

ROUND_COLUMNS = ("method", "epsilon", "repeat", "round", "accuracy", "seconds")
SUMMARY_COLUMNS = (
    "epsilon", "delta", "rounds", "clients", "accuracy", "accuracy_std",
    "accuracy_central_dp", "accuracy_central_dp_std", "accuracy_nonprivate",
    "cloaknet_noise_std", "central_dp_noise_std", "epsilon_achieved", "delta_achieved",
    "central_dp_epsilon", "messages_per_coordinate", "bytes_per_client_per_round",
)


def _mean(values: list[float]) -> float:
    return float(statistics.fmean(values))


def _std(values: list[float]) -> float:
    return float(statistics.stdev(values)) if len(values) > 1 else 0.0


def _plan(settings: FLSettings, epsilon: float) -> FLPlan:
    return plan_fl(DIMENSION, settings.clip, settings.rounds, epsilon, settings.delta,
                   settings.clients)


def run_fl_experiment(out: Path, settings: FLSettings) -> dict[str, Any]:
    """Train ``settings.repeats`` times per ε with each aggregator and write ``rounds.csv``
    (every round's accuracy), ``summary.csv`` (one row per ε), ``accuracy_vs_round.png``,
    ``accuracy_vs_epsilon.png``, ``settings.json`` and ``report.md`` into ``out``.

    Returns the JSON object of ``--json``: the headline ε's ``clients``, ``dimension``,
    ``rounds``, ``epsilon``, ``delta``, ``accuracy`` (cloaknet), ``accuracy_central_dp``,
    ``accuracy_nonprivate`` (means over the repeats of the final accuracy),
    ``bytes_per_client_per_round``, ``seconds_per_round``, and the plan behind both private
    accuracies (``plan``, ``central_dp_noise_std``, ``central_dp_epsilon``, ...).

    With ``settings.network`` every cloaknet round runs through a real local chain (one per
    ε, started and stopped here; the same plan, so the same accounting), and the object also
    has ``network_round_seconds`` (the headline ε's rounds, wall time: first submission to
    the analyzer's result) and ``client_cpu_seconds_per_client_per_round`` (this process's
    CPU for encoding and wrapping, over the clients); ``seconds_per_round`` is their mean.
    """
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    pipeline_rng: RandomSource = (
        SYSTEM_RANDOM if settings.seed is None else DeterministicRandom(f"fl-{settings.seed}")
    )
    entropy = [
        secrets.randbits(64) if settings.seed is None else settings.seed * 1000 + r
        for r in range(settings.repeats)
    ]
    plans = {eps: _plan(settings, eps) for eps in settings.epsilons}
    protocols = {eps: VectorSumProtocol(p.params(), plan=p) for eps, p in plans.items()}
    trainings: list[Training] = []
    datasets = [load_digits_split(np.random.default_rng([seed, 0])) for seed in entropy]

    def numpy_rng(seed: int) -> np.random.Generator:
        return np.random.default_rng([seed, 1])

    for r, (seed, data) in enumerate(zip(entropy, datasets, strict=True)):
        trainings.append(train("nonprivate", settings, data, repeat=r,
                               numpy_rng=numpy_rng(seed), rng=pipeline_rng))
        for eps, made in plans.items():
            trainings.append(train(
                "central_dp", settings, data, repeat=r, numpy_rng=numpy_rng(seed),
                rng=pipeline_rng, central_std=made.central_gaussian_rmse, epsilon=eps,
            ))
            if not settings.network:
                trainings.append(train(
                    "cloaknet", settings, data, repeat=r, numpy_rng=numpy_rng(seed),
                    rng=pipeline_rng, protocol=protocols[eps], epsilon=eps,
                ))
    network_rounds: dict[float, ChainAggregator] = {}
    if settings.network:
        for eps, made in plans.items():  # one chain of node processes per ε
            with network_chain(made, mixes=settings.mixes) as chain, ChainAggregator(
                chain.chain_path, settings.clients
            ) as aggregator:
                for r, (seed, data) in enumerate(zip(entropy, datasets, strict=True)):
                    trainings.append(train(
                        "cloaknet", settings, data, repeat=r, numpy_rng=numpy_rng(seed),
                        rng=pipeline_rng, epsilon=eps, aggregator=aggregator,
                    ))
            network_rounds[eps] = aggregator

    nonprivate = [t.final for t in trainings if t.method == "nonprivate"]
    summary: list[dict[str, Any]] = []
    for eps, made in plans.items():
        ours = [t.final for t in trainings if t.method == "cloaknet" and t.epsilon == eps]
        central = [t.final for t in trainings if t.method == "central_dp" and t.epsilon == eps]
        summary.append({
            "epsilon": eps, "delta": settings.delta, "rounds": settings.rounds,
            "clients": settings.clients, "accuracy": _mean(ours), "accuracy_std": _std(ours),
            "accuracy_central_dp": _mean(central), "accuracy_central_dp_std": _std(central),
            "accuracy_nonprivate": _mean(nonprivate),
            "cloaknet_noise_std": made.predicted_rmse,
            "central_dp_noise_std": made.central_gaussian_rmse,
            "epsilon_achieved": made.epsilon_achieved,
            "delta_achieved": made.delta_achieved,
            "central_dp_epsilon": gaussian_epsilon_dp_accounting(
                made.central_gaussian_noise_multiplier, settings.rounds, settings.delta),
            "messages_per_coordinate": made.messages,
            "bytes_per_client_per_round": made.bytes_per_user,
        })

    headline = plans[settings.epsilon]
    sim_seconds = [s for t in trainings if t.method == "cloaknet"
                   and t.epsilon == settings.epsilon for s in t.seconds]
    real_seconds = None
    if settings.per_user_timing:
        probe = load_digits_split(np.random.default_rng([entropy[0], 0]))
        from cloaknet.experiments.fl.data import split_clients

        gen = np.random.default_rng([entropy[0], 1])
        clients = split_clients(probe.y_train, settings.clients, gen, non_iid=settings.non_iid)
        deltas = client_deltas(initial_model(gen), probe.x_train, probe.y_train, clients,
                               steps=settings.local_steps, learning_rate=settings.learning_rate)
        t0 = time.perf_counter()
        run_vector_round(protocols[settings.epsilon], deltas, pipeline_rng, noise="per-user")
        real_seconds = time.perf_counter() - t0
    row = next(s for s in summary if s["epsilon"] == settings.epsilon)
    result: dict[str, Any] = {
        "clients": settings.clients,
        "dimension": DIMENSION,
        "rounds": settings.rounds,
        "epsilon": settings.epsilon,
        "delta": settings.delta,
        "accuracy": row["accuracy"],
        "accuracy_central_dp": row["accuracy_central_dp"],
        "accuracy_nonprivate": row["accuracy_nonprivate"],
        "bytes_per_client_per_round": headline.bytes_per_user,
        "seconds_per_round": real_seconds if real_seconds is not None else _mean(sim_seconds),
        "seconds_per_round_simulated": None if settings.network else _mean(sim_seconds),
        "network": settings.network,
        "mixes": settings.mixes if settings.network else 0,
        "repeats": settings.repeats,
        "accuracy_std": row["accuracy_std"],
        "accuracy_central_dp_std": row["accuracy_central_dp_std"],
        "central_dp_noise_std": headline.central_gaussian_rmse,
        "central_dp_noise_multiplier": headline.central_gaussian_noise_multiplier,
        "central_dp_epsilon": row["central_dp_epsilon"],
        "cloaknet_noise_std": headline.predicted_rmse,
        "plan": headline.to_json(),
    }
    result["plan"]["noise_variance_per_user"] = str(result["plan"]["noise_variance_per_user"])
    if settings.network:
        timed = network_rounds[settings.epsilon]
        result["network_round_seconds"] = timed.round_seconds
        result["client_cpu_seconds_per_client_per_round"] = _mean(
            timed.client_cpu_seconds
        ) / settings.clients
    rounds_rows = [
        {"method": t.method, "epsilon": t.epsilon, "repeat": t.repeat, "round": i + 1,
         "accuracy": a, "seconds": s}
        for t in trainings for i, (a, s) in enumerate(zip(t.accuracy, t.seconds, strict=True))
    ]
    write_csv(out / "rounds.csv", rounds_rows, ROUND_COLUMNS)
    write_csv(out / "summary.csv", summary, SUMMARY_COLUMNS)
    plot_accuracy(out, settings, trainings, summary)
    result["seconds_total"] = time.perf_counter() - started
    write_json(out / "settings.json", asdict(settings))
    write_json(out / "result.json", result)
    (out / "report.md").write_text(report(settings, result, summary))
    return result
