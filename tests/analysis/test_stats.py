"""Statistics checked against independent computations on known data."""

from __future__ import annotations

import itertools
import json
import math
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from scipy import stats as scipy_stats
from scipy.stats import rankdata

from benchlib.analysis import stats
from benchlib.analysis.verdicts import Direction, Kind
from benchlib.report import format as fmt, tables
from tests.support.analysis_tables import make_tables


def binomial_median_ci(x, confidence=0.95):
    """Order-statistic CI of the median from binomial tail sums (math.comb), 1-indexed ranks."""
    x = sorted(x)
    n = len(x)
    tail = (1 - confidence) / 2
    cdf = [sum(math.comb(n, i) for i in range(k + 1)) / 2**n for k in range(n + 1)]
    k = max((k for k in range(n) if cdf[k] <= tail), default=None)  # P(B <= k) <= tail
    if k is None:
        return math.nan, math.nan
    return x[k], x[n - 1 - k]  # ranks k+1 and n-k


def enumerated_mwu_p(x, y):
    """Two-sided permutation p of U by enumerating every split of the pooled midranks."""
    ranks = rankdata(np.concatenate([x, y]))
    n1 = len(x)

    def u(idx):
        return ranks[list(idx)].sum() - n1 * (n1 + 1) / 2

    observed = u(range(n1))
    dist = np.array([u(c) for c in itertools.combinations(range(len(ranks)), n1)])
    return min(1.0, 2 * min((dist >= observed).mean(), (dist <= observed).mean()))


def first(df):
    """Row 0 of a frame, fields as attributes."""
    return SimpleNamespace(**df.row(0, named=True))


def by(df, key):
    """{value of key: row as dict}."""
    return {r[key]: r for r in df.iter_rows(named=True)}


def two_configs(base, other, metric="throughput", test="tcp_stream_1"):
    return make_tables({("host", test): {(metric, "none"): base}, ("vxlan", test): {(metric, "none"): other}})


# -- median CI ---------------------------------------------------------------


@pytest.mark.parametrize("n", [6, 7, 10, 15, 30])
def test_median_ci_matches_binomial_order_statistics(n):
    x = np.random.default_rng(n).normal(100, 5, n)
    assert stats.median_ci(x) == pytest.approx(binomial_median_ci(x))


def test_median_ci_n10_is_second_and_ninth_value():
    x = np.array([7, 3, 10, 1, 5, 9, 2, 8, 4, 6], float)
    assert stats.median_ci(x) == (2.0, 9.0)


def test_median_ci_needs_six_runs():
    lo, hi = stats.median_ci(np.arange(5.0))
    assert math.isnan(lo) and math.isnan(hi)
    assert stats.median_ci(np.arange(6.0)) == (0.0, 5.0)  # n = 6: min and max (coverage 96.9 %)


# -- Mann-Whitney ------------------------------------------------------------


def test_mann_whitney_separated_samples_exact_p():
    x, y = np.arange(1.0, 11), np.arange(21.0, 31)
    u, p, method = stats.mann_whitney(x, y)
    assert method == "exact"
    assert u == 0
    assert p == pytest.approx(2 / math.comb(20, 10))


def test_mann_whitney_without_ties_matches_enumeration():
    x = np.array([1.1, 2.3, 3.7, 5.2, 6.8, 7.4])
    y = np.array([2.9, 4.1, 6.1, 8.3, 9.0, 9.9])
    assert stats.mann_whitney(x, y)[1] == pytest.approx(enumerated_mwu_p(x, y))


def test_mann_whitney_with_ties_uses_permutations_matching_enumeration():
    x = np.array([10, 11, 11, 12, 12, 13], float)
    y = np.array([12, 13, 13, 14, 14, 15], float)
    u, p, method = stats.mann_whitney(x, y)
    assert method == "permutation"
    # 924 splits <= n_resamples: scipy enumerates them all, so p is exact
    assert p == pytest.approx(enumerated_mwu_p(x, y))
    assert u == pytest.approx(rankdata(np.concatenate([x, y]))[:6].sum() - 21)


