"""CPU profiles per unit of work: where the busy CPU of a path goes, and what a scenario adds over the baseline.

Inputs are the two tables `benchlib parse` writes from the profiled runs (PROFILES_SCHEMA: one row per
distinct stack of a run and side; PROFILE_RUNS_SCHEMA: one row per profiled run, with the run's headline
metric). Profiled runs are separate from the measured runs: perf's overhead never touches a measured
number, and a profile says where CPU goes, not how fast the path is.

CPU is kernel-inclusive and busy (the idle category left out), per unit of the run's work: µs of CPU per
transaction, connection, request or query for a rate, millicores per Gbit/s (CPU-ms per Gbit) for
throughput. Several profiled runs of one configuration are pooled: samples summed, work summed.

Samples of processes that are not the measurement's (stacks.OTHER, "other processes") are no part of
the path's work: they are left out of the figures per unit of work, and a configuration where they
hold more than FOREIGN_SHARE_MAX of the busy samples gets a sentence saying so instead of an
explanation, as does every scenario compared with such a baseline.
"""

from __future__ import annotations

import math
from array import array

import numpy as np
import polars as pl
from scipy import stats

from benchlib.base.errors import SchemaError
from benchlib.profiling.stacks import CATEGORIES, OTHER, OTHER_TASK, frame_category, is_user
from benchlib.vocabulary.schema import (
    PROFILE_BPF_SCHEMA,
    PROFILE_RUNS_SCHEMA as PARSED_PROFILE_RUNS,
    PROFILES_SCHEMA,
    WORK_NOUNS,
    check_names,
)

KEYS = ["environment", "scenario", "test"]
IDLE = "idle"
# share of a configuration's busy samples taken by other processes above which its profile explains nothing
FOREIGN_SHARE_MAX = 0.1
# share of a side's busy samples under which a path or frame is left out of the tables (and the figures)
PRUNE_SHARE = 0.005
# What CPU per unit of work is counted in (cpu_unit): µs of CPU per unit of a rate's work, millicores per
# Gbit/s of throughput (CPU-ms per Gbit): a stream's frames cost thousandths of a core per Gbit/s, and in
# millicores they read without an exponent
MICROSECONDS, MILLICORES = "µs", "millicores"
# The tables' columns that say what cpu_per_unit counts, as data (cpu_unit, and work_unit: the unit of work
# it is per, "transaction", ..., "Gbit/s"): the report rounds and words a figure by these; unit is their
# text for a reader, "<cpu_unit> per <work_unit>"
UNIT_COLUMNS = {"unit": pl.String, "cpu_unit": pl.String, "work_unit": pl.String}

# the parsed profile_runs table as the analysis reads it: all but the columns it does not use
PROFILE_RUNS_SCHEMA = {c: t for c, t in PARSED_PROFILE_RUNS.items() if c not in ("unit", "failure_reason")}
_CONFIG_SCHEMA = {"environment": pl.String, "scenario": pl.String, "test": pl.String}
CATEGORIES_SCHEMA = {
    **_CONFIG_SCHEMA,
    "side": pl.String,
    "category": pl.String,
    "cpu_per_unit": pl.Float64,
    **UNIT_COLUMNS,
    "share_pct": pl.Float64,
    "samples": pl.Int64,
    "n_runs": pl.UInt32,
}
FRAMES_SCHEMA = {
    **_CONFIG_SCHEMA,
    "side": pl.String,
    "level": pl.String,
    "id": pl.String,
    "parent": pl.String,
    "name": pl.String,
    "depth": pl.Int64,
    "category": pl.String,
    "samples": pl.Int64,
    "cpu_per_unit": pl.Float64,
    **UNIT_COLUMNS,
    "share_pct": pl.Float64,
}
DIFFERENCES_SCHEMA = {
    "environment": pl.String,
    "test": pl.String,
    "scenario": pl.String,
    "baseline": pl.String,
    "side": pl.String,
    "level": pl.String,
    "id": pl.String,
    "parent": pl.String,
    "name": pl.String,
    "depth": pl.Int64,
    "category": pl.String,
    "samples": pl.Int64,
    "samples_base": pl.Int64,
    "cpu_per_unit": pl.Float64,
    "cpu_per_unit_base": pl.Float64,
    "delta": pl.Float64,
    **UNIT_COLUMNS,
}
BPF_SCHEMA = {
    **_CONFIG_SCHEMA,
    "name": pl.String,
    "type": pl.String,
    "attach": pl.String,
    "runs_per_unit": pl.Float64,  # program runs per unit of work
    "ns_per_run": pl.Float64,
    "cpu_per_unit": pl.Float64,  # its run time per unit of work, in the categories' unit
    **UNIT_COLUMNS,
    "n_runs": pl.UInt32,
    # the 95 % t interval of the mean across the profiled runs (NaN below 2 runs)
    "ns_per_run_low": pl.Float64,
    "ns_per_run_high": pl.Float64,
    "cpu_per_unit_low": pl.Float64,
    "cpu_per_unit_high": pl.Float64,
}
BPF_LEVEL = 0.95
NO_SYMBOLS_SCHEMA = {"environment": pl.String, "test": pl.String, "scenario": pl.String}
DISTURBED_SCHEMA = {
    "environment": pl.String,
    "test": pl.String,
    "scenario": pl.String,
    "share": pl.Float64,  # of the configuration's busy samples, taken by other processes
    "top": pl.String,  # the other process that took most
}
METHOD_SCHEMA = {
    "environment": pl.String,
    "perf_version": pl.String,
    "kernel": pl.String,
    "event": pl.String,
    "frequency_hz": pl.String,
    "attribution": pl.String,
    "profiled_runs": pl.UInt32,
    "failed": pl.UInt32,
    "samples": pl.Int64,
    "kernel_symbols": pl.Boolean,
}


