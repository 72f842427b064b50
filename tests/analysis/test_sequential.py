"""Run until precise: the looks, the alpha spent across them, and the coverage of the interval at the
look that stopped, simulated on a real recorded lab campaign."""

import math

import numpy as np
import polars as pl
import pytest

from benchlib.analysis import analyse, sequential, stats
from benchlib.report import summary
from benchlib.report.prose import PLAIN
from benchlib.settings.analysis import Analysis
from benchlib.settings.campaign import MAX_BLOCKS, MAX_MINUTES, Experiment
from benchlib.vocabulary import schema
from tests.conftest import FIXTURES

CAMPAIGN = FIXTURES / "tidy" / "lab-default-003"  # real lab runs: 4 scenarios x 4 tests x 10 blocks


def experiment(**fields) -> Experiment:
    return Experiment(campaign="c", environments=["local-lab"], **{"repetitions": 6, **fields})


def test_looks_are_fixed_in_advance_and_share_alpha():
    exp = experiment(precision=2, max_repetitions=15, look_blocks=3)
    assert exp.looks() == [6, 9, 12, 15]
    assert [sequential.look_alpha(exp, 0.05, j) for j in (1, 4)] == [0.0125, 0.0125]
    # an uneven last step still ends at the budget
    assert experiment(precision=2, max_repetitions=14, look_blocks=3).looks() == [6, 9, 12, 14]
    assert experiment(precision=2, max_repetitions=6).looks() == [6]
    # blocks of an interrupted look count as that look
    assert [exp.look_of(b) for b in (3, 6, 7, 9, 15, 16)] == [1, 1, 2, 2, 4, 4]
    # without precision: one look at alpha
    plain = experiment()
    assert plain.looks() == [6] and sequential.look_alpha(plain, 0.05, 1) == 0.05


def test_minutes_only_spends_a_series_that_sums_to_alpha():
    exp = experiment(precision=2, max_minutes=30)
    spent = [sequential.look_alpha(exp, 0.05, j) for j in range(1, len(exp.looks()) + 1)]
    assert spent[0] == 0.025 and all(a >= b for a, b in zip(spent, spent[1:], strict=False))
    assert sum(spent) <= 0.05


def test_spent_alpha_from_the_recorded_blocks():
    exp = experiment(precision=2, max_minutes=30)
    runs = pl.DataFrame({"environment": ["a", "a", "b"], "block": [0, 8, 13]})
    # a reached look 2 (blocks 7-12), b look 3: the later, smaller share
    assert sequential.spent_alpha(exp, 0.05, runs) == pytest.approx(0.05 / 12)


def real_samples() -> dict[tuple[str, str], np.ndarray]:
    """Each configuration's headline values, as recorded."""
    runs, metrics = schema.read_runs(CAMPAIGN / "runs.parquet"), schema.read_metrics(CAMPAIGN / "metrics.parquet")
    ok = stats.ok_values(stats.compared_values(metrics, runs, []), runs)
    grouped = ok.group_by("scenario", "test").agg("value")
    return {(r["scenario"], r["test"]): np.asarray(r["value"], float) for r in grouped.iter_rows(named=True)}


def test_half_widths_of_the_primary_family_on_real_tables():
    runs, metrics = schema.read_runs(CAMPAIGN / "runs.parquet"), schema.read_metrics(CAMPAIGN / "metrics.parquet")
    widths = sequential.half_widths(runs, metrics, Analysis(baseline="host", seed=1), confidence=0.95)
    assert len(widths) == 12  # 3 scenarios against host x 4 tests
    assert set(widths["metric"]) == {"throughput", "transaction_rate", "connection_rate"}
    assert widths["half_width_pct"].is_sorted(descending=True)
    widest, narrowest = float(widths["half_width_pct"].max()), float(widths["half_width_pct"].min())
    assert sequential.judged(widths, experiment(precision=widest, max_repetitions=20))["met"].all()
    assert not sequential.judged(widths, experiment(precision=narrowest - 1e-9, max_repetitions=20))["met"].any()
    # a target per headline metric: the streams' wide intervals against a loose target, the rest a tight one
    streams = widths.filter(pl.col("metric") == "throughput")["half_width_pct"]
    rest = widths.filter(pl.col("metric") != "throughput")["half_width_pct"]
    per_metric = {"default": float(rest.max()), "throughput": float(streams.max())}
    judged = sequential.judged(widths, experiment(precision=per_metric, max_repetitions=20))
    assert judged["met"].all()
    assert set(judged.filter(pl.col("metric") == "throughput")["target_pct"]) == {float(streams.max())}
    assert set(judged.filter(pl.col("metric") != "throughput")["target_pct"]) == {float(rest.max())}
    tighter = {**per_metric, "throughput": float(streams.min()) - 1e-9}
    missed = sequential.judged(widths, experiment(precision=tighter, max_repetitions=20)).filter(~pl.col("met"))
    assert set(missed["metric"]) == {"throughput"} and len(missed) == len(streams)
    # an environment without the baseline has nothing to judge
    others = runs.filter(pl.col("scenario") != "host")
    none = sequential.half_widths(others, metrics, Analysis(baseline="host"), confidence=0.95)
    assert none.is_empty()