def test_mann_whitney_identical_samples_p_one():
    x = np.full(10, 5.0)
    assert stats.mann_whitney(x, x.copy())[1] == 1.0


def test_mann_whitney_constant_but_different_groups_significant():
    _, p, method = stats.mann_whitney(np.full(10, 5.0), np.full(10, 6.0), seed=1)
    assert method == "permutation"
    assert p < 0.001


# -- effect ------------------------------------------------------------------


def test_delta_pct_point_estimate_and_ci_brackets_it():
    rng = np.random.default_rng(3)
    y = 10 * (1 + 0.02 * rng.standard_normal(10))
    x = 0.9 * y[::-1]
    delta, lo, hi = stats.delta_pct(x, y, seed=0)
    assert delta == pytest.approx(100 * (np.median(x) / np.median(y) - 1))
    assert lo <= delta <= hi
    assert stats.delta_pct(x, y, seed=0) == (delta, lo, hi)  # seeded: reproducible


def test_delta_pct_ci_agrees_with_independent_percentile_bootstrap():
    rng = np.random.default_rng(4)
    x, y = rng.lognormal(0, 0.05, 12) * 0.95, rng.lognormal(0, 0.05, 12)
    _, lo, hi = stats.delta_pct(x, y, seed=0, n_resamples=20_000)
    boot = np.random.default_rng(99)
    ratios = [
        np.log(np.median(boot.choice(x, x.size))) - np.log(np.median(boot.choice(y, y.size))) for _ in range(20_000)
    ]
    ref_lo, ref_hi = 100 * np.expm1(np.percentile(ratios, [2.5, 97.5]))
    assert lo == pytest.approx(ref_lo, abs=0.5)
    assert hi == pytest.approx(ref_hi, abs=0.5)


def test_delta_pct_undefined_for_nonpositive_values():
    assert all(math.isnan(v) for v in stats.delta_pct(np.zeros(8), np.ones(8)))


def test_delta_pct_identical_samples_is_zero():
    x = np.full(10, 7.0)
    assert stats.delta_pct(x, x.copy()) == (0.0, 0.0, 0.0)


# -- multiple comparisons -----------------------------------------------------


def test_holm_by_hand():
    # sorted p: .005*4=.02, .01*3=.03, .03*2=.06, .04*1=.04 -> monotone .02 .03 .06 .06
    p = [0.01, 0.04, 0.03, 0.005]
    assert stats.adjust(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_differs_from_statsmodels_default_holm_sidak():
    p = [0.01, 0.04, 0.03, 0.005]
    from statsmodels.stats.multitest import multipletests

    assert not np.allclose(stats.adjust(p, "holm"), multipletests(p)[1])


def test_fdr_bh_by_hand():
    # sorted p * m / rank: .005*4/1=.02, .01*4/2=.02, .03*4/3=.04, .04*4/4=.04
    assert stats.adjust([0.01, 0.04, 0.03, 0.005], "fdr_bh") == pytest.approx([0.02, 0.04, 0.04, 0.02])


def test_adjust_leaves_untested_out_of_the_family():
    out = stats.adjust([0.01, math.nan, 0.04], "holm")
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)


def test_adjust_rejects_unknown_correction():
    with pytest.raises(ValueError, match="correction"):
        stats.adjust([0.1], "bonferroni-ish")


# -- verdicts ------------------------------------------------------------------


