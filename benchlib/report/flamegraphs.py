"""Plotly figures of the CPU profiles (profiles.py's tables): flamegraphs as icicles, differential
flamegraphs coloured by the change per unit of work against the baseline, and busy CPU per unit by category.

One figure per environment and test; a dropdown chooses the scenario, so the page carries each tree once.
The trees are those of profile_frames, already pruned of nodes under profiles.PRUNE_SHARE.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from benchlib import escape
from benchlib.stacks import CATEGORIES

from .colours import CATEGORY, UNKNOWN_CATEGORY
from .figures import TEMPLATE, scenario_order
from .format import unit as display_unit
from .theme import axis_title, describe

SHARED_NOTE = "client and server shared their CPUs: one profile of both"
SIDES = ("client", "server", "total")


def _sides(d: pl.DataFrame) -> list[str]:
    present = set(d["side"])
    return [s for s in SIDES if s in present]


def _one_environment(d: pl.DataFrame, what: str, test: str, environment: str | None) -> pl.DataFrame:
    d = d.filter(test=test) if environment is None else d.filter(test=test, environment=environment)
    if d.is_empty():
        raise ValueError(f"{what}: no profile rows for test {test!r}")
    if d["environment"].n_unique() > 1:
        raise ValueError(f"{what}: several environments for test {test!r}; name one")
    return d


def _side_note(sides: list[str]) -> str:
    return SHARED_NOTE if sides == ["total"] else "left: client, right: server"


def _dropdown(fig: go.Figure, labels: list[str], per_label: int) -> None:
    """A dropdown showing the ``per_label`` traces of one label at a time (traces in label order)."""
    n = len(labels) * per_label
    fig.update_layout(
        updatemenus=[
            dict(
                type="dropdown",
                x=1.0,
                xanchor="right",
                y=1.12,
                yanchor="bottom",
                showactive=True,
                buttons=[
                    dict(label=label, method="update", args=[{"visible": [i // per_label == k for i in range(n)]}])
                    for k, label in enumerate(labels)
                ],
            )
        ]
    )


def _domain(i: int, n: int) -> dict:
    gap = 0.02
    w = (1 - gap * (n - 1)) / n
    return dict(x=[i * (w + gap), i * (w + gap) + w], y=[0, 1])


def _short_ids(t: pl.DataFrame) -> tuple[list[str], list[str]]:
    """(ids, parents) as short numbers: the paths themselves would be most of the page's weight."""
    index = {path: str(i) for i, path in enumerate(t["id"])}
    return list(index.values()), [index.get(p, "") for p in t["parent"]]


def _icicles(
    fig: go.Figure, d: pl.DataFrame, order: list[str], sides: list[str], marker, customdata: list[str], hovertemplate
) -> None:
    """One icicle per scenario of ``order`` and side (only the first scenario's visible; _dropdown
    switches), each tree from profile_frames' rows of that scenario and side. ``marker`` and
    ``hovertemplate`` are functions of (scenario, side index, rows)."""
    for k, scenario in enumerate(order):
        for i, side in enumerate(sides):
            t = d.filter(scenario=scenario, side=side)
            ids, parents = _short_ids(t)
            fig.add_trace(
                go.Icicle(
                    ids=ids,
                    labels=[escape.plotly(n) for n in t["name"]],  # perf's names: plotly reads tags in labels
                    parents=parents,
                    values=t["samples"],
                    branchvalues="total",
                    name=f"{scenario} {side}",
                    domain=_domain(i, len(sides)),
                    visible=k == 0,
                    maxdepth=12,
                    marker=marker(scenario, i, t),
                    customdata=t.select(customdata),
                    tiling=dict(orientation="v"),
                    hovertemplate=hovertemplate(scenario, i, t),
                )
            )


def flamegraph(frames: pl.DataFrame, test: str, baseline: str = "host", environment: str | None = None) -> go.Figure:
    """The busy CPU of each scenario of ``test`` as an icicle (root: the side, then the task, then frames
    from the outermost caller), client and server side by side; a dropdown picks the scenario."""
    d = _one_environment(frames.filter(level="path"), "flamegraph", test, environment)
    order = scenario_order(d["scenario"], baseline)
    sides = _sides(d)
    unit = display_unit(d["unit"][0])
    fig = go.Figure()
    _icicles(
        fig,
        d,
        order,
        sides,
        lambda s, i, t: dict(colors=[CATEGORY.get(c, UNKNOWN_CATEGORY) for c in t["category"].fill_null("")]),
        ["cpu_per_unit", "share_pct", "category"],
        lambda s, i, t: (
            "%{label}<br>%{value} samples, %{customdata[1]:.1f} % of busy<br>"
            "%{customdata[0]:.3g} " + unit + "<br>%{customdata[2]}<extra></extra>"
        ),
    )
    fig.update_layout(
        template=TEMPLATE,
        height=620,
        margin=dict(t=110),
        title=f"CPU flamegraph: {test}<br><sup>busy CPU, {unit} in the hover; {_side_note(sides)}; "
        "colour: the frame's category; click a frame to zoom</sup>",
    )
    _dropdown(fig, order, len(sides))
    return describe(
        fig,
        f"Where the busy CPU of {test} goes, {order[0]} shown (the menu picks {', '.join(order)}): "
        f"each box is a function, as wide as its share of the busy samples; {_side_note(sides)}.",
        alt=f"Icicle flamegraph of the busy CPU of {test} per function, {_side_note(sides)}",
    )


