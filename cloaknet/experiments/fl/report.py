"""Plots and ``report.md`` of ``cloaknet experiment fl``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cloaknet.experiments.fl.settings import FLSettings
from cloaknet.experiments.fl.train import Training
from cloaknet.experiments.output import pyplot
from cloaknet.experiments.plotting import legend_below, save_figure

__all__ = ["TARGET_POINTS", "plot_accuracy", "report"]

#: The issue's target: cloaknet within this many percentage points of central DP.
TARGET_POINTS = 2.0

_LABELS = {
    "nonprivate": "non-private FedAvg (clipped)",
    "central_dp": "central DP-FedAvg (Gaussian)",
    "cloaknet": "cloaknet (Skellam, split-and-mix)",
}


def _curve(trainings: Sequence[Training], method: str, eps: float | None) -> list[float]:
    runs = [t.accuracy for t in trainings if t.method == method and t.epsilon == eps]
    return [float(v) for v in np.mean(np.array(runs), axis=0)]


def plot_accuracy(
    out: Path,
    settings: FLSettings,
    trainings: Sequence[Training],
    summary: Sequence[dict[str, Any]],
) -> None:
    """``accuracy_vs_round.png`` (headline ε, mean over repeats) and
    ``accuracy_vs_epsilon.png`` (final accuracy, mean ± one standard deviation)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = list(range(1, settings.rounds + 1))
    ax.plot(xs, _curve(trainings, "nonprivate", None), "k-o", ms=3, label=_LABELS["nonprivate"])
    for method, style in (("central_dp", "b-s"), ("cloaknet", "r--^")):
        ax.plot(xs, _curve(trainings, method, settings.epsilon), style, ms=3,
                label=f"{_LABELS[method]}, ε = {settings.epsilon:g}")
    ax.axhline(0.1, color="grey", lw=0.8, ls=":", label="chance (0.1)")
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.0, 1.0)
    ax.set_title(f"FedAvg on digits, n = {settings.clients}, δ = {settings.delta:g}")
    ax.grid(alpha=0.3)
    legend_below(ax)
    save_figure(fig, out / "accuracy_vs_round.png")

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    eps = [float(s["epsilon"]) for s in summary]
    ax.axhline(float(summary[0]["accuracy_nonprivate"]), color="k", lw=1,
               label=_LABELS["nonprivate"])
    ax.errorbar([e * 0.97 for e in eps], [s["accuracy_central_dp"] for s in summary],
                yerr=[s["accuracy_central_dp_std"] for s in summary], fmt="b-s", ms=4,
                capsize=3, label=_LABELS["central_dp"])
    ax.errorbar([e * 1.03 for e in eps], [s["accuracy"] for s in summary],
                yerr=[s["accuracy_std"] for s in summary], fmt="r--^", ms=4, capsize=3,
                label=_LABELS["cloaknet"])
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(eps)
    ax.set_xticklabels([f"{e:g}" for e in eps])
    ax.set_xlabel(f"ε over the whole training ({settings.rounds} rounds)")
    ax.set_ylabel("final test accuracy")
    low = min(min(s["accuracy"] - s["accuracy_std"], s["accuracy_central_dp"]
                  - s["accuracy_central_dp_std"]) for s in summary)
    ax.set_ylim(max(0.0, low - 0.05), 1.0)
    ax.grid(alpha=0.3)
    legend_below(ax)
    save_figure(fig, out / "accuracy_vs_epsilon.png")


