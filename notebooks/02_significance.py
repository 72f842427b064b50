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
# Where `benchlib analyse` wrote the analysis (relative to the project root): its tables, the settings
# they were made with and the tidy tables they came from. `benchlib report` (papermill) passes it.
analysis_dir = "data/analysis"
out_dir = "reports"  # where figures and exported tables go

# %%
import polars as pl
from IPython.display import Markdown, display

import benchlib.base.escape as escape
from benchlib.analysis import analyse, resolve, saturation, stats
from benchlib.report import format as fmt, method, tables
from benchlib.report.format import change_text, mde_text
from benchlib.report.summary import metric_label

fmt.display_tables()
a = analyse.load(analysis_dir)
runs, summary, comparisons, families = a.runs, a.summary, a.comparisons, a.families
baseline, alpha, correction, contrasts = (
    a.settings.baseline,
    a.settings.alpha,
    a.settings.correction,
    a.settings.contrasts,
)
family_metrics = a.settings.family_metrics
out = resolve(out_dir)
out.mkdir(parents=True, exist_ok=True)
display(
    Markdown(
        f"Each scenario against **{escape.page(baseline)}**"
        + (
            f", plus the contrasts {', '.join(f'{escape.page(a)} vs {escape.page(b)}' for a, b in contrasts)}"
            if contrasts
            else ""
        )
        + f": {len(comparisons)} comparisons, two-sided Mann-Whitney U at alpha = {alpha}, corrected within "
        "families. The **primary** family is the headline metric of each test (throughput, transaction or "
        "connection rate, UDP loss, request rate; the median latency of a paced test), "
        f"{stats.CORRECTIONS[correction]}-corrected; the **secondary** metrics (`family_metrics`: "
        f"{', '.join(escape.page(metric_label(m)) for m in family_metrics) or 'none'}) form one family per kind (latency, CPU, other), "
        "Benjamini-Hochberg (FDR: a share of the secondary findings may be false). How the intervals, verdicts "
        "and the MDE are read: see [Method](#Method)."
    )
)
tables.show(tables.publication_table(families, formats={"interval_level_pct": "{:.4g} %"}))
if comparisons.is_empty():
    ok_scenarios = set(runs.filter(pl.col("outcome") == "ok")["scenario"])
    display(
        Markdown(
            "**No comparison was made:** "
            + (
                f"the baseline {escape.code(baseline)} has no successful run."
                if ok_scenarios
                else "no run of this campaign succeeded (see Caveats)."
            )
        )
    )

# %%
# With few runs and many comparisons no result can reach significance: say so
# instead of letting "~ within noise" read as "no difference".
unattainable = comparisons.filter(pl.col("n_attainable").is_not_null())
if len(unattainable):
    display(
        Markdown(
            f"**Caveat: too few runs for {len(unattainable)} of {len(comparisons)} comparisons.** At their n no p-value "
            f"can reach their family's level, so they read `~ within noise` whatever the data; "
            f"{unattainable['n_attainable'].max()} runs per configuration could."
        )
    )

# %% [markdown]
# ## Headline table
# Per family (primary first): each scenario's median with its distribution-free 95 % CI; against the
# baseline the change with its interval at the family's level, p adjusted within the family, the
# verdict and the minimum detectable effect (MDE %).

# %%
bound = comparisons.filter(pl.col("cpu_bound"))
unresolved = comparisons.filter(pl.col("below_resolution"))
display(
    Markdown(
        f"**At a CPU limit: {len(bound)} of {len(comparisons)} comparisons; below the instrument's resolution: "
        f"{len(unresolved)} of {len(comparisons)}.**\n\n"
        '<details class="long"><summary>What these two caveats mean</summary>\n\n'
        f"The `{tables.CPU_LIMIT}` column names "
        f"the sides whose median run kept at least {saturation.CPU_BOUND_PCT:g} % of their CPUs busy, in the "
        "scenario or its baseline (with the higher median busy %). There a rate or a latency measures that CPU as "
        "much as the path: the comparison to read is the CPU per work of that side.\n\n"
        "A latency "
        "percentile is known to one step of the tool's histogram (netperf: 1 µs below 100 µs, 10 µs below 1 ms; "
        "fortio: the width of its bucket at that value); where the change or its interval is finer than one step, "
        "the change is given in steps and the interval widened by one step, instead of exact-looking digits."
        "\n\n</details>"
    )
)
tables.show(
    tables.headline_table(summary, comparisons, baseline, runs),
    summary=f"The table: {len(summary)} medians of {summary['scenario'].n_unique()} scenarios, with their changes",
)

# %%
# a section only where the campaign has contrasts (analysis.contrasts) with both scenarios measured
contrast_rows = comparisons.filter(pl.col("baseline") != baseline)
if not contrast_rows.is_empty():
    display(
        Markdown(
            "## Contrasts\nComparisons against another reference than the baseline (`analysis.contrasts`), "
            "corrected within the same families as the headline table."
        )
    )
    tables.show(
        tables.publication_table(
            contrast_rows.with_columns(
                pl.Series("change % [CI @ level]", [change_text(r) for r in contrast_rows.iter_rows(named=True)]),
                pl.Series("MDE %", [mde_text(r) for r in contrast_rows.iter_rows(named=True)]),
            )
            .select(
                "family",
                "test",
                "metric",
                "side",
                "unit",
                "scenario",
                "baseline",
                "n",
                "n_base",
                "median",
                "median_base",
                "change % [CI @ level]",
                "p_adj",
                "verdict",
                "verdict_kind",
                "verdict_direction",
                "MDE %",
            )
            .rename({"baseline": "reference", "median_base": "median_reference"}),
            formats={"p_adj": "{:.2g}"},
            group="family",
            verdict="verdict",
        )
    )

# %%
tables.spreadsheet(comparisons).write_csv(out / "significance.csv")  # every comparison, for a spreadsheet

# %% [markdown]
# ## Caveats
# Configurations flagged by the checks: fewer than 6 runs, CV above 5 %,
# drift (Spearman correlation of value with run order, p < alpha), failed
# runs, non-finite values. Failed runs and non-finite values are excluded
# from the statistics and counted here.

# %%
flagged, failed = method.caveats(summary, runs)
display(
    Markdown(
        f"{len(flagged)} flagged configuration(s), {failed['failed_runs'].sum()} failed run(s), "
        f"{failed['disturbed_runs'].sum()} of them disturbed (other processes took their CPUs), all left out."
    )
)
if len(flagged):
    tables.show(
        tables.publication_table(flagged, formats={"cv_pct": "{:.3g}", "drift_rho": "{:+.3f}", "drift_p": "{:.2g}"}),
        summary=f"The {len(flagged)} flagged configuration(s)",
    )
if len(failed):
    tables.show(tables.publication_table(failed), summary="The failed runs per configuration")
