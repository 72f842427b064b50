"""Service-scaling and conntrack scenarios: kube-proxy's rules, really in the packet path."""

import subprocess

import pytest

from benchlib.base.errors import ConfigError
from benchlib.collectors import netperf
from benchlib.settings.loading import load_environment
from benchlib.targets.lab import LabTarget, kubeproxy
from tests.conftest import project_with_environment, require_root, serving_lab

SCENARIOS = [
    "kube-proxy-iptables-4",
    "kube-proxy-iptables-1000",
    "kube-proxy-nftables-4",
    "kube-proxy-nftables-1000",
    "conntrack",
    "notrack",
]


def test_service_counts_expand_into_scenarios(lab_env):
    names = set(lab_env.scenarios)
    for proxy in ("iptables", "nftables"):
        for n in (4, 1000, 5000, 10000):
            sc = lab_env.scenarios[f"kube-proxy-{proxy}-{n}"]
            assert (sc.service_proxy, sc.services, sc.topology) == (proxy, n, "veth-routed")
    assert "kube-proxy-iptables" not in names


def test_services_without_a_proxy_are_rejected(tmp_path, monkeypatch):
    project_with_environment(
        tmp_path,
        monkeypatch,
        "bad",
        "description: x\ntarget: lab\nscenarios:\n  s: {description: y, topology: veth-routed, services: 4}\n",
    )
    with pytest.raises(ConfigError, match="scenarios.s: service_proxy and services go together"):
        load_environment("bad")


def test_rendering_puts_the_benchmark_service_in_the_middle():
    svcs, bench = kubeproxy.services(1000, "198.19.2.10", (12865, 12866))
    assert svcs.index(bench) == 500 and len({s.cluster_ip for s in svcs}) == 1000
    assert all(s.cluster_ip.startswith("198.18.") for s in svcs)  # the lab's own range
    rules = kubeproxy.iptables_rules(svcs, "198.19.0.0/16")
    lines = rules.splitlines()
    service_rules = [r for r in lines if r.startswith("-A KUBE-SERVICES")]
    assert len(service_rules) == 999 + 2  # one per service port
    assert [i for i, r in enumerate(service_rules) if bench.cluster_ip in r] == [500, 501]
    nft = kubeproxy.nftables_ruleset(svcs, "198.19.0.0/16")
    assert nft.count(" : goto service-") == 1001


def counter(ns, path):
    return int(
        subprocess.run(["ip", "netns", "exec", ns, "cat", path], capture_output=True, text=True, check=True).stdout
    )


@pytest.fixture(scope="module")
def service_lab(lab_env):
    require_root()
    with serving_lab(lab_env, SCENARIOS) as target:
        yield target


def crr(lab, scenario):
    pl = lab.placement(scenario)
    inv = netperf.commands("TCP_CRR", pl.server_address, 1, 1, 1, pl.client_cpus, pl.server_cpus)[0]
    out, err = lab.spawn(scenario, "client", inv.argv).communicate(timeout=30)
    assert out, err
    return netperf.parse("TCP_CRR", [out])["connection_rate"]


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.startswith("kube-proxy")])
def test_connections_to_the_cluster_ip_are_translated_by_the_rules(service_lab, scenario):
    pl = service_lab.placement(scenario)
    assert pl.server_address == pl.details["cluster_ip"] != "198.19.2.10"
    n1 = pl.details["nodes"][1]
    before = counter(n1, "/proc/sys/net/netfilter/nf_conntrack_count")
    rate = crr(service_lab, scenario)  # nothing owns the ClusterIP: only the DNAT rules make it answer
    assert rate > 100
    assert counter(n1, "/proc/sys/net/netfilter/nf_conntrack_count") > before
    services = pl.details["services"]
    assert services == int(scenario.rsplit("-", 1)[1])
    # iptables: 8 nat rules per decoy service; nftables: a map element and 3 rules per decoy
    per_service = 8 if pl.details["service_proxy"] == "iptables" else 3
    assert pl.details["service_rules"] >= per_service * (services - 1)
    assert pl.details["service_rules_apply_s"] > 0


def test_iptables_dnat_rule_of_the_benchmark_service_counts_the_connections(service_lab):
    n1 = service_lab.placement("kube-proxy-iptables-1000").details["nodes"][1]
    crr(service_lab, "kube-proxy-iptables-1000")
    saved = subprocess.run(
        ["ip", "netns", "exec", n1, "iptables-save", "-c", "-t", "nat"], capture_output=True, text=True, check=True
    ).stdout
    dnat = [line for line in saved.splitlines() if "DNAT --to-destination 198.19.2.10:12865" in line]
    packets = int(dnat[0].split("]")[0].strip("[").split(":")[0])
    assert packets > 0


def test_notrack_keeps_the_benchmark_traffic_out_of_connection_tracking(service_lab):
    counts = {}
    for scenario in ("conntrack", "notrack"):
        server_node = service_lab.placement(scenario).details["nodes"][2]
        before = counter(server_node, "/proc/sys/net/netfilter/nf_conntrack_count")
        crr(service_lab, scenario)
        counts[scenario] = counter(server_node, "/proc/sys/net/netfilter/nf_conntrack_count") - before
    assert counts["conntrack"] > 100  # every connection left an entry (TIME_WAIT keeps them)
    assert counts["notrack"] == 0


def test_services_on_the_host_topology_are_refused(lab_env):
    env = lab_env.model_copy(
        update={
            "scenarios": {
                **lab_env.scenarios,
                "bad": lab_env.scenarios["kube-proxy-iptables-4"].model_copy(update={"topology": "host"}),
            }
        }
    )
    from benchlib.targets import TargetError

    with pytest.raises(TargetError, match="services need pods"):
        with LabTarget(env, ["bad"], log=lambda m: None):
            pass
