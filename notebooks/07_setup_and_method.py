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
# # Setup, method and CPU normalization
#
# Everything below is computed from the tidy tables (`runs.parquet`,
# `metrics.parquet`) of one campaign; nothing is typed in by hand.

# %% tags=["parameters"]
# Where `benchlib analyse` wrote the analysis (relative to the project root): its tables, the settings
# they were made with and the tidy tables they came from. `benchlib report` (papermill) passes it.
analysis_dir = "data/analysis"

# %%
import polars as pl
from IPython.display import Markdown, display

from benchlib.analysis import analyse, normalize, stats
from benchlib.report import format as fmt, method, summary, tables

fmt.display_tables()
a = analyse.load(analysis_dir)
runs, metrics, settings = a.runs, a.metrics, a.settings

# %% [markdown]
# ## Setup
# Kernel, tools and CPU placement as recorded with every run.

# %%
tables.show(tables.publication_table(method.setup_table(runs)), summary="The setup of each environment")
if note := method.shared_kernel_note(runs):
    display(Markdown(note))

# %% [markdown]
# ## Method
# Each block runs every configuration (scenario x test) once, in a seeded
# random order, so slow drifts of the machine spread over all scenarios
# instead of biasing one. The unit of analysis is the run: each run gives one
# value per metric, and a configuration's result is the median over its runs
# with a distribution-free 95 % confidence interval (at least 6 runs needed).
# Scenarios are compared with the baseline by a two-sided Mann-Whitney U test,
# corrected for the number of comparisons; the effect is the ratio of medians
# with a 95 % CI (bootstrap up to 50 runs per side, Maritz-Jarrett above).

# %%
tables.show(tables.publication_table(method.method_table(runs)), summary="Runs, blocks and order per environment")

# %%
# with analysis.paired: the comparisons made within blocks, and what that changes
if summary.paired_text(a.comparisons):
    display(Markdown(summary.paired_text(a.comparisons)))

# %%
# a campaign run until precise (experiment.precision): its looks, and per primary comparison the target met or not
if not a.precision.is_empty():
    display(Markdown(summary.precision_text(a.precision)))
    tables.show(tables.publication_table(a.precision))

# %%
display(
    Markdown(
        "### Intervals, verdicts and MDE\n\n"
        + summary.levels_text(a.families, settings)
        + "\n\n"
        + '<details class="long"><summary>How the intervals, verdicts and MDE are read</summary>\n\n'
        + "The change in % is the median ratio - 1; its interval is at the **level the family's correction decided "
        "at**: a p-value is significant after correction exactly when it is below 1 - level (Holm: alpha / (m - R) "
        "for R of m rejected; FDR: R alpha / m), so a verdict and the interval shown beside it agree. Verdicts: "
        "`~ within noise` (not significant, the interval includes 0), `negligible` (significant, the interval "
        "inside the noise band), the change with its interval and better/worse otherwise, and `inconclusive` where "
        "the test (Mann-Whitney, on ranks) and the interval (bootstrap of the medians) disagree: neither is taken "
        "as a finding.\n\n"
        f"MDE: the smallest change (in % of the baseline median) each comparison detects with "
        f"{100 * stats.POWER:.0f} % power at its n, its spread (pooled normal-scaled median absolute deviation of "
        "the log values) and its family's level; "
        'a change below it reads `~ within noise` without meaning "no difference". Where no sample of this size '
        "can reach the level (exact Mann-Whitney's smallest p is 2 / C(2n, n)), it says how many runs could."
        + "\n\n</details>"
    )
)

# %%
targets = normalize.work_targets(**normalize.work_rates(settings))
http = (
    f", {targets['http_qps']:g} requests/s for HTTP (fortio's achieved rate)"
    if (metrics["metric"] == "http_qps").any()
    else ""
)
display(
    Markdown(
        "## CPU normalization\n"
        "CPU cost is compared at equal work: busy CPU-seconds are summed over a side's CPUs, divided by the "
        "window and the number of CPUs, then scaled to a fixed work rate: "
        f"{targets['throughput']:g} Gbit/s for stream tests, {targets['transaction_rate']:g} transactions/s "
        f"for TCP_RR, {targets['connection_rate']:g} connections/s for TCP_CRR{http}. "
        "`total` sums both sides' busy cores before dividing by all their CPUs. The tables write that cost in "
        "one unit per kind of test: µs of CPU per transaction or connection (request/response tests), cores "
        "per 10 Gbit/s (streams); a change in % is the same in either unit."
    )
)

# %%
cpu_summary = a.summary_all.filter(metric=normalize.CPU_AT_TARGET)
if cpu_summary.is_empty():
    display(Markdown("No successful run with CPU counters and work done: nothing to normalize."))
else:
    # in one unit per kind of test (µs of CPU per transaction or connection, cores per 10 Gbit/s)
    cpu_summary = tables.cpu_cost(cpu_summary, runs).with_columns(test=pl.col("test").replace(tables.test_labels(runs)))
    tables.show(
        tables.publication_table(
            cpu_summary.pivot(
                on="side", index=["environment", "test", "unit", "scenario"], values="median", sort_columns=True
            ),
            formats={c: "{:.3g}" for c in ("client", "server", "total")},
            group="test",
        ),
        summary=f"CPU per work of each scenario and side ({cpu_summary['scenario'].n_unique()} scenarios)",
    )

# %% [markdown]
# Median CPU per unit of work per side (lower is cheaper). Their CIs
# and significance are in the headline table above (CPU family), the per-run
# values in the figures.