def _cloaknet_bullet(settings: FLSettings) -> str:
    """The report's description of the cloaknet aggregator (in process or ``--network``)."""
    head = (
        "- **cloaknet**: `plan_fl` picks the scale, Skellam noise, modulus and messages for the "
        "same (ε, δ) and T; "
    )
    if settings.network:
        return head + (
            "every round all n clients submit their updates through a **real local chain**: "
            f"{settings.mixes} mix processes and the analyzer, separate OS processes on "
            "127.0.0.1 (`--network`), whose `[protocol]` is the same plan (`name = \"vector\"`). "
            "Each client clips, rounds, adds its own Skellam noise and splits every "
            "coordinate with the client library (OS CSPRNG, also with a seed), wraps its "
            "d·m shares in onions and submits them in one frame; the analyzer publishes the "
            "vector sum, which is the round's aggregate."
        )
    return head + (
        "every round the updates go through clip → conditional rounding → "
        "Skellam noise → split-and-mix → ideal shuffle → analyze. For speed the accuracy runs "
        "use `noise=\"aggregate\"`: the users' Skellam total (exactly Skellam of the summed "
        "variance, the same law as the sum of every user's own draws) is added once, so the "
        "analyzer's estimate has exactly the distribution of a real round; the messages of "
        "such a round would not be private, which is irrelevant for accuracy. One round with "
        "every user's own noise is timed for `seconds_per_round`."
    )


def _network_timing(settings: FLSettings, result: dict[str, Any], plan: dict[str, Any]) -> str:
    """The report's timing sentence for ``--network`` runs."""
    onions = settings.clients * plan["messages"] * result["dimension"]
    return (
        f"Timing: {result['seconds_per_round']:.1f} s per round through the chain (wall, "
        f"first submission to published result; {settings.clients} clients, {onions:,} "
        f"onions per round), {result['client_cpu_seconds_per_client_per_round']:.2f} s of "
        "client CPU per client and round (encoding and wrapping, all client threads). "
    )


