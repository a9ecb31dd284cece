"""``scripts/bench_round_series.py``: the round benchmark run several times, summarized.

The summary's arithmetic is checked on made-up records; one short real series runs two
rounds through real node processes (``slow``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scipy import stats

from tests.integration.script_module import SCRIPTS, load_script

SCRIPT = SCRIPTS / "bench_round_series.py"


series = load_script("bench_round_series.py", "bench_round_series")


def record(
    cpu: float, floor: float, *, users: int = 100, exact: bool | None = True, entry: float = 2.5
) -> dict[str, Any]:
    """A ``bench_round.py`` record with just the fields the series reads."""
    out: dict[str, Any] = {
        "users": users,
        "mixes": 2,
        "messages": users * 3,
        "x25519_per_share": 4.0,
        "cpu_over_floor": cpu / floor,
        "cpu_over_floor_direct": cpu / (0.9 * floor),
        "cpu_seconds": cpu,
        "crypto_floor_nodes_cpu_seconds": floor,
        "wall_seconds": 2 * cpu,
        "submit_seconds": cpu / 4,
        "machine": {"load_average_before": [0.5, 0.4, 0.3]},
        "nodes": [
            {"name": "mix1", "cpu_over_floor": entry, "rss_over_ciphertext": 1.5},
            {"name": "mix2", "cpu_over_floor": 1.0, "rss_over_ciphertext": 0.9},
            {"name": "analyzer", "cpu_over_floor": None, "rss_over_ciphertext": 1.1},
        ],
    }
    if exact is not None:
        out["exact"] = exact
    return out


def test_describe_gives_the_t_interval_of_the_mean() -> None:
    values = [1.10, 1.14, 1.13, 1.19, 1.12]
    d = series.describe(values)
    assert d["n"] == 5 and d["median"] == 1.13 and d["min"] == 1.10 and d["max"] == 1.19
    assert d["mean"] == pytest.approx(1.136)
    low, high = d["ci95_of_mean"]
    half = stats.t.ppf(0.975, 4) * stats.tstd(values) / 5**0.5
    assert low == pytest.approx(1.136 - half) and high == pytest.approx(1.136 + half)


def test_describe_of_one_value_has_no_interval_and_of_equal_values_a_point() -> None:
    assert series.describe([2.0])["ci95_of_mean"] is None
    assert series.describe([2.0, 2.0, 2.0])["ci95_of_mean"] == [2.0, 2.0]
    with pytest.raises(ValueError, match="no values"):
        series.describe([])


def test_summary_pools_the_runs_and_counts_those_under_the_target() -> None:
    records = [record(11.0, 10.0), record(12.0, 10.0, entry=2.7), record(23.0, 20.0)]
    out = series.summarize_series(records, target=1.15)
    assert [r["cpu_over_floor"] for r in out["runs"]] == pytest.approx([1.1, 1.2, 1.15])
    assert out["summary"]["cpu_over_floor"]["median"] == pytest.approx(1.15)
    assert out["summary"]["cpu_over_floor_direct"]["median"] == pytest.approx(1.15 / 0.9)
    # pooled: all the CPU over all the floors, not the mean of the ratios
    assert out["pooled_cpu_over_floor"] == pytest.approx(46.0 / 40.0)
    assert out["target"]["runs_at_or_under"] == 2
    assert out["target"]["ci95_upper_at_or_under"] is False
    # per node, the analyzer (no floor) has no CPU ratio but has its memory ratio
    assert set(out["summary"]["node_cpu_over_floor"]) == {"mix1", "mix2"}
    assert out["summary"]["node_cpu_over_floor"]["mix1"]["max"] == pytest.approx(2.7)
    assert set(out["summary"]["rss_over_ciphertext"]) == {"mix1", "mix2", "analyzer"}
    assert out["all_exact"] is True
    assert "target" not in series.summarize_series(records, target=None)


def test_summary_reports_a_run_that_was_not_exact() -> None:
    out = series.summarize_series([record(11.0, 10.0), record(11.0, 10.0, exact=False)], None)
    assert out["all_exact"] is False
    assert series.summarize_series([record(11.0, 10.0, exact=None)], None)["all_exact"] is None


def test_summary_refuses_runs_of_different_rounds() -> None:
    with pytest.raises(ValueError, match="differ"):
        series.summarize_series([record(11.0, 10.0), record(11.0, 10.0, users=200)], None)
    with pytest.raises(ValueError, match="no runs"):
        series.summarize_series([], None)


def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--runs", "0"], "--runs must be >= 1"),
        (["--", "--users", "10", "--json", "x.json"], "set by this script"),
        (["--", "--dir=somewhere"], "set by this script"),
    ],
)
def test_bad_arguments_exit_2_with_the_reason(args: list[str], message: str) -> None:
    proc = run(*args, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr


@pytest.mark.slow
def test_a_failing_run_exits_1_with_its_error() -> None:
    proc = run("--runs", "2", "--quiet", "--", "--users", "0")
    assert proc.returncode == 1
    assert "run 1" in proc.stderr and "--users and --mixes must be >= 1" in proc.stderr


@pytest.mark.slow
def test_a_real_series_of_two_rounds(tmp_path: Path) -> None:
    out = tmp_path / "series.json"
    proc = run(
        "--runs",
        "2",
        "--target",
        "100",
        "--quiet",
        "--json",
        str(out),
        "--",
        "--users",
        "20",
        "--mode",
        "sum-preserving",
        "--crypto-ops",
        "100",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert len(data["runs"]) == len(data["records"]) == 2
    assert data["users"] == 20 and data["mixes"] == 3
    assert data["all_exact"] is True
    ratios = [r["cpu_over_floor"] for r in data["records"]]
    assert [r["cpu_over_floor"] for r in data["runs"]] == ratios
    assert data["summary"]["cpu_over_floor"]["min"] == min(ratios)
    assert data["target"]["runs_at_or_under"] == 2
    assert data["bench_args"][:2] == ["--users", "20"]
    assert "pooled cpu_over_floor" in proc.stdout
