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
# Service-mesh proxy hops. Shown only for a campaign with proxies on the path (a mesh scenario):
# every other report stays as it was, so no markdown cell here, only output from code.
import polars as pl
from IPython.display import Markdown, display

import benchlib.base.escape as escape
from benchlib.analysis import analyse, mesh, normalize, reference, resolve, stats
from benchlib.report import colours, export, figures, format as fmt, mesh as mesh_figures, tables

fmt.display_tables()
a = analyse.load(analysis_dir)
runs, values, compared = a.runs, a.values, a.mesh_comparisons
baseline, alpha, contrasts = a.settings.baseline, a.settings.alpha, a.settings.contrasts
colour = colours.scenario_colours(runs["scenario"], baseline)  # each scenario's, in every figure
http_per_requests, rr_per_transactions = a.settings.http_per_requests, a.settings.rr_per_transactions
show = mesh.has_mesh(runs)

# %%
if show:
    summary = a.summary_all.filter(
        pl.col("metric").is_in([*mesh.LADDER_METRICS, *mesh.COST_METRICS, normalize.PROXY_CPU_AT_TARGET])
    )
    display(
        Markdown(
            "# Service-mesh proxy hops\n"
            f"What each proxy hop and mutual TLS cost, against **{escape.page(baseline)}** (0 hops) and the "
            f"contrasts {', '.join(f'{escape.page(a)} vs {escape.page(b)}' for a, b in contrasts) or '(none declared)'}. "
            "The scenarios and what "
            "their runs recorded on the path:"
        )
    )
    tables.show(tables.publication_table(mesh.paths(runs)))

# %%
if show:
    load = mesh.load_shortfall(values, runs)
    short = load.filter(pl.col("flag") != "")
    display(
        Markdown(
            "## Offered vs achieved load\n"
            f"A paced HTTP run that achieved less than {mesh.LOAD_SHORTFALL:g} x its offered rate measured the "
            "latency of a lighter load than planned: its configuration is flagged "
            f"({len(short)} of {len(load)})."
        )
    )
    tables.show(tables.publication_table(load, {"achieved_median": "{:.1f}", "achieved_min": "{:.1f}"}))

# %%
if show:
    ladder = mesh.ladder(summary, runs, values).join(
        load.select("test", "scenario", load="flag"), on=["test", "scenario"], how="left"
    )
    display(
        Markdown(
            "## Latency percentiles per hop count\n"
            "Each run's percentile (fortio's HTTP request latency, netperf's TCP_RR round trip); per scenario "
            "the median over runs with its distribution-free 95 % CI and, for p99, the range over runs (min-max, "
            "as the Istio vs Cilium study reports it)."
        )
    )
    tables.show(
        tables.publication_table(
            ladder.with_columns(
                pl.format("{} [{}, {}]", *(pl.col(c).round(0) for c in ("median", "ci_low", "ci_high"))).alias(
                    "median [95 % CI]"
                ),
                pl.when(pl.col("range_min").is_not_null())
                .then(pl.format("{} - {}", pl.col("range_min").round(0), pl.col("range_max").round(0)))
                .alias("p99 range"),
            ).select(
                "test",
                "proxy_hops",
                "path",
                "percentile",
                "unit",
                "n",
                "median [95 % CI]",
                "p99 range",
                "load",
                "flags",
            ),
            {},
        )
    )

# %%
if show:
    display(
        Markdown(
            "## Comparisons (secondary family, FDR)\n"
            f"Every percentile and the proxies' total CPU against {escape.page(baseline)} and the contrasts: "
            f"{len(compared)} comparisons, two-sided Mann-Whitney U, "
            f"{stats.CORRECTIONS[mesh.FDR]} over this family alone (apart from the primary family above), "
            f"alpha = {alpha}; the change's interval (delta_low, delta_high) is at the level the FDR procedure decided "
            f"at, {100 * (compared['ci_level'].max() if len(compared) else float('nan')):.4g} %, so that significant "
            "means it excludes 0."
        )
    )
    tables.show(
        tables.publication_table(
            compared.select(
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
                "delta_pct",
                "delta_low",
                "delta_high",
                "p_adj",
                "verdict",
            ).with_columns(family=pl.lit(f"mesh (secondary), {stats.CORRECTIONS[mesh.FDR]}")),
            {
                "median": "{:.4g}",
                "median_base": "{:.4g}",
                "delta_pct": "{:+.1f}",
                "delta_low": "{:+.1f}",
                "delta_high": "{:+.1f}",
                "p_adj": "{:.3g}",
            },
        )
    )

# %%
if show:
    cost = mesh.cost_per_hop(summary, compared, runs, baseline, contrasts)
    display(
        Markdown(
            "## Cost per hop\n"
            "Median latency (p50, p99) and the proxies' total CPU at the fixed work rate "
            f"({http_per_requests:g} req/s for HTTP, {rr_per_transactions:g} transactions/s for TCP_RR) that each "
            "scenario adds over its reference: `added` = median - reference's median, `added_per_hop` = that over the "
            "difference in hop counts (blank where the hops are equal: mTLS vs plaintext, node proxies vs "
            "sidecars). The verdict is the FDR comparison's."
        )
    )
    tables.show(
        tables.publication_table(
            cost,
            {
                "median": "{:.4g}",
                "median_reference": "{:.4g}",
                "added": "{:+.4g}",
                "added_per_hop": "{:+.4g}",
                "delta_pct": "{:+.1f}",
                "p_adj": "{:.3g}",
            },
        )
    )

# %%
if show:
    istio = reference.load_istio_proxy_cpu()
    beside = mesh.beside_istio(summary, runs, istio, http_per_requests)
    if not beside.is_empty():
        display(
            Markdown(
                "## Proxy CPU beside Istio's published figures\n"
                "Our proxies' CPU per proxy at 1000 HTTP requests/s (the total proxy CPU over the scenario's "
                "proxies; median over runs, 95 % CI) beside Istio 1.24's own figures for the proxy each shape "
                "stands for (data/reference/README.md: about-values from Istio's load test, 1 KB payload, no "
                "intervals). Istio's sidecar runs stats and metadata-exchange filters that stock Envoy and HAProxy "
                "lack, so ours are a floor for it; a lab node proxy is Envoy or HAProxy, not ztunnel."
            )
        )
        tables.show(
            tables.publication_table(
                beside, {"vcpu_per_proxy": "{:.3f}", "ci_low": "{:.3f}", "ci_high": "{:.3f}", "istio_vcpu": "{:.2f}"}
            )
        )

# %%
if mesh.has_sized_datapath(runs):  # BIG TCP scenarios: which size each one's runs had on every link
    display(
        Markdown(
            "## IP family and GSO/GRO sizes\nAs each scenario's runs recorded them (blank: the kernel's "
            "default, 64 KiB)."
        )
    )
    tables.show(tables.publication_table(mesh.sized_paths(runs)))

# %%
if show:
    figs = {
        f"mesh_ladder_{t}": mesh_figures.ladder_figure(ladder, t, compared, baseline, colour)
        for t in ladder["test"].unique(maintain_order=True)
    }
    for t in summary.filter(metric=normalize.PROXY_CPU_AT_TARGET)["test"].unique(maintain_order=True):
        figs[f"mesh_proxy_cpu_{t}"] = mesh_figures.proxy_cpu_figure(summary, runs, t, compared, baseline, colour)
    export.write_figures(figs, resolve(out_dir) / "figures", blog_dir=resolve(out_dir) / "blog")
    for fig in figs.values():
        figures.show(fig)
