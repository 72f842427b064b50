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
# # Figures
# Written to `reports/figures/` as interactive HTML, SVG and PNG.

# %% tags=["parameters"]
# Paths are relative to the project root (the directory holding pyproject.toml).
metrics_path = "data/processed/metrics.parquet"
runs_path = "data/processed/runs.parquet"
out_dir = "reports/"
baseline = "host"
alpha = 0.05
correction = "holm"  # or "fdr_bh" for large sweeps (labelled FDR)
cpu_target_gbps = 100.0  # stream tests: CPU % needed for this throughput
rr_per_transactions = 10_000  # TCP_RR: CPU % per this many transactions/s
crr_per_connections = 10_000  # TCP_CRR: CPU % per this many connections/s
noise_band_pct = {"default": 2.0}  # +/- % band per metric inside which a change is negligible
family_metrics = ["throughput", "transaction_rate", "connection_rate", "latency_p50", "latency_p99",
                  "cpu_pct_at_target"]
seed = 0

# %%
from benchlib.analysis import figures, normalize, resolve, stats
from benchlib.schema import check_metrics, read_metrics, read_runs

figures.use_report_renderer()  # headless kernels need it; the report page carries plotly.js once
runs = read_runs(resolve(runs_path))
metrics = read_metrics(resolve(metrics_path))
check_metrics(metrics)

# %%
values = normalize.with_cpu_at_target(metrics, runs, target_gbps=cpu_target_gbps,
                                      per_transactions=rr_per_transactions, per_connections=crr_per_connections)
family = values[values["metric"].isin(family_metrics)]
comparisons = stats.compare(family, runs, baseline=baseline, alpha=alpha, correction=correction,
                            noise_band_pct=noise_band_pct, seed=seed)
summary_all = stats.summarize(values, runs, alpha=alpha)  # figures show metrics outside the family too
run_values = stats.ok_values(values, runs)
per_run = normalize.per_run_cpu(metrics, runs)

# %%
figs = {}
for test, g in summary_all.groupby("test"):
    work = next(m for m in normalize.WORK_METRICS if m in set(g["metric"]))
    figs[f"{test}_{work}"] = figures.bars(summary_all, test, work, baseline=baseline)
    figs[f"{test}_{work}_runs"] = figures.runs_strip(run_values, test, work, baseline=baseline)
    figs[f"{test}_cpu"] = figures.cpu_bars(summary_all, test, baseline=baseline)
    if work == "throughput":
        figs[f"{test}_throughput_vs_cpu"] = figures.throughput_vs_cpu(per_run, test, baseline=baseline,
                                                                      target_gbps=cpu_target_gbps)
    if g["metric"].isin(figures.LATENCY_PERCENTILES).any():
        figs[f"{test}_latency"] = figures.latency_percentiles(summary_all, test, baseline=baseline)
figs["forest"] = figures.forest(comparisons)
paths = figures.write_figures(figs, resolve(out_dir) / "figures")

# %%
for fig in figs.values():
    fig.show()
