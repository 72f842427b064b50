"""The benchmark suite's cheapest pieces, in smoke mode, so the code cannot rot.

No timing target is asserted here: BENCHMARKS.md reports those.
"""

import json
import re
import sys
from pathlib import Path

import pytest

from benchlib.records import integrity, layout
from benchlib.tables import tidy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import halfwidths  # noqa: E402
import scale  # noqa: E402
import synth  # noqa: E402


def test_synthetic_records_parse_like_real_ones(tmp_path):
    cdir = synth.generate(tmp_path, runs=200, scenarios=2, seed=3)
    records = layout.find(cdir)
    assert len(records) == 200
    for rec in records[:20]:
        integrity.verify(rec)  # SHA256SUMS as RunRecord.write writes it
    runs, metrics = tidy.build_tables(cdir)
    failed = [r for r in records if json.loads((r / "meta.json").read_text())["outcome"] == "failed"]
    assert len(runs) == 200 and (runs["outcome"] == "failed").sum() == len(failed)
    assert set(runs["scenario"]) == {"host", "scenario-001"} and set(runs["test"]) == set(synth.TESTS)
    tput = metrics.filter(test="tcp_stream_1", metric="throughput")["value"]
    assert tput.n_unique() == len(tput) > 10  # varied run to run, not one copied value
    assert set(metrics.filter(metric="cpu_busy_pct")["side"]) == {"client", "server"}


def test_scale_measures_parse_and_analysis(tmp_path):
    cdir = synth.generate(tmp_path / "raw", runs=200, scenarios=2, seed=4)
    parsed = scale.measure_parse(cdir, tmp_path / "out")
    assert parsed["runs"] == 200 and parsed["metric_rows"] > 200
    assert list(parsed["timings"]) == ["parse: read records + write parquet"]
    analysed = scale.measure_analysis(tmp_path / "out")
    assert (analysed["runs"], analysed["metric_rows"]) == (parsed["runs"], parsed["metric_rows"])
    assert list(analysed["timings"]) == ["analysis: read + check tables", "analysis: analyse.run", "analysis: write"]
    assert "metrics.json" in analysed["digests"] and "values.parquet" in analysed["digests"]
    # the tables read whole, as before: the same files
    assert scale.measure_analysis(tmp_path / "out", in_memory=True)["digests"] == analysed["digests"]


@pytest.mark.slow  # runs the scale benchmark's phases in child processes
def test_scale_prints_each_phase_measured_in_a_child_process(tmp_path, capsys):
    scale.run_size(200, 2, tmp_path, no_analysis=False)
    out = capsys.readouterr().out
    assert out.startswith("scale: 200 runs, ")
    rss = dict((name, float(v)) for name, v in re.findall(r"^(peak RSS, [a-z ]+?) +(\S+) GiB", out, re.M))
    assert set(rss) == {"peak RSS, parse process", "peak RSS, largest parse worker", "peak RSS, analysis process"}
    assert rss["peak RSS, parse process"] > 0.01 and rss["peak RSS, analysis process"] > 0.01  # GiB: read, not 0


@pytest.mark.slow  # three parses in child processes
def test_scale_prints_the_incremental_parse_against_a_full_one(tmp_path, capsys):
    scale.run_incremental(200, 2, tmp_path)  # asserts itself: 1 record read, the same tables
    out = capsys.readouterr().out
    assert out.startswith("scale: incremental parse, 200 records, one of them new; load average ")
    assert re.search(r"^incremental / full +[0-9.e-]+ *$", out, re.M) and "load average after: " in out


def test_scale_replicates_tables_as_one_larger_campaign(tmp_path):
    from benchlib.analysis import stats
    from benchlib.vocabulary import schema

    cdir = synth.generate(tmp_path / "raw", runs=200, scenarios=2, seed=5)
    tidy.parse_campaign(cdir, tmp_path / "one")
    assert scale.replicate(tmp_path / "one", 3, tmp_path / "three") == 600
    runs, metrics = tidy_tables(tmp_path / "three")
    one = schema.read_runs(tmp_path / "one/runs.parquet")
    assert runs["run_id"].n_unique() == 600 and metrics["run_id"].n_unique() <= 600
    assert set(metrics["run_id"]) <= set(runs["run_id"])
    assert runs["block"].n_unique() == 3 * one["block"].n_unique()
    assert (runs["run_id"] == runs.select(pl_run_id())["run_id"]).all()  # layout.run_id's format
    # n triples per configuration; the medians of the repeated values stay the campaign's
    runs1, metrics1 = tidy_tables(tmp_path / "one")
    s1 = stats.summarize(metrics1, runs1)
    s3 = stats.summarize(metrics, runs)
    assert (s3["n"] == 3 * s1["n"]).all() and (s3["median"] == s1["median"]).all()


def pl_run_id():
    import polars as pl

    return (
        pl.struct("environment", "scenario", "test", "block")
        .map_elements(
            lambda r: layout.run_id(r["environment"], r["scenario"], r["test"], r["block"]), return_dtype=pl.String
        )
        .alias("run_id")
    )


def tidy_tables(out):
    from benchlib.vocabulary import schema

    return schema.read_runs(out / "runs.parquet"), schema.read_metrics(out / "metrics.parquet")


def test_cpu_profiles_benchmark_parses_and_analyses(capsys):
    import cpu_profiles

    cpu_profiles.main(["--profiles", "20"])
    out = capsys.readouterr().out
    assert "profiles: 20 profiles (4 configurations x 5 runs)" in out
    for line in ("parse: fold + rows + classification", "analysis: profiles.analyse", "profile_explanations: 2 rows"):
        assert line in out


@pytest.mark.slow  # two parses in child processes
def test_scale_parses_with_the_code_before_and_compares_the_tables(tmp_path, capsys):
    cdir = synth.generate(tmp_path / "raw", runs=200, scenarios=2, seed=5)
    scale.run_parse_before(cdir, Path(__file__).resolve().parent.parent, rounds=1)  # this code as "before"
    out = capsys.readouterr().out
    assert "parse CPU time, after / before (best of each)" in out
    tables = len(tidy.TABLES)
    assert f"tables the same, row for row and in their identity stamp: {tables} of {tables}" in out


def test_halfwidths_sets_the_report_intervals_beside_each_at_95_percent(capsys, monkeypatch):
    """On the real lab-default-003 tables: per test, the report's, the unpaired 95 % and the paired 95 %
    half-widths, the 95 % ones narrower than the report's family-level ones."""
    root = Path(__file__).resolve().parent.parent
    tables = root / "tests/fixtures/tidy/lab-default-003"
    monkeypatch.setattr(sys, "argv", ["halfwidths.py", "--params", str(root / "params.yaml"), "--tables", str(tables)])
    halfwidths.main()
    out = capsys.readouterr().out
    rows = re.findall(r"^(\S+)\s+(report|95 % unpaired|95 % paired)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)$", out, re.M)
    by = {(test, way): (int(n), float(half), int(paired)) for test, way, n, half, _, paired in rows}
    tests = {test for test, _ in by}
    assert len(tests) >= 3 and len(by) == 3 * len(tests)
    for test in tests:
        n, report, _ = by[(test, "report")]
        assert n > 0 and by[(test, "95 % unpaired")][1] < report
        assert by[(test, "95 % paired")][2] > 0  # the lab's blocks pair its comparisons