def test_verdict_labels():
    K, D = Kind, Direction
    cases = [
        ((math.nan, 1, 0, 2, 0.05, 2, True), ("insufficient n", K.INSUFFICIENT, D.NONE)),
        ((0.05, -10, -12, 1, 0.05, 2, True), ("~ within noise", K.NOISE, D.NONE)),
        # the test and the interval disagree: neither is believed, and the label says which way
        (
            (0.05, -10, -12, -8, 0.05, 2, True),
            ("inconclusive: the CI excludes 0 but p_adj >= 0.05", K.INCONCLUSIVE, D.NONE),
        ),
        (
            (0.01, -10, -12, 1, 0.05, 2, True),
            ("inconclusive: p_adj < 0.05 but the CI includes 0", K.INCONCLUSIVE, D.NONE),
        ),
        (
            (0.01, math.nan, math.nan, math.nan, 0.05, 2, True),
            ("different (median ratio undefined: values <= 0)", K.FINDING, D.NONE),
        ),
        ((0.5, math.nan, math.nan, math.nan, 0.05, 2, True), ("~ within noise", K.NOISE, D.NONE)),
        ((0.01, 0.5, 0.2, 1.9, 0.05, 2, True), ("negligible", K.NEGLIGIBLE, D.NONE)),
        ((0.01, 1.5, 0.2, 2.5, 0.05, 2, True), ("+1.5 % [+0.2, +2.5] better", K.FINDING, D.BETTER)),
        ((0.01, -20.04, -21.0, -19.0, 0.05, 2, True), ("-20.0 % [-21.0, -19.0] worse", K.FINDING, D.WORSE)),
        ((0.01, -20.0, -21.0, -19.0, 0.05, 2, False), ("-20.0 % [-21.0, -19.0] better", K.FINDING, D.BETTER)),
        ((0.01, 20.0, 19.0, 21.0, 0.05, 2, False), ("+20.0 % [+19.0, +21.0] worse", K.FINDING, D.WORSE)),
        ((0.01, 0.0, 2.5, 3.0, 0.05, 2, False), ("+0.0 % [+2.5, +3.0] same median", K.FINDING, D.NONE)),
    ]
    for args, expected in cases:
        assert tuple(stats.verdict(*args)) == expected, args


def test_noise_band_lookup():
    assert stats.noise_band("throughput", 3) == 3.0
    assert stats.noise_band("throughput", {"throughput": 1.0, "default": 5}) == 1.0
    assert stats.noise_band("latency_p99", {"throughput": 1.0, "default": 5}) == 5.0
    with pytest.raises(ValueError, match="latency_p99"):
        stats.noise_band("latency_p99", {"throughput": 1.0})


# -- compare on tables ----------------------------------------------------------


def test_compare_clear_throughput_drop_is_worse():
    base = np.linspace(39.5, 40.5, 10)
    runs, metrics = two_configs(base, base * 0.8)
    c = stats.compare(metrics, runs, baseline="host")
    row = first(c)
    assert (row.scenario, row.n, row.n_base, row.test_method) == ("vxlan", 10, 10, "exact")
    assert row.p == pytest.approx(2 / math.comb(20, 10))
    assert row.p_adj == row.p  # family of one
    assert row.delta_pct == pytest.approx(-20.0)
    assert row.verdict.startswith("-20.0 % [") and row.verdict.endswith("] worse")


def test_compare_lower_latency_is_better():
    base = np.linspace(29, 31, 10)
    runs, metrics = two_configs(base, base * 0.7, metric="latency_p99", test="tcp_rr")
    row = first(stats.compare(metrics, runs))
    assert row.delta_pct == pytest.approx(-30.0)
    assert row.verdict.endswith("better") and row.verdict.startswith("-30.0 %")


def test_compare_identical_samples_within_noise():
    x = np.full(10, 40.0)
    runs, metrics = two_configs(x, x)
    row = first(stats.compare(metrics, runs))
    assert row.p == 1.0 and row.delta_pct == 0.0
    assert row.verdict == "~ within noise"


def test_compare_tiny_but_significant_change_is_negligible():
    base = np.linspace(39.9, 40.1, 10)
    runs, metrics = two_configs(base, base + 0.3)  # +0.75 %, samples do not overlap
    row = first(stats.compare(metrics, runs, noise_band_pct={"throughput": 2.0}))
    assert row.p_adj < 0.05
    assert row.verdict == "negligible"
    # the same data with a tighter band is a real improvement
    row = first(stats.compare(metrics, runs, noise_band_pct=0.1))
    assert row.verdict.endswith("better")


def test_compare_insufficient_n():
    runs, metrics = two_configs(np.linspace(39, 41, 5), np.linspace(20, 21, 10))
    row = first(stats.compare(metrics, runs))
    assert row.verdict == "insufficient n"
    assert math.isnan(row.p) and math.isnan(row.p_adj)


