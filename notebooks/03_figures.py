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
# # Results per test
# Each test's headline metric per scenario, every run, its CPU and latency; written to `reports/figures/`
# as interactive HTML, SVG and PNG, and to `reports/blog/` as SVG and PNG beside a Markdown snippet with
# the figure's caption.

# %% tags=["parameters"]
# Where `benchlib analyse` wrote the analysis (relative to the project root): its tables, the settings
# they were made with and the tidy tables they came from. `benchlib report` (papermill) passes it.
analysis_dir = "data/analysis"
out_dir = "reports"  # where figures and exported tables go

# %%
from collections import defaultdict

import polars as pl
from IPython.display import Markdown, display

import benchlib.base.escape as escape
from benchlib.analysis import analyse, normalize, resolve, stats
from benchlib.report import colours, export, figures, tables
from benchlib.vocabulary.schema import PRIMARY_METRICS

a = analyse.load(analysis_dir)
runs, metrics, comparisons, summary_all = a.runs, a.metrics, a.comparisons, a.summary_all
cpu_cost = tables.cpu_cost(summary_all, runs)
baseline, cpu_target_gbps = a.settings.baseline, a.settings.cpu_target_gbps
colour = colours.scenario_colours(runs["scenario"], baseline)  # each scenario's, in every figure

# %%
run_values = stats.ok_values(a.values, runs)
per_run = normalize.per_run_cpu(metrics, runs)

# %%
figs = defaultdict(dict)  # {section (a test, or across tests): {file name: figure}}
for (test,), g in summary_all.filter(pl.col("n") > 0).group_by("test", maintain_order=True):
    present = set(g["metric"])
    for metric in PRIMARY_METRICS:
        if metric in present:
            figs[test][figures.headline_name(test, metric)] = figures.bars(
                summary_all, test, metric, baseline=baseline, comparisons=comparisons, colours=colour
            )
            figs[test][f"{test}_{metric}_runs"] = figures.runs_strip(
                run_values, test, metric, baseline=baseline, colours=colour
            )
    if "cpu_pct_at_target" in present:
        # in the tables' unit: µs of CPU per transaction or connection, cores per 10 Gbit/s
        figs[test][f"{test}_cpu"] = figures.cpu_bars(cpu_cost, test, baseline=baseline, colours=colour)
    if "throughput" in present and "cpu_pct_at_target" in present:
        figs[test][f"{test}_throughput_vs_cpu"] = figures.throughput_vs_cpu(
            per_run, test, baseline=baseline, target_gbps=cpu_target_gbps, colours=colour
        )
    if present & set(figures.LATENCY_PERCENTILES):
        figs[test][f"{test}_latency"] = figures.latency_percentiles(
            summary_all, test, baseline=baseline, colours=colour
        )
    if present & set(figures.DNS_PERCENTILES):
        figs[test][f"{test}_latency"] = figures.latency_percentiles(
            summary_all,
            test,
            baseline=baseline,
            metrics=figures.DNS_PERCENTILES,
            title="DNS resolution latency percentiles",
            colours=colour,
        )

# %%
# Service scaling (scenarios expanded over a number of ClusterIP services) and HTTP latency against the
# offered load (one fortio test per rate, keep-alive and `Connection: close` apart), where the campaign has
# them: a comment, not a Markdown cell, so that a campaign without them shows nothing of them
for test in sorted(
    summary_all.join(runs.filter(pl.col("services").is_not_null()).select("test").unique(), on="test")["test"].unique()
):
    tested = set(summary_all.filter(test=test)["metric"])
    metric = next(m for m in PRIMARY_METRICS if m in tested)
    figs[test][f"{test}_{metric}_vs_services"] = figures.service_scaling(
        summary_all, runs, test, metric, baseline=baseline, comparisons=comparisons, colours=colour
    )
http = runs.filter(pl.col("tool") == "fortio", pl.col("test").is_in(summary_all["test"].implode())).unique(
    "test", keep="first", maintain_order=True
)
for (close,), sweep in http.group_by("connection_close", maintain_order=True):
    name = "connection_close" if close else "keepalive"
    figs["Across tests"][f"http_latency_vs_load_{name}"] = figures.rate_sweep(
        summary_all,
        runs,
        list(sweep["test"]),
        figures.HTTP_PERCENTILES,
        baseline=baseline,
        comparisons=comparisons,
        title=f"HTTP latency vs offered load ({name.replace('_', ' ')})",
        colours=colour,
    )

# %% [markdown]
# The forest plot draws each change vs the baseline with its interval at the level its family's correction
# decided at (the significance section states the levels: primary family, Holm; secondary families, FDR),
# so a filled marker's interval excludes 0 and an open one's includes it; a diamond marks a comparison
# whose test and interval disagree.

# %%
if len(comparisons):
    figs["Across tests"]["forest"] = figures.forest(comparisons, baseline=baseline, colours=colour)
else:
    display(Markdown("No comparison against the baseline (see the significance section): no forest plot."))
paths = export.write_figures(
    {k: f for section in figs.values() for k, f in section.items()},
    resolve(out_dir) / "figures",
    blog_dir=resolve(out_dir) / "blog",
)

# %%
# one section per test, so a reader can jump to a test
# each test's headline figure open, its other figures (every run, CPU, latency) behind their titles
for section, shown in figs.items():
    display(Markdown(f"## {escape.page(section)}"))
    for i, fig in enumerate(shown.values()):
        if i == 0 and section != "Across tests":
            figures.show(fig)
        else:
            figures.show_collapsed(fig)
