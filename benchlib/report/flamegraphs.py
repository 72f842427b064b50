"""Plotly figures of the CPU profiles (profiles.py's tables): flamegraphs as icicles, differential
flamegraphs coloured by each frame's own relative change per unit of work against the baseline, the
frames whose exclusive CPU per unit changed most, and busy CPU per unit by category.

For the page, one figure per environment and test with a dropdown that chooses the scenario, so the page
carries each tree once; for a finding (``scenarios`` of one), the compared scenario alone and no widget,
fit for a static image. The trees are those of profile_frames, already pruned of nodes under
profiles.PRUNE_SHARE, and drawn to their full depth: the frames that tell datapaths apart (process_backlog,
ip_rcv, nf_hook_slow) sit 20 and more calls deep.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from benchlib.base import escape
from benchlib.profiling.stacks import CATEGORIES

from ..analysis.verdicts import Kind
from .colours import CATEGORY, UNKNOWN_CATEGORY, pick
from .figures import TEMPLATE, scenario_order
from .format import (
    CHANGE_D3,
    CPU_D3,
    RELATIVE_CAP,
    caption,
    cpu_change_interval,
    cpu_short_unit,
    level,
    relative_change,
    unit as display_unit,
    whole_change_interval,
)
from .theme import HEIGHT, axis_title, describe

SHARED_NOTE = "client and server shared their CPUs: one profile of both"
SIDES = ("client", "server", "total")
ICICLE_HEIGHT = 820  # thirty levels of frames, each tall enough to read


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


def _change_lines(
    attribution: pl.DataFrame | None, kind: str, environment: str, test: str, baseline: str
) -> pl.DataFrame:
    """Per scenario, side and part of ``attribution`` (profile_attribution; ``kind`` "category", or
    "self": a frame's own time), the hover's line for its change against ``baseline`` with its interval
    across the profiled runs (column ``change``, starting with a line break)."""
    schema = {"scenario": pl.String, "side": pl.String, "name": pl.String, "change": pl.String}
    if attribution is None:
        return pl.DataFrame(schema=schema)
    a = attribution.filter(environment=environment, test=test, baseline=baseline, level=kind)
    lines = [
        f"<br>{'own time, all its call paths, ' if kind == 'self' else ''}against {escape.plotly(baseline)}: "
        + cpu_change_interval(
            r["delta"], r["delta_low"], r["delta_high"], cpu_short_unit(r["cpu_unit"], r["work_unit"])
        )
        + f" ({level(r['ci_level'])}, {r['n_runs']} vs {r['n_runs_base']} profiled runs)"
        for r in a.iter_rows(named=True)
    ]
    return a.select("scenario", "side", "name").with_columns(change=pl.Series(lines, dtype=pl.String))


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


def _focus(t: pl.DataFrame) -> str | None:
    """The id of the node where the change of a differential tree (``t``: one scenario and side, with
    delta) concentrates: from the root down, while one child holds FOCUS of its parent's absolute
    change; None where that is the root itself."""
    kids = t.group_by("parent").agg(pl.col("id"), pl.col("delta"))
    children = {r["parent"]: list(zip(r["id"], r["delta"], strict=True)) for r in kids.iter_rows(named=True)}
    delta = dict(zip(t["id"], t["delta"], strict=True))
    roots = children.get("", [])
    if len(roots) != 1:
        return None
    node, focus = roots[0][0], None
    while node in children and abs(delta[node]) > 0:
        best, d = max(children[node], key=lambda c: abs(c[1]))
        if abs(d) < FOCUS * abs(delta[node]):
            break
        node, focus = best, best
    return focus


FOCUS = 0.8


def _icicles(
    fig: go.Figure,
    d: pl.DataFrame,
    order: list[str],
    sides: list[str],
    marker,
    customdata: list[str],
    hovertemplate,
    focus: bool = False,
) -> None:
    """One icicle per scenario of ``order`` and side (only the first scenario's visible; _dropdown
    switches), each tree from profile_frames' rows of that scenario and side, every level drawn.
    ``marker`` and ``hovertemplate`` are functions of (scenario, side index, rows); with ``focus``,
    each icicle opens on the subtree where its change concentrates (_focus)."""
    for k, scenario in enumerate(order):
        for i, side in enumerate(sides):
            t = d.filter(scenario=scenario, side=side)
            ids, parents = _short_ids(t)
            start = _focus(t) if focus else None
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
                    maxdepth=-1,
                    level=ids[list(t["id"]).index(start)] if start is not None else None,
                    marker=marker(scenario, i, t),
                    customdata=t.select(customdata),
                    tiling=dict(orientation="v"),
                    hovertemplate=hovertemplate(scenario, i, t),
                )
            )


def flamegraph(
    frames: pl.DataFrame,
    test: str,
    baseline: str,
    environment: str | None = None,
    scenarios: list[str] | None = None,
) -> go.Figure:
    """The busy CPU of each scenario of ``test`` (or of ``scenarios``) as an icicle (root: the side, then
    the task, then frames from the outermost caller), client and server side by side; a dropdown picks
    the scenario where there are several."""
    d = _one_environment(frames.filter(level="path"), "flamegraph", test, environment)
    order = [s for s in scenario_order(d["scenario"], baseline) if scenarios is None or s in scenarios]
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
            "%{customdata[0]:" + CPU_D3 + "} " + unit + "<br>%{customdata[2]}<extra></extra>"
        ),
    )
    menu = len(order) > 1
    fig.update_layout(
        template=TEMPLATE,
        height=ICICLE_HEIGHT,
        margin=dict(t=110),
        title=f"CPU flamegraph: {test}{'' if menu else f', {order[0]}'}<br><sup>busy CPU, {unit} in the "
        f"hover; {_side_note(sides)}; colour: the frame's category</sup>",
    )
    if menu:
        _dropdown(fig, order, len(sides))
    shown = f"{order[0]} shown (the menu picks {', '.join(order)})" if menu else order[0]
    return describe(
        fig,
        f"Where the busy CPU of {test} goes, {shown}: each box is a function, as wide as its share of "
        f"the busy samples; {_side_note(sides)}.",
        alt=f"Icicle flamegraph of the busy CPU of {test} per function, {_side_note(sides)}",
    )


def _outlines(named: set[str], names: pl.Series) -> dict:
    """An icicle's box outlines: wide and in OUTLINE around the frames in ``named``, the page's white else."""
    hit = [n in named for n in names]
    return dict(color=[OUTLINE if h else "white" for h in hit], width=[3 if h else 1 for h in hit])


# apart from every colour of the diverging red-blue scale, so that an outline reads on either end
OUTLINE, OUTLINE_WORD = "#f2c200", "yellow"


def differential(
    differences: pl.DataFrame,
    test: str,
    environment: str | None = None,
    scenarios: list[str] | None = None,
    explanations: pl.DataFrame | None = None,
    attribution: pl.DataFrame | None = None,
) -> go.Figure:
    """Each scenario's flamegraph of ``test`` (or of ``scenarios``) coloured by each node's own relative
    change of CPU per unit of work against the baseline, on a diverging scale centred at 0 (blue: less,
    red: more, white: the same; capped at format.RELATIVE_CAP %, a node the baseline lacks at the cap);
    a dropdown picks the scenario where there are several. Each icicle opens on the subtree where the
    change concentrates (a click on the top bar goes back up). With ``explanations``
    (report.profiles.explanations), the frames a side's sentence names are outlined wherever they are
    called. With ``attribution`` (profile_attribution), a frame's hover gives the change of its own time,
    over all its call paths, with its interval across the profiled runs."""
    d = _one_environment(
        differences.filter(pl.col("level") == "path", pl.col("samples") > 0), "differential", test, environment
    ).with_columns(relative=relative(pl.col("cpu_per_unit"), pl.col("cpu_per_unit_base")))
    baseline = d["baseline"][0]
    d = d.join(
        _change_lines(attribution, "self", d["environment"][0], test, baseline),
        on=["scenario", "side", "name"],
        how="left",
        maintain_order="left",
    ).with_columns(pl.col("change").fill_null(""))
    order = [
        s for s in scenario_order(d["scenario"], baseline) if s != baseline and (scenarios is None or s in scenarios)
    ]
    sides = _sides(d)
    unit = display_unit(d["unit"][0])
    named: dict[tuple[str, str], set[str]] = {}
    if explanations is not None:
        where = {"environment": environment} if environment else {}
        mine = explanations.filter(test=test, baseline=baseline, **where)
        for r in mine.iter_rows(named=True):
            named.setdefault((r["scenario"], r["side"]), set()).update(r["frames"])
    ticks = [-RELATIVE_CAP, -RELATIVE_CAP / 2, 0, RELATIVE_CAP / 2, RELATIVE_CAP]
    fig = go.Figure()
    _icicles(
        fig,
        d,
        order,
        sides,
        lambda s, i, t: dict(
            colors=t["relative"],
            colorscale="RdBu_r",
            cmid=0,
            cmin=-RELATIVE_CAP,
            cmax=RELATIVE_CAP,
            showscale=i == len(sides) - 1,
            colorbar=dict(
                title="change",
                tickvals=ticks,
                ticktext=[relative_change(v, capped=abs(v) == RELATIVE_CAP) for v in ticks],
            ),
            line=_outlines(named.get((s, sides[i]), set()), t["name"]),
        ),
        ["cpu_per_unit", "cpu_per_unit_base", "delta", "relative", "change"],
        lambda s, i, t: (
            "%{label}<br>"
            + s
            + ": %{customdata[0]:"
            + CPU_D3
            + "}<br>"
            + baseline
            + ": %{customdata[1]:"
            + CPU_D3
            + "}<br>Δ %{customdata[2]:+"
            + CPU_D3
            + "} "
            + unit
            + " (%{customdata[3]:"
            + CHANGE_D3
            + "} %)%{customdata[4]}<extra></extra>"
        ),
        focus=True,
    )
    menu = len(order) > 1
    outlined = any(named.values())
    notes = [
        f"size: busy samples; colour: each frame's change in % of its own {unit} (red: more)",
        *([f"outlined in {OUTLINE_WORD}: the functions the explanation names"] if outlined else []),
        _side_note(sides),
    ]
    fig.update_layout(
        template=TEMPLATE,
        height=ICICLE_HEIGHT,
        margin=dict(t=90 + 20 * len(notes)),
        title=f"Differential flamegraph: {test}, {order[0] if not menu else 'scenario'} vs {baseline}<br><sup>"
        + "<br>".join(notes)
        + "</sup>",
    )
    if menu:
        _dropdown(fig, order, len(sides))
    shown = f"{order[0]} shown (the menu picks {', '.join(order)})" if menu else order[0]
    return describe(
        fig,
        f"What {shown} spends per unit of work of {test} against {baseline}, function by function, "
        f"opened where the change is: red boxes cost more {unit} than the same call path in {baseline}, "
        f"blue ones less, coloured by their own change in %"
        f"{f'; the functions the explanation names are outlined in {OUTLINE_WORD}' if outlined else ''}; "
        f"{_side_note(sides)}.",
        alt=f"Differential icicle flamegraph of {test}, {order[0]} against {baseline}, coloured by each "
        "function's relative change in CPU",
    )


def relative(value: pl.Expr, base: pl.Expr) -> pl.Expr:
    """The change of ``value`` over ``base`` in %, within ±RELATIVE_CAP (what the baseline lacks at +cap)."""
    return (
        pl.when(base > 0)
        .then(100 * (value - base) / base)
        .otherwise(pl.when(value > 0).then(RELATIVE_CAP).otherwise(0.0))
        .clip(-RELATIVE_CAP, RELATIVE_CAP)
    )


def changed_frames(
    attribution: pl.DataFrame,
    test: str,
    scenario: str,
    baseline: str,
    environment: str | None = None,
    colours: dict[str, str] | None = None,
    top: int = 10,
) -> go.Figure:
    """The ``top`` frames whose exclusive CPU per unit of work (the samples taken in the frame itself)
    changed most between ``scenario`` and ``baseline`` (profile_attribution's own-time rows: the change
    of the mean across the profiled runs, with its Welch interval), each bar the change with its
    interval, largest on top; a bar whose interval holds zero is pale. Where the sides had CPUs of
    their own, a frame is named with its side."""
    d = _one_environment(
        attribution.filter(pl.col("level") == "self", scenario=scenario, baseline=baseline),
        "changed_frames",
        test,
        environment,
    )
    unit = display_unit(d["unit"][0])
    colour = pick(colours, [baseline, scenario], baseline)[scenario]
    sided = d["side"].n_unique() > 1
    f = (
        d.sort(pl.col("delta").abs(), "name", descending=[True, False])
        .head(top)
        .reverse()  # plotly draws the first category at the bottom
        .with_columns(
            label=pl.format("{} ({})", "name", "side") if sided else pl.col("name"),
            clear=(pl.col("delta_low") > 0) | (pl.col("delta_high") < 0),
        )
    )
    level_text = level(float(d["ci_level"][0]))
    fig = go.Figure(
        go.Bar(
            y=[escape.plotly(n) for n in f["label"]],
            x=f["delta"],
            orientation="h",
            name=f"{scenario} - {baseline}",
            marker=dict(color=colour, opacity=[1.0 if c else 0.35 for c in f["clear"]]),
            error_x=dict(
                type="data",
                symmetric=False,
                array=(f["delta_high"] - f["delta"]).to_list(),
                arrayminus=(f["delta"] - f["delta_low"]).to_list(),
                color="#444",
                thickness=1.2,
            ),
            customdata=f.select("delta_low", "delta_high"),
            hovertemplate=f"Δ %{{x:+{CPU_D3}}} {unit} [%{{customdata[0]:+{CPU_D3}}}, %{{customdata[1]:+{CPU_D3}}}]"
            "<extra>%{y}</extra>",
        )
    )
    runs = f"{d['n_runs'][0]} vs {d['n_runs_base'][0]} profiled runs" if len(d) else ""
    fig.update_layout(
        template=TEMPLATE,
        height=max(360, 110 + 38 * len(f)),
        showlegend=False,
        title=f"What changed: {test}, {scenario} vs {baseline}<br><sup>exclusive CPU per unit of work, "
        f"{scenario} minus {baseline}, the {len(f)} frames that changed most<br>"
        f"{level_text} intervals across {runs}; pale: the interval holds no change</sup>",
        margin=dict(t=120),
    )
    fig.update_xaxes(title_text=axis_title("Change of the CPU in the frame itself", unit), zeroline=True)
    most = f.tail(1).row(0, named=True) if len(f) else None
    return describe(
        fig,
        f"The frames of {test} whose own CPU per unit of work changed most, {scenario} against {baseline}, "
        f"each with its {level_text} interval across {runs}"
        + (
            f"; most: {most['label']}, {caption(most['delta'])} {unit} "
            f"[{caption(most['delta_low'])}, {caption(most['delta_high'])}]."
            if most
            else "."
        ),
        alt=f"Bars of the change in CPU per unit of work spent in each of the frames that changed most, "
        f"{scenario} against {baseline}, with intervals",
    )


def category_bars(
    categories: pl.DataFrame,
    test: str,
    baseline: str,
    environment: str | None = None,
    contrasts: pl.DataFrame | None = None,
    attribution: pl.DataFrame | None = None,
) -> go.Figure:
    """Busy CPU per unit of work of each scenario of ``test``, stacked by category; client and server
    facets where each side had CPUs of its own. With ``contrasts`` (profile_contrasts), each scenario's
    bar carries its change against ``baseline`` with its interval across the profiled runs, in bold
    where the change is called; with ``attribution`` (profile_attribution), each category's hover gives
    its own change against ``baseline`` with its interval."""
    d = _one_environment(categories, "category_bars", test, environment)
    changes_of = _change_lines(attribution, "category", d["environment"][0], test, baseline)
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
                .join(
                    changes_of.filter(side=side, name=category).select("scenario", "change"),
                    on="scenario",
                    how="left",
                    maintain_order="left",
                )
                .with_columns(pl.col("cpu_per_unit", "share_pct").fill_null(0.0), pl.col("change").fill_null(""))
            )
            fig.add_trace(
                go.Bar(
                    x=t["scenario"],
                    y=t["cpu_per_unit"],
                    name=category,
                    legendgroup=category,
                    showlegend=i == 0,
                    marker_color=CATEGORY[category],
                    customdata=t.select("share_pct", "change"),
                    hovertemplate="%{x}: "
                    + category
                    + " %{y:"
                    + CPU_D3
                    + "} "
                    + unit
                    + " (%{customdata[0]:.0f} % of busy)%{customdata[1]}<extra></extra>",
                ),
                row=1,
                col=i + 1,
            )
    top = d.group_by("scenario", "side").agg(pl.col("cpu_per_unit").sum()).sort("scenario", "side")
    height = {(r["scenario"], r["side"]): r["cpu_per_unit"] for r in top.iter_rows(named=True)}
    changes = _bar_changes(contrasts, d, test, baseline).join(top, on=["scenario", "side"], how="semi")
    label = {
        (r["scenario"], r["side"]): whole_change_interval(r["change_pct"], r["change_low"], r["change_high"])
        for r in changes.iter_rows(named=True)
    }
    for r in changes.iter_rows(named=True):
        key = (r["scenario"], r["side"])
        text = label[key].replace(" [", "<br>[")  # two short lines: as narrow as a bar of four
        fig.add_annotation(
            x=r["scenario"],
            y=height[key],
            text=f"<b>{text}</b>" if r["verdict_kind"] == Kind.FINDING else text,
            showarrow=False,
            yanchor="bottom",
            font=dict(size=11),
            row=1,
            col=sides.index(r["side"]) + 1,
        )
    said = _bar_changes_note(changes, baseline)
    fig.update_layout(
        template=TEMPLATE,
        barmode="stack",
        legend_title_text="category",
        title=f"Busy CPU per unit of work by category: {test}<br><sup>{unit}; pooled profiled runs, "
        f"idle left out{'<br>' + said if said else ''}</sup>",
        margin=dict(t=140 if said else 80),
        # the plot keeps the height the y axis' title needs: it stays clear of the title's lines
        height=HEIGHT + (60 if said else 0),
    )
    fig.update_yaxes(title_text=axis_title("busy CPU per unit of work", unit), row=1, col=1)
    fig.update_xaxes(title_text="Scenario")
    return describe(
        fig,
        f"Busy CPU per unit of work of {test} by category, pooled profiled runs: "
        + "; ".join(
            f"{r['scenario']} ({r['side']}) {r['cpu_per_unit']:.3g} {unit}"
            + (
                f", {label[(r['scenario'], r['side'])]} against {baseline}"
                if (r["scenario"], r["side"]) in label
                else ""
            )
            for r in top.iter_rows(named=True)
        )
        + ".",
    )


def _bar_changes(contrasts: pl.DataFrame | None, d: pl.DataFrame, test: str, baseline: str) -> pl.DataFrame:
    """The contrasts of the bars of ``d`` (one environment and ``test``) against ``baseline``."""
    if contrasts is None or contrasts.is_empty():
        return pl.DataFrame(schema={"scenario": pl.String, "side": pl.String})
    env = d["environment"][0]
    return contrasts.filter(environment=env, test=test, baseline=baseline).select(
        "scenario",
        "side",
        "change_pct",
        "change_low",
        "change_high",
        "ci_level",
        "verdict_kind",
        "n_runs",
        "n_runs_base",
    )


def _bar_changes_note(changes: pl.DataFrame, baseline: str) -> str:
    """What the numbers above the bars are, for the title; "" where there are none."""
    if changes.is_empty():
        return ""
    with_interval = changes.filter(pl.col("ci_level").is_finite())
    if with_interval.is_empty():
        return f"above each bar: its change in CPU per unit against {baseline}; too few profiled runs for an interval"
    c = with_interval.row(0, named=True)  # one level per environment and test: the family's
    runs = f"{c['n_runs']} vs {c['n_runs_base']}" if changes["n_runs"].n_unique() == 1 else "the"
    return (
        f"above each bar: its change in CPU per unit against {baseline}, {level(c['ci_level'])} interval across "
        f"{runs} profiled runs (bold: a change)"
    )
