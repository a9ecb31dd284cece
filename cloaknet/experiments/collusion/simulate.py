"""Simulated rounds of the collusion experiment, attacked by the exact adversary.

The analyzer colludes with some users, who reveal their inputs and messages. The adversary
removes the colluders' messages from the shuffled view and runs exact Bayesian inference on
what remains (:mod:`cloaknet.adversary`): the two-honest-user case the lemmas reduce to — the
target and one other honest user; every further honest user is handed to the adversary too
(a stronger adversary than the lemmas', so the empirical losses are upper estimates). In
single-user mode the partner is a noisy honest user whenever one exists, as in the proof of
Lemma 11, and the adversary is told who added noise (not how much). With one honest user
left, the target alone is attacked (:func:`lone_target`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from cloaknet.adversary import (
    BEHAVIOURS,
    Behaviour,
    Mode,
    analyze_trial,
    simulate_trial,
    view_stats,
)
from cloaknet.encoding import split
from cloaknet.experiments.collusion.rows import AttackRow
from cloaknet.experiments.collusion.settings import MODES, CollusionSettings
from cloaknet.experiments.samplers import bernoulli_any
from cloaknet.noise import noise_p as scale_to_p
from cloaknet.noise import sample_truncated_laplace
from cloaknet.randomness import SYSTEM_RANDOM, DeterministicRandom, RandomSource

__all__ = ["Task", "lone_target", "plan_tasks", "run_task", "simulated_twins", "task_rng"]


@dataclass(frozen=True)
class Task:
    """Rounds ``first`` … ``first + trials − 1`` of one grid point of ``sweep`` (picklable).
    ``noise_scale`` and ``q`` are fractions as text ("3/2"); ``users`` counts everybody,
    ``colluders`` of them collude."""

    sweep: str
    mode: Mode
    m: int
    modulus: int
    precision: int
    users: int
    colluders: int
    behaviour: Behaviour
    trials: int
    seed: int | None
    noise_scale: str
    q: str
    first: int = 0


def task_rng(task: Task, index: int) -> RandomSource:
    """The randomness of round ``index`` (counted from 0 at the grid point, not at the
    task) of ``task``'s grid point: the OS CSPRNG without a seed, else a
    :class:`DeterministicRandom` keyed by the seed, the grid point and ``index`` — so a
    seeded run replays whatever the number of processes and however rounds are chunked."""
    if task.seed is None:
        return SYSTEM_RANDOM
    return DeterministicRandom(
        f"{task.seed}/{task.sweep}/{task.mode}/{task.m}/{task.modulus}/"
        f"{task.colluders}/{task.behaviour}/{index}"
    )


def run_task(task: Task) -> list[AttackRow]:
    """Simulate and attack rounds ``first`` … ``first + trials − 1`` of ``task``'s grid point
    (a picklable top-level worker); one row per round, in order. Round i draws from
    :func:`task_rng` keyed by i, so the rows do not depend on the chunking."""
    rows = []
    scale = Fraction(task.noise_scale)
    q = Fraction(task.q)
    p = scale_to_p(scale)
    honest = task.users - task.colluders
    single_user = task.mode == "single-user"
    for i in range(task.first, task.first + task.trials):
        rng = task_rng(task, i)
        if honest <= 1:
            rows.append(lone_target(task, rng, q, scale))
            continue
        target_noisy = other_noisy = False
        if single_user:
            target_noisy = bernoulli_any(q, 1, rng)
            # the partner is a noisy honest user whenever one of the others added noise
            other_noisy = bernoulli_any(q, honest - 1, rng)
        trial = simulate_trial(
            m=task.m,
            modulus=task.modulus,
            precision=task.precision,
            colluders=min(task.colluders + honest - 2, 8),
            behaviour=task.behaviour,
            mode=task.mode,
            rng=rng,
            noise_scale=scale if single_user else None,
            q=q if single_user else None,
            target_noisy=target_noisy,
            other_noisy=other_noisy,
        )
        analysis = analyze_trial(
            trial,
            m=task.m,
            modulus=task.modulus,
            precision=task.precision,
            mode=task.mode,
            noise_p=p if single_user else None,
        )
        claimed = (
            trial.target_input
            + trial.other_input
            + trial.target_noise
            + trial.other_noise
            + sum(trial.colluder_inputs)
        )
        half = (task.modulus - 1) // 2
        wrapped = (sum(trial.view) - claimed + half) % task.modulus - half
        rows.append(
            AttackRow(
                sweep=task.sweep,
                source="simulated",
                mode=task.mode,
                m=task.m,
                modulus=task.modulus,
                precision=task.precision,
                users=task.users,
                colluders=task.colluders,
                honest=honest,
                behaviour=task.behaviour,
                gamma=analysis.gamma,
                distinct=analysis.distinct,
                privacy_loss=analysis.privacy_loss,
                neighbour_loss=analysis.neighbour_loss,
                guess_correct=analysis.guess_correct,
                prior_success=analysis.prior_success,
                posterior_target=analysis.posterior_target,
                target_noisy=trial.target_noisy,
                other_noisy=trial.other_noisy,
                sum_error=wrapped / task.precision,
            )
        )
    return rows


def lone_target(task: Task, rng: RandomSource, q: Fraction, scale: Fraction) -> AttackRow:
    """One round with one honest user left: the analyzer knows everybody else, so it knows
    the target's x̄ + w exactly. Sum-preserving changes have no neighbour left (privacy is
    vacuous, loss ∞); single-user changes are protected by the target's own noise only (if
    it added any: Bernoulli(``q``), scale ``scale``). The view statistics are those of the
    target's shares next to an encoding of 0."""
    k = task.precision
    x = rng.randbelow(k + 1)
    noisy = task.mode == "single-user" and bernoulli_any(q, 1, rng)
    w = sample_truncated_laplace(task.modulus, scale, rng) if noisy else 0
    shares = split(x + w, task.m, task.modulus, rng)
    stats = view_stats(shares + split(0, task.m, task.modulus, rng), task.m, task.modulus)
    observed = (x + w) % task.modulus
    if task.mode == "sum-preserving" or not noisy:
        # the target's input is determined: every other input has likelihood 0
        loss = math.inf
        posterior_target, correct = 1.0, True
    else:
        half = (task.modulus - 1) // 2
        logs = [
            -(abs((observed - c + half) % task.modulus - half)) / float(scale) for c in range(k + 1)
        ]
        loss = max(logs) - min(logs)
        top = max(logs)
        weights = [math.exp(v - top) for v in logs]
        posterior_target = weights[x] / sum(weights)
        correct = max(range(k + 1), key=lambda c: (logs[c], -c)) == x
    return AttackRow(
        sweep=task.sweep,
        source="simulated",
        mode=task.mode,
        m=task.m,
        modulus=task.modulus,
        precision=task.precision,
        users=task.users,
        colluders=task.colluders,
        honest=task.users - task.colluders,
        behaviour=task.behaviour,
        gamma=stats.gamma,
        distinct=stats.distinct,
        privacy_loss=loss,
        neighbour_loss=loss,
        guess_correct=correct,
        prior_success=1 / (k + 1),
        posterior_target=posterior_target,
        target_noisy=noisy,
        other_noisy=False,
        sum_error=0.0,
    )


