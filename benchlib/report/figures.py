"""Plotly figures for the report and the blog, all on one template ("benchlib").

Inputs are the tidy tables or the frames from stats/normalize/reference;
figures pivot, nothing upstream does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from benchlib.vocabulary.schema import metric_info, percentiles

from ..analysis.resolution import INTERVAL
from ..analysis.stats import FAMILY_ORDER, MIN_N, median_ci
from ..analysis.verdicts import Direction, Kind
from .colours import OURS, PUBLISHED, natural, pick
from .format import caption, change, missing, size, unit as display_unit, whole_change
from .prose import PLAIN
from .summary import FINDING, NOISE, UNTESTED, finding_sentence, kind_of, metric_label, ordered_findings

# the theme registers the template, once, and displays figures; notebooks reach them through figures
from .theme import (  # noqa: F401
    BAND_COLOR,
    BLOG_WIDTH,
    TEMPLATE,
    axis_title,
    describe,
    figure_bundle,
    show,
    show_collapsed,
    words,
)


def scenario_order(scenarios: Iterable[str], baseline: str) -> list[str]:
    """Baseline first, then the others alphabetically (numbers by value): the same order in every figure."""
    s = sorted(set(scenarios), key=natural)
    return ([baseline] if baseline in s else []) + [x for x in s if x != baseline]


OVERVIEW = "overview"  # the file name of the heatmap of every scenario x test (overview())


def headline_name(test: str, metric: str) -> str:
    """The file name (no extension) of a test's headline figure, its bars of ``metric`` per scenario."""
    return f"{test}_{metric}"


def value_axis(metric: str, side: str = "none", unit: str | None = None) -> str:
    """A metric's axis title in words with its unit: "Transaction rate (transactions/s)"."""
    return axis_title(metric_label(metric, side), unit or metric_info(metric).unit)


def _one(df: pl.DataFrame, what: str, **where) -> pl.DataFrame:
    """Rows matching `where`; a figure shows one campaign and environment."""
    out = df.filter(**where)
    if out.is_empty():
        raise ValueError(f"{what}: no rows for {where}")
    if out.select("campaign", "environment").n_unique() > 1:
        raise ValueError(f"{what}: several campaigns/environments for {where}; filter to one first")
    return out


def ci_whiskers(d: pl.DataFrame) -> dict:
    """Plotly error bars from a summary's median and CI columns."""
    return dict(
        type="data",
        array=d["ci_high"] - d["median"],
        arrayminus=d["median"] - d["ci_low"],
        thickness=1.5,
        width=6,
        color="#333",
    )


def verdict_labels(
    comparisons: pl.DataFrame | None, test: str, metric: str, side: str = "none", *, baseline: str
) -> dict[str, dict]:
    """{scenario: its comparison vs the baseline (a row)} for one test and metric; empty without comparisons."""
    if comparisons is None or comparisons.is_empty():
        return {}
    c = comparisons.filter(test=test, metric=metric, side=side, baseline=baseline)
    return {r["scenario"]: r for r in c.iter_rows(named=True)}


def in_order(d: pl.DataFrame, col: str, order: list) -> pl.DataFrame:
    """One row per value of `order`, in that order (null rows where `d` has none)."""
    return pl.DataFrame({col: order}, schema={col: d.schema[col]}).join(d, on=col, how="left", maintain_order="left")


def _found(comparisons: pl.DataFrame | None, baseline: str, **where) -> pl.DataFrame:
    """The comparisons vs ``baseline`` matching ``where``, findings first, largest change first."""
    if comparisons is None or comparisons.is_empty():
        return pl.DataFrame()
    return ordered_findings(comparisons.filter(baseline=baseline, **where), None)


def finding_title(found: pl.DataFrame, quantity: str, test: str, baseline: str) -> str:
    """A title that states what the figure shows: the largest significant change, else that there is none."""
    if found.is_empty():
        return f"{test}: {quantity} per scenario"
    if (found["kind"] == FINDING).any():
        r = found.row(0, named=True)
        more = int((found["kind"] == FINDING).sum()) - 1
        return (
            f"{test}: {r['scenario']} has {size(r['delta_pct'])} % {'higher' if r['delta_pct'] > 0 else 'lower'} "
            f"{quantity} than {baseline}" + (f" ({more} more significant)" if more else "")
        )
    if (found["kind"] == NOISE).any():
        return f"{test}: no significant {quantity} change vs {baseline}"
    if (found["kind"] == UNTESTED).all():
        return f"{test}: {quantity} per scenario, too few runs to compare"
    return f"{test}: {quantity} per scenario, nothing significant vs {baseline}"


def values_caption(
    d: pl.DataFrame, quantity: str, test: str, found: pl.DataFrame, within: str | None = None, limit: int | None = None
) -> str:
    """The numbers a figure draws, for its caption: each scenario's median with its 95 % CI and n, then
    each comparison with the baseline as a sentence (change, interval, correction).

    With ``within`` (a column, e.g. the percentile), the rows of one scenario are one entry, each
    value named by its ``within``: "host: p50 12 [11, 13], p99 40 [38, 45] us, n = 10". With
    ``limit``, only the first ``limit`` comparisons are sentences and the rest are counted."""
    unit = display_unit(d["unit"][0])

    def value(r: dict) -> str:
        name = f"{r[within]} " if within else ""
        ci = f" [{caption(r['ci_low'])}, {caption(r['ci_high'])}]" if r["n"] >= MIN_N else ""
        return f"{name}{caption(r['median'])}{ci}"

    rows = d.filter(pl.col("median").is_not_null())
    rows = rows.with_columns(_entry=pl.col("scenario")) if within else rows.with_row_index("_entry")
    parts = []
    for _, g in rows.group_by("_entry", maintain_order=True):
        lo, hi = g["n"].min(), g["n"].max()
        n = f"n = {lo}" if lo == hi else f"n = {lo}-{hi}"
        few = " (too few for a CI)" if lo < MIN_N else ""  # pyright: ignore[reportOperatorIssue] (polars types Series.min loosely)
        values = ", ".join(value(r) for r in g.iter_rows(named=True))
        parts.append(f"{g['scenario'][0]}{':' if within else ''} {values}{f' {unit}' if unit else ''}, {n}{few}")
    text = f"{quantity[:1].upper() + quantity[1:]}, {test}: median of runs [95 % CI]: " + "; ".join(parts) + "."
    return " ".join(t for t in (text, comparison_sentences(found, limit)) if t)


