"""CPU normalization: sum first, then divide, per run."""

from __future__ import annotations

import polars as pl
import pytest

from benchlib.analysis import normalize
from benchlib.vocabulary.schema import METRICS_SCHEMA
from tests.support.analysis_tables import make_tables


def one_run(work_metric, work, client_cores, server_cores, cpus=(2, 2)):
    cols = {
        (work_metric, "none"): [work],
        ("cpu_busy_cores", "client"): [client_cores],
        ("cpu_busy_cores", "server"): [server_cores],
    }
    return make_tables({("host", "t"): cols}, cpus=cpus)


def by_side(df):
    return dict(zip(df["side"], df["value"], strict=True))


def test_stream_cpu_at_100_gbps():
    runs, metrics = one_run("throughput", 20.0, client_cores=1.0, server_cores=0.5, cpus=(2, 2))
    out = normalize.cpu_at_target(metrics, runs, target_gbps=100)
    # client 1.0/2 = 50 %, server 25 %, both 1.5/4 = 37.5 %; 100 Gbit/s is 5x the measured 20
    assert by_side(out) == pytest.approx({"client": 250.0, "server": 125.0, "total": 187.5})
    assert set(out["unit"]) == {"% CPU @ 100 Gbit/s"}
    assert out.schema == METRICS_SCHEMA


def test_total_sums_cores_before_dividing():
    # unequal CPU counts: the mean of the two side percentages would be (100 + 25) / 2 = 62.5
    runs, metrics = one_run("throughput", 50.0, client_cores=1.0, server_cores=1.0, cpus=(1, 4))
    assert by_side(normalize.cpu_at_target(metrics, runs, target_gbps=50))["total"] == pytest.approx(40.0)


def test_target_is_a_parameter():
    runs, metrics = one_run("throughput", 20.0, 1.0, 0.5)
    at_50 = by_side(normalize.cpu_at_target(metrics, runs, target_gbps=50))
    at_100 = by_side(normalize.cpu_at_target(metrics, runs, target_gbps=100))
    assert at_100["client"] == pytest.approx(2 * at_50["client"])


def test_rr_per_transactions_and_crr_per_connections():
    runs, metrics = one_run("transaction_rate", 20_000, client_cores=0.5, server_cores=0.25, cpus=(1, 1))
    rr = normalize.cpu_at_target(metrics, runs, per_transactions=10_000)
    assert by_side(rr) == pytest.approx({"client": 25.0, "server": 12.5, "total": 18.75})
    assert set(rr["unit"]) == {"% CPU @ 10000 trans/s"}
    runs, metrics = one_run("connection_rate", 5_000, client_cores=0.5, server_cores=0.5, cpus=(1, 1))
    crr = normalize.cpu_at_target(metrics, runs, per_connections=1_000)
    assert by_side(crr)["client"] == pytest.approx(10.0)
    assert set(crr["unit"]) == {"% CPU @ 1000 conn/s"}


def test_runs_without_work_are_left_out():
    runs, metrics = make_tables(
        {
            ("host", "t"): {
                ("throughput", "none"): [10.0, 0.0],
                ("cpu_busy_cores", "client"): [1.0, 1.0],
                ("cpu_busy_cores", "server"): [1.0, 1.0],
            }
        }
    )
    out = normalize.cpu_at_target(metrics, runs)
    assert set(out["run_id"]) == {"host-t-0"}


def test_per_run_cpu_keeps_keys_and_work(lab_tables):
    runs, metrics = lab_tables
    per_run = normalize.per_run_cpu(metrics, runs)
    ok = runs.filter(outcome="ok")
    assert len(per_run) == len(ok)  # one row per successful run
    assert per_run["message_size"].is_null().all()  # null keys survive the joins
    crr = per_run.filter(test="tcp_crr")
    assert set(crr["work_metric"]) == {"connection_rate"}


def test_with_cpu_at_target_appends_rows(lab_tables):
    runs, metrics = lab_tables
    both = normalize.with_cpu_at_target(metrics, runs)
    added = both.filter(metric="cpu_pct_at_target")
    assert len(both) == len(metrics) + len(added)
    assert len(added) == 3 * len(normalize.per_run_cpu(metrics, runs))
    assert isinstance(added, pl.DataFrame) and added["value"].is_finite().all()
