"""Plotly figures for the report and the blog, all on one template ("benchlib").

Inputs are the tidy tables or the frames from stats/normalize/reference;
figures pivot, nothing upstream does.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io.base_renderers import MimetypeRenderer, PlotlyRenderer

from .stats import WITHIN_NOISE, metric_info

TEMPLATE = "benchlib"
# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
BAND_COLOR = "rgba(120, 120, 120, 0.18)"
STATIC_WIDTH = 900


def _template() -> go.layout.Template:
    t = go.layout.Template(pio.templates["plotly_white"])
    t.layout.update(
        font=dict(family="Helvetica, Arial, sans-serif", size=14, color="#222"),
        title=dict(x=0.0, xanchor="left", font=dict(size=18)),
        colorway=PALETTE,
        height=480,
        margin=dict(l=80, r=30, t=80, b=70),
        hoverlabel=dict(font_size=13),
    )
    return t


pio.templates[TEMPLATE] = _template()


class _ReportRenderer(MimetypeRenderer):
    """A div that expects plotly.js on the page, plus plotly's JSON for JupyterLab.

    The report page includes plotly.js once in its head (report.py), so no
    output carries its own copy and nothing is fetched from a CDN.
    """

    def to_mimebundle(self, fig_dict):
        html = pio.to_html(fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
                           default_width="100%", validate=False)
        return {**PlotlyRenderer().to_mimebundle(fig_dict), "text/html": html}


pio.renderers[TEMPLATE] = _ReportRenderer()


def use_report_renderer() -> None:
    """Render figures for the offline report; headless papermill kernels need it set explicitly."""
    pio.renderers.default = TEMPLATE


def scenario_order(scenarios: Iterable[str], baseline: str) -> list[str]:
    """Baseline first, then the others alphabetically: the same order in every figure."""
    s = sorted(set(scenarios))
    return ([baseline] if baseline in s else []) + [x for x in s if x != baseline]


def _colors(order: list[str]) -> dict[str, str]:
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(order)}


def _metric_title(metric: str, side: str = "none") -> str:
    text = metric_info(metric).description
    text = text[0].upper() + text[1:]
    return text if side == "none" else f"{text} ({side})"


def _one(df: pd.DataFrame, what: str, **where) -> pd.DataFrame:
    """Rows matching `where`; a figure shows one campaign and environment."""
    mask = np.ones(len(df), bool)
    for col, val in where.items():
        mask &= (df[col] == val).to_numpy()
    out = df[mask]
    if out.empty:
        raise ValueError(f"{what}: no rows for {where}")
    if out[["campaign", "environment"]].drop_duplicates().shape[0] > 1:
        raise ValueError(f"{what}: several campaigns/environments for {where}; filter to one first")
    return out


def _whiskers(d: pd.DataFrame) -> dict:
    return dict(type="data", array=d["ci_high"] - d["median"], arrayminus=d["median"] - d["ci_low"],
                thickness=1.5, width=6, color="#333")


def bars(summary: pd.DataFrame, test: str, metric: str, side: str = "none", baseline: str = "host") -> go.Figure:
    """Median per scenario with 95 % CI whiskers, one colour per scenario."""
    d = _one(summary, "bars", test=test, metric=metric, side=side)
    order = scenario_order(d["scenario"], baseline)
    d = d.set_index("scenario").loc[order].reset_index()
    unit = d["unit"].iloc[0]
    fig = go.Figure(go.Bar(
        x=d["scenario"], y=d["median"], marker_color=[_colors(order)[s] for s in d["scenario"]],
        error_y=_whiskers(d), customdata=d[["n", "ci_low", "ci_high"]],
        hovertemplate="%{x}: %{y:.4g} " + unit + "<br>95 % CI [%{customdata[1]:.4g}, %{customdata[2]:.4g}]"
                      "<br>n = %{customdata[0]}<extra></extra>"))
    fig.update_layout(template=TEMPLATE, showlegend=False,
                      title=f"{_metric_title(metric, side)}: {test}<br><sup>median of runs, whiskers: 95 % CI</sup>",
                      xaxis_title="scenario", yaxis_title=f"{metric} ({unit})")
    return fig


def cpu_bars(summary: pd.DataFrame, test: str, metric: str = "cpu_pct_at_target", baseline: str = "host") -> go.Figure:
    """Client and server CPU side by side per scenario (hatched: server), median with 95 % CI."""
    d = _one(summary, "cpu_bars", test=test, metric=metric)
    d = d[d["side"].isin(["client", "server"])]
    order = scenario_order(d["scenario"], baseline)
    colors = _colors(order)
    fig = go.Figure()
    for side, pattern in (("client", ""), ("server", "/")):
        s = d[d["side"] == side].set_index("scenario").reindex(order).reset_index()
        fig.add_trace(go.Bar(
            name=side, x=s["scenario"], y=s["median"], error_y=_whiskers(s),
            marker=dict(color=[colors[x] for x in s["scenario"]], pattern_shape=pattern,
                        pattern_fgcolor="white", line=dict(color="#333", width=1)),
            hovertemplate="%{x} " + side + ": %{y:.4g}<extra></extra>"))
    unit = d["unit"].iloc[0]
    fig.update_layout(template=TEMPLATE, barmode="group", legend_title_text="side",
                      title=f"CPU per side: {test}<br><sup>{unit}; median of runs, whiskers: 95 % CI; "
                            "plain: client, hatched: server</sup>",
                      xaxis_title="scenario", yaxis_title=unit)
    return fig


def runs_strip(values: pd.DataFrame, test: str, metric: str, side: str = "none", baseline: str = "host") -> go.Figure:
    """Every run as a point over its scenario's box: spread, outliers and n at a glance."""
    d = _one(values, "runs_strip", test=test, metric=metric, side=side)
    order = scenario_order(d["scenario"], baseline)
    colors = _colors(order)
    fig = go.Figure([
        go.Box(y=g["value"], name=s, boxpoints="all", jitter=0.4, pointpos=0, marker=dict(color=colors[s], size=7),
               line=dict(color=colors[s], width=1), fillcolor="rgba(0,0,0,0)",
               customdata=g[["run_id", "block"]],
               hovertemplate="%{y:.4g}<br>run %{customdata[0]}, block %{customdata[1]}<extra>" + s + "</extra>")
        for s in order for g in [d[d["scenario"] == s]]
    ])
    unit = d["unit"].iloc[0]
    fig.update_layout(template=TEMPLATE, showlegend=False,
                      title=f"{_metric_title(metric, side)}: {test}<br><sup>each point is one run</sup>",
                      xaxis_title="scenario", yaxis_title=f"{metric} ({unit})")
    return fig