def comparison_sentences(found: pl.DataFrame, limit: int | None = None) -> str:
    """Each comparison as a sentence (summary.finding_sentence, with n); beyond ``limit``, a count."""
    shown = found.head(limit) if limit is not None else found
    text = " ".join(finding_sentence(r, cpu_note=False, with_n=True, prose=PLAIN) for r in shown.iter_rows(named=True))
    return text + (f" ... and {len(found) - len(shown)} more." if len(shown) < len(found) else "")


def bars(
    summary: pl.DataFrame,
    test: str,
    metric: str,
    side: str = "none",
    *,
    baseline: str,
    comparisons: pl.DataFrame | None = None,
    colours: Mapping[str, str] | None = None,
) -> go.Figure:
    """Median per scenario with 95 % CI whiskers, one colour per scenario (``colours``: the campaign's,
    colours.scenario_colours); the title states the
    largest significant change vs the baseline.

    With `comparisons` (stats.compare), each scenario's verdict vs the
    baseline is written above its bar.
    """
    d = _one(summary, "bars", test=test, metric=metric, side=side)
    order = scenario_order(d["scenario"], baseline)
    d = in_order(d, "scenario", order)
    unit = display_unit(d["unit"][0])
    labels = verdict_labels(comparisons, test, metric, side, baseline=baseline)
    found = _found(comparisons, baseline, test=test, metric=metric, side=side)
    quantity = metric_label(metric, side)
    fig = go.Figure(
        go.Bar(
            x=d["scenario"],
            y=d["median"],
            marker_color=[pick(colours, order, baseline)[s] for s in d["scenario"]],
            error_y=ci_whiskers(d),
            customdata=d.select("n", "ci_low", "ci_high"),
            hovertemplate="%{x}: %{y:.4g} " + unit + "<br>95 % CI [%{customdata[1]:.4g}, %{customdata[2]:.4g}]"
            "<br>n = %{customdata[0]}<extra></extra>",
        )
    )
    fig.update_layout(
        template=TEMPLATE,
        showlegend=False,
        title=f"{finding_title(found, quantity, test, baseline)}<br><sup>median of runs, whiskers: 95 % CI"
        + (f"; labels: change vs {baseline} where significant, ~ where not" if labels else "")
        + "</sup>",
        xaxis_title="Scenario",
        yaxis_title=value_axis(metric, side, unit),
    )
    for r in d.iter_rows(named=True):
        if r["scenario"] in labels or (labels and r["scenario"] == baseline):
            text = "baseline" if r["scenario"] == baseline else _short_verdict(labels[r["scenario"]])
            fig.add_annotation(
                x=r["scenario"],
                y=r["ci_high"] if r["n"] >= MIN_N else r["median"],
                text=text,
                showarrow=False,
                yanchor="bottom",
                yshift=4,
                font=dict(size=12),
            )
    return describe(fig, values_caption(d, quantity, test, found))


def cpu_bars(
    summary: pl.DataFrame,
    test: str,
    metric: str = "cpu_pct_at_target",
    *,
    baseline: str,
    colours: Mapping[str, str] | None = None,
) -> go.Figure:
    """Client and server CPU side by side per scenario (hatched: server), median with 95 % CI; a test
    whose client and server shared one CPU set (cpu_placement shared) has one bar: the whole path's."""
    d = _one(summary, "cpu_bars", test=test, metric=metric)
    shared = d.filter(pl.col("side").is_in(["client", "server"])).is_empty()
    sides = (("total", ""),) if shared else (("client", ""), ("server", "/"))
    d = d.filter(pl.col("side").is_in([side for side, _ in sides]))
    order = scenario_order(d["scenario"], baseline)
    colors = pick(colours, order, baseline)
    fig = go.Figure()
    for side, pattern in sides:
        s = in_order(d.filter(side=side), "scenario", order)
        fig.add_trace(
            go.Bar(
                name=side,
                x=s["scenario"],
                y=s["median"],
                error_y=ci_whiskers(s),
                marker=dict(
                    color=[colors[x] for x in s["scenario"]],
                    pattern_shape=pattern,
                    pattern_fgcolor="white",
                    line=dict(color="#333", width=1),
                ),
                hovertemplate="%{x} " + side + ": %{y:.4g}<extra></extra>",
            )
        )
    unit = display_unit(d["unit"][0])
    how = "client and server on one CPU set: the whole path's CPU" if shared else "plain: client, hatched: server"
    fig.update_layout(
        template=TEMPLATE,
        barmode="group",
        legend_title_text="side",
        title=f"CPU {'of the path' if shared else 'per side'}: {test}<br><sup>median of runs, "
        f"whiskers: 95 % CI; {how}</sup>",
        xaxis_title="Scenario",
        yaxis_title=value_axis(metric, "none", unit),
    )
    return describe(
        fig,
        values_caption(
            d.with_columns(scenario=pl.format("{} ({})", "scenario", "side")),
            f"{metric_label(metric)} by side",
            test,
            pl.DataFrame(),
        ),
    )


