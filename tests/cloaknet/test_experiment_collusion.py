"""`cloaknet experiment collusion --quick` produces every artefact, with real numbers."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pytest

from cloaknet.cli import main

ARTEFACTS = [
    "report.md",
    "trials.csv",
    "loss_vs_m.csv",
    "colluders.csv",
    "smoothness.csv",
    "privacy_profile.csv",
    "behaviours.csv",
    "networked.csv",
    "settings.json",
    "loss_vs_m.png",
    "loss_vs_colluders.png",
    "smoothness_vs_bound.png",
    "privacy_profile.png",
]


@pytest.mark.slow
def test_quick_run_writes_every_artefact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "collusion"
    code = main(
        [
            "experiment",
            "collusion",
            "--out",
            str(out),
            "--quick",
            "--trials",
            "12",
            "--jobs",
            "2",
            "--seed",
            "5",
        ]
    )
    assert code == 0
    assert "report.md" in capsys.readouterr().out
    for name in ARTEFACTS:
        path = out / name
        assert path.exists() and path.stat().st_size > 0, name
        if name.endswith(".png"):
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    for png in [a for a in ARTEFACTS if a.endswith(".png")]:
        assert f"]({png})" in report
    assert "## Headline: empirical vs bound" in report
    verdicts = re.findall(
        r"\| (held|VIOLATED|broken|no excess exposure|held up[^|]*) \|$", report, flags=re.MULTILINE
    )
    assert verdicts and "VIOLATED" not in verdicts
    with (out / "trials.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    sweeps = {r["sweep"] for r in rows}
    assert {"messages", "colluders", "smoothness", "behaviours", "networked"} <= sweeps
    # m = 1 in sum-preserving mode: the adversary wins (infinite loss) in most rounds
    m1 = [
        r
        for r in rows
        if r["sweep"] == "messages" and r["m"] == "1" and r["mode"] == "sum-preserving"
    ]
    assert sum(math.isinf(float(r["privacy_loss"])) for r in m1) > len(m1) / 2
    networked = [r for r in rows if r["source"] == "networked"]
    assert len(networked) == 6 and all(r["mode"] == "sum-preserving" for r in networked)
