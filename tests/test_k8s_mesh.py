"""Envoy sidecars on the real local cluster (scripts/k8s-local-cluster.sh, bridge CNI): the bench image's
Envoy injected into the benchmark pods as Istio injects it, with the lab's bootstraps. Every run must go
through every sidecar (their own counters say so), mutual TLS must be negotiated between them, and a
sidecar that dies or never starts must fail with Envoy's own last words. Nothing here is faked: real
kubelets, containerd, iptables in the pods' namespaces, Envoy 1.40, the exec API as the runner's token."""

from __future__ import annotations

import json

import pytest

from benchlib import collectors
from benchlib.collectors import fortio
from benchlib.measure import runner
from benchlib.measure.plan import Plan
from benchlib.records import layout, record
from benchlib.settings.environment import Environment
from benchlib.settings.loading import load_environment
from benchlib.targets import TargetError
from benchlib.targets.kubernetes import KubernetesTarget, manifests, render, sidecars
from benchlib.targets.mesh import shapes
from tests.conftest import short_params
from tests.local_cluster import bridge_cluster, execd_commands, in_node, k8s_env

SERVERS = collectors.servers(["netperf", "fortio"])
MESH = {
    "mesh-server-sidecar": "server-sidecar",
    "mesh-sidecars": "sidecars",
    "mesh-sidecars-mtls": "sidecars-mtls",
}
SIDECARS = {
    "mesh-server-sidecar": {"server-sidecar"},
    "mesh-sidecars": {"client-sidecar", "server-sidecar"},
    "mesh-sidecars-mtls": {"client-sidecar", "server-sidecar"},
}
TESTS = {
    "http": {"tool": "fortio", "kind": "HTTP", "duration_s": 3, "qps": 200, "streams": 2},
    "rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 3, "message_size": 1},
}


cluster = pytest.fixture(scope="module", name="cluster")(bridge_cluster)


def mesh_env(**settings) -> Environment:
    return k8s_env(
        {
            name: {"description": mesh, "placement": "pod-to-pod", "mesh": mesh, "proxy": "envoy"}
            for name, mesh in MESH.items()
        },
        **settings,
    )


def grew(before: dict, after: dict, name: str) -> int:
    return after.get(name, 0) - before.get(name, 0)


def test_a_campaign_through_every_sidecar_shape_records_each_sidecars_cpu_rss_and_bytes(cluster, tmp_path):
    env = mesh_env()
    params = short_params("k8s-mesh", list(env.scenarios), TESTS, repetitions=1, retries=1)
    plan = Plan(environment=env, scenarios=list(env.scenarios), tests=params.tests)
    logs: list[str] = []
    target = KubernetesTarget(env, plan.scenarios, SERVERS, log=logs.append)
    counts = runner.run_environment(params, plan, target, raw_root=tmp_path, log=logs.append)
    assert counts["ok"] == 6 and counts["failed"] == 0, (counts, logs[-20:])
    for path in layout.find(layout.campaign_dir("k8s-mesh", tmp_path)):
        rec = record.load(path)
        mesh = rec.placement["mesh"]
        assert mesh["kind"] == MESH[rec.scenario] and mesh["proxy"] == "envoy" and mesh["proxy_version"] == "1.40.0"
        assert ("mtls" in mesh) == (rec.scenario == "mesh-sidecars-mtls")
        assert rec.target["versions"]["envoy"] == "1.40.0"  # the image's, as the lab records the host's
        assert set(rec.processes) == SIDECARS[rec.scenario]
        for name, p in rec.processes.items():
            # the runner's judge passed: every sidecar carried bytes over the window, and burnt CPU
            assert p["bytes"][1] > p["bytes"][0] and p["cpu_ticks"][1] > p["cpu_ticks"][0], (rec.scenario, name, p)
            assert p["peak_rss_kib"] > 10_000 and p["version"] == "1.40.0"
            assert p["side"] == name.split("-")[0] and p["cpus"] == ([0] if p["side"] == "client" else [1])
        assert "BEGIN" not in json.dumps(rec.placement)  # no certificate or key in a record
    assert not execd_commands()