def medians_with_ci(d: pl.DataFrame, column: str, order: list[str]) -> pl.DataFrame:
    """Per scenario in ``order``: n, the median of ``column`` over its finite values and the median's
    95 % CI (estimators.median_ci: the order-statistic interval of the summary tables, NaN below
    MIN_N runs), with the unit of ``d`` where it has one."""
    rows = []
    for s in order:
        x = d.filter(scenario=s)[column].drop_nulls().to_numpy().astype(float)
        x = x[np.isfinite(x)]
        low, high = median_ci(x)
        rows.append((s, len(x), float(np.median(x)) if len(x) else math.nan, low, high))
    out = pl.DataFrame(
        rows,
        orient="row",
        schema={
            "scenario": pl.String,
            "n": pl.Int64,
            "median": pl.Float64,
            "ci_low": pl.Float64,
            "ci_high": pl.Float64,
        },
    )
    return out.with_columns(unit=pl.lit(d["unit"][0])) if "unit" in d.columns else out


def runs_strip(
    values: pl.DataFrame,
    test: str,
    metric: str,
    side: str = "none",
    *,
    baseline: str,
    colours: Mapping[str, str] | None = None,
) -> go.Figure:
    """Every run as a point, and over them the scenario's median with its 95 % CI (the summary
    tables' interval): spread, outliers, n and the interval at a glance."""
    d = _one(values, "runs_strip", test=test, metric=metric, side=side)
    order = scenario_order(d["scenario"], baseline)
    colors = pick(colours, order, baseline)
    ci = medians_with_ci(d, "value", order)
    fig = go.Figure(
        [
            go.Box(
                y=g["value"],
                name=s,
                # the points alone: the box plotly draws with them would hide the interval
                boxpoints="all",
                jitter=0.5,
                pointpos=0,
                marker=dict(color=colors[s], size=7, opacity=0.6),
                line=dict(color="rgba(0,0,0,0)", width=0),
                fillcolor="rgba(0,0,0,0)",
                hoveron="points",
                customdata=g.select("run_id", "block"),
                hovertemplate="%{y:.4g}<br>run %{customdata[0]}, block %{customdata[1]}<extra>" + s + "</extra>",
            )
            for s in order
            for g in [d.filter(scenario=s)]
        ]
    )
    unit = display_unit(d["unit"][0])
    fig.add_trace(
        go.Scatter(
            x=ci["scenario"],
            y=ci["median"],
            mode="markers",
            marker=dict(
                symbol="diamond", size=11, color=[colors[s] for s in ci["scenario"]], line=dict(width=1.5, color="#222")
            ),
            error_y={**ci_whiskers(ci), "thickness": 2.5, "width": 12, "color": "#222"},
            customdata=ci.select("n", "ci_low", "ci_high"),
            hovertemplate="median %{y:.4g} " + unit + "<br>95 % CI [%{customdata[1]:.4g}, %{customdata[2]:.4g}]"
            "<br>n = %{customdata[0]}<extra>%{x}</extra>",
        )
    )
    quantity = metric_label(metric, side)
    fig.update_layout(
        template=TEMPLATE,
        showlegend=False,
        title=f"{test}: {quantity} of every run<br><sup>points: runs; diamond and whiskers: the median "
        "with its 95 % CI</sup>",
        xaxis_title="Scenario",
        yaxis_title=value_axis(metric, side, unit),
    )
    return describe(
        fig,
        values_caption(ci, f"{quantity} of each run", test, pl.DataFrame())
        + " Points: the runs; diamond and whiskers: the median with its 95 % CI "
        "(order statistics, distribution-free; none below "
        f"{MIN_N} runs).",
    )


