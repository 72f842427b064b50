"""Service-mesh figures: the percentile ladder per proxy hop count and the proxies' CPU, captioned
with the mesh family's significant changes (the numbers: benchlib.analysis.mesh)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import polars as pl

from ..analysis.mesh import LADDER_METRICS, path_label, paths
from ..analysis.normalize import PROXY_CPU_AT_TARGET
from . import figures
from .colours import pick
from .format import unit as display_unit
from .summary import FINDING, ordered_findings


def comparisons_caption(compared: pl.DataFrame | None, test: str, metrics: Sequence[str], side: str) -> pl.DataFrame:
    """The mesh comparisons of ``test`` on ``metrics`` (and ``side``) that a figure's caption states:
    findings first, largest change first (summary.ordered_findings); empty without comparisons."""
    if compared is None or compared.is_empty():
        return pl.DataFrame()
    return ordered_findings(
        compared.filter(pl.col("test") == test, pl.col("metric").is_in(list(metrics)), pl.col("side") == side), None
    )


SENTENCES = 3  # significant changes a caption states; the others it counts


def _caption(d: pl.DataFrame, quantity: str, test: str, found: pl.DataFrame, within: str) -> str:
    """figures.values_caption, one entry per scenario (its values named by ``within``), then how many
    of the comparisons drawn are significant after the mesh family's correction, the largest as
    sentences."""
    text = figures.values_caption(d, quantity, test, pl.DataFrame(), within=within)
    if found.is_empty():
        return text
    sig = found.filter(kind=FINDING)
    return (
        f"{text} {len(sig)} of the {len(found)} comparisons of these values (vs the baseline and the contrasts) "
        f"are significant after {found['correction'][0]}"
        + (
            f"{', the largest' if len(sig) > 1 else ''}: {figures.comparison_sentences(sig, SENTENCES)}"
            if len(sig)
            else "."
        )
    )


def ladder_figure(
    ladder_rows: pl.DataFrame,
    test: str,
    compared: pl.DataFrame | None = None,
    baseline: str | None = None,
    colours: Mapping[str, str] | None = None,
) -> go.Figure:
    """The percentile ladder of one test: latency (log) against percentile, a line per scenario
    labelled with its hop count, hop counts in order; whiskers: 95 % CI. The caption gives every
    point's median, CI and n and, with ``compared`` (comparisons()), the significant changes. Each
    line is in its scenario's colour (``colours``: the campaign's, colours.scenario_colours)."""
    d = ladder_rows.filter(test=test)
    if d.is_empty():
        raise ValueError(f"ladder_figure: no latency percentiles for test {test!r}")
    order = d.select("path").unique(maintain_order=True)["path"].to_list()
    scenario_of = dict(d.select("path", "scenario").unique().iter_rows())
    by_scenario = pick(colours, scenario_of.values(), baseline)
    colors = {path: by_scenario[scenario_of[path]] for path in order}
    dash = {0: "solid", 1: "dash", 2: "dot"}
    unit = display_unit(d["unit"][0])
    fig = go.Figure()
    for path in order:
        g = d.filter(path=path)
        hops = g["proxy_hops"][0]
        fig.add_trace(
            go.Scatter(
                x=g["percentile"],
                y=g["median"],
                name=path,
                mode="lines+markers",
                line=dict(color=colors[path], width=2, dash=dash.get(hops, "dashdot")),
                error_y={**figures.ci_whiskers(g), "color": colors[path]},
                customdata=g.select("n", "ci_low", "ci_high"),
                hovertemplate="%{x}: %{y:.4g} " + unit + "<br>95 % CI [%{customdata[1]:.4g}, %{customdata[2]:.4g}]"
                "<br>n = %{customdata[0]}<extra>" + path + "</extra>",
            )
        )
    fig.update_yaxes(type="log")
    fig.update_layout(
        template=figures.TEMPLATE,
        legend_title_text="scenario (proxy hops)",
        title=f"Latency percentiles per proxy hop count: {test}<br><sup>median over runs of each "
        "run's percentile, whiskers: 95 % CI; line style: hop count</sup>",
        xaxis_title="Percentile",
        yaxis_title=figures.axis_title("latency, log scale", unit),
    )
    caption = _caption(
        d.with_columns(scenario=pl.col("path")),
        "latency percentiles",
        test,
        comparisons_caption(compared, test, LADDER_METRICS, "none"),
        within="percentile",
    )
    return figures.describe(fig, caption)


def proxy_cpu_figure(
    summary: pl.DataFrame,
    runs: pl.DataFrame,
    test: str,
    compared: pl.DataFrame | None = None,
    baseline: str | None = None,
    colours: Mapping[str, str] | None = None,
) -> go.Figure:
    """The proxies' CPU at the fixed work rate per scenario, client and server side by side (hatched:
    server), median with 95 % CI. The caption gives each bar's median, CI and n and, with ``compared``
    (comparisons()), the significant changes of the proxies' total CPU."""
    d = summary.filter(test=test, metric=PROXY_CPU_AT_TARGET).filter(pl.col("side").is_in(["client", "server"]))
    if d.is_empty():
        raise ValueError(f"proxy_cpu_figure: no proxy CPU for test {test!r}")
    d = d.join(paths(runs), on="scenario").with_columns(path=path_label()).sort("proxy_hops", "mtls", "scenario")
    order = d.select("path").unique(maintain_order=True)["path"].to_list()
    scenario_of = dict(d.select("path", "scenario").unique().iter_rows())
    by_scenario = pick(colours, scenario_of.values(), baseline)
    colors = {path: by_scenario[scenario_of[path]] for path in order}
    unit = display_unit(d["unit"][0])
    fig = go.Figure()
    for side, pattern in (("client", ""), ("server", "/")):
        s = figures.in_order(d.filter(side=side), "path", order)
        fig.add_trace(
            go.Bar(
                name=side,
                x=s["path"],
                y=s["median"],
                error_y=figures.ci_whiskers(s),
                marker=dict(
                    color=[colors[x] for x in s["path"]],
                    pattern_shape=pattern,
                    pattern_fgcolor="white",
                    line=dict(color="#333", width=1),
                ),
                customdata=s.select("n", "ci_low", "ci_high"),
                hovertemplate="%{x} " + side + ": %{y:.4g} " + unit + "<br>95 % CI [%{customdata[1]:.4g}, "
                "%{customdata[2]:.4g}]<br>n = %{customdata[0]}<extra></extra>",
            )
        )
    fig.update_layout(
        template=figures.TEMPLATE,
        barmode="group",
        legend_title_text="side",
        title=f"Proxy CPU: {test}<br><sup>median of runs, whiskers: 95 % CI; "
        "plain: client's proxies, hatched: server's</sup>",
        xaxis_title="Scenario (proxy hops)",
        yaxis_title=figures.axis_title("proxy CPU", unit),
    )
    caption = _caption(
        d.with_columns(scenario=pl.col("path")),
        "proxy CPU at the fixed work rate by side",
        test,
        comparisons_caption(compared, test, [PROXY_CPU_AT_TARGET], "total"),
        within="side",
    )
    return figures.describe(fig, caption)