def test_sidecars_count_every_request_and_negotiate_mutual_tls(cluster):
    env = mesh_env()
    scenario = "mesh-sidecars-mtls"
    with runner.serving(KubernetesTarget(env, [scenario], SERVERS, log=lambda m: None)) as target:
        pl = target.placement(scenario)
        before = {p: target.sidecar_counters(scenario, p) for p in SIDECARS[scenario]}
        inv = fortio.command(pl.server_address, 2, 200, 2, False, pl.client_cpus, pl.server_cpus)
        proc = target.spawn(scenario, "client", inv.argv)
        out, err = proc.communicate(60)
        assert proc.returncode == 0, err
        http = fortio.parse("HTTP", [out])
        after = {p: target.sidecar_counters(scenario, p) for p in SIDECARS[scenario]}
        assert http["http_errors"] == 0 and http["http_qps"] >= 100
        requests = http["http_qps"] * 2
        # every request passed the client's outbound HTTP listener and the server's inbound one...
        assert (
            grew(before["client-sidecar"], after["client-sidecar"], "http.outbound_http.downstream_rq_total")
            >= 0.9 * requests
        )
        assert (
            grew(before["server-sidecar"], after["server-sidecar"], "http.inbound_http.downstream_rq_total")
            >= 0.9 * requests
        )
        # ...over mutual TLS, TLS 1.3, handshaken on both ends
        for p in SIDECARS[scenario]:
            assert sum(v for k, v in after[p].items() if k.endswith("ssl.handshake")) > 0, p
            assert sum(v for k, v in after[p].items() if k.endswith("ssl.versions.TLSv1.3")) > 0, p
        # each sidecar holds its own key, owned by the proxy's uid, mode 0600, in memory only
        for p in SIDECARS[scenario]:
            pod = pl.details[f"{p.split('-')[0]}_pod"]
            found = target.cluster.check(
                pod, ["stat", "-c", "%u %a %n", f"{sidecars.TLS_DIR}/{p}.key"], container=sidecars.SIDECAR
            )
            assert found.split()[:2] == [str(shapes.PROXY_UID), "600"], found
            others = target.cluster.check(pod, ["ls", sidecars.TLS_DIR], container=sidecars.SIDECAR).split()
            assert sorted(others) == sorted(["ca.crt", f"{p}.crt", f"{p}.key"])
            mounts = target.cluster.check(pod, ["cat", "/proc/mounts"], container=sidecars.SIDECAR)
            assert any(
                line.split()[1] == sidecars.TLS_DIR and line.split()[2] == "tmpfs" for line in mounts.splitlines()
            )
        # the process is Envoy as uid 1337, pinned to its side's CPU
        server_pod = pl.details["server_pod"]
        status = target.cluster.check(server_pod, ["cat", "/proc/1/status"], container=sidecars.SIDECAR)
        uid = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1]
        cpus = next(line for line in status.splitlines() if line.startswith("Cpus_allowed_list:")).split()[1]
        assert (uid, cpus) == (str(shapes.PROXY_UID), "1")


def test_a_sidecar_killed_mid_run_fails_that_run_with_envoys_log_and_the_next_run_goes_through(cluster, tmp_path):
    env = mesh_env()
    scenario, proxy = "mesh-server-sidecar", "server-sidecar"
    tests = {"rr": TESTS["rr"]}
    params = short_params("k8s-sidecar-killed", [scenario], tests, repetitions=2, retries=0)
    plan = Plan(environment=env, scenarios=[scenario], tests=params.tests)
    target = KubernetesTarget(env, [scenario], SERVERS, log=lambda m: None)
    read_usage, killed = target.datapath_usage, []

    def usage_then_kill(sc: str, reset_peak: bool) -> dict:
        out = read_usage(sc, reset_peak)
        if reset_peak and not killed:  # SIGTERM to Envoy, process 1 of its container, from its own uid
            pod = target.placement(sc).details["server_pod"]
            target.cluster.check(pod, ["kill", "-TERM", "1"], container=sidecars.SIDECAR)
            killed.append(pod)
        return out

    target.datapath_usage = usage_then_kill
    counts = runner.run_environment(params, plan, target, raw_root=tmp_path, log=lambda m: None)
    assert (counts["failed"], counts["ok"]) == (1, 1), counts
    recs = sorted(
        (record.load(p) for p in layout.find(layout.campaign_dir("k8s-sidecar-killed", tmp_path))),
        key=lambda r: r.order,
    )
    failed, after = recs
    reason = failed.attempts[-1].reason
    assert f"sidecar {proxy}" in reason and f"(restarted: {proxy})" in reason, reason
    assert "caught ENVOY_SIGTERM" in reason, reason  # Envoy's own last words, from its container's log
    # the next run went through the sidecar Kubernetes started again
    assert after.attempts[-1].outcome == "ok"
    assert after.processes[proxy]["bytes"][1] > after.processes[proxy]["bytes"][0]


