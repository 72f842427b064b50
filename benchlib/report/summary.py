"""The report's opening section in words: what was compared, where, with how many runs, and the
findings as sentences with their numbers and intervals, largest change first.

Pure functions of the analysis tables (runs, comparisons, families) and settings: the summary
notebook only displays what they return, and a degenerate campaign (nothing succeeded, one
scenario, too few runs, a baseline without a successful run) gets sentences that say so.
"""

from __future__ import annotations

import math
import re

import polars as pl

from ..analysis import paired, sequential, stats
from ..analysis.verdicts import Direction, Kind
from ..base import escape
from ..settings.analysis import DEFAULT_ANALYSIS, Analysis
from .format import change, change_text, interval_wording, level, mde_text, size, unit
from .prose import MARKDOWN, PLAIN, Prose

# Short names of metrics for sentences and table headers (the schema's descriptions are longer).
METRIC_LABELS = {
    "throughput": "throughput",
    "transaction_rate": "transaction rate",
    "connection_rate": "connection rate",
    "udp_loss_pct": "UDP loss",
    "udp_jitter": "UDP jitter",
    "retransmits": "retransmits",
    "http_qps": "HTTP request rate",
    "dns_qps": "DNS query rate",
    "latency_min": "minimum latency",
    "latency_mean": "mean latency",
    "latency_p50": "median latency",
    "latency_p90": "p90 latency",
    "latency_p99": "p99 latency",
    "http_latency_p50": "median HTTP latency",
    "http_latency_p90": "p90 HTTP latency",
    "http_latency_p99": "p99 HTTP latency",
    "http_latency_p999": "p99.9 HTTP latency",
    "dns_latency_p50": "median DNS latency",
    "dns_latency_p99": "p99 DNS latency",
    "cpu_pct_at_target": "CPU per work",
    "proxy_cpu_pct_at_target": "proxy CPU per work",
    "cpu_busy_pct": "CPU busy",
    "cpu_busy_cores": "busy cores",
}

# the summary's groups: four of the verdict kinds, and the untested ones together
FINDING, NOISE, NEGLIGIBLE, INCONCLUSIVE = (
    str(k) for k in (Kind.FINDING, Kind.NOISE, Kind.NEGLIGIBLE, Kind.INCONCLUSIVE)
)
UNTESTED = "untested"


def metric_label(metric: str, side: str | None = "none") -> str:
    """A metric's short name, with its side where it has one: "CPU per work (client)"."""
    label = METRIC_LABELS.get(metric, metric.replace("_", " "))
    return label if side in (None, "", "none") else f"{label} ({side})"


def kind_of(verdict_kind: str | None) -> str:
    """How the summary groups a comparison by its verdict's kind (the ``verdict_kind`` column): a
    FINDING (a change beyond the noise band), NOISE, NEGLIGIBLE, INCONCLUSIVE or UNTESTED (too few
    runs, no finite value, every run failed, or no comparison)."""
    return str(verdict_kind) if verdict_kind in (FINDING, NOISE, NEGLIGIBLE, INCONCLUSIVE) else UNTESTED


def _what(r: dict, prose: Prose = MARKDOWN) -> str:
    """What a comparison compares: "bridge vs host, tcp_rr transaction rate" for two scenarios;
    "host: lab-b vs lab-a, tcp_rr transaction rate" for one scenario in two campaigns (the rows of
    compare.comparisons, whose ``campaign_base`` names the base campaign)."""
    name = prose.name
    what = f"{name(r['test'])} {name(metric_label(r['metric'], r['side']))}"
    if r.get("campaign_base"):
        return f"{name(r['scenario'])}: {name(r['campaign'])} vs {name(r['campaign_base'])}, {what}"
    return f"{name(r['scenario'])} vs {name(r['baseline'])}, {what}"


def cpu_caveat(r: dict, prose: Prose = MARKDOWN) -> str:
    """ "" or, for a comparison made where a side ran at its CPU limit, a short clause saying which."""
    if not r.get("cpu_bound"):
        return ""
    pcts = [p for p in (r.get("cpu_bound_pct"), r.get("cpu_bound_pct_base")) if p is not None and not math.isnan(p)]
    busy = f", {max(pcts):.0f} % busy" if pcts else ""
    return f"CPU limit ({prose.name(r.get('cpu_bound_side') or 'a side')}{busy})"