def forest(
    comparisons: pl.DataFrame,
    baseline: str | None = None,
    colour_baseline: str | None = None,
    colours: Mapping[str, str] | None = None,
) -> go.Figure:
    """Change % vs the baseline per comparison with its interval at the level its family's correction
    decided at; grey: the +/- noise band of its metric.

    One panel per family and direction (primary first; within a family, the metrics where higher is
    better apart from those where lower is), each with its better side marked on its axis, so that
    rates, latencies and CPU never share one signed axis. Filled markers are significant after
    correction (the interval then excludes 0), open ones are not; an "inconclusive" row (test and
    interval disagree) is a diamond. Comparisons without an effect estimate (too few runs, values
    <= 0) are counted in the caption, not drawn. Contrasts (rows against another reference than
    `baseline`) are labelled "scenario vs reference". A comparison made where a side ran at its CPU
    limit (saturation.annotate's cpu_bound, where present) ends its label in "CPU limit".
    Scenario colours are ``colours`` (the campaign's, colours.scenario_colours), else made from the
    scenarios drawn with ``colour_baseline`` (by default ``baseline``) as the baseline, drawn or not.
    """
    baseline = baseline or str(comparisons["baseline"][0])
    c = comparisons.filter(pl.col("delta_pct").is_not_nan() & pl.col("delta_pct").is_not_null())
    skipped = len(comparisons) - len(c)
    order_of = {f: i for i, f in enumerate(FAMILY_ORDER)}
    c = c.with_columns(up=pl.Series([metric_info(m).higher_is_better for m in c["metric"]], dtype=pl.Boolean))
    c = c.sort(
        pl.col("family").replace_strict(order_of, default=len(order_of)), pl.col("up").not_(), maintain_order=True
    )
    # a CPU limit on every row is said once, in the summary's caveats, instead of on each
    bound = "cpu_bound" in c.columns and not c["cpu_bound"].fill_null(False).all()
    c = c.with_columns(
        label=pl.Series(
            [
                f"{r['test']} · {metric_label(r['metric'], r['side'])} · {r['scenario']}"
                + ("" if r["baseline"] == baseline else f" vs {r['baseline']}")
                + (" · CPU limit" if bound and r["cpu_bound"] else "")
                for r in c.iter_rows(named=True)
            ],
            dtype=pl.String,
        )
    )
    panels = [(f, up, g) for (f, up), g in c.group_by("family", "up", maintain_order=True)]
    order = scenario_order(c["scenario"], colour_baseline or baseline)
    colors = pick(colours, order, colour_baseline or baseline)
    rows = [len(g) for *_, g in panels] or [1]
    height = 150 + 26 * sum(rows) + 90 * len(panels)
    fig = make_subplots(
        rows=max(len(panels), 1),
        cols=1,
        row_heights=rows,
        vertical_spacing=min(0.3, 90 / height) if len(panels) > 1 else 0.0,
        subplot_titles=[
            f"{family} metrics, {'higher' if up else 'lower'} is better ({g['correction'][0]})"
            for family, up, g in panels
        ],
    )
    shown = set()
    for i, (_family, up, g) in enumerate(panels, start=1):
        fig.add_trace(
            go.Bar(
                y=g["label"],
                x=2 * g["noise_band_pct"],
                base=-g["noise_band_pct"],
                orientation="h",
                marker_color=BAND_COLOR,
                name="noise band",
                hoverinfo="skip",
                width=0.8,
                legendgroup="noise band",
                showlegend=i == 1,
            ),
            row=i,
            col=1,
        )
        for s in order:
            p = g.filter(scenario=s)
            if p.is_empty():
                continue
            kinds = p["verdict_kind"]
            symbol = np.where(
                kinds == str(Kind.INCONCLUSIVE),
                "diamond-open",
                np.where(kinds.is_in([str(Kind.NOISE), str(Kind.INSUFFICIENT)]), "circle-open", "circle"),
            )
            fig.add_trace(
                go.Scatter(
                    y=p["label"],
                    x=p["delta_pct"],
                    mode="markers",
                    name=s,
                    legendgroup=s,
                    showlegend=s not in shown,
                    marker=dict(color=colors[s], size=10, symbol=symbol, line=dict(width=2, color=colors[s])),
                    error_x=dict(
                        type="data",
                        array=p["delta_high"] - p["delta_pct"],
                        arrayminus=p["delta_pct"] - p["delta_low"],
                        color=colors[s],
                        thickness=1.5,
                    ),
                    customdata=p.select(
                        "verdict", "p_adj", (100 * pl.col("ci_level")).alias("level"), "correction", "n", "n_base"
                    ),
                    hovertemplate="%{y}<br>%{customdata[0]}<br>p_adj = %{customdata[1]:.3g} (%{customdata[3]}); "
                    "interval at %{customdata[2]:.4g} %; n = %{customdata[4]} vs %{customdata[5]}"
                    "<extra></extra>",
                ),
                row=i,
                col=1,
            )
            shown.add(s)
        fig.add_vline(x=0, line_color="#333", line_width=1, row=i, col=1)  # pyright: ignore[reportArgumentType] (plotly types row/col as str)
        fig.update_xaxes(title_text=f"Change vs {baseline} (%), " + ("better →" if up else "← better"), row=i, col=1)
        fig.update_yaxes(autorange="reversed", title_text="Test · metric · scenario" if i == 1 else None, row=i, col=1)
    fig.update_annotations(font_size=13, x=1, xanchor="right")
    found = ordered_findings(comparisons, None)
    sig = found.filter(kind=FINDING)
    if len(sig):
        r = sig.row(0, named=True)
        title = f"{len(sig)} of {len(found)} changes vs {baseline} are significant"
        largest = f"largest: {r['scenario']}, {r['test']} {metric_label(r['metric'], r['side'])}, {change(r['delta_pct'])} %<br>"
    else:
        title, largest = f"No change vs {baseline} is significant ({len(found)} compared)", ""
    # the scenario is in each row's label: no legend, the plot keeps the width
    fig.update_layout(
        template=TEMPLATE,
        height=height,
        barmode="overlay",
        showlegend=False,
        title=f"{title}<br><sup>{largest}median ratio - 1 with its interval ({_ci_methods(c)}); "
        "filled: significant, open: not, diamond: test and interval disagree</sup>",
        margin=dict(t=120),
    )
    note = f" {skipped} comparison(s) without an effect estimate are not drawn." if skipped else ""
    caption = (
        f"Change of each scenario vs {baseline} in % of the baseline median, with its interval at the level "
        "its family's correction decided at; grey: the noise band. "
        + " ".join(
            finding_sentence(r, cpu_note=False, with_n=True, prose=PLAIN) for r in sig.head(6).iter_rows(named=True)
        )
        + (f" ... and {len(sig) - 6} more significant." if len(sig) > 6 else "")
        + note
    )
    return describe(
        fig,
        caption,
        alt=f"Forest plot of the change vs {baseline} in % of each comparison with its "
        f"interval, a panel per family and direction: {title}",
    )


