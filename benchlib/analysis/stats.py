"""Per-configuration summaries and comparisons against a baseline.

Implements docs/design.md "Statistics": the unit is the run; medians
with distribution-free CIs; Mann-Whitney U against the baseline with a
family-wise correction; effect = median ratio - 1 with a bootstrap CI.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests

from benchlib.schema import metric_info

# A configuration: everything that identifies one sample of runs of one metric.
CONFIG = ["campaign", "environment", "scenario", "test", "streams", "message_size", "metric", "side"]
# Two configurations are compared when they differ only in the scenario.
PEERS = [c for c in CONFIG if c != "scenario"]
RUN_CONFIG = ["campaign", "environment", "scenario", "test", "streams", "message_size"]

# Below 6 runs no two-sided 95 % distribution-free CI of the median exists
# (0.5**5 * 2 > 0.05), so neither a CI nor a verdict is given.
MIN_N = 6
INSUFFICIENT = "insufficient n"
WITHIN_NOISE = "~ within noise"
NEGLIGIBLE = "negligible"

CORRECTIONS = {"holm": "Holm", "fdr_bh": "FDR (Benjamini-Hochberg)"}


def ok_values(metrics: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Metric rows of successful runs only, with each run's start time (for run order)."""
    ok = runs.loc[runs["outcome"] == "ok", ["run_id", "started_at"]]
    return metrics.merge(ok, on="run_id", how="inner", validate="many_to_one")


def failed_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs whose outcome is not 'ok', counted per configuration (with their reasons)."""
    bad = runs[runs["outcome"] != "ok"]
    return (bad.groupby(RUN_CONFIG, dropna=False)
            .agg(failed_runs=("run_id", "size"),
                 reasons=("failure_reason", lambda r: "; ".join(sorted(set(r.dropna().astype(str))))))
            .reset_index())


def median_ci(x: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median (order statistics, binomial); NaN below MIN_N runs."""
    if len(x) < MIN_N:
        return math.nan, math.nan
    ci = stats.quantile_test(x, q=np.median(x), p=0.5).confidence_interval(confidence)
    return float(ci.low), float(ci.high)


def drift(x_in_run_order: np.ndarray) -> tuple[float, float]:
    """Spearman rho and p-value of value vs run order; NaN when undefined (n < 3 or constant)."""
    if len(x_in_run_order) < 3:
        return math.nan, math.nan
    with warnings.catch_warnings():
        # constant samples have no rank correlation; NaN says so
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        res = stats.spearmanr(np.arange(len(x_in_run_order)), x_in_run_order)
    return float(res.statistic), float(res.pvalue)


def _cv_pct(x: np.ndarray) -> float:
    if len(x) < 2:
        return math.nan
    with np.errstate(invalid="ignore", divide="ignore"):  # all-zero samples: CV undefined
        return float(100 * stats.variation(x, ddof=1))


def _flags(row, alpha: float, cv_limit_pct: float) -> str:
    out = []
    if row.n < MIN_N:
        out.append(f"{INSUFFICIENT} ({row.n} < {MIN_N})")
    if row.cv_pct > cv_limit_pct:
        out.append(f"CV {row.cv_pct:.1f} % > {cv_limit_pct:g} %")
    if row.drift_p < alpha:
        out.append(f"drift (Spearman rho {row.drift_rho:+.2f}, p {row.drift_p:.3f})")
    if row.failed_runs:
        out.append(f"{row.failed_runs} failed run(s)")
    return "; ".join(out)


def summarize(metrics: pd.DataFrame, runs: pd.DataFrame, alpha: float = 0.05,
              cv_limit_pct: float = 5.0) -> pd.DataFrame:
    """One row per configuration: n, median and its 95 % CI, IQR, CV, drift, failed runs, flags."""
    rows = []
    for key, g in ok_values(metrics, runs).groupby(CONFIG, dropna=False, sort=True):
        x = g.sort_values("started_at")["value"].to_numpy(float)
        lo, hi = median_ci(x)
        rho, p = drift(x)
        rows.append({**dict(zip(CONFIG, key)), "unit": g["unit"].iloc[0], "n": len(x),
                     "median": float(np.median(x)), "ci_low": lo, "ci_high": hi,
                     "iqr": float(stats.iqr(x)), "cv_pct": _cv_pct(x), "drift_rho": rho, "drift_p": p})
    df = pd.DataFrame(rows, columns=CONFIG + ["unit", "n", "median", "ci_low", "ci_high", "iqr", "cv_pct",
                                              "drift_rho", "drift_p"])
    df = df.merge(failed_runs(runs)[RUN_CONFIG + ["failed_runs"]], on=RUN_CONFIG, how="left")
    df["failed_runs"] = df["failed_runs"].fillna(0).astype(int)
    df["flags"] = [_flags(r, alpha, cv_limit_pct) for r in df.itertuples()]
    return df


