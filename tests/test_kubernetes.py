"""The Kubernetes target against a real control plane on this machine.

scripts/k8s-control-plane.sh runs etcd, kube-apiserver, kube-controller-manager
and kube-scheduler (built from the Go module proxy) and KWOK, which fakes two
nodes: pods are really created, scheduled, watched, exec'd into and deleted
through the real API server, but their commands run on this host. So there is
no pod network and no kube-proxy here: the client reaches the server at
127.0.0.1 (``server_address``), never at a fake pod IP or ClusterIP. Everything
runs as the "benchlib-runner" token, whose only rights are those of
pipelines/kubernetes/rbac.yaml.
"""
from __future__ import annotations

import fcntl
import json
import platform
import socket
import subprocess

import pytest

from benchlib import cli, runner
from benchlib.config import (ConfigError, Environment, Plan, _expand_service_counts, load_environment, load_params,
                             validate_all)
from benchlib.targets import TargetError
from benchlib.targets.kubernetes import LABEL_CAMPAIGN, LABEL_OWNER, PID_MARKER, KubernetesTarget
from tests.conftest import REPO, project_with_environment, require_root, short_params

SCRIPT = REPO / "scripts" / "k8s-control-plane.sh"
STATE = REPO / ".tools" / "k8s" / "state"
RR = {"rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 1, "message_size": 1}}


@pytest.fixture(scope="session")
def control_plane():
    require_root()
    subprocess.run(["bash", str(SCRIPT), "build"], check=True)  # a no-op once built
    # one control plane per machine (fixed ports): concurrent test sessions take turns
    with open(STATE.parent / "session.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # with the lock held, a running control plane is a killed session's leftover
        subprocess.run(["bash", str(SCRIPT), "stop"], check=True)
        subprocess.run(["bash", str(SCRIPT), "start"], check=True, timeout=300)
        try:
            yield STATE
        finally:
            subprocess.run(["bash", str(SCRIPT), "stop"], check=True)


@pytest.fixture(scope="session")
def admin(control_plane):
    """Admin API access, after applying the shipped RBAC manifest."""
    import kubernetes
    api = kubernetes.config.new_client_from_config(config_file=str(control_plane / "admin.kubeconfig"))
    kubernetes.utils.create_from_yaml(api, str(REPO / "pipelines" / "kubernetes" / "rbac.yaml"))
    return kubernetes.client.CoreV1Api(api)


def k8s_env(scenarios: dict | None = None, **settings) -> Environment:
    return Environment.model_validate({
        "name": "kwok-test", "description": "local control plane, two KWOK nodes", "target": "kubernetes",
        "kubernetes": {"kubeconfig": str(STATE / "runner.kubeconfig"), "image": "benchlib-bench:never-pulled",
                       "server_address": "127.0.0.1", "pod_ready_timeout_s": 30, **settings},
        "scenarios": scenarios or {
            "pod-to-pod": {"description": "two nodes", "placement": "pod-to-pod",
                           "apply": ["echo switched > switched.txt"], "ready": ["test -s switched.txt"],
                           "record": {"kernel": "uname -r"}, "settings": {"cni": "none"}},
            "same-node": {"description": "one node", "placement": "same-node"},
            "host-network": {"description": "node to node", "placement": "host-network"},
            "service": {"description": "through a ClusterIP", "placement": "service"}}})


def services_env(counts: list[int]) -> Environment:
    """A service-count series, expanded into svc-<n> as load_environment expands it."""
    return k8s_env(_expand_service_counts(
        {"svc": {"description": "through one of N ClusterIPs", "placement": "service", "services": counts}}))


def _execd_commands() -> list[str]:
    """Commands the target exec'd that still run on this host (KWOK runs them here)."""
    return subprocess.run(["pgrep", "-af", PID_MARKER], capture_output=True, text=True).stdout.splitlines()


def _secrets() -> list[str]:
    return [line.split(",")[0] for line in (STATE / "pki" / "tokens.csv").read_text().splitlines()]


def run_campaign(env, campaign: str, raw_root):
    """One block of the RR test in every scenario of env, through the real runner: (counts, log lines)."""
    params = short_params(campaign, list(env.scenarios), RR, repetitions=1, retries=0)
    plan = Plan(environment=env, scenarios=list(env.scenarios), tests=params.tests)
    logs = []
    counts = runner.run_environment(params, plan, KubernetesTarget(env, plan.scenarios, log=logs.append),
                                    raw_root=raw_root, log=logs.append)
    return counts, logs


def test_campaign_on_every_placement_with_the_runner_token(admin, tmp_path, monkeypatch):
    env = k8s_env()
    monkeypatch.setattr("benchlib.targets.kubernetes.environment_dir", lambda name: tmp_path)
    counts, logs = run_campaign(env, "k8s", tmp_path / "raw")
    assert counts["ok"] == 4 and counts["failed"] == 0, (counts, logs)

    metas = {}
    for scenario in env.scenarios:
        record = tmp_path / "raw" / "k8s" / "kwok-test" / scenario / "rr" / "r000"
        metas[scenario] = meta = json.loads((record / "meta.json").read_text())
        # real netperf output, returned through the exec API
        assert "THROUGHPUT=" in (record / "stdout-0.txt").read_text()
        assert meta["exit_codes"] == [0]
        assert meta["placement"]["server_address"] == "127.0.0.1"
        assert meta["placement"]["client_pod_ip"] and meta["placement"]["server_pod_ip"]
        cpu_record = json.loads((record / "cpu.json").read_text())
        assert {cpu_record["sides"][s]["node"] for s in ("client", "server")} <= {"kwok-node-0", "kwok-node-1"}
        assert cpu_record["sides"]["client"]["end"]["mono"] > cpu_record["sides"]["client"]["start"]["mono"]
        # no credential in anything a run records
        text = "".join(p.read_text() for p in record.rglob("*") if p.is_file())
        assert not [s for s in _secrets() if s in text]
    pl = {s: m["placement"] for s, m in metas.items()}
    assert pl["pod-to-pod"]["client_node"] != pl["pod-to-pod"]["server_node"]
    assert pl["same-node"]["client_node"] == pl["same-node"]["server_node"]
    assert pl["host-network"]["host_network"] and pl["host-network"]["server_pod_ip"] == "127.0.0.1"
    assert pl["service"]["service_ip"].startswith("10.96.")
    assert pl["pod-to-pod"]["scenario_record"] == {"kernel": platform.release()}
    assert pl["pod-to-pod"]["scenario_settings"] == {"cni": "none"}
    assert "absent" in pl["pod-to-pod"]["cni_agent_usage"]
    target = metas["service"]["target"]
    assert target["target"] == "kubernetes" and target["versions"]["kubernetes"] == "v1.34.4"
    assert target["versions"]["netperf"].startswith("2.")
    # the campaign's namespace is gone, and so is every command it exec'd (netserver)
    assert not admin.list_namespace(label_selector=LABEL_CAMPAIGN).items
    assert not _execd_commands()


def test_objects_exec_and_cleanup(admin):
    target = KubernetesTarget(k8s_env(), ["service"], log=lambda m: None)
    with target:
        target.activate("service")
        ns = admin.read_namespace(target.namespace)
        assert ns.metadata.labels[LABEL_CAMPAIGN] == target.campaign
        pods = {p.metadata.name: p for p in admin.list_namespaced_pod(target.namespace).items}
        assert {"service-client", "service-server"} <= set(pods)
        assert len([p for p in pods if p.startswith("benchlib-cpu-")]) == 2  # one per node
        svc = admin.read_namespaced_service("service-server", target.namespace)
        assert 12865 in [p.port for p in svc.spec.ports]
        # stdout, stderr and the exit code come back apart
        proc = target.spawn("service", "client", ["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert proc.communicate(10) == ("out\n", "err\n") and proc.returncode == 3
        # a long command can be killed
        proc = target.spawn("service", "client", ["sleep", "30"])
        with pytest.raises(subprocess.TimeoutExpired):
            proc.communicate(0.5)
        proc.kill()
        proc.communicate(5)
        assert proc.poll() == -9
        snap = target.cpu_snapshot("service", "server")
        assert len(snap.counters) == len(open("/proc/stat").read().split("\ncpu")) - 1
    assert not [n for n in admin.list_namespace().items if n.metadata.name == target.namespace]
    assert not _execd_commands()  # the killed `sleep 30` included


def test_service_count_scenarios_create_n_services_with_endpoints(admin):
    import kubernetes
    discovery = kubernetes.client.DiscoveryV1Api(admin.api_client)
    env = services_env([40, 3])
    logs = []
    with KubernetesTarget(env, list(env.scenarios), log=logs.append) as target:
        for n in (40, 3):
            target.activate(f"svc-{n}")
            # exactly n Services: the previous scenario's are gone
            services = {s.metadata.name: s for s in admin.list_namespaced_service(target.namespace).items}
            assert len(services) == n and f"svc-{n}-server" in services
            assert len({s.spec.cluster_ip for s in services.values()}) == n
            assert all(len(s.spec.ports) == 1 for name, s in services.items() if "-fill-" in name)
            # each has an EndpointSlice, written by the controller-manager, naming the server pod
            server = admin.read_namespaced_pod(f"svc-{n}-server", target.namespace)
            slices = discovery.list_namespaced_endpoint_slice(target.namespace).items
            served = {sl.metadata.labels["kubernetes.io/service-name"] for sl in slices
                      for e in sl.endpoints or []
                      if e.target_ref.name == server.metadata.name and e.addresses == [server.status.pod_ip]}
            assert set(services) <= served
            details = target.placement(f"svc-{n}").details
            assert details["services"] == n
            assert 0 < details["services_create_s"] <= details["services_endpointslices_s"] < 30
        assert "kubernetes: svc-40: 40/40 Services created" in " ".join(logs)
        assert "kubernetes: svc-40: 40 Services deleted" in " ".join(logs)
    assert not [n for n in admin.list_namespace().items if n.metadata.name == target.namespace]


def test_service_count_campaign_records_counts_and_timings(admin, tmp_path):
    env = services_env([25])
    counts, logs = run_campaign(env, "k8s-svc", tmp_path / "raw")
    assert counts["ok"] == 1 and counts["failed"] == 0, (counts, logs)
    record = tmp_path / "raw" / "k8s-svc" / "kwok-test" / "svc-25" / "rr" / "r000"
    meta = json.loads((record / "meta.json").read_text())
    assert "THROUGHPUT=" in (record / "stdout-0.txt").read_text()  # real netperf, through exec
    pl = meta["placement"]
    assert pl["services"] == 25 and pl["service_ip"].startswith("10.96.")
    assert 0 < pl["services_create_s"] <= pl["services_endpointslices_s"]
    # the fillers were deleted in parallel before the namespace
    assert "kubernetes: svc-25: 25 Services deleted" in " ".join(logs)
    assert not admin.list_namespace(label_selector=LABEL_CAMPAIGN).items
    assert not _execd_commands()


def test_unschedulable_pod_fails_with_its_events(admin):
    env = k8s_env(client_node="no-such-node", server_node="no-such-node", pod_ready_timeout_s=5)
    with KubernetesTarget(env, ["pod-to-pod"], log=lambda m: None) as target:
        with pytest.raises(TargetError, match=r"(?s)did not become ready.*FailedScheduling.*node"):
            target.activate("same-node")


def test_leftover_namespace_of_a_killed_campaign_is_removed(admin):
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = "benchlib-leftover"
    admin.create_namespace({"metadata": {"name": name, "labels": {
        LABEL_CAMPAIGN: "leftover", LABEL_OWNER: f"{socket.gethostname()}.{dead.pid}"}}})
    with KubernetesTarget(k8s_env(), ["pod-to-pod"], log=lambda m: None):
        assert not [n for n in admin.list_namespace().items if n.metadata.name == name]


def test_runner_token_is_confined(admin):
    import kubernetes
    api = kubernetes.config.new_client_from_config(config_file=str(STATE / "runner.kubeconfig"))
    with pytest.raises(kubernetes.client.ApiException) as exc:
        kubernetes.client.CoreV1Api(api).list_namespaced_pod("kube-system")
    assert exc.value.status == 403


@pytest.mark.parametrize("env_name", ["eks-m6i", "ryzen-e810"])
def test_render_shows_every_manifest_and_command(env_name, capsys):
    env = load_environment(env_name)
    assert cli.main(["render", "--env", env_name]) == 0
    out = capsys.readouterr().out
    for name, sc in env.scenarios.items():
        assert f"# --- {name}: server pod" in out and f"# --- {name}: client pod" in out
        if sc.helm:
            assert f"--values {sc.helm.values}" in out and f"# --- {name}: helm values {sc.helm.values}" in out
    assert "kind: DaemonSet" in out and "hostPID: true" in out and "&id" not in out
    # a service-count scenario shows one filler Service and how many there are, not all of them
    series = {name: sc.services for name, sc in env.scenarios.items() if (sc.services or 1) > 1}
    for name, n in series.items():
        assert f"# --- {name}: filler services: {n - 1} like this one" in out
    assert out.count("benchlib.io/role: filler") == len(series) and (series or env_name == "ryzen-e810")


def test_render_rejects_a_missing_values_file(tmp_path, monkeypatch, capsys):
    project_with_environment(
        tmp_path, monkeypatch, "broken",
        "description: d\ntarget: kubernetes\nkubernetes: {image: x}\nscenarios:\n"
        "  a: {description: d, placement: pod-to-pod, helm: {release: r, chart: c, version: '1', values: nope.yaml}}\n")
    assert cli.main(["render", "--env", "broken"]) == 2
    assert "nope.yaml not found" in capsys.readouterr().err


@pytest.mark.parametrize("env_name", ["eks-m6i", "ryzen-e810"])
def test_study_presets_validate(env_name):
    plan, = validate_all(load_params(REPO / "pipelines" / env_name / "params.yaml"))
    assert plan.scenarios == list(load_environment(env_name).scenarios)


def test_cluster_scenario_without_placement_is_refused(tmp_path, monkeypatch):
    project_with_environment(tmp_path, monkeypatch, "noplace",
                             "description: d\ntarget: kubernetes\nkubernetes: {image: x}\nscenarios:\n"
                             "  a: {description: d}\n")
    with pytest.raises(ConfigError, match=r"(?s)environment.yaml.*scenarios \['a'\]: target kubernetes needs placement"):
        load_environment("noplace")
