"""Compare two campaigns (issue 16): what differs in their setup, then how each configuration changed.

Campaign B is compared against campaign A, configuration by configuration
(environment, scenario, test with its parameters, metric, side), with the
statistics of benchlib.analysis.stats, with the report's families: medians
with distribution-free CIs, Mann-Whitney U, the change in % with its CI at
the level of its family's correction (the primary family: each test's
headline metric; secondary families, FDR: every other metric by kind) and a
verdict by the metric's direction. `benchlib compare` and
notebooks/compare.py both call run().
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

import polars as pl
from scipy import stats as sps

from benchlib import schema
from benchlib.errors import BenchlibError

from . import normalize, resolve, stats

CONFIG_KEYS = ["environment", "scenario", "test"]
NOT_RECORDED = "(not recorded)"


class CompareError(BenchlibError, ValueError):
    """Two campaigns cannot be compared as asked; the message names the campaign or configuration."""


@dataclass(frozen=True)
class Campaign:
    """A campaign's tidy tables: runs, metrics and facts (tidy.build_facts: what each configuration's
    records say about its setup)."""
    name: str
    runs: pl.DataFrame
    metrics: pl.DataFrame
    facts: pl.DataFrame

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        schema.write(self.runs, "runs", directory / "runs.parquet")
        schema.write(self.metrics, "metrics", directory / "metrics.parquet")
        self.facts.write_parquet(directory / "facts.parquet")
        return directory


def load_campaign(name: str, directory: str | Path) -> Campaign:
    """Campaign ``name`` as Campaign.save wrote it (paths anchored at the project root)."""
    d = resolve(directory)
    return Campaign(name, schema.read_runs(d / "runs.parquet"), schema.read_metrics(d / "metrics.parquet"),
                    pl.read_parquet(d / "facts.parquet"))


def _configs(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.select(CONFIG_KEYS).unique()


def _where(configs: pl.Series, total: int) -> str:
    names = sorted(configs)
    return f"all {total} configurations" if len(names) == total else ", ".join(names)


def differences(a: Campaign, b: Campaign) -> pl.DataFrame:
    """What the raw records of A and B say differently about configurations measured in both:
    field, value in A, value in B, where (the configurations, environment/scenario/test).

    Different test parameters for one configuration are refused (CompareError naming it and the
    fields): such runs measure something else, and the statistics would not pair them anyway.
    """
    both = _configs(a.runs).join(_configs(b.runs), on=CONFIG_KEYS)
    fa, fb = (c.facts.join(both, on=CONFIG_KEYS) for c in (a, b))
    diff = (fa.join(fb, on=[*CONFIG_KEYS, "field"], how="full", coalesce=True, suffix="_b")
            .rename({"value": "value_a"})
            .with_columns(pl.col("value_a", "value_b").fill_null(NOT_RECORDED))
            .filter(pl.col("value_a") != pl.col("value_b")))
    params = diff.filter(pl.col("field").str.starts_with("test_params."))
    if len(params):
        lines = [f"{cfg}: " + "; ".join(f"{f.removeprefix('test_params.')} {va} in {a.name}, {vb} in {b.name}"
                                         for f, va, vb in zip(g["field"], g["value_a"], g["value_b"]))
                 for (cfg,), g in params.with_columns(cfg=pl.concat_str(CONFIG_KEYS, separator="/"))
                 .group_by("cfg", maintain_order=True)]
        raise CompareError(f"{a.name} vs {b.name}: refused, the same configuration was measured with different "
                           f"test parameters (give the test a new name to measure new settings): "
                           + " | ".join(lines))
    return (diff.with_columns(cfg=pl.concat_str(CONFIG_KEYS, separator="/"))
            .group_by("field", "value_a", "value_b")
            .agg(where=pl.col("cfg").map_batches(lambda s: pl.Series([_where(s, len(both))]),
                                                 returns_scalar=True, return_dtype=pl.String))
            .sort("field", "value_a", "value_b"))


def unmatched(a: Campaign, b: Campaign) -> pl.DataFrame:
    """Configurations (environment/scenario/test) measured in only one of the campaigns."""
    ca, cb = _configs(a.runs), _configs(b.runs)
    only = [c.join(other, on=CONFIG_KEYS, how="anti").with_columns(only_in=pl.lit(name))
            for c, other, name in ((ca, cb, a.name), (cb, ca, b.name))]
    return pl.concat(only).sort("only_in", *CONFIG_KEYS)


def _values(c: Campaign, targets: Mapping[str, float]) -> pl.DataFrame:
    return normalize.with_cpu_at_target(c.metrics, c.runs, **targets)


def comparisons(a: Campaign, b: Campaign, alpha: float = 0.05, correction: str = "holm",
                threshold_pct: float | Mapping[str, float] = 2.0, seed: int = 0,
                targets: Mapping[str, float] | None = None) -> pl.DataFrame:
    """B vs A per configuration and every metric: the columns of stats.compare() (its families: each
    test's headline metric the primary family under ``correction``, every other metric in the
    Benjamini-Hochberg family of its kind) plus both medians' 95 % CIs and ``regression``
    (significant, worse, and the change in % itself beyond the threshold)."""
    targets = targets or {}
    va, vb = _values(a, targets), _values(b, targets)
    rows = stats.compare_campaigns(vb, b.runs, va, a.runs, alpha=alpha, correction=correction,
                                   noise_band_pct=threshold_pct, seed=seed)
    keys = [c for c in stats.CONFIG if c != "campaign"]
    cis = [stats.summarize(v, c.runs, alpha=alpha).select(*keys, *(pl.col(k).alias(f"{k}{suffix}")
                                                                   for k in ("ci_low", "ci_high", "flags")))
           for v, c, suffix in ((vb, b, ""), (va, a, "_base"))]
    for ci in cis:
        rows = rows.join(ci, on=keys, how="left", nulls_equal=True)
    # A gate fails on what is worse, significant and beyond the threshold itself (as asv compare does):
    # a significant -2 % whose CI reaches past -5 % reads "worse" but is no regression at 5 %.
    beyond = pl.col("delta_pct").abs() > pl.col("noise_band_pct")
    order = {f: i for i, f in enumerate(stats.FAMILY_ORDER)}
    return (rows.with_columns(regression=pl.col("verdict").str.ends_with(" worse") & beyond.fill_null(False))
            .sort(pl.col("family").replace_strict(order, default=len(order)), "environment", "test", "metric",
                  "side", "scenario"))


def geomean_summary(rows: pl.DataFrame) -> pl.DataFrame:
    """Per environment, test, metric and side: the geometric mean of B/A median ratios over the
    scenarios, as a change in % (descriptive: no CI), and how many configurations it spans."""
    ok = rows.filter(pl.col("median").is_finite() & pl.col("median_base").is_finite()
                     & (pl.col("median") > 0) & (pl.col("median_base") > 0))
    keys = ["environment", "test", "metric", "side"]
    out = (ok.group_by(keys)
           .agg(ratios=pl.col("median") / pl.col("median_base"), configurations=pl.len(),
                regressions=pl.col("regression").sum())
           .sort(keys))
    return out.with_columns(
        geomean_change_pct=pl.Series([100 * (sps.gmean(r.to_numpy()) - 1) for r in out["ratios"]],
                                     dtype=pl.Float64)).drop("ratios")


@dataclass(frozen=True)
class Result:
    a: str
    b: str
    differences: pl.DataFrame
    unmatched: pl.DataFrame
    rows: pl.DataFrame
    geomean: pl.DataFrame
    alpha: float
    correction: str

    @property
    def regressions(self) -> pl.DataFrame:
        return self.rows.filter(pl.col("regression"))


def run(a: Campaign, b: Campaign, alpha: float = 0.05, correction: str = "holm",
        threshold_pct: float | Mapping[str, float] = 2.0, seed: int = 0,
        targets: Mapping[str, float] | None = None) -> Result:
    """Check both campaigns' metadata (refusing changed test parameters), then compare B vs A."""
    diff = differences(a, b)
    rows = comparisons(a, b, alpha, correction, threshold_pct, seed, targets)
    if rows.is_empty():
        raise CompareError(f"{a.name} vs {b.name}: no configuration was measured successfully in both")
    return Result(a.name, b.name, diff, unmatched(a, b), rows, geomean_summary(rows), alpha, correction)