def finding_sentence(
    r: dict, family_size: int | None = None, cpu_note: bool = True, with_n: bool = False, prose: Prose = MARKDOWN
) -> str:
    """One comparison as a sentence: what against what, the change with its interval (the verdict's
    text, so resolution wording comes with it), the correction it is significant after, and where
    ``cpu_note``, the side at its CPU limit; ``with_n``, the runs on each side; the verdict stressed.

    "bridge vs host, tcp_rr transaction rate: -33.7 % [-35.4, -32.2] worse, significant after Holm over 12;
    CPU limit (total, 100 % busy)."
    """
    # the verdict, change, MDE and correction are the statistics' own words and numbers: only the
    # names in _what come from the tables
    kind, what = kind_of(r["verdict_kind"]), _what(r, prose)
    over = f" over {family_size}" if family_size else ""
    if kind == FINDING:
        text = f"{what}: {prose.strong(unit(r['verdict']))}, significant after {r['correction']}{over}"
    elif kind == NEGLIGIBLE:
        text = (
            f"{what}: {change_text(r).split(' @')[0]}, significant after {r['correction']}{over} "
            "but inside the noise band (negligible)"
        )
    elif kind == NOISE:
        mde = mde_text(r)
        # not significant is not "no difference": the MDE says how large a change could hide here
        text = f"{what}: no significant change" + (
            f" (it could detect {mde} %)" if mde and r["n_attainable"] is None else ""
        )
    elif kind == INCONCLUSIVE or r["verdict_kind"] in (Kind.EXCLUDED, Kind.FAILED):
        text = f"{what}: {r['verdict']}"
    else:
        text = f"{what}: not tested, {r['n']} vs {r['n_base']} successful runs (at least {stats.MIN_N} needed)"
    caveat = cpu_caveat(r, prose) if cpu_note else ""
    runs = f" (n = {r['n']} vs {r['n_base']} runs)" if with_n and kind != UNTESTED else ""
    return text + runs + (f"; {caveat}" if caveat else "") + "."


def ordered_findings(comparisons: pl.DataFrame, family: str | None = stats.PRIMARY) -> pl.DataFrame:
    """The comparisons of ``family`` (all where None) with a `kind` column, findings first and
    within each kind the largest change first."""
    c = comparisons if family is None else comparisons.filter(pl.col("family") == family)
    order = {k: i for i, k in enumerate((FINDING, NEGLIGIBLE, INCONCLUSIVE, NOISE, UNTESTED))}
    kinds = [kind_of(v) for v in c["verdict_kind"]]
    return (
        c.with_columns(
            kind=pl.Series(kinds, dtype=pl.String),
            _k=pl.Series([order[k] for k in kinds], dtype=pl.Int64),
            _size=pl.col("delta_pct").fill_nan(None).abs().fill_null(-1.0),
        )
        .sort(["_k", "_size"], descending=[False, True], maintain_order=True)
        .drop("_k", "_size")
    )


def headline_rows(comparisons: pl.DataFrame, baseline: str) -> pl.DataFrame:
    """The headline comparisons against ``baseline`` (contrasts left out), findings first, largest first."""
    rows = ordered_findings(comparisons)
    return rows.filter(pl.col("baseline") == baseline) if len(rows) else rows


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + ", ".join(items[-1:])


def campaign_text(runs: pl.DataFrame, comparisons: pl.DataFrame, baseline: str, prose: Prose = MARKDOWN) -> str:
    """Who was compared with which baseline, where, with how many runs per configuration, in which
    campaign; the scenarios and the campaign stressed."""
    name, bold = prose.name, prose.strong
    campaigns = [name(c) for c in sorted(runs["campaign"].unique().to_list())]
    envs = [name(e) for e in sorted(runs["environment"].unique().to_list())]
    scenarios = [name(s) for s in stats_order(runs["scenario"].unique().to_list(), baseline)]
    tests = [name(t) for t in sorted(runs["test"].unique().to_list())]
    baseline = name(baseline)
    ok = runs.filter(pl.col("outcome") == "ok")
    # every configuration, those without a successful run (a baseline whose runs all failed) included
    per_config = runs.group_by("environment", "scenario", "test").agg((pl.col("outcome") == "ok").sum())["outcome"]
    per_config = per_config if len(per_config) else pl.Series([0])
    lo, hi = int(per_config.min()), int(per_config.max())  # pyright: ignore[reportArgumentType] (polars types Series.min/max as any literal or None)
    n = f"{lo}" if lo == hi else f"{lo} to {hi}"
    disturbed = int((runs["outcome"] == "disturbed").sum())
    failed = len(runs) - len(ok) - disturbed
    # disturbed runs (other processes took their CPUs) are left out as failed ones are
    left_out = f"{failed} failed and {disturbed} disturbed (left out)" if disturbed else f"{failed} failed"
    others = [s for s in scenarios if s != baseline]
    what = (
        f"{bold(_join(others))} against the baseline {bold(baseline)}"
        if others
        else f"only the scenario {bold(_join(scenarios))}"
    )
    return (
        f"Campaign {bold(_join(campaigns))} in {_join(envs)}: {what}, on {len(tests)} test(s) "
        f"({_join(tests)}); {n} successful run(s) per configuration, {left_out} of {len(runs)}."
    )


