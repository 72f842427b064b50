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
correction = "holm"  # the primary family: holm, or fdr_bh for large sweeps
cpu_target_gbps = 100.0  # stream tests: CPU % for this throughput
rr_per_transactions = 10000.0  # TCP_RR: CPU % per this many transactions/s
crr_per_connections = 10000.0  # TCP_CRR: CPU % per this many connections/s
http_per_requests = 1000.0  # HTTP (fortio): CPU % per this many requests/s
noise_band_pct = 2.0  # significant changes inside +/- this % are negligible
family_metrics = ["latency_p50", "latency_p99", "cpu_pct_at_target"]  # secondary metrics (FDR per kind)
seed = 0  # bootstrap and permutation seed
contrasts = []  # extra [scenario, reference] comparisons
metrics_path = "data/processed/metrics.parquet"
runs_path = "data/processed/runs.parquet"
out_dir = "reports"
metrics_json = ""  # where metrics.json goes; "": <out_dir>/metrics.json (`benchlib report` moves it there at the end)

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
compared = stats.compared_values(values, runs, family_metrics)
summary = stats.summarize(compared, runs, alpha=alpha)
comparisons = stats.compare(compared, runs, baseline=baseline, alpha=alpha, correction=correction,
                            noise_band_pct=noise_band_pct, seed=seed, contrasts=contrasts)
families = (comparisons.group_by("family", "correction", maintain_order=True)
            .agg(comparisons=pl.len(), significant=(pl.col("p_adj") < alpha).sum(),
                 interval_level_pct=100 * pl.col("ci_level").first(),
                 metrics=pl.col("metric").unique().sort().str.join(", "))
            .sort(pl.col("family").replace_strict({f: i for i, f in enumerate(stats.FAMILY_ORDER)},
                                                  default=len(stats.FAMILY_ORDER))))
display(Markdown(
    f"Each scenario against **{baseline}**"
    + (f", plus the contrasts {', '.join(f'{a} vs {b}' for a, b in contrasts)}" if contrasts else "")
    + f": {len(comparisons)} comparisons, two-sided Mann-Whitney U at alpha = {alpha}, corrected within "
    "families. The **primary** family is the headline metric of each test (throughput, transaction or "
    "connection rate, UDP loss, request rate; the median latency of a paced test), "
    f"{stats.CORRECTIONS[correction]}-corrected; the **secondary** metrics (`family_metrics`: "
    f"{', '.join(f'`{m}`' for m in family_metrics) or 'none'}) form one family per kind (latency, CPU, other), "
    "Benjamini-Hochberg (FDR: a share of the secondary findings may be false).\n\n"
    "The change in % is the median ratio - 1; its interval is at the **level the family's correction decided "
    "at**: a p-value is significant after correction exactly when it is below 1 - level (Holm: alpha / (m - R) "
    "for R of m rejected; FDR: R alpha / m), so a verdict and the interval shown beside it agree. Verdicts: "
    "`~ within noise` (not significant, the interval includes 0), `negligible` (significant, the interval "
    "inside the noise band), the change with its interval and better/worse otherwise, and `inconclusive` where "
    "the test (Mann-Whitney, on ranks) and the interval (bootstrap of the medians) disagree: neither is taken "
    "as a finding.\n\n"
    f"MDE: the smallest change (in % of the baseline median) each comparison detects with "
    f"{100 * stats.POWER:.0f} % power at its n, its spread (pooled normal-scaled median absolute deviation of "
    "the log values) and its family's level; "
    "a change below it reads `~ within noise` without meaning \"no difference\". Where no sample of this size "
    "can reach the level (exact Mann-Whitney's smallest p is 2 / C(2n, n)), it says how many runs could."))
display(report.formatted(families, {"interval_level_pct": "{:.4g} %"}))
if comparisons.is_empty():
    ok_scenarios = set(runs.filter(pl.col("outcome") == "ok")["scenario"])
    display(Markdown(
        "**No comparison was made:** " + (f"the baseline `{baseline}` has no successful run." if ok_scenarios
                                          else "no run of this campaign succeeded (see Caveats).")))

# %%
# With few runs and many comparisons no result can reach significance: say so
# instead of letting "~ within noise" read as "no difference".
unattainable = comparisons.filter(pl.col("n_attainable").is_not_null())
if len(unattainable):
    display(Markdown(
        f"**Caveat: too few runs for {len(unattainable)} of {len(comparisons)} comparisons.** At their n no p-value "
        f"can reach their family's level, so they read `~ within noise` whatever the data; "
        f"{unattainable['n_attainable'].max()} runs per configuration could."))

# %% [markdown]
# ## Headline table
# Per family (primary first): each scenario's median with its distribution-free 95 % CI; against the
# baseline the change with its interval at the family's level, p adjusted within the family, the
# verdict and the minimum detectable effect (MDE %).

# %%
table = stats.headline(summary, comparisons, baseline=baseline)
report.formatted(table, {"p_adj": "{:.3g}"})

# %% [markdown]
# ## Contrasts
# Comparisons against another reference than the baseline (`analysis.contrasts`),
# corrected within the same families as the headline table.

# %%
contrast_rows = comparisons.filter(pl.col("baseline") != baseline)
if contrast_rows.is_empty():
    display(Markdown("No contrasts configured, or their scenarios were not measured."))
else:
    display(report.formatted(
        contrast_rows.with_columns(
            pl.Series("change % [CI @ level]", [stats.change_text(r) for r in contrast_rows.iter_rows(named=True)]),
            pl.Series("MDE %", [stats.mde_text(r) for r in contrast_rows.iter_rows(named=True)]))
        .select("family", "test", "metric", "side", "unit", "scenario", "baseline", "n", "n_base", "median",
                "median_base", "change % [CI @ level]", "p_adj", "verdict", "MDE %")
        .rename({"baseline": "reference", "median_base": "median_reference"}),
        {"median": "{:.4g}", "median_reference": "{:.4g}", "p_adj": "{:.3g}"}))

# %%
# The comparison is computed here only: 03_figures reads this file.
comparisons.write_parquet(comparisons_path(out_dir))
comparisons.drop("u").write_csv(out / "significance.csv")
_ = (resolve(metrics_json) if metrics_json else out / "metrics.json").write_text(json.dumps(
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