# Above this many runs per side the normal approximation (with tie correction)
# is accurate to well below any alpha in use, and exact or permutation
# p-values cost time that grows with n (a 100k-run campaign has n ~ 1000).
EXACT_MAX_N = 50


def mann_whitney(x: np.ndarray, y: np.ndarray, seed: int = 0, n_resamples: int = 9999) -> tuple[float, float, str]:
    """Two-sided Mann-Whitney U of x vs y: (U of x, p, method).

    scipy's exact null distribution assumes no ties, so with ties the p-value
    comes from permutations (all of them when there are at most n_resamples);
    large samples use the normal approximation.
    """
    if min(len(x), len(y)) > EXACT_MAX_N:
        method = "asymptotic"
    elif np.unique(np.concatenate([x, y])).size < len(x) + len(y):
        method = "permutation"
    else:
        method = "exact"
    how = stats.PermutationMethod(n_resamples=n_resamples, rng=seed) if method == "permutation" else method
    res = stats.mannwhitneyu(x, y, alternative="two-sided", method=how)
    return float(res.statistic), float(res.pvalue), method


def smallest_p(n1: int, n2: int) -> float:
    """The smallest two-sided Mann-Whitney p that n1 vs n2 runs can give (complete separation)."""
    return float(stats.mannwhitneyu(np.arange(n1), np.arange(n1, n1 + n2), method="exact").pvalue)


def _log_median_ratio(x, y, axis=-1):
    return np.log(np.median(x, axis=axis)) - np.log(np.median(y, axis=axis))


def delta_pct(x: np.ndarray, y: np.ndarray, seed: int = 0, n_resamples: int = 9999,
              confidence: float = 0.95) -> tuple[float, float, float]:
    """median(x)/median(y) - 1 in %, with a bootstrap CI of the log median ratio.

    Percentile intervals, not BCa: BCa's jackknife acceleration is unreliable
    for a non-smooth statistic like the median. NaN when a value is <= 0
    (the log ratio is undefined, e.g. zero retransmits).
    """
    if min(x.min(), y.min()) <= 0:
        return math.nan, math.nan, math.nan
    res = stats.bootstrap((x, y), _log_median_ratio, n_resamples=n_resamples, vectorized=True,
                          method="percentile", confidence_level=confidence, rng=seed)
    ci = res.confidence_interval
    delta, lo, hi = 100 * np.expm1([_log_median_ratio(x, y), ci.low, ci.high])
    return float(delta), float(lo), float(hi)


def adjust(p: np.ndarray, correction: str = "holm", alpha: float = 0.05) -> np.ndarray:
    """p-values adjusted over the whole family; NaN entries are not part of it."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {sorted(CORRECTIONS)}, got {correction!r}")
    p = np.asarray(p, float)
    out = np.full_like(p, np.nan)
    tested = ~np.isnan(p)
    if tested.any():
        # method named explicitly: statsmodels' default is Holm-Sidak
        out[tested] = multipletests(p[tested], alpha=alpha, method=correction)[1]
    return out


def noise_band(metric: str, noise_band_pct: float | Mapping[str, float]) -> float:
    """The +/- % band inside which a significant change is called negligible."""
    if not isinstance(noise_band_pct, Mapping):
        return float(noise_band_pct)
    band = noise_band_pct.get(metric, noise_band_pct.get("default"))
    if band is None:
        raise ValueError(f"no noise band for metric {metric!r}: add it or a 'default' to noise_band_pct")
    return float(band)


def verdict(p_adj: float, delta: float, low: float, high: float, alpha: float,
            band_pct: float, higher_is_better: bool) -> str:
    """The label shown next to a comparison (NaN p_adj means it was not tested: too few runs)."""
    if math.isnan(p_adj):
        return INSUFFICIENT
    if p_adj >= alpha:
        return WITHIN_NOISE
    if math.isnan(delta):
        return "different (median ratio undefined: values <= 0)"
    if -band_pct <= low and high <= band_pct:
        return NEGLIGIBLE
    if delta == 0:
        word = "same median"
    else:
        word = "better" if (delta > 0) == higher_is_better else "worse"
    return f"{delta:+.1f} % [{low:+.1f}, {high:+.1f}] {word}"


def _samples(values: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration holding its values (object column x) and unit."""
    return pd.DataFrame([
        {**dict(zip(CONFIG, key)), "unit": g["unit"].iloc[0], "x": g["value"].to_numpy(float)}
        for key, g in values.groupby(CONFIG, dropna=False, sort=True)
    ], columns=CONFIG + ["unit", "x"])