def test_compare_holm_over_the_family(lab_tables):
    runs, metrics = lab_tables
    fam = metrics.filter(pl.col("metric").is_in(["throughput", "transaction_rate"]))
    c = stats.compare(fam, runs, baseline="host")
    assert len(c) == 3 * 3  # 3 scenarios x (2 stream tests + tcp_rr)
    assert c["p_adj"].to_numpy() == pytest.approx(stats.adjust(c["p"].to_numpy(), "holm"))
    assert set(c["correction"]) == {"Holm"}
    fdr = stats.compare(fam, runs, baseline="host", correction="fdr_bh")
    assert set(fdr["correction"]) == {"FDR (Benjamini-Hochberg)"}


def test_compare_missing_baseline_names_it():
    runs, metrics = two_configs(np.ones(6), np.ones(6))
    with pytest.raises(ValueError, match="'bridge'"):
        stats.compare(metrics, runs, baseline="bridge")


# -- summary and flags ----------------------------------------------------------


def test_summarize_matches_numpy(lab_tables):
    runs, metrics = lab_tables
    s = stats.summarize(metrics, runs)
    row = first(s.filter(scenario="bridge", test="tcp_rr", metric="transaction_rate"))
    x = metrics.filter(scenario="bridge", test="tcp_rr", metric="transaction_rate")["value"].to_numpy()
    assert row.n == 8
    assert row.median == pytest.approx(np.median(x))
    assert row.iqr == pytest.approx(np.percentile(x, 75) - np.percentile(x, 25))
    assert row.cv_pct == pytest.approx(100 * np.std(x, ddof=1) / np.mean(x))
    assert (row.ci_low, row.ci_high) == pytest.approx(binomial_median_ci(x))


def test_summarize_flags_cv_drift_failures_and_small_n():
    trend = np.linspace(30, 40, 10)  # rises with run order, CV ~ 10 %
    runs, metrics = make_tables(
        {
            ("host", "tcp_stream_1"): {("throughput", "none"): trend},
            ("vxlan", "tcp_stream_1"): {("throughput", "none"): [40, 40.1, 39.9, 40, 40.05]},
        },
        failed={("vxlan", "tcp_stream_1"): 2},
    )
    s = by(stats.summarize(metrics, runs), "scenario")
    ranks = np.arange(10)
    assert s["host"]["drift_rho"] == pytest.approx(np.corrcoef(ranks, rankdata(trend))[0, 1])
    assert "drift" in s["host"]["flags"] and "CV" in s["host"]["flags"]
    assert s["vxlan"]["n"] == 5  # failed runs are not in the sample ...
    assert s["vxlan"]["failed_runs"] == 2  # ... but counted
    assert math.isnan(s["vxlan"]["ci_low"])
    assert s["vxlan"]["flags"] == "insufficient n (5 < 6); 2 failed run(s)"


def test_summarize_excludes_metric_rows_of_failed_runs():
    runs, metrics = two_configs(np.arange(1.0, 9), np.arange(1.0, 9))
    runs = runs.with_columns(
        outcome=pl.when(pl.col("run_id") == "host-tcp_stream_1-0").then(pl.lit("failed")).otherwise("outcome")
    )
    s = by(stats.summarize(metrics, runs), "scenario")
    assert s["host"]["n"] == 7 and s["host"]["failed_runs"] == 1


def test_drift_uses_run_order_not_table_order():
    runs, metrics = two_configs(np.linspace(30, 40, 10), np.linspace(30, 40, 10))
    # shuffle the table rows: the order comes from started_at
    s = stats.summarize(metrics.sample(fraction=1, shuffle=True, seed=0), runs)
    assert s["drift_rho"].to_list() == pytest.approx([1.0, 1.0])


def test_constant_sample_has_no_drift_or_cv_flag():
    runs, metrics = two_configs(np.full(8, 3.0), np.zeros(8))
    s = by(stats.summarize(metrics, runs), "scenario")
    assert math.isnan(s["host"]["drift_rho"])
    assert s["host"]["cv_pct"] == 0.0 and s["host"]["flags"] == ""
    assert math.isnan(s["vxlan"]["cv_pct"])