def empty(table: str) -> pl.DataFrame:
    """An empty profile table of the analysis, with its columns."""
    return pl.DataFrame(schema=EMPTY[table])


def empty_profile_runs() -> pl.DataFrame:
    return pl.DataFrame(schema=PROFILE_RUNS_SCHEMA)


def read_tables(profiles_path, profile_runs_path, bpf_path=None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(profiles, profile_runs, profile_bpf) from their parquet files; a missing file (profiling off, a
    campaign from before profiles) is an empty table."""
    from pathlib import Path

    def read(path, schema):
        return conform(pl.read_parquet(path), schema) if Path(path).exists() else pl.DataFrame(schema=schema)

    profile_runs = read(profile_runs_path, PROFILE_RUNS_SCHEMA)
    try:
        check_names(profile_runs)  # its tests and environments name the profile figures' files
    except SchemaError as exc:
        raise SchemaError(f"{profile_runs_path}: {exc}") from None
    bpf = read(bpf_path, PROFILE_BPF_SCHEMA) if bpf_path is not None else pl.DataFrame(schema=PROFILE_BPF_SCHEMA)
    return read(profiles_path, PROFILES_SCHEMA), profile_runs, bpf


def unit_of(metric: str) -> tuple[str, str, float]:
    """(cpu_unit, work_unit, the scale from CPU seconds per unit of work to cpu_unit) for a headline
    metric; another rate counts "units"."""
    if metric == "throughput":
        return MILLICORES, "Gbit/s", 1e3
    return MICROSECONDS, WORK_NOUNS.get(metric, "unit"), 1e6


def conform(df: pl.DataFrame | None, schema: dict) -> pl.DataFrame:
    if df is None or df.is_empty():
        return pl.DataFrame(schema=schema)
    return df.select(pl.col(c).cast(t) for c, t in schema.items())


def pooled_configs(profile_runs: pl.DataFrame) -> pl.DataFrame:
    """Per configuration, its usable profiled runs pooled: successful, with kernel symbols and some work.
    Columns: KEYS, n_runs, work (metric value x window, summed), metric, run_ids, scale and UNIT_COLUMNS."""
    r = conform(profile_runs, PROFILE_RUNS_SCHEMA).filter(
        pl.col("outcome") == "ok",
        pl.col("kernel_symbols"),
        pl.col("value").is_finite(),
        pl.col("value") > 0,
        pl.col("window_s") > 0,
    )
    out = (
        r.group_by(KEYS)
        .agg(
            n_runs=pl.len(),
            work=(pl.col("value") * pl.col("window_s")).sum(),
            metric=pl.col("metric").first(),
            run_ids=pl.col("run_id"),
        )
        .sort(KEYS)
    )
    units = [unit_of(m) for m in out["metric"]]
    return out.with_columns(
        cpu_unit=pl.Series([u[0] for u in units], dtype=pl.String),
        work_unit=pl.Series([u[1] for u in units], dtype=pl.String),
        scale=pl.Series([u[2] for u in units], dtype=pl.Float64),
    ).with_columns(unit=pl.format("{} per {}", "cpu_unit", "work_unit"))


def busy_rows(
    profiles: pl.DataFrame, profile_runs: pl.DataFrame, configs: pl.DataFrame, others: bool = False
) -> pl.DataFrame:
    """The busy rows of the usable runs, with their CPU seconds (samples / frequency); other processes'
    samples only where ``others``."""
    runs = conform(profile_runs, PROFILE_RUNS_SCHEMA).select("run_id", "frequency_hz")
    usable = configs.select("run_ids").explode("run_ids").rename({"run_ids": "run_id"})
    return (
        conform(profiles, PROFILES_SCHEMA)
        .filter(pl.col("category") != IDLE, True if others else pl.col("category") != OTHER)
        .join(usable, on="run_id")
        .join(runs, on="run_id")
        .with_columns(cpu_s=pl.col("samples") / pl.col("frequency_hz"))
    )


def foreign_shares(profiles: pl.DataFrame, profile_runs: pl.DataFrame) -> pl.DataFrame:
    """Per configuration (its usable profiled runs pooled, both sides): the share of busy samples that
    other processes took, and the other process that took most."""
    b = busy_rows(profiles, profile_runs, pooled_configs(profile_runs), others=True)
    top = (
        b.filter(category=OTHER)
        .group_by(*KEYS, "comm")
        .agg(pl.col("samples").sum())
        .sort("samples", "comm", descending=[True, False])
        .unique(KEYS, keep="first")
        .select(*KEYS, top="comm")
    )
    return (
        b.group_by(KEYS)
        .agg(share=pl.col("samples").filter(category=OTHER).sum() / pl.col("samples").sum())
        .join(top, on=KEYS, how="left")
    )


def _per_unit(df: pl.DataFrame, configs: pl.DataFrame) -> pl.DataFrame:
    """``df`` (KEYS, side, cpu_s, samples, ...) with cpu_per_unit, UNIT_COLUMNS and its share of the side's busy CPU."""
    return df.join(configs.select(*KEYS, "work", "scale", *UNIT_COLUMNS, "n_runs"), on=KEYS).with_columns(
        cpu_per_unit=pl.col("cpu_s") * pl.col("scale") / pl.col("work"),
        share_pct=100 * pl.col("samples") / pl.col("busy"),
    )


def categories(profiles: pl.DataFrame, profile_runs: pl.DataFrame) -> pl.DataFrame:
    """profile_categories: busy CPU per unit of work by category, per configuration and side; each side's
    shares sum to 100 %."""
    configs = pooled_configs(profile_runs)
    b = busy_rows(profiles, profile_runs, configs)
    if b.is_empty():
        return pl.DataFrame(schema=CATEGORIES_SCHEMA)
    order = {c: i for i, c in enumerate(CATEGORIES)}
    g = (
        b.group_by(*KEYS, "side", "category")
        .agg(pl.col("cpu_s").sum(), pl.col("samples").sum())
        .with_columns(busy=pl.col("samples").sum().over(*KEYS, "side"))
    )
    return (
        _per_unit(g, configs)
        .with_columns(_o=pl.col("category").replace_strict(order, default=len(order)))
        .sort(*KEYS, "side", "_o")
        .select(CATEGORIES_SCHEMA.keys())
    )


class _Tree:
    """The nodes of every stack's path, shared by all configurations: a node is its parent node and its
    frame (an integer per distinct frame name), so memory grows with the distinct nodes, however deep the
    stacks; a node's id (its path as text) is spelled out only for the nodes an output keeps (_trees)."""

    def __init__(self) -> None:
        self.child: dict[tuple[int, int], int] = {}
        self.parent: list[int] = []  # -1: a root
        self.frame: list[int] = []
        self.depth: list[int] = []
        self.frame_of: dict[str, int] = {}
        self.name: list[str] = []

    def add(self, path: list[str]) -> list[int]:
        """The nodes of ``path``, root first, added where new."""
        nodes, node = [], -1
        for depth, name in enumerate(path):
            frame = self.frame_of.setdefault(name, len(self.name))
            if frame == len(self.name):
                self.name.append(name)
            found = self.child.setdefault((node, frame), len(self.parent))
            if found == len(self.parent):
                self.parent.append(node)
                self.frame.append(frame)
                self.depth.append(depth)
            nodes.append(node := found)
        return nodes


def _trees(profiles: pl.DataFrame, profile_runs: pl.DataFrame) -> pl.DataFrame:
    """Every path prefix (level "path": side;comm;frames...) and every frame (level "frame", counted once
    per stack however often it recurs) with its inclusive busy samples and CPU seconds, and every frame's
    exclusive ones (level "self": the samples taken in the frame itself), unpruned. ``key``
    names a node (or frame) in every configuration; ``id`` and ``parent`` are null on the nodes that no
    configuration keeps (under PRUNE_SHARE everywhere), which no output shows."""
    configs = pooled_configs(profile_runs)
    b = busy_rows(profiles, profile_runs, configs)
    if b.is_empty():
        return pl.DataFrame(schema={**FRAMES_SCHEMA, "key": pl.Int64, "busy": pl.Int64})
    b = (
        b.group_by(*KEYS, "side", "comm", "stack")
        .agg(pl.col("cpu_s").sum(), pl.col("samples").sum())
        .sort(*KEYS, "side", "comm", "stack")
        .with_columns(busy=pl.col("samples").sum().over(*KEYS, "side"))
    )
    groups = b.select(*KEYS, "side", "busy").unique(maintain_order=True).with_row_index("_g")
    b = b.join(groups.select(*KEYS, "side", "_g"), on=[*KEYS, "side"], maintain_order="left")
    # each stack's nodes and distinct frames as integers, one flat array each: no prefix is ever spelled
    tree = _Tree()
    path_rows, path_keys, frame_rows, frame_keys = array("q"), array("q"), array("q"), array("q")
    self_rows, self_keys = array("q"), array("q")
    for row, (side, comm, stack) in enumerate(b.select("side", "comm", "stack").iter_rows()):
        nodes = tree.add(f"{side};{comm};{stack}".rstrip(";").split(";"))
        path_rows.extend([row] * len(nodes))
        path_keys.extend(nodes)
        frames = sorted({tree.frame[n] for n in nodes[2:]})
        frame_rows.extend([row] * len(frames))
        frame_keys.extend(frames)
        if len(nodes) > 2:  # the leaf: where the sample's CPU itself went
            self_rows.append(row)
            self_keys.append(tree.frame[nodes[-1]])
    rows = b.select("_g", "cpu_s", "samples").with_row_index("_row").with_columns(pl.col("_row").cast(pl.Int64))

    def inclusive(row: array, key: array) -> pl.DataFrame:
        return (
            pl.DataFrame({"_row": row, "key": key}, schema={"_row": pl.Int64, "key": pl.Int64})
            .join(rows, on="_row")
            .sort("_g", "key", "_row")  # sums in one order, whatever the threads: the same bits
            .group_by("_g", "key", maintain_order=True)
            .agg(pl.col("cpu_s").sum(), pl.col("samples").sum())
            .join(groups.select("_g", "busy"), on="_g")
        )

    def column(values: list, dtype: type[pl.DataType]) -> pl.Expr:
        return pl.lit(pl.Series(values, dtype=dtype)).gather(pl.col("key"))

    paths = inclusive(path_rows, path_keys)
    # a kept node's parent is kept too (it holds at least its samples): spell the ids depth by depth
    kept = (
        paths.filter(pl.col("samples") >= PRUNE_SHARE * pl.col("busy"))
        .select(pl.col("key").unique())
        .with_columns(
            depth=column(tree.depth, pl.Int64),
            _parent=column(tree.parent, pl.Int64),
            name=column([tree.name[f] for f in tree.frame], pl.String),
        )
    )
    by_depth = kept.sort("depth", "key").partition_by("depth", maintain_order=True)
    levels = [by_depth[0].select("key", id="name")]
    for level in by_depth[1:]:
        level = level.join(levels[-1].rename({"key": "_parent"}), on="_parent")
        levels.append(level.select("key", id=pl.concat_str("id", "name", separator=";")))
    ids_of = pl.concat(levels, rechunk=False)
    paths = (
        paths.join(ids_of, on="key", how="left")
        .with_columns(
            level=pl.lit("path"),
            name=column([tree.name[f] for f in tree.frame], pl.String),
            depth=column(tree.depth, pl.Int64),
            _parent=column(tree.parent, pl.Int64),
        )
        .join(ids_of.rename({"key": "_parent", "id": "parent"}), on="_parent", how="left")
        .with_columns(parent=pl.when(pl.col("depth") > 0).then("parent").otherwise(pl.lit("")))
        .with_columns(parent=pl.when(pl.col("id").is_null()).then(None).otherwise("parent"))
    )
    frames, own = (
        inclusive(rows_, keys).with_columns(
            level=pl.lit(level),
            name=column(tree.name, pl.String),
            id=column(tree.name, pl.String),
            parent=pl.lit(None, pl.String),
            depth=pl.lit(None, pl.Int64),
        )
        for level, rows_, keys in (("frame", frame_rows, frame_keys), ("self", self_rows, self_keys))
    )
    cols = ["_g", "level", "key", "id", "parent", "name", "depth", "samples", "cpu_s"]
    out = pl.concat([paths.select(cols), frames.select(cols), own.select(cols)]).join(groups, on="_g").drop("_g")
    names = out["name"].unique().sort()
    cat = dict(zip(names, (own_category(n) for n in names), strict=True))
    return _per_unit(out.with_columns(category=pl.col("name").replace_strict(cat, return_dtype=pl.String)), configs)


def own_category(frame: str) -> str:
    """A frame's own category ("" for a helper that belongs to its caller)."""
    if is_user(frame):
        return "application"
    return frame_category(frame) or ""


def frames(profiles: pl.DataFrame, profile_runs: pl.DataFrame, trees: pl.DataFrame | None = None) -> pl.DataFrame:
    """profile_frames: inclusive busy CPU per unit of each path prefix (level "path": the flamegraph's
    nodes, id = side;comm;frame;...) and of each frame (level "frame"), exclusive of each frame (level
    "self"), per configuration and side, without
    those under PRUNE_SHARE of the side's busy samples."""
    t = _trees(profiles, profile_runs) if trees is None else trees
    return (
        t.filter(pl.col("samples") >= PRUNE_SHARE * pl.col("busy"))
        .sort(*KEYS, "side", "level", "depth", "samples", "id", descending=[*[False] * 6, True, False], nulls_last=True)
        .select(FRAMES_SCHEMA.keys())
    )


def differences(
    profiles: pl.DataFrame, profile_runs: pl.DataFrame, baseline: str, trees: pl.DataFrame | None = None
) -> pl.DataFrame:
    """profile_differences: per path prefix and frame, each scenario's CPU per unit against the baseline's
    in the same environment, test and side (delta = scenario - baseline, 0 where one has none), kept where
    either side of the comparison reaches PRUNE_SHARE."""
    t = _trees(profiles, profile_runs) if trees is None else trees
    base = t.filter(scenario=baseline)
    other = t.filter(pl.col("scenario") != baseline)
    if base.is_empty() or other.is_empty():
        return pl.DataFrame(schema=DIFFERENCES_SCHEMA)
    side = ["environment", "test", "side"]
    on = [*side, "level", "key"]
    attrs = ("id", "parent", "name", "depth", "category", *UNIT_COLUMNS)
    # every scenario paired with the baseline's nodes too, so what the scenario lost is there
    pairs = other.select(*side, "scenario", "busy").unique([*side, "scenario"])
    b = base.select(
        *on,
        *(pl.col(c).alias(f"{c}_b") for c in attrs),
        samples_base="samples",
        cpu_per_unit_base="cpu_per_unit",
        busy_base="busy",
    ).join(pairs.drop("busy"), on=side)
    d = (
        other.drop("busy")
        .join(b, on=[*on, "scenario"], how="full", coalesce=True)
        .join(pairs, on=[*side, "scenario"])
        .with_columns(pl.col("busy_base").fill_null(strategy="max").over(*side))
        .with_columns(
            *(pl.coalesce(c, f"{c}_b").alias(c) for c in attrs),
            pl.col("samples", "samples_base").fill_null(0),
            pl.col("cpu_per_unit", "cpu_per_unit_base").fill_null(0.0),
        )
        .filter(
            (pl.col("samples") >= PRUNE_SHARE * pl.col("busy"))
            | (pl.col("samples_base") >= PRUNE_SHARE * pl.col("busy_base"))
        )
        .with_columns(baseline=pl.lit(baseline), delta=pl.col("cpu_per_unit") - pl.col("cpu_per_unit_base"))
    )
    return d.sort("environment", "test", "scenario", "side", "level", "depth", "id", nulls_last=True).select(
        DIFFERENCES_SCHEMA.keys()
    )


def bpf_programs(bpf: pl.DataFrame | None, profile_runs: pl.DataFrame) -> pl.DataFrame:
    """profile_bpf: per configuration and BPF program (name, type, where attached), the kernel's own
    count of its runs and run time over the usable profiled runs' windows, pooled, per unit of work
    (the categories' unit); the programs of other scenarios' namespaces left out (those that ran less
    than once per hundred units)."""
    configs = pooled_configs(profile_runs)
    if bpf is None or bpf.is_empty() or configs.is_empty():
        return pl.DataFrame(schema=BPF_SCHEMA)
    usable = configs.select(*KEYS, "work", "scale", *UNIT_COLUMNS, "n_runs", run_id="run_ids").explode("run_id")
    runs = conform(profile_runs, PROFILE_RUNS_SCHEMA).select("run_id", run_work=pl.col("value") * pl.col("window_s"))
    program = [*KEYS, "name", "type", "attach"]
    # each run's own figures, for the intervals across runs (a run where the program did not run counts 0)
    per_run = (
        bpf.join(usable.select(*KEYS, "scale", "run_id"), on="run_id")
        .join(runs, on="run_id")
        .group_by(*program, "run_id")
        .agg(pl.col("run_cnt", "run_time_ns").sum(), pl.col("scale", "run_work").first())
        .with_columns(
            ns=pl.col("run_time_ns") / pl.col("run_cnt"),
            cpu=pl.col("run_time_ns") / 1e9 * pl.col("scale") / pl.col("run_work"),
        )
    )
    intervals = pl.DataFrame(
        [
            {**dict(zip(program, key, strict=True)), **_mean_intervals(g, configs, key)}
            for key, g in per_run.group_by(program, maintain_order=True)
        ],
        schema={**{k: pl.String for k in program}, **{c: pl.Float64 for c in BPF_INTERVALS}},
    )
    return (
        bpf.join(usable, on="run_id")
        .group_by(*KEYS, "name", "type", "attach")
        .agg(
            pl.col("run_cnt", "run_time_ns").sum(),
            pl.col("work", "scale", *UNIT_COLUMNS, "n_runs").first(),
        )
        .with_columns(
            runs_per_unit=pl.col("run_cnt") / pl.col("work"),
            ns_per_run=pl.col("run_time_ns") / pl.col("run_cnt"),
            cpu_per_unit=pl.col("run_time_ns") / 1e9 * pl.col("scale") / pl.col("work"),
        )
        .filter(pl.col("runs_per_unit") >= 0.01)
        .join(intervals, on=program, how="left", nulls_equal=True)
        .sort(*KEYS, "cpu_per_unit", "name", "attach", descending=[False, False, False, True, False, False])
        .select(BPF_SCHEMA.keys())
    )


BPF_INTERVALS = ("ns_per_run_low", "ns_per_run_high", "cpu_per_unit_low", "cpu_per_unit_high")


def _mean_intervals(g: pl.DataFrame, configs: pl.DataFrame, key: tuple) -> dict[str, float]:
    """The BPF_LEVEL t intervals of a program's mean ns per run and CPU per unit across its configuration's
    usable runs (``g``: the runs it ran in; the others count 0 CPU), NaN below 2 runs."""
    env, scenario, test = key[:3]
    n = int(configs.filter(environment=env, scenario=scenario, test=test)["n_runs"][0])
    cpu = np.concatenate([g["cpu"].to_numpy(), np.zeros(n - len(g))])
    out = {}
    for name, values in (("ns_per_run", g["ns"].drop_nans().to_numpy()), ("cpu_per_unit", cpu)):
        if len(values) < 2:
            out[f"{name}_low"] = out[f"{name}_high"] = math.nan
        elif np.ptp(values) == 0:
            out[f"{name}_low"] = out[f"{name}_high"] = float(values[0])
        else:
            ci = stats.ttest_1samp(values, 0.0).confidence_interval(BPF_LEVEL)
            out[f"{name}_low"], out[f"{name}_high"] = float(ci.low), float(ci.high)
    return out


def no_symbols(profile_runs: pl.DataFrame) -> pl.DataFrame:
    """profile_no_symbols: the configurations whose successful profiled runs all lack kernel symbols (the
    categories and frames leave them out: their stacks are unresolved addresses)."""
    return (
        conform(profile_runs, PROFILE_RUNS_SCHEMA)
        .filter(pl.col("outcome") == "ok")
        .group_by(KEYS)
        .agg(pl.col("kernel_symbols").any())
        .filter(~pl.col("kernel_symbols"))
        .sort("environment", "test", "scenario")
        .select(NO_SYMBOLS_SCHEMA.keys())
    )


def disturbed(profiles: pl.DataFrame, profile_runs: pl.DataFrame) -> pl.DataFrame:
    """profile_disturbed: the configurations whose profiles other processes took more than
    FOREIGN_SHARE_MAX of: what the profile shows is not the datapath's alone, so it explains nothing."""
    return (
        foreign_shares(profiles, profile_runs)
        .filter(pl.col("share") > FOREIGN_SHARE_MAX)
        .with_columns(pl.col("top").str.strip_prefix(OTHER_TASK))
        .sort(KEYS)
        .select(DISTURBED_SCHEMA.keys())
    )


def method(profile_runs: pl.DataFrame) -> pl.DataFrame:
    """profile_method: how each environment's profiles were taken: perf version, event, rate, attribution,
    profiled runs, samples, whether the kernel's symbols were visible."""
    r = conform(profile_runs, PROFILE_RUNS_SCHEMA)
    if r.is_empty():
        return pl.DataFrame(schema=METHOD_SCHEMA)

    def distinct(c: str) -> pl.Expr:
        v = pl.col(c).drop_nulls().cast(pl.String)
        return v.unique().sort().str.join(", ")

    return (
        r.with_columns(pl.col("frequency_hz").round(0).cast(pl.Int64))
        .group_by("environment")
        .agg(
            perf_version=distinct("perf_version"),
            kernel=distinct("kernel"),
            event=pl.lit("cpu-clock"),
            frequency_hz=distinct("frequency_hz"),
            attribution=distinct("attribution"),
            profiled_runs=pl.len(),
            failed=(pl.col("outcome") != "ok").sum().cast(pl.UInt32),
            samples=pl.col("samples").sum(),
            kernel_symbols=pl.col("kernel_symbols").all(),
        )
        .sort("environment")
        .select(METHOD_SCHEMA.keys())
    )


def analyse(
    profiles: pl.DataFrame | None,
    profile_runs: pl.DataFrame | None,
    baseline: str,
    bpf: pl.DataFrame | None = None,
) -> dict[str, pl.DataFrame]:
    """Every profile table the analysis stores, by name (``bpf``: the profile_bpf tidy table)."""
    profiles, profile_runs = conform(profiles, PROFILES_SCHEMA), conform(profile_runs, PROFILE_RUNS_SCHEMA)
    trees = _trees(profiles, profile_runs)
    return {
        "profile_method": method(profile_runs),
        "profile_categories": categories(profiles, profile_runs),
        "profile_frames": frames(profiles, profile_runs, trees),
        "profile_differences": differences(profiles, profile_runs, baseline, trees),
        "profile_no_symbols": no_symbols(profile_runs),
        "profile_disturbed": disturbed(profiles, profile_runs),
        "profile_bpf": bpf_programs(bpf, profile_runs),
    }


EMPTY = {
    "profile_method": METHOD_SCHEMA,
    "profile_categories": CATEGORIES_SCHEMA,
    "profile_frames": FRAMES_SCHEMA,
    "profile_differences": DIFFERENCES_SCHEMA,
    "profile_no_symbols": NO_SYMBOLS_SCHEMA,
    "profile_disturbed": DISTURBED_SCHEMA,
    "profile_bpf": BPF_SCHEMA,
}
