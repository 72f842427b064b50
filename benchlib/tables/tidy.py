"""Raw records -> the tidy tables (runs.parquet, metrics.parquet), as polars frames.

Profiled runs go to their own tables (profile_runs.parquet, profiles.parquet, and profile_bpf.parquet: the
kernel's BPF program counters), never to runs or metrics: perf's own load is in their numbers, so no
statistic may see them.

The raw record is the truth: metrics are re-derived here from the tool output
exactly as printed, so a parser fix applies to old campaigns too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from collections import deque
from collections.abc import Generator, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, closing, nullcontext
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path

import polars as pl

from .. import collectors
from ..base import limits
from ..base.errors import BenchlibError, ParseError, RecordError
from ..host import cpu, disturbance
from ..profiling import bpfstats, stacks
from ..records import integrity, layout, record
from ..vocabulary import schema
from . import parse_index

_log = logging.getLogger(__name__)  # the default for log=: where benchlib.base.logs sends messages

PARALLEL_MIN_RECORDS = 2000  # below this, starting worker processes costs more than it saves
PARSE_CHUNK = 500  # records per task handed to a worker process
TASKS_AHEAD = 8  # tasks queued for the workers beyond the one the consumer waits for

# the columns of both tables that identify a run
_KEYS = ("campaign", "environment", "scenario", "test", "streams", "message_size", "block", "run_id")


def datapath(placement: dict) -> dict:
    """The runs columns that describe the datapath, from what the target recorded in the placement
    (a record from before a field existed gets schema.RUNS_DEFAULTS' value)."""
    mesh = placement.get("mesh") or {}
    size = (placement.get("big_tcp") or {}).get("size")
    return {
        "mesh": mesh.get("kind", "none"),
        "proxy_hops": len(mesh.get("proxies", {})),
        "mtls": "mtls" in mesh,
        "proxy_kind": mesh.get("proxy"),
        "proxy_version": mesh.get("proxy_version"),
        "ip_family": placement.get("ip_family", 4),
        "big_tcp": size is not None and size > schema.GSO_DEFAULT_MAX_SIZE,
        "gso_gro_max_size": size,
        "cpu_placement": placement.get("cpu_placement", "split"),
    }


def cpu_sides(rec: record.RunRecord) -> list[tuple[str, record.SideCpu]]:
    """The CPU sets to account a run's CPU on: each side's, or, where client and server shared one
    set (cpu_placement shared), that set once as side total (per side it would be counted twice)."""
    if rec.placement.get("cpu_placement") == "shared":
        return [(schema.TOTAL_SIDE, rec.cpu["client"])]
    return list(rec.cpu.items())


def proxy_usage(rec: record.RunRecord) -> dict[tuple[str, str], float]:
    """Per side: the proxies' CPU seconds and cores over the CPU window (a side without a proxy: 0),
    and their largest peak RSS. Nothing for a run whose target recorded no datapath process (no mesh)."""
    if not rec.processes:
        return {}
    out = {}
    for side, c in rec.cpu.items():
        procs = [p for p in rec.processes.values() if p["side"] == side]
        seconds = sum(end - start for start, end in (p["cpu_ticks"] for p in procs)) / rec.clk_tck
        out[("proxy_cpu_s", side)] = seconds
        out[("proxy_cpu_cores", side)] = seconds / (c.end.mono - c.start.mono)  # the harness's CPU window
        if procs:
            out[("proxy_peak_rss_kib", side)] = max(p["peak_rss_kib"] for p in procs)
    return out


def load_record(path: Path) -> tuple[dict, list[dict]]:
    """One run row and its metric rows (metric, side, value, unit) from a raw record directory.

    A value that is not a finite number (a parser or a tool gone wrong) is an
    error naming the record, never a NaN that the statistics would meet later.
    """
    return _measured(record.load(path), path)


def _measured(rec: record.RunRecord, path: Path) -> tuple[dict, list[dict]]:
    try:
        params = rec.test_params
        placement = rec.placement
        versions = rec.target["versions"]
        # a campaign over several clusters: the kernel and machine of the run's own cluster
        own = (rec.target.get("clusters") or {}).get(placement.get("cluster"), rec.target)
        run = {
            "campaign": rec.campaign,
            "environment": rec.environment,
            "scenario": rec.scenario,
            "test": rec.test,
            "block": rec.block,
            "run_id": rec.run_id,
            "tool": rec.tool,
            "kind": rec.kind,
            "streams": params["streams"],
            "message_size": params["message_size"],
            "offered_qps": params["qps"] if isinstance(params.get("qps"), int) else None,
            "connection_close": params.get("connection_close", False),
            "services": placement.get("services"),
            **datapath(placement),
            "test_params": json.dumps(params, sort_keys=True, separators=(",", ":")),
            "order": rec.order,
            "attempts": len(rec.attempts),
            "outcome": rec.outcome,
            "failure_reason": rec.failure_reason,
            "foreign_cpu": rec.foreign_cpu["measured_cores"] if rec.foreign_cpu else None,
            "foreign_top": disturbance.top_text(rec.foreign_cpu) if rec.foreign_cpu else None,
            "quiet_frozen": ",".join(sorted(rec.quiet.get("frozen") or {})) if rec.quiet else None,
            "started_at": rec.started_at,
            "ended_at": rec.ended_at,
            "duration_s": (rec.ended_at - rec.started_at).total_seconds(),
            "client_cpus": len(placement["client_cpus"]),
            "server_cpus": len(placement["server_cpus"]),
            "client_node": placement["client_node"],
            "server_node": placement["server_node"],
            "nodes_share_kernel": placement.get("nodes_share_kernel"),
            "cluster": placement.get("cluster"),
            "kernel": own["versions"]["kernel"],
            "machine": machine_text(own.get("machine")),
            "tool_version": versions.get(rec.tool, ""),
            "record": layout.table_path(path),
        }
        if rec.outcome != "ok":
            return run, []
        values = {
            (name, schema.NO_SIDE): v for name, v in collectors.get(rec.tool).parse(rec.kind, rec.stdouts).items()
        }
        for side, c in cpu_sides(rec):
            usage = cpu.side_usage(c.start, c.end, c.cpus, rec.clk_tck)
            values.update({(name, side): v for name, v in usage.items()})
        values.update(proxy_usage(rec))
        rows = []
        for (metric, side), value in values.items():
            value = float(value)
            if not math.isfinite(value):
                raise ParseError(f"{metric} ({side}) is {value}, not a finite number (run {rec.run_id})")
            rows.append({"metric": metric, "side": side, "value": value, "unit": schema.METRICS[metric].unit})
    except ParseError as exc:
        raise RecordError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise RecordError(f"{path}: malformed record ({type(exc).__name__}: {exc})") from None
    return run, rows


_PROFILE_KEYS = ("run_id", "campaign", "environment", "scenario", "test", "kind")


def load_profiled(rec: record.RunRecord, path: Path) -> tuple[dict, list[dict]]:
    """A profiled run's profile_runs row and its profile rows (side, comm, stack, category, samples).

    Where the sides share CPUs, every sample counts for side total (stacks.rows); a run whose perf
    failed has a row with its reason and no profile rows."""
    try:
        prof = rec.profile or {}
        run = {
            "run_id": rec.run_id,
            "campaign": rec.campaign,
            "environment": rec.environment,
            "scenario": rec.scenario,
            "test": rec.test,
            "kind": rec.kind,
            "block": rec.block,
            **{
                k: prof.get(k)
                for k in (
                    "attribution",
                    "frequency_hz",
                    "window_s",
                    "samples",
                    "kernel_symbols",
                    "perf_version",
                    "kernel",
                )
            },
            "metric": None,
            "value": None,
            "unit": None,
            "outcome": rec.outcome,
            "failure_reason": rec.failure_reason,
        }
        if rec.outcome == "ok":
            values = collectors.get(rec.tool).parse(rec.kind, rec.stdouts)
            name = schema.headline_metric(rec.kind, isinstance(rec.test_params.get("qps"), int), values)
            if name is not None:
                run.update(metric=name, value=float(values[name]), unit=schema.METRICS[name].unit)
        if rec.profile_folded is None:
            return run, []
        folded = stacks.read_folded(rec.profile_folded, layout.PROFILE)
        if sum(folded.values()) != prof["samples"]:  # the profile counted what perf folded, every sample
            raise ParseError(
                f"{layout.PROFILE}: holds {sum(folded.values())} samples, {layout.META} profile.samples says "
                f"{prof['samples']} (cut short or changed after the run?)"
            )
        rows = stacks.rows(
            folded, {side: [int(c) for c in cpus] for side, cpus in prof["cpus"].items()}, shared_side=schema.TOTAL_SIDE
        )
    except ParseError as exc:
        raise RecordError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, ArithmeticError, OSError, EOFError) as exc:  # gzip errors: OSErrors
        raise RecordError(f"{path}: malformed record ({type(exc).__name__}: {exc})") from None
    return run, rows