def forest(comparisons: pd.DataFrame) -> go.Figure:
    """Delta % vs the baseline with 95 % CI per comparison; grey: the +/- noise band of its metric.

    Filled markers are significant after correction, open ones are not.
    Comparisons without an effect estimate (too few runs, values <= 0) are
    listed in the subtitle count, not drawn.
    """
    c = comparisons.dropna(subset=["delta_pct"]).copy()
    skipped = len(comparisons) - len(c)
    side = np.where(c["side"] == "none", "", " (" + c["side"] + ")")
    c["label"] = c["test"] + " · " + c["metric"] + side + " · " + c["scenario"]
    order = scenario_order(c["scenario"], comparisons["baseline"].iloc[0])
    colors = _colors(order)
    fig = go.Figure(go.Bar(
        y=c["label"], x=2 * c["noise_band_pct"], base=-c["noise_band_pct"], orientation="h",
        marker_color=BAND_COLOR, name="noise band", hoverinfo="skip", width=0.8))
    for s in order:
        g = c[c["scenario"] == s]
        significant = g["verdict"] != WITHIN_NOISE
        fig.add_trace(go.Scatter(
            y=g["label"], x=g["delta_pct"], mode="markers", name=s,
            marker=dict(color=colors[s], size=10, symbol=np.where(significant, "circle", "circle-open"),
                        line=dict(width=2, color=colors[s])),
            error_x=dict(type="data", array=g["delta_high"] - g["delta_pct"],
                         arrayminus=g["delta_pct"] - g["delta_low"], color=colors[s], thickness=1.5),
            customdata=g[["verdict", "p_adj"]],
            hovertemplate="%{y}<br>%{customdata[0]}<br>p_adj = %{customdata[1]:.3g}<extra></extra>"))
    fig.add_vline(x=0, line_color="#333", line_width=1)
    note = f"; {skipped} comparison(s) without an effect estimate not shown" if skipped else ""
    baseline = comparisons["baseline"].iloc[0]
    fig.update_layout(template=TEMPLATE, height=160 + 26 * len(c), barmode="overlay",
                      title=f"Change vs {baseline}<br><sup>median ratio - 1, 95 % bootstrap CI; "
                            f"filled: significant ({c['correction'].iloc[0] if len(c) else ''}){note}</sup>",
                      xaxis_title=f"delta vs {baseline} (%)", yaxis=dict(autorange="reversed", title=None))
    return fig