def differential(differences: pl.DataFrame, test: str, environment: str | None = None) -> go.Figure:
    """Each scenario's flamegraph of ``test`` coloured by the change of each node's CPU per unit of work
    against the baseline (blue: less, red: more, white: the same); a dropdown picks the scenario."""
    d = _one_environment(
        differences.filter(pl.col("level") == "path", pl.col("samples") > 0), "differential", test, environment
    )
    baseline = d["baseline"][0]
    order = [s for s in scenario_order(d["scenario"], baseline) if s != baseline]
    sides = _sides(d)
    unit = display_unit(d["unit"][0])
    span = float(d["delta"].abs().max() or 1.0)  # pyright: ignore[reportArgumentType] (polars types Series.min/max as any literal or None)
    fig = go.Figure()
    _icicles(
        fig,
        d,
        order,
        sides,
        lambda s, i, t: dict(
            colors=t["delta"],
            colorscale="RdBu_r",
            cmid=0,
            cmin=-span,
            cmax=span,
            showscale=i == len(sides) - 1,
            colorbar=dict(title=f"Δ {unit}"),
        ),
        ["cpu_per_unit", "cpu_per_unit_base", "delta"],
        lambda s, i, t: (
            "%{label}<br>"
            + s
            + ": %{customdata[0]:.3g}<br>"
            + baseline
            + ": %{customdata[1]:.3g}<br>Δ %{customdata[2]:+.3g} "
            + unit
            + "<extra></extra>"
        ),
    )
    fig.update_layout(
        template=TEMPLATE,
        height=620,
        margin=dict(t=110),
        title=f"Differential flamegraph vs {baseline}: {test}<br><sup>size: the scenario's busy "
        f"samples; colour: change in {unit} (red: more CPU); {_side_note(sides)}</sup>",
    )
    _dropdown(fig, order, len(sides))
    return describe(
        fig,
        f"What {order[0]} spends per unit of work of {test} against {baseline}, function by function "
        f"(the menu picks {', '.join(order)}): red boxes cost more {unit}, blue ones less; "
        f"{_side_note(sides)}.",
        alt=f"Differential icicle flamegraph of {test} against {baseline}, coloured by the change in CPU",
    )


def category_bars(
    categories: pl.DataFrame, test: str, baseline: str = "host", environment: str | None = None
) -> go.Figure:
    """Busy CPU per unit of work of each scenario of ``test``, stacked by category; client and server
    facets where each side had CPUs of its own."""
    d = _one_environment(categories, "category_bars", test, environment)
    order = scenario_order(d["scenario"], baseline)
    sides = _sides(d)
    unit = display_unit(d["unit"][0])
    fig = make_subplots(
        rows=1,
        cols=len(sides),
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=[s if s != "total" else SHARED_NOTE for s in sides],
    )
    present = set(d["category"])
    for category in (c for c in CATEGORIES if c in present):
        for i, side in enumerate(sides):
            # a scenario without this category stacks a 0: a null would restart plotly's stack at 0 and
            # hide the categories under it
            t = (
                pl.DataFrame({"scenario": order})
                .join(d.filter(side=side, category=category), on="scenario", how="left", maintain_order="left")
                .with_columns(pl.col("cpu_per_unit", "share_pct").fill_null(0.0))
            )
            fig.add_trace(
                go.Bar(
                    x=t["scenario"],
                    y=t["cpu_per_unit"],
                    name=category,
                    legendgroup=category,
                    showlegend=i == 0,
                    marker_color=CATEGORY[category],
                    customdata=t.select("share_pct"),
                    hovertemplate="%{x}: "
                    + category
                    + " %{y:.3g} "
                    + unit
                    + " (%{customdata[0]:.0f} % of busy)<extra></extra>",
                ),
                row=1,
                col=i + 1,
            )
    fig.update_layout(
        template=TEMPLATE,
        barmode="stack",
        legend_title_text="category",
        title=f"Busy CPU per unit of work by category: {test}<br><sup>{unit}; pooled profiled runs, "
        "idle left out</sup>",
    )
    fig.update_yaxes(title_text=axis_title("busy CPU per unit of work", unit), row=1, col=1)
    fig.update_xaxes(title_text="Scenario")
    top = d.group_by("scenario", "side").agg(pl.col("cpu_per_unit").sum()).sort("scenario", "side")
    return describe(
        fig,
        f"Busy CPU per unit of work of {test} by category, pooled profiled runs: "
        + "; ".join(f"{r['scenario']} ({r['side']}) {r['cpu_per_unit']:.3g} {unit}" for r in top.iter_rows(named=True))
        + ".",
    )
