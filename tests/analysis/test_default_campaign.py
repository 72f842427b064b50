"""The default campaign as it now runs (lab-default-003: 160 real runs, 10 blocks, TCP_RR and TCP_CRR with
client and server on one CPU set) finds the container overhead, with intervals that
agree with the verdicts and each comparison's detectable effect stated.

tests/fixtures/tidy/lab-default-003/ holds the tables `bash scripts/reproduce.sh` wrote on this machine.
"""

from __future__ import annotations

import polars as pl
import pytest

from benchlib.analysis import stats
from tests.support.analysis_tables import report_comparisons

FIXTURE = "tests/fixtures/tidy/lab-default-003"
CONTAINER_PATHS = ["veth-routed", "bridge", "vxlan"]


@pytest.fixture(scope="module")
def primary() -> pl.DataFrame:
    _, runs, _, rows = report_comparisons(FIXTURE)
    assert set(runs.filter(pl.col("kind").is_in(["TCP_RR", "TCP_CRR"]))["cpu_placement"]) == {"shared"}
    return rows.filter(family=stats.PRIMARY)


@pytest.mark.parametrize("test, metric", [("tcp_rr", "transaction_rate"), ("tcp_crr", "connection_rate")])
def test_every_container_path_is_significantly_slower_than_host(primary, test, metric):
    rows = primary.filter(test=test, metric=metric).sort("scenario")
    assert sorted(rows["scenario"]) == sorted(CONTAINER_PATHS)
    for r in rows.iter_rows(named=True):
        assert r["correction"] == "Holm" and r["p_adj"] < 0.05, r
        assert r["verdict"].endswith(" worse") and r["delta_high"] < 0, r  # its interval excludes 0
        assert r["mde_pct"] < abs(r["delta_pct"]), r  # detectable, and detected


def test_verdicts_agree_with_the_intervals_beside_them(primary):
    for r in primary.iter_rows(named=True):
        significant = r["p_adj"] < 0.05
        excludes_zero = r["delta_low"] > 0 or r["delta_high"] < 0
        if not r["verdict"].startswith(stats.UNCLEAR):
            assert significant == excludes_zero, r
