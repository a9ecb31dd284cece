"""Running ``cloaknet experiment collusion``: simulate and attack every sweep, attack the
networked views, then write the tables, plots and report."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from cloaknet.experiments.collusion.guessing import guess_headlines, guess_sentence
from cloaknet.experiments.collusion.headlines import (
    colluders_headlines,
    profile_headlines,
    smoothness_headlines,
)
from cloaknet.experiments.collusion.networked import networked_rows
from cloaknet.experiments.collusion.plots import (
    plot_colluders,
    plot_messages,
    plot_profile,
    plot_smoothness,
)
from cloaknet.experiments.collusion.report import (
    behaviours_section,
    colluders_section,
    messages_section,
    networked_section,
    profile_section,
    report,
    smoothness_section,
)
from cloaknet.experiments.collusion.rows import (
    AttackRow,
    BehaviourRow,
    ColludersRow,
    MessagesRow,
    NetworkedRow,
    ProfilePoint,
    SmoothnessRow,
)
from cloaknet.experiments.collusion.settings import CollusionSettings
from cloaknet.experiments.collusion.simulate import plan_tasks, run_task, simulated_twins
from cloaknet.experiments.collusion.tables import (
    behaviours_table,
    colluders_table,
    messages_table,
    networked_table,
    profile_table,
    smoothness_table,
)
from cloaknet.experiments.output import row_dict, write_json, write_rows
from cloaknet.experiments.parallel import run_parallel

__all__ = ["run_collusion_experiment"]


def run_collusion_experiment(
    out: Path, settings: CollusionSettings, console: Console | None = None
) -> dict[str, Any]:
    """Run every sweep and write into ``out`` (created if needed): ``trials.csv`` (one row
    per attacked round), ``loss_vs_m.csv``, ``colluders.csv``, ``smoothness.csv``,
    ``privacy_profile.csv``, ``behaviours.csv``, ``networked.csv``, the PNG plots
    ``loss_vs_m.png``, ``loss_vs_colluders.png``, ``smoothness_vs_bound.png``,
    ``privacy_profile.png``, ``report.md`` and ``settings.json``. Progress goes to
    ``console`` (default: standard error).

    Returns ``{"rows": int, "seconds": float, "headline": [...]}``: the number of attacked
    rounds, the wall-clock time, and the headline table as JSON-ready dicts with the keys
    claim, bound, empirical and verdict.

    :raises OSError: ``out`` cannot be created or written.
    """
    console = console or Console(stderr=True)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows: list[AttackRow] = run_parallel(
        run_task,
        plan_tasks(settings) + simulated_twins(settings),
        jobs=settings.jobs,
        label="simulated rounds",
        weight=lambda t: t.trials,
        console=console,
    )
    console.print(f"networked chain: {settings.networked_rounds} rounds …")
    rows += networked_rows(settings)
    write_rows(out / "trials.csv", AttackRow, rows)

    messages = messages_table(rows)
    colluders = colluders_table(settings, rows)
    smoothness = smoothness_table(settings, rows)
    profile = profile_table(settings, rows)
    behaviours = behaviours_table(rows)
    networked = networked_table(rows)
    write_rows(out / "loss_vs_m.csv", MessagesRow, messages)
    write_rows(out / "colluders.csv", ColludersRow, colluders)
    write_rows(out / "smoothness.csv", SmoothnessRow, smoothness)
    write_rows(out / "privacy_profile.csv", ProfilePoint, profile)
    write_rows(out / "behaviours.csv", BehaviourRow, behaviours)
    write_rows(out / "networked.csv", NetworkedRow, networked)

    plot_messages(out / "loss_vs_m.png", settings, messages)
    plot_colluders(out / "loss_vs_colluders.png", settings, colluders)
    plot_smoothness(out / "smoothness_vs_bound.png", smoothness)
    plot_profile(out / "privacy_profile.png", settings, profile, messages)

    headline = [
        *guess_headlines(settings, messages),
        *colluders_headlines(settings, colluders),
        *smoothness_headlines(smoothness),
        *profile_headlines(settings, rows),
    ]
    sections = [
        messages_section(settings, messages),
        colluders_section(colluders),
        smoothness_section(smoothness),
        profile_section(profile),
        behaviours_section(behaviours),
        networked_section(networked),
    ]
    seconds = time.perf_counter() - started
    guessing = [guess_sentence(settings, t) for t in messages if t.m in (1, settings.big_m)]
    (out / "report.md").write_text(
        report(settings, sections, headline, seconds, len(rows), guessing)
    )
    write_json(
        out / "settings.json",
        {
            **asdict(settings),
            "noise_scale": str(settings.noise_scale),
            "colluder_q": str(settings.colluder_q()),
        },
    )
    return {"rows": len(rows), "seconds": seconds, "headline": [row_dict(h) for h in headline]}
