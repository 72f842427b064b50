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
# Where `benchlib compare A B` saved its result (relative to the project root); the comparison
# itself is computed once, by benchlib/analysis/compare.py.
result_dir = "reports/compare-lab-cmp-a-vs-lab-cmp-b"

# %%
import polars as pl
from IPython.display import HTML, Markdown, display

import benchlib.base.escape as escape
from benchlib.analysis import compare, resolve
from benchlib.analysis.verdicts import Kind
from benchlib.report import colours, figures, format as fmt, summary, tables
from benchlib.report.compare import display_rows
from benchlib.settings.loading import load_params

fmt.display_tables()
res = compare.load_result(result_dir)
campaign_a, campaign_b, alpha, correction = res.a, res.b, res.alpha, res.correction
md_a, md_b = escape.page(campaign_a), escape.page(campaign_b)  # the campaigns' names in the text
tested = res.rows.filter(pl.col("all_failed").is_null())  # rows of configurations whose every run failed: not tested
findings = summary.findings_markdown(tested, pl.DataFrame(), compare.stats.PRIMARY, limit=6)
display(
    Markdown(
        f"# {md_b} against {md_a}\n\n"
        f"**{len(res.regressions)} regression(s)** (significant and beyond the threshold, or every run failed in "
        f"{md_b}) out of {len(res.rows)} comparisons (alpha = {alpha})"
        + (
            f"; {len(res.differences)} setting(s) differ between the campaigns (see [Setup](#Setup))."
            if len(res.differences)
            else "; the campaigns' recorded setups agree."
        )
        + (f"\n\n**Each test's headline metric**, largest change first:\n\n{findings}" if findings else "")
    )
)

# %%
headline = res.rows.filter(family=compare.stats.PRIMARY)
tested_headline = tested.filter(family=compare.stats.PRIMARY)
if len(tested_headline):
    # each scenario in the colour the campaigns' own reports give it: the project's baseline grey, the others
    # in order
    scenario_baseline = (
        load_params(resolve("params.yaml")).analysis.baseline if resolve("params.yaml").exists() else None
    )
    figures.show(
        figures.forest(
            headline,
            baseline=campaign_a,
            colours=colours.scenario_colours(res.rows["scenario"], scenario_baseline),
        )
    )

# %%
display(
    HTML(
        summary.rerun_box(
            [campaign_a, campaign_b],
            [(f"benchlib compare {campaign_a} {campaign_b}", "this comparison again, from the stored measurements")],
        )
    )
)

# %% [markdown]
# ## Primary family: each test's headline metric

# %%
if len(tested_headline):
    display(
        Markdown(
            f"{len(tested_headline)} comparisons, {tested_headline['correction'][0]} correction over them; "
            f"intervals at {100 * tested_headline['ci_level'][0]:.4g} %."
        )
    )
if len(headline):
    tables.show(tables.publication_table(display_rows(headline).drop("family"), {"p_adj": "{:.3g}"}, verdict="verdict"))

# %% [markdown]
# ## Geometric mean of the changes per test
# The B/A median ratios of a test's scenarios, averaged geometrically (descriptive: no CI).

# %%
tables.show(tables.publication_table(res.geomean, {"geomean_change_pct": "{:+.1f} %"}))

# %% [markdown]
# ## Secondary metrics (FDR, one family per kind)

# %%
secondary = res.rows.filter(pl.col("family") != compare.stats.PRIMARY)
shown = display_rows(secondary).filter(pl.col("verdict_kind") != Kind.NOISE)
if len(shown):
    tables.show(tables.publication_table(shown, {"p_adj": "{:.3g}"}, group="family", verdict="verdict"))
else:
    display(Markdown("None."))
display(Markdown(f"{len(secondary)} comparisons in all; the ones not listed are `~ within noise`."))

# %% [markdown]
# ## Setup
# What differs between the campaigns, from the raw records (`meta.json`: test parameters, placement, target
# facts and tool versions); session identifiers (lab ids, namespace and pod names, addresses) are left out.

# %%
if res.differences.is_empty():
    display(Markdown("Nothing the records carry differs."))
else:
    tables.show(tables.publication_table(res.differences.rename({"value_a": campaign_a, "value_b": campaign_b})))
if len(res.unmatched):
    display(Markdown("Measured in one campaign only, so not compared:"))
    tables.show(tables.publication_table(res.unmatched))
if len(res.failed):
    display(
        Markdown(
            f"Configurations with failed runs (`_base`: {md_a}); one whose every run failed in {md_b} is a regression:"
        )
    )
    tables.show(tables.publication_table(res.failed.drop("streams", "message_size")))

# %%
display(
    Markdown(
        "## Method\n"
        "Corrected within families: the primary family is each test's headline "
        f"metric ({tested.filter(family=compare.stats.PRIMARY)['correction'].first() or correction}), every other "
        "metric is in the Benjamini-Hochberg family of its kind (latency, CPU, other; FDR). The change's interval is "
        "at the level its family's correction decided at, so that significant means the interval excludes 0. "
        "Verdicts: `~ within noise` (not significant after correction), `negligible` (significant, but the "
        "interval lies inside +/- the threshold), `inconclusive` (the test and the interval disagree), otherwise "
        "the change in % with its interval and whether that is better or worse for the metric. MDE: the smallest "
        "change each comparison detects with 80 % power at its n and spread."
    )
)