def test_a_sidecar_that_cannot_start_fails_the_scenario_with_envoys_log(cluster, monkeypatch):
    # a bootstrap Envoy refuses: the sidecar exits at once, and Kubernetes restarts it, again and again
    monkeypatch.setattr(sidecars, "bootstrap", lambda proxy, mtls: {"static_resources": {"listeners": [{"name": 1}]}})
    env = mesh_env(pod_ready_timeout_s=120)
    target = KubernetesTarget(env, ["mesh-server-sidecar"], SERVERS, log=lambda m: None)
    with pytest.raises(TargetError) as exc, runner.serving(target):
        pass
    message = str(exc.value)
    assert "container envoy exited 1" in message and "its log ends" in message, message
    assert "Unable to parse JSON as proto" in message, message  # Envoy's own words
    assert not execd_commands()


def test_the_shipped_mesh_scenarios_pass_a_server_side_dry_run(admin_api):
    """The ConfigMap, Secrets and pods with sidecars `benchlib render` shows for local-k8s, as the real API
    server validates them (a native sidecar's fields included) without persisting anything."""
    import kubernetes

    env = load_environment("local-k8s")
    names = [n for n, sc in env.scenarios.items() if sc.mesh]
    objects = [obj for _, obj in render(env, names, SERVERS) if isinstance(obj, dict)]
    placeholders = {"<id>": "dryrun", "<host>.<pid>": "host.1"}
    placeholders |= {manifests.RENDERED_NODES[i]: f"bk8s-node{i}" for i in (1, 2)}  # node proxies' nodeSelector
    text = json.dumps(objects)
    for placeholder, value in placeholders.items():
        text = text.replace(placeholder, value)
    objects = json.loads(text)
    assert {o["kind"] for o in objects} >= {"ConfigMap", "Secret", "Pod"}
    dynamic = kubernetes.dynamic.DynamicClient(admin_api)
    namespace = "benchlib-dryrun-mesh"
    kubernetes.client.CoreV1Api(admin_api).create_namespace({"metadata": {"name": namespace}})
    try:
        for obj in objects:
            resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            kwargs = {"namespace": namespace} if resource.namespaced else {}
            dynamic.create(resource, body=obj, dry_run="All", **kwargs)  # raises on any invalid field
    finally:
        kubernetes.client.CoreV1Api(admin_api).delete_namespace(namespace)


@pytest.fixture(scope="module")
def admin_api(cluster):
    import kubernetes

    return kubernetes.config.new_client_from_config(config_file=str(cluster / "admin.kubeconfig"))


def test_node_proxies_carry_cross_node_traffic_over_hbone_and_leave_no_rule_behind(cluster):
    scenario = "mesh-node-proxies"
    env = k8s_env(
        {scenario: {"description": "HBONE", "placement": "pod-to-pod", "mesh": "node-proxies-mtls", "proxy": "envoy"}}
    )
    with runner.serving(KubernetesTarget(env, [scenario], SERVERS, log=lambda m: None)) as target:
        pl = target.placement(scenario)
        nodes = [pl.client_node, pl.server_node]
        assert all(sidecars.NODE_CHAIN in in_node(n, "iptables-save", "-t", "nat") for n in nodes)
        before = {p: target.sidecar_counters(scenario, p) for p in ("node1", "node2")}
        usage_before = target.datapath_usage(scenario, reset_peak=True)
        inv = fortio.command(pl.server_address, 2, 200, 3, False, pl.client_cpus, pl.server_cpus)
        proc = target.spawn(scenario, "client", inv.argv)
        out, err = proc.communicate(60)
        assert proc.returncode == 0, err
        http = fortio.parse("HTTP", [out])
        usage_after = target.datapath_usage(scenario, reset_peak=False)
        after = {p: target.sidecar_counters(scenario, p) for p in ("node1", "node2")}
        assert http["http_errors"] == 0 and http["http_qps"] >= 100
        # each of fortio's connections became one CONNECT stream, over mutual TLS, ended by the other node
        tunnelled = grew(before["node1"], after["node1"], "tcp.outbound_hbone.downstream_cx_total")
        assert tunnelled >= 3
        assert grew(before["node1"], after["node1"], "cluster.hbone.upstream_rq_total") == tunnelled
        assert grew(before["node2"], after["node2"], "http.inbound_hbone.downstream_rq_total") == tunnelled
        for p in ("node1", "node2"):
            assert sum(v for k, v in after[p].items() if k.endswith("ssl.handshake")) > 0, p
        assert runner.idle_proxies(usage_before, usage_after) == []
        assert {n: u["side"] for n, u in usage_after.items()} == {"node1": "client", "node2": "server"}
        assert pl.details["mesh"]["kind"] == "node-proxies-mtls"
    # the nodes' network namespaces outlive the pods: the rules went with the target
    assert not any(sidecars.NODE_CHAIN in in_node(n, "iptables-save", "-t", "nat") for n in nodes)
    assert not execd_commands()