def compare(metrics: pd.DataFrame, runs: pd.DataFrame, baseline: str = "host", alpha: float = 0.05,
            correction: str = "holm", noise_band_pct: float | Mapping[str, float] = 2.0,
            seed: int = 0, n_resamples: int = 9999,
            contrasts: Sequence[Sequence[str]] = ()) -> pd.DataFrame:
    """Every configuration vs the same configuration in the baseline scenario, plus each
    (scenario, reference) of `contrasts` (e.g. notrack vs conntrack), wherever both were measured.

    The family for the correction is every comparison made here: pass only
    the metrics (and contrasts) that stand behind one report.
    """
    cells = _samples(ok_values(metrics, runs))
    present = set(cells["scenario"])
    if baseline not in present:
        raise ValueError(f"baseline scenario {baseline!r} has no successful runs; "
                         f"scenarios present: {sorted(present)}")
    against = [(s, baseline) for s in sorted(present - {baseline})]
    against += [(s, ref) for s, ref in contrasts if {s, ref} <= present and (s, ref) not in against]
    pairs = [
        cells[cells["scenario"] == s].merge(
            cells[cells["scenario"] == ref].drop(columns=["scenario", "unit"]), on=PEERS, suffixes=("", "_base"))
        .assign(baseline=ref)
        for s, ref in against
    ]
    pairs = pd.concat(pairs, ignore_index=True) if pairs else pd.DataFrame()
    rows = []
    for r in pairs.itertuples():
        x, y = r.x, r.x_base
        row = {**{c: getattr(r, c) for c in CONFIG}, "unit": r.unit, "baseline": r.baseline,
               "n": len(x), "n_base": len(y), "median": float(np.median(x)), "median_base": float(np.median(y)),
               "u": math.nan, "p": math.nan, "test_method": "", "delta_pct": math.nan,
               "delta_low": math.nan, "delta_high": math.nan}
        if min(len(x), len(y)) >= MIN_N:
            row["u"], row["p"], row["test_method"] = mann_whitney(x, y, seed, n_resamples)
            row["delta_pct"], row["delta_low"], row["delta_high"] = delta_pct(x, y, seed, n_resamples)
        rows.append(row)
    df = pd.DataFrame(rows, columns=CONFIG + ["unit", "baseline", "n", "n_base", "median", "median_base",
                                              "u", "p", "test_method", "delta_pct", "delta_low", "delta_high"])
    df["p_adj"] = adjust(df["p"].to_numpy(), correction, alpha)
    df["correction"] = CORRECTIONS[correction]
    df["noise_band_pct"] = [noise_band(m, noise_band_pct) for m in df["metric"]]
    df["verdict"] = [
        verdict(r.p_adj, r.delta_pct, r.delta_low, r.delta_high, alpha, r.noise_band_pct,
                metric_info(r.metric).higher_is_better)
        for r in df.itertuples()
    ]
    return df


def _fmt(v: float) -> str:
    return "–" if math.isnan(v) else f"{v:.4g}"


def headline(summary: pd.DataFrame, comparisons: pd.DataFrame, baseline: str = "host") -> pd.DataFrame:
    """benchstat-like table: per test x metric x side, each scenario's median [95 % CI] and its verdict."""
    cmp_cols = PEERS + ["scenario", "delta_pct", "p_adj", "verdict"]
    df = summary.merge(comparisons.loc[comparisons["baseline"] == baseline, cmp_cols], on=CONFIG, how="left")
    df["verdict"] = df["verdict"].where(df["scenario"] != baseline, "baseline")
    df["median [95 % CI]"] = [
        f"{_fmt(r.median)} [{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]" if r.n >= MIN_N else f"{_fmt(r.median)} ({INSUFFICIENT})"
        for r in df.itertuples()
    ]
    df["_base_first"] = df["scenario"] != baseline
    df = df.sort_values(["environment", "test", "metric", "side", "_base_first", "scenario"], kind="stable")
    cols = ["environment", "test", "metric", "side", "unit", "scenario", "n", "median [95 % CI]",
            "delta_pct", "p_adj", "verdict", "flags"]
    return df[cols].reset_index(drop=True)


def _json_number(v):
    return None if isinstance(v, float) and math.isnan(v) else v


def to_metrics_dict(summary: pd.DataFrame, comparisons: pd.DataFrame, baseline: str) -> dict:
    """Headline numbers keyed campaign/environment/scenario/test/metric/side, JSON-ready (NaN -> null).

    A contrast (a comparison not against `baseline`) names its reference in
    the scenario part: ".../notrack vs conntrack/...".
    """
    def key(r) -> str:
        scenario = r.scenario if getattr(r, "baseline", baseline) == baseline else f"{r.scenario} vs {r.baseline}"
        return "/".join(str(v) for v in (r.campaign, r.environment, scenario, r.test, r.metric, r.side))


    return {
        "summary": {key(r): {c: _json_number(float(getattr(r, c))) for c in ("n", "median", "ci_low", "ci_high", "cv_pct")}
                    for r in summary.itertuples()},
        "comparisons": {key(r): {**{c: _json_number(float(getattr(r, c)))
                                    for c in ("median_base", "median", "delta_pct", "delta_low", "delta_high", "p", "p_adj")},
                                 "baseline": r.baseline, "correction": r.correction, "verdict": r.verdict}
                        for r in comparisons.itertuples()},
    }
