# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Significance vs the baseline

# %% tags=["parameters"]
# The `analysis` section of params.yaml and the pipeline's paths (relative to
# the project root): `benchlib report` (papermill) passes the values of the
# campaign's params.yaml; tests/analysis/test_report.py keeps these defaults
# equal to the project's params.yaml, so JupyterLab shows what `dvc repro` does.
baseline = "host"  # every scenario is compared with this one
alpha = 0.05  # significance level
correction = "holm"  # holm, or fdr_bh for large sweeps
cpu_target_gbps = 100.0  # stream tests: CPU % for this throughput
rr_per_transactions = 10000.0  # TCP_RR: CPU % per this many transactions/s
crr_per_connections = 10000.0  # TCP_CRR: CPU % per this many connections/s
http_per_requests = 1000.0  # HTTP (fortio): CPU % per this many requests/s
noise_band_pct = 2.0  # significant changes inside +/- this % are negligible
family_metrics = ["throughput", "transaction_rate", "connection_rate", "latency_p50", "latency_p99",
                  "cpu_pct_at_target"]
seed = 0  # bootstrap and permutation seed
contrasts = []  # extra [scenario, reference] comparisons
metrics_path = "data/processed/metrics.parquet"
runs_path = "data/processed/runs.parquet"
out_dir = "reports"

# %%
import json

import polars as pl
from IPython.display import Markdown, display

from benchlib.analysis import comparisons_path, figures, load_tables, normalize, report, resolve, stats

figures.use_report_renderer()  # headless kernels need it; the report page carries plotly.js once
report.display_tables()
runs, metrics = load_tables(runs_path, metrics_path)
out = resolve(out_dir)
out.mkdir(parents=True, exist_ok=True)

# %%
values = normalize.with_cpu_at_target(metrics, runs, target_gbps=cpu_target_gbps,
                                      per_transactions=rr_per_transactions, per_connections=crr_per_connections,
                                      per_requests=http_per_requests)
family = values.filter(pl.col("metric").is_in(family_metrics))
summary = stats.summarize(family, runs, alpha=alpha)
comparisons = stats.compare(family, runs, baseline=baseline, alpha=alpha, correction=correction,
                            noise_band_pct=noise_band_pct, seed=seed, contrasts=contrasts)
display(Markdown(
    f"Each scenario against **{baseline}**"
    + (f", plus the contrasts {', '.join(f'{a} vs {b}' for a, b in contrasts)}" if contrasts else "")
    + f": {len(comparisons)} comparisons over the metrics "
    f"{', '.join(f'`{m}`' for m in family_metrics)}, two-sided Mann-Whitney U, "
    f"{comparisons['correction'][0] if len(comparisons) else correction} correction at alpha = {alpha}. "
    "Verdicts: `~ within noise` (not significant after correction), `negligible` (significant, but the "
    "95 % CI of the change lies inside the noise band), otherwise the change in % with its 95 % CI and "
    "whether that is better or worse for the metric."))
if comparisons.is_empty():
    ok_scenarios = set(runs.filter(pl.col("outcome") == "ok")["scenario"])
    display(Markdown(
        "**No comparison was made:** " + (f"the baseline `{baseline}` has no successful run." if ok_scenarios
                                          else "no run of this campaign succeeded (see Caveats).")))

# %%
# With few runs and many comparisons no result can reach significance: say so
# instead of letting "~ within noise" read as "no difference".
tested = comparisons.filter(pl.col("p").is_not_nan())
if len(tested):
    floor = min(stats.smallest_p(n, n_base) for n, n_base in tested.select("n", "n_base").iter_rows())
    floor_adj = floor * len(tested) if correction == "holm" else floor
    if floor_adj >= alpha:
        display(Markdown(
            f"**Caveat: too few runs for this family.** With these run counts the smallest possible p-value is "
            f"{floor:.2g}; after {correction} over {len(tested)} comparisons it is at least {floor_adj:.2g} "
            f">= alpha = {alpha}, so every verdict is `~ within noise` whatever the data. More runs per "
            "configuration (10 planned), fewer metrics in `family_metrics` or `correction='fdr_bh'` help."))

# %% [markdown]
# ## Headline table

# %%
table = stats.headline(summary, comparisons, baseline=baseline)
report.formatted(table, {"delta_pct": "{:+.1f}", "p_adj": "{:.3g}"})

# %% [markdown]
# ## Contrasts
# Comparisons against another reference than the baseline (`analysis.contrasts`),
# corrected in the same family as the headline table.

# %%
contrast_rows = comparisons.filter(pl.col("baseline") != baseline)
if contrast_rows.is_empty():
    display(Markdown("No contrasts configured, or their scenarios were not measured."))
else:
    display(report.formatted(
        contrast_rows.select("test", "metric", "side", "unit", "scenario", "baseline", "n", "n_base", "median",
                             "median_base", "delta_pct", "p_adj", "verdict")
        .rename({"baseline": "reference", "median_base": "median_reference"}),
        {"median": "{:.4g}", "median_reference": "{:.4g}", "delta_pct": "{:+.1f}", "p_adj": "{:.3g}"}))

# %%
# The comparison is computed here only: 03_figures reads this file.
comparisons.write_parquet(comparisons_path(out_dir))
comparisons.drop("u").write_csv(out / "significance.csv")
_ = (out / "metrics.json").write_text(json.dumps(
    {"baseline": baseline, "alpha": alpha, "correction": correction, "cpu_target_gbps": cpu_target_gbps,
     **stats.to_metrics_dict(summary, comparisons, baseline)}, indent=2, allow_nan=False))

# %% [markdown]
# ## Caveats
# Configurations flagged by the checks: fewer than 6 runs, CV above 5 %,
# drift (Spearman correlation of value with run order, p < alpha), failed
# runs, non-finite values. Failed runs and non-finite values are excluded
# from the statistics and counted here.

# %%
flagged, failed = report.caveats(summary, runs)
display(Markdown(f"{len(flagged)} flagged configuration(s), {failed['failed_runs'].sum()} failed run(s)."))
if len(flagged):
    display(report.formatted(flagged, {"cv_pct": "{:.3g}", "drift_rho": "{:+.3f}", "drift_p": "{:.3g}"}))
if len(failed):
    display(failed)
