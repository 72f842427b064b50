"""Compare two campaigns (issue 16): what differs in their setup, then how each configuration changed.

Campaign B is compared against campaign A, configuration by configuration
(environment, scenario, test with its parameters, metric, side), with the
statistics of benchlib.analysis.stats: medians with distribution-free CIs,
Mann-Whitney U, the change in % with its CI, a corrected family and a
verdict by the metric's direction. `benchlib compare` and
notebooks/compare.py both call run().
"""
from __future__ import annotations

import atexit
import json
import math
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

import polars as pl
from scipy import stats as sps

from benchlib import record, tidy
from benchlib.config import NAME_RE, project_root
from benchlib.errors import BenchlibError, RecordError
from benchlib.schema import metric_info

from . import normalize, stats

CONFIG_KEYS = ["environment", "scenario", "test"]
# A record's facts that name this session, not the setup: lab ids, namespace and pod names, addresses
# handed out per session, boot IDs. Matched on the last part of a flattened key.
SESSION_KEYS = {"lab_id", "session", "namespace", "namespaces", "client_pod", "server_pod", "client_pod_ip",
                "server_pod_ip", "service_ip", "server_address", "boot_id", "client_node", "server_node"}
# Facts measured while the scenario was set up (seconds taken, an agent's CPU and memory): they vary
# from run to run and are results, not settings.
MEASURED_KEY = re.compile(r"(_s|_usage)$")
NOT_RECORDED = "(not recorded)"
SECONDARY = "secondary"
HEADLINE = "headline"


class CompareError(BenchlibError, ValueError):
    """Two campaigns cannot be compared as asked; the message names the campaign or configuration."""


@dataclass(frozen=True)
class Campaign:
    name: str
    runs: pl.DataFrame
    metrics: pl.DataFrame