def _iso_levels(per_target: np.ndarray, max_lines: int = 5) -> list[float]:
    """Round 1-2-5 levels spanning the observed CPU-per-target values."""
    lo, hi = np.nanmin(per_target) / 2, np.nanmax(per_target) * 2
    levels = [m * 10.0**e for e in range(-3, 6) for m in (1, 2, 5) if lo <= m * 10.0**e <= hi]
    step = math.ceil(len(levels) / max_lines)
    return levels[::step]


SIDE_CPUS = {"client": "the client's", "server": "the server's", "total": "both sides'"}


def throughput_vs_cpu(per_run: pd.DataFrame, test: str, side: str = "total", baseline: str = "host",
                      target_gbps: float = 100.0) -> go.Figure:
    """Each stream run: CPU busy % vs Gbit/s, with iso lines of equal CPU cost per target_gbps.

    `per_run` is normalize.per_run_cpu(); on an iso line every point costs the
    same CPU for the same throughput, so points above-left are cheaper.
    """
    d = _one(per_run, "throughput_vs_cpu", test=test, work_metric="throughput")
    order = scenario_order(d["scenario"], baseline)
    colors = _colors(order)
    fig = go.Figure()
    xmax, ymax = d[side].max() * 1.1, d["work"].max() * 1.15
    for level in _iso_levels(d[side] * target_gbps / d["work"]):
        # label each line where it leaves the plot area (right edge or top)
        x_end = min(xmax, ymax * level / target_gbps)
        fig.add_trace(go.Scatter(x=[0, xmax], y=[0, xmax * target_gbps / level], mode="lines", showlegend=False,
                                 line=dict(color="#999", width=1, dash="dot"), hoverinfo="skip"))
        fig.add_annotation(x=x_end, y=x_end * target_gbps / level, text=f"{level:g} % per {target_gbps:g} Gbit/s",
                           showarrow=False, xanchor="right", yanchor="bottom", font=dict(size=11, color="#777"))
    for s in order:
        g = d[d["scenario"] == s]
        fig.add_trace(go.Scatter(x=g[side], y=g["work"], mode="markers", name=s,
                                 marker=dict(color=colors[s], size=9), customdata=g[["run_id"]],
                                 hovertemplate="%{y:.3g} Gbit/s at %{x:.3g} % CPU<br>run %{customdata[0]}"
                                               "<extra>" + s + "</extra>"))
    fig.update_layout(template=TEMPLATE, legend_title_text="scenario",
                      title=f"Throughput vs CPU: {test}<br><sup>one point per run; dotted: equal CPU cost "
                            f"per {target_gbps:g} Gbit/s</sup>",
                      xaxis=dict(title=f"CPU busy, % of {SIDE_CPUS[side]} CPUs", range=[0, xmax]),
                      yaxis=dict(title="throughput (Gbit/s)", range=[0, ymax]))
    return fig