def overview(comparisons: pl.DataFrame, baseline: str) -> go.Figure:
    """Every scenario x test at a glance: a heatmap of each test's headline change vs ``baseline``,
    signed so that better reads the same way in every column (green better, red worse, whatever the
    metric's direction), its text the change in % with "*" where it is significant after correction;
    a cell that is not significant is drawn pale. The primary family only: one metric per test."""
    c = comparisons.filter(pl.col("baseline") == baseline, pl.col("family") == FAMILY_ORDER[0])
    c = c.filter(pl.col("delta_pct").is_not_null() & pl.col("delta_pct").is_not_nan())
    tests = sorted(set(c["test"]), key=natural)
    scenarios = [s for s in scenario_order(c["scenario"], baseline) if s != baseline]
    cell = {(r["scenario"], r["test"]): r for r in c.iter_rows(named=True)}
    z, text, hover = [], [], []
    for s in scenarios:
        zr, tr, hr = [], [], []
        for t in tests:
            r = cell.get((s, t))
            if r is None:
                zr.append(None)
                tr.append("")
                hr.append(f"{s} · {t}: not compared")
                continue
            sig = kind_of(r["verdict_kind"]) == FINDING
            better = r["delta_pct"] if metric_info(r["metric"]).higher_is_better else -r["delta_pct"]
            # not significant: kept near white, its sign only a hint
            zr.append(better if sig else better * 0.15)
            tr.append(f"{change(r['delta_pct'])} %" + (" *" if sig else ""))
            hr.append(f"{s} · {t} · {metric_label(r['metric'], r['side'])}: {finding_sentence(r, prose=PLAIN)}")
        z.append(zr)
        text.append(tr)
        hover.append(hr)
    top = max((abs(v) for row in z for v in row if v is not None), default=1.0) or 1.0
    labels = [f"{t}<br><sup>{metric_label(cell_metric(c, t), 'none')}</sup>" for t in tests]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=labels,
            y=scenarios,
            text=text,
            texttemplate="%{text}",
            textfont=dict(size=14),
            customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
            colorscale=[[0.0, "#b42318"], [0.5, "#f7f7f7"], [1.0, "#1a7f37"]],
            zmin=-top,
            zmax=top,
            xgap=3,
            ygap=3,
            colorbar=dict(
                title=dict(text=f"vs {baseline}", side="right"),
                tickvals=[-top, 0, top],
                ticktext=["worse", "same", "better"],
            ),
        )
    )
    found = ordered_findings(c, None)
    k = int((found["kind"] == FINDING).sum()) if len(found) else 0
    title = f"{k} of {len(found)} headline changes vs {baseline} are significant"
    fig.update_layout(
        template=TEMPLATE,
        height=150 + 60 * max(len(scenarios), 1),
        title=f"{title}<br><sup>each test's headline metric, change in % of {baseline}'s median; "
        "* significant after correction, pale: within noise</sup>",
        margin=dict(t=100),
        xaxis=dict(title_text="Test (headline metric)", side="bottom"),
        yaxis=dict(title_text=f"Scenario (vs {baseline}, %)", autorange="reversed"),
    )
    return describe(
        fig,
        f"Change of each scenario vs {baseline} in each test's headline metric, in % of the baseline median: "
        f'green better, red worse, "*" significant after correction. {title}.',
        alt=f"Heatmap of the headline change in % vs {baseline} of every scenario in every test: {title}",
    )


def cell_metric(c: pl.DataFrame, test: str) -> str:
    """The headline metric of ``test`` among the comparisons ``c``."""
    return str(c.filter(test=test)["metric"][0])


def _ci_methods(comparisons: pl.DataFrame) -> str:
    """How the drawn CIs were computed, as the comparisons say (bootstrap, maritz-jarrett)."""
    used = sorted(m for m in comparisons["delta_method"].unique() if m) if len(comparisons) else []
    return " and ".join(used) or "none drawn"


def _iso_levels(per_target: np.ndarray, max_lines: int = 5) -> list[float]:
    """Round 1-2-5 levels spanning the observed CPU-per-target values."""
    lo, hi = np.nanmin(per_target) / 2, np.nanmax(per_target) * 2
    levels = [m * 10.0**e for e in range(-3, 6) for m in (1, 2, 5) if lo <= m * 10.0**e <= hi]
    step = math.ceil(len(levels) / max_lines)
    return levels[::step]


SIDE_CPUS = {"client": "the client's", "server": "the server's", "total": "both sides'"}


def throughput_vs_cpu(
    per_run: pl.DataFrame,
    test: str,
    side: str = "total",
    *,
    baseline: str,
    target_gbps: float,
    colours: Mapping[str, str] | None = None,
) -> go.Figure:
    """Each stream run: CPU busy % vs Gbit/s, with iso lines of equal CPU cost per target_gbps, and
    each scenario's median throughput and CPU with their 95 % CIs (medians_with_ci) as a cross.

    `per_run` is normalize.per_run_cpu(); on an iso line every point costs the
    same CPU for the same throughput, so points above-left are cheaper.
    """
    d = _one(per_run, "throughput_vs_cpu", test=test, work_metric="throughput")
    order = scenario_order(d["scenario"], baseline)
    colors = pick(colours, order, baseline)
    fig = go.Figure()
    xmax, ymax = d[side].max() * 1.1, d["work"].max() * 1.15  # pyright: ignore[reportOperatorIssue] (polars types Series.max as any literal or None)
    for level in _iso_levels((d[side] * target_gbps / d["work"]).to_numpy()):
        # label each line where it leaves the plot area (right edge or top)
        x_end = min(xmax, ymax * level / target_gbps)
        fig.add_trace(
            go.Scatter(
                x=[0, xmax],
                y=[0, xmax * target_gbps / level],
                mode="lines",
                showlegend=False,
                line=dict(color="#999", width=1, dash="dot"),
                hoverinfo="skip",
            )
        )
        fig.add_annotation(
            x=x_end,
            y=x_end * target_gbps / level,
            text=f"{level:g} % per {target_gbps:g} Gbit/s",
            showarrow=False,
            xanchor="right",
            yanchor="bottom",
            font=dict(size=11, color="#777"),
        )
    throughput, cpu = medians_with_ci(d, "work", order), medians_with_ci(d, side, order)
    for s in order:
        g = d.filter(scenario=s)
        fig.add_trace(
            go.Scatter(
                x=g[side],
                y=g["work"],
                mode="markers",
                name=s,
                legendgroup=s,
                marker=dict(color=colors[s], size=8, opacity=0.55),
                customdata=g.select("run_id"),
                hovertemplate="%{y:.3g} Gbit/s at %{x:.3g} % CPU<br>run %{customdata[0]}<extra>" + s + "</extra>",
            )
        )
        # the configuration: median throughput and median CPU, each with its 95 % CI
        t, c = throughput.filter(scenario=s), cpu.filter(scenario=s)
        fig.add_trace(
            go.Scatter(
                x=c["median"],
                y=t["median"],
                mode="markers",
                name=s,
                legendgroup=s,
                showlegend=False,
                marker=dict(symbol="diamond", size=12, color=colors[s], line=dict(width=1.5, color="#222")),
                error_x={**ci_whiskers(c), "color": colors[s]},
                error_y={**ci_whiskers(t), "color": colors[s]},
                customdata=np.stack([t["ci_low"], t["ci_high"], c["ci_low"], c["ci_high"], t["n"]], axis=-1),
                hovertemplate="median %{y:.3g} Gbit/s [%{customdata[0]:.3g}, %{customdata[1]:.3g}]<br>median "
                "%{x:.3g} % CPU [%{customdata[2]:.3g}, %{customdata[3]:.3g}]<br>n = %{customdata[4]}<extra>"
                + s
                + "</extra>",
            )
        )
    # the finding: which scenario moves the most and the fewest Gbit/s per busy CPU % (median over runs)
    per_cpu = medians_with_ci(d.with_columns(gbps_per_pct=pl.col("work") / pl.col(side)), "gbps_per_pct", order)
    ranked = per_cpu.drop_nans("median").sort("median", descending=True)
    found, numbers = f"Throughput vs CPU: {test}", ""
    if len(ranked) > 1:
        found = f"{test}: {ranked['scenario'][0]} moves the most Gbit/s per CPU %, {ranked['scenario'][-1]} the fewest"
        numbers = f"{ranked['median'][0]:.3g} vs {ranked['median'][-1]:.3g} Gbit/s per CPU % (medians of runs)<br>"
    fig.update_layout(
        template=TEMPLATE,
        legend_title_text="scenario",
        title=f"{found}<br><sup>{numbers}points: runs; diamond and whiskers: median with its 95 % CI on both "
        f"axes; dotted: equal CPU cost per {target_gbps:g} Gbit/s</sup>",
        margin=dict(t=120),  # three title lines
        xaxis=dict(title=f"CPU busy (% of {SIDE_CPUS[side]} CPUs)", range=[0, xmax]),
        yaxis=dict(title="Throughput (Gbit/s)", range=[0, ymax]),
    )
    return describe(
        fig,
        " ".join(
            (
                values_caption(throughput.with_columns(unit=pl.lit("Gbit/s")), "throughput", test, pl.DataFrame()),
                values_caption(
                    cpu.with_columns(unit=pl.lit("%")), f"CPU busy of {SIDE_CPUS[side]} CPUs", test, pl.DataFrame()
                ),
                values_caption(per_cpu.with_columns(unit=pl.lit("")), "Gbit/s per CPU %", test, pl.DataFrame()),
                "Points: the runs; diamond and whiskers: each scenario's median with its 95 % CI (order "
                f"statistics, distribution-free; none below {MIN_N} runs). On a dotted line every run costs the "
                f"same CPU per {target_gbps:g} Gbit/s, so runs up and to the left are cheaper.",
            )
        ),
    )