def plan_tasks(settings: CollusionSettings) -> list[Task]:
    """The simulated sweeps (messages, colluders, smoothness, behaviours), each grid point
    cut into chunks of about trials/(2·jobs) rounds (the chunks only balance the load: the
    rounds themselves do not depend on them)."""
    s = settings
    chunk = max(1, s.trials // max(1, 2 * s.jobs))
    tasks: list[Task] = []

    def add(
        sweep: str,
        mode: Mode,
        m: int,
        modulus: int,
        users: int,
        colluders: int,
        behaviour: Behaviour,
        trials: int,
        q: str,
    ) -> None:
        done = 0
        while done < trials:
            count = min(chunk, trials - done)
            tasks.append(
                Task(
                    sweep,
                    mode,
                    m,
                    modulus,
                    s.precision,
                    users,
                    colluders,
                    behaviour,
                    count,
                    s.seed,
                    str(s.noise_scale),
                    q,
                    first=done,
                )
            )
            done += count

    for mode in MODES:
        for m in s.m_values:
            add("messages", mode, m, s.modulus, 10, 8, "honest", s.trials, s.single_user_q)
    cq = str(s.colluder_q())
    for mode in MODES:
        for colluders in s.colluder_counts:
            add(
                "colluders",
                mode,
                s.big_m,
                s.modulus,
                s.colluder_users,
                colluders,
                "honest",
                s.trials,
                cq,
            )
    for m in s.smooth_m:
        for modulus in s.smooth_moduli:
            add(
                "smoothness",
                "sum-preserving",
                m,
                modulus,
                2,
                0,
                "honest",
                s.trials,
                s.single_user_q,
            )
    for mode in MODES:
        for behaviour in BEHAVIOURS:
            add(
                "behaviours",
                mode,
                s.big_m,
                s.modulus,
                10,
                8,
                behaviour,
                max(10, s.trials // 2),
                s.single_user_q,
            )
    return tasks


def simulated_twins(settings: CollusionSettings) -> list[Task]:
    """Simulated rounds with the networked chain's parameters (5 per networked round)."""
    return [
        Task(
            "networked-sim",
            "sum-preserving",
            settings.networked_m,
            settings.networked_modulus,
            settings.precision,
            10,
            8,
            "honest",
            settings.networked_rounds * 5,
            settings.seed,
            str(settings.noise_scale),
            settings.single_user_q,
        )
    ]
