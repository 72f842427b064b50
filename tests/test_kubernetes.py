"""The Kubernetes target against a real cluster on this machine.

scripts/k8s-local-cluster.sh runs a two-node cluster: real kubelets, containerd
and runc, the bridge + host-local CNI and kube-proxy, each node in a network
namespace of its own, joined by a veth wire. Pods are real containers with
addresses from their node's podCIDR, Services are programmed by a real
kube-proxy, and every command reaches a pod through the real exec API. The
target runs as the "benchlib-runner" token, whose only rights are those of
pipelines/kubernetes/rbac.yaml. Nothing here is faked.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import platform
import re
import signal
import socket
import subprocess
import time
import types

import pytest

from benchlib import cli, collectors
from benchlib.base.errors import ConfigError
from benchlib.host import machine
from benchlib.measure import runner
from benchlib.measure.plan import Plan, schedule, validate_all
from benchlib.settings.campaign import Params
from benchlib.settings.environment import Environment
from benchlib.settings.loading import _expand_service_counts, load_environment, load_params
from benchlib.tables import tidy
from benchlib.targets import TargetError
from benchlib.targets.kubernetes import LABEL_OWNER, LABEL_SESSION, PID_MARKER, KubernetesTarget, render
from benchlib.targets.kubernetes.manifests import FILLER_ADDRESS
from tests.conftest import (
    REPO,
    TOLERANT,
    cpu_hog,
    project_with_environment,
    require_root,
    short_params,
)
from tests.local_cluster import (
    CLUSTER,
    NETPERF,
    SERVICE_CIDR,
    STATE,
    STATE_B,
    bridge_cluster,
    cluster_script,
    execd_commands,
    frozen_cgroups,
    in_node,
    k8s_env,
    leftovers,
    quiet_cgroups,
    run_tool,
    serving_cluster,
    sysctls,
    two_cluster_env,
    wire_packets,
)

RR = {"rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 1, "message_size": 1}}
RR_CRR = {**RR, "crr": {"tool": "netperf", "kind": "TCP_CRR", "duration_s": 1, "message_size": 1}}
SYNCED = f"bash {REPO}/pipelines/local-k8s/kube-proxy-synced.sh"


cluster = pytest.fixture(scope="module", name="cluster")(bridge_cluster)


@pytest.fixture(autouse=True)
def environment_folder(request, tmp_path, monkeypatch):
    """On the cluster, scenario commands of the environments built here (k8s_env) run in a
    folder of their own; shipped environments keep theirs."""
    if "admin" in request.fixturenames:
        monkeypatch.setattr("benchlib.targets.kubernetes.scenarios.environment_dir", lambda name: tmp_path)


@pytest.fixture(scope="module")
def admin(cluster):
    import kubernetes

    api = kubernetes.config.new_client_from_config(config_file=str(cluster / "admin.kubeconfig"))
    return kubernetes.client.CoreV1Api(api)


def services_env(counts: list[int], quiet: dict | None = None, **others: dict) -> Environment:
    """A service-count series, expanded into svc-<n> as load_environment expands it (and ``others``)."""
    return k8s_env(
        _expand_service_counts(
            {
                "svc": {
                    "description": "through one of N ClusterIPs",
                    "placement": "service",
                    "services": counts,
                    "programmed": [SYNCED],
                    "record": {"kube_proxy_metrics": f"{SYNCED} --print"},
                },
                **others,
            }
        ),
        **({"quiet": quiet} if quiet else {}),
    )


def _secrets() -> list[str]:
    return [line.split(",")[0] for line in (STATE / "pki" / "tokens.csv").read_text().splitlines()]


def run_campaign(env, campaign: str, raw_root, tests=RR):
    """One block of the tests in every scenario of env, through the real runner: (counts, log lines)."""
    params = short_params(campaign, list(env.scenarios), tests, repetitions=1, retries=1)
    plan = Plan(environment=env, scenarios=list(env.scenarios), tests=params.tests)
    logs = []
    counts = runner.run_environment(
        params,
        plan,
        KubernetesTarget(env, plan.scenarios, NETPERF, log=logs.append),
        raw_root=raw_root,
        log=logs.append,
    )
    return counts, logs


def test_campaign_on_every_placement_with_the_runner_token(admin, tmp_path):
    # TCP_CRR on one CPU set: the local cluster's nodes share this kernel, so both pods can share CPU 0
    env = k8s_env().model_copy(update={"cpu_placement": {"TCP_CRR": "shared"}})
    counts, logs = run_campaign(env, "k8s", tmp_path / "raw", tests=RR_CRR)
    assert counts["ok"] == 8 and counts["failed"] == 0, (counts, logs)

    metas = {}
    for scenario in env.scenarios:
        for test in RR_CRR:
            record = tmp_path / "raw" / "k8s" / "k8s-test" / scenario / test / "r000"
            meta = json.loads((record / "meta.json").read_text())
            stdout = (record / "stdout-0.txt").read_text()
            assert "THROUGHPUT=" in stdout and meta["exit_codes"] == [0]
            rate = collectors.get("netperf").parse(meta["kind"], [stdout])
            # each scenario has fresh pods (fresh network namespaces): a CRR run never meets an
            # earlier path's TIME_WAIT sockets, which collapse CRR to 15-170 conn/s (an idle machine
            # gives 5k-9k; 600-900 were seen with other test suites loading both CPUs)
            if test == "crr":
                assert rate["connection_rate"] > 400, (scenario, rate)
            cpu_record = json.loads((record / "cpu.json").read_text())
            server_cpus = [0] if test == "crr" else [1]
            assert cpu_record["sides"]["client"]["cpus"] == [0] and cpu_record["sides"]["server"]["cpus"] == server_cpus
            assert meta["placement"].get("cpu_placement", "split") == ("shared" if server_cpus == [0] else "split")
            assert cpu_record["sides"]["client"]["end"]["mono"] > cpu_record["sides"]["client"]["start"]["mono"]
            text = "".join(p.read_text() for p in record.rglob("*") if p.is_file())
            assert not [s for s in _secrets() if s in text]  # no credential in anything a run records
        metas[scenario] = meta
    pl = {s: m["placement"] for s, m in metas.items()}
    assert pl["pod-to-pod"]["client_node"] != pl["pod-to-pod"]["server_node"]
    assert pl["same-node"]["client_node"] == pl["same-node"]["server_node"]
    # pods get their addresses from their node's podCIDR; hostNetwork pods have the node's
    for scenario in ("pod-to-pod", "same-node", "service"):
        p = pl[scenario]
        for side in ("client", "server"):
            cidrs = p["nodes"][p[f"{side}_node"]]["pod_cidrs"]
            assert any(ipaddress.ip_address(p[f"{side}_pod_ip"]) in ipaddress.ip_network(c) for c in cidrs), p
    hn = pl["host-network"]
    assert hn["host_network"] and hn["server_pod_ip"] == hn["nodes"][hn["server_node"]]["addresses"]["InternalIP"]
    assert ipaddress.ip_address(pl["service"]["service_ip"]) in SERVICE_CIDR
    assert pl["service"]["server_address"] == pl["service"]["service_ip"]
    assert pl["pod-to-pod"]["server_address"] == pl["pod-to-pod"]["server_pod_ip"]
    # both local nodes run on this one kernel, and the record says so
    assert all(p["nodes_share_kernel"] for p in pl.values())
    assert pl["pod-to-pod"]["nodes"][pl["pod-to-pod"]["client_node"]]["kernel"] == platform.release()
    assert pl["pod-to-pod"]["scenario_record"] == {"kernel": platform.release()}
    assert pl["pod-to-pod"]["scenario_settings"] == {"cni": "bridge"}
    target = metas["service"]["target"]
    assert target["target"] == "kubernetes" and target["versions"]["kubernetes"] == "v1.34.4"
    assert target["versions"]["netperf"].startswith("2.")
    # the campaign's namespace is gone, and so is every command it exec'd (netserver)
    assert not admin.list_namespace(label_selector=LABEL_SESSION).items
    assert not execd_commands()


def test_a_cross_node_run_crosses_the_wire_and_a_same_node_run_does_not(admin):
    env = k8s_env()
    with KubernetesTarget(env, ["pod-to-pod", "same-node"], NETPERF, log=lambda m: None) as target:
        for scenario, crosses in (("pod-to-pod", True), ("same-node", False)):
            target.activate(scenario)
            runner.start_servers(target, scenario, ["netperf"])
            pl = target.placement(scenario)
            before = wire_packets(pl.client_node)
            m = run_tool(target, scenario, "TCP_RR")
            after = wire_packets(pl.client_node)
            transactions = m["transaction_rate"] * 1  # a 1 s run
            sent, received = after[1] - before[1], after[0] - before[0]
            if crosses:  # every request leaves through the wire and every response comes back on it
                assert sent >= transactions and received >= transactions, (sent, received, transactions)
            else:  # only the exec and API chatter crosses
                assert sent < transactions / 10, (sent, transactions)


@pytest.mark.parametrize("mode", ["iptables", "nftables"])  # nftables last: the fixture's mode is restored after
def test_a_cluster_ip_run_goes_through_kube_proxys_rules(admin, mode):
    switched = cluster_script("proxy-mode", mode)
    assert switched.returncode == 0, switched.stderr
    try:
        env = k8s_env({"service": {"description": "ClusterIP", "placement": "service", "programmed": [SYNCED]}})
        with serving_cluster(env, "service") as target:
            pl = target.placement("service")
            node = pl.client_node
            in_node(node, "conntrack", "-F")
            m = run_tool(target, "service", "TCP_CRR")
            # every connection was to the ClusterIP and was translated to the server pod by the node's rules
            entries = in_node(node, "conntrack", "-L", "-p", "tcp", "--orig-dst", pl.server_address)
            translated = [e for e in entries.splitlines() if f"src={pl.details['server_pod_ip']} " in e]
            assert len(translated) >= min(m["connection_rate"], 1000) / 2, (len(translated), m)
            nat = in_node(node, "iptables-save", "-c", "-t", "nat")
            if mode == "iptables":
                rule = next(
                    line
                    for line in nat.splitlines()
                    if f"-d {pl.server_address}/32" in line and "dport 12866" in line and "KUBE-SVC" in line
                )
                packets = int(re.match(r"\[(\d+):", rule).group(1))
                assert packets >= 0.99 * len(translated), rule  # a connection's first packet walks the nat table
            else:  # the nftables mode's table, and no iptables mode rules left behind
                assert pl.server_address in in_node(node, "nft", "list", "map", "ip", "kube-proxy", "service-ips")
                assert "KUBE-SERVICES" not in nat
    finally:
        restored = cluster_script("proxy-mode", "iptables")
        assert restored.returncode == 0, restored.stderr
    with pytest.raises(subprocess.CalledProcessError):  # and back in iptables mode, no nftables table
        in_node("bk8s-node1", "nft", "list", "table", "ip", "kube-proxy")


def test_objects_exec_and_cleanup(admin):
    target = KubernetesTarget(k8s_env(), ["service"], NETPERF, log=lambda m: None)
    with target:
        target.activate("service")
        ns = admin.read_namespace(target.namespace)
        assert ns.metadata.labels[LABEL_SESSION] == target.session
        pods = {p.metadata.name: p for p in admin.list_namespaced_pod(target.namespace).items}
        assert {"service-client", "service-server"} <= set(pods)
        assert len([p for p in pods if p.startswith("benchlib-cpu-")]) == 2  # one per node
        uids = [p.metadata.uid for p in pods.values()]
        assert all(any(uid in line for line in open("/proc/self/mounts")) for uid in uids)
        svc = admin.read_namespaced_service("service-server", target.namespace)
        assert 12865 in [p.port for p in svc.spec.ports]
        # stdout, stderr and the exit code come back apart
        proc = target.spawn("service", "client", ["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert proc.communicate(10) == (b"out\n", b"err\n") and proc.returncode == 3
        # a long command can be killed
        proc = target.spawn("service", "client", ["sleep", "30"])
        with pytest.raises(subprocess.TimeoutExpired):
            proc.communicate(0.5)
        proc.kill()
        proc.communicate(5)
        assert proc.poll() == -9
        # a command that ends without its exit status says what the exec API knows of it
        proc = target.spawn("service", "client", ["sh", "-c", "kill -KILL $PPID"])
        _, err = proc.communicate(10)
        assert proc.returncode == -9, err
        assert "the exec stream ended before the command's exit status" in err.decode() and "137" in err.decode(), err
        snap = target.cpu_snapshot("service", "server")
        assert len(snap.counters) == len(open("/proc/stat").read().split("\ncpu")) - 1
    # no namespace, pod, mount, process or Service rule of the campaign is left
    assert not [n for n in admin.list_namespace().items if n.metadata.name == target.namespace]
    assert not execd_commands()  # the killed `sleep 30` included
    deadline = time.monotonic() + 30
    while True:
        mounts = open("/proc/self/mounts").read()
        rules = in_node("bk8s-node1", "iptables-save", "-t", "nat") + in_node(
            "bk8s-node2", "iptables-save", "-t", "nat"
        )
        left = [u for u in uids if u in mounts] + ([target.namespace] if target.namespace in rules else [])
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left


def test_service_count_scenarios_keep_their_fillers_and_change_only_the_difference(admin):
    import kubernetes

    discovery = kubernetes.client.DiscoveryV1Api(admin.api_client)
    others = {"pod-to-pod": {"description": "two nodes", "placement": "pod-to-pod"}}
    env = services_env([40, 3], quiet={**QUIET, "service_proxies": ["kube-proxy*"]}, **others)
    logs = []
    with KubernetesTarget(env, list(env.scenarios), NETPERF, log=logs.append) as target:
        uids = {}
        for n in (40, 3):
            logs.clear()
            target.activate(f"svc-{n}")
            # exactly n Services: the benchmark Service and n-1 fillers
            services = {s.metadata.name: s for s in admin.list_namespaced_service(target.namespace).items}
            assert set(services) == {f"svc-{n}-server", *(f"fill-{i}" for i in range(1, n))}
            assert len({s.spec.cluster_ip for s in services.values()}) == n
            assert all(ipaddress.ip_address(s.spec.cluster_ip) in SERVICE_CIDR for s in services.values())
            # going down, the fillers left are the same objects, and none was created
            assert all(uids.get(name, s.metadata.uid) == s.metadata.uid for name, s in services.items())
            uids = {name: s.metadata.uid for name, s in services.items()}
            # the benchmark Service's EndpointSlice (the controller-manager's) names the server pod;
            # each filler's (ours, owned by its Service) the filler address
            server = admin.read_namespaced_pod(f"svc-{n}-server", target.namespace)
            endpoints = {
                sl.metadata.labels["kubernetes.io/service-name"]: [a for e in sl.endpoints or [] for a in e.addresses]
                for sl in discovery.list_namespaced_endpoint_slice(target.namespace).items
            }
            assert endpoints[f"svc-{n}-server"] == [server.status.pod_ip]
            assert all(endpoints[f"fill-{i}"] == [FILLER_ADDRESS] for i in range(1, n))
            # and kube-proxy has a rule for every one of them once the scenario is programmed
            nat = in_node("bk8s-node1", "iptables-save", "-t", "nat")
            assert all(f"-d {s.spec.cluster_ip}/32" in nat for s in services.values())
            details = target.placement(f"svc-{n}").details
            assert details["services"] == n and 0 < details["service_ready_s"] < 60
            assert details["programmed_s"] >= 1  # the sync check runs twice, a second apart
            created, deleted = (39, 0) if n == 40 else (0, 37)
            assert (details["fillers_created"], details["fillers_deleted"]) == (created, deleted)
            # kube-proxy frozen while the fillers were written, thawed before its sync was checked
            q = details["fillers_quiet"]
            assert set(q["frozen"]) == {"kube-proxy1", "kube-proxy2"} and q["freeze_state"] == "FROZEN", q
            assert q["thawed"] is True and "kubelet1" in q["kept"] and 0 < q["frozen_s"] <= details["fillers_s"] + 1, q
        assert "kubernetes: 37/37 filler Services deleted" in " ".join(logs)
        # a scenario without a Service count has none left beside it
        target.activate("pod-to-pod")
        assert not admin.list_namespaced_service(target.namespace).items
        assert not discovery.list_namespaced_endpoint_slice(target.namespace, label_selector=LABEL_SESSION).items
    assert not [n for n in admin.list_namespace().items if n.metadata.name == target.namespace]


def test_service_count_campaign_records_counts_timings_and_kube_proxy_metrics(admin, tmp_path):
    env = services_env([25])
    counts, logs = run_campaign(env, "k8s-svc", tmp_path / "raw")
    assert counts["ok"] == 1 and counts["failed"] == 0, (counts, logs)
    record = tmp_path / "raw" / "k8s-svc" / "k8s-test" / "svc-25" / "rr" / "r000"
    meta = json.loads((record / "meta.json").read_text())
    assert "THROUGHPUT=" in (record / "stdout-0.txt").read_text()  # real netperf, through exec
    pl = meta["placement"]
    assert pl["services"] == 25 and ipaddress.ip_address(pl["service_ip"]) in SERVICE_CIDR
    assert pl["fillers_created"] == 24 and 0 < pl["service_ready_s"]
    metrics = pl["scenario_record"]["kube_proxy_metrics"]
    assert metrics.count("node bk8s-node") == 2
    assert "kubeproxy_sync_proxy_rules_duration_seconds_count" in metrics
    assert "kubeproxy_sync_proxy_rules_iptables_total" in metrics
    # the fillers were deleted in parallel before the namespace
    assert "kubernetes: 24/24 filler Services deleted" in " ".join(logs)
    assert not admin.list_namespace(label_selector=LABEL_SESSION).items
    assert not execd_commands()


def test_unschedulable_pod_fails_with_its_events(admin):
    env = k8s_env(client_node="no-such-node", server_node="no-such-node", pod_ready_timeout_s=5)
    with KubernetesTarget(env, ["pod-to-pod"], NETPERF, log=lambda m: None) as target:
        with pytest.raises(TargetError, match=r"(?s)was not scheduled within 5 s.*FailedScheduling.*node"):
            target.activate("same-node")


def test_leftover_namespace_of_a_killed_campaign_is_removed(admin):
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = "benchlib-leftover"
    admin.create_namespace(
        {
            "metadata": {
                "name": name,
                "labels": {LABEL_SESSION: "leftover", LABEL_OWNER: f"{socket.gethostname()}.{dead.pid}"},
            }
        }
    )
    with KubernetesTarget(k8s_env(), ["pod-to-pod"], NETPERF, log=lambda m: None):
        assert not [n for n in admin.list_namespace().items if n.metadata.name == name]


def test_keys_tokens_and_kubeconfigs_are_private(cluster):
    private = [*(cluster / "pki").glob("*.key"), cluster / "pki" / "tokens.csv", *cluster.glob("*.kubeconfig")]
    assert len(private) >= 10
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in private} == {str(p): "0o600" for p in private}


def test_runner_token_is_confined(admin):
    import kubernetes

    api = kubernetes.config.new_client_from_config(config_file=str(STATE / "runner.kubeconfig"))
    with pytest.raises(kubernetes.client.ApiException) as exc:
        kubernetes.client.CoreV1Api(api).list_namespaced_pod("kube-system")
    assert exc.value.status == 403


@pytest.mark.parametrize("env_name", ["eks-m6i", "ryzen-e810"])
def test_shipped_cluster_manifests_pass_a_server_side_dry_run(admin, env_name):
    """Every manifest `benchlib render` shows for a study environment, and the RBAC manifest,
    as the real API server validates them (admission included) without persisting anything."""
    import kubernetes
    import yaml

    env = load_environment(env_name)
    namespace = f"benchlib-dryrun-{env_name}"
    servers = collectors.servers(["netperf", "iperf3", "fortio", "dns"])
    objects = [obj for _, obj in render(env, list(env.scenarios), servers) if isinstance(obj, dict)]
    objects = json.loads(json.dumps(objects).replace("<id>", "dryrun").replace("<host>.<pid>", "host.1"))
    assert {o["kind"] for o in objects} >= {"Namespace", "DaemonSet", "Pod"}
    api = admin.api_client
    dynamic = kubernetes.dynamic.DynamicClient(api)
    admin.create_namespace({"metadata": {"name": namespace}})
    try:
        rbac = list(yaml.safe_load_all((REPO / "pipelines" / "kubernetes" / "rbac.yaml").read_text()))
        for obj in rbac:  # the cluster has them applied: other names, or the dry run meets "already exists"
            obj["metadata"]["name"] += "-dryrun"
        for obj in objects + rbac:
            resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            kwargs = {"namespace": namespace} if resource.namespaced else {}
            dynamic.create(resource, body=obj, dry_run="All", **kwargs)  # raises on any invalid field
        assert not admin.list_namespaced_pod(namespace).items  # a dry run persists nothing
    finally:
        admin.delete_namespace(namespace)


def test_a_typo_in_a_manifest_fails_the_dry_run(admin):
    """The dry run above can fail: the same call refuses an invalid field."""
    import kubernetes

    env = load_environment("eks-m6i")
    pod = next(
        obj for title, obj in render(env, ["A"], collectors.servers(["netperf"])) if title.endswith("server pod")
    )
    pod = json.loads(json.dumps(pod).replace("<id>", "dryrun"))
    pod["spec"]["containers"][0]["imagePullPolicy"] = "Sometimes"
    with pytest.raises(kubernetes.client.ApiException, match="imagePullPolicy"):
        admin.create_namespaced_pod("default", pod, dry_run="All")


@pytest.mark.parametrize("env_name", ["eks-m6i", "ryzen-e810", "local-k8s"])
def test_render_shows_every_manifest_and_command(env_name, capsys):
    env = load_environment(env_name)
    assert cli.main(["render", "--env", env_name]) == 0
    out = capsys.readouterr().out
    for name, sc in env.scenarios.items():
        assert f"# --- {name}: server pod" in out and f"# --- {name}: client pod" in out
        if sc.helm:
            assert f"--values {sc.helm.values}" in out and f"# --- {name}: helm values {sc.helm.values}" in out
        for command in sc.programmed:
            assert f"# --- {name}: programmed when" in out and command in out
    assert "kind: DaemonSet" in out and "hostPID: true" in out and "&id" not in out
    # a service-count scenario shows one filler Service and how many there are, not all of them
    series = {name: sc.services for name, sc in env.scenarios.items() if (sc.services or 1) > 1}
    for name, n in series.items():
        assert f"# --- {name}: filler services: {n - 1} like this one" in out
    # (its Service and its EndpointSlice)
    assert out.count("benchlib.io/role: filler") == 2 * len(series) and (series or env_name == "ryzen-e810")


def test_render_rejects_a_missing_values_file(tmp_path, monkeypatch, capsys):
    project_with_environment(
        tmp_path,
        monkeypatch,
        "broken",
        "description: d\ntarget: kubernetes\nkubernetes: {image: x}\nscenarios:\n"
        "  a: {description: d, placement: pod-to-pod, helm: {release: r, chart: c, version: '1', values: nope.yaml}}\n",
    )
    assert cli.main(["render", "--env", "broken"]) == 2
    assert "nope.yaml not found" in capsys.readouterr().err


@pytest.mark.parametrize(
    "env_name", ["eks-m6i", "ryzen-e810", "local-k8s", "local-cilium", "local-clusters", "local-clusters-calico"]
)
def test_study_presets_validate_and_together_run_every_scenario(env_name):
    presets = sorted((REPO / "pipelines" / env_name).glob("params*.yaml"))
    plans = [plan for preset in presets for plan in validate_all(load_params(preset))]
    assert {s for plan in plans for s in plan.scenarios} == set(load_environment(env_name).scenarios)


class ScriptedExecStream:
    """The exec stream of the kubernetes client as ExecProcess reads it, its frames arriving as
    scripted: each update (a peek's included, as in the client) takes the next arrival's frames,
    the close frame among them. Here because the order that loses output cannot be caused at will
    on a real cluster: it needs a thread switch between two peeks (about 3 in 1000 execs under load)."""

    def __init__(self, arrivals: list[list[tuple[str, str]]]):
        self._arrivals, self._buffered, self._open = list(arrivals), {}, True

    def is_open(self) -> bool:
        return self._open

    def update(self, timeout: float = 0) -> None:
        for channel, data in self._arrivals.pop(0) if self._open and self._arrivals else []:
            if channel == "close":
                self._open = False
            else:
                self._buffered[channel] = self._buffered.get(channel, "") + data

    def _peek(self, channel: str) -> str:
        self.update()
        return self._buffered.get(channel, "")

    def _read(self, channel: str) -> str:
        return self._buffered.pop(channel, "")

    def peek_stdout(self):
        return self._peek("out")

    def peek_stderr(self):
        return self._peek("err")

    def read_stdout(self, timeout=None):
        return self._read("out")

    def read_stderr(self, timeout=None):
        return self._read("err")

    def close(self) -> None:
        self._open = False


def test_output_that_arrives_with_the_streams_close_is_kept():
    from benchlib.targets.kubernetes.api import EXIT_MARKER, ExecProcess

    stream = ScriptedExecStream(
        [
            [("err", f"{PID_MARKER}42\n")],  # the reader's update
            [],  # its stdout peek: nothing yet
            [("out", "cpu  1 2 3\n"), ("err", f"{EXIT_MARKER}0\n"), ("close", "")],  # its stderr peek
        ]
    )
    cluster = types.SimpleNamespace(open_exec=lambda pod, command, container: stream)
    proc = ExecProcess(cluster, "pod", ["cat", "/proc/stat"])  # pyright: ignore[reportArgumentType] (the stand-in has what ExecProcess uses)
    assert proc.communicate(5) == (b"cpu  1 2 3\n", b"") and proc.returncode == 0


@pytest.mark.lab  # root, and the machine-wide measurement lock: never beside another test run
def test_up_and_down_wait_for_no_running_measurement():
    """A running `benchlib collect` holds the machine's lock: the cluster is neither built nor torn
    down under it (`cni`, which a scenario runs from inside the collection, is not refused)."""
    require_root()
    was_up = cluster_script("status").returncode == 0
    with machine.exclusive("benchlib collect --env local-k8s (test)"):
        for command in ("up", "down"):
            refused = cluster_script(command)
            assert refused.returncode != 0 and "a measurement is running (pid" in refused.stderr, refused.stderr
            assert "benchlib collect --env local-k8s (test)" in refused.stderr
        # what reproduce.sh runs at its end: down waits for the measurement instead (stopped here
        # while it waits, so that the module's cluster stays up)
        waiting = subprocess.Popen(
            ["bash", str(CLUSTER), "down", "--wait"], stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        time.sleep(3)
        assert waiting.poll() is None
        os.killpg(waiting.pid, signal.SIGTERM)
        assert "down waits for it to end" in waiting.communicate(timeout=10)[1]
    assert (cluster_script("status").returncode == 0) == was_up


def test_cluster_scenario_without_placement_is_refused(tmp_path, monkeypatch):
    project_with_environment(
        tmp_path,
        monkeypatch,
        "noplace",
        "description: d\ntarget: kubernetes\nkubernetes: {image: x}\nscenarios:\n  a: {description: d}\n",
    )
    with pytest.raises(
        ConfigError, match=r"(?s)environment.yaml.*scenarios \['a'\]: target kubernetes needs placement"
    ):
        load_environment("noplace")


# -- quiet windows: the nodes' host daemons frozen over the CPU window -------------------------------


QUIET = {"pid_dir": str(STATE / "run")}
FOREIGN_MAX = Params.model_fields["experiment"].annotation.model_fields["foreign_cpu_max"].default
# a run long enough to be killed inside its window, and short enough for the resumed campaign
KILLED_RR = {"rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 3, "message_size": 1}}
THAW_BOUND_S = 3  # after an interrupt or a kill, every frozen cgroup is thawed within this


def _freezer_state(pid: int) -> str:
    """The process's state letter; a task the v1 freezer holds shows D, one a v2 freeze holds S."""
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def _watch_frozen(stop, seen: dict) -> None:
    """Every daemon found inside a frozen quiet cgroup, while the test runs (what was really frozen)."""
    from benchlib.targets.kubernetes import quiet

    pids = {pid: name for name, pid in quiet.daemons(STATE / "run").items()}
    while not stop.is_set():
        for cg in quiet_cgroups():
            try:
                state = (cg / "freezer.state").read_text().strip()
                procs = (cg / "cgroup.procs").read_text().split()
            except OSError:
                continue
            if state == "FROZEN":
                seen.update({pids[int(p)]: _freezer_state(int(p)) for p in procs if int(p) in pids})
        time.sleep(0.02)


def test_a_quiet_window_freezes_the_nodes_daemons_and_thaws_them_after_ok_and_failed_runs(admin, tmp_path):
    """One real run with the daemons frozen over its window, then a run whose client fails at once: both
    thawed, the daemons back where they were, the record saying what was frozen and kept."""
    import threading

    from benchlib.targets.kubernetes import quiet

    env = k8s_env({"pod-to-pod": {"description": "two nodes", "placement": "pod-to-pod"}}, quiet=QUIET)
    before = {name: open(f"/proc/{pid}/cgroup").read() for name, pid in quiet.daemons(STATE / "run").items()}
    tests = {"rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 3, "message_size": 1}}
    params = short_params("quiet", ["pod-to-pod"], tests, repetitions=1, retries=0)
    plan = Plan(environment=env, scenarios=["pod-to-pod"], tests=params.tests)
    seen: dict[str, str] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_frozen, args=(stop, seen))
    watcher.start()
    try:
        with runner.serving(KubernetesTarget(env, ["pod-to-pod"], NETPERF, log=lambda m: None)) as target:
            [run] = schedule(plan, 1, 7)
            # TOLERANT: a process beside the suite leaves it ok; the frozen daemons must not be among its takers
            ok = runner.measure(target, run, 0.2, None, TOLERANT["foreign_cpu_max"], quiet=True)
            # a real CPU hog beside a run: the cluster's processes are told from it, and it from them
            hog = cpu_hog([0, 1])
            try:
                disturbed = runner.measure(target, run, 0.2, None, FOREIGN_MAX, quiet=True)
            finally:
                os.kill(hog, signal.SIGKILL)
            pl = target.placement("pod-to-pod")
            # the server node's own address: no netserver listens there, the client fails at once
            node_ip = next(
                a.address for a in admin.read_node(pl.server_node).status.addresses if a.type == "InternalIP"
            )
            target.placements["pod-to-pod"] = dataclasses.replace(pl, server_address=node_ip)
            failed = runner.measure(target, run, 0.2, quiet=True)
    finally:
        stop.set()
        watcher.join()
    assert ok.outcome == "ok", ok.reason
    frozen_pids = {pid for name, pid in quiet.daemons(STATE / "run").items() if name in ok.quiet["frozen"]}
    assert ok.foreign is not None and not frozen_pids & {p["pid"] for p in ok.foreign["top"]}, ok.foreign
    assert disturbed.outcome == "disturbed" and "sha256sum" in (disturbed.reason or ""), disturbed.reason
    assert hog in [p["pid"] for p in disturbed.foreign["top"]], disturbed.foreign
    q = ok.quiet
    assert q is not None and q["mechanism"] == "cgroup v1 freezer", q
    daemons = {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy1", "kube-proxy2"}
    daemons |= {"containerd1", "containerd2", "kubelet1", "kubelet2"}
    assert set(q["frozen"]) == daemons and q["failed"] == {} and q["freeze_state"] == "FROZEN", q
    assert set(q["kept"]) == {"apiserver-forward"} and q["thawed"] is True, q
    assert 2.5 <= q["frozen_s"] < 3.5, q  # the window: 3 s less twice the trim, thawed at its end
    # what the kernel showed meanwhile: every daemon but the kept one inside the frozen cgroup, held (D)
    assert set(seen) == daemons and set(seen.values()) == {"D"}, seen
    assert failed.outcome == "failed" and failed.quiet and failed.quiet["thawed"] is True, failed.quiet
    assert frozen_cgroups() == [] and quiet_cgroups() == []
    assert {name: open(f"/proc/{pid}/cgroup").read() for name, pid in quiet.daemons(STATE / "run").items()} == before


# -- two clusters side by side: one campaign interleaves runs across them -----------------------------


@pytest.fixture
def cluster_b(cluster):
    """A second local cluster, b (one node, kube-proxy in nftables mode from its `up`), beside the module's:
    up for one test, down after it, so the module's leftovers check at its end finds neither. One node:
    its wire has a loose end, and the node still has a routable address (the test's runs reach it)."""
    up = cluster_script("--cluster", "b", "up", "--nodes", "1", "--proxy-mode", "nftables")
    assert up.returncode == 0, up.stderr
    assert "bridge nftables - -" in cluster_script("--cluster", "b", "status").stdout
    try:
        yield STATE_B
    finally:
        down = cluster_script("--cluster", "b", "down")
        assert down.returncode == 0, down.stderr


def test_two_clusters_interleave_in_one_campaign_freezing_the_other_and_a_kill_thaws_both(admin, cluster_b, tmp_path):
    """One campaign over two real clusters, killed mid-window (only a kill leaves the thaw to the
    watchdog; Ctrl-C unwinds through the window's finally as a failed run does): both clusters' daemons
    thawed and moved back. The same campaign again resumes it: every block runs both, each run on its
    own cluster's nodes, with every daemon of the other cluster frozen over its window."""
    from benchlib.targets import registry
    from benchlib.targets.kubernetes import quiet

    env = two_cluster_env()
    raw = tmp_path / "raw"
    before = {n: open(f"/proc/{pid}/cgroup").read() for n, pid in quiet.daemons(STATE_B / "run").items()}
    script = tmp_path / "child.py"
    script.write_text(TWO_CLUSTER_CHILD.format(repo=str(REPO), tests=KILLED_RR, raw=str(raw)))
    proc = subprocess.Popen([str(REPO / ".venv" / "bin" / "python"), str(script)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not frozen_cgroups() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert frozen_cgroups(), f"never frozen: {proc.poll()} {proc.stderr.read() if proc.poll() is not None else ''}"
        time.sleep(1)
        proc.kill()
        killed = time.monotonic()
        while frozen_cgroups() and time.monotonic() - killed < THAW_BOUND_S:
            time.sleep(0.02)
        assert frozen_cgroups() == [], f"still frozen {THAW_BOUND_S} s after SIGKILL"
        print(f"two clusters, SIGKILL: thawed after {time.monotonic() - killed:.3f} s")
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + THAW_BOUND_S
    while quiet_cgroups() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert quiet_cgroups() == []
    assert {n: open(f"/proc/{pid}/cgroup").read() for n, pid in quiet.daemons(STATE_B / "run").items()} == before
    assert all(c.type != "Ready" or c.status == "True" for n in admin.list_node().items for c in n.status.conditions)

    # the same campaign again resumes it: the killed one's namespaces removed, on both clusters, and
    # each run recorded once. Retried once, as a user's campaign is: the first exec after the kill has
    # lost its whole output with the exec API's status Success ("the exec stream ended before the
    # command's exit status"), in CI and here, on either cluster
    logs: list[str] = []
    params = short_params("two", list(env.scenarios), KILLED_RR, repetitions=2, retries=1)
    plan = Plan(environment=env, scenarios=list(env.scenarios), tests=params.tests)
    target = registry.get("kubernetes", env, plan.scenarios)(env, plan.scenarios, NETPERF, log=logs.append)
    assert target.interleaves_scenarios, logs
    counts = runner.run_environment(params, plan, target, raw_root=raw, log=logs.append)
    assert counts["ok"] + counts["already_done"] == 4 and counts["failed"] == 0, (counts, logs)
    assert sum("left by a killed campaign" in line for line in logs) == 2, logs

    metas = [json.loads(m.read_text()) for m in (raw / "two").glob("*/*/*/r*/meta.json")]
    by_time = sorted(metas, key=lambda m: m["started_at"])
    assert [m["block"] for m in by_time] == [0, 0, 1, 1]  # every block holds both clusters' runs
    for m in metas:
        pl, q = m["placement"], m["quiet"]
        own = "default" if m["scenario"] == "here" else "b"
        assert pl["cluster"] == own, pl
        assert pl["client_node"].startswith("bk8s-b-" if own == "b" else "bk8s-node"), pl
        assert {n.split("/", 1)[0] for n in q["frozen"] if "/" in n} == {"b"}, q  # the other's, as b/...
        assert {"apiserver-forward", "b/apiserver-forward"} <= set(q["kept"]), q
        assert q["thawed"] is True and q["freeze_ms"] < 1000 and q["thaw_ms"] < 1000, q
        print(f"{m['scenario']} block {m['block']}: freeze {q['freeze_ms']} ms, thaw {q['thaw_ms']} ms")
    b_daemons = {f"b/{n}" for n in quiet.daemons(STATE_B / "run")}
    here = [m for m in metas if m["scenario"] == "here"]
    assert all(b_daemons - {"b/apiserver-forward"} <= set(m["quiet"]["frozen"]) for m in here)
    assert [m["placement"]["scenario_record"] for m in metas if m["scenario"] == "there"] == [{"cluster": "b"}] * 2
    runs, _ = tidy.build_tables(raw / "two")
    assert dict(zip(runs["scenario"], runs["cluster"], strict=True)) == {"here": "default", "there": "b"}
    assert set(runs["outcome"]) == {"ok"} and len(runs) == 4


TWO_CLUSTER_CHILD = """
import sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from benchlib.measure import runner
from benchlib.measure.plan import Plan
from benchlib.targets import registry
from tests.conftest import short_params
from tests.local_cluster import NETPERF, two_cluster_env
env = two_cluster_env()
params = short_params("two", list(env.scenarios), {tests!r}, repetitions=2, retries=0)
plan = Plan(environment=env, scenarios=list(env.scenarios), tests=params.tests)
target = registry.get("kubernetes", env, plan.scenarios)(env, plan.scenarios, NETPERF)
runner.run_environment(params, plan, target, raw_root=Path({raw!r}))
"""


# -- the cluster's own life cycle (last: it takes the module's cluster down) ----------------------


def test_up_is_idempotent_down_leaves_nothing_and_a_killed_up_is_cleaned(cluster):
    again = cluster_script("up", "--nodes", "2", "--proxy-mode", "iptables")
    assert again.returncode == 0 and "already up" in again.stderr, again.stderr
    assert cluster_script("status").returncode == 0
    saved = dict(line.strip().split("=", 1) for line in (STATE / "sysctl.saved").read_text().splitlines())
    assert sysctls(list(saved)) != saved, "the kubelet changes host tunables while the cluster runs"

    down = cluster_script("down")
    assert down.returncode == 0, down.stderr
    assert leftovers() == []
    assert sysctls(list(saved)) == saved
    assert cluster_script("status").returncode != 0

    # an `up` killed half-way leaves running daemons; `status` says so and `down` removes them
    proc = subprocess.Popen(["bash", str(CLUSTER), "up"], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (STATE / "run" / "kube-apiserver.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert leftovers(), "a killed up leaves a partial cluster"
    status = cluster_script("status")
    assert status.returncode != 0 and "did not finish" in status.stdout
    down = cluster_script("down")
    assert down.returncode == 0, down.stderr
    assert leftovers() == []
    assert sysctls(list(saved)) == saved
