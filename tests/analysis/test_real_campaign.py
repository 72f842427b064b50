"""The default campaign (lab-default-002, 128 real runs on this machine's lab): the polars analysis gives
the numbers the pandas one gave, and those numbers are what scipy/statsmodels give when asked directly.

tests/fixtures/tidy/lab-default-002/ holds the campaign's runs/metrics parquet (written by `benchlib parse`)
and comparisons_pandas.csv / summary_pandas.csv: the outputs of the pandas analysis (the code this branch
forked from) on the same records, saved before the rewrite.
"""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests

from benchlib.analysis import default_parameters, load_tables, normalize, stats

FIXTURE = "tests/fixtures/tidy/lab-default-002"
KEY = ["scenario", "test", "metric", "side"]
REL = 1e-12


@pytest.fixture(scope="module")
def campaign():
    p = default_parameters()
    runs, metrics = load_tables(f"{FIXTURE}/runs.parquet", f"{FIXTURE}/metrics.parquet")
    values = normalize.with_cpu_at_target(metrics, runs, target_gbps=p["cpu_target_gbps"],
                                          per_transactions=p["rr_per_transactions"],
                                          per_connections=p["crr_per_connections"])
    family = values.filter(pl.col("metric").is_in(p["family_metrics"]))
    comparisons = stats.compare(family, runs, baseline=p["baseline"], alpha=p["alpha"], correction=p["correction"],
                                noise_band_pct=p["noise_band_pct"], seed=p["seed"])
    return {"p": p, "runs": runs, "values": values, "comparisons": comparisons,
            "summary": stats.summarize(values, runs, alpha=p["alpha"])}


def _joined(new: pl.DataFrame, old_csv: str) -> pl.DataFrame:
    old = pl.read_csv(f"{FIXTURE}/{old_csv}")
    both = old.join(new, on=KEY, suffix="_new")
    assert len(both) == len(old) == len(new)
    return both


def _same(both: pl.DataFrame, col: str, rel: float = REL):
    old, new = both[col].to_numpy().astype(float), both[f"{col}_new"].to_numpy().astype(float)
    assert np.array_equal(np.isnan(old), np.isnan(new)), col
    assert new[~np.isnan(new)] == pytest.approx(old[~np.isnan(old)], rel=rel, abs=0), col


def test_comparisons_equal_the_pandas_analysis(campaign):
    both = _joined(campaign["comparisons"], "comparisons_pandas.csv")
    assert len(both) == 60 and set(both["n"]) == {8}
    for col in ("median", "median_base", "p", "p_adj"):
        _same(both, col)
    # n = 8 per side is in the bootstrap range: the method is the one the pandas code used, so the CIs
    # are the same numbers too, and with them every verdict
    assert set(both["delta_method"]) == {"bootstrap"}
    for col in ("delta_pct", "delta_low", "delta_high"):
        _same(both, col)
    assert both["verdict"].to_list() == both["verdict_new"].to_list()
    assert both["test_method"].to_list() == both["test_method_new"].to_list()


def test_summary_equals_the_pandas_analysis(campaign):
    both = _joined(campaign["summary"], "summary_pandas.csv")
    for col in ("n", "median", "ci_low", "ci_high", "iqr", "cv_pct"):
        _same(both, col)
    # drift: Pearson r of the ranks (axis=) instead of spearmanr, one sample at a time
    _same(both, "drift_p", rel=1e-9)
    assert both["drift_rho_new"].to_numpy() == pytest.approx(both["drift_rho"].to_numpy(), abs=1e-12, nan_ok=True)


def test_comparisons_equal_scipy_and_statsmodels_called_directly(campaign):
    """Independently of both analyses: gather each sample from the tables, ask scipy for the median and
    Mann-Whitney p, statsmodels for Holm."""
    c, values, runs, base = campaign["comparisons"], campaign["values"], campaign["runs"], campaign["p"]["baseline"]
    ok = set(runs.filter(outcome="ok")["run_id"])

    def sample(scenario, r):
        return values.filter(scenario=scenario, test=r["test"], metric=r["metric"], side=r["side"],
                             ).filter(pl.col("run_id").is_in(ok))["value"].to_numpy()

    p_direct = []
    for r in c.iter_rows(named=True):
        x, y = sample(r["scenario"], r), sample(base, r)
        assert r["median"] == pytest.approx(np.median(x), rel=REL)
        assert r["median_base"] == pytest.approx(np.median(y), rel=REL)
        # latencies are printed in whole microseconds: some samples tie, and scipy's exact null assumes none
        ties = np.unique(np.concatenate([x, y])).size < x.size + y.size
        method = scipy_stats.PermutationMethod(n_resamples=9999, rng=campaign["p"]["seed"]) if ties else "exact"
        assert r["test_method"] == ("permutation" if ties else "exact")
        p = scipy_stats.mannwhitneyu(x, y, alternative="two-sided", method=method).pvalue
        assert r["p"] == pytest.approx(p, rel=REL)
        p_direct.append(p)
    holm = multipletests(p_direct, method="holm")[1]
    assert c["p_adj"].to_numpy() == pytest.approx(holm, rel=REL)


def test_runs_carry_their_test_parameters(campaign):
    runs = campaign["runs"]
    per_test = runs.group_by("test").agg(pl.col("test_params").n_unique())
    assert per_test["test_params"].to_list() == [1] * 4  # one setting per test in this campaign
    assert runs["test_params"].n_unique() == 4
