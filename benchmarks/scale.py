"""Benchmark 5: parse + analysis of synthetic campaigns (10k, 100k, 1M runs), and the report's weight.

For each size, generates the campaign with synth.py (once; reused if RAW
already holds it), then runs what the pipeline runs on it, each phase in a
child process of its own so that its peak memory can be read from
RUSAGE_CHILDREN: `benchlib parse` (tidy.parse_campaign: records parsed and
written to parquet chunk by chunk), then the analysis the notebooks do (load
the tables, CPU normalization, per-configuration summary, comparisons with
the baseline over the report's family of metrics). Prints parse, analysis and
total wall time and each phase's peak RSS per size, parse apart from analysis
so that whether parse memory stays flat as campaigns grow can be read off.
Finally weighs reports/report.html.

    uv run python benchmarks/scale.py [--runs 10000 100000 1000000] [--raw /tmp/bench_synth]

``--incremental`` measures, on each size's campaign, `benchlib parse` after one record was added
(held back from a first parse, then put back: the parse reads it and reuses the other records' rows)
against a full parse of the same campaign, in one run, as a ratio; the machine's load average is
printed before and after, and the two parses' tables are checked to be the same.

``--tables DIR --copies K`` measures the analysis alone (the whole `benchlib analyse` stage, the metrics
scanned) on the tables a parse wrote to DIR, repeated K times as one campaign (blocks and run ids
shifted, start times shifted by the campaign's span): the analysis of a K-times larger campaign (10
copies of 100k runs: 1M; 1000 copies of 10k: 10M) without generating and parsing its records.
``--before CHECKOUT`` first runs the same analysis with the benchlib of another checkout and both
tables read whole, in the same run, and compares every file the two wrote.

``--before CHECKOUT`` without ``--tables`` parses each campaign (``--campaign DIR``, or the synthetic one of
each size) with the code of CHECKOUT and with this code, alternately (``--rounds`` parses each, a child
each), in one run: wall and CPU time of each and their ratios, and whether the four tables are the same.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import synth
from common import figure

from benchlib.settings.project import project_root
from benchlib.tables import tidy


def measure_parse(cdir: Path, out: Path, incremental: bool = False) -> dict:
    """`benchlib parse` on one campaign: the records -> out/{runs,metrics}.parquet, streamed;
    ``incremental``: reading only the records the index in out does not know unchanged."""
    t = time.monotonic()
    parsed = tidy.parse_campaign(cdir, out, incremental=incremental)
    timings = {"parse: read records + write parquet": time.monotonic() - t}
    _log(timings)
    return {
        "runs": parsed.runs,
        "metric_rows": parsed.metric_rows,
        "read": parsed.read,
        "reused": parsed.reused,
        "timings": timings,
    }


def measure_analysis(out: Path, in_memory: bool = False) -> dict:
    """`benchlib analyse` on the tables in out, with the project's analysis settings: the tables read
    and checked (``in_memory``: both read whole, as before; else the metrics scanned), `analyse.run`,
    `analyse.write` of the analysis and metrics.json; timed phase by phase (each logged as it ends).
    Returns the sha256 of every file written, to compare two ways of analysing the same tables."""
    import polars as pl

    from benchlib import analysis
    from benchlib.analysis import analyse
    from benchlib.settings.loading import load_params
    from benchlib.vocabulary import schema

    timings = {}
    t = time.monotonic()
    s = load_params(project_root() / "params.yaml").analysis
    paths = {"runs": out / "runs.parquet", "metrics": out / "metrics.parquet"}
    read = analysis.load_tables if in_memory else analysis.scan_tables
    runs, metrics = read(paths["runs"], paths["metrics"])
    identity = schema.parse_identity(paths["runs"]) or {}
    analyse.check_inputs(paths, runs, metrics, pl.DataFrame(), identity.get("campaign"), identity.get("plan"), out)
    timings["analysis: read + check tables"] = time.monotonic() - t
    _log(timings)
    t = time.monotonic()
    result = analyse.run(runs, metrics, s)
    timings["analysis: analyse.run"] = time.monotonic() - t
    _log(timings)
    t = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-scale-analysis-") as tmp:
        analyse.write(result, tmp, paths["runs"], paths["metrics"], metrics_json=Path(tmp) / "metrics.json")
        digests = {p.name: analyse.sha256(p) for p in sorted(Path(tmp).iterdir()) if p.name != analyse.SETTINGS_FILE}
    timings["analysis: write"] = time.monotonic() - t
    rows = metrics.lazy().select(pl.len()).collect().item()
    return {"runs": len(runs), "metric_rows": rows, "timings": timings, "digests": digests}


def replicate(tables: Path, copies: int, out: Path) -> int:
    """The runs and metrics tables in ``tables`` repeated ``copies`` times into out/, as one campaign of
    ``copies`` times the runs: copy k's blocks are shifted by k x (blocks per configuration), its run
    ids follow, its start and end times are shifted by k x the campaign's span. Streamed from the
    files to the files (polars' streaming engine): 10M runs never held. Returns the runs."""
    import polars as pl

    from benchlib.vocabulary import schema

    runs, metrics = schema.scan(tables / "runs.parquet", "runs"), schema.scan(tables / "metrics.parquet", "metrics")
    stats = runs.select(
        blocks=pl.col("block").max() + 1,
        order=pl.col("order").max() + 1,
        span=pl.col("ended_at").max() - pl.col("started_at").min(),
        n=pl.len(),
    ).collect()
    blocks, order, span, n = stats.row(0)

    def shifted(df: pl.LazyFrame, k: int) -> pl.LazyFrame:
        block = pl.col("block") + k * blocks
        return df.with_columns(
            block=block,
            run_id=pl.concat_str(  # layout.run_id's format
                "environment", "scenario", "test", pl.lit("r") + block.cast(pl.String).str.zfill(3), separator="/"
            ),
        )

    out.mkdir(parents=True, exist_ok=True)
    pl.concat(
        [
            shifted(runs, k).with_columns(
                order=pl.col("order") + k * order,
                started_at=pl.col("started_at") + k * span,
                ended_at=pl.col("ended_at") + k * span,
            )
            for k in range(copies)
        ]
    ).sink_parquet(out / "runs.parquet")
    pl.concat([shifted(metrics, k) for k in range(copies)]).sink_parquet(out / "metrics.parquet")
    return copies * n


def run_tables(tables: Path, copies: int, before: Path | None = None, keep: Path | None = None) -> None:
    """The analysis alone (a child process) on the tables in ``tables`` repeated ``copies`` times: the
    metrics scanned, and with ``before`` (a checkout of the code before) that code's analysis of the
    same tables, both tables read whole, in the same run; the files both wrote compared byte for byte."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        out = keep or Path(tmp)
        runs = replicate(tables, copies, out) if copies > 1 else None
        where = str(out) if copies > 1 else str(tables)
        print(f"scale: {copies} x the tables in {tables}, analysis only; load average {_loadavg()}")
        ways = [("before, tables in memory", ("--in-memory",), before)] if before else []
        ways.append(("after, metrics scanned", (), None))
        seen = {}
        for name, flags, code in ways:
            analysed, wall = _child("--analyse", where, *flags, pythonpath=code)
            print(f"{name}: {analysed['runs']} runs, {analysed['metric_rows']} metric rows")
            for phase, seconds in analysed["timings"].items():
                figure(f"  {phase}", seconds, "s")
            figure("analysis", sum(analysed["timings"].values()), "s", "< 60 s")
            figure("peak RSS, analysis process", analysed["peak_rss_kib"] / 2**20, "GiB", "< 2 GiB")
            figure("child's wall (incl. interpreter start-up)", wall, "s")
            assert runs is None or runs == analysed["runs"]
            seen[name] = analysed
        if before:
            (old, new), names = seen.values(), list(seen)
            figure("analysis time, after / before", sum(new["timings"].values()) / sum(old["timings"].values()))
            figure("peak RSS, after / before", new["peak_rss_kib"] / old["peak_rss_kib"])
            same = [f for f in new["digests"] if old["digests"].get(f) == new["digests"][f]]
            print(f"files byte for byte the same ({names[0]} vs {names[1]}): {len(same)} of {len(new['digests'])}")
            for f in sorted(set(new["digests"]) - set(same)):
                print(f"  differs: {f}")
        print(f"load average after: {_loadavg()}")


def _log(timings: dict) -> None:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"  ... {list(timings)[-1]}: {list(timings.values())[-1]:.1f} s, peak RSS so far {peak:.2f} GiB",
        file=sys.stderr,
        flush=True,
    )


def _child(*args: str, pythonpath: Path | None = None) -> tuple[dict, float]:
    """This script in child mode (a fresh process): its result and wall time; ``pythonpath``: with the
    benchlib package of that checkout instead of this one."""
    import os

    env = {**os.environ, "PYTHONPATH": str(pythonpath)} if pythonpath else None
    t0 = time.monotonic()
    child = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True, env=env)
    stdout, _ = child.communicate()
    wall = time.monotonic() - t0
    if child.returncode:
        raise SystemExit(f"scale: {' '.join(args)} failed (exit {child.returncode})")
    return json.loads(stdout), wall


def report_weight(html: Path) -> None:
    text = html.read_text()
    bundles = re.findall(r"<script[^>]*>(?:(?!</script>).)*?plotly\.js v[\d.]+(?:(?!</script>).)*</script>", text, re.S)
    figure("report.html size", len(text.encode()) / 2**20, "MiB")
    figure("plotly.js copies inlined", len(bundles))
    figure("plotly.js bundle size", sum(map(len, bundles)) / 2**20, "MiB")
    figure("report.html without plotly.js", (len(text) - sum(map(len, bundles))) / 2**20, "MiB")


def run_size(runs: int, scenarios: int, raw: Path, no_analysis: bool) -> None:
    """Generate (once) and measure one campaign size, each phase in a fresh child process; print its figures
    (parse's as soon as it is done)."""
    cdir = synth.generate_once(raw / str(runs), runs, scenarios)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as out:
        parsed, wall = _child("--parse", str(cdir), "--out", out)
        parse = sum(parsed["timings"].values())
        print(
            f"scale: {parsed['runs']} runs, {parsed['metric_rows']} metric rows, {scenarios} scenarios x 4 tests"
            f"{' (parse only)' if no_analysis else ''}"
        )
        figure("parse", parse, "s", "< 120 s" if runs >= 1_000_000 else "")
        figure("peak RSS, parse process", parsed["peak_rss_kib"] / 2**20, "GiB")
        figure("peak RSS, largest parse worker", parsed["worker_peak_rss_kib"] / 2**20, "GiB")
        if not no_analysis:
            analysed, analysis_wall = _child("--analyse", out)
            wall += analysis_wall
            for phase, seconds in analysed["timings"].items():
                figure(f"  {phase}", seconds, "s")
            analysis = sum(analysed["timings"].values())
            figure("analysis", analysis, "s")
            figure("peak RSS, analysis process", analysed["peak_rss_kib"] / 2**20, "GiB", "< 2 GiB")
            figure("parse + analysis", parse + analysis, "s", "< 10 s" if runs <= 100_000 else "")
    figure("children's wall (incl. interpreter start-up)", wall, "s")


def run_parse_before(cdir: Path, before: Path, rounds: int) -> None:
    """The parse of one campaign by the code of ``before`` and by this code, alternately (``rounds``
    times each, a child each), in one run: their times as a ratio, and their tables compared."""
    import polars as pl

    from benchlib.vocabulary import schema

    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        print(f"scale: parse of {cdir}, before ({before}) and after, alternately; load average {_loadavg()}")
        seen = {"before": [], "after": []}
        for k in range(rounds):
            for name, code in (("before", before), ("after", None)):
                out = Path(tmp) / f"{name}-{k}"
                parsed, _ = _child("--parse", str(cdir), "--out", str(out), pythonpath=code)
                seen[name].append((sum(parsed["timings"].values()), parsed, out))
                figure(f"parse, {name} ({k + 1})", seen[name][-1][0], "s")
                figure(f"  CPU time, all its processes ({name} {k + 1})", parsed["cpu_s"], "s")
        (t_old, old, old_out), (t_new, new, new_out) = (min(seen[n], key=lambda t: t[0]) for n in ("before", "after"))
        print(f"{new['runs']} runs, {new['metric_rows']} metric rows")
        figure("parse, after / before (best of each)", t_new / t_old)
        cpu_old, cpu_new = (min(p["cpu_s"] for _, p, _ in seen[n]) for n in ("before", "after"))
        figure("parse CPU time, after / before (best of each)", cpu_new / cpu_old)
        figure("parse CPU time per record, after", cpu_new / new["runs"] * 1e3, "ms")
        for name, parsed in (("before", old), ("after", new)):
            figure(f"peak RSS, parse process, {name}", parsed["peak_rss_kib"] / 2**20, "GiB")
            figure(f"peak RSS, largest parse worker, {name}", parsed["worker_peak_rss_kib"] / 2**20, "GiB")
        same = [
            name
            for name in tidy.TABLES
            if pl.read_parquet(old_out / f"{name}.parquet").equals(pl.read_parquet(new_out / f"{name}.parquet"))
            and schema.parse_identity(old_out / f"{name}.parquet") == schema.parse_identity(new_out / f"{name}.parquet")
        ]
        print(f"tables the same, row for row and in their identity stamp: {len(same)} of {len(tidy.TABLES)}")
        print(f"load average after: {_loadavg()}")


def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def run_incremental(runs: int, scenarios: int, raw: Path) -> None:
    """A full parse of the campaign against a parse after one record was added to it (a child each)."""
    import shutil

    from benchlib.records import layout
    from benchlib.vocabulary import schema

    cdir = synth.generate_once(raw / str(runs), runs, scenarios)
    added = next(layout.walk(cdir))
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        out, fresh, aside = Path(tmp) / "incremental", Path(tmp) / "full", Path(tmp) / "aside"
        shutil.move(added, aside)
        try:
            _child("--parse", str(cdir), "--out", str(out))  # the last parse, without the record
        finally:
            shutil.move(aside, added)
        print(f"scale: incremental parse, {runs} records, one of them new; load average {_loadavg()}")
        inc, _ = _child("--parse", str(cdir), "--out", str(out), "--parse-incremental")
        full, _ = _child("--parse", str(cdir), "--out", str(fresh))
        t_inc, t_full = sum(inc["timings"].values()), sum(full["timings"].values())
        assert (inc["read"], inc["reused"]) == (1, runs - 1), inc
        for name in tidy.TABLES:  # the same tables: the identity stamp digests every table's rows
            assert schema.parse_identity(out / f"{name}.parquet") == schema.parse_identity(fresh / f"{name}.parquet")
        figure("parse, every record read", t_full, "s")
        figure("parse, one record new (1 read, rest reused)", t_inc, "s")
        figure("incremental / full", t_inc / t_full)
        figure("peak RSS, incremental parse process", inc["peak_rss_kib"] / 2**20, "GiB")
        print(f"load average after: {_loadavg()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--scenarios", type=int, default=25)
    p.add_argument("--raw", type=Path, default=Path(tempfile.gettempdir()) / "bench_synth")
    p.add_argument("--parse", type=Path, help=argparse.SUPPRESS)  # child mode: campaign dir to parse
    p.add_argument("--analyse", type=Path, help=argparse.SUPPRESS)  # child mode: tables dir to analyse
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--in-memory", action="store_true", help=argparse.SUPPRESS)  # child mode: both tables read whole
    p.add_argument("--parse-incremental", action="store_true", help=argparse.SUPPRESS)  # child mode
    p.add_argument(
        "--incremental", action="store_true", help="a full parse against one after a record was added (per size)"
    )
    p.add_argument("--no-analysis", action="store_true", help="parse only")
    p.add_argument("--tables", type=Path, help="analysis only, of the runs/metrics tables in this directory")
    p.add_argument("--copies", type=int, default=1, help="with --tables: analyse them repeated this many times")
    p.add_argument(
        "--before",
        type=Path,
        help="with --tables: also analyse with the benchlib package of this checkout (the code before), tables in "
        "memory; else: parse each campaign with it and with this code, alternately, and compare the tables",
    )
    p.add_argument("--rounds", type=int, default=2, help="with --before, parse: parses by each code")
    p.add_argument("--campaign", type=Path, help="with --before, parse: this campaign's records, not synthetic ones")
    p.add_argument("--keep", type=Path, help="with --tables --copies: write the repeated tables here (kept)")
    args = p.parse_args()
    if args.parse or args.analyse:
        result = (
            measure_parse(args.parse, args.out, args.parse_incremental)
            if args.parse
            else measure_analysis(args.analyse, args.in_memory)
        )
        # parse workers are this process's children, measured apart from it
        result["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result["worker_peak_rss_kib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        # CPU time of the process and its workers: less sensitive than wall time to a shared machine's load
        result["cpu_s"] = sum(
            u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        )
        print(json.dumps(result))
        return
    if args.tables:
        run_tables(args.tables, args.copies, args.before, args.keep)
        return
    if args.before:
        for cdir in (
            [args.campaign]
            if args.campaign
            else (synth.generate_once(args.raw / str(n), n, args.scenarios) for n in args.runs)
        ):
            run_parse_before(cdir, args.before, args.rounds)
        return
    if args.incremental:
        for runs in args.runs:
            run_incremental(runs, args.scenarios, args.raw)
        return
    for runs in args.runs:
        run_size(runs, args.scenarios, args.raw, args.no_analysis)
    html = project_root() / "reports" / "report.html"
    if html.exists():
        report_weight(html)


if __name__ == "__main__":
    main()
