"""`cloaknet experiment compare`: artefacts, typed rows, the fast path, the findings."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from cloaknet.errors import ParameterError
from cloaknet.experiments.compare import (
    FAST_PATH_PROTOCOLS,
    ROW_COLUMNS,
    TRIAL_COLUMNS,
    CompareSettings,
    choose_method,
    input_vector,
    run_compare_experiment,
    simulate_trial,
    trial_rng,
)
from cloaknet.experiments.compare.findings import agreement
from cloaknet.experiments.compare.grid import build_cells, plan_tasks
from cloaknet.experiments.compare.lineup import (
    DEFAULT_ROWS,
    ROWS,
    bound_and_noise,
    bound_label,
    build,
)
from cloaknet.experiments.compare.plots import legend_label
from cloaknet.experiments.compare.rows import CellRow, Measurement, Plan, TrialRow
from cloaknet.experiments.compare.simulate import Task, run_task
from cloaknet.experiments.compare.summary import measure
from cloaknet.plans import select_plan
from cloaknet.protocols import PROTOCOLS, make_protocol
from cloaknet.randomness import DeterministicRandom

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _quiet() -> Console:
    return Console(file=io.StringIO())


# --------------------------------------------------------------------------- the whole run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    out = tmp_path_factory.mktemp("compare")
    settings = CompareSettings(
        users=(100, 1000),
        epsilons=(1.0,),
        delta=1e-6,
        trials=5,
        jobs=2,
        seed=1,
        quick=False,
        # low enough that some n = 1000 cells take the sufficient-statistic path
        max_messages_per_trial=50_000,
    )
    return out, run_compare_experiment(out, settings, _quiet())


def test_tiny_run_writes_every_artefact(tiny_run: tuple[Path, dict[str, object]]) -> None:
    out, _ = tiny_run
    for name in ("compare.csv", "trials.csv", "report.md", "settings.json"):
        assert (out / name).stat().st_size > 0, name
    for png in ("error_vs_users.png", "communication_vs_users.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC
    report = (out / "report.md").read_text()
    assert "](error_vs_users.png)" in report
    assert "](communication_vs_users.png)" in report
    assert "## Figure 1 reproduced (ε = 1, δ = 10^-6)" in report
    assert "n^(1/6)·log^(1/3)(1/δ) / ε^(2/3)" in report  # the paper's formula for Balle et al.
    with (out / "compare.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * len(ROWS)
    with (out / "trials.csv").open() as handle:
        trials = list(csv.DictReader(handle))
    feasible = [r for r in rows if r["feasible"] == "True"]
    assert len(trials) == 5 * len(feasible)


def test_every_protocol_has_rows_and_plausible_errors(
    tiny_run: tuple[Path, dict[str, object]],
) -> None:
    _, result = tiny_run
    rows = result["rows"]
    assert isinstance(rows, list)
    for name in ROWS:
        assert {r["users"] for r in rows if r["protocol"] == name} == {100, 1000}, name
    blanket_100 = next(r for r in rows if r["protocol"] == "blanket" and r["users"] == 100)
    assert not blanket_100["feasible"] and "gamma" in blanket_100["reason"]
    assert blanket_100["measured_rmse"] is None
    for r in rows:
        if not r["feasible"]:
            continue
        assert r["trials"] == 5
        assert math.isfinite(r["measured_rmse"])
        assert r["rmse_ci_low"] <= r["measured_rmse"] <= r["rmse_ci_high"]
        ratio = r["measured_rmse"] / r["predicted_rmse"]
        assert 0.2 <= ratio <= 5.0, (r["protocol"], r["users"], ratio)
        assert r["messages_per_user"] >= 1 and r["bytes_per_user"] >= 1
    methods = {(r["protocol"], r["users"]): r["method"] for r in rows if r["feasible"]}
    assert methods[("cheu", 1000)] == "sufficient-statistic"
    assert methods[("cloak-sum-preserving", 1000)] == "sufficient-statistic"
    assert methods[("central", 1000)] == "messages"
    assert all(methods[(name, 100)] == "messages" for name in ROWS if name != "blanket")
    # the sum-preserving cloak is deterministic: its error is exactly the rounding bias
    for r in rows:
        if r["protocol"] == "cloak-sum-preserving":
            assert r["measured_rmse"] == pytest.approx(abs(r["predicted_bias"]), rel=1e-9)
            assert r["rmse_ci_low"] == r["rmse_ci_high"] == r["measured_rmse"]


def test_return_value_round_trips_through_json(
    tiny_run: tuple[Path, dict[str, object]],
) -> None:
    _, result = tiny_run
    assert set(result) == {"rows", "seconds"}
    text = json.dumps(result, allow_nan=False)
    assert json.loads(text) == result


def test_seeded_runs_replay_whatever_the_process_count(tmp_path: Path) -> None:
    def errors(jobs: int) -> list[float]:
        settings = CompareSettings(
            users=(300,),
            epsilons=(2.0,),
            delta=1e-6,
            trials=4,
            jobs=jobs,
            seed=7,
            quick=True,
            protocols=("cheu", "bbgn", "cloak-single-user"),
        )
        result = run_compare_experiment(tmp_path / f"jobs{jobs}", settings, _quiet())
        rows = result["rows"]
        assert isinstance(rows, list)
        return [r["mean_error"] for r in rows]

    assert errors(1) == errors(2)


# --------------------------------------------------------------------------- fast path


def _estimates(name: str, n: int, method: str, trials: int, tag: str, **kw: int) -> np.ndarray:
    protocol = make_protocol(name, n, 1.0, 1e-6)
    x = input_vector(n, 3)
    return np.array(
        [
            simulate_trial(protocol, x, method, DeterministicRandom(f"{tag}/{i}"), **kw)  # type: ignore[arg-type]
            for i in range(trials)
        ]
    )


@pytest.mark.parametrize("name", ["cloak-single-user", "cloak-sum-preserving", "bbgn"])
def test_fast_path_is_the_messages_path_stream_for_stream(name: str) -> None:
    """The cloak and bbgn samplers consume the stream in the encoder's order, so the same
    stream gives the same estimate (a drift detector on top of the distributional test)."""
    real = _estimates(name, 150, "messages", 20, "same")
    fast = _estimates(name, 150, "sufficient-statistic", 20, "same")
    assert np.array_equal(real, fast)


@pytest.mark.parametrize("name", sorted(FAST_PATH_PROTOCOLS))
def test_fast_path_agrees_in_distribution(name: str) -> None:
    """Independent streams for the two methods: means within 4.5 standard errors (from the
    predicted variance) and sample variances within 4.5 standard errors of the predicted
    variance (standard error from the pooled sample kurtosis)."""
    n, trials = 200, 400
    protocol = make_protocol(name, n, 1.0, 1e-6)
    x = input_vector(n, 3)
    bias = protocol.expected_estimate(x) - math.fsum(x.tolist())
    variance = protocol.predicted_rmse_for(x) ** 2 - bias**2
    extra = {"direct_limit": 64} if name == "cheu" else {}  # exercise the rejection sampler
    real = _estimates(name, n, "messages", trials, "real")
    fast = _estimates(name, n, "sufficient-statistic", trials, "fast", **extra)
    if variance < 1e-12:  # deterministic (sum-preserving cloak)
        assert np.all(real == fast)
        return
    se_mean = math.sqrt(2 * variance / trials)
    assert abs(real.mean() - fast.mean()) <= 4.5 * se_mean
    pooled = np.concatenate([real - real.mean(), fast - fast.mean()])
    kurtosis = float(np.mean(pooled**4) / np.mean(pooled**2) ** 2)
    se_var = math.sqrt((kurtosis - 1) / trials)
    for sample in (real, fast):
        assert abs(sample.var(ddof=1) / variance - 1) <= 4.5 * se_var, (name, sample.var())


def test_sufficient_statistic_needs_a_sampler() -> None:
    protocol = make_protocol("central", 100, 1.0, 1e-6)
    with pytest.raises(ParameterError):
        simulate_trial(
            protocol, input_vector(100, 0), "sufficient-statistic", DeterministicRandom(0)
        )


def test_choose_method() -> None:
    cheu = make_protocol("cheu", 1000, 1.0, 1e-6)
    assert choose_method(cheu, 1000, 10**9) == "messages"
    assert choose_method(cheu, 1000, 1000) == "sufficient-statistic"
    central = make_protocol("central", 1000, 1.0, 1e-6)
    assert choose_method(central, 1000, 0) == "messages"


# --------------------------------------------------------------------------- settings, data


def test_settings_presets_and_validation() -> None:
    quick = CompareSettings.default(quick=True, jobs=2)
    assert (quick.users, quick.epsilons, quick.trials, quick.delta) == (
        (100, 1000, 10_000),
        (1.0,),
        10,
        1e-6,
    )
    full = CompareSettings.default(seed=3)
    assert full.users == (100, 1000, 10_000, 100_000, 1_000_000)
    assert full.epsilons == (0.5, 1.0, 2.0) and full.trials == 50 and full.seed == 3
    assert full.protocols == ROWS and full.jobs >= 1
    assert (*DEFAULT_ROWS, *PROTOCOLS) == ROWS
    custom = CompareSettings.default(users=[1000, 100, 1000], epsilons=[2, 0.5], trials=3)
    assert custom.users == (100, 1000) and custom.epsilons == (0.5, 2.0) and custom.trials == 3
    with pytest.raises(ParameterError):
        CompareSettings(
            users=(100,),
            epsilons=(1.0,),
            delta=1e-6,
            trials=5,
            jobs=1,
            seed=None,
            quick=False,
            protocols=("nope",),
        )
    with pytest.raises(ParameterError):
        CompareSettings.default(users=[1])
    with pytest.raises(ParameterError):
        CompareSettings.default(delta=2.0)


def test_input_data_and_streams_are_reproducible() -> None:
    a, b = input_vector(500, 4), input_vector(500, 4)
    assert np.array_equal(a, b) and a.min() >= 0.0 and a.max() < 1.0
    assert not np.array_equal(a, input_vector(500, 5))
    one = trial_rng(4, "cheu", 500, 1.0, 1e-6, 0).token_bytes(16)
    assert one == trial_rng(4, "cheu", 500, 1.0, 1e-6, 0).token_bytes(16)
    assert one != trial_rng(4, "cheu", 500, 1.0, 1e-6, 1).token_bytes(16)


# --------------------------------------------------------------------------- typed rows, grid


def test_files_and_return_value_use_the_row_columns(
    tiny_run: tuple[Path, dict[str, object]],
) -> None:
    out, result = tiny_run
    with (out / "compare.csv").open() as handle:
        assert tuple(next(csv.reader(handle))) == ROW_COLUMNS
    with (out / "trials.csv").open() as handle:
        assert tuple(next(csv.reader(handle))) == TRIAL_COLUMNS
    rows = result["rows"]
    assert isinstance(rows, list)
    assert all(tuple(r) == ROW_COLUMNS for r in rows)
    settings = json.loads((out / "settings.json").read_text())
    assert settings["users"] == [100, 1000] and settings["max_messages_per_trial"] == 50_000


def test_tasks_cover_every_trial_of_every_feasible_cell_once() -> None:
    settings = CompareSettings(
        users=(100, 2000),
        epsilons=(1.0,),
        delta=1e-6,
        trials=7,
        jobs=3,
        seed=None,
        quick=False,
    )
    cells = build_cells(settings)
    tasks = plan_tasks(settings, cells)
    covered: dict[tuple[str, int], list[int]] = {}
    for task in tasks:
        covered.setdefault((task.protocol, task.users), []).extend(
            range(task.first, task.first + task.count)
        )
    feasible = {(c.name, c.users) for c in cells if c.plan is not None}
    assert set(covered) == feasible
    assert all(sorted(trials) == list(range(7)) for trials in covered.values())
    assert any(c.plan is None for c in cells)  # the blanket at n = 100


def _trial(trial: int, error: float) -> TrialRow:
    return TrialRow("central", 10, 1.0, 1e-6, trial, "messages", error, 0.0, error, 0.5)


def test_measure_summarises_the_errors() -> None:
    m = measure([_trial(1, -1.0), _trial(0, 3.0), _trial(2, 1.0)], predicted_rmse=2.0)
    assert m is not None
    assert m.measured_rmse == pytest.approx(math.sqrt(11 / 3))
    assert m.rmse_ci_low < m.measured_rmse < m.rmse_ci_high
    assert m.mean_error == pytest.approx(1.0) and m.std_error == pytest.approx(2.0)
    assert m.max_abs_error == 3.0 and m.trials == 3 and m.seconds == pytest.approx(1.5)
    assert m.measured_over_predicted == pytest.approx(math.sqrt(11 / 3) / 2)
    one = measure([_trial(0, 2.0)], predicted_rmse=0.0)
    assert one is not None and one.std_error == 0.0 and one.measured_over_predicted is None
    assert measure([], predicted_rmse=1.0) is None


def _cell(protocol: str, n: int, rmse: float, low: float, high: float, predicted: float) -> CellRow:
    plan = Plan(
        runs=protocol,
        bound=protocol,
        noise="discrete-laplace",
        messages_per_user=1.0,
        bits_per_message=8,
        bytes_per_message=1,
        bytes_per_user=1.0,
        modulus=256,
        precision=10,
        predicted_rmse=predicted,
        predicted_rmse_generic=predicted,
        predicted_bias=0.0,
    )
    measured = Measurement(rmse, low, high, 0.0, rmse, rmse, rmse / predicted, 10, 1.0)
    return CellRow(protocol, n, 1.0, 1e-6, None, "messages", plan, measured)


def test_agreement_counts_the_cells_whose_prediction_is_inside_the_interval() -> None:
    rows = [
        _cell("central", 100, 1.0, 0.8, 1.3, 1.1),
        _cell("bbgn", 100, 1.0, 0.8, 1.3, 2.0),
        CellRow("blanket", 100, 1.0, 1e-6, "InfeasiblePlanError: gamma > 1", None),
    ]
    text = agreement(rows)
    assert "in 1 of 2 cells" in text
    assert "Outside: bbgn n = 10^2 ε = 1 (measured 1, predicted 2)" in text
    assert agreement(rows[2:]) == "No feasible cell was measured."


# --------------------------------------------------------------------------- the default rows


@pytest.mark.parametrize("name", sorted(DEFAULT_ROWS))
def test_default_rows_run_exactly_what_select_plan_selects(
    tiny_run: tuple[Path, dict[str, object]], name: str
) -> None:
    """Issue 11: the default row is ``select_plan(n, ε, δ, mode=…)``: the same protocol,
    bound, noise, messages, modulus and precision, in the returned rows and in the CSV."""
    out, result = tiny_run
    rows = result["rows"]
    assert isinstance(rows, list)
    with (out / "compare.csv").open() as handle:
        written = {(r["protocol"], r["users"]): r for r in csv.DictReader(handle)}
    for n in (100, 1000):
        selected = select_plan(n, 1.0, 1e-6, mode=DEFAULT_ROWS[name])
        protocol = selected.protocol()
        row = next(r for r in rows if r["protocol"] == name and r["users"] == n)
        assert row["feasible"]
        assert row["runs"] == protocol.name
        assert (row["bound"], row["noise"]) == (selected.bound, selected.noise)
        assert row["messages_per_user"] == selected.messages
        assert row["modulus"] == selected.modulus == protocol.message_modulus
        assert row["precision"] == selected.precision
        assert row["bits_per_message"] == protocol.bits_per_message
        assert row["predicted_rmse"] == protocol.predicted_rmse_for(input_vector(n, 1))
        line = written[(name, str(n))]
        assert (line["runs"], line["bound"], line["noise"], line["modulus"]) == (
            protocol.name,
            selected.bound,
            selected.noise,
            str(selected.modulus),
        )


@pytest.mark.parametrize("n", [100, 1000, 10_000])
@pytest.mark.parametrize("name", sorted(DEFAULT_ROWS))
def test_build_is_select_plans_protocol(name: str, n: int) -> None:
    built = build(name, n, 1.0, 1e-6)
    selected = select_plan(n, 1.0, 1e-6, mode=DEFAULT_ROWS[name])
    assert built.selected == selected
    expected = selected.protocol()
    assert type(built.protocol) is type(expected)
    assert built.protocol.describe() == expected.describe()  # every parameter
    assert (built.bound, built.noise) == (selected.bound, selected.noise)
    # the rule used for the named rows agrees with the plan's own statement
    assert bound_and_noise(built.protocol) == (selected.bound, selected.noise)


def test_named_cloak_rows_keep_the_seed_lemmas() -> None:
    seeded = (("cloak-single-user", "truncated-laplace"), ("cloak-sum-preserving", "none"))
    for name, noise in seeded:
        built = build(name, 1000, 1.0, 1e-6)
        assert (built.bound, built.noise, built.selected) == ("optimized", noise, None)
        assert built.protocol.describe() == make_protocol(name, 1000, 1.0, 1e-6).describe()
    assert bound_label("optimized") == "seed lemmas (optimized)"


@pytest.mark.parametrize("name", sorted(DEFAULT_ROWS))
def test_workers_rebuild_the_selected_protocol(name: str) -> None:
    """The trials of a default row run select_plan's protocol, stream for stream."""
    n, seed = 200, 3
    rows = run_task(Task(name, n, 1.0, 1e-6, seed, 0, 3, "messages"))
    protocol = select_plan(n, 1.0, 1e-6, mode=DEFAULT_ROWS[name]).protocol()
    x = input_vector(n, seed)
    expected = [
        simulate_trial(protocol, x, "messages", trial_rng(seed, name, n, 1.0, 1e-6, i))
        for i in range(3)
    ]
    assert [r.estimate for r in rows] == expected
    assert [r.protocol for r in rows] == [name] * 3