def stats_order(scenarios: list[str], baseline: str) -> list[str]:
    """The baseline first, then the others by name."""
    return sorted(scenarios, key=lambda s: (s != baseline, s))


def degenerate_text(runs: pl.DataFrame, comparisons: pl.DataFrame, baseline: str, prose: Prose = MARKDOWN) -> str:
    """ "" for a campaign with comparisons to read, else why there is nothing (or little) to conclude."""
    name = prose.name
    lead = prose.strong("No finding:")
    ok = runs.filter(pl.col("outcome") == "ok")
    if ok.is_empty():
        return f"{lead} no run of this campaign succeeded; the failures are listed under Caveats."
    scenarios = set(runs["scenario"].unique())
    if scenarios == {baseline} or len(scenarios) == 1:
        return (
            f"{lead} only one scenario ({_join([name(s) for s in sorted(scenarios)])}) was measured: "
            "there is nothing to compare it with."
        )
    if baseline not in set(ok["scenario"]):
        shown = prose.strong(name(baseline))
        return (
            f"{lead} the baseline {shown} has no successful run"
            + (" (it was not measured)" if baseline not in scenarios else "")
            + ", so no scenario was compared with it."
        )
    if comparisons.is_empty():
        return f"{lead} no comparison was made."
    untested = comparisons.filter(
        pl.Series([kind_of(v) == UNTESTED for v in comparisons["verdict_kind"]], dtype=pl.Boolean)
    )
    if len(untested) == len(comparisons):
        n = int(pl.concat([untested["n"], untested["n_base"]]).min())  # pyright: ignore[reportArgumentType] (polars types Series.min/max as any literal or None)
        return (
            f"{lead} too few runs: no comparison could be tested (as few as {n} successful "
            f"run(s) per configuration, at least {stats.MIN_N} needed)."
        )
    return ""


def profile_notes(r: dict, explanations: pl.DataFrame | None) -> list[str]:
    """The CPU-profile sentences (report.profiles.explanations) of a comparison's scenario, test and baseline."""
    if explanations is None or explanations.is_empty():
        return []
    e = explanations.filter(
        environment=r["environment"], test=r["test"], scenario=r["scenario"], baseline=r["baseline"]
    )
    return list(e["sentence"])


def _explained(r: dict, explanations: pl.DataFrame | None) -> pl.DataFrame | None:
    """The explanations (report.profiles.explanations) of a comparison; None where there are none."""
    if explanations is None or explanations.is_empty():
        return None
    e = explanations.filter(
        environment=r["environment"], test=r["test"], scenario=r["scenario"], baseline=r["baseline"]
    )
    return None if e.is_empty() else e


def _first_why(e: pl.DataFrame) -> dict:
    """The explanation whose "clause" comes first among a comparison's, both sides' first; {} if none."""
    rows = [r for side in ("total", "", "server", "client") for r in e.filter(side=side).iter_rows(named=True)]
    return next((r for r in rows if r["clause"]), {})


def why_clause(r: dict, explanations: pl.DataFrame | None) -> str:
    """A comparison's why as one plain clause, plain text: the profiles' "clause", both sides' where
    there is one; "" when the profiles say nothing about it."""
    e = _explained(r, explanations)
    return "" if e is None else _first_why(e).get("clause", "")


def why_html(r: dict, explanations: pl.DataFrame | None) -> str:
    """After a finding: its why as one plain clause (why_clause), and the CPU-profile sentences with
    their kernel frames behind a disclosure; "" when the profiles say nothing about it. Inline HTML in
    the findings' Markdown list, so the profiles' text (frame names) goes through escape.page, which
    keeps it text in both."""
    e = _explained(r, explanations)
    if e is None:
        return ""
    first = _first_why(e)
    kinds = f" ({', '.join(first['works'])})" if first.get("works") else ""
    why = f" Why: {escape.page(first['clause'] + kinds)}." if first else ""
    details = "<br>".join(escape.page(n) for n in e["sentence"])
    return (
        f'{why} <details class="why"><summary>CPU profile: where the CPU went, frame by frame</summary>'
        f"{details}</details>"
    )


