"""`benchlib validate`'s planned power, from the default campaign's real tables as the pilot."""

from __future__ import annotations

import math
import re
import subprocess

import numpy as np
import polars as pl

from benchlib.analysis import planning, power, project_root, stats
from benchlib.measure.plan import validate_all
from benchlib.settings.loading import load_params
from tests.conftest import unrecorded_default_params, venv_env

FIXTURE = "tests/fixtures/tidy/lab-default-002"


def test_planned_power_from_a_pilot():
    params = load_params(project_root() / "params.yaml")
    plans = validate_all(params)
    assert len(planning.planned_comparisons(params, plans)) == 12  # 4 tests x 3 scenarios vs host
    lines = planning.planned_power(params, plans, project_root(), project_root() / FIXTURE)
    assert lines[0].startswith("planned power (pilot: tables in") and "12 primary comparisons, Holm" in lines[0]
    n = params.experiment.repetitions
    assert "alpha 0.0042 (= 0.05/12)" in lines[0] and f"n = {n} runs per configuration" in lines[0]
    assert len(lines) == 5  # one line per test, short
    crr = next(line for line in lines if "tcp_crr connection_rate" in line)
    # each scenario's MDE at the planned n and the runs for the 2 % band / 5 %
    assert set(re.findall(r"(bridge|veth-routed|vxlan) [\d.]+ % \(\d+/\d+\)", crr)) == {
        "bridge",
        "veth-routed",
        "vxlan",
    }


def test_planned_power_numbers_are_the_stats_functions():
    params = load_params(project_root() / "params.yaml")
    plans = validate_all(params)
    lines = planning.planned_power(params, plans, project_root(), project_root() / FIXTURE)
    runs, metrics = planning.load_pilot(project_root() / FIXTURE)
    samples = planning._samples(runs, metrics, params.analysis)
    _, x = samples[("local-lab", "tcp_rr", "vxlan")]
    _, y = samples[("local-lab", "tcp_rr", "host")]
    sd = float(stats.pooled_log_sd(x[None, :], y[None, :])[0])
    n = params.experiment.repetitions
    mde = stats.mde_pct(n, n, sd, 0.05 / 12)
    rr = next(line for line in lines if "tcp_rr transaction_rate" in line)
    assert (
        f"vxlan {mde:.1f} % ({stats.n_for_effect(2.0, sd, 0.05 / 12)}/{stats.n_for_effect(5.0, sd, 0.05 / 12)})" in rr
    )


def test_no_previous_campaign_is_one_line(tmp_path):
    params = load_params(project_root() / "params.yaml")
    lines = planning.planned_power(params, validate_all(params), tmp_path)
    assert lines == [
        "planned power: no previous campaign (data/processed, data/raw or --pilot) to take the spread from"
    ]


def test_without_a_pilot_too_few_repetitions_for_the_family_are_named(tmp_path):
    """Whatever the spread, 5 runs against 5 cannot pass Holm over 12 comparisons (smallest p 0.0079)."""
    params = load_params(project_root() / "params.yaml")
    few = params.model_copy(update={"experiment": params.experiment.model_copy(update={"repetitions": 5})})
    lines = planning.planned_power(few, validate_all(few), tmp_path)
    assert lines[0].startswith("planned power: no previous campaign")
    assert lines[1] == (
        "  n = 5 cannot reach significance: its smallest exact p (0.0079) exceeds alpha 0.05 over the 12 "
        "primary comparisons (0.0042); experiment.repetitions needs >= 6"
    )
    enough = few.model_copy(update={"experiment": few.experiment.model_copy(update={"repetitions": 6})})
    assert len(planning.planned_power(enough, validate_all(enough), tmp_path)) == 1


def test_too_few_repetitions_say_how_many_could(tmp_path):
    params = load_params(project_root() / "params.yaml")
    few = params.model_copy(update={"experiment": params.experiment.model_copy(update={"repetitions": 5})})
    lines = planning.planned_power(few, validate_all(few), project_root(), project_root() / FIXTURE)
    assert "n = 5 cannot reach alpha 0.0042 at all" in lines[1] and "needs n >= 6" in lines[1]
    assert "n/a" in lines[2]


def test_n_for_effect_is_the_smallest_n_or_none_for_any_spread():
    """Tiny, zero, huge and missing spreads: a number of runs or None, never an exception
    (statsmodels' power is NaN at d = 19.8 and its root finder fails to converge there)."""
    level = 0.05 / 12
    for sd in [0.0, math.nan, math.inf, -0.1, *np.logspace(-15, 3, 73)]:
        for effect in (0.5, 2.0, 5.0, 50.0):
            n = stats.n_for_effect(effect, float(sd), level)
            if not 0 < sd < math.inf:
                assert n is None
                continue
            if n is None:
                assert sd > 10  # only absurd spreads exceed n_max
                continue
            floor = max(stats.MIN_N, stats.n_attainable(level))
            assert n >= floor and power._power(math.log1p(effect / 100) / sd, n, level) >= stats.POWER
            assert n == floor or power._power(math.log1p(effect / 100) / sd, n - 1, level) < stats.POWER
    assert stats.n_for_effect(2.0, 0.001, level) == 6  # the spread that used to raise


def test_validate_on_degenerate_real_spreads(tmp_path):
    """A real pilot whose spreads are made zero, tiny, huge or missing: validate prints a number or
    says why not, and exits 0."""
    src = project_root() / "tests/fixtures/tidy/lab-default-003"
    runs, metrics = planning.load_pilot(src)
    config_is = lambda scenario, test: (pl.col("scenario") == scenario) & (pl.col("test") == test)  # noqa: E731
    rank = pl.col("run_id").rank("dense").over("scenario", "test", "metric").cast(pl.Float64)
    metrics = metrics.with_columns(
        value=pl.when(config_is("vxlan", "tcp_rr") | config_is("host", "tcp_rr"))
        .then(pl.col("value").median().over("scenario", "test", "metric"))
        .when(config_is("bridge", "tcp_crr") | config_is("host", "tcp_crr"))
        .then(pl.col("value").median().over("test", "metric") * (1 + 1e-9 * rank))
        .when(config_is("vxlan", "tcp_stream_1"))
        .then(pl.col("value") * 10.0 ** (rank * 3))
        .otherwise(pl.col("value"))
    ).filter(~config_is("bridge", "tcp_stream_n"))
    pilot = tmp_path / "pilot"
    pilot.mkdir()
    runs.write_parquet(pilot / "runs.parquet")
    metrics.write_parquet(pilot / "metrics.parquet")
    proc = subprocess.run(
        ["benchlib", "--params", str(unrecorded_default_params(tmp_path)), "validate", "--pilot", str(pilot)],
        cwd=project_root(),
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    lines = proc.stdout.splitlines()
    rr = next((line for line in lines if "tcp_rr transaction_rate" in line), proc.stdout)
    assert "vxlan not computable because the pilot's runs do not spread at all" in rr
    crr = next(line for line in lines if "tcp_crr connection_rate" in line)
    assert re.search(r"bridge [\d.]+ % \(6/6\)", crr), crr  # a tiny spread: the fewest runs that can reach alpha
    stream = next(line for line in lines if "tcp_stream_1 throughput" in line)
    assert re.search(r"vxlan (n/a|[\d.e+]+ %|inf %) \((\d+|-)/(\d+|-)\)", stream), stream
    assert "no pilot data for 1 comparison(s): local-lab/tcp_stream_n/bridge vs host" in proc.stdout
