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

# %% tags=["parameters"]
# `benchlib compare A B` (papermill) passes the campaigns, where it saved their tidy tables (runs,
# metrics, facts; relative to the project root) and the analysis section of params.yaml. The logic
# is in benchlib/analysis/compare.py.
campaign_a = "lab-cmp-a"  # the reference
campaign_b = "lab-cmp-b"  # compared against it
tables_a = "reports/compare-lab-cmp-a-vs-lab-cmp-b/a"
tables_b = "reports/compare-lab-cmp-a-vs-lab-cmp-b/b"
alpha = 0.05
correction = "holm"  # headline family; every other metric: fdr_bh, labelled FDR
threshold_pct = 2.0  # a number or {metric: %, default: %}
family_metrics = ["throughput", "transaction_rate", "connection_rate", "latency_p50", "latency_p99",
                  "cpu_pct_at_target"]
seed = 0
targets = {"target_gbps": 100.0, "per_transactions": 10000.0, "per_connections": 10000.0}

# %%
import polars as pl
from IPython.display import Markdown, display

from benchlib.analysis import compare, figures, report

figures.use_report_renderer()  # headless kernels need it; the page carries plotly.js once
report.display_tables()
res = compare.run(compare.load_campaign(campaign_a, tables_a), compare.load_campaign(campaign_b, tables_b),
                  alpha=alpha, correction=correction, threshold_pct=threshold_pct, family_metrics=family_metrics,
                  seed=seed, targets=targets)
display(Markdown(
    f"# {campaign_b} against {campaign_a}\n\n"
    f"**{len(res.regressions)} significant regression(s) beyond the threshold** out of {len(res.rows)} "
    f"comparisons (alpha = {alpha}). Verdicts: `~ within noise` (not significant after correction), "
    "`negligible` (significant, but the 95 % CI of the change lies inside +/- the threshold), otherwise the "
    "change in % with its 95 % CI and whether that is better or worse for the metric."))

# %% [markdown]
# ## What differs between the campaigns
# From the raw records (`meta.json`: test parameters, placement, target facts and tool versions);
# session identifiers (lab ids, namespace and pod names, addresses) are left out.

# %%
if res.differences.is_empty():
    display(Markdown("Nothing the records carry differs."))
else:
    display(res.differences.rename({"value_a": campaign_a, "value_b": campaign_b}))
if len(res.unmatched):
    display(Markdown("Measured in one campaign only, so not compared:"), res.unmatched)

# %% [markdown]
# ## Headline metrics

# %%
headline = res.rows.filter(family=compare.HEADLINE)
if len(headline):
    display(Markdown(f"{len(headline)} comparisons, {headline['correction'][0]} correction over them."))
    figures.forest(headline, baseline=campaign_a).show()
    display(compare.display_rows(headline).drop("family"))

# %% [markdown]
# ## Geometric mean of the changes per test
# The B/A median ratios of a test's scenarios, averaged geometrically (descriptive: no CI).

# %%
display(report.formatted(res.geomean, {"geomean_change_pct": "{:+.1f} %"}))

# %% [markdown]
# ## Secondary metrics (FDR)

# %%
secondary = res.rows.filter(family=compare.SECONDARY)
display(compare.display_rows(secondary).drop("family").filter(~pl.col("verdict").is_in([compare.stats.WITHIN_NOISE]))
        if len(secondary) else Markdown("None."))
display(Markdown(f"{len(secondary)} comparisons in all; the ones not listed are `~ within noise`."))
