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
# Where `benchlib analyse` wrote the analysis (relative to the project root): its tables, the settings
# they were made with and the tidy tables they came from. `benchlib report` (papermill) passes it.
analysis_dir = "data/analysis"
out_dir = "reports"  # where figures and exported tables go
# The report's title (params.yaml report.title), where the user gave one; else what was compared.
title = ""

# %%
import polars as pl
from IPython.display import HTML, Markdown, display

from benchlib.analysis import analyse, resolve, stats
from benchlib.report import export, figures, method, profiles, summary

a = analyse.load(analysis_dir)
s = a.settings
# the first screen: title, takeaways, context; then the findings
display(HTML(summary.first_screen_html(a.runs, a.comparisons, s.baseline, commit=method.code_revision(), title=title)))

# %%
display(
    Markdown(
        "# Findings\n\n"
        + summary.summary_markdown(
            a.runs,
            a.comparisons,
            a.families,
            s,
            explanations=profiles.explanations(a.profile_tables(), s.baseline),
            caveats=False,
            campaign=False,
        )
    )
)

# %%
# every scenario x test at a glance (the forest of every comparison is in the results below); exported as
# the others are, the blog post opens on it
primary = a.comparisons.filter(pl.col("family") == stats.PRIMARY, pl.col("delta_pct").is_not_nan())
if len(primary):
    overview = figures.overview(primary, s.baseline)
    out = resolve(out_dir)
    export.write_figures({figures.OVERVIEW: overview}, out / "figures", blog_dir=out / "blog")
    figures.show(overview)

# %%
display(Markdown(summary.caveats_markdown(a.comparisons, a.profile_contrasts)))
display(HTML(summary.rerun_box(sorted(a.runs["campaign"].unique().to_list()))))
