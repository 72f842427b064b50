"""The lab's topologies carry traffic on the path they claim, and leave nothing behind."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from benchlib.collectors import netperf
from benchlib.settings.loading import load_environment
from benchlib.targets import TargetError
from benchlib.targets.lab import LabTarget, clean_leftovers, list_namespaces
from tests.conftest import REPO, lab_namespaces, require_root


def counters(ns, dev):
    stats = json.loads(
        subprocess.run(
            ["ip", "-n", ns, "-j", "-s", "link", "show", "dev", dev], capture_output=True, text=True, check=True
        ).stdout
    )[0]["stats64"]
    return {
        "rx": stats["rx"]["packets"],
        "tx": stats["tx"]["packets"],
        "rx_bytes": stats["rx"]["bytes"],
        "tx_bytes": stats["tx"]["bytes"],
    }


def route_dev(ns, address):
    return json.loads(
        subprocess.run(
            ["ip", "-n", ns, "-j", "route", "get", address], capture_output=True, text=True, check=True
        ).stdout
    )[0]["dev"]


def links(ns):
    return {
        link["ifname"]
        for link in json.loads(
            subprocess.run(["ip", "-n", ns, "-j", "link"], capture_output=True, text=True, check=True).stdout
        )
    }


def transactions(lab, scenario):
    """Run 1 s of TCP_RR through the scenario; return the transactions netperf counted."""
    pl = lab.placement(scenario)
    inv = netperf.commands("TCP_RR", pl.server_address, 1, 1, 1, pl.client_cpus, pl.server_cpus)[0]
    out, err = lab.spawn(scenario, "client", inv.argv).communicate(timeout=30)
    return netperf.parse("TCP_RR", [out])["transaction_rate"]


# (namespace role, device, direction) that every request must cross, per scenario
PATHS = {
    "host": [("n1", "eth0", "tx"), ("n2", "eth0", "rx")],
    "veth-routed": [("n1", "veth0", "rx"), ("n1", "eth0", "tx"), ("n2", "eth0", "rx"), ("n2", "veth0", "tx")],
    "bridge": [("n1", "br0", "rx"), ("n1", "eth0", "tx"), ("n2", "eth0", "rx"), ("n2", "br0", "tx")],
    "vxlan": [
        ("n1", "br0", "rx"),
        ("n1", "vxlan0", "tx"),
        ("n1", "eth0", "tx"),
        ("n2", "eth0", "rx"),
        ("n2", "vxlan0", "rx"),
        ("n2", "br0", "tx"),
    ],
}


@pytest.mark.parametrize("scenario", list(PATHS))
def test_traffic_crosses_the_scenario_path(lab, scenario):
    nodes = lab.placement(scenario).details["nodes"]
    role_ns = {"n1": nodes[1], "n2": nodes[2]}
    before = {(r, d): counters(role_ns[r], d) for r, d, _ in PATHS[scenario]}
    rate = transactions(lab, scenario)
    assert rate > 100
    for role, dev, direction in PATHS[scenario]:
        delta = counters(role_ns[role], dev)[direction] - before[(role, dev)][direction]
        # each transaction is at least one request packet on the way there
        assert delta >= rate * 0.9, f"{scenario}: {role}/{dev} {direction} grew by {delta}, expected >= {rate:.0f}"


def test_routes_and_devices_match_the_topology(lab):
    n1 = {sc: lab.placement(sc).details["nodes"][1] for sc in PATHS}
    assert route_dev(n1["host"], "198.18.0.2") == "eth0"
    assert route_dev(n1["veth-routed"], "198.19.2.10") == "eth0"
    assert route_dev(n1["bridge"], "198.19.2.10") == "eth0"
    assert route_dev(n1["vxlan"], "198.19.2.10") == "vxlan0"
    assert not links(n1["veth-routed"]) & {"br0", "vxlan0"}
    assert "vxlan0" not in links(n1["bridge"])
    pod = lab.namespace("veth-routed", "client")
    addrs = json.loads(
        subprocess.run(
            ["ip", "-n", pod, "-j", "addr", "show", "eth0"], capture_output=True, text=True, check=True
        ).stdout
    )[0]["addr_info"]
    assert [(a["local"], a["prefixlen"]) for a in addrs if a["family"] == "inet"] == [("198.19.1.10", 32)]


def test_vxlan_really_encapsulates(lab):
    n1 = lab.placement("vxlan").details["nodes"][1]
    wire0, tunnel0 = counters(n1, "eth0"), counters(n1, "vxlan0")
    transactions(lab, "vxlan")
    wire = counters(n1, "eth0")["tx_bytes"] - wire0["tx_bytes"]
    tunnel = counters(n1, "vxlan0")["tx_bytes"] - tunnel0["tx_bytes"]
    packets = counters(n1, "vxlan0")["tx"] - tunnel0["tx"]
    # outer Ethernet + IPv4 + UDP + VXLAN headers: 50 bytes per packet on the wire
    assert wire - tunnel >= 50 * packets * 0.95


def test_receive_processing_is_steered_to_each_side(lab):
    for side, cpus in (("client", lab.client_cpus), ("server", lab.server_cpus)):
        ns = lab.namespace("bridge", side)
        mask = subprocess.run(
            ["ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/queues/rx-0/rps_cpus"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert int(mask.replace(",", ""), 16) == sum(1 << c for c in cpus)


class Boom(Exception):
    pass


def test_teardown_after_an_error_leaves_nothing(lab_env):
    require_root()
    with pytest.raises(Boom):
        with LabTarget(lab_env, ["host", "vxlan"], log=lambda m: None) as target:
            lab_id = target.lab_id
            assert len(lab_namespaces(lab_id)) == 6
            raise Boom()
    assert lab_namespaces(lab_id) == []


KILLED_LAB = """
import sys, time
from benchlib.measure import runner
from benchlib.collectors import netperf
from benchlib.settings.loading import load_environment
from benchlib.targets.lab import LabTarget
env = load_environment("local-lab")
serving = runner.serving(LabTarget(env, ["host", "bridge"], servers=[netperf.SERVER], log=lambda m: None))
lab = serving.__enter__()  # never left: the test kills this process
print(lab.lab_id, flush=True)
time.sleep(600)
"""


def test_leftovers_of_a_killed_campaign_are_removed_and_live_labs_kept(lab):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_LAB], stdout=subprocess.PIPE, text=True, cwd=REPO)
    lab_id = proc.stdout.readline().strip()
    assert len(lab_namespaces(lab_id)) == 6
    servers = subprocess.run(
        ["ip", "netns", "pids", f"{lab_id}-host-n2"], capture_output=True, text=True
    ).stdout.split()
    assert servers, "netserver should be running in the killed lab's server node"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(lab_namespaces(lab_id)) == 6  # SIGKILL gave it no chance to clean up
    [logdir] = glob.glob(f"/tmp/{lab_id}-*")  # the servers' logs, left as well
    removed = clean_leftovers(log=lambda m: None)
    assert sorted(removed) == sorted(
        [logdir]
        + [
            f"{lab_id}-{sc}-{r}"
            for sc, rs in (("host", ("n1", "n2")), ("bridge", ("n1", "n2", "p1", "p2")))
            for r in rs
        ]
    )
    assert lab_namespaces(lab_id) == [] and not os.path.exists(logdir)
    time.sleep(0.2)
    assert not any(alive(pid) for pid in servers)
    assert len(lab_namespaces(lab.lab_id)) == 14  # the live session lab is untouched


def alive(pid):
    """Running, as opposed to gone or a zombie waiting for its (re)parent to reap it."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


NOT_ROOT = """
import os, sys
from benchlib import cli, collectors
# load every module now: as nobody, Python cannot read its library under /root (mode 0700) here
collectors.get("netperf"); import shlex, json, platform
os.setgid(65534); os.setuid(65534)
sys.exit(cli.main(["lab", "probe"]))
"""


def test_without_root_the_probe_says_what_is_missing_and_creates_nothing():
    require_root()
    before = set(list_namespaces())
    proc = subprocess.run([sys.executable, "-c", NOT_ROOT], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert "root privileges" in proc.stderr
    assert set(list_namespaces()) == before


def test_preflight_names_missing_cpus(lab_env):
    env = load_environment("local-lab").model_copy(
        update={
            "cpus": lab_env.model_validate({**lab_env.model_dump(), "cpus": {"client": [0], "server": [4096]}}).cpus
        }
    )
    with pytest.raises(TargetError, match="CPUs \\[4096\\]"):
        LabTarget(env, ["host"]).__enter__()
