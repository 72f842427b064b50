"""The CPU profiles in words: how each environment's profiles were taken, and what each scenario's CPU
per unit adds over the baseline's (the tables: benchlib.analysis.profiles)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import polars as pl

from ..analysis import stats
from ..analysis.profile_contrasts import ATTRIBUTION_LEVEL
from ..analysis.profiles import KEYS
from ..analysis.verdicts import Kind
from ..base import escape
from ..profiling.stacks import frame_work
from .format import (
    cpu_change,
    cpu_change_interval,
    cpu_short_unit,
    cpu_value,
    level,
    reading,
    unit,
    whole_change_interval,
)
from .summary import FINDING, ordered_findings

NO_SYMBOLS = "no kernel symbols: kernel.kptr_restrict hid them"
NO_PROFILES = "No CPU profiles: experiment.profile_runs is 0 (or the campaign predates profiles)"
# what a profile sentence says instead of an explanation (the rules of the findings: no interval, no claim)
TOO_FEW = "too few profiled runs for an interval: no claim"
NO_CHANGE = "no change in CPU per unit found"
DISAGREE = "the profiles disagree with the measured change"
EXPLANATIONS_SCHEMA = {
    "environment": pl.String,
    "test": pl.String,
    "scenario": pl.String,
    "baseline": pl.String,
    "side": pl.String,
    "sentence": pl.String,
    # the why in plain words, for the findings (the sentence, with its frames, goes behind a disclosure)
    "clause": pl.String,
    "frames": pl.List(pl.String),  # the functions whose own time the sentence names
    "works": pl.List(pl.String),  # the kinds of work it names (stacks.WORK), most changed first
}
# The profile categories as a reader outside kernel work names them
PLAIN = {
    "devices": "the virtual network devices",
    "softirq/backlog": "packet processing in softirq",
    "netfilter/conntrack": "firewall rules and connection tracking",
    "eBPF": "eBPF programs",
    "proxy": "the proxy",
    "TCP/IP": "the TCP/IP stack",
    "syscall/socket": "system calls and sockets",
    "application": "the benchmark tool itself",
    "other": "other kernel work",
    "scheduler": "the scheduler",
}


def method_text(method_table: pl.DataFrame) -> str:
    """One Markdown line per environment on how the profiles were taken (what the records say escaped),
    or NO_PROFILES."""
    if method_table.is_empty():
        return NO_PROFILES + "."
    lines = []
    for r in method_table.iter_rows(named=True):
        how = (
            "each side's samples from its own CPUs"
            if r["attribution"] == "cpu"
            else "client and server shared CPUs: one profile of both"
            if r["attribution"] == "shared"
            else "each side's samples from its own host's perf, on its CPUs"
            if r["attribution"] == "host"
            else f"attribution {escape.page(r['attribution'])}"
        )
        lines.append(
            f"{escape.page(r['environment'])}: `perf record -a -g` ({escape.page(r['perf_version'] or 'perf')}, "
            f"kernel {escape.page(r['kernel'])}), {escape.page(r['event'])} at "
            f"{escape.page(r['frequency_hz'])} Hz; {r['profiled_runs']} profiled run(s)"
            + (f" ({r['failed']} failed)" if r["failed"] else "")
            + f", {r['samples']:,} samples; {how}"
            + ("" if r["kernel_symbols"] else f"; {NO_SYMBOLS}")
            + ". Profiled runs are separate from the measured runs."
        )
    return "\n\n".join(lines)


def _side_text(side: str) -> str:
    return "both sides" if side == "total" else f"{side} side"


def explanations(t: Mapping[str, pl.DataFrame], baseline: str, top: int = 3) -> pl.DataFrame:
    """Per compared pair (each scenario against the baseline, each declared contrast against its
    reference), test and side a sentence (plain text) on what the scenario's CPU per unit of work adds
    over the reference's, from the analysis' profile tables ``t`` (analyse.Result.profile_tables).

    The rules are the findings': a change in CPU per unit is stated with its interval across the
    profiled runs (profile_contrasts), and only one whose interval excludes zero names the categories
    that carry it, and the kinds of work (stacks.WORK) and their frames that gained or lost most;
    too few profiled runs for an interval, or an interval that holds zero, make no claim; and where the
    profiles disagree with the measured change at the CPU limit, the sentence says so and explains
    nothing. A configuration whose profiles have no kernel symbols, or that other processes disturbed,
    gets a sentence saying so instead, and no configuration is explained against a disturbed baseline."""
    cats, attribution, disturbed = t["profile_categories"], t["profile_attribution"], t["profile_disturbed"]
    out = [
        {
            **{k: r[k] for k in ("environment", "test", "scenario")},
            "baseline": baseline,
            "side": "",
            "sentence": f"{r['scenario']} ({r['test']}): {NO_SYMBOLS}; its profile is not shown.",
            "clause": "",
            "frames": [],
            "works": [],
        }
        for r in t["profile_no_symbols"].iter_rows(named=True)
    ] + [
        {
            **{k: r[k] for k in ("environment", "test", "scenario")},
            "baseline": baseline,
            "side": "",
            "sentence": (
                f"{r['scenario']} ({r['test']}): other processes ({r['top']} most) "
                f"took {100 * r['share']:.0f} % of its profile's busy samples; it explains nothing."
            ),
            "clause": "",
            "frames": [],
            "works": [],
        }
        for r in disturbed.iter_rows(named=True)
    ]
    if not cats.is_empty():
        samples = cats.group_by(*KEYS, "side").agg(samples=pl.col("samples").sum())
        pairs = (
            t["profile_contrasts"]
            .join(samples, on=[*KEYS, "side"])
            .join(
                samples.rename({"scenario": "baseline", "samples": "samples_base"}),
                on=["environment", "baseline", "test", "side"],
            )
            # no sentence from a profile that other processes disturbed, nor against one
            .join(disturbed.select(*KEYS), on=KEYS, how="anti")
            .join(
                disturbed.select("environment", "test", baseline="scenario"),
                on=["environment", "test", "baseline"],
                how="anti",
            )
        )
        # the baseline's pairs first, then the declared contrasts
        order = pl.col("baseline") != baseline
        for p in pairs.sort(order, "environment", "test", "scenario", "baseline", "side").iter_rows(named=True):
            works = _works(p, attribution, top) if _explains(p) else []
            out.append(
                {
                    **{k: p[k] for k in ("environment", "test", "scenario", "baseline", "side")},
                    "sentence": _sentence(p, attribution, works, top),
                    "clause": _clause(p, attribution) if _explains(p) else "",
                    "frames": [f["name"] for _, fs in works for f in fs],
                    "works": [w["name"] for w, _ in works],
                }
            )
    return pl.DataFrame(out, schema=EXPLANATIONS_SCHEMA) if out else pl.DataFrame(schema=EXPLANATIONS_SCHEMA)


def _explains(p: dict) -> bool:
    """Whether a contrast may say where the CPU went: its interval excludes zero and it does not disagree
    with the measured change."""
    return p["verdict_kind"] == Kind.FINDING and p["agrees"] is not False


def _parts(p: dict, attribution: pl.DataFrame, level: str) -> pl.DataFrame:
    """The categories (``level`` "category") or frames' own times ("self") of a contrast's side whose
    change in CPU per unit has an interval that excludes zero, largest change first."""
    return (
        attribution.filter(
            environment=p["environment"],
            test=p["test"],
            scenario=p["scenario"],
            baseline=p["baseline"],
            side=p["side"],
            level=level,
        )
        .filter((pl.col("delta_low") > 0) | (pl.col("delta_high") < 0))
        .sort(pl.col("delta").abs(), "name", descending=[True, False])
    )


def _clause(p: dict, attribution: pl.DataFrame) -> str:
    """The why of a difference in one plain clause: where the CPU per unit of work went, in the
    one or two categories that carry most of it, named in plain words; "" when none carries it."""
    more = p["change_pct"] > 0
    c = _parts(p, attribution, "category")
    same_way = c.filter((pl.col("delta") > 0) if more else (pl.col("delta") < 0))
    spread = float(same_way["delta"].abs().sum()) or 1.0
    named = [
        PLAIN.get(str(r["name"]), str(r["name"]))
        for r in same_way.head(2).iter_rows(named=True)
        if abs(r["delta"]) >= 0.25 * spread
    ]
    if not named:
        return ""
    way = "more" if more else "less"
    return f"{p['scenario']} spends {way} CPU per unit of work than {p['baseline']}, mostly in {' and '.join(named)}"


def _change(p: dict, pct: str, low: str, high: str, level_of: str | None = None) -> str:
    """A change in % with its interval (and the interval's level, column ``level_of``): "+23 % [+8, +48]
    at 95 %"; the change alone where it has no interval."""
    at = f" at {level(p[level_of])}" if level_of and math.isfinite(p[low]) else ""
    return whole_change_interval(p[pct], p[low], p[high]) + at


def _works(p: dict, attribution: pl.DataFrame, top: int) -> list[tuple[dict, list[dict]]]:
    """What the CPU per unit went to, in the ``top`` kinds of work (stacks.WORK: encapsulation, bridge
    forwarding, ...) whose own time changed most the way the contrast did, each interval excluding
    zero; each with its two frames that changed most that way. The work one path does and the other
    does not, not the frames every path passes through."""
    more = p["change_pct"] > 0
    same_way = (pl.col("delta") > 0) if more else (pl.col("delta") < 0)
    frames = _parts(p, attribution, "self").filter(same_way)
    frames = frames.with_columns(work=pl.col("name").map_elements(frame_work, return_dtype=pl.String))
    out = []
    for w in _parts(p, attribution, "work").filter(same_way).head(top).iter_rows(named=True):
        out.append((w, frames.filter(work=w["name"]).head(2).to_dicts()))
    return out


def _sentence(p: dict, attribution: pl.DataFrame, works: list[tuple[dict, list[dict]]], top: int) -> str:
    short = cpu_short_unit(p["cpu_unit"], p["work_unit"])
    delta = p["cpu_per_unit"] - p["cpu_per_unit_base"]
    head = (
        f"{p['scenario']} vs {p['baseline']} ({p['test']}, per {p['work_unit']}, {_side_text(p['side'])}): "
        f"{cpu_change(delta)} {short} CPU ({_change(p, 'change_pct', 'change_low', 'change_high', 'ci_level')}), "
        f"{cpu_value(p['cpu_per_unit'])} vs {cpu_value(p['cpu_per_unit_base'])} {short}"
    )
    runs = f"{p['n_runs']} vs {p['n_runs_base']} profiled run{'s' if max(p['n_runs'], p['n_runs_base']) > 1 else ''}"
    tail = f" ({runs}, {p['samples']:,} vs {p['samples_base']:,} busy samples)."
    if p["verdict_kind"] == Kind.INSUFFICIENT:
        return head + f"; {TOO_FEW}" + tail
    if p["agrees"] is False:
        return (
            head
            + f"; {DISAGREE}: at the CPU limit the measured rate implies "
            + f"{_change(p, 'implied_pct', 'implied_low', 'implied_high')} CPU per {p['work_unit']}; "
            + "no explanation"
            + tail
        )
    if p["verdict_kind"] != Kind.FINDING:
        return head + f"; {NO_CHANGE}" + tail

    def part(r: dict, with_unit: str) -> str:
        return f"{r['name']} {cpu_change_interval(r['delta'], r['delta_low'], r['delta_high'], with_unit)}"

    c = _parts(p, attribution, "category")
    spread = float(c["delta"].abs().sum()) or 1.0
    named = [part(r, short) for r in c.head(top).iter_rows(named=True) if abs(r["delta"]) >= 0.1 * spread]
    frames_text = ", ".join(
        part(w, short) + (f" ({', '.join(part(f, '') for f in fs)})" if fs else "") for w, fs in works
    )
    text = head
    if named:
        text += ": " + ", ".join(named)
    if frames_text:
        text += f"; own time in {frames_text}"
    if named or frames_text:
        tail = tail.replace(").", f"; parts each at {level(ATTRIBUTION_LEVEL)}).")
    return text + tail


# findings whose why the report draws, largest change first: two tall figures each
WHY_FIGURES = 4


def why_figure(test: str, scenario: str, environment: str | None = None, kind: str = "changed") -> str:
    """The file name (no extension) of a finding's why figure, ``kind`` "changed" or "differential";
    named with its ``environment`` where the profiles span several."""
    where = f"{environment}_{test}_{scenario}" if environment else f"{test}_{scenario}"
    return f"cpu_profile_{where}_{kind}"


def finding_pairs(
    comparisons: pl.DataFrame, t: Mapping[str, pl.DataFrame], baseline: str, top: int = WHY_FIGURES
) -> pl.DataFrame:
    """The ``top`` headline findings against ``baseline`` (environment, test, scenario, baseline; largest
    change first) whose profiles explain them (the analysis' profile tables ``t``): a change in CPU per
    unit whose interval excludes zero on some side, not at odds with the measured change, neither
    configuration disturbed by other processes: those the report draws the why of. The why figures are
    differential flamegraphs against the baseline, so a contrast's finding has its sentence only."""
    keys = ["environment", "test", "scenario", "baseline"]
    disturbed = t["profile_disturbed"]
    found = ordered_findings(comparisons, stats.PRIMARY).filter(kind=FINDING, baseline=baseline).select(keys)
    explained = t["profile_contrasts"].filter(pl.col("verdict_kind") == Kind.FINDING, pl.col("agrees").fill_null(True))
    return (
        found.join(explained.select(keys).unique(), on=keys, how="semi", maintain_order="left")
        .join(disturbed.select(*KEYS), on=KEYS, how="anti", maintain_order="left")
        .join(
            disturbed.select("environment", "test", baseline="scenario"),
            on=["environment", "test", "baseline"],
            how="anti",
            maintain_order="left",
        )
        .unique(maintain_order=True)
        .head(top)
    )


BPF_NOTE = (
    "With kernel.bpf_stats_enabled on during each profiled run, the kernel counted every BPF program's runs "
    "and run time (bpftool prog show); per unit of work, pooled over the profiled runs, with the 95 % t interval "
    "of the mean across them in brackets (none below 2 runs)."
)


def bpf_rows(bpf: pl.DataFrame, disturbed: pl.DataFrame, test_labels: dict[str, str]) -> pl.DataFrame:
    """The kernel's own accounting of the BPF programs of each profiled configuration that ran some (the
    analysis' profile_bpf), one row per program as the report's table shows it: tests by their labels,
    the CPU per unit with its unit. Empty where none did. A disturbed configuration's counters are left
    out as its profile is: its programs ran for other processes too."""
    b = bpf.join(disturbed.select(*KEYS), on=KEYS, how="anti")
    cpu = [
        f"{reading(v)} {unit(u)}{_bounds(lo, hi)}"
        for v, u, lo, hi in b.select("cpu_per_unit", "unit", "cpu_per_unit_low", "cpu_per_unit_high").iter_rows()
    ]
    ns = [
        f"{reading(v)}{_bounds(lo, hi)}"
        for v, lo, hi in b.select("ns_per_run", "ns_per_run_low", "ns_per_run_high").iter_rows()
    ]
    return b.select(
        "scenario",
        pl.col("test").replace(test_labels),
        program="name",
        type="type",
        attached_at=pl.col("attach").fill_null("-"),
        runs_per_unit="runs_per_unit",
        ns_per_run=pl.Series(ns, dtype=pl.String),
        cpu_per_unit=pl.Series(cpu, dtype=pl.String),
    )


def _bounds(low: float | None, high: float | None) -> str:
    """An interval as " [low, high]", "" where there is none."""
    if low is None or high is None or not math.isfinite(low):
        return ""
    return f" [{reading(low)}, {reading(high)}]"
