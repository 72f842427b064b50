"""`benchlib compare`'s outputs: the JSON for machines, the JUnit file for CI and the plain-text page
(the comparison itself: benchlib.analysis.compare)."""

from __future__ import annotations

import math
from pathlib import Path
from xml.etree import ElementTree as ET

import polars as pl

from ..analysis import stats
from ..analysis.compare import Result
from ..analysis.verdicts import Kind
from ..base import escape
from .format import change_text, display_tables, interval, mde_text


def _num(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def to_json(res: Result) -> dict:
    """Everything a machine needs, NaN as null."""

    def records(df: pl.DataFrame) -> list[dict]:
        return [{k: _num(v) for k, v in r.items()} for r in df.iter_rows(named=True)]

    cols = [c for c in res.rows.columns if c not in ("campaign", "baseline", "campaign_base")]
    return {
        "a": res.a,
        "b": res.b,
        "alpha": res.alpha,
        "correction": stats.CORRECTIONS[res.correction],
        "differences": records(res.differences),
        "unmatched": records(res.unmatched),
        "setup_differs": len(res.differences) > 0,
        "failed_runs": records(res.failed),
        "comparisons": records(res.rows.select(cols)),
        "geomean": records(res.geomean),
        "regressions": len(res.regressions),
    }


def _case_name(r: dict) -> tuple[str, str]:
    side = "" if r["side"] == "none" else f" ({r['side']})"
    return f"{r['environment']}.{r['scenario']}.{r['test']}", f"{r['metric']}{side}"


def failed_text(r: dict) -> str:
    """How many runs of a comparison's configuration failed (and how many of those were disturbed), in B
    and in A; "" if none did."""
    parts = [
        f"{r[f'failed_runs{s}']} of {r[f'runs{s}']} runs left out in {who} "
        f"({r[f'failed_runs{s}'] - r[f'disturbed_runs{s}']} failed, {r[f'disturbed_runs{s}']} disturbed)"
        if r.get(f"disturbed_runs{s}")
        else f"{r[f'failed_runs{s}']} of {r[f'runs{s}']} runs failed in {who}"
        for s, who in (("", "B"), ("_base", "A"))
        if r[f"failed_runs{s}"]
    ]
    return ", ".join(parts)


def setup_lines(res: Result) -> list[tuple[str, str]]:
    """Each setup difference as (field, "A: value; B: value; where")."""
    return [
        (d["field"], f"{res.a}: {d['value_a']}; {res.b}: {d['value_b']}; in {d['where']}")
        for d in res.differences.iter_rows(named=True)
    ]


def write_junit(res: Result, path: Path, strict_setup: bool = False) -> Path:
    """One test case per configuration and metric; a failure is a significant regression beyond
    the threshold (or every run of the configuration failed in B), a skip a comparison that could not
    be tested (too few runs). The setup differences are properties of the test suite
    (``setup.<field>``, and ``setup.differences``, their count); with ``strict_setup`` each is also a
    failing case (class ``setup``). A case whose configuration had failed runs carries them as
    properties (``failed_runs``/``runs`` in B, ``failed_runs_base``/``runs_base`` in A) and in its text."""
    setup = setup_lines(res)
    setup_failures = len(setup) if strict_setup else 0
    suite = ET.Element(
        "testsuite",
        name=f"benchlib compare {res.a} vs {res.b}",
        tests=str(len(res.rows) + setup_failures),
        failures=str(len(res.regressions) + setup_failures),
        skipped=str(int((res.rows["p_adj"].is_nan() & ~res.rows["regression"]).sum())),
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="setup.differences", value=str(len(setup)))
    for key, value in setup:
        ET.SubElement(props, "property", name=f"setup.{key}", value=value)
    for key, value in setup if strict_setup else ():
        case = ET.SubElement(suite, "testcase", classname="setup", name=key)
        ET.SubElement(case, "failure", message=f"the setup differs (--strict-setup): {key}", type="setup").text = value
    for r in res.rows.iter_rows(named=True):
        classname, name = _case_name(r)
        case = ET.SubElement(suite, "testcase", classname=classname, name=name)
        failed = failed_text(r)
        if failed:
            cprops = ET.SubElement(case, "properties")
            for key in ("failed_runs", "runs", "failed_runs_base", "runs_base"):
                ET.SubElement(cprops, "property", name=key, value=str(r[key]))
        if r["all_failed"]:  # nothing to test: the other campaign's median and the failures
            known = ("median_base", res.a) if r["all_failed"] == "B" else ("median", res.b)
            detail = f"{r['metric']} {r[known[0]]:.4g} {r['unit']} in {known[1]}; {r['verdict']}"
        else:
            detail = (
                f"{r['metric']} {r['median_base']:.4g} -> {r['median']:.4g} {r['unit']}; {r['verdict']}; "
                f"p_adj {r['p_adj']:.3g} ({r['correction']}); threshold +/- {r['noise_band_pct']:g} %"
                + (f"; {failed}" if failed else "")
            )
        if r["regression"]:
            kind = "failed runs" if r["all_failed"] else "regression"
            ET.SubElement(case, "failure", message=r["verdict"], type=kind).text = detail
        elif math.isnan(r["p_adj"]):
            ET.SubElement(case, "skipped", message=r["verdict"] + (f"; {failed}" if failed else ""))
        else:
            ET.SubElement(case, "system-out").text = detail
    for element in suite.iter():  # names, verdicts and failure reasons come from records: XML must hold them
        element.attrib = {key: escape.xml(value) for key, value in element.attrib.items()}
        element.text = None if element.text is None else escape.xml(element.text)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
    return path


def display_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """The comparison as people read it: both medians with CIs, the change with its CI at the family's
    level, p_adj, verdict, the minimum detectable effect; and the verdict's kind and direction, which
    tables.publication_table colours it by and does not show."""
    return rows.select(
        "family",
        "environment",
        "scenario",
        "test",
        "metric",
        "side",
        "unit",
        pl.struct("median_base", "ci_low_base", "ci_high_base")
        .map_elements(lambda s: interval(s["median_base"], s["ci_low_base"], s["ci_high_base"]), return_dtype=pl.String)
        .alias("A median [95 % CI]"),
        pl.struct("median", "ci_low", "ci_high")
        .map_elements(lambda s: interval(s["median"], s["ci_low"], s["ci_high"]), return_dtype=pl.String)
        .alias("B median [95 % CI]"),
        pl.Series("change % [CI @ level]", [change_text(r) for r in rows.iter_rows(named=True)], dtype=pl.String),
        "p_adj",
        "correction",
        "verdict",
        pl.Series("MDE %", [mde_text(r) for r in rows.iter_rows(named=True)], dtype=pl.String),
        "verdict_kind",
        "verdict_direction",
    )


def text(res: Result) -> str:
    """The plain-text page `benchlib compare` prints: differences first, then regressions and a summary."""
    display_tables()
    pl.Config.set_tbl_width_chars(200)  # a terminal or CI log, not a notebook column
    out = [f"benchlib compare: {res.b} against {res.a}", ""]
    if len(res.differences):
        out += [
            f"What differs (raw records, session identifiers left out): {len(res.differences)} field(s)",
            str(res.differences.rename({"value_a": res.a, "value_b": res.b})),
            "",
        ]
    else:
        out += ["What differs: nothing the raw records carry, besides session identifiers", ""]
    if len(res.unmatched):
        out += ["Measured in one campaign only (not compared):", str(res.unmatched), ""]
    if len(res.failed):
        out += [
            f"Failed runs (runs, failed runs and of those disturbed in {res.a} (A) and {res.b} (B); a "
            "configuration whose every run failed in B is a regression):",
            str(
                res.failed.select(
                    "environment",
                    "scenario",
                    "test",
                    "runs_base",
                    "failed_runs_base",
                    "disturbed_runs_base",
                    "runs",
                    "failed_runs",
                    "disturbed_runs",
                    "failure_reasons_base",
                    "failure_reasons",
                ).rename(
                    {
                        "runs_base": "runs A",
                        "failed_runs_base": "failed A",
                        "disturbed_runs_base": "disturbed A",
                        "runs": "runs B",
                        "failed_runs": "failed B",
                        "disturbed_runs": "disturbed B",
                        "failure_reasons_base": "reasons A",
                        "failure_reasons": "reasons B",
                    }
                )
            ),
            "",
        ]
    tested = res.rows.filter(pl.col("all_failed").is_null())
    fam = tested.group_by("family", "correction", maintain_order=True).len()  # rows come primary first
    out.append(
        f"{len(tested)} comparisons, alpha {res.alpha:g}"
        + "".join(f"; {f} family {n} ({c})" for f, c, n in fam.iter_rows())
        + (
            f"; {len(res.rows) - len(tested)} configuration(s) whose every run failed in one campaign, not tested"
            if len(tested) < len(res.rows)
            else ""
        )
    )
    # the findings (verdicts that name a change: "+x % [lo, hi] better/worse", "different ...") are counted together
    changed = pl.col("verdict_kind") == str(Kind.FINDING)
    counts = res.rows.filter(~changed)["verdict"].value_counts().sort("count", descending=True)
    n_changed = int(res.rows.select(changed.sum()).item())
    out.append("verdicts: " + ", ".join(f"{v}: {n}" for v, n in counts.iter_rows()) + f"; changed: {n_changed}")
    changes = res.rows.filter(changed & (pl.col("family") == stats.PRIMARY))
    if len(changes):
        out += [
            "",
            "Significant changes of the primary family (each test's headline metric; secondary ones: "
            "--json or the page):",
            str(
                display_rows(changes).drop(
                    "family", "environment", "unit", "correction", "verdict_kind", "verdict_direction"
                )
            ),
            "",
        ]
    headline = res.rows.filter(family=stats.PRIMARY).select("metric").unique()
    out += [
        "Geometric mean of the changes per test, headline metrics (B/A median ratios over its scenarios):",
        str(res.geomean.join(headline, on="metric").with_columns(pl.col("geomean_change_pct").round(1))),
        "",
    ]
    out.append(
        f"{len(res.regressions)} regression(s): significant and beyond the threshold, or every run failed in B"
        + "".join(
            f"\n  {r['environment']}/{r['scenario']}/{r['test']} {r['metric']}"
            + ("" if r["side"] == "none" else f" ({r['side']})")
            + f" [{r['family']}]: {r['verdict']}"
            + (f" ({f})" if (f := failed_text(r)) and not r["all_failed"] else "")
            for r in res.regressions.iter_rows(named=True)
        )
    )
    return "\n".join(out)