@dataclass
class _Chunk:
    runs: pl.DataFrame
    metrics: pl.DataFrame
    profile_runs: pl.DataFrame
    profiles: pl.DataFrame
    profile_bpf: pl.DataFrame
    errors: list[RecordError]
    loaded: list[tuple[str, str]]  # (record, run_id) of every record whose rows it holds
    index: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=parse_index.SCHEMA))  # those records
    read: int = 0  # records read now, corrupt ones included
    reused: int = 0  # records whose rows came from the previous tables, unread


class _Long:
    """A long table's rows (metrics, profiles) as columns, a run's key columns extended by all its rows
    at once rather than appended row by row. No polars expression runs here: in a worker forked from a
    process whose polars thread pool was running, one can wait forever."""

    def __init__(self, table_schema: pl.Schema, keys: tuple[str, ...]):
        self.schema, self.keys = table_schema, keys
        self.columns = {c: [] for c in table_schema}

    def add(self, rows: list[dict], run: dict) -> None:
        for k in self.keys:
            self.columns[k] += [run[k]] * len(rows)
        for row in rows:
            for k, v in row.items():
                self.columns[k].append(v)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.columns, schema=self.schema)


def _load_chunk(paths: list[str]) -> _Chunk:
    """The tables' rows of consecutive records; a worker returns frames, not millions of dicts."""
    runs, profile_runs, errors, loaded = [], [], [], []
    metrics, profiles = _Long(schema.METRICS_SCHEMA, _KEYS), _Long(schema.PROFILES_SCHEMA, _PROFILE_KEYS)
    bpf = []
    for text in paths:
        path = layout.located(text)
        try:
            rec = record.load(path)
            if rec.profiled:
                prun, rows = load_profiled(rec, path)
                profiles.add(rows, prun)
                profile_runs.append(prun)
                bpf += bpfstats.rows(rec.run_id, (rec.profile or {}).get("bpf"))
                loaded.append((text, rec.run_id))
                continue
            run, rows = _measured(rec, path)
        except RecordError as exc:
            errors.append(exc)
            continue
        metrics.add(rows, run)
        runs.append(run)
        loaded.append((text, rec.run_id))
    runs = pl.DataFrame(runs, schema=schema.RUNS_SCHEMA) if runs else schema.empty("runs")
    profile_runs = (
        pl.DataFrame(profile_runs, schema=schema.PROFILE_RUNS_SCHEMA) if profile_runs else schema.empty("profile_runs")
    )
    profile_bpf = pl.DataFrame(bpf, schema=schema.PROFILE_BPF_SCHEMA) if bpf else schema.empty("profile_bpf")
    return _Chunk(runs, metrics.frame(), profile_runs, profiles.frame(), profile_bpf, errors, loaded)