def test_stopping_early_keeps_the_nominal_coverage():
    """Resampled from real runs: each comparison's full-sample median ratio is the truth; every
    simulated campaign draws its runs with replacement, looks at 6, 9, 12 and 15 blocks and stops at
    the first look whose interval (at the spent level) is within the target, a target near the
    typical half-width at the first look so that campaigns stop at every look. The interval at the
    look that stopped must cover the truth at least as often as 95 %, within simulation error."""
    alpha, sims, resamples = 0.05, 120, 999  # 999 bootstrap resamples (the analysis uses 9999): time
    values = real_samples()
    rng = np.random.default_rng(20261127)
    covered, stops = [], []
    for test in ("tcp_stream_1", "tcp_stream_n", "tcp_rr", "tcp_crr"):
        for scenario in ("bridge", "vxlan"):
            x, y = values[(scenario, test)], values[("host", test)]
            truth = 100 * (np.median(x) / np.median(y) - 1)
            first = experiment(precision=50, max_repetitions=15, look_blocks=3)
            level = sequential.stopping_confidence(first, alpha, 1, comparisons=1)
            widths = []
            for _ in range(15):
                _, lo, hi = stats.delta_pct(rng.choice(x, 6), rng.choice(y, 6), n_resamples=resamples, confidence=level)
                widths.append((hi - lo) / 2)
            exp = first.model_copy(update={"precision": float(np.median(widths))})
            marks = exp.looks()
            for _ in range(sims):
                xs, ys = rng.choice(x, marks[-1]), rng.choice(y, marks[-1])
                for look, n in enumerate(marks, 1):
                    confidence = sequential.stopping_confidence(exp, alpha, look, comparisons=1)
                    _, lo, hi = stats.delta_pct(xs[:n], ys[:n], n_resamples=resamples, confidence=confidence)
                    if (hi - lo) / 2 <= exp.precision:
                        break
                covered.append(lo <= truth <= hi)
                stops.append(look)
    coverage = float(np.mean(covered))
    error = math.sqrt(0.95 * 0.05 / len(covered))
    print(f"coverage {coverage:.3f} of {len(covered)} stopped intervals; stops per look {np.bincount(stops)[1:]}")
    assert coverage >= 0.95 - 3 * error, (coverage, np.bincount(stops))
    assert set(stops) == {1, 2, 3, 4}  # the rule stopped at every look: the check is of early stopping