# -- headline and JSON ----------------------------------------------------------------


def test_headline_puts_baseline_first(lab_tables):
    runs, metrics = lab_tables
    fam = metrics.filter(metric="throughput")
    h = tables.headline(stats.summarize(fam, runs), stats.compare(fam, runs), baseline="host")
    stream = h.filter(test="tcp_stream_1")
    assert stream["scenario"].to_list() == ["host", "bridge", "veth-routed", "vxlan"]
    assert stream["verdict"][0] == "baseline"
    assert stream["verdict"][3].endswith("worse")
    assert "[" in stream["median [95 % CI]"][0]


def test_metrics_dict_is_strict_json(lab_tables):
    runs, metrics = lab_tables
    fam = metrics.filter(pl.col("metric").is_in(["throughput", "retransmits"]))
    d = stats.to_metrics_dict(stats.summarize(fam, runs), stats.compare(fam, runs), baseline="host")
    text = json.dumps(d, allow_nan=False)  # retransmits have zeros: delta is null, not NaN
    key = "c1/local-lab/vxlan/tcp_stream_1/throughput/none"
    assert json.loads(text)["comparisons"][key]["verdict"].endswith("worse")
    assert isinstance(next(iter(d["summary"].values()))["median"], float)


@pytest.mark.parametrize("n1,n2", [(6, 6), (6, 10), (10, 10)])
def test_smallest_p_is_two_over_the_number_of_splits(n1, n2):
    assert stats.smallest_p(n1, n2) == pytest.approx(2 / math.comb(n1 + n2, n1))


def test_contrasts_join_the_family_and_name_their_reference(lab_tables):
    runs, metrics = lab_tables
    fam = metrics.filter(metric="throughput")
    plain = stats.compare(fam, runs, baseline="host")
    c = stats.compare(fam, runs, baseline="host", contrasts=[("vxlan", "bridge"), ("vxlan", "moon")])
    extra = c.filter(baseline="bridge")
    assert len(c) == len(plain) + 2 and set(extra["scenario"]) == {"vxlan"}  # moon was not measured
    assert set(extra["test"]) == {"tcp_stream_1", "tcp_stream_n"}
    # vxlan is 0.8 of host and bridge 0.96: -17 % vs bridge
    assert extra["delta_pct"].to_numpy() == pytest.approx([100 * (0.8 / 0.96 - 1)] * 2, abs=2)
    # one family: Holm over all comparisons, so each p_adj is at least the plain one
    merged = plain.join(c.filter(baseline="host"), on=stats.CONFIG, suffix="_c", nulls_equal=True)
    assert len(merged) == len(plain)
    assert (merged["p_adj_c"] >= merged["p_adj"] - 1e-12).all()
    h = tables.headline(stats.summarize(fam, runs), c, baseline="host")
    assert len(h) == len(stats.summarize(fam, runs))  # contrasts do not duplicate headline rows
    d = stats.to_metrics_dict(stats.summarize(fam, runs), c, baseline="host")
    assert "c1/local-lab/vxlan vs bridge/tcp_stream_1/throughput/none" in d["comparisons"]
    assert "c1/local-lab/vxlan/tcp_stream_1/throughput/none" in d["comparisons"]


def test_large_samples_use_the_normal_approximation():
    rng = np.random.default_rng(3)
    x, y = rng.normal(100, 5, 200), rng.normal(102, 5, 200)
    u, p, method = stats.mann_whitney(x, y)
    assert method == "asymptotic"
    # the z statistic by hand (no ties): U's mean n1 n2 / 2 and variance n1 n2 (n1 + n2 + 1) / 12
    z = (u - 200 * 200 / 2) / math.sqrt(200 * 200 * 401 / 12)
    assert p == pytest.approx(2 * scipy_stats.norm.sf(abs(z) - 0.5 / math.sqrt(200 * 200 * 401 / 12)), rel=1e-6)
    assert stats.mann_whitney(x[:8], y[:8])[2] == "exact"


# -- the CI of the change at large n ------------------------------------------------


