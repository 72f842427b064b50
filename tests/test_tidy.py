"""Raw records -> tidy tables: keys, units, per-side CPU, integrity checks."""

import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from benchlib.records import integrity, layout
from benchlib.tables import tidy
from benchlib.vocabulary import schema


@pytest.fixture
def campaign_copy(short_campaign, tmp_path):
    dst = tmp_path / "short"
    shutil.copytree(short_campaign["dir"], dst)
    return dst


def test_tables_have_one_row_per_run_and_the_expected_metrics(short_campaign, tmp_path):
    runs, metrics = tidy.build_tables(short_campaign["dir"])
    tidy.write_tables(runs, metrics, tmp_path)
    runs, metrics = schema.read_runs(tmp_path / "runs.parquet"), schema.read_metrics(tmp_path / "metrics.parquet")
    assert len(runs) == 8 and set(runs["outcome"]) == {"ok"}
    assert runs["order"].to_list() == sorted(runs["order"])
    assert set(runs["block"]) == {0, 1}
    assert (runs["client_cpus"] >= 1).all() and (runs["server_cpus"] >= 1).all()
    # every run carries its test's parameters; the two tests differ in them
    params = {t: {json.loads(p)["kind"] for p in g["test_params"]} for (t,), g in runs.group_by("test")}
    assert params == {"stream": {"TCP_STREAM"}, "rr": {"TCP_RR"}}
    got = {t: set(zip(g["metric"], g["side"], strict=True)) for (t,), g in metrics.group_by("test")}
    cpu = {(m, s) for m in ("cpu_busy_cores", "cpu_busy_pct") for s in ("client", "server")}
    assert got["stream"] == {("throughput", "none"), ("retransmits", "none")} | cpu
    # the lab runs TCP_RR with client and server on one CPU set (environment.yaml cpu_placement): its CPU once
    shared_cpu = {(m, "total") for m in ("cpu_busy_cores", "cpu_busy_pct")}
    assert (
        got["rr"]
        == {("transaction_rate", "none")}
        | {(m, "none") for m in ("latency_min", "latency_p50", "latency_p90", "latency_p99", "latency_mean")}
        | shared_cpu
    )
    assert metrics["run_id"].n_unique() == 8
    # busy ticks over the ticks the side's CPUs counted (see benchlib.host.cpu): within 100 % however short the window
    assert metrics.filter(metric="cpu_busy_pct")["value"].is_between(0, 100).all()
    # the stream test's client side is busy sending: it cannot be idle
    client = metrics.filter(test="stream", metric="cpu_busy_pct", side="client")
    assert (client["value"] > 20).all()


def test_a_changed_output_file_is_named(campaign_copy):
    rec = layout.find(campaign_copy)[0]
    (rec / "stdout-0.txt").write_text("THROUGHPUT=999999\n")
    with pytest.raises(tidy.RecordError, match=f"{rec}/stdout-0.txt: checksum mismatch"):
        tidy.build_tables(campaign_copy)


def test_truncated_record_is_named_or_skipped_when_told(campaign_copy):
    recs = layout.find(campaign_copy)
    (recs[1] / "cpu.json").unlink()
    meta = recs[2] / "meta.json"
    meta.write_text(meta.read_text()[:100])
    with pytest.raises(tidy.RecordError, match=str(recs[1])):
        tidy.build_tables(campaign_copy)
    messages = []
    runs, _ = tidy.build_tables(campaign_copy, skip_corrupt=True, log=messages.append)
    assert len(runs) == 6
    assert "skipped 2 corrupt record(s)" in messages[0]


def test_a_record_without_checksums_is_refused(campaign_copy):
    rec = layout.find(campaign_copy)[0]
    (rec / "SHA256SUMS").unlink()
    with pytest.raises(tidy.RecordError, match="SHA256SUMS missing"):
        tidy.build_tables(campaign_copy)