def explained_markdown(comparisons: pl.DataFrame, explanations: pl.DataFrame, family: str = stats.PRIMARY) -> str:
    """Each comparison of ``family`` that has a CPU-profile sentence, as a bullet with its sentences under
    it: findings first, largest change first; "" where none has one."""
    lines = []
    for r in ordered_findings(comparisons, family).iter_rows(named=True):
        if notes := profile_notes(r, explanations):
            lines.append(f"- {finding_sentence(r)}")
            lines += [f"  - CPU profile: {escape.page(n)}" for n in notes]
    return "\n".join(lines)


def findings_markdown(
    comparisons: pl.DataFrame,
    families: pl.DataFrame,
    family: str = stats.PRIMARY,
    limit: int | None = None,
    explanations: pl.DataFrame | None = None,
) -> str:
    """The findings of one family as a bullet list, largest change first; within-noise and untested
    comparisons summed up in a closing sentence each. With ``explanations`` (report.profiles.explanations) a
    finding's CPU-profile sentences follow it."""
    rows = ordered_findings(comparisons, family)
    if rows.is_empty():
        return ""
    size = (
        dict(zip(families["family"], families["comparisons"], strict=True)) if "comparisons" in families.columns else {}
    )
    m = int(size.get(family, len(rows)))
    listed = rows.filter(pl.col("kind").is_in([FINDING, NEGLIGIBLE, INCONCLUSIVE]))
    shown = listed.head(limit) if limit else listed
    # a CPU limit on every line is said once, in the caveats, instead of on each
    every_bound = "cpu_bound" in rows.columns and bool(rows["cpu_bound"].fill_null(False).all())
    lines = []
    for r in shown.iter_rows(named=True):
        line = f"- {finding_sentence(r, m, cpu_note=not every_bound)}"
        if r["kind"] == FINDING:
            line += why_html(r, explanations)
        lines.append(line)
    if len(shown) < len(listed):
        lines.append(f"- ... and {len(listed) - len(shown)} more in the results below.")
    noise = rows.filter(kind=NOISE)
    if len(noise):
        lines.append(
            f"- Not significant in {len(noise)} of {len(rows)} (no difference shown, none ruled out: the "
            "headline table gives each interval): " + "; ".join(_what(r) for r in noise.iter_rows(named=True)) + "."
        )
    untested = rows.filter(kind=UNTESTED)
    if len(untested):
        lines.append(
            f"- Not tested ({len(untested)} of {len(rows)}, fewer than {stats.MIN_N} successful runs "
            "or no finite value): " + "; ".join(_what(r) for r in untested.iter_rows(named=True)) + "."
        )
    return "\n".join(lines)


def caveats_markdown(comparisons: pl.DataFrame, profile_contrasts: pl.DataFrame | None = None) -> str:
    """The campaign-wide caveats the comparisons carry: sides at a CPU limit, changes below the
    instrument's resolution, arms on different machines, comparisons whose n cannot reach significance;
    with the analysis' ``profile_contrasts``, the profiles that disagree with the measured change."""
    out, m = [], len(comparisons)
    if m == 0:
        return ""
    if "cpu_bound" in comparisons.columns and (k := int(comparisons["cpu_bound"].fill_null(False).sum())):
        named = comparisons.filter(pl.col("cpu_bound"))["cpu_bound_side"].drop_nulls()
        sides = sorted({escape.page(s) for cell in named for s in cell.split(", ") if s})
        out.append(
            f"**CPU limit:** in {k} of {m} comparisons a side"
            + (f" ({_join(sides)})" if sides else "")
            + " kept its CPUs busy: "
            "there a rate or a latency measures that CPU as much as the network path; "
            "compare the CPU per work of that side."
        )
    below = comparisons["below_resolution"].fill_null(False) if "below_resolution" in comparisons.columns else None
    if below is not None and (k := int(below.sum())):
        out.append(
            f"**Below the instrument's resolution:** {k} of {m} comparisons are latency changes finer "
            "than one step of the tool's histogram: they are given in steps (± 1 step) instead of exact "
            "digits."
        )
    if "machines_differ" in comparisons.columns and (k := int(comparisons["machines_differ"].is_not_null().sum())):
        first = escape.page(str(comparisons["machines_differ"].drop_nulls()[0]))
        out.append(
            f"**Different machines:** in {k} of {m} comparisons the two configurations ran on clusters "
            f"whose machines differ (e.g. {first}): there the change is the machines' as much as the "
            "datapaths'."
        )
    if k := int(comparisons["n_attainable"].is_not_null().sum()):
        need = int(comparisons["n_attainable"].max())  # pyright: ignore[reportArgumentType] (polars types Series.min/max as any literal or None)
        out.append(
            f"**Too few runs:** {k} of {m} comparisons cannot reach significance at their n whatever "
            f"the data; {need} runs per configuration could."
        )
    checked = profile_contrasts.filter(pl.col("agrees").is_not_null()) if profile_contrasts is not None else None
    if checked is not None and (k := int((~checked["agrees"]).sum())):
        out.append(
            f"**Profiles at odds with the measurement:** in {k} of {len(checked)} profiled comparisons at the "
            "CPU limit, the change in CPU per unit of work the profiles measure and the one the measured "
            "rate implies do not overlap: those profiles explain nothing."
        )
    return "\n\n".join(out)


