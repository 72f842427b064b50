"""Benchmark 5: parse + analysis of synthetic 10k- and 100k-run campaigns, and the report's weight.

For each size, generates the campaign with synth.py (once; reused if RAW
already holds it), then, in a child process of its own so that its peak
memory can be read from RUSAGE_CHILDREN, runs what the pipeline runs on it:
`benchlib parse` (tidy.build_tables + write_tables) and the analysis the
notebooks do (CPU normalization, per-configuration summary, comparisons with
the baseline over the report's family of metrics). Prints parse, analysis and
total wall time and the peak RSS per size. Finally weighs reports/report.html.

    uv run python benchmarks/scale.py [--runs 10000 100000] [--raw /tmp/bench_synth]
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

import polars as pl

from benchlib import tidy
from benchlib.config import project_root

from common import figure
import synth


def measure(cdir: Path, out: Path, with_analysis: bool = True) -> dict:
    """The pipeline's work on one campaign, timed phase by phase (each phase logged as it ends)."""
    from benchlib import analysis
    from benchlib.analysis import normalize, stats
    timings = {}
    t = time.monotonic()
    runs, metrics = tidy.build_tables(cdir)
    timings["parse: read records"] = time.monotonic() - t
    t = time.monotonic()
    tidy.write_tables(runs, metrics, out)
    timings["parse: write parquet"] = time.monotonic() - t
    _log(timings)
    if not with_analysis:
        return {"runs": len(runs), "metric_rows": len(metrics), "timings": timings}
    t = time.monotonic()
    p = analysis.default_parameters(project_root() / "params.yaml")
    runs, metrics = analysis.load_tables(out / "runs.parquet", out / "metrics.parquet")
    values = normalize.with_cpu_at_target(metrics, runs, target_gbps=p["cpu_target_gbps"],
                                          per_transactions=p["rr_per_transactions"],
                                          per_connections=p["crr_per_connections"])
    timings["analysis: load + normalize"] = time.monotonic() - t
    _log(timings)
    t = time.monotonic()
    family = values.filter(pl.col("metric").is_in(p["family_metrics"]))
    stats.summarize(values, runs, alpha=p["alpha"])
    timings["analysis: summarize"] = time.monotonic() - t
    _log(timings)
    t = time.monotonic()
    stats.compare(family, runs, baseline=p["baseline"], alpha=p["alpha"], correction=p["correction"],
                  noise_band_pct=p["noise_band_pct"], seed=p["seed"])
    timings["analysis: compare"] = time.monotonic() - t
    return {"runs": len(runs), "metric_rows": len(metrics), "timings": timings}


def _log(timings: dict) -> None:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"  ... {list(timings)[-1]}: {list(timings.values())[-1]:.1f} s, peak RSS so far {peak:.2f} GiB",
          file=sys.stderr, flush=True)


def report_weight(html: Path) -> None:
    text = html.read_text()
    bundles = re.findall(r"<script[^>]*>(?:(?!</script>).)*?plotly\.js v[\d.]+(?:(?!</script>).)*</script>",
                         text, re.S)
    figure("report.html size", len(text.encode()) / 2**20, "MiB")
    figure("plotly.js copies inlined", len(bundles))
    figure("plotly.js bundle size", sum(map(len, bundles)) / 2**20, "MiB")
    figure("report.html without plotly.js", (len(text) - sum(map(len, bundles))) / 2**20, "MiB")


def run_size(runs: int, scenarios: int, raw: Path, no_analysis: bool) -> None:
    """Generate (once) and measure one campaign size in a fresh child process; print its figures."""
    cdir = synth.generate_once(raw / str(runs), runs, scenarios)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as out:
        t0 = time.monotonic()
        child = subprocess.Popen([sys.executable, __file__, "--measure", str(cdir), "--out", out,
                                  *(["--no-analysis"] if no_analysis else [])], stdout=subprocess.PIPE, text=True)
        stdout, _ = child.communicate()
        wall = time.monotonic() - t0
    if child.returncode:
        raise SystemExit(f"scale: measuring {runs} runs failed (exit {child.returncode})")
    result = json.loads(stdout)
    t = result["timings"]
    parse = sum(v for k, v in t.items() if k.startswith("parse"))
    analysis = sum(v for k, v in t.items() if k.startswith("analysis"))
    print(f"scale: {result['runs']} runs, {result['metric_rows']} metric rows, {scenarios} scenarios x 4 tests"
          f"{' (parse only)' if no_analysis else ''}")
    for phase, seconds in t.items():
        figure(f"  {phase}", seconds, "s")
    figure("parse", parse, "s")
    figure("analysis", analysis, "s")
    figure("parse + analysis", parse + analysis, "s", "< 10 s" if runs <= 10_000 else "< 60 s")
    figure("child wall (incl. interpreter start-up)", wall, "s")
    figure("peak RSS, analysis process", result["peak_rss_kib"] / 2**20, "GiB", "< 2 GiB")
    figure("peak RSS, largest parse worker", result["worker_peak_rss_kib"] / 2**20, "GiB")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--scenarios", type=int, default=25)
    p.add_argument("--raw", type=Path, default=Path(tempfile.gettempdir()) / "bench_synth")
    p.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # child mode: campaign dir
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--no-analysis", action="store_true", help="parse only")
    args = p.parse_args()
    if args.measure:
        result = measure(args.measure, args.out, not args.no_analysis)
        # the parse workers are this process's children, measured apart from it
        result["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result["worker_peak_rss_kib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(json.dumps(result))
        return
    for runs in args.runs:
        run_size(runs, args.scenarios, args.raw, args.no_analysis)
    html = project_root() / "reports" / "report.html"
    if html.exists():
        report_weight(html)


if __name__ == "__main__":
    main()