LATENCY_PERCENTILES = percentiles("latency")
DNS_PERCENTILES = percentiles("dns_latency")
HTTP_PERCENTILES = percentiles("http_latency")


def percentile_name(metric: str) -> str:
    """p50, p99.9: the label of a percentile metric."""
    return f"p{metric_info(metric).percentile:g}"


def latency_percentiles(
    summary: pl.DataFrame,
    test: str,
    *,
    baseline: str,
    metrics: tuple[str, ...] = LATENCY_PERCENTILES,
    title: str = "Round-trip latency percentiles",
    colours: Mapping[str, str] | None = None,
) -> go.Figure:
    """Latency percentiles per scenario (grouped bars, median over runs with 95 % CI)."""
    d = _one(summary, "latency_percentiles", test=test)
    d = d.filter(pl.col("metric").is_in(metrics))
    if d.is_empty():
        raise ValueError(f"latency_percentiles: {test} has none of {list(metrics)}")
    order = scenario_order(d["scenario"], baseline)
    d = d.sort(pl.col("scenario").replace_strict({s: i for i, s in enumerate(order)}), "metric")
    colors = pick(colours, order, baseline)
    fig = go.Figure()
    for s in order:
        g = in_order(d.filter(scenario=s), "metric", list(metrics))
        fig.add_trace(
            go.Bar(
                name=s,
                x=[percentile_name(m) for m in g["metric"]],
                y=g["median"],
                marker_color=colors[s],
                error_y=ci_whiskers(g),
                hovertemplate="%{x}: %{y:.4g} " + display_unit(d["unit"][0]) + "<extra>" + s + "</extra>",
            )
        )
    unit = display_unit(d["unit"][0])
    fig.update_layout(
        template=TEMPLATE,
        barmode="group",
        legend_title_text="scenario",
        title=f"{_highest(d, metrics[0], baseline, test) or f'{title}: {test}'}<br><sup>"
        f"{title}; median over runs of each run's "
        "percentile, whiskers: 95 % CI</sup>",
        xaxis_title="Percentile",
        yaxis_title=axis_title("latency", unit),
    )
    d = d.with_columns(
        scenario=pl.format("{} {}", "scenario", pl.col("metric").map_elements(percentile_name, return_dtype=pl.String))
    )
    return describe(fig, values_caption(d, title.lower(), test, pl.DataFrame()))


def _highest(d: pl.DataFrame, metric: str, baseline: str, test: str) -> str:
    """A title stating the ranking of the first percentile: "<test>: <scenario> has the highest p50
    latency, <v> vs <v> <unit> for <baseline>" (or the lowest, where the baseline is the highest); ""
    with fewer than two scenarios or no baseline."""
    m = d.filter(metric=metric).drop_nulls("median").sort("median", descending=True)
    if len(m) < 2 or baseline not in set(m["scenario"]):
        return ""
    base = m.filter(scenario=baseline)["median"][0]
    k, which = (-1, "lowest") if m["scenario"][0] == baseline else (0, "highest")
    return (
        f"{test}: {m['scenario'][k]} has the {which} {percentile_name(metric)} latency, "
        f"{m['median'][k]:.3g} vs {base:.3g} {m['unit'][0]} for {baseline}"
    )


