"""Scenarios on clusters of their own (kubernetes.clusters, a scenario's cluster:) without a cluster:
the settings refused with the key named, which campaigns stand side by side and which go in rounds,
the schedule that interleaves them, and collect's look at each cluster's API before its first run. On
real clusters side by side: tests/test_kubernetes.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from benchlib.base.errors import ConfigError
from benchlib.measure import runner
from benchlib.measure.plan import Plan
from benchlib.settings.environment import Environment
from benchlib.targets import Placement, TargetError, registry
from benchlib.targets.kubernetes import KubernetesTarget
from benchlib.targets.kubernetes.clusters import ClustersTarget, cluster_machine, cluster_settings
from tests.conftest import short_params


def env_of(scenarios: dict, clusters: dict | None = None, **settings) -> Environment:
    return Environment.model_validate(
        {
            "name": "k8s-arms",
            "description": "clusters side by side",
            "target": "kubernetes",
            "kubernetes": {
                "kubeconfig": "/var/lib/benchlib-k8s/admin.kubeconfig",
                "image": "localhost/benchlib/bench:1",
                "quiet": {"pid_dir": "/var/lib/benchlib-k8s/run"},
                "clusters": clusters
                if clusters is not None
                else {
                    "b": {
                        "kubeconfig": "/var/lib/benchlib-k8s-b/admin.kubeconfig",
                        "context": "benchlib-b",
                        "quiet": {"pid_dir": "/var/lib/benchlib-k8s-b/run"},
                    }
                },
                **settings,
            },
            "scenarios": scenarios,
        }
    )


BRIDGE = {"description": "bridge", "placement": "pod-to-pod", "apply": ["echo bridge"]}
SAME_NODE = {**BRIDGE, "description": "bridge, one node", "placement": "same-node"}
CILIUM = {"description": "cilium", "placement": "pod-to-pod", "cluster": "b", "apply": ["echo cilium"]}


def target_of(env: Environment) -> ClustersTarget | KubernetesTarget:
    cls = registry.get("kubernetes", env, list(env.scenarios))
    return cls(env, list(env.scenarios), log=lambda m: None)


def test_a_scenario_naming_an_unknown_cluster_is_refused_naming_both():
    with pytest.raises(
        ValueError, match=r"scenarios\.cilium\.cluster: c is not a cluster of kubernetes\.clusters \(b\)"
    ):
        env_of({"bridge": BRIDGE, "cilium": {**CILIUM, "cluster": "c"}})


def test_a_cluster_name_the_local_script_cannot_take_is_refused():
    with pytest.raises(ValueError, match=r"clusters: Bad_1: a cluster's name is 1-8 lowercase letters"):
        env_of({"bridge": BRIDGE}, clusters={"Bad_1": {}})


def test_a_cluster_takes_its_own_kubeconfig_context_and_quiet_and_the_rest_from_the_environment():
    settings = env_of({"bridge": BRIDGE}).kubernetes
    assert settings is not None
    b = cluster_settings(settings, "b")
    assert (b.kubeconfig, b.context, b.image) == (
        "/var/lib/benchlib-k8s-b/admin.kubeconfig",
        "benchlib-b",
        "localhost/benchlib/bench:1",
    )
    assert b.quiet is not None and b.quiet.pid_dir == "/var/lib/benchlib-k8s-b/run"
    assert cluster_settings(settings, "") is settings


def test_without_a_cluster_named_the_target_is_the_one_cluster_target():
    assert type(target_of(env_of({"bridge": BRIDGE, "same": SAME_NODE}))) is KubernetesTarget


def test_one_pod_network_per_cluster_stands_side_by_side_and_interleaves_every_run():
    env = env_of({"bridge": BRIDGE, "same": SAME_NODE, "cilium": CILIUM})
    target = target_of(env)
    assert isinstance(target, ClustersTarget)
    assert target.apart is None and target.interleaves_scenarios
    assert {n: sorted(a.scenarios) for n, a in target.clusters.items()} == {"": ["bridge", "same"], "b": ["cilium"]}
    assert all(a.keeps_scenarios for a in target.clusters.values())
    assert target.clusters["b"].settings.context == "benchlib-b" and target.clusters["b"].settings.quiet is None
    tests = {"rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 1, "message_size": 1}}
    params = short_params("arms", list(env.scenarios), tests, repetitions=3)
    plan = Plan(environment=env, scenarios=list(env.scenarios), tests=params.tests)
    runs = runner.schedule_on(target, plan, 3, 7, 0)
    # each block holds every scenario once, in an order of its own: no rounds of one cluster
    blocks = [[r.scenario for r in runs if r.block == b] for b in range(3)]
    assert all(sorted(b) == ["bridge", "cilium", "same"] for b in blocks)
    assert len({tuple(b) for b in blocks}) > 1


def test_a_cluster_that_switches_pod_networks_sends_the_campaign_into_rounds_saying_why():
    other = {**BRIDGE, "apply": ["echo nftables"]}
    target = target_of(env_of({"bridge": BRIDGE, "nft": other, "cilium": CILIUM}))
    assert isinstance(target, ClustersTarget) and not target.interleaves_scenarios
    assert target.apart == "cluster default switches between 2 pod networks (bridge, nft)"
    # rounds over (cluster, switch): a round visits each once
    assert len({target.switch_of(s) for s in ("bridge", "nft", "cilium")}) == 3


def test_filler_services_keep_a_cluster_in_rounds():
    services = {**BRIDGE, "placement": "service", "services": 1000}
    target = target_of(env_of({"svc": services, "cilium": CILIUM}))
    assert target.apart == "scenario svc needs 999 filler Services in its namespace"


@pytest.mark.parametrize("arms", [False, True], ids=["one cluster", "clusters side by side"])
def test_shared_cpu_placement_puts_both_sides_on_the_client_cpus_only_on_one_kernel(arms):
    scenarios = {"bridge": BRIDGE, "cilium": CILIUM} if arms else {"bridge": BRIDGE}
    env = env_of(scenarios).model_copy(update={"cpu_placement": {"TCP_RR": "shared"}})
    target = target_of(env)
    assert isinstance(target, ClustersTarget if arms else KubernetesTarget)
    arm = target.clusters[""] if isinstance(target, ClustersTarget) else target
    placed = Placement("bridge", "198.18.0.2", "n1", "n2", [0], [1], {"nodes_share_kernel": True})
    arm.placements["bridge"] = target.placements["bridge"] = placed
    shared = target.placement_for("bridge", "TCP_RR")
    assert (shared.client_cpus, shared.server_cpus, shared.details["cpu_placement"]) == ([0], [0], "shared")
    assert target.placement_for("bridge", "TCP_CRR") is placed  # kinds not named stay split
    arm.placements["bridge"] = target.placements["bridge"] = replace(placed, details={"nodes_share_kernel": False})
    with pytest.raises(TargetError, match=r"scenario bridge: cpu_placement TCP_RR: shared needs client node n1"):
        target.placement_for("bridge", "TCP_RR")


def test_machine_facts_of_a_clusters_nodes_are_their_distinct_values():
    nodes = {
        "n1": {"kernel": "6.1.0", "kubelet": "v1.34.4", "instance_type": "m6i.large", "os_image": "Debian"},
        "n2": {"kernel": "6.1.1", "kubelet": "v1.34.4", "instance_type": None, "os_image": "Debian"},
    }
    assert cluster_machine(nodes) == {
        "kernel": "6.1.0 | 6.1.1",
        "kubelet": "v1.34.4",
        "container_runtime": "",
        "os_image": "Debian",
        "instance_type": "m6i.large",
    }


def test_collect_names_the_scenario_and_context_of_a_cluster_it_cannot_reach_before_any_run(tmp_path):
    kubeconfig = tmp_path / "two.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                # 198.18.0.0/15 is the project's; port 9 on loopback refuses at once
                "clusters": [{"name": "b", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "b", "user": {"token": "x"}}],
                "contexts": [{"name": "benchlib-b", "context": {"cluster": "b", "user": "b"}}],
                "current-context": "benchlib-b",
            }
        )
    )
    env = env_of(
        {"bridge": {**BRIDGE, "cluster": "b"}, "other": {**BRIDGE, "cluster": "c"}},
        clusters={
            "b": {"kubeconfig": str(kubeconfig), "context": "benchlib-b"},
            "c": {"kubeconfig": str(kubeconfig), "context": "nowhere"},
        },
    )
    with pytest.raises(ConfigError) as err:
        ClustersTarget(env, list(env.scenarios), log=lambda m: None).prepare()
    text = str(err.value)
    assert (
        "scenario(s) bridge: cluster b (kubeconfig " in text
        and "context benchlib-b): its API server https://127.0.0.1:9 cannot be reached" in text
    )
    assert "scenario(s) other: cluster c" in text and "context nowhere): cannot be loaded" in text