def _from_revision(rev: str, name: str) -> Path:
    """Raw root holding campaign ``name`` as git revision ``rev`` of the project had it, fetched
    through DVC (its cache or remote) into a temporary directory that lives as long as this process."""
    from dvc.api import DVCFileSystem
    from dvc.exceptions import DvcException
    from scmrepo.exceptions import SCMError

    tmp = Path(tempfile.mkdtemp(prefix="benchlib-compare-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    try:
        fs = DVCFileSystem(str(project_root()), rev=rev)
        src = f"data/raw/{name}"
        if not fs.isdir(src):
            raise CompareError(f"campaign {rev}:{name}: revision {rev} has no {src}")
        fs.get(src, str(tmp / name), recursive=True)
    except (DvcException, SCMError) as exc:
        raise CompareError(f"campaign {rev}:{name}: {type(exc).__name__}: {' '.join(str(exc).split())}") from None
    return tmp


def load_campaign(spec: str, raw_root: Path | None = None) -> Campaign:
    """A campaign's tidy tables, built from its raw records: ``name`` under ``raw_root`` (default
    data/raw), or ``rev:name`` from git revision ``rev`` through DVC."""
    rev, _, name = spec.rpartition(":")
    if not re.match(NAME_RE, name):
        raise CompareError(f"campaign {spec!r}: not a campaign id (lower-case letters, digits, '.', '_', '-')")
    raw_root = _from_revision(rev, name) if rev else raw_root or project_root() / "data" / "raw"
    cdir = record.campaign_dir(name, raw_root)
    if not cdir.is_dir():
        known = sorted(p.name for p in raw_root.iterdir() if p.is_dir()) if raw_root.is_dir() else []
        raise CompareError(f"campaign {spec}: no raw records in {cdir} (campaigns there: "
                           f"{', '.join(known) or 'none'})")
    try:
        runs, metrics = tidy.build_tables(cdir)
    except BenchlibError as exc:
        raise CompareError(f"campaign {spec}: {exc}") from None
    return Campaign(spec, runs, metrics)


def _flatten(prefix: str, value, out: dict[str, str], session: set[str], settings: bool) -> None:
    """``value`` into ``out`` under dotted keys; ``settings``: the test's own parameters, all kept
    (its duration_s is a setting, a placement's load_s a measurement)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if settings or (str(k) not in SESSION_KEYS and not MEASURED_KEY.search(str(k))):
                _flatten(f"{prefix}.{k}", v, out, session, settings)
        return
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if settings or not any(s in text for s in session):  # e.g. a lab node named after its lab id
        out[prefix] = text


def record_facts(meta: dict) -> dict[str, str]:
    """The setup a run's meta.json records, flattened to dotted keys (placement.mtu,
    target.versions.kernel, test_params.duration_s, ...), without session identifiers."""
    target = meta.get("target", {})
    session = {str(target[k]) for k in ("lab_id", "session", "namespace") if target.get(k)}
    out: dict[str, str] = {}
    for part in ("test_params", "placement", "target"):
        _flatten(part, meta.get(part, {}), out, session, settings=part == "test_params")
    return out


def facts(runs: pl.DataFrame) -> pl.DataFrame:
    """Long table: environment, scenario, test, field, value (the distinct values over the
    configuration's runs, joined by ' | '), read from each run's meta.json."""
    rows = []
    for r in runs.select(*CONFIG_KEYS, "record").iter_rows(named=True):
        meta = json.loads((Path(r["record"]) / record.META).read_text())
        rows += [{**{k: r[k] for k in CONFIG_KEYS}, "field": f, "value": v} for f, v in record_facts(meta).items()]
    df = pl.DataFrame(rows, schema={**{k: pl.String for k in CONFIG_KEYS}, "field": pl.String, "value": pl.String})
    return (df.group_by(*CONFIG_KEYS, "field").agg(pl.col("value").unique().sort().str.join(" | "))
            .sort(*CONFIG_KEYS, "field"))


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
    fa, fb = (facts(c.runs.join(both, on=CONFIG_KEYS)) for c in (a, b))
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
                threshold_pct: float | Mapping[str, float] = 2.0, family_metrics: Sequence[str] = (),
                seed: int = 0, targets: Mapping[str, float] | None = None) -> pl.DataFrame:
    """B vs A per configuration and metric: the columns of stats.compare() plus both medians' 95 % CIs,
    the family (headline: ``family_metrics`` under ``correction``; secondary: every other metric,
    Benjamini-Hochberg, labelled FDR) and ``regression`` (significant, beyond the threshold, worse)."""
    targets = targets or {}
    va, vb = _values(a, targets), _values(b, targets)
    headline = pl.col("metric").is_in(list(family_metrics))
    parts = []
    for family, which, corr in ((HEADLINE, headline, correction), (SECONDARY, ~headline, "fdr_bh")):
        parts.append(stats.compare_campaigns(vb.filter(which), b.runs, va.filter(which), a.runs, alpha=alpha,
                                             correction=corr, noise_band_pct=threshold_pct, seed=seed)
                     .with_columns(family=pl.lit(family)))
    rows = pl.concat(parts)
    keys = [c for c in stats.CONFIG if c != "campaign"]
    cis = [stats.summarize(v, c.runs, alpha=alpha).select(*keys, *(pl.col(k).alias(f"{k}{suffix}")
                                                                   for k in ("ci_low", "ci_high", "flags")))
           for v, c, suffix in ((vb, b, ""), (va, a, "_base"))]
    for ci in cis:
        rows = rows.join(ci, on=keys, how="left", nulls_equal=True)
    return (rows.with_columns(regression=pl.col("verdict").str.ends_with(" worse"))
            .sort("family", "environment", "test", "metric", "side", "scenario"))


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


def run(campaign_a: str, campaign_b: str, raw_root: Path | None = None, alpha: float = 0.05,
        correction: str = "holm", threshold_pct: float | Mapping[str, float] = 2.0,
        family_metrics: Sequence[str] = (), seed: int = 0, targets: Mapping[str, float] | None = None) -> Result:
    """Load both campaigns, check their metadata (refusing changed test parameters), compare B vs A."""
    a, b = load_campaign(campaign_a, raw_root), load_campaign(campaign_b, raw_root)
    diff = differences(a, b)
    rows = comparisons(a, b, alpha, correction, threshold_pct, family_metrics, seed, targets)
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
    """The comparison as people read it: both medians with CIs, the change with its CI, p_adj, verdict."""
    return rows.select(
        "family", "environment", "scenario", "test", "metric", "side", "unit",
        pl.struct("median_base", "ci_low_base", "ci_high_base").map_elements(
            lambda s: _ci(s["median_base"], s["ci_low_base"], s["ci_high_base"]), return_dtype=pl.String)
        .alias("A median [95 % CI]"),
        pl.struct("median", "ci_low", "ci_high").map_elements(
            lambda s: _ci(s["median"], s["ci_low"], s["ci_high"]), return_dtype=pl.String)
        .alias("B median [95 % CI]"),
        "p_adj", "correction", "verdict")


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
    fam = res.rows.group_by("family", "correction").len().sort("family")
    out.append(f"{len(res.rows)} comparisons, alpha {res.alpha:g}: " + "; ".join(
        f"{f} family {n} ({c})" for f, c, n in fam.iter_rows()))
    # verdicts that name a change ("+x % [lo, hi] better/worse", "different ...") are counted together
    changed = pl.col("verdict").str.contains(r"^([+-]\d|different)")
    counts = res.rows.filter(~changed)["verdict"].value_counts().sort("count", descending=True)
    n_changed = int(res.rows.select(changed.sum()).item())
    out.append("verdicts: " + ", ".join(f"{v}: {n}" for v, n in counts.iter_rows()) + f"; changed: {n_changed}")
    changes = res.rows.filter(changed & (pl.col("family") == HEADLINE))
    if len(changes):
        out += ["", "Significant changes of the headline metrics beyond the threshold (secondary ones: --json or "
                "the page):", str(display_rows(changes).drop("family", "environment", "unit", "correction")), ""]
    headline = res.rows.filter(family=HEADLINE).select("metric").unique()
    out += ["Geometric mean of the changes per test, headline metrics (B/A median ratios over its scenarios):",
            str(res.geomean.join(headline, on="metric").with_columns(pl.col("geomean_change_pct").round(1))), ""]
    out.append(f"{len(res.regressions)} significant regression(s) beyond the threshold"
               + "".join(f"\n  {r['environment']}/{r['scenario']}/{r['test']} {r['metric']}"
                         + ("" if r["side"] == "none" else f" ({r['side']})") + f" [{r['family']}]: {r['verdict']}"
                         for r in res.regressions.iter_rows(named=True)))
    return "\n".join(out)
