"""The CPU profiles in words: how each environment's profiles were taken, and what each scenario's CPU
per unit adds over the baseline's (the tables: benchlib.analysis.profiles)."""

from __future__ import annotations

import polars as pl

from ..analysis import stats
from ..analysis.profiles import CORES, KEYS
from ..base import escape
from .format import reading, unit
from .summary import FINDING, ordered_findings

NO_SYMBOLS = "no kernel symbols: kernel.kptr_restrict hid them"
NO_PROFILES = "No CPU profiles: experiment.profile_runs is 0 (or the campaign predates profiles)"
# categories that tell datapaths apart; syscall entry and scheduler frames are in every path and would
# top every ranking of frames
DISTINCTIVE = ("devices", "softirq/backlog", "netfilter/conntrack", "eBPF", "proxy", "TCP/IP")
# Frames that hand work on rather than do it: softirq dispatch, and the transmit chain's entries, which run the
# receiver's softirq inline when they re-enable bottom halves. Their inclusive CPU is their callees', so they
# would top every ranking; the sentences name the frames that do the work.
DISPATCH = (
    r"^(do_softirq|__do_softirq|handle_softirqs|__local_bh_enable|local_bh_enable|net_rx_action|"
    r"__napi_poll|irq_exit|__irq_exit|run_ksoftirqd|__dev_queue_xmit|dev_queue_xmit|"
    r"dev_hard_start_xmit|tcp_sendmsg|tcp_write_xmit|__tcp_push_pending_frames|tcp_push|"
    r"__tcp_transmit_skb|tcp_transmit_skb|__ip_queue_xmit|ip_queue_xmit|ip_output|ip_finish_output|"
    r"__ip_finish_output|ip_local_out|__ip_local_out|ip6_|inet6_|inet_sendmsg|inet_recvmsg|"
    r"tcp_recvmsg)"
)
EXPLANATIONS_SCHEMA = {
    "environment": pl.String,
    "test": pl.String,
    "scenario": pl.String,
    "baseline": pl.String,
    "side": pl.String,
    "sentence": pl.String,
    # the why in plain words, for the findings (the sentence, with its frames, goes behind a disclosure)
    "clause": pl.String,
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


def _num(v: float, cpu_unit: str) -> str:
    """A CPU-per-unit figure to sensible digits, signed."""
    if cpu_unit == CORES:
        return f"{v:+.2g}"
    a = abs(v)
    return f"{v:+.0f}" if a >= 10 else f"{v:+.1f}" if a >= 0.95 else f"{v:+.2f}"


def _val(v: float, cpu_unit: str) -> str:
    if cpu_unit == CORES:
        return f"{v:.2g}"
    return f"{v:.1f}" if abs(v) >= 0.95 else f"{v:.2f}"


def _short(cpu_unit: str, work_unit: str) -> str:
    """The unit after a figure: cores with the work they are per, µs alone (the sentence says per what)."""
    return f"{CORES}/({work_unit})" if cpu_unit == CORES else cpu_unit


def _side_text(side: str) -> str:
    return "both sides" if side == "total" else f"{side} side"


def explanations(
    cats: pl.DataFrame,
    diffs: pl.DataFrame,
    no_symbols: pl.DataFrame,
    disturbed: pl.DataFrame,
    baseline: str,
    top: int = 3,
) -> pl.DataFrame:
    """Per scenario, test and side a sentence (plain text) on what the scenario's CPU per unit adds over the
    baseline's: which categories carry the difference, which frames gained or lost most (ranked among the
    DISTINCTIVE categories), on how many profiled runs and samples; from the analysis' profile_categories,
    profile_differences, profile_no_symbols and profile_disturbed. A configuration whose profiles have no
    kernel symbols, or that other processes disturbed, gets a sentence saying so instead, and no
    configuration is explained against a disturbed baseline."""
    out = [
        {
            **{k: r[k] for k in ("environment", "test", "scenario")},
            "baseline": baseline,
            "side": "",
            "sentence": f"{r['scenario']} ({r['test']}): {NO_SYMBOLS}; its profile is not shown.",
            "clause": "",
        }
        for r in no_symbols.iter_rows(named=True)
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
        }
        for r in disturbed.iter_rows(named=True)
    ]
    if not cats.is_empty():
        tot = cats.group_by(*KEYS, "side").agg(
            cpu=pl.col("cpu_per_unit").sum(),
            samples=pl.col("samples").sum(),
            n_runs=pl.col("n_runs").first(),
            cpu_unit=pl.col("cpu_unit").first(),
            work_unit=pl.col("work_unit").first(),
        )
        base = tot.filter(scenario=baseline).drop("scenario")
        pairs = (
            tot.filter(pl.col("scenario") != baseline)
            .join(base, on=["environment", "test", "side"], suffix="_base")
            # no sentence from a profile that other processes disturbed, nor against one
            .join(disturbed.select(*KEYS), on=KEYS, how="anti")
            .join(
                disturbed.filter(scenario=baseline).select("environment", "test"),
                on=["environment", "test"],
                how="anti",
            )
        )
        for p in pairs.sort("environment", "test", "scenario", "side").iter_rows(named=True):
            out.append(
                {
                    **{k: p[k] for k in ("environment", "test", "scenario", "side")},
                    "baseline": baseline,
                    "sentence": _sentence(p, baseline, cats, diffs, top),
                    "clause": _clause(p, baseline, cats),
                }
            )
    return pl.DataFrame(out, schema=EXPLANATIONS_SCHEMA) if out else pl.DataFrame(schema=EXPLANATIONS_SCHEMA)