def test_an_unparseable_but_intact_record_names_the_record(campaign_copy):
    rec = layout.find(campaign_copy)[0]
    (rec / "stdout-0.txt").write_text("garbage\n")
    meta = json.loads((rec / "meta.json").read_text())
    integrity.write_checksums(rec)
    with pytest.raises(tidy.RecordError, match=f"{rec}: netperf printed no KEY=value"):
        tidy.build_tables(campaign_copy)
    assert meta["outcome"] == "ok"


def test_no_campaign_is_a_clear_error(tmp_path):
    with pytest.raises(tidy.RecordError, match="no raw data for this campaign"):
        tidy.build_tables(tmp_path / "nothing")


def test_a_metric_on_a_side_it_does_not_have_is_refused():
    row = {
        "campaign": "c",
        "environment": "e",
        "scenario": "s",
        "test": "t",
        "streams": 1,
        "message_size": None,
        "block": 0,
        "run_id": "e/s/t/r000",
        "metric": "throughput",
        "value": 1.0,
        "unit": "Gbit/s",
    }

    def table(*rows):
        return pl.DataFrame(list(rows), schema=schema.METRICS_SCHEMA)

    schema.check_metrics(
        table({**row, "side": "none"}, {**row, "metric": "cpu_busy_pct", "unit": "%", "side": "server"})
    )
    schema.check_metrics(schema.empty("metrics"))  # no runs: nothing to refuse
    with pytest.raises(schema.SchemaError, match=r"throughput has side 'client' \(run e/s/t/r000\)"):
        schema.check_metrics(table({**row, "side": "client"}))
    with pytest.raises(schema.SchemaError, match=r"unit 'Mbit/s', expected 'Gbit/s'"):
        schema.check_metrics(table({**row, "side": "none", "unit": "Mbit/s"}))
    with pytest.raises(schema.SchemaError, match=r"not finite, first: throughput = nan \(run e/s/t/r000\)"):
        schema.check_metrics(table({**row, "side": "none", "value": float("nan")}))


def test_tables_are_checked_on_write_and_on_read(tmp_path):
    row = {
        "campaign": "c",
        "environment": "e",
        "scenario": "s",
        "test": "t",
        "streams": 1,
        "message_size": None,
        "block": 0,
        "run_id": "e/s/t/r000",
        "metric": "throughput",
        "value": 1.0,
        "unit": "Gbit/s",
        "side": "none",
    }
    good = pl.DataFrame([row], schema=schema.METRICS_SCHEMA)
    with pytest.raises(schema.SchemaError, match=r"metrics: missing columns \['side'\]"):
        schema.write(good.drop("side"), "metrics", tmp_path / "m.parquet")
    with pytest.raises(schema.SchemaError, match="not finite"):
        schema.write(good.with_columns(value=pl.lit(float("inf"))), "metrics", tmp_path / "m.parquet")
    schema.write(good, "metrics", tmp_path / "m.parquet")
    assert schema.read_metrics(tmp_path / "m.parquet").equals(good)
    # a file written by something else, with a value no metric may have, is refused on read
    good.with_columns(value=pl.lit(float("nan"))).write_parquet(tmp_path / "bad.parquet")
    with pytest.raises(schema.SchemaError, match=r"run e/s/t/r000"):
        schema.read_metrics(tmp_path / "bad.parquet")
    # a string where a number belongs is an error, not a null
    good.with_columns(block=pl.lit("zero")).write_parquet(tmp_path / "typed.parquet")
    with pytest.raises(schema.SchemaError, match="metrics:"):
        schema.read_metrics(tmp_path / "typed.parquet")


def test_a_non_finite_value_in_a_record_names_the_run(campaign_copy):
    rec = layout.find(campaign_copy)[0]
    out = rec / "stdout-0.txt"
    out.write_text(re.sub(r"(?m)^(THROUGHPUT|TRANSACTION_RATE|P50_LATENCY)=.*$", r"\1=nan", out.read_text()))
    integrity.write_checksums(rec)
    # the record's path ends with its run id: the message names the run
    with pytest.raises(tidy.RecordError, match=rf"{re.escape(str(rec))}: netperf \w+='nan' is not a finite"):
        tidy.build_tables(campaign_copy)


