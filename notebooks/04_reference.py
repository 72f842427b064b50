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

# %%
# The published studies beside this campaign. Their tables are shown where the campaign measures at least
# one of their claims; a campaign that measures none (another pair of pod networks, say) gets one line
# instead, so that its contents name only what applies to it.
import polars as pl
from IPython.display import HTML, Markdown, display

from benchlib.analysis import analyse, reference, resolve
from benchlib.analysis.verdicts import Kind
from benchlib.report import export, figures, format as fmt, tables

fmt.display_tables()
a = analyse.load(analysis_dir)
both = a.reference
resolve(out_dir).mkdir(parents=True, exist_ok=True)
both.write_csv(resolve(out_dir) / "reference_side_by_side.csv")  # every claim, measured or not
unmeasured = both.filter(pl.col("ours_verdict_kind") == Kind.UNCOMPARED)["claim"].to_list()
both = both.filter(pl.col("ours_verdict_kind") != Kind.UNCOMPARED)
show = not both.is_empty()


def unmeasured_list() -> None:
    if unmeasured:
        display(
            HTML(
                tables.collapsed(
                    f"{len(unmeasured)} claim(s) need scenarios this campaign did not run", tables.html_list(unmeasured)
                )
            )
        )


# %%
if not show:
    display(
        Markdown(
            "# Published reference\n"
            "No scenario pair of this campaign measures a change that a published study reports (the 2026 "
            "EKS m6i study, the 2021 bare-metal Cilium study): their numbers and provenance are in "
            "`data/reference/README.md`."
        )
    )
    unmeasured_list()

# %%
if show:
    display(
        Markdown(
            "# Published reference: EKS m6i, 2026\n"
            'Source: "VPC CNI vs Cilium CNI Performance Comparison Benchmark" (2026-02-09, updated 2026-02-14); '
            "EKS 1.31, 3 x m6i.xlarge, Cilium 1.16.5; each value a median of at least 3 runs. Full provenance: "
            "`data/reference/README.md`. Repetitions were not published, so the changes below are plain "
            "ratios with no confidence interval and no significance test.\n\n"
            "## Scenario changes vs A (VPC CNI, kube-proxy iptables)"
        )
    )
    changes = reference.eks_relative_changes(reference.load_eks_scenarios())
    tables.show(
        tables.publication_table(
            changes, formats={"change_pct": fmt.change, "baseline_value": "{:g}", "value": "{:g}"}
        ),
        summary=f"Their {len(changes)} scenario changes",
    )

# %%
if show:
    display(Markdown("## Service scaling from 4 to 104 to 1000 ClusterIP services"))
    growth = reference.eks_service_scaling_growth(reference.load_eks_service_scaling())
    tables.show(
        tables.publication_table(growth, formats={"change_pct": fmt.change, "value_from": "{:g}", "value_to": "{:g}"}),
        summary=f"Their {len(growth)} service-scaling changes",
    )

# %%
if show:
    display(
        Markdown(
            "## Ours next to theirs\n"
            "Only where both measure the same kind of change; absolute numbers are not comparable (cloud VMs "
            "with a 12.5 Gbit/s NIC vs network namespaces on one machine). The 2021 bare-metal study (Cilium "
            "1.9, two 100G hosts) published charts only: its rows carry the direction its text states, without "
            "a number. Our side keeps its statistics (these claims are their own family for the correction; our "
            "interval is at the level that correction decided at, so that a significant verdict's interval "
            "excludes 0)."
        )
    )
    unmeasured_list()
    tables.show(tables.reference_table(both), summary=f"Ours next to theirs: {len(both)} claim(s)")
    fig = figures.reference_changes(both)
    export.write_figures({"reference_changes": fig}, resolve(out_dir) / "figures", blog_dir=resolve(out_dir) / "blog")
    figures.show_collapsed(fig)