_RUN_ORDER_SCHEMA = pl.Schema(
    {
        "record": pl.String,
        "environment": pl.String,
        "order": pl.Int64,
        "fingerprint": pl.String,  # null: not asked for, or the record is not a readable directory
        "run_id": pl.String,  # a reused record's; null for one read now
        "reused": pl.Boolean,
    }
)


def _run_order(task: tuple[list[str], bool, dict[str, tuple]]) -> pl.DataFrame:
    """Each record's environment and order (its place in the schedule), from its meta.json; null
    where unreadable: load_record then names what is wrong with that record. With ``fingerprints``,
    each record's `integrity.fingerprint` too, taken before anything of it is read (a record changed
    during the parse is then read again by the next one). A record whose fingerprint is the one in
    ``known`` (path -> fingerprint, run id, environment, order) is reused: its meta.json is not read."""
    paths, fingerprints, known = task
    rows = []
    for path in paths:
        where = str(layout.located(path))
        fp = None
        if fingerprints:
            try:
                fp = integrity.fingerprint(where)
            except OSError:  # not there, or not a directory: load_record names it
                pass
        was = known.get(path)
        if fp is not None and was is not None and was[0] == fp:
            rows.append((path, was[2], was[3], fp, was[1], True))
            continue
        try:
            meta = limits.parse_json(layout.read_file(where, layout.META))
            env, order = meta["environment"], meta["order"]
        except (OSError, ValueError, KeyError, TypeError):  # a RecordError (a link, a FIFO) is a ValueError
            env = order = None
        if not (isinstance(env, str) and type(order) is int and -(2**63) <= order < 2**63):
            env = order = None
        rows.append((path, env, order, fp, None, False))
    return pl.DataFrame(rows, schema=_RUN_ORDER_SCHEMA, orient="row")


