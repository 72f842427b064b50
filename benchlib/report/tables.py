"""Publication tables: a polars frame as a great_tables table for the report.

Human labels (with units) in the headers, numbers at a sensible precision, blanks for nulls, no
dtype rows or quotes, verdicts coloured by better/worse, an optional column as row groups. The
HTML is self-contained (system fonts, inline CSS): the report stays offline.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable

import polars as pl
from great_tables import GT, loc, style

from ..analysis import stats
from ..analysis.normalize import CPU_AT_TARGET
from ..analysis.verdicts import VERDICT_COLUMNS, Direction, Kind
from ..base import escape
from ..vocabulary.schema import WORK_NOUNS
from .format import (
    change,
    change_text,
    level,
    mde_text,
    median,
    missing,
    numbers_in,
    p_value,
    reading,
    unit,
    verdict_word,
)
from .summary import metric_label

# Header labels of the analysis tables' columns; others are the name with spaces, capitalised.
LABELS = {
    "n": "n",
    "n_base": "n (baseline)",
    "p": "p",
    "p_adj": "p (adjusted)",
    "cv_pct": "CV %",
    "ci_low": "95 % CI low",
    "ci_high": "95 % CI high",
    "delta_pct": "Change %",
    "mde_pct": "MDE %",
    "drift_rho": "Drift ρ",
    "drift_p": "Drift p",
    "interval_level_pct": "Interval level",
    "median_duration_s": "Median run length (s)",
    "attempts_max": "Most attempts",
    "runs_per_scenario": "Runs per scenario",
    "cpu_placement": "CPU placement",
    "nodes_share_kernel": "Nodes share a kernel",
    "cpus_per_side": "CPUs per side",
    "first_run": "First run",
    "last_run": "Last run",
    "failed_runs": "Failed runs",
    "disturbed_runs": "Of them disturbed",
    "failure_reasons": "Failure reasons",
    "message_size": "Message size (bytes)",
    "vcpu_per_proxy": "vCPU per proxy per 1000 req/s",
    "istio_label": "Istio's proxy",
    "istio_vcpu": "Istio: vCPU per 1000 req/s",
    "change_pct": "Change %",
    "baseline_value": "Baseline value",
    "value_from": "Value from",
    "value_to": "Value to",
    "ours_test": "Our test",
    "ours_metric": "Our metric",
    "ours_side": "Our side",
    "ours_scenario": "Our scenario",
    "ours_baseline": "Our baseline",
    "ours_n": "Our n",
    "ours_p": "Our p",
    "ours_p_adj": "Our p (adjusted)",
    "ours_delta_pct": "Our change %",
    "ours_low": "Our interval low",
    "ours_high": "Our interval high",
    "ours_ci_level": "Our interval level",
    "ours_verdict": "Our verdict",
    "theirs_metric": "Published metric",
    "theirs_scenario": "Published scenario",
    "theirs_baseline": "Published baseline",
    "theirs_change_pct": "Published change %",
    "theirs_direction": "Published direction",
}
# Values that are identifiers in the tables and words in the report.
VALUE_LABELS = {"median_of_3plus": "median of 3 or more runs", "tcp_throughput": "TCP throughput"}
BETTER, WORSE, MUTED = "#1a7f37", "#b42318", "#6b7280"


def label(column: str) -> str:
    """A column's header: LABELS, else the name with spaces and a capital."""
    if column in LABELS:
        return LABELS[column]
    text = column.replace("_", " ")
    return text[:1].upper() + text[1:]


# columns written by a formatter of format.py unless a table says otherwise
FORMATTERS: dict[str, Callable] = {
    "p": p_value,
    "p_adj": p_value,
    "drift_p": p_value,
    "ours_p": p_value,
    "ours_p_adj": p_value,
    "unit": unit,
    "statistic": lambda v: VALUE_LABELS.get(v, v),
    "metric": lambda v: metric_label(v),
    "ours_metric": lambda v: metric_label(v),
    "theirs_metric": lambda v: VALUE_LABELS.get(v, v),
}