def next_campaign(name: str) -> str:
    """A fresh campaign name after ``name``: its trailing number plus one (lab-default-004 ->
    lab-default-005), else ``name-2``. A new name is what makes `dvc repro` measure again."""
    m = re.search(r"(\d+)$", name)
    if not m:
        return f"{name}-2"
    return name[: m.start()] + str(int(m.group(1)) + 1).zfill(len(m.group(1)))


def rerun_box(campaign: str | list[str], commands: list[tuple[str, str]] | None = None) -> str:
    """A short boxed "how to rerun this": the campaign and the commands, each with what it redoes (by
    default: this report rebuilt from the recorded campaign, and a new measurement under a new campaign
    name, since the same name measures nothing). HTML: the report shows it as a box."""
    names = [campaign] if isinstance(campaign, str) else list(campaign)
    named = _join(names)
    commands = commands or [
        (
            "dvc repro -f -s parse analyse report",
            f"this report again from the records of {named} (experiment.campaign: {named} in params.yaml); "
            "measures nothing",
        ),
        (
            "bash scripts/reproduce.sh",
            f"measure again: first give experiment.campaign a new name in params.yaml (e.g. "
            f"{next_campaign(names[-1])}); under {named} it finds every run recorded and measures nothing",
        ),
    ]
    # what each does on its own line above it: a long comment beside a command wraps into the next one
    lines = "\n".join(f"# {escape.page(why)}\n{escape.page(c)}" for c, why in commands)
    return (
        '<aside class="rerun" aria-label="How to rerun this" style="border:1px solid #c8ccd1;'
        'border-left:4px solid #0072B2;background:#f6f8fa;padding:.6em 1em;margin:1em 0;max-width:960px">'
        f"<strong>How to rerun this</strong>: campaign <code>{escape.page(named)}</code>; every number "
        "and sentence above is computed from its tables, none is typed in by hand."
        f'<pre style="margin:.5em 0 0 0;white-space:pre-wrap">{lines}</pre></aside>'
    )


def findings_head(comparisons: pl.DataFrame, settings: Analysis = DEFAULT_ANALYSIS) -> str:
    """What the list of primary findings holds: how many comparisons are significant after the
    ``settings``' correction, and what the intervals are (interval_wording). Markdown, without its closing colon."""
    correction = settings.correction
    rows = ordered_findings(comparisons)
    n_sig = int(rows["kind"].eq(FINDING).sum())
    corr = stats.CORRECTIONS.get(correction, correction)
    if not n_sig:
        return (
            f"**Findings**: none of the {len(rows)} comparisons of each test's headline metric is significant "
            f"after {corr} correction"
        )
    return (
        f"**Findings**: the headline metric of each test, {n_sig} of {len(rows)} comparisons significant "
        f"after {corr} correction, largest change first (change in % of the baseline median "
        f"[{interval_wording(correction, settings.alpha)}])"
    )