def test_the_analysis_runs_at_the_spent_level_and_says_whether_the_target_was_met():
    runs, metrics = schema.read_runs(CAMPAIGN / "runs.parquet"), schema.read_metrics(CAMPAIGN / "metrics.parquet")
    # as if planned: a first look at 6 blocks, then 10 and 14; the records reach 10 blocks: look 2 of 3
    exp = experiment(precision=3, max_repetitions=14, look_blocks=4)
    settings = Analysis(baseline="host", seed=1, family_metrics=[])
    result = analyse.run(runs, metrics, settings, experiment=exp)
    assert result.settings.alpha == pytest.approx(0.05 / 3)
    primary = result.comparisons.filter(pl.col("family") == stats.PRIMARY)
    # the family's correction decided at the spent alpha: Holm's level is a multiple of alpha / 3 / 12
    assert ((1 - primary["ci_level"]) * 36 / 0.05).round(6).is_in([float(k) for k in range(1, 37)]).all()
    table = result.precision
    assert len(table) == 12 and set(table["blocks"]) == {10} and set(table["look"]) == {2}
    assert set(table["looks"]) == {3} and set(table["target_pct"]) == {3.0}
    widths = (primary["delta_high"] - primary["delta_low"]) / 2
    assert table["met"].to_list() == (widths <= 3).to_list()
    assert 0 < table["met"].sum() < 12  # some comparisons met it, some did not
    text = summary.precision_text(table, prose=PLAIN)
    assert "target +/- 3 % for every primary comparison; stopped local-lab after 10 blocks (look 2 of 3)" in text
    assert f"Target met by {table['met'].sum()} of 12" in text and "(target 3 %)" in text
    # a target per headline metric: each comparison judged against its own, and the page says which
    per_metric = exp.model_copy(update={"precision": {"default": 3.0, "throughput": 60.0}})
    mixed = analyse.run(runs, metrics, settings, experiment=per_metric).precision
    streams = pl.col("metric") == "throughput"
    assert set(mixed.filter(streams)["target_pct"]) == {60.0} and set(mixed.filter(~streams)["target_pct"]) == {3.0}
    assert mixed.filter(streams)["met"].all()
    text = summary.precision_text(mixed, prose=PLAIN)
    assert "60 % (throughput)" in text and "3 % (" in text and "every primary comparison" not in text
    # without precision: the settings' alpha, no precision table
    plain = analyse.run(runs, metrics, settings)
    assert plain.settings.alpha == 0.05 and plain.precision.is_empty()


def test_validate_estimates_the_blocks_a_target_needs_and_refuses_a_budget_short_of_them():
    from benchlib.analysis import planning, project_root
    from benchlib.base.errors import ConfigError
    from benchlib.measure.plan import validate_all
    from benchlib.settings.loading import load_params

    base = load_params(project_root() / "params.yaml")

    def with_experiment(**fields):
        exp = base.experiment.model_copy(update={"repetitions": 10, **fields})
        return base.model_copy(update={"experiment": exp})

    def power(params):
        return planning.planned_power(params, validate_all(params), project_root(), CAMPAIGN)

    loose = power(with_experiment(precision=15, max_repetitions=30))
    assert "  run until precise: +/- 15 % at looks after 10, 20, 30 blocks, alpha per look 0.017" in loose
    needed = next(line for line in loose if line.startswith("  blocks needed from the pilot"))
    assert "tcp_stream_n" in needed  # the widest intervals: the multi-stream throughput
    # a tighter target needs more blocks than the budget: one line naming the key and the blocks needed
    with pytest.raises(ConfigError) as err:
        power(with_experiment(precision=2, max_repetitions=12))
    message = str(err.value)
    assert "experiment.max_repetitions: 12 blocks cannot reach experiment.precision +/- 2 %" in message
    needs = int(message.split("needs ")[1].split(" blocks")[0])
    assert needs > 12 and "\n" not in message
    # more blocks for a tighter target
    with pytest.raises(ConfigError) as looser:
        power(with_experiment(precision=4, max_repetitions=12))
    assert int(str(looser.value).split("needs ")[1].split(" blocks")[0]) < needs
    # minutes: the plan's estimate per block
    with pytest.raises(ConfigError, match=r"experiment\.max_minutes: 5 min cannot reach .* about \d+ min"):
        planning.planned_power(
            with_experiment(precision=2, max_minutes=5),
            validate_all(base),
            project_root(),
            CAMPAIGN,
            minutes_per_block={"local-lab": 0.7},
        )
    # a time budget that would allow the blocks needed, beyond the cap on blocks: refused all the same
    with pytest.raises(ConfigError) as capped:
        planning.planned_power(
            with_experiment(precision=0.05, max_minutes=MAX_MINUTES),
            validate_all(base),
            project_root(),
            CAMPAIGN,
            minutes_per_block={"local-lab": 0.001},
        )
    assert f"beyond the {MAX_BLOCKS} blocks a campaign can have" in str(capped.value)
    assert "experiment.max_minutes" in str(capped.value) and "\n" not in str(capped.value)