def _batches(items: Iterator, size: int) -> Iterator[list]:
    while batch := list(islice(items, size)):
        yield batch


def _map(pool: ProcessPoolExecutor | None, fn, tasks: Iterator) -> Iterator:
    """fn over tasks, results in task order; with a pool, at most TASKS_AHEAD tasks ahead of the
    consumer, so that finished chunks do not pile up in memory while it writes them."""
    if pool is None:
        yield from map(fn, tasks)
        return
    ahead = deque()
    for task in tasks:
        ahead.append(pool.submit(fn, task))
        if len(ahead) > TASKS_AHEAD:
            yield ahead.popleft().result()
    while ahead:
        yield ahead.popleft().result()


_POS = "__position"  # a row's record's place in the tables (private to the merge)


@dataclass
class _Previous:
    """The previous tables' rows of the records a parse reuses, each with its record's new place
    (_POS). A reused record's rows keep their order: the stable sort moves whole records."""

    tables: dict[str, pl.DataFrame]  # by table name, sorted by _POS

    @classmethod
    def of(cls, out_dir: Path, in_order: pl.DataFrame) -> _Previous:
        places = in_order.with_row_index(_POS).filter("reused").select("run_id", pl.col(_POS).cast(pl.Int64))
        tables = {
            name: pl.read_parquet(out_dir / f"{name}.parquet")
            .join(places, on="run_id", maintain_order="left")
            .sort(_POS, maintain_order=True)
            for name in TABLES
        }
        return cls(tables)

    def rows(self, name: str, start: int, stop: int) -> pl.DataFrame:
        """Table ``name``'s rows of the reused records placed in [start, stop)."""
        df = self.tables[name]
        lo, hi = df[_POS].search_sorted(pl.Series([start, stop])).to_list()
        return df.slice(lo, hi - lo)


def _merged(chunk: _Chunk, places: pl.DataFrame, start: int, previous: _Previous | None) -> _Chunk:
    """The chunk of the records ``places`` (in_order's rows from ``start`` on): the rows read now and
    the reused ones, each record's where a full parse puts them, and the index rows of them all."""
    loaded = pl.DataFrame(chunk.loaded, schema={"record": pl.String, "run_id": pl.String}, orient="row")
    reused = int(places["reused"].sum())
    if previous is not None and reused:
        at = places.with_row_index(_POS).select("record", pl.col(_POS).cast(pl.Int64) + start)
        fresh_at = loaded.join(at, on="record", maintain_order="left").select("run_id", _POS)
        frames = {}
        for name in TABLES:
            fresh = getattr(chunk, name).join(fresh_at, on="run_id", maintain_order="left")
            old = previous.rows(name, start, start + len(places))
            frames[name] = pl.concat([old, fresh]).sort(_POS, maintain_order=True).drop(_POS)
        chunk = _Chunk(**frames, errors=chunk.errors, loaded=chunk.loaded)
    chunk.index = (
        places.join(loaded, on="record", how="left", maintain_order="left", suffix="_read")
        .with_columns(run_id=pl.coalesce("run_id", "run_id_read"))
        .filter(pl.col("run_id").is_not_null())
        .select(parse_index.SCHEMA.names())
    )
    chunk.read, chunk.reused = len(places) - reused, reused
    return chunk


