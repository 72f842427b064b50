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
# # CPU profiles
# Where the busy CPU of each path goes per unit of work (kernel included, idle left out), by category and
# by frame, and what each scenario adds over the baseline. Tables from `benchlib.analysis.profiles`.

# %% tags=["parameters"]
# Where `benchlib analyse` wrote the analysis (relative to the project root): its tables, the settings
# they were made with and the tidy tables they came from. `benchlib report` (papermill) passes it.
analysis_dir = "data/analysis"
out_dir = "reports"  # where figures and exported tables go

# %%
import polars as pl
from IPython.display import Markdown, display

import benchlib.base.escape as escape
from benchlib.analysis import analyse, profiles, resolve, stats
from benchlib.report import colours, export, figures, flamegraphs, summary, tables
from benchlib.report.profiles import (
    BPF_NOTE,
    WHY_FIGURES,
    bpf_rows,
    explanations,
    finding_pairs,
    method_text,
    why_figure,
)

a = analyse.load(analysis_dir)
baseline = a.settings.baseline
cats, frames, diffs = a.profile_categories, a.profile_frames, a.profile_differences
display(Markdown(method_text(a.profile_method)))

# %%
# the sentences under the comparisons they explain, findings first; the others (no headline comparison,
# no kernel symbols) after them
sentences = explanations(a.profile_tables(), baseline)
explained = summary.explained_markdown(a.comparisons, sentences)
keys = ["environment", "test", "scenario", "baseline"]
primary = a.comparisons.filter(pl.col("family") == stats.PRIMARY).select(keys).unique()
rest = sentences.join(primary, on=keys, how="anti")["sentence"]
if explained or len(rest):
    # behind a disclosure: each finding above already carries its why; these are every comparison's
    others = (f"- {escape.page(s)}" for s in rest)
    said = "\n".join(filter(None, [explained, *others]))
    display(
        Markdown(
            "## What the profiles say\n"
            + tables.collapsed("Each comparison's CPU-profile sentences, with the frames they name", said)
        )
    )

# %%
# the eBPF scenarios' programs, beside the categories (absent where no profiled run ran a BPF program)
bpf = bpf_rows(a.profile_bpf, a.profile_disturbed, tables.test_labels(a.runs))
if len(bpf):
    display(Markdown("## BPF programs, as the kernel counts them"))
    tables.show(
        tables.publication_table(
            bpf,
            labels={"cpu_per_unit": "CPU per unit of work", "ns_per_run": "ns per run"},
            group="scenario",
            note=BPF_NOTE,
        )
    )

# %%
# per finding with profiles of both scenarios, neither disturbed: what changed, frame by frame, and where
# in the call tree; the compared scenario alone in each, no widget, so the images are the finding's
colour = colours.scenario_colours(a.runs["scenario"], baseline)
why = {}
pairs = finding_pairs(a.comparisons, a.profile_tables(), baseline)
for r in pairs.iter_rows(named=True):
    env, test, scenario = r["environment"], r["test"], r["scenario"]
    where = env if cats["environment"].n_unique() > 1 else None
    why[why_figure(test, scenario, where)] = flamegraphs.changed_frames(
        a.profile_attribution, test, scenario, baseline, env, colour
    )
    why[why_figure(test, scenario, where, "differential")] = flamegraphs.differential(
        diffs, test, env, [scenario], sentences, a.profile_attribution
    )
if why:
    display(
        Markdown(
            "## Why the findings differ\nFor each finding with profiles of both scenarios (the "
            f"{WHY_FIGURES} largest at most), the functions whose own CPU per unit of work changed most, then "
            "the differential flamegraph opened where the change is (each box coloured by its own change in %; "
            "click the top bar to go back up)."
        )
    )
    export.write_figures(why, resolve(out_dir) / "figures", blog_dir=resolve(out_dir) / "blog")
    # the largest finding's two figures open, the others' behind their titles: the page stays short
    for i, fig in enumerate(why.values()):
        if i < 2:
            figures.show(fig)
        else:
            figures.show_collapsed(fig)

# %%
# every scenario, a menu to pick one: for exploring, written as HTML alone (an image of a menu is dead)
figs = {}
for (environment, test), _ in cats.group_by("environment", "test", maintain_order=True):
    name = f"{environment}_{test}" if cats["environment"].n_unique() > 1 else test
    figs[f"cpu_profile_{name}_categories"] = flamegraphs.category_bars(
        cats, test, baseline, environment, a.profile_contrasts, a.profile_attribution
    )
    figs[f"cpu_profile_{name}_flamegraph"] = flamegraphs.flamegraph(frames, test, baseline, environment)
    # the menu's differential where some scenario has none of a finding above
    others = set(diffs.filter(environment=environment, test=test)["scenario"])
    if others - set(pairs.filter(environment=environment, test=test)["scenario"]):
        figs[f"cpu_profile_{name}_differential"] = flamegraphs.differential(
            diffs, test, environment, explanations=sentences, attribution=a.profile_attribution
        )
if figs:
    display(
        Markdown(
            "## Busy CPU per unit of work, flamegraphs and differential flamegraphs\n"
            "Pick the scenario in each figure's menu; frames under "
            f"{100 * profiles.PRUNE_SHARE:g} % of a side's busy CPU are left out."
        )
    )
    menus = [n for n, f in figs.items() if f.layout.updatemenus]
    export.write_figures(figs, resolve(out_dir) / "figures", blog_dir=resolve(out_dir) / "blog", html_only=menus)

# %%
# for exploring: behind their titles, so they do not lengthen the page of a reader who does not
for fig in figs.values():
    figures.show_collapsed(fig)
