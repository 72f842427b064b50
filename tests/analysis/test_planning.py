"""`benchlib validate`'s planned power, from the default campaign's real tables as the pilot."""
from __future__ import annotations

import re

from benchlib import config
from benchlib.analysis import planning, project_root, stats

FIXTURE = "tests/fixtures/tidy/lab-default-002"


def test_planned_power_from_a_pilot():
    params = config.load_params(project_root() / "params.yaml")
    plans = config.validate_all(params)
    assert len(planning.planned_comparisons(params, plans)) == 12  # 4 tests x 3 scenarios vs host
    lines = planning.planned_power(params, plans, project_root(), project_root() / FIXTURE)
    assert lines[0].startswith("planned power (pilot: tables in") and "12 primary comparisons, Holm" in lines[0]
    n = params.experiment.repetitions
    assert "alpha 0.0042 (= 0.05/12)" in lines[0] and f"n = {n} runs per configuration" in lines[0]
    assert len(lines) == 5  # one line per test, short
    crr = next(line for line in lines if "tcp_crr connection_rate" in line)
    # each scenario's MDE at the planned n and the runs for the 2 % band / 5 %
    assert set(re.findall(r"(bridge|veth-routed|vxlan) [\d.]+ % \(\d+/\d+\)", crr)) == {"bridge", "veth-routed",
                                                                                       "vxlan"}


def test_planned_power_numbers_are_the_stats_functions():
    params = config.load_params(project_root() / "params.yaml")
    plans = config.validate_all(params)
    lines = planning.planned_power(params, plans, project_root(), project_root() / FIXTURE)
    runs, metrics = planning.load_pilot(project_root() / FIXTURE)
    samples = planning._samples(runs, metrics, params.analysis)
    _, x = samples[("local-lab", "tcp_rr", "vxlan")]
    _, y = samples[("local-lab", "tcp_rr", "host")]
    sd = float(stats.pooled_log_sd(x[None, :], y[None, :])[0])
    n = params.experiment.repetitions
    mde = stats.mde_pct(n, n, sd, 0.05 / 12)
    rr = next(line for line in lines if "tcp_rr transaction_rate" in line)
    assert f"vxlan {mde:.1f} % ({stats.n_for_effect(2.0, sd, 0.05 / 12)}/{stats.n_for_effect(5.0, sd, 0.05 / 12)})" in rr


def test_no_previous_campaign_is_one_line(tmp_path):
    params = config.load_params(project_root() / "params.yaml")
    lines = planning.planned_power(params, config.validate_all(params), tmp_path)
    assert lines == ["planned power: no previous campaign (data/processed, data/raw or --pilot) to take the spread "
                     "from"]


def test_too_few_repetitions_say_how_many_could(tmp_path):
    params = config.load_params(project_root() / "params.yaml")
    few = params.model_copy(update={"experiment": params.experiment.model_copy(update={"repetitions": 5})})
    lines = planning.planned_power(few, config.validate_all(few), project_root(), project_root() / FIXTURE)
    assert "n = 5 cannot reach alpha 0.0042 at all" in lines[1] and "needs n >= 6" in lines[1]
    assert "n/a" in lines[2]