def summary_markdown(
    runs: pl.DataFrame,
    comparisons: pl.DataFrame,
    families: pl.DataFrame,
    settings: Analysis = DEFAULT_ANALYSIS,
    limit: int | None = 12,
    explanations: pl.DataFrame | None = None,
    caveats: bool = True,
    campaign: bool = True,
) -> str:
    """The whole opening section: the campaign (``campaign``; the report's first screen says it in its
    context strip instead), then the primary findings (or why there are none), each with its CPU-profile
    sentences where ``explanations`` has them, then (``caveats``) the campaign-wide caveats. The findings'
    intervals are named by interval_wording, the same in every campaign; against the ``settings``' baseline."""
    baseline = settings.baseline
    parts = [campaign_text(runs, comparisons, baseline)] if campaign else []
    if why := degenerate_text(runs, comparisons, baseline):
        parts.append(why)
    primary = findings_markdown(comparisons, families, stats.PRIMARY, limit, explanations)
    if primary:
        parts.append(f"{findings_head(comparisons, settings)}:\n\n{primary}")
    secondary = comparisons.filter(pl.col("family") != stats.PRIMARY)
    if len(secondary):
        k = int(ordered_findings(secondary, None)["kind"].eq(FINDING).sum())
        parts.append(
            f"The secondary metrics (latency, CPU per work) show {k} significant change(s) of "
            f"{len(secondary)}, FDR-corrected: see the headline table."
        )
    if caveats and (cav := caveats_markdown(comparisons)):
        parts.append(cav)
    return "\n\n".join(parts)


def precision_text(precision: pl.DataFrame, prose: Prose = MARKDOWN) -> str:
    """For a campaign run until precise (analyse.Result.precision): the method, the target, the blocks each
    environment stopped after, and per primary comparison whether its interval met the target; '' otherwise."""
    if precision.is_empty():
        return ""
    r0 = precision.row(0, named=True)
    looks = f" of {r0['looks']}" if r0["looks"] is not None else ""
    stops = precision.group_by("environment", maintain_order=True).agg(pl.col("blocks", "look").first())
    name = prose.name
    where = _join([f"{name(e)} after {b} blocks (look {k}{looks})" for e, b, k in stops.iter_rows()])
    met = precision.filter(pl.col("met"))
    missed = precision.filter(~pl.col("met")).sort("half_width_pct", descending=True, nulls_last=False)

    def label(r: dict) -> str:
        return name(f"{r['test']} {r['scenario']} vs {r['baseline']}")

    per_target = precision.group_by("target_pct", maintain_order=True).agg(pl.col("metric").unique(maintain_order=True))
    if len(per_target) == 1:
        target = f"+/- {r0['target_pct']:g} % for every primary comparison"
    else:
        target = "+/- " + ", ".join(f"{t:g} % ({', '.join(map(name, ms))})" for t, ms in per_target.iter_rows())
    lines = [
        f"Run until precise by {sequential.METHOD}: target {target}; stopped {where}; intervals and tests at alpha {r0['alpha_look']:.3g}, the share of that "
        f"look. Target met by {len(met)} of {len(precision)} primary comparisons"
        + (
            "; not met: "
            + ", ".join(
                f"{label(r)} +/- {r['half_width_pct']:.2f} % (target {r['target_pct']:g} %)"
                if r["half_width_pct"] is not None
                else f"{label(r)} (no interval)"
                for r in missed.iter_rows(named=True)
            )
            if len(missed)
            else ""
        )
        + "."
    ]
    return "\n".join(lines)


def paired_text(comparisons: pl.DataFrame) -> str:
    """With analysis.paired: how many comparisons were paired by block and what that means; '' if none."""
    if comparisons.is_empty():
        return ""
    n = int((comparisons["test_method"] == paired.TEST).sum())
    if not n:
        return ""
    rest = len(comparisons) - n
    return (
        f"Paired by block: {n} of {len(comparisons)} comparisons are made within the blocks (rounds) where both "
        "configurations ran, by the sign test of the per-block ratios; their change is the median of those ratios "
        "with its distribution-free interval, so drift common to a block cancels"
        + (
            f". The other {rest} (fewer than {stats.MIN_N} complete blocks, or values <= 0) are unpaired, by "
            "Mann-Whitney."
            if rest
            else "."
        )
    )