LATENCY_PERCENTILES = ("latency_p50", "latency_p90", "latency_p99")


def latency_percentiles(summary: pd.DataFrame, test: str, baseline: str = "host") -> go.Figure:
    """p50/p90/p99 latency per scenario (grouped bars, median over runs with 95 % CI)."""
    d = _one(summary, "latency_percentiles", test=test)
    d = d[d["metric"].isin(LATENCY_PERCENTILES)]
    if d.empty:
        raise ValueError(f"latency_percentiles: {test} has no latency percentiles")
    order = scenario_order(d["scenario"], baseline)
    colors = _colors(order)
    fig = go.Figure()
    for s in order:
        g = d[d["scenario"] == s].set_index("metric").reindex(LATENCY_PERCENTILES).reset_index()
        fig.add_trace(go.Bar(name=s, x=[m.removeprefix("latency_") for m in g["metric"]], y=g["median"],
                             marker_color=colors[s], error_y=_whiskers(g),
                             hovertemplate="%{x}: %{y:.4g} us<extra>" + s + "</extra>"))
    fig.update_layout(template=TEMPLATE, barmode="group", legend_title_text="scenario",
                      title=f"Round-trip latency percentiles: {test}<br><sup>median over runs of each run's "
                            "percentile, whiskers: 95 % CI</sup>",
                      xaxis_title="percentile", yaxis_title="latency (us)")
    return fig


def reference_changes(side_by_side: pd.DataFrame) -> go.Figure:
    """Our relative change next to the published one, per like-for-like claim."""
    fig = go.Figure([
        go.Bar(name="this campaign", y=side_by_side["claim"], x=side_by_side["ours_delta_pct"], orientation="h",
               marker_color=PALETTE[0],
               error_x=dict(type="data", array=side_by_side["ours_high"] - side_by_side["ours_delta_pct"],
                            arrayminus=side_by_side["ours_delta_pct"] - side_by_side["ours_low"])),
        go.Bar(name="EKS m6i 2026 (published)", y=side_by_side["claim"], x=side_by_side["theirs_change_pct"],
               orientation="h", marker_color=PALETTE[1]),
    ])
    fig.add_vline(x=0, line_color="#333", line_width=1)
    fig.update_layout(template=TEMPLATE, barmode="group", height=200 + 70 * len(side_by_side),
                      title="Relative change: ours vs published<br><sup>ours: median ratio - 1 with 95 % CI; "
                            "published: ratio of medians, no CI (repetitions not published)</sup>",
                      xaxis_title="change (%)", yaxis=dict(autorange="reversed", title=None))
    return fig


def write_figures(figures: Mapping[str, go.Figure], out_dir: str | Path, png_scale: float = 2.0) -> list[Path]:
    """Write each figure as <name>.html (self-contained, offline), <name>.svg and <name>.png.

    All static images go through one kaleido call, so Chromium starts once.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written, figs, files, heights, scales = [], [], [], [], []
    for name, fig in figures.items():
        html = out / f"{name}.html"
        # plotly.min.js once, beside the pages (offline, and 5 MB instead of 5 MB a figure)
        fig.write_html(html, include_plotlyjs="directory", include_mathjax=False, full_html=True,
                       default_width="100%")
        written.append(html)
        height = fig.layout.height or pio.templates[TEMPLATE].layout.height
        for ext, scale in (("svg", 1.0), ("png", png_scale)):
            figs.append(fig)
            files.append(out / f"{name}.{ext}")
            heights.append(height)
            scales.append(scale)
    if figs:
        pio.write_images(figs, files, width=STATIC_WIDTH, height=heights, scale=scales)
    return written + files