# A real campaign's raw records, as `benchlib collect` wrote them: netperf TCP_STREAM and TCP_RR and
# fortio HTTP, 4 Cilium/bridge scenarios x 3 blocks on a local two-node Kubernetes cluster.
REAL_CAMPAIGN = Path(__file__).resolve().parent / "fixtures" / "raw" / "local-cilium-demo-001"


@pytest.fixture
def real_campaign(tmp_path):
    dst = tmp_path / "raw" / REAL_CAMPAIGN.name
    shutil.copytree(REAL_CAMPAIGN, dst)
    return dst


@pytest.mark.parametrize("parallel", [False, True], ids=["one-process", "worker-pool"])
def test_streamed_parse_writes_the_tables_built_in_memory(real_campaign, tmp_path, monkeypatch, parallel):
    if parallel:  # several small chunks through the worker pool, as a large campaign goes
        monkeypatch.setattr(tidy, "PARALLEL_MIN_RECORDS", 10)
        monkeypatch.setattr(tidy, "PARSE_CHUNK", 7)
        monkeypatch.setattr(tidy, "TASKS_AHEAD", 1)
    runs, metrics = tidy.build_tables(real_campaign)
    parsed = tidy.parse_campaign(real_campaign, tmp_path / "out")
    written_runs = schema.read_runs(tmp_path / "out" / "runs.parquet")
    written_metrics = schema.read_metrics(tmp_path / "out" / "metrics.parquet")
    assert_frame_equal(written_runs, runs)
    assert_frame_equal(written_metrics, metrics)
    assert (parsed.runs, parsed.failed, parsed.metric_rows) == (36, 0, len(metrics))
    assert runs["order"].to_list() == list(range(36))  # in run order, as the campaign ran them
    assert set(runs["tool"]) == {"netperf", "fortio"} and metrics["run_id"].n_unique() == 36
    # each run's metric rows follow each other, runs in the runs table's order
    assert metrics["run_id"].unique(maintain_order=True).to_list() == runs["run_id"].to_list()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        [*(f"{t}.parquet" for t in tidy.TABLES), "parse_index.parquet"]
    )  # no parts left


def test_the_parquet_files_have_the_checked_schema(real_campaign, tmp_path):
    tidy.parse_campaign(real_campaign, tmp_path)
    for name, expected in (
        ("runs", schema.RUNS_SCHEMA),
        ("metrics", schema.METRICS_SCHEMA),
        ("profile_runs", schema.PROFILE_RUNS_SCHEMA),
        ("profiles", schema.PROFILES_SCHEMA),
    ):
        assert list(pl.read_parquet_schema(tmp_path / f"{name}.parquet").items()) == list(expected.items())


def test_a_streamed_parse_stops_at_a_corrupt_record_and_leaves_the_old_tables(real_campaign, tmp_path):
    out = tmp_path / "out"
    tidy.parse_campaign(real_campaign, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rec = layout.find(real_campaign)[5]
    (rec / "stdout-0.txt").write_text("garbage\n")
    with pytest.raises(tidy.RecordError, match=f"{rec}/stdout-0.txt: checksum mismatch"):
        tidy.parse_campaign(real_campaign, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing half-written left behind
    messages = []
    parsed = tidy.parse_campaign(real_campaign, out, skip_corrupt=True, log=messages.append)
    assert parsed.runs == 35 and "skipped 1 corrupt record(s)" in messages[0] and str(rec) in messages[0]
    assert str(rec) not in schema.read_runs(out / "runs.parquet")["record"].to_list()


def test_a_streamed_parse_of_no_records_is_a_clear_error(real_campaign, tmp_path):
    for rec in layout.find(real_campaign):
        (rec / "cpu.json").unlink()
    with pytest.raises(tidy.RecordError, match="no complete raw records found"):
        tidy.parse_campaign(real_campaign, tmp_path, skip_corrupt=True, log=lambda m: None)
    assert list(tmp_path.iterdir()) == [tmp_path / "raw"]