def _cell(v, spec: str | Callable | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if callable(spec):
        return spec(v)
    if spec:
        return spec.format(v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return reading(v)
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M") + (" UTC" if v.tzinfo else "")
    return escape.printable(v)  # a name or a failure reason from the records: no raw control character


def as_text(df: pl.DataFrame, formats: dict[str, str | Callable] | None = None) -> pl.DataFrame:
    """Every column as display text: ``formats`` ("{:+.1f}", or a function of the value) where given,
    else FORMATTERS' (p-values as "< 0.001", units as read), floats to 4 significant digits, booleans
    yes/no, times to the minute; null and NaN -> ''."""
    formats = {**FORMATTERS, **(formats or {})}
    return pl.DataFrame([pl.Series(c, [_cell(v, formats.get(c)) for v in df[c]], dtype=pl.String) for c in df.columns])


def publication_table(
    df: pl.DataFrame,
    formats: dict[str, str | Callable] | None = None,
    labels: dict[str, str] | None = None,
    group: str | None = None,
    verdict: str | None = None,
    title: str | None = None,
    note: str | None = None,
    hide: tuple[str, ...] = ("test_params", "verdict_kind", "verdict_direction"),
) -> GT:
    """``df`` as a great_tables table: headers from ``labels`` (else label()), cells by as_text,
    rows grouped by the ``group`` column, the ``verdict`` column coloured by its kind and direction (the
    ``<verdict>_kind`` and ``<verdict>_direction`` columns, not shown: better green, worse red, within
    noise, negligible or too few runs grey, the baseline bold). The ``hide`` columns are left out (the
    test's parameters as JSON and a verdict's kind and direction are for machines: the verdict says
    them in words), and so are campaign and environment where the
    table has one of each (the summary names them)."""
    single = [
        c
        for c in ("campaign", "environment")
        if c in df.columns and c != group and df[c].n_unique() <= 1 and len(df) > 1
    ]
    styled: dict[str, list[int]] = {}
    if verdict and verdict in df.columns:
        kinds, ways = df[f"{verdict}_kind"].to_list(), df[f"{verdict}_direction"].to_list()
        muted = (Kind.NOISE, Kind.INSUFFICIENT, Kind.NEGLIGIBLE)
        styled = {
            "better": [i for i, w in enumerate(ways) if w == Direction.BETTER],
            "worse": [i for i, w in enumerate(ways) if w == Direction.WORSE],
            "muted": [i for i, k in enumerate(kinds) if k in muted],
            "baseline": [i for i, k in enumerate(kinds) if k == Kind.BASELINE],
        }
        hide = (*hide, f"{verdict}_kind", f"{verdict}_direction")
    df = df.drop([c for c in (*hide, *single) if c in df.columns])
    text = as_text(df, formats).with_columns(  # booleans that reached here as text ("true"): yes/no
        pl.col(c).replace({"true": "yes", "false": "no"})
        for c in df.columns
        if df[c].dtype == pl.String
        and set(df[c].drop_nulls().unique()) <= {"true", "false", "true, false"}
        and df[c].drop_nulls().len()
    )
    gt = GT(text, groupname_col=group).sub_missing(missing_text="")
    gt = gt.cols_label(cases={c: (labels or {}).get(c, label(c)) for c in df.columns if c != group})
    numeric = [c for c, t in df.schema.items() if t.is_numeric() and c != group]
    gt = gt.cols_align("left").cols_align("right", columns=numeric) if numeric else gt.cols_align("left")
    looks = {
        "better": style.text(color=BETTER, weight="bold"),
        "worse": style.text(color=WORSE, weight="bold"),
        "muted": style.text(color=MUTED),
        "baseline": style.text(weight="bold"),
    }
    for name, rows in styled.items():
        if rows:
            gt = gt.tab_style(looks[name], loc.body(columns=verdict, rows=rows))
    if title:
        gt = gt.tab_header(title=title)
    if note:
        gt = gt.tab_source_note(note)
    return gt.tab_options(
        table_font_size="13px",
        data_row_padding="3px",
        row_group_font_weight="bold",
        column_labels_font_weight="bold",
        table_margin_left="0",
        table_margin_right="0",
    )


def html(gt: GT) -> str:
    """The table's HTML for the report (scoped CSS, no scripts, no web fonts)."""
    return gt.as_raw_html()


def collapsed(summary: str, inner: str) -> str:
    """``inner`` (HTML) behind a closed disclosure whose line reads ``summary``: long tables and method
    text wait there, so the page is short until a reader opens what they want."""
    return (
        f'<details class="long"><summary style="cursor:pointer;font-weight:600;margin:.4em 0">'
        f"{escape.page(summary)}</summary>\n\n{inner}\n\n</details>"
    )


def html_list(items: list[str]) -> str:
    """``items`` (text from records or references) as an HTML bullet list: each wraps at word breaks."""
    return "<ul>" + "".join(f"<li>{escape.page(i)}</li>" for i in items) + "</ul>"


def show(gt: GT, summary: str | None = None) -> None:
    """Display the table in a notebook (and so in the report); with ``summary``, behind a closed
    disclosure that reads it."""
    from IPython.display import HTML, display

    display(HTML(collapsed(summary, html(gt)) if summary else html(gt)))


# How a test reads in a table, by its kind: the name in params.yaml is an identifier
KIND_LABELS = {
    "TCP_STREAM": "TCP stream",
    "TCP_MAERTS": "TCP stream, reverse",
    "UDP_STREAM": "UDP stream",
    "TCP_RR": "TCP request/response",
    "TCP_CRR": "TCP connect/request/response",
    "UDP_RR": "UDP request/response",
}


def test_labels(runs: pl.DataFrame) -> dict[str, str]:
    """{test: its label}: the kind in words with its streams where there are several tests of a kind
    ("TCP stream, 1 flow"), else the kind in words; a test of another tool keeps its name."""
    rows = runs.select("test", "kind", "streams").unique("test", keep="first").sort("test").rows()
    per_kind: dict[str, int] = {}
    for _, kind, _ in rows:
        per_kind[kind] = per_kind.get(kind, 0) + 1
    out = {}
    for test, kind, streams in rows:
        if kind not in KIND_LABELS:
            out[test] = test
            continue
        flows = f", {streams} flow{'s' if streams != 1 else ''}" if "STREAM" in kind and streams else ""
        out[test] = KIND_LABELS[kind] + (flows if per_kind[kind] > 1 or flows else "")
    if len(set(out.values())) < len(out):  # two tests that read alike: their names tell them apart
        return {t: f"{label} ({t})" for t, label in out.items()}
    return out


def cpu_cost(summary: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """``summary`` with the CPU per work (cpu_pct_at_target: % of the side's CPUs at a target rate) in
    one unit per kind of test: µs of CPU per transaction, connection or request, and cores per
    10 Gbit/s for streams. Exact: a configuration's runs share their CPUs and the target, so the
    median and its CI scale by one factor, and a change in % is the same in either unit. A test
    whose scenarios ran on different CPU counts keeps %, as its changes would differ. The target and
    its work are the summary's work_metric and work_target (normalize.WORK_COLUMNS), not its unit's text."""
    cpus = (
        runs.group_by("environment", "scenario", "test")
        .agg(
            client=pl.col("client_cpus").first(),
            server=pl.col("server_cpus").first(),
            total=pl.when(pl.col("cpu_placement").first() == "shared")
            .then(pl.col("client_cpus").first())
            .otherwise(pl.col("client_cpus").first() + pl.col("server_cpus").first()),
        )
        .unpivot(index=["environment", "scenario", "test"], variable_name="side", value_name="n_cpus")
    )
    # one CPU count across a test's scenarios, per side, or no conversion
    same = cpus.group_by("environment", "test", "side").agg(one=pl.col("n_cpus").n_unique() == 1)
    rows = summary.join(cpus, on=["environment", "scenario", "test", "side"], how="left").join(
        same, on=["environment", "test", "side"], how="left"
    )
    factor, units = [], []
    for r in rows.iter_rows(named=True):
        target, work = r["work_target"], r["work_metric"]
        if r["metric"] != CPU_AT_TARGET or not target or not r["one"] or not r["n_cpus"]:
            factor.append(1.0)
            units.append(r["unit"])
            continue
        cores = r["n_cpus"] / 100 / target  # busy cores per unit of work rate
        streams = work == "throughput"
        factor.append(cores * 10 if streams else cores * 1e6)
        units.append("cores per 10 Gbit/s" if streams else f"µs CPU per {WORK_NOUNS.get(work, work)}")
    f = pl.Series(factor, dtype=pl.Float64)
    scaled = [c for c in ("median", "ci_low", "ci_high", "mean", "iqr") if c in summary.columns]
    return summary.with_columns(*[(pl.col(c) * f).alias(c) for c in scaled], unit=pl.Series(units, dtype=pl.String))


# columns resolution.annotate and saturation.annotate add to comparisons that headline carries when present
ANNOTATIONS = (
    "below_resolution",
    "unresolved",
    "step",
    "steps",
    "delta_low_res",
    "delta_high_res",
    "cpu_bound",
    "cpu_bound_side",
    "cpu_bound_pct",
    "cpu_bound_pct_base",
)
BASELINE = "baseline"  # headline's verdict of the baseline's own rows
CPU_LIMIT = "CPU limit"  # headline's column: the sides at their CPU limit (saturation.annotate explains)


def headline(summary: pl.DataFrame, comparisons: pl.DataFrame, baseline: str) -> pl.DataFrame:
    """benchstat-like table: per family, test, metric and side, each scenario's median [95 % CI] and,
    against the baseline, the change in % with its CI at the family's decision level (the level
    shown), p_adj, the verdict and the minimum detectable effect (MDE, % of the baseline median); and,
    where the comparisons carry saturation.annotate's columns, the sides at their CPU limit with the
    highest median busy % (e.g. "client (100 %)")."""
    vs_base = comparisons.filter(pl.col("baseline") == baseline).select(
        *stats.CONFIG,
        "family",
        "correction",
        "delta_pct",
        "delta_low",
        "delta_high",
        "ci_level",
        "p_adj",
        *VERDICT_COLUMNS,
        "mde_pct",
        "n_attainable",
        *[c for c in ANNOTATIONS if c in comparisons.columns],
    )
    df = summary.join(vs_base, on=stats.CONFIG, how="left", nulls_equal=True)
    base = pl.col("scenario") == baseline
    ci = [
        f"{median(r['median'])} [{median(r['ci_low'])}, {median(r['ci_high'])}]"
        if r["n"] >= stats.MIN_N
        else f"{median(r['median'])} ({stats.INSUFFICIENT})"
        for r in df.iter_rows(named=True)
    ]
    rows = list(df.iter_rows(named=True))
    keys = ["environment", "test", "metric", "side"]
    return (
        df.with_columns(
            verdict=pl.when(base).then(pl.lit(BASELINE)).otherwise(pl.col("verdict").fill_null("")),
            verdict_kind=pl.when(base).then(pl.lit(str(Kind.BASELINE))).otherwise("verdict_kind"),
            verdict_direction=pl.when(base).then(pl.lit(str(Direction.NONE))).otherwise("verdict_direction"),
            # the baseline's row belongs to the family of its comparisons
            family=pl.col("family").drop_nulls().first().over(keys, order_by="scenario"),
            correction=pl.col("correction").drop_nulls().first().over(keys, order_by="scenario"),
            _base_first=pl.col("scenario") != baseline,
            **{
                "median [95 % CI]": pl.Series(ci, dtype=pl.String),
                "change % [interval]": pl.Series([change_text(r, with_level=False) for r in rows], dtype=pl.String),
                "MDE %": pl.Series([mde_text(r) for r in rows], dtype=pl.String),
                "verdict_word": pl.Series(
                    [BASELINE if r["scenario"] == baseline else verdict_word(r) for r in rows], dtype=pl.String
                ),
            },
        )
        .with_columns(
            _family_order=pl.col("family").replace_strict(
                {f: i for i, f in enumerate(stats.FAMILY_ORDER)}, default=len(stats.FAMILY_ORDER), return_dtype=pl.Int64
            )
        )
        .sort(
            ["_family_order", "environment", "test", "metric", "side", "_base_first", "scenario"], maintain_order=True
        )
        .select(
            "family",
            "correction",
            "environment",
            "test",
            "metric",
            "side",
            "unit",
            "scenario",
            "n",
            "median [95 % CI]",
            "change % [interval]",
            "p_adj",
            "verdict",
            "MDE %",
            "flags",
            "verdict_kind",
            "verdict_direction",
            "verdict_word",
            *(
                [
                    pl.when(pl.col("cpu_bound"))
                    .then(
                        pl.format(
                            "{} ({} %)",
                            "cpu_bound_side",
                            pl.max_horizontal("cpu_bound_pct", "cpu_bound_pct_base").round(0).cast(pl.Int64),
                        )
                    )
                    .otherwise(pl.lit(""))
                    .alias(CPU_LIMIT)
                ]
                if "cpu_bound" in df.columns
                else []
            ),
        )
    )


def spreadsheet(comparisons: pl.DataFrame) -> pl.DataFrame:
    """Every comparison with the analysis' columns for a spreadsheet (reports/significance.csv), the
    change as the tables write it (``change``) after the instrument's resolution columns."""
    out = comparisons.drop("u")
    change = pl.Series("change", [change_text(r) for r in out.iter_rows(named=True)], dtype=pl.String)
    return out.insert_column(out.columns.index("finer_metric") + 1, change)


def headline_table(
    summary: pl.DataFrame, comparisons: pl.DataFrame, baseline: str, runs: pl.DataFrame | None = None
) -> GT:
    """headline as a publication table: one row group per family (with its correction and the level its
    intervals came out at), the metric with its side and unit, the change once (its verdict a word where
    the change has a column), p as "< 0.001", the environment only where there are several. With the
    ``runs``: each test by its label (test_labels) and the CPU per work in its kind's unit (cpu_cost)."""
    t = headline(cpu_cost(summary, runs) if runs is not None else summary, comparisons, baseline=baseline)
    if runs is not None:
        t = t.with_columns(test=pl.col("test").replace(test_labels(runs)))
    levels = {
        f: f", intervals at {level(v)}"
        for f, v in comparisons.filter(pl.col("baseline") == baseline)
        .group_by("family")
        .agg(pl.col("ci_level").drop_nulls().drop_nans().first())
        .iter_rows()
        if v is not None
    }
    t = t.with_columns(
        # the family's correction and the level its intervals came out at, once per group
        family=pl.format(
            "{} ({}{})",
            "family",
            "correction",
            pl.col("family").replace_strict(levels, default="", return_dtype=pl.String),
        ),
        verdict=pl.col("verdict_word"),
        **{"median [95 % CI]": pl.col("median [95 % CI]").map_elements(numbers_in, return_dtype=pl.String)},
        metric=pl.Series(
            [
                f"{metric_label(m, s)} ({unit(u)})" if u else metric_label(m, s)
                for m, s, u in zip(t["metric"], t["side"], t["unit"], strict=True)
            ],
            dtype=pl.String,
        ),
    )
    drop = ["correction", "side", "unit"] + (["environment"] if t["environment"].n_unique() <= 1 else [])
    t = t.drop(*drop, "verdict_word")
    return publication_table(
        t,
        labels={
            "median [95 % CI]": "Median [95 % CI]",
            "change % [interval]": "Change % [interval]",
            "p_adj": "p (adjusted)",
            "verdict": "Verdict",
            "flags": "Flags",
        },
        group="family",
        verdict="verdict",
    )


def reference_table(both: pl.DataFrame) -> GT:
    """Ours next to theirs (analysis.reference's claims that this campaign measured) written like the
    headline table: our change once, with its interval, and the verdict as a word; p as "< 0.001";
    their change in % or, where they published a chart only, the direction their text states."""
    ours = [
        ""
        if missing(r["ours_delta_pct"])
        else change_text(
            {"delta_pct": r["ours_delta_pct"], "delta_low": r["ours_low"], "delta_high": r["ours_high"]},
            with_level=False,
        )
        for r in both.iter_rows(named=True)
    ]
    theirs = [
        (r["theirs_direction"] or "") if missing(r["theirs_change_pct"]) else change(r["theirs_change_pct"])
        for r in both.iter_rows(named=True)
    ]
    t = both.select(
        "claim",
        "ours",
        "ours_n",
        pl.Series("Our change % [interval]", ours, dtype=pl.String),
        "ours_p_adj",
        pl.Series(
            "verdict",
            [
                verdict_word({"delta_pct": r["ours_delta_pct"], **{k: r[f"ours_{k}"] for k in VERDICT_COLUMNS}})
                for r in both.iter_rows(named=True)
            ],
            dtype=pl.String,
        ),
        pl.col("ours_verdict_kind").alias("verdict_kind"),
        pl.col("ours_verdict_direction").alias("verdict_direction"),
        "theirs",
        pl.Series("Their change %", theirs, dtype=pl.String),
        "caveat",
    )
    return publication_table(
        t,
        labels={"ours": "Ours", "theirs": "Theirs", "ours_p_adj": "Our p (adjusted)", "verdict": "Our verdict"},
        verdict="verdict",
    )
