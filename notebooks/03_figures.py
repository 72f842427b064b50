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
# Defaults: the `analysis` section of params.yaml and the pipeline's paths
# (relative to the project root), so this notebook gives in JupyterLab what
# `dvc repro` gives. `benchlib report` (papermill) passes the same values.
from benchlib.analysis import default_parameters

globals().update(default_parameters())

# %%
from benchlib.analysis import figures, load_tables, normalize, resolve, stats

figures.use_report_renderer()  # headless kernels need it; the report page carries plotly.js once
runs, metrics = load_tables(runs_path, metrics_path)

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