def terminal_text(
    runs: pl.DataFrame,
    comparisons: pl.DataFrame,
    baseline: str,
    report: str,
    top: int = 5,
    precision: pl.DataFrame | None = None,
) -> str:
    """What the main command prints last: the campaign in one line, the largest primary findings,
    how many comparisons were tested, and where the report is (and, run until precise, whether each
    primary comparison met the target). Plain text (no Markdown)."""
    findings = ordered_findings(comparisons)
    significant = findings.filter(pl.col("kind") == FINDING)
    degenerate = degenerate_text(runs, comparisons, baseline, prose=PLAIN)
    lines = [
        campaign_text(runs, comparisons, baseline, prose=PLAIN),
        *([degenerate] if degenerate else []),
        f"{len(significant)} of {len(findings)} primary comparisons are significant"
        + (":" if len(significant) else "."),
    ]
    lines += [
        f"  - {finding_sentence(r, cpu_note=False, prose=PLAIN)}" for r in significant.head(top).iter_rows(named=True)
    ]
    if len(significant) > top:
        lines.append(f"  ... and {len(significant) - top} more in the report")
    if precision is not None and not precision.is_empty():
        lines.append(precision_text(precision, prose=PLAIN))
    lines.append(f"Report: {report}")
    return "\n".join(lines)


# -- the first screen: a title, the takeaways, the context, then the findings -------------------------


def title_text(runs: pl.DataFrame, baseline: str, prose: Prose = PLAIN) -> str:
    """The report's title: what was compared with what, where."""
    name = prose.name
    scenarios = [name(s) for s in stats_order(runs["scenario"].unique().to_list(), baseline)]
    others = [s for s in scenarios if s != name(baseline)]
    envs = _join([name(e) for e in sorted(runs["environment"].unique().to_list())])
    if not others:
        return f"Network benchmark of {_join(scenarios)} ({envs})"
    return f"Network datapaths: {_join(others)} against {name(baseline)} ({envs})"


def _said_way(direction: str | None) -> str:
    """The way a verdict calls its change, as the takeaways say it: "better", "worse" or ""."""
    return "" if direction in (None, Direction.NONE) else str(direction)


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{change(lo)} %" if lo == hi else f"{change(lo)} % to {change(hi)} %"


def takeaways(comparisons: pl.DataFrame, baseline: str, prose: Prose = PLAIN) -> list[str]:
    """One or two plain sentences from the primary findings: the largest change, then per scenario in
    how many tests it did better or worse than the baseline; [] where nothing was compared."""
    name = prose.name
    rows = headline_rows(comparisons, baseline)
    if rows.is_empty():
        return []
    found = rows.filter(kind=FINDING)
    if found.is_empty():
        return [
            f"No difference from {name(baseline)} is significant in any test's headline metric "
            f"({len(rows)} comparisons)."
        ]
    r = found.row(0, named=True)
    lead = (
        f"The largest difference: {name(r['scenario'])}'s {name(r['test'])} "
        f"{name(metric_label(r['metric'], r['side']))} is {size(r['delta_pct'])} % "
        f"{'higher' if r['delta_pct'] > 0 else 'lower'} than {name(baseline)}'s ({_said_way(r['verdict_direction'])})."
    )
    parts = []
    for (scenario,), g in rows.group_by("scenario", maintain_order=True):
        f = g.filter(kind=FINDING)
        said = [
            f"{way} in {len(h)} of {len(g)} tests ({_span(h['delta_pct'].to_list())})"
            for way in (Direction.WORSE, Direction.BETTER)
            if len(h := f.filter(pl.col("verdict_direction") == str(way)))
        ]
        parts.append(
            (
                len(f),
                scenario,
                f"{name(scenario)} " + (" and ".join(said) or f"not significantly different in {len(g)} tests"),
            )
        )
    ranked = [text for _, _, text in sorted(parts, key=lambda p: (-p[0], p[1]))]
    return [lead, f"Against {name(baseline)}, each test's headline metric: " + "; ".join(ranked) + "."]


def _dates(runs: pl.DataFrame) -> str:
    first, last = runs["started_at"].min(), runs["ended_at"].max()
    if first is None or last is None:
        return "-"
    a, b = first.strftime("%Y-%m-%d"), last.strftime("%Y-%m-%d")  # pyright: ignore[reportAttributeAccessIssue] (polars types Series.min loosely)
    return a if a == b else f"{a} to {b}"