def _short_verdict(r: dict | None) -> str:
    """A label short enough to sit beside a point, from a comparison's row: a finding's change in %
    where its verdict states it with an interval ("+12.3 %"; in whole percent below the instrument's
    resolution), "~" within noise, "?" inconclusive, else the verdict."""
    if not r or not r["verdict"]:
        return ""
    kind, delta, unresolved = r["verdict_kind"], r["delta_pct"], r.get("unresolved")
    if kind == Kind.NOISE:
        return "~"
    if kind == Kind.INCONCLUSIVE:
        return "?"
    if kind == Kind.FINDING and not missing(delta) and not missing(r["delta_low"]):
        if unresolved is None:
            return f"{change(delta)} %"
        if unresolved == INTERVAL and r["verdict_direction"] != Direction.NONE:
            return f"{whole_change(delta)} %"
    return r["verdict"]


def _ribbon(x, low, high, color: str, name: str) -> go.Scatter:
    """The 95 % CI as a filled band: out along the upper bound, back along the lower."""
    x = list(x)
    return go.Scatter(
        x=x + x[::-1],
        y=list(high) + list(low)[::-1],
        mode="lines",
        fill="toself",
        fillcolor=color,
        line=dict(width=0),
        opacity=0.2,
        hoverinfo="skip",
        showlegend=False,
        legendgroup=name,
    )