def _chunks(
    campaign_dir: Path,
    records: Iterable[Path] | None,
    fingerprints: bool = False,
    previous: tuple[Path, pl.DataFrame] | None = None,
) -> Generator[_Chunk, None, None]:
    """The tables chunk by chunk, in run order (environment, then order).

    Records are put in run order first, from their meta.json (the pass costs about a tenth of
    the parse), so both tables come out in that order without sorting a table in memory.
    Records are independent, so a large campaign is parsed on every CPU (100k runs: 80 s on
    one core of this 2-core VM). ``fingerprints``: fill in each chunk's index (parse_index).
    ``previous``: the directory of the last parse's tables and its index (parse_index.SCHEMA): a
    record whose fingerprint is unchanged is not read, its rows are taken from those tables.
    """
    # as the tables and the index keep them (layout.table_path); each worker reads them where they lie
    paths = (layout.table_path(p) for p in (layout.walk(campaign_dir) if records is None else records))
    known = {}
    if previous is not None:
        index = previous[1]
        known = {
            r: (fp, rid, env, order) for r, rid, env, order, fp in index.select(parse_index.SCHEMA.names()).iter_rows()
        }
    head = list(islice(paths, PARALLEL_MIN_RECORDS))
    workers = len(os.sched_getaffinity(0))
    parallel = len(head) == PARALLEL_MIN_RECORDS and workers > 1
    with ProcessPoolExecutor(max_workers=workers) if parallel else nullcontext() as pool:
        tasks = (
            (batch, fingerprints, {p: known[p] for p in batch if p in known})
            for batch in _batches(chain(head, paths), PARSE_CHUNK)
        )
        located = _map(pool, _run_order, tasks)
        in_order = pl.concat([pl.DataFrame(schema=_RUN_ORDER_SCHEMA), *located]).sort(
            "environment", "order", nulls_last=True, maintain_order=True
        )
        old = _Previous.of(previous[0], in_order) if previous is not None and in_order["reused"].any() else None
        slices = [in_order.slice(i, PARSE_CHUNK) for i in range(0, len(in_order), PARSE_CHUNK)]
        read = _map(pool, _load_chunk, (s.filter(~pl.col("reused"))["record"].to_list() for s in slices))
        for i, (places, chunk) in enumerate(zip(slices, read, strict=True)):
            yield _merged(chunk, places, i * PARSE_CHUNK, old)


def _checked_chunks(
    campaign_dir: Path,
    skip_corrupt: bool,
    log,
    records: Iterable[Path] | None,
    fingerprints: bool = False,
    previous: tuple[Path, pl.DataFrame] | None = None,
) -> Iterator[_Chunk]:
    """The tables chunk by chunk (`_chunks`); a corrupt record stops it (naming the record) unless skipped."""
    if not campaign_dir.is_dir():
        raise RecordError(f"{campaign_dir}: no raw data for this campaign (run `dvc repro` or `benchlib collect`)")
    skipped, n_runs = [], 0
    with closing(_chunks(campaign_dir, records, fingerprints, previous)) as chunks:  # on an error: stop the workers
        for chunk in chunks:
            if chunk.errors and not skip_corrupt:
                raise chunk.errors[0]
            skipped += chunk.errors
            n_runs += len(chunk.runs) + len(chunk.profile_runs)
            yield chunk
    if skipped:
        log(f"parse: skipped {len(skipped)} corrupt record(s) (--skip-corrupt):\n  " + "\n  ".join(map(str, skipped)))
    if not n_runs:
        raise RecordError(f"{campaign_dir}: no complete raw records found")