def _category_deltas(p: dict, baseline: str, cats: pl.DataFrame) -> pl.DataFrame:
    """Per category, the scenario's CPU per unit minus the baseline's, largest first."""
    where = dict(environment=p["environment"], test=p["test"], side=p["side"])
    return (
        cats.filter(scenario=p["scenario"], **where)
        .select("category", "cpu_per_unit")
        .join(
            cats.filter(scenario=baseline, **where).select("category", base="cpu_per_unit"),
            on="category",
            how="full",
            coalesce=True,
        )
        .with_columns(delta=pl.col("cpu_per_unit").fill_null(0.0) - pl.col("base").fill_null(0.0))
        .sort(pl.col("delta").abs(), descending=True)
    )


def _clause(p: dict, baseline: str, cats: pl.DataFrame) -> str:
    """The why of a difference in one plain clause: where the CPU per unit of work went, in the
    one or two categories that carry most of it, named in plain words; "" when the CPU is the same."""
    delta = p["cpu"] - p["cpu_base"]
    c = _category_deltas(p, baseline, cats)
    if delta == 0 or c.is_empty():
        return ""
    same_way = c.filter((pl.col("delta") > 0) if delta > 0 else (pl.col("delta") < 0))
    spread = float(same_way["delta"].abs().sum()) or 1.0
    named = [
        PLAIN.get(str(r["category"]), str(r["category"]))
        for r in same_way.head(2).iter_rows(named=True)
        if abs(r["delta"]) >= 0.25 * spread
    ]
    if not named:
        return ""
    where = " and ".join(named)
    return (
        f"{p['scenario']} spends more CPU per unit of work than {baseline}, mostly in {where}"
        if delta > 0
        else f"{p['scenario']} spends less CPU per unit of work than {baseline}, mostly in {where}"
    )


