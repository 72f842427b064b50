"""The default campaign (lab-default-002, 128 real runs on this machine's lab): the polars analysis gives
the numbers the pandas one gave, and those numbers are what scipy/statsmodels give when asked directly;
its verdicts and the intervals shown beside them never contradict (the pandas report's did).

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

from benchlib.analysis import stats
from tests.support.analysis_tables import report_comparisons

FIXTURE = "tests/fixtures/tidy/lab-default-002"
KEY = ["scenario", "test", "metric", "side"]
REL = 1e-12


@pytest.fixture(scope="module")
def campaign():
    p, runs, values, comparisons = report_comparisons(FIXTURE)
    return {
        "p": p,
        "runs": runs,
        "values": values,
        "comparisons": comparisons,
        "summary": stats.summarize(values, runs, alpha=p["alpha"]),
    }


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
    """The same 60 comparisons (the pandas family was every metric now primary or secondary) with the
    same medians, p-values and changes; the intervals are the same bootstrap, read at the families'
    levels (>= 95 %) instead of 95 %: at least as wide."""
    both = _joined(campaign["comparisons"], "comparisons_pandas.csv")
    assert len(both) == 60 and set(both["n"]) == {8}
    for col in ("median", "median_base", "p", "delta_pct"):
        _same(both, col)
    assert set(both["delta_method"]) == {"bootstrap"}  # n = 8 per side: the method the pandas code used
    assert (both["ci_level"] >= 0.95).all()
    assert (both["delta_low_new"] <= both["delta_low"] + 1e-9).all()
    assert (both["delta_high_new"] >= both["delta_high"] - 1e-9).all()
    assert both["test_method"].to_list() == both["test_method_new"].to_list()


def test_families_of_the_default_campaign(campaign):
    """Primary: each test's headline metric, 4 tests x 3 scenarios, Holm; secondary: latency and CPU, FDR."""
    c = campaign["comparisons"]
    fam = {f: g for (f,), g in c.group_by("family")}
    assert set(fam) == {stats.PRIMARY, stats.LATENCY, stats.CPU}
    assert dict(fam[stats.PRIMARY].select("test", "metric").unique().iter_rows()) == {
        "tcp_stream_1": "throughput",
        "tcp_stream_n": "throughput",
        "tcp_rr": "transaction_rate",
        "tcp_crr": "connection_rate",
    }
    assert len(fam[stats.PRIMARY]) == 12 and set(fam[stats.PRIMARY]["correction"]) == {"Holm"}
    assert set(fam[stats.LATENCY]["metric"]) == {"latency_p50", "latency_p99"}
    assert set(fam[stats.CPU]["metric"]) == {"cpu_pct_at_target"} and len(fam[stats.CPU]) == 36
    for f in (stats.LATENCY, stats.CPU):
        assert set(fam[f]["correction"]) == {"FDR (Benjamini-Hochberg)"}
    # 12 comparisons, Holm: complete separation at n = 8 (p = 1.6e-4) is below 0.05 / 12; the MDE is finite
    assert stats.smallest_p(8, 8) < 0.05 / 12
    assert fam[stats.PRIMARY]["mde_pct"].is_finite().all() and fam[stats.PRIMARY]["n_attainable"].is_null().all()


def test_verdicts_and_intervals_never_contradict(campaign):
    """On real data: significant after correction exactly where p is below the family's decision level;
    a significant verdict's interval excludes 0, a "within noise" one's includes it, and where the
    test and the interval disagree the label says "inconclusive" instead of either. The pandas report
    labelled 11 comparisons "~ within noise" beside a 95 % CI that excluded 0."""
    c = campaign["comparisons"]
    alpha = campaign["p"]["alpha"]
    old = pl.read_csv(f"{FIXTURE}/comparisons_pandas.csv")
    assert (
        len(
            old.filter(
                (pl.col("verdict") == stats.WITHIN_NOISE) & ((pl.col("delta_low") > 0) | (pl.col("delta_high") < 0))
            )
        )
        == 11
    )
    for r in c.iter_rows(named=True):
        significant = r["p_adj"] < alpha
        assert significant == (r["p"] < 1 - r["ci_level"]), r
        excludes_0 = r["delta_low"] > 0 or r["delta_high"] < 0
        if significant != excludes_0:
            assert r["verdict"].startswith(stats.UNCLEAR), r
        elif significant:
            assert r["verdict"] == stats.NEGLIGIBLE or r["verdict"].endswith(("better", "worse")), r
        else:
            assert r["verdict"] == stats.WITHIN_NOISE, r
    unclear = c.filter(pl.col("verdict").str.starts_with(stats.UNCLEAR))
    assert len(unclear) <= 3, unclear  # rank test and bootstrap of medians mostly agree
    # two of the pandas report's contradictions: vxlan TCP_CRR client CPU "~ within noise" beside
    # +33.0 % [+7.3, +59.4], bridge TCP_RR transaction rate beside -17.0 % [-34.3, -2.4]; at their
    # families' levels both intervals include 0
    for scenario, test, metric, side in (
        ("vxlan", "tcp_crr", "cpu_pct_at_target", "client"),
        ("bridge", "tcp_rr", "transaction_rate", "none"),
    ):
        row = c.filter(scenario=scenario, test=test, metric=metric, side=side).row(0, named=True)
        assert row["verdict"] == stats.WITHIN_NOISE and row["delta_low"] < 0 < row["delta_high"], row


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
        return (
            values.filter(
                scenario=scenario,
                test=r["test"],
                metric=r["metric"],
                side=r["side"],
            )
            .filter(pl.col("run_id").is_in(ok))["value"]
            .to_numpy()
        )

    p_direct = {}
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
        p_direct.setdefault(r["family"], []).append(p)
    for family, p in p_direct.items():
        method = "holm" if family == stats.PRIMARY else "fdr_bh"
        assert c.filter(family=family)["p_adj"].to_numpy() == pytest.approx(multipletests(p, method=method)[1], rel=REL)


def test_runs_carry_their_test_parameters(campaign):
    runs = campaign["runs"]
    per_test = runs.group_by("test").agg(pl.col("test_params").n_unique())
    assert per_test["test_params"].to_list() == [1] * 4  # one setting per test in this campaign
    assert runs["test_params"].n_unique() == 4