def context(runs: pl.DataFrame, commit: str | None = None) -> list[tuple[str, str]]:
    """(label, value) of what the reader needs to place the numbers, from the runs as recorded: when,
    where (environment, machine and CPU model, kernel, CPUs per side), with which tools, how long each
    run, how many runs; and ``commit``, the code the report was built from (records do not hold one)."""

    def distinct(col: str) -> list[str]:
        return sorted({str(v) for v in runs[col].drop_nulls().to_list() if str(v) != ""})

    tools = sorted({f"{t} {v}".strip() for t, v in runs.select("tool", pl.col("tool_version").fill_null("")).rows()})
    per_config = runs.group_by("environment", "scenario", "test").agg((pl.col("outcome") == "ok").sum())["outcome"]
    lo, hi = (int(per_config.min()), int(per_config.max())) if len(per_config) else (0, 0)  # pyright: ignore[reportArgumentType] (polars types Series.min loosely)
    ok = int((runs["outcome"] == "ok").sum())
    durations = runs.filter(pl.col("outcome") == "ok")["duration_s"].drop_nulls()
    cpus = sorted({f"{c} client / {s} server" for c, s in runs.select("client_cpus", "server_cpus").rows()})
    placement = distinct("cpu_placement")
    shared = bool(runs["nodes_share_kernel"].fill_null(False).all()) if len(runs) else False
    items = [
        ("Measured", _dates(runs)),
        ("Campaign", _join(distinct("campaign"))),
        ("Environment", _join(distinct("environment")) + (" (both nodes on one kernel)" if shared else "")),
        (
            "Machine",
            _join(distinct("machine")) if "machine" in runs.columns and distinct("machine") else "not recorded",
        ),
        ("Kernel", _join(distinct("kernel")) if distinct("kernel") else "-"),
        ("CPUs per side", _join(cpus) + (f", placement {_join(placement)}" if placement else "")),
        ("Tools", _join(tools) if tools else "-"),
        ("Run length", f"{durations.median():.3g} s per run (median)" if len(durations) else "-"),
        (
            "Runs",
            f"n = {lo if lo == hi else f'{lo}-{hi}'} per configuration, {ok} of {len(runs)} ok, "
            f"{runs['block'].n_unique()} blocks",
        ),
    ]
    if commit:
        items.append(("Report built from", commit))
    return items


def first_screen_html(
    runs: pl.DataFrame, comparisons: pl.DataFrame, baseline: str, commit: str | None = None, title: str = ""
) -> str:
    """The opening of the report: the title (``title``, the user's report.title, with what was compared
    beneath it; else what was compared), the takeaways and the context strip, as HTML."""
    compared = title_text(runs, baseline)
    subtitle = (
        f'<p class="report-subtitle" style="font-size:17px;color:#444;margin:0 0 .6em 0">{escape.page(compared)}</p>'
        if title
        else ""
    )
    said = "".join(f"<p>{escape.page(t)}</p>" for t in takeaways(comparisons, baseline))
    # divs and spans, not a <dl>: the notebook's page styles dt and dd for prose
    strip = "".join(
        '<div class="context-item" style="min-width:9em;max-width:26em">'
        f'<span class="context-label" style="display:block;font-size:12px;color:#555;text-transform:uppercase;'
        f'letter-spacing:.04em">{escape.page(k)}</span>'
        f'<span class="context-value" style="display:block;font-size:14px">{escape.page(v)}</span></div>'
        for k, v in context(runs, commit)
    )
    return (
        '<header class="first-screen" style="max-width:1100px">'
        f'<h1 class="report-title" style="margin:.2em 0 .4em 0">{escape.page(title or compared)}</h1>{subtitle}'
        f'<div class="takeaways" style="font-size:17px;line-height:1.45">{said}</div>'
        '<div class="context" role="group" aria-label="Context" style="display:flex;flex-wrap:wrap;gap:.5em 1.8em;'
        f'margin:.8em 0;padding:.6em .9em;background:#f6f8fa;border:1px solid #d8dde3">{strip}</div></header>'
    )


def levels_text(families: pl.DataFrame, settings: Analysis) -> str:
    """The method's one statement of the intervals: what they are (interval_wording, the same in every
    campaign) and, per family, the level they came out at in this campaign."""
    per = "; ".join(
        f"{r['family']} ({stats.CORRECTIONS.get(r['correction'], r['correction'])}, {r['significant']} of "
        f"{r['comparisons']} significant): {level(r['interval_level_pct'] / 100)}"
        for r in families.iter_rows(named=True)
        if r["interval_level_pct"] is not None and not math.isnan(r["interval_level_pct"])
    )
    return (
        f"Every change's interval in this report is the {interval_wording(settings.correction, settings.alpha)} "
        f"(secondary families: the {interval_wording('fdr_bh', settings.alpha)}). Its level is 1 minus the threshold the "
        "correction stopped at, so it depends on how many comparisons were significant"
        + (f"; in this campaign: {per}." if per else ".")
    )
