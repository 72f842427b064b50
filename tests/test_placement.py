"""The lab's CPU placement per test kind (split or shared) and the end of netserver's TCP_CRR wait,
on the real lab with real netperf."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import polars as pl
import pytest

from benchlib.analysis import normalize
from benchlib.collectors import netperf
from benchlib.measure import runner
from benchlib.measure.plan import plan_environment
from benchlib.records import layout, record
from benchlib.tables import tidy
from benchlib.targets.lab import LabTarget
from tests.conftest import lab_target, require_root, short_params

RR = {"tool": "netperf", "kind": "TCP_RR", "duration_s": 1, "message_size": 1}
STREAM = {"tool": "netperf", "kind": "TCP_STREAM", "duration_s": 1, "message_size": 65536}
CRR = {"tool": "netperf", "kind": "TCP_CRR", "duration_s": 2, "message_size": 1}


def rps_mask(lab, scenario: str, side: str) -> int:
    ns = lab.namespace(scenario, side)
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/queues/rx-0/rps_cpus"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.replace(",", ""), 16)


def bits(cpus: list[int]) -> int:
    return sum(1 << c for c in cpus)


def campaign(
    tmp_path, env, name: str, scenarios: list[str], tests: dict, target=None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    require_root()
    params = short_params(name, scenarios, tests, repetitions=1, retries=1)
    plan = plan_environment(params, "local-lab")
    runner.run_environment(
        params, plan, target or lab_target(env, plan.scenarios), raw_root=tmp_path, log=lambda m: None
    )
    return tidy.build_tables(tmp_path / name)


def test_the_default_lab_shares_cpus_for_rr_and_crr_only(lab_env):
    assert lab_env.cpu_placement == {"TCP_RR": "shared", "TCP_CRR": "shared"}


def test_shared_placement_moves_server_and_receive_processing_to_the_client_cpus_and_back(lab):
    shared = lab.placement_for("bridge", "TCP_RR")
    assert shared.client_cpus == shared.server_cpus == lab.client_cpus != lab.server_cpus
    assert shared.details["cpu_placement"] == "shared"
    assert rps_mask(lab, "bridge", "server") == rps_mask(lab, "bridge", "client") == bits(lab.client_cpus)
    split = lab.placement_for("bridge", "TCP_STREAM")
    assert (split.client_cpus, split.server_cpus) == (lab.client_cpus, lab.server_cpus)
    assert split.details["cpu_placement"] == "split"
    assert rps_mask(lab, "bridge", "server") == bits(lab.server_cpus)


def test_a_shared_run_binds_both_netperf_ends_to_one_cpu_and_counts_its_cpu_once(tmp_path, lab_env):
    runs, metrics = campaign(tmp_path, lab_env, "place", ["bridge"], {"rr": RR, "stream": STREAM})
    assert runs.select("test", "cpu_placement", "outcome").sort("test").rows() == [
        ("rr", "shared", "ok"),
        ("stream", "split", "ok"),
    ]
    rr = record.load(Path(runs.filter(test="rr")["record"][0]))
    out = rr.stdouts[0]
    # what netperf itself printed about where its two ends ran
    keys = netperf.parse_keyval(out)
    assert keys["LOCAL_CPU_BIND"] == keys["REMOTE_CPU_BIND"] == str(rr.placement["client_cpus"][0])
    cpu_rows = metrics.filter(metric="cpu_busy_cores")
    assert sorted(cpu_rows.filter(test="rr")["side"]) == ["total"]
    assert sorted(cpu_rows.filter(test="stream")["side"]) == ["client", "server"]
    # the path's CPU per 10k transactions/s is the shared set's busy %, not the sum of two copies of it
    at = normalize.cpu_at_target(metrics, runs).filter(test="rr")
    rate = metrics.filter(metric="transaction_rate")["value"][0]
    busy = metrics.filter(metric="cpu_busy_pct", side="total")["value"][0]
    assert at["side"].to_list() == ["total"]
    assert at["value"][0] == pytest.approx(busy * 10_000 / rate)
    assert 0 < busy <= 104  # /proc/stat ticks: a busy CPU can read a tick or two over 100 % in 0.4 s


def test_a_crr_run_ends_with_its_test_instead_of_four_seconds_later(tmp_path, lab_env):
    runs, metrics = campaign(tmp_path, lab_env, "crr", ["host"], {"crr": CRR})
    assert runs["outcome"].to_list() == ["ok"], runs["failure_reason"].to_list()
    # with the pad: >= 6 s; with the timer fired only at the margin's end: >= 2.5 s
    assert CRR["duration_s"] <= runs["duration_s"][0] < CRR["duration_s"] + runner.SERVER_WAIT_MARGIN_S
    rec = record.load(layout.find(tmp_path / "crr")[0])
    elapsed = float(netperf.parse_keyval(rec.stdouts[0])["ELAPSED_TIME"])
    assert elapsed == pytest.approx(CRR["duration_s"], abs=0.1)  # the client measured its full test time
    assert metrics.filter(metric="connection_rate")["value"][0] > 100


def test_where_the_target_cannot_end_it_the_run_waits_out_the_pad(tmp_path, lab_env):
    class NoEarlyEnd(LabTarget):  # as the kubernetes and ssh targets: no signal into the server's process
        def end_server_wait(self, scenario, server, latest):
            return False

    target = NoEarlyEnd(lab_env, ["host"], servers=[netperf.SERVER], commands=["netperf"], log=lambda m: None)
    runs, _ = campaign(tmp_path, lab_env, "pad", ["host"], {"crr": CRR}, target=target)
    assert runs["outcome"].to_list() == ["ok"]
    assert runs["duration_s"][0] >= CRR["duration_s"] + netperf.CRR_PAD_S


def test_a_server_timer_fired_mid_test_fails_the_run_instead_of_shortening_it(tmp_path, lab_env, monkeypatch):
    monkeypatch.setattr(runner, "SERVER_WAIT_MARGIN_S", -1.0)  # fire it 1 s before the client is done
    runs, _ = campaign(tmp_path, lab_env, "early", ["host"], {"crr": {**CRR, "duration_s": 3}})
    assert runs["outcome"].to_list() == ["failed"], json.dumps(runs.row(0, named=True), default=str)