def build_tables(
    campaign_dir: Path,
    skip_corrupt: bool = False,
    log=_log.warning,
    records: Iterable[Path] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(runs, metrics) of a campaign in memory, checked against the schemas, in run order.

    ``records``: the record directories to read (default: every one found, see survey.survey).
    A campaign too large for memory goes through `parse_campaign`, which writes the same tables.
    """
    chunks = list(_checked_chunks(campaign_dir, skip_corrupt, log, records))
    runs, metrics = pl.concat(c.runs for c in chunks), pl.concat(c.metrics for c in chunks)
    schema.check_metrics(metrics)
    return runs, metrics


def campaign_tables(cdir: Path, label: str) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(runs, metrics, facts) of the records in ``cdir``, a campaign compared with another one; ``label``
    names it in errors. Records say which campaign measured them: another campaign's records copied here
    would compare a campaign with itself (a byte copy of A as B: nothing differs, nothing changed)."""
    try:
        runs, metrics = build_tables(cdir)
    except BenchlibError as exc:
        raise RecordError(f"campaign {label}: {exc}") from None
    foreign = runs.filter(pl.col("campaign") != cdir.name)
    if len(foreign):
        owners = ", ".join(sorted(set(foreign["campaign"])))
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise RecordError(
            f"campaign {label}: {len(foreign)} of {len(runs)} records were measured by campaign "
            f"{owners} ({layout.META} 'campaign'), not {cdir.name}, e.g. {foreign['record'][0]}{more}: "
            "copied records are refused; compare the campaign that measured them"
        )
    return runs, metrics, build_facts(runs)


def build_profile_tables(
    campaign_dir: Path,
    skip_corrupt: bool = False,
    log=_log.warning,
    records: Iterable[Path] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(profile_runs, profiles) of a campaign in memory, in run order; empty where nothing was profiled."""
    chunks = list(_checked_chunks(campaign_dir, skip_corrupt, log, records))
    return pl.concat(c.profile_runs for c in chunks), pl.concat(c.profiles for c in chunks)


@dataclass(frozen=True)
class Parsed:
    runs: int
    failed: int
    metric_rows: int
    profiled: int = 0
    profile_rows: int = 0
    disturbed: int = 0
    read: int = 0  # records read (verified and parsed) this time, corrupt ones included
    reused: int = 0  # records whose rows were taken from the previous tables, unread


TABLES = ("runs", "metrics", "profile_runs", "profiles", "profile_bpf")  # what parse_campaign writes, <name>.parquet


def parse_campaign(
    campaign_dir: Path,
    out_dir: Path,
    skip_corrupt: bool = False,
    log=_log.warning,
    records: Iterable[Path] | None = None,
    plan: str = "",
    incremental: bool = False,
) -> Parsed:
    """The tables of `build_tables` and `build_profile_tables`, written to out_dir/<table>.parquet
    (TABLES) chunk by chunk as the records are parsed, so memory stays about flat however many runs
    the campaign has. Each table carries the set's identity (schema.PARSE_KEY, `identity`), so that
    what reads them can tell tables of one parse from tables of several; ``plan`` is the plan's digest.

    Beside them goes the index of the records parsed (parse_index). ``incremental``: a record the
    index knows unchanged is not read again, its rows are the previous tables'; the tables written
    are the same, row for row and byte for byte in their identity, as a parse that reads every record.
    An index that cannot be used is said (``log``) and every record is read."""
    out_dir.mkdir(parents=True, exist_ok=True)
    schema.remove_stale_temporaries(out_dir, [*(f"{name}.parquet" for name in TABLES), parse_index.INDEX])
    previous = None
    if incremental and (out_dir / parse_index.INDEX).exists():
        index, why = parse_index.load(out_dir, layout.table_path(campaign_dir), list(TABLES))
        if index is None:
            log(f"parse: reading every record, not only the new ones: {why}")
        else:
            previous = (out_dir, index.rows)
    failed = disturbed = read = reused = 0
    indexed = [pl.DataFrame(schema=parse_index.SCHEMA)]
    with ExitStack() as stack:
        out = {name: stack.enter_context(schema.TableWriter(name, out_dir / f"{name}.parquet")) for name in TABLES}
        for chunk in _checked_chunks(campaign_dir, skip_corrupt, log, records, fingerprints=True, previous=previous):
            for name, writer in out.items():
                writer.append(getattr(chunk, name))
            failed += int((chunk.runs["outcome"] == "failed").sum())
            disturbed += int((chunk.runs["outcome"] == "disturbed").sum())
            read += chunk.read
            reused += chunk.reused
            indexed.append(chunk.index)
        ident = identity(campaign_dir.name, plan, {n: w.digest for n, w in out.items()})
        stamp = {schema.PARSE_KEY: json.dumps(ident)}
        for writer in out.values():  # every table written before any replaces the old one
            writer.prepare(stamp)
        for writer in out.values():
            writer.publish()
    # after the tables: an index left from before names other tables, and is not used
    parse_index.write(out_dir, pl.concat(indexed), parse_index.header(layout.table_path(campaign_dir), ident["tables"]))
    return Parsed(
        out["runs"].rows,
        failed,
        out["metrics"].rows,
        out["profile_runs"].rows,
        out["profiles"].rows,
        disturbed=disturbed,
        read=read,
        reused=reused,
    )


def identity(campaign: str, plan: str, digests: dict[str, str]) -> dict[str, str]:
    """One parse's identity: its campaign, the plan's digest, and a digest of the set of tables."""
    tables = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()
    return {"campaign": campaign, "plan": plan, "tables": tables}


def write_tables(runs: pl.DataFrame, metrics: pl.DataFrame, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    schema.write(runs, "runs", out_dir / "runs.parquet")
    schema.write(metrics, "metrics", out_dir / "metrics.parquet")


# What a record's placement and target say that names this session, not the setup: lab ids, namespace
# and pod names, addresses handed out per session, boot IDs. Matched on the last part of a key.
SESSION_KEYS = {
    "lab_id",
    "session",
    "namespace",
    "namespaces",
    "client_pod",
    "server_pod",
    "client_pod_ip",
    "server_pod_ip",
    "service_ip",
    "server_address",
    "boot_id",
    "client_node",
    "server_node",
}
# Measured while a scenario was set up (seconds taken, an agent's usage) or a `record` output that
# observes state (a status, metrics, a map's entries): results, not settings, so two campaigns of
# one setup do not differ by them.
MEASURED_KEY = re.compile(r"(_s|_usage|_status|_metrics|_entries)$")
FACTS_SCHEMA = pl.Schema(
    {"environment": pl.String, "scenario": pl.String, "test": pl.String, "field": pl.String, "value": pl.String}
)


def _flatten(prefix: str, value, out: dict[str, str], session: set[str], settings: bool) -> None:
    """``value`` into ``out`` under dotted keys; ``settings``: the test's own parameters, all kept
    (its duration_s is a setting, a placement's load_s a measurement)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if settings or (str(k) not in SESSION_KEYS and not MEASURED_KEY.search(str(k))):
                _flatten(f"{prefix}.{k}", v, out, session, settings)
        return
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if settings or not any(s in text for s in session):  # e.g. a lab node named after its lab id
        out[prefix] = text


def machine_text(machine: dict | None) -> str | None:
    """A target's machine facts (cpu.machine: CPU model, CPUs, memory) as one phrase; None: not recorded."""
    if not isinstance(machine, dict) or not machine.get("cpu_model"):
        return None
    parts = [str(machine["cpu_model"])]
    if machine.get("cpus"):
        parts.append(f"{machine['cpus']} CPUs")
    if machine.get("memory"):
        kib = str(machine["memory"]).split()[:1]
        # /proc/meminfo's "MemTotal: 8123456 kB" read as GiB
        parts.append(f"{int(kib[0]) / 2**20:.0f} GiB" if kib and kib[0].isdecimal() else str(machine["memory"]))
    return ", ".join(parts)


def record_facts(meta: dict) -> dict[str, str]:
    """The setup a run's meta.json records, flattened to dotted keys (placement.mtu,
    target.versions.kernel, test_params.duration_s, ...), without session identifiers."""
    target = meta.get("target", {})
    session = {str(target[k]) for k in ("lab_id", "session", "namespace") if target.get(k)}
    out: dict[str, str] = {}
    for part in ("test_params", "placement", "target"):
        _flatten(part, meta.get(part, {}), out, session, settings=part == "test_params")
    return out


def build_facts(runs: pl.DataFrame) -> pl.DataFrame:
    """Long table: environment, scenario, test, field, value (the distinct values over the
    configuration's runs, joined by ' | '), read from each run's meta.json (runs.record)."""
    keys = ["environment", "scenario", "test"]
    rows = []
    for r in runs.select(*keys, "record").iter_rows(named=True):
        meta = limits.parse_json(layout.read_file(str(layout.located(r["record"])), layout.META))
        rows += [{**{k: r[k] for k in keys}, "field": f, "value": v} for f, v in record_facts(meta).items()]
    return (
        pl.DataFrame(rows, schema=FACTS_SCHEMA)
        .group_by(*keys, "field")
        .agg(pl.col("value").unique().sort().str.join(" | "))
        .sort(*keys, "field")
    )