def test_delta_ci_method_switches_above_fifty_runs_per_side():
    assert stats.delta_ci_method(50, 200) == "bootstrap"
    assert stats.delta_ci_method(51, 51) == "maritz-jarrett"
    rng = np.random.default_rng(5)
    runs, metrics = two_configs(rng.lognormal(0, 0.05, 60) * 40, rng.lognormal(0, 0.05, 60) * 36)
    row = first(stats.compare(metrics, runs))
    assert (row.test_method, row.delta_method) == ("asymptotic", "maritz-jarrett")
    assert row.delta_low < row.delta_pct < row.delta_high and row.verdict.endswith("worse")


@pytest.mark.parametrize("n", [60, 100, 200])
def test_maritz_jarrett_ci_agrees_with_the_bootstrap(n):
    """Tolerance: each endpoint within 0.4 of the bootstrap interval's half-width (worst over these seeds,
    measured: 0.37 at n = 60, 0.22 at n = 100, 0.25 at n = 200; below 50 runs it reached 0.49, which is
    why the bootstrap stays there)."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        x, y = rng.lognormal(0, 0.08, n) * 0.95, rng.lognormal(0, 0.08, n)
        boot = scipy_stats.bootstrap(
            (x, y),
            lambda a, b, axis: np.log(np.median(a, axis=axis) / np.median(b, axis=axis)),
            n_resamples=9999,
            vectorized=True,
            method="percentile",
            rng=0,
        )
        ref = 100 * np.expm1([boot.confidence_interval.low, boot.confidence_interval.high])
        delta, lo, hi = stats.delta_pct(x, y)
        assert delta == pytest.approx(100 * (np.median(x) / np.median(y) - 1))
        assert [lo, hi] == pytest.approx(ref, abs=0.4 * (ref[1] - ref[0]) / 2)


def test_maritz_jarrett_ci_covers_the_true_ratio():
    # 400 simulated pairs of 60 runs, true median ratio 0.95: a 95 % interval covers it about 95 % of the time
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(400):
        x, y = rng.lognormal(0, 0.08, 60) * 0.95, rng.lognormal(0, 0.08, 60)
        _, lo, hi = stats.delta_pct(x, y)
        covered += lo <= -5.0 <= hi
    assert 0.93 <= covered / 400 <= 0.98


def test_non_finite_values_are_excluded_with_a_note_not_called_insufficient():
    runs, metrics = two_configs(np.linspace(39.5, 40.5, 8), np.linspace(31.5, 32.5, 8))
    nan_runs = ["vxlan-tcp_stream_1-0", "vxlan-tcp_stream_1-1", "vxlan-tcp_stream_1-2"]
    metrics = metrics.with_columns(
        value=pl.when(pl.col("run_id").is_in(nan_runs)).then(float("nan")).otherwise("value")
    )
    s = by(stats.summarize(metrics, runs), "scenario")
    assert s["vxlan"]["n"] == 5 and s["vxlan"]["excluded"] == 3
    assert "3 non-finite value(s) excluded" in s["vxlan"]["flags"]
    assert s["vxlan"]["median"] == pytest.approx(np.median(np.linspace(31.5, 32.5, 8)[3:]))
    row = first(stats.compare(metrics, runs))
    assert row.verdict == "not tested: 3 non-finite value(s) excluded" and row.excluded == 3


def test_every_run_failed_gives_empty_tables_not_errors():
    runs, metrics = two_configs(np.ones(6), np.ones(6))
    runs = runs.with_columns(outcome=pl.lit("failed"))
    assert stats.summarize(metrics, runs).is_empty()
    c = stats.compare(metrics, runs)
    assert c.is_empty() and c.columns == stats.COMPARISON_COLUMNS
    assert tables.headline(stats.summarize(metrics, runs), c, "host").is_empty()


def test_two_settings_of_one_test_are_never_pooled():
    base, other = np.linspace(39.5, 40.5, 8), np.linspace(31.5, 32.5, 8)
    runs, metrics = two_configs(np.concatenate([base, base * 2]), np.concatenate([other, other * 2]))
    # the second half of each scenario's runs was measured with another duration under the same test name
    second = runs["block"] >= 8
    runs = runs.with_columns(test_params=pl.when(second).then(pl.lit('{"duration_s":60}')).otherwise("test_params"))
    c = stats.compare(metrics, runs)
    assert len(c) == 2 and set(c["n"]) == {8}
    assert sorted(c["median_base"]) == pytest.approx([np.median(base), np.median(base * 2)])


# -- families, decision level, intervals at that level ----------------------------------


@pytest.mark.parametrize("correction", ["holm", "fdr_bh"])
def test_decision_level_separates_rejected_from_the_rest(correction):
    """p < level exactly where p_adj < alpha, whatever the family (none, some or all rejected)."""
    rng = np.random.default_rng(3)
    for m in (1, 2, 5, 12, 60):
        for _ in range(30):
            p = np.where(rng.random(m) < 0.5, rng.random(m) * 0.01, rng.random(m))
            p_adj = stats.adjust(p, correction)
            level = stats.decision_level(p_adj, 0.05, correction)
            assert np.array_equal(p < level, p_adj < 0.05), (p, level)


def test_decision_level_by_hand():
    # Holm, 4 tests, 1 rejected: the procedure stopped at step 2, threshold 0.05 / 3
    assert stats.decision_level(stats.adjust([0.001, 0.02, 0.3, 0.5], "holm"), 0.05, "holm") == pytest.approx(0.05 / 3)
    assert stats.decision_level(stats.adjust([0.5, 0.6], "holm"), 0.05, "holm") == pytest.approx(0.025)
    # BH: 2 of 4 rejected -> 2 * 0.05 / 4; none -> 0.05 / 4
    assert stats.decision_level(stats.adjust([0.001, 0.02, 0.3, 0.5], "fdr_bh"), 0.05, "fdr_bh") == pytest.approx(0.025)
    assert stats.decision_level(stats.adjust([0.2, 0.3, 0.4, 0.5], "fdr_bh"), 0.05, "fdr_bh") == pytest.approx(0.0125)
    assert math.isnan(stats.decision_level([math.nan], 0.05, "holm"))


@pytest.mark.parametrize(
    "kind,paced,present,expected",
    [
        ("TCP_STREAM", False, {"throughput", "retransmits"}, "throughput"),
        ("TCP_CRR", False, {"connection_rate", "latency_p50"}, "connection_rate"),
        ("UDP_STREAM", False, {"throughput", "udp_loss_pct"}, "udp_loss_pct"),
        ("HTTP", False, {"http_qps", "http_latency_p50"}, "http_qps"),
        ("HTTP", True, {"http_qps", "http_latency_p50"}, "http_latency_p50"),  # the rate is the client's
        ("DNS_UDP", True, {"dns_qps", "dns_latency_p50"}, "dns_latency_p50"),
        ("TCP_STREAM", False, {"transaction_rate"}, "transaction_rate"),  # kind's metric absent: first primary
        ("TCP_RR", False, {"latency_p99"}, None),
    ],
)
def test_headline_metric(kind, paced, present, expected):
    from benchlib.vocabulary.schema import headline_metric

    assert headline_metric(kind, paced, present) == expected


def test_compare_corrects_within_families(lab_tables):
    runs, metrics = lab_tables
    values = normalize_values(lab_tables)
    compared = stats.compared_values(values, runs, ["latency_p50", "cpu_pct_at_target"])
    # each test's headline metric is compared even though family_metrics does not name it
    assert {"throughput", "transaction_rate", "connection_rate"} <= set(compared["metric"])
    assert "latency_p99" not in set(compared["metric"])
    c = stats.compare(compared, runs, baseline="host")
    assert set(c["family"]) == {stats.PRIMARY, stats.LATENCY, stats.CPU}
    for (family,), g in c.group_by("family"):
        correction = "holm" if family == stats.PRIMARY else "fdr_bh"
        assert g["p_adj"].to_numpy() == pytest.approx(stats.adjust(g["p"].to_numpy(), correction))
        level = stats.decision_level(g["p_adj"].to_numpy(), 0.05, correction)
        assert g["ci_level"].to_numpy() == pytest.approx(1 - level)
    # the interval drawn is the bootstrap interval at that level
    r = c.filter(family=stats.PRIMARY, scenario="vxlan", test="tcp_rr").row(0, named=True)
    x, y = (
        stats.ok_values(compared, runs)
        .filter(scenario=s, test="tcp_rr", metric="transaction_rate")
        .sort("started_at")["value"]
        .to_numpy()
        for s in ("vxlan", "host")
    )
    assert (r["delta_pct"], r["delta_low"], r["delta_high"]) == pytest.approx(
        stats.delta_pct(x, y, confidence=r["ci_level"])
    )
    # one family of its own when asked (a report section)
    one = stats.compare(compared, runs, baseline="host", correction="fdr_bh", family="mesh")
    assert set(one["family"]) == {"mesh"} and set(one["correction"]) == {"FDR (Benjamini-Hochberg)"}


def normalize_values(tables):
    from benchlib.analysis import normalize

    runs, metrics = tables
    return normalize.with_cpu_at_target(metrics, runs)


# -- minimum detectable effect ----------------------------------------------------------


@pytest.mark.parametrize("n,n_base,alpha", [(8, 8, 0.05 / 12), (10, 10, 0.05 / 12), (8, 12, 0.05 / 4)])
def test_mde_has_the_planned_power_in_a_simulation(n, n_base, alpha):
    """Log-normal runs shifted by the MDE: exact Mann-Whitney rejects in about 80 % of campaigns (the
    t test's power with n scaled by 3/pi; the exact test's discreteness costs a few points at n = 8)."""
    sd = 0.05
    mde = stats.mde_pct(n, n_base, sd, alpha)
    rng = np.random.default_rng(7)
    x = np.exp(math.log1p(mde / 100) + sd * rng.standard_normal((4000, n)))
    y = np.exp(sd * rng.standard_normal((4000, n_base)))
    power = (scipy_stats.mannwhitneyu(x, y, axis=1, method="exact").pvalue < alpha).mean()
    assert power == pytest.approx(stats.POWER, abs=0.07), (mde, power)


def test_mde_scales_with_spread_and_falls_with_n():
    assert stats.mde_pct(8, 8, 0.02, 0.01) == pytest.approx(
        100 * math.expm1(2 * math.log1p(stats.mde_pct(8, 8, 0.01, 0.01) / 100))
    )
    assert stats.mde_pct(20, 20, 0.02, 0.01) < stats.mde_pct(10, 10, 0.02, 0.01)
    assert math.isnan(stats.mde_pct(8, 8, 0.0, 0.01)) and math.isnan(stats.mde_pct(5, 8, 0.02, 0.01))


def test_mde_not_attainable_below_the_smallest_p():
    """n = 6 per side: smallest p 2/924 = 0.0022 > 0.05/60; 7 per side reach 2/3432 = 0.00058."""
    assert math.isnan(stats.mde_pct(6, 6, 0.02, 0.05 / 60))
    assert stats.n_attainable(0.05 / 60) == 7
    assert stats.n_attainable(0.05) == 4  # 2/70 < 0.05, 2/20 is not
    runs, metrics = two_configs(np.linspace(39, 41, 6), np.linspace(30, 31, 6))
    row = first(stats.compare(metrics, runs, alpha=0.001))
    assert row.n_attainable == stats.n_attainable(0.001) and math.isnan(row.mde_pct)
    assert fmt.mde_text(row.__dict__) == f"not attainable at n = 6 (needs n >= {row.n_attainable})"


def test_n_for_effect_detects_that_effect():
    n = stats.n_for_effect(5.0, 0.05, 0.05 / 12)
    assert stats.mde_pct(n, n, 0.05, 0.05 / 12) <= 5.0 < stats.mde_pct(n - 1, n - 1, 0.05, 0.05 / 12)
    assert stats.n_for_effect(50.0, 0.001, 0.05 / 60) == stats.n_attainable(0.05 / 60)  # discreteness binds
    assert stats.n_for_effect(5.0, math.nan, 0.01) is None
