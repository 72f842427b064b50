"""The lab's mesh scenarios: a client run through the proxies, a campaign with a proxy killed."""

from __future__ import annotations

import os
import signal

from benchlib.collectors import netperf
from benchlib.measure import runner
from benchlib.measure.plan import plan_environment
from benchlib.records import layout, record
from tests.conftest import lab_target, short_params


def run_client(target, scenario: str, argv: list[str]) -> str:
    out, err = target.spawn(scenario, "client", argv).communicate(timeout=60)
    assert out.strip(), err
    return out


def rr_run(target, scenario: str) -> dict:
    pl = target.placement(scenario)
    inv = netperf.commands("TCP_RR", pl.server_address, 1, 1, 1, pl.client_cpus, pl.server_cpus)[0]
    return netperf.parse("TCP_RR", [run_client(target, scenario, inv.argv)])


def campaign_with_a_proxy_killed(lab_env, tmp_path, scenario: str, proxy: str):
    """A real two-run campaign of ``scenario`` whose ``proxy`` is killed (SIGKILL) once the first run's
    CPU window has begun: (counts, records in run order, the killed pid)."""
    tests = {"rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 2, "message_size": 1}}
    params = short_params("proxy-killed", [scenario], tests, repetitions=2, retries=0)
    plan = plan_environment(params, "local-lab")
    target = lab_target(lab_env, plan.scenarios, ["netperf"])
    read_usage, killed = target.datapath_usage, []

    def usage_then_kill(sc: str, reset_peak: bool) -> dict:
        out = read_usage(sc, reset_peak)
        if reset_peak and not killed:
            proc = next(proc for p, proc in target._proxies[sc] if p.name == proxy)
            os.kill(proc.pid, signal.SIGKILL)
            killed.append(proc.pid)
        return out

    target.datapath_usage = usage_then_kill
    counts = runner.run_environment(params, plan, target, raw_root=tmp_path, log=lambda m: None)
    recs = sorted(
        (record.load(p) for p in layout.find(layout.campaign_dir("proxy-killed", tmp_path))), key=lambda r: r.order
    )
    return counts, recs, killed[0]