def _sentence(p: dict, baseline: str, cats: pl.DataFrame, diffs: pl.DataFrame, top: int) -> str:
    cpu_unit, short = p["cpu_unit"], _short(p["cpu_unit"], p["work_unit"])
    where = dict(environment=p["environment"], test=p["test"], side=p["side"])
    c = _category_deltas(p, baseline, cats)
    delta = p["cpu"] - p["cpu_base"]
    spread = float(c["delta"].abs().sum()) or 1.0
    named = [
        f"{r['category']} {_num(r['delta'], cpu_unit)} {short}"
        for r in c.head(top).iter_rows(named=True)
        if abs(r["delta"]) >= 0.1 * spread
    ]
    # the frame that gained or lost most in each distinctive category, dispatchers left out
    f = (
        diffs.filter(scenario=p["scenario"], level="frame", **where)
        .filter(pl.col("category").is_in(DISTINCTIVE), ~pl.col("name").str.contains(DISPATCH))
        .sort(pl.col("delta").abs(), descending=True)
        .unique("category", keep="first", maintain_order=True)
        .head(top)
    )
    frames_text = ", ".join(
        f"{'+' if r['delta'] >= 0 else '-'}{r['name']} ({_num(r['delta'], cpu_unit)} {short})"
        for r in f.iter_rows(named=True)
        if r["delta"] != 0
    )
    pct = f" ({100 * delta / p['cpu_base']:+.0f} %)" if p["cpu_base"] else ""
    text = (
        f"{p['scenario']} vs {baseline} ({p['test']}, per {p['work_unit']}, {_side_text(p['side'])}): "
        f"{_num(delta, cpu_unit)} {short} CPU{pct}, {_val(p['cpu'], cpu_unit)} vs {_val(p['cpu_base'], cpu_unit)} {short}"
    )
    if named:
        text += ": " + ", ".join(named)
    if frames_text:
        text += f"; frames {frames_text}"
    runs = f"{p['n_runs']} vs {p['n_runs_base']} profiled run{'s' if max(p['n_runs'], p['n_runs_base']) > 1 else ''}"
    return text + f" ({runs}, {p['samples']:,} vs {p['samples_base']:,} busy samples)."


# findings whose why the report draws, largest change first: two tall figures each
WHY_FIGURES = 4


def why_figure(test: str, scenario: str, environment: str | None = None, kind: str = "changed") -> str:
    """The file name (no extension) of a finding's why figure, ``kind`` "changed" or "differential";
    named with its ``environment`` where the profiles span several."""
    where = f"{environment}_{test}_{scenario}" if environment else f"{test}_{scenario}"
    return f"cpu_profile_{where}_{kind}"


def finding_pairs(
    comparisons: pl.DataFrame, diffs: pl.DataFrame, disturbed: pl.DataFrame, top: int = WHY_FIGURES
) -> pl.DataFrame:
    """The ``top`` headline findings (environment, test, scenario, baseline; largest change first) whose
    scenario and baseline both have profiles to compare, neither disturbed by other processes: those
    the report draws the why of."""
    keys = ["environment", "test", "scenario", "baseline"]
    found = ordered_findings(comparisons, stats.PRIMARY).filter(kind=FINDING).select(keys)
    profiled = diffs.filter(level="self").select(keys).unique()
    return (
        found.join(profiled, on=keys, how="semi", maintain_order="left")
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
    "and run time (bpftool prog show); per unit of work, pooled over the profiled runs."
)


def bpf_rows(bpf: pl.DataFrame, disturbed: pl.DataFrame, test_labels: dict[str, str]) -> pl.DataFrame:
    """The kernel's own accounting of the BPF programs of each profiled configuration that ran some (the
    analysis' profile_bpf), one row per program as the report's table shows it: tests by their labels,
    the CPU per unit with its unit. Empty where none did. A disturbed configuration's counters are left
    out as its profile is: its programs ran for other processes too."""
    b = bpf.join(disturbed.select(*KEYS), on=KEYS, how="anti")
    cpu = [f"{reading(v)} {unit(u)}" for v, u in b.select("cpu_per_unit", "unit").iter_rows()]
    return b.select(
        "scenario",
        pl.col("test").replace(test_labels),
        program="name",
        type="type",
        attached_at=pl.col("attach").fill_null("-"),
        runs_per_unit="runs_per_unit",
        ns_per_run="ns_per_run",
        cpu_per_unit=pl.Series(cpu, dtype=pl.String),
    )