def _table_lines(report: str, heading: str) -> list[list[str]]:
    """The cells of every body line of the first Markdown table after ``heading``."""
    section = report.split(heading, 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    end = next(
        (i for i, line in enumerate(lines) if i > 0 and not lines[i - 1].startswith("|")),
        len(lines),
    )
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:end]]


def test_report_and_legends_name_bound_and_noise_for_every_row(
    tiny_run: tuple[Path, dict[str, object]],
) -> None:
    out, result = tiny_run
    report = (out / "report.md").read_text()
    rows = result["rows"]
    assert isinstance(rows, list)
    feasible = [r for r in rows if r["feasible"]]
    # Figure 1 table: each row's label names its bound and noise, then per-n lines
    figure = report.split("## Figure 1 reproduced", 1)[1].split("## What the numbers say")[0]
    for name in ROWS:
        label = next(line for line in figure.splitlines() if line.startswith(f"| {name} ("))
        mine = [r for r in feasible if r["protocol"] == name]
        assert mine, name
        for r in mine:
            assert bound_label(r["bound"]) in label and f"noise: {r['noise']}" in label, label
        if name in DEFAULT_ROWS:
            assert "cloaknet plan's choice" in label and f"runs {mine[0]['runs']}" in label
    assert "seed lemmas (optimized); noise: truncated-laplace" in figure
    # full table: runs, bound and noise of every feasible cell
    full = _table_lines(report, "## Full table")
    assert len(full) == len(rows)
    for cells, r in zip(full, rows, strict=True):
        assert cells[0] == r["protocol"]
        if r["feasible"]:
            assert cells[3:6] == [r["runs"], r["bound"], r["noise"]], cells
    # the default rows' findings say what was selected, with bound and noise
    for name, mode in DEFAULT_ROWS.items():
        opening = f"* The default plan for {mode}"
        sentence = next(line for line in report.splitlines() if line.startswith(opening))
        first = next(r for r in feasible if r["protocol"] == name)
        assert bound_label(first["bound"]) in sentence and name in sentence
    # the plot legends carry the same caption
    cell_rows = [
        CellRow(
            protocol=r["protocol"],
            users=r["users"],
            epsilon=r["epsilon"],
            delta=r["delta"],
            reason=r["reason"],
            method=r["method"],
            plan=Plan(**{k: r[k] for k in Plan.__dataclass_fields__}) if r["feasible"] else None,
        )
        for r in rows
    ]
    for name in ROWS:
        legend = legend_label(name, cell_rows)
        first = next(r for r in feasible if r["protocol"] == name)
        assert legend.startswith(name) and f"noise: {first['noise']}" in legend
        assert bound_label(first["bound"]) in legend
