"""Raw records -> tidy tables: keys, units, per-side CPU, integrity checks."""
import json
import shutil

import pandas as pd
import pytest

from benchlib import record, schema, tidy


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
    assert runs["order"].tolist() == sorted(runs["order"])
    assert set(runs["block"]) == {0, 1}
    assert (runs["client_cpus"] >= 1).all() and (runs["server_cpus"] >= 1).all()
    got = metrics.groupby("test").apply(lambda g: set(zip(g.metric, g.side)), include_groups=False).to_dict()
    cpu = {(m, s) for m in ("cpu_busy_cores", "cpu_busy_pct") for s in ("client", "server")}
    assert got["stream"] == {("throughput", "none"), ("retransmits", "none")} | cpu
    assert got["rr"] == {("transaction_rate", "none")} | {(m, "none") for m in (
        "latency_min", "latency_p50", "latency_p90", "latency_p99", "latency_mean")} | cpu
    per_run = metrics.groupby(["scenario", "test", "run_id"]).size()
    assert len(per_run) == 8
    # /proc/stat counts 1/100 s ticks: over these 0.6 s windows a fully busy
    # CPU can read up to two ticks (about 3 %) over 100 %.
    assert (metrics.loc[metrics.metric == "cpu_busy_pct", "value"].between(0, 104)).all()
    # the stream test's client side is busy sending: it cannot be idle
    client = metrics[(metrics.test == "stream") & (metrics.metric == "cpu_busy_pct") & (metrics.side == "client")]
    assert (client["value"] > 20).all()


def test_a_changed_output_file_is_named(campaign_copy):
    rec = record.find(campaign_copy)[0]
    (rec / "stdout-0.txt").write_text("THROUGHPUT=999999\n")
    with pytest.raises(tidy.RecordError, match=f"{rec}/stdout-0.txt: checksum mismatch"):
        tidy.build_tables(campaign_copy)


def test_truncated_record_is_named_or_skipped_when_told(campaign_copy):
    recs = record.find(campaign_copy)
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
    rec = record.find(campaign_copy)[0]
    (rec / "SHA256SUMS").unlink()
    with pytest.raises(tidy.RecordError, match="SHA256SUMS missing"):
        tidy.build_tables(campaign_copy)


def test_an_unparseable_but_intact_record_names_the_record(campaign_copy):
    rec = record.find(campaign_copy)[0]
    (rec / "stdout-0.txt").write_text("garbage\n")
    meta = json.loads((rec / "meta.json").read_text())
    record.write_checksums(rec)
    with pytest.raises(tidy.RecordError, match=f"{rec}: netperf printed no KEY=value"):
        tidy.build_tables(campaign_copy)
    assert meta["outcome"] == "ok"


def test_no_campaign_is_a_clear_error(tmp_path):
    with pytest.raises(tidy.RecordError, match="no raw data for this campaign"):
        tidy.build_tables(tmp_path / "nothing")


def test_a_metric_on_a_side_it_does_not_have_is_refused():
    row = {"campaign": "c", "environment": "e", "scenario": "s", "test": "t", "streams": 1, "message_size": None,
           "block": 0, "run_id": "e/s/t/r000", "metric": "throughput", "value": 1.0, "unit": "Gbit/s"}
    schema.check_metrics(pd.DataFrame([{**row, "side": "none"}, {**row, "metric": "cpu_busy_pct", "unit": "%",
                                                                  "side": "server"}]))
    schema.check_metrics(pd.DataFrame(columns=schema.METRICS_SCHEMA.names))  # no runs: nothing to refuse
    with pytest.raises(schema.SchemaError, match=r"throughput has side 'client' \(run e/s/t/r000\)"):
        schema.check_metrics(pd.DataFrame([{**row, "side": "client"}]))