def report(settings: FLSettings, result: dict[str, Any], summary: Sequence[dict[str, Any]]) -> str:
    """The Markdown report: parameters, plan, accuracies and a plain judgement."""
    plan = result["plan"]
    gap = 100.0 * (result["accuracy_central_dp"] - result["accuracy"])
    met = abs(gap) <= TARGET_POINTS
    lines = [
        "# cloaknet experiment fl: FedAvg on handwritten digits",
        "",
        "## Setting",
        "",
        f"- Data: scikit-learn's bundled digits (1,797 8×8 images, pixels / 16), 20% held out "
        f"for testing; the rest split across **n = {settings.clients} clients** "
        f"({'non-IID: two label shards each' if settings.non_iid else 'IID'}).",
        f"- Model: multinomial logistic regression (64 features + bias, 10 classes: "
        f"d = {result['dimension']}).",
        f"- Training: T = {settings.rounds} rounds, every client takes part in every round; "
        f"each client runs {settings.local_steps} full-batch gradient steps at learning rate "
        f"{settings.learning_rate:g} and sends its model delta clipped to L2 norm "
        f"C = {settings.clip:g}; the server adds {settings.server_learning_rate:g} × the mean. "
        f"The evaluated model from round ⌊T/2⌋ on is the average of the global models since "
        "then (post-processing: no privacy cost).",
        f"- Privacy: (ε, δ) = ({settings.epsilon:g}, {settings.delta:g}) for the **whole "
        "training** (user-level, replace-one neighbouring, all T rounds composed).",
        f"- Repeats: {settings.repeats} independent trainings per ε (data split, model "
        "initialisation, noise); accuracies are means of the final test accuracy. "
        + (
            f"Seed {settings.seed}: data split and model initialisation from numpy generators "
            "seeded with it; the pipeline's shares and noise and the central Gaussian noise "
            "from the seeded `DeterministicRandom` (replayable, simulation only)."
            if settings.seed is not None
            else "No seed: fresh data split and initialisation; the pipeline's shares and "
            "noise and the central Gaussian noise from the OS CSPRNG."
        ),
        "",
        "## Aggregators",
        "",
        "- **non-private**: the plain sum of the clipped updates.",
        "- **central DP-FedAvg**: a trusted server adds N(0, σ²) to every coordinate of the sum, "
        f"σ = z·2C with z = {result['central_dp_noise_multiplier']:.4f} the least noise "
        "multiplier for T Gaussian rounds at the same (ε, δ) (dp-accounting's RDP "
        f"accountant; its ε is {result['central_dp_epsilon']:.4f}). This is the accuracy "
        "ceiling for this privacy.",
        _cloaknet_bullet(settings),
        "",
        "## Plan (headline ε)",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| scale s | {plan['scale']:,} |",
        f"| Skellam variance μ (all honest users, per coordinate) | {plan['noise_variance']:,} |",
        f"| ε achieved (Skellam RDP + conversion) | {plan['epsilon_achieved']:.4f} |",
        f"| δ achieved (RDP + split-and-mix) | {plan['delta_achieved']:.3g} |",
        f"| modulus q | {plan['modulus']:,} |",
        f"| messages per coordinate m | {plan['messages']} |",
        f"| bytes per client per round | {result['bytes_per_client_per_round']:,} |",
        f"| noise std of the sum per coordinate: cloaknet | {result['cloaknet_noise_std']:.4f} |",
        f"| noise std of the sum per coordinate: central Gaussian | "
        f"{result['central_dp_noise_std']:.4f} |",
        "",
        "## Accuracy (final round, mean ± std over repeats)",
        "",
        "| ε | cloaknet | central DP | non-private | cloaknet − central (points) |",
        "|---|---|---|---|---|",
    ]
    for s in summary:
        lines.append(
            f"| {s['epsilon']:g} | {s['accuracy']:.4f} ± {s['accuracy_std']:.4f} | "
            f"{s['accuracy_central_dp']:.4f} ± {s['accuracy_central_dp_std']:.4f} | "
            f"{s['accuracy_nonprivate']:.4f} | "
            f"{100.0 * (s['accuracy'] - s['accuracy_central_dp']):+.2f} |"
        )
    verdict = "met" if met else "NOT met"
    lines += [
        "",
        "## Judgement",
        "",
        f"At (ε, δ) = ({settings.epsilon:g}, {settings.delta:g}) cloaknet reaches "
        f"{result['accuracy']:.4f} against {result['accuracy_central_dp']:.4f} for central "
        f"DP-FedAvg and {result['accuracy_nonprivate']:.4f} without privacy (chance: 0.1). "
        f"The gap to central DP is {gap:+.2f} points (positive: central is better); the "
        f"target of at most {TARGET_POINTS:g} points is **{verdict}**. The planned noise of "
        f"cloaknet's sum is {result['cloaknet_noise_std'] / result['central_dp_noise_std']:.3f}"
        "× the central Gaussian's, so the remaining differences are mostly run-to-run "
        "variation of the noise (see the standard deviations above)."
        + (
            f" This `--network` run trains {settings.repeats} time(s) per ε through the "
            "chain; with few clients the noise the (ε, δ) requires is large next to the sum "
            "of n updates of norm at most C, so both private accuracies can sit near chance "
            "(compare the noise std above with n·C). The in-process run, whose estimate has "
            "exactly the same law, is the one to read accuracy from."
            if settings.network
            else ""
        ),
        "",
        _network_timing(settings, result, plan) if settings.network else (
            f"Timing: {result['seconds_per_round']:.3f} s per round for the whole in-process "
            f"pipeline with every user's own noise ({settings.clients} users, "
            f"{settings.clients * plan['messages'] * result['dimension']:,} messages); "
            f"{result['seconds_per_round_simulated']:.3f} s with aggregate noise. "
            if settings.per_user_timing
            else f"Timing: {result['seconds_per_round_simulated']:.3f} s per round for the "
            "in-process pipeline with aggregate noise (encode, shuffle, analyze of "
            f"{settings.clients * plan['messages'] * result['dimension']:,} messages; the "
            "per-user noise round is timed only without --quick). "
        )
        + f"Whole run: {result['seconds_total']:.0f} s.",
        "",
        "Files: `rounds.csv` (every round's accuracy of every training), `summary.csv` (one row "
        "per ε), `accuracy_vs_round.png`, `accuracy_vs_epsilon.png`, `settings.json`, "
        "`result.json`.",
        "",
    ]
    return "\n".join(lines)