def _num(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def to_json(res: Result) -> dict:
    """Everything a machine needs, NaN as null."""
    def records(df: pl.DataFrame) -> list[dict]:
        return [{k: _num(v) for k, v in r.items()} for r in df.iter_rows(named=True)]
    cols = [c for c in res.rows.columns if c not in ("campaign", "baseline")]
    return {"a": res.a, "b": res.b, "alpha": res.alpha, "correction": stats.CORRECTIONS[res.correction],
            "differences": records(res.differences), "unmatched": records(res.unmatched),
            "comparisons": records(res.rows.select(cols)), "geomean": records(res.geomean),
            "regressions": len(res.regressions)}


def _case_name(r: dict) -> tuple[str, str]:
    side = "" if r["side"] == "none" else f" ({r['side']})"
    return f"{r['environment']}.{r['scenario']}.{r['test']}", f"{r['metric']}{side}"


def write_junit(res: Result, path: Path) -> Path:
    """One test case per configuration and metric; a failure is a significant regression beyond
    the threshold, a skip a comparison that could not be tested (too few runs)."""
    suite = ET.Element("testsuite", name=f"benchlib compare {res.a} vs {res.b}", tests=str(len(res.rows)),
                       failures=str(len(res.regressions)),
                       skipped=str(int(res.rows["p_adj"].is_nan().sum())))
    for r in res.rows.iter_rows(named=True):
        classname, name = _case_name(r)
        case = ET.SubElement(suite, "testcase", classname=classname, name=name)
        detail = (f"{r['metric']} {r['median_base']:.4g} -> {r['median']:.4g} {r['unit']}; {r['verdict']}; "
                  f"p_adj {r['p_adj']:.3g} ({r['correction']}); threshold +/- {r['noise_band_pct']:g} %")
        if r["regression"]:
            ET.SubElement(case, "failure", message=r["verdict"], type="regression").text = detail
        elif math.isnan(r["p_adj"]):
            ET.SubElement(case, "skipped", message=r["verdict"])
        else:
            ET.SubElement(case, "system-out").text = detail
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
    return path


def _ci(v, lo, hi) -> str:
    return f"{v:.4g} [{lo:.4g}, {hi:.4g}]" if math.isfinite(lo) else f"{v:.4g}"


def display_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """The comparison as people read it: both medians with CIs, the change with its CI at the family's
    level, p_adj, verdict, the minimum detectable effect."""
    return rows.select(
        "family", "environment", "scenario", "test", "metric", "side", "unit",
        pl.struct("median_base", "ci_low_base", "ci_high_base").map_elements(
            lambda s: _ci(s["median_base"], s["ci_low_base"], s["ci_high_base"]), return_dtype=pl.String)
        .alias("A median [95 % CI]"),
        pl.struct("median", "ci_low", "ci_high").map_elements(
            lambda s: _ci(s["median"], s["ci_low"], s["ci_high"]), return_dtype=pl.String)
        .alias("B median [95 % CI]"),
        pl.Series("change % [CI @ level]", [stats.change_text(r) for r in rows.iter_rows(named=True)],
                  dtype=pl.String),
        "p_adj", "correction", "verdict",
        pl.Series("MDE %", [stats.mde_text(r) for r in rows.iter_rows(named=True)], dtype=pl.String))


def text(res: Result) -> str:
    """The plain-text page `benchlib compare` prints: differences first, then regressions and a summary."""
    from .report import display_tables
    display_tables()
    pl.Config.set_tbl_width_chars(200)  # a terminal or CI log, not a notebook column
    out = [f"benchlib compare: {res.b} against {res.a}", ""]
    if len(res.differences):
        out += [f"What differs (raw records, session identifiers left out): {len(res.differences)} field(s)",
                str(res.differences.rename({"value_a": res.a, "value_b": res.b})), ""]
    else:
        out += ["What differs: nothing the raw records carry, besides session identifiers", ""]
    if len(res.unmatched):
        out += ["Measured in one campaign only (not compared):", str(res.unmatched), ""]
    fam = res.rows.group_by("family", "correction", maintain_order=True).len()  # rows come primary first
    out.append(f"{len(res.rows)} comparisons, alpha {res.alpha:g}: " + "; ".join(
        f"{f} family {n} ({c})" for f, c, n in fam.iter_rows()))
    # verdicts that name a change ("+x % [lo, hi] better/worse", "different ...") are counted together
    changed = pl.col("verdict").str.contains(r"^([+-]\d|different)")
    counts = res.rows.filter(~changed)["verdict"].value_counts().sort("count", descending=True)
    n_changed = int(res.rows.select(changed.sum()).item())
    out.append("verdicts: " + ", ".join(f"{v}: {n}" for v, n in counts.iter_rows()) + f"; changed: {n_changed}")
    changes = res.rows.filter(changed & (pl.col("family") == stats.PRIMARY))
    if len(changes):
        out += ["", "Significant changes of the primary family (each test's headline metric; secondary ones: "
                "--json or the page):", str(display_rows(changes).drop("family", "environment", "unit", "correction")),
                ""]
    headline = res.rows.filter(family=stats.PRIMARY).select("metric").unique()
    out += ["Geometric mean of the changes per test, headline metrics (B/A median ratios over its scenarios):",
            str(res.geomean.join(headline, on="metric").with_columns(pl.col("geomean_change_pct").round(1))), ""]
    out.append(f"{len(res.regressions)} significant regression(s) beyond the threshold"
               + "".join(f"\n  {r['environment']}/{r['scenario']}/{r['test']} {r['metric']}"
                         + ("" if r["side"] == "none" else f" ({r['side']})") + f" [{r['family']}]: {r['verdict']}"
                         for r in res.regressions.iter_rows(named=True)))
    return "\n".join(out)