def service_scaling(
    summary: pl.DataFrame,
    runs: pl.DataFrame,
    test: str,
    metric: str,
    baseline: str = "veth-routed",
    comparisons: pl.DataFrame | None = None,
    colours: Mapping[str, str] | None = None,
) -> go.Figure:
    """Metric vs number of ClusterIP services, one line per datapath, 95 % CI ribbons.

    A datapath is a scenario family expanded over service counts (the runs'
    `services` column; scenario `<datapath>-<services>`). The baseline (no
    service in the path) is the dashed line with its CI band; each point is
    labelled with its change vs the baseline when significant, `~` when not.
    """
    d = _one(summary, "service_scaling", test=test, metric=metric, side="none")
    counts = runs.filter(pl.col("services").is_not_null()).group_by("scenario").agg(pl.col("services").first())
    d = d.join(counts, on="scenario")
    if d.is_empty():
        raise ValueError(f"service_scaling: no {test} runs with a service count")
    d = d.with_columns(
        datapath=pl.Series([s.removesuffix(f"-{n}") for s, n in zip(d["scenario"], d["services"], strict=True)])
    )
    labels = verdict_labels(comparisons, test, metric, baseline=baseline)
    # a datapath's line in the colour of its first scenario (its fewest services) in every other figure
    scenario_colour = pick(colours, scenario_order(d["scenario"], baseline), baseline)
    pairs = sorted(zip(d["scenario"], d["datapath"], strict=True), key=lambda p: natural(p[0]), reverse=True)
    colors = {datapath: scenario_colour[scenario] for scenario, datapath in pairs}
    unit = display_unit(d["unit"][0])
    fig = go.Figure()
    base = summary.filter(test=test, metric=metric, side="none", scenario=baseline)
    if len(base):
        b = base.row(0, named=True)
        fig.add_hrect(y0=b["ci_low"], y1=b["ci_high"], fillcolor=BAND_COLOR, line_width=0)
        fig.add_hline(
            y=b["median"],
            line=dict(color="#555", dash="dash", width=1.5),
            annotation_text=f"{baseline} (no service)",
            annotation_position="top left",
        )
    for (datapath,), g in d.sort("services").group_by("datapath", maintain_order=True):
        fig.add_trace(_ribbon(g["services"], g["ci_low"], g["ci_high"], colors[datapath], datapath))
        fig.add_trace(
            go.Scatter(
                x=g["services"],
                y=g["median"],
                mode="lines+markers+text",
                name=datapath,
                legendgroup=datapath,
                line=dict(color=colors[datapath], width=2.5),
                marker=dict(size=8),
                text=[_short_verdict(labels.get(sc)) for sc in g["scenario"]],
                textposition="top center",
                customdata=np.stack(
                    [
                        g["n"].to_numpy(),
                        g["ci_low"].to_numpy(),
                        g["ci_high"].to_numpy(),
                        [labels[sc]["verdict"] if sc in labels else "" for sc in g["scenario"]],
                    ],
                    axis=-1,
                ),
                hovertemplate="%{x} services: %{y:.4g} " + unit + "<br>95 % CI [%{customdata[1]:.4g}, "
                "%{customdata[2]:.4g}], n = %{customdata[0]}<br>%{customdata[3]}<extra>" + datapath + "</extra>",
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        legend_title_text="datapath",
        title=f"{value_axis(metric, 'none', unit).split(' (')[0]} vs number of services: {test}<br><sup>median of runs, "
        f"band: 95 % CI; labels: change vs {baseline} where significant, ~ where not</sup>",
        xaxis=dict(title="ClusterIP services", type="log", tickvals=sorted(d["services"].unique())),
        yaxis_title=value_axis(metric, "none", unit),
    )
    return describe(
        fig,
        values_caption(
            d.sort("datapath", "services").with_columns(
                scenario=pl.format("{} with {} services", "datapath", "services")
            ),
            metric_label(metric),
            test,
            _found(comparisons, baseline, test=test, metric=metric, side="none"),
        ),
    )


def rate_sweep(
    summary: pl.DataFrame,
    runs: pl.DataFrame,
    tests: list[str],
    metrics: tuple[str, ...],
    *,
    baseline: str,
    comparisons: pl.DataFrame | None = None,
    title: str = "HTTP latency vs offered load",
    colours: Mapping[str, str] | None = None,
) -> go.Figure:
    """Latency vs offered rate (one test per rate): a panel per percentile, a line per scenario.

    `tests` are the tests of one sweep (the runs' `offered_qps`; unpaced
    tests, qps 'max', come last). Markers are filled where the change vs the
    baseline is significant, open where it is within noise.
    """
    # the offered rate of each test; None: unpaced
    rate = dict(
        runs.filter(pl.col("test").is_in(tests)).group_by("test").agg(pl.col("offered_qps").first()).iter_rows()
    )
    ordered = sorted(tests, key=lambda t: (rate.get(t) is None, rate.get(t) or 0))
    x_label = {t: "max" if rate.get(t) is None else f"{rate[t]:g}" for t in ordered}
    d = summary.filter(pl.col("test").is_in(tests) & pl.col("metric").is_in(metrics) & (pl.col("side") == "none"))
    if d.is_empty():
        raise ValueError(f"rate_sweep: no {list(metrics)} for tests {tests}")
    metrics = tuple(m for m in metrics if m in set(d["metric"]))
    order = scenario_order(d["scenario"], baseline)
    colors = pick(colours, order, baseline)
    fig = make_subplots(
        rows=1, cols=len(metrics), subplot_titles=[percentile_name(m) for m in metrics], horizontal_spacing=0.06
    )
    for col, m in enumerate(metrics, start=1):
        for s in order:
            g = in_order(d.filter(scenario=s, metric=m), "test", ordered).filter(pl.col("median").is_not_null())
            if g.is_empty():
                continue
            judged = [verdict_labels(comparisons, t, m, baseline=baseline).get(s) for t in g["test"]]
            filled = [
                s == baseline or (r is not None and r["verdict_kind"] not in (Kind.NOISE, Kind.INCONCLUSIVE))
                for r in judged
            ]
            verdicts = [r["verdict"] if r else "" for r in judged]
            fig.add_trace(
                go.Scatter(
                    x=[x_label[t] for t in g["test"]],
                    y=g["median"],
                    mode="lines+markers",
                    name=s,
                    legendgroup=s,
                    showlegend=col == 1,
                    line=dict(color=colors[s], width=2),
                    marker=dict(
                        size=9,
                        symbol=["circle" if f else "circle-open" for f in filled],
                        line=dict(width=2, color=colors[s]),
                    ),
                    error_y={**ci_whiskers(g), "color": colors[s]},
                    customdata=np.stack([g["n"].to_numpy(), verdicts], axis=-1),
                    hovertemplate="offered %{x}: %{y:.4g} "
                    + display_unit(g["unit"][0])
                    + ", n = %{customdata[0]}<br>%{customdata[1]}<extra>"
                    + f"{s} {percentile_name(m)}</extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=[x_label[t] for t in ordered])
    fig.update_xaxes(title_text="Offered load (requests/s)", row=1, col=(len(metrics) + 1) // 2)
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text=axis_title("latency, log scale", display_unit(d["unit"][0])), row=1, col=1)
    fig.update_layout(
        template=TEMPLATE,
        legend_title_text="scenario",
        title=f"{title}<br><sup>median of runs, whiskers: 95 % CI; filled: significant change vs "
        f"{baseline}, open: within noise</sup>",
    )
    return describe(
        fig,
        values_caption(
            d.with_columns(
                scenario=pl.format(
                    "{} {} at {}",
                    "scenario",
                    pl.col("metric").map_elements(percentile_name, return_dtype=pl.String),
                    pl.col("test").replace_strict(x_label, default=None),
                )
            ).sort("scenario"),
            title.lower(),
            ", ".join(ordered),
            _found(comparisons, baseline).filter(pl.col("test").is_in(tests) & pl.col("metric").is_in(metrics))
            if comparisons is not None and len(comparisons)
            else pl.DataFrame(),
        ),
    )


def _level(levels: pl.Series) -> str:
    """A confidence level for a title, e.g. "99.2 %"; "-" when none was computed."""
    finite = levels.drop_nulls().drop_nans()
    return f"{100 * finite[0]:.4g} %" if len(finite) else "-"


def reference_changes(side_by_side: pl.DataFrame) -> go.Figure:
    """Our relative change next to the published one, per like-for-like claim."""
    fig = go.Figure(
        [
            go.Bar(
                name="this campaign",
                y=side_by_side["claim"],
                x=side_by_side["ours_delta_pct"],
                orientation="h",
                marker_color=OURS,
                error_x=dict(
                    type="data",
                    array=side_by_side["ours_high"] - side_by_side["ours_delta_pct"],
                    arrayminus=side_by_side["ours_delta_pct"] - side_by_side["ours_low"],
                ),
            ),
            # the 2021 study states directions only: no bar, its direction is in the table
            go.Bar(
                name="published (EKS m6i 2026)",
                y=side_by_side["claim"],
                x=side_by_side["theirs_change_pct"],
                orientation="h",
                marker_color=PUBLISHED,
            ),
        ]
    )
    fig.add_vline(x=0, line_color="#333", line_width=1)
    fig.update_layout(
        template=TEMPLATE,
        barmode="group",
        height=200 + 70 * len(side_by_side),
        title="Relative change: ours vs published<br><sup>ours: median ratio - 1 with its CI at "
        f"{_level(side_by_side['ours_ci_level'])} (the level the claims' correction decided "
        "at); published: ratio of medians, no CI (repetitions not published)</sup>",
        xaxis_title="Change (%)",
        yaxis=dict(autorange="reversed", title="Claim"),
    )
    rows = [
        f"{r['claim']}: ours {r['ours_delta_pct']:+.3g} % [{r['ours_low']:+.3g}, {r['ours_high']:+.3g}]"
        + (
            f", published {r['theirs_change_pct']:+.3g} %"
            if r["theirs_change_pct"] is not None and not math.isnan(r["theirs_change_pct"])
            else ""
        )
        for r in side_by_side.iter_rows(named=True)
    ]
    return describe(fig, "Relative change in this campaign next to the published one: " + "; ".join(rows) + ".")
