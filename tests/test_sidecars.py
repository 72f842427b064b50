"""Envoy sidecars for the Kubernetes target, without a cluster: the pods, ConfigMap and Secret the target
would apply (pure builders, the lab's Envoy bootstraps), Envoy's own validation of those bootstraps, the
reading of a sidecar's Envoy from a real Envoy, and the settings a cluster cannot honour refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from benchlib import cli, collectors
from benchlib.base.errors import ConfigError
from benchlib.settings.environment import Environment
from benchlib.settings.loading import load_environment
from benchlib.targets.kubernetes import manifests, render, sidecars
from benchlib.targets.kubernetes.mesh_proxies import TLS_PREFIX, remove_stale_certificates
from benchlib.targets.mesh import certificates, envoy, shapes
from tests.conftest import project_with_environment, require_root

SERVERS = collectors.servers(["netperf", "fortio"])
MESH_SCENARIOS = {"s1": "server-sidecar", "s2": "sidecars", "s3": "sidecars-mtls"}


def mesh_env(cpus: bool = True) -> Environment:
    scenarios = {
        name: {"description": mesh, "placement": "pod-to-pod", "mesh": mesh, "proxy": "envoy"}
        for name, mesh in MESH_SCENARIOS.items()
    }
    scenarios["plain"] = {"description": "no mesh", "placement": "pod-to-pod"}
    scenarios["n1"] = {"description": "x", "placement": "pod-to-pod", "mesh": "node-proxies-mtls", "proxy": "envoy"}
    return Environment.model_validate(
        {
            "name": "k8s-mesh",
            "description": "x",
            "target": "kubernetes",
            **({"cpus": {"client": [0], "server": [1]}} if cpus else {}),
            "kubernetes": {"image": "localhost/benchlib/bench:1", "image_pull_policy": "Never"},
            "scenarios": scenarios,
        }
    )


def containers(pod: dict) -> dict[str, dict]:
    spec = pod["spec"]
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


@pytest.mark.parametrize("scenario", list(MESH_SCENARIOS))
def test_each_pod_of_a_mesh_gets_istios_init_container_and_envoy_as_a_native_sidecar(scenario):
    env = mesh_env()
    mesh = MESH_SCENARIOS[scenario]
    for role in ("client", "server"):
        pod = manifests.pod_manifest(env, scenario, role, "sid", SERVERS)
        names = [c["name"] for c in pod["spec"].get("initContainers", [])]
        if role == "client" and mesh == "server-sidecar":
            assert names == [] and "volumes" not in pod["spec"]
            continue
        # the capture first, then Envoy, which Kubernetes starts before the benchmark container
        assert names == [sidecars.INIT, sidecars.SIDECAR]
        init, proxy, bench = (containers(pod)[n] for n in (sidecars.INIT, sidecars.SIDECAR, manifests.CONTAINER))
        assert set(init["securityContext"]["capabilities"]["add"]) == {"NET_ADMIN", "NET_RAW"}
        assert "iptables-restore --noflush" in init["command"][-1]
        assert proxy["restartPolicy"] == "Always"
        ctx = proxy["securityContext"]
        assert (ctx["runAsUser"], ctx["runAsGroup"]) == (shapes.PROXY_UID, shapes.PROXY_UID)
        assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx["allowPrivilegeEscalation"] is False
        # pinned to its side's CPUs, as the lab pins its proxies, and ready when Envoy says so
        cpu = "0" if role == "client" else "1"
        assert proxy["command"][:4] == ["taskset", "-c", cpu, "envoy"]
        assert proxy["startupProbe"]["exec"]["command"][-1] == "http://127.0.0.1:15000/ready"
        assert "readinessProbe" not in proxy and "livenessProbe" not in proxy  # nothing execs during runs
        assert bench["command"] == ["sleep", "infinity"]  # the benchmark container as without a mesh
        config = next(v for v in pod["spec"]["volumes"] if v["name"] == "mesh-config")["configMap"]
        wanted = f"{role}-sidecar"
        assert config["name"] == f"{scenario}-mesh"
        assert {i["key"] for i in config["items"]} == {f"{wanted}.json", f"{wanted}.rules"}
        secrets = [v["secret"] for v in pod["spec"]["volumes"] if "secret" in v]
        if mesh == "sidecars-mtls":
            # its own Secret only, readable by root (the init container hands it to the proxy's uid)
            assert secrets == [{"secretName": f"{scenario}-{wanted}-tls", "defaultMode": 0o400}]
            tls = next(v for v in pod["spec"]["volumes"] if v["name"] == "mesh-tls")
            assert tls["emptyDir"]["medium"] == "Memory"  # the key never lands on a disk
            assert "mesh-secret" not in {m["name"] for m in proxy["volumeMounts"]}
        else:
            assert secrets == []
    # a scenario without a mesh is untouched
    plain = manifests.pod_manifest(env, "plain", "server", "sid", SERVERS)
    assert "initContainers" not in plain["spec"] and "volumes" not in plain["spec"]


def test_without_pinned_cpus_envoy_runs_unpinned():
    pod = manifests.pod_manifest(mesh_env(cpus=False), "s1", "server", "sid", SERVERS)
    assert containers(pod)[sidecars.SIDECAR]["command"][0] == "envoy"


@pytest.mark.parametrize("scenario", list(MESH_SCENARIOS))
def test_the_configmap_holds_the_labs_bootstraps_and_capture_rules(scenario):
    env = mesh_env()
    mesh = MESH_SCENARIOS[scenario]
    cm = manifests.mesh_configmap(env, scenario, "sid", SERVERS)
    plan = manifests.mesh_plan(env, scenario, SERVERS)
    assert [p.name for p in plan] == (
        ["server-sidecar"] if mesh == "server-sidecar" else ["client-sidecar", "server-sidecar"]
    )
    mtls = mesh == "sidecars-mtls"
    ports = [collectors.get("fortio").PORT]
    assert sidecars.http_ports(SERVERS) == ports
    for proxy in plan:
        # the very bootstrap the lab's builder makes, but for where the admin and the files are
        lab_shape = envoy.bootstrap(
            proxy, envoy.admin_loopback(15000), Path(sidecars.TLS_DIR) if mtls else None, "benchlib-kubernetes"
        )
        assert json.loads(cm["data"][f"{proxy.name}.json"]) == lab_shape
        assert cm["data"][f"{proxy.name}.rules"] == shapes.capture_rules(proxy, ports)
        text = cm["data"][f"{proxy.name}.json"]
        assert ("TlsContext" in text) == mtls and ("BEGIN" not in text)  # paths to keys, never keys
    client_rules = cm["data"].get("client-sidecar.rules", "")
    if client_rules:
        assert f"! --uid-owner {shapes.PROXY_UID}" in client_rules  # Envoy's own connections are spared
    assert cm["metadata"]["labels"][manifests.LABEL_SESSION] == "sid"


def test_each_secret_holds_its_own_proxys_key_only(tmp_path):
    env = mesh_env()
    certificates.make_certificates(tmp_path, ["client-sidecar", "server-sidecar"])
    for proxy in manifests.mesh_plan(env, "s3", SERVERS):
        names = ("ca.crt", f"{proxy.identity}.crt", f"{proxy.identity}.key")
        files = {n: (tmp_path / n).read_text() for n in names}
        secret = manifests.mesh_secret("s3", "sid", proxy, files)
        assert secret["metadata"]["name"] == f"s3-{proxy.name}-tls" and secret["stringData"] == files
        other = "server-sidecar" if proxy.name == "client-sidecar" else "client-sidecar"
        with pytest.raises(ValueError, match="its Secret holds"):
            manifests.mesh_secret("s3", "sid", proxy, {**files, f"{other}.key": "x"})


def test_the_init_script_hands_the_key_to_the_proxys_uid_mode_0600():
    script = sidecars.init_script(mtls=True)
    lines = script.splitlines()
    assert lines[0] == "set -e" and lines[1].startswith("iptables-restore --noflush < ")
    # the copies are private from their creation, then owned by the proxy's uid
    assert lines.index("umask 077") < next(i for i, line in enumerate(lines) if line.startswith("for f in"))
    assert f"chown -R {shapes.PROXY_UID}:{shapes.PROXY_UID} {sidecars.TLS_DIR}" in lines
    assert f"chmod 0600 {sidecars.TLS_DIR}/*.key" in lines
    assert "cp" not in sidecars.init_script(mtls=False)


def test_render_shows_the_mesh_objects_without_a_key():
    env = mesh_env()
    items = dict(render(env, list(env.scenarios), SERVERS))
    assert items["s1: mesh config"]["kind"] == "ConfigMap"
    assert "s1: mesh certificates of server-sidecar" not in items
    secrets = {t: o for t, o in items.items() if t.startswith("s3: mesh certificates")}
    assert set(secrets) == {"s3: mesh certificates of client-sidecar", "s3: mesh certificates of server-sidecar"}
    assert all(set(o["stringData"].values()) == {"<generated per campaign>"} for o in secrets.values())


@pytest.mark.parametrize("scenario", [*MESH_SCENARIOS, "n1"])
def test_envoy_accepts_every_bootstrap_of_a_cluster_mesh(scenario, tmp_path):
    """Envoy's own `--mode validate`, on the ConfigMap's bootstraps with the certificate paths pointed
    at a real CA's files."""
    env = mesh_env()
    certificates.make_certificates(tmp_path, ["client-sidecar", "server-sidecar", "node1", "node2"])
    cm = manifests.mesh_configmap(env, scenario, "sid", SERVERS, SUBNETS if scenario == "n1" else None)
    for key, text in cm["data"].items():
        if not key.endswith(".json"):
            continue
        cfg = tmp_path / key
        cfg.write_text(text.replace(sidecars.TLS_DIR, str(tmp_path)))
        r = subprocess.run(
            [envoy.binary(), "--mode", "validate", "-c", str(cfg), "--disable-hot-restart", "-l", "error"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stdout + r.stderr


def test_a_real_envoy_as_process_1_is_read_as_the_target_reads_its_sidecar(tmp_path):
    """usage_script run beside a real Envoy that is process 1 of its own PID namespace (as in its
    container), with the sidecar's bootstrap: CPU ticks, peak RSS, bytes and start time parsed from what
    it printed; the peak reset; a restart seen as another start time."""
    require_root()  # a PID and network namespace of its own
    env = mesh_env(cpus=False)
    cm = manifests.mesh_configmap(env, "s1", "sid", SERVERS)
    cfg = tmp_path / "envoy.json"
    cfg.write_text(cm["data"]["server-sidecar.json"])
    busybox = shutil.which("busybox")
    assert busybox, "busybox (the image's shell) is not installed"

    def start() -> subprocess.Popen:
        # envoy itself is process 1: unshare forks it into the new namespaces and waits
        return subprocess.Popen(
            [
                "unshare",
                "--net",
                "--pid",
                "--fork",
                "--mount-proc",
                "sh",
                "-c",
                f"ip link set lo up && exec {envoy.binary()} -c {cfg} --disable-hot-restart -l warning --concurrency 1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def read(proc: subprocess.Popen, reset_peak: bool) -> dict:
        envoy_pid = next(int(c) for c in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split())
        r = subprocess.run(
            [
                "nsenter",
                "-t",
                str(envoy_pid),
                "--net",
                "--pid",
                "--mount",
                busybox,
                "sh",
                "-c",
                sidecars.usage_script(reset_peak),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0, r.stderr
        return sidecars.parse_usage(r.stdout)

    first = start()
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                before = read(first, reset_peak=True)
                break
            except (AssertionError, StopIteration, FileNotFoundError):
                assert time.monotonic() < deadline and first.poll() is None, "Envoy did not answer"
                time.sleep(0.2)
        after = read(first, reset_peak=False)
        assert before["peak_rss_kib"] > 10_000 and after["cpu_ticks"] >= before["cpu_ticks"] > 0
        assert before["bytes"] == after["bytes"] == 0  # no traffic: its clusters carried nothing
        assert before["started"] == after["started"] > 0
        second = start()
        try:
            time.sleep(0.05)  # another start time: the clock ticks 100 times a second
            deadline = time.monotonic() + 20
            while True:
                try:
                    other = read(second, reset_peak=False)
                    break
                except (AssertionError, StopIteration, FileNotFoundError):
                    assert time.monotonic() < deadline and second.poll() is None
                    time.sleep(0.2)
            assert other["started"] != before["started"]
        finally:
            os.killpg(second.pid, 9)
            second.wait()
    finally:
        os.killpg(first.pid, 9)
        first.wait()


def test_the_usage_of_another_process_1_is_refused():
    stat = Path("/proc/self/stat").read_text()
    status = Path("/proc/self/status").read_text()
    with pytest.raises(ValueError, match="not envoy"):
        sidecars.parse_usage(f"{stat}{sidecars.SEPARATOR}\n{status}{sidecars.SEPARATOR}\n")
    with pytest.raises(ValueError, match="expected"):
        sidecars.parse_usage(stat)


@pytest.mark.parametrize(
    "scenario,message",
    [
        (
            "{placement: pod-to-pod, mesh: node-proxies-waypoint, proxy: envoy}",
            r"scenarios\.a\.mesh: node-proxies-waypoint runs in the lab only",
        ),
        (
            "{placement: pod-to-pod, mesh: sidecars}",
            r"scenarios\.a\.proxy: target kubernetes runs its sidecars with envoy",
        ),
        (
            "{placement: same-node, mesh: node-proxies-mtls, proxy: envoy}",
            r"scenarios\.a\.mesh: node-proxies-mtls needs placement pod-to-pod",
        ),
        (
            "{placement: host-network, mesh: sidecars, proxy: envoy}",
            r"scenarios\.a\.mesh: needs pods with a network of their own",
        ),
    ],
)
def test_what_a_cluster_cannot_mesh_is_refused_naming_the_key(tmp_path, monkeypatch, capsys, scenario, message):
    project_with_environment(
        tmp_path,
        monkeypatch,
        "m",
        "description: x\ntarget: kubernetes\nkubernetes: {image: x}\nscenarios:\n"
        f"  a: {{description: x, {scenario[1:]}\n",
    )
    with pytest.raises(ConfigError, match=message):
        load_environment("m")
    assert cli.main(["render", "--env", "m"]) == 2  # the CLI's exit code for bad input
    err = capsys.readouterr().err
    assert "scenarios.a." in err and "Traceback" not in err


def test_the_shipped_cluster_mesh_scenarios_load():
    env = load_environment("local-k8s")
    meshes = {n: sc.mesh for n, sc in env.scenarios.items() if sc.mesh}
    assert meshes == {
        "mesh-server-sidecar": "server-sidecar",
        "mesh-sidecars": "sidecars",
        "mesh-sidecars-mtls": "sidecars-mtls",
        "mesh-node-proxies": "node-proxies-mtls",
    }
    assert all(env.scenarios[n].proxy == "envoy" and env.scenarios[n].placement == "pod-to-pod" for n in meshes)
    cilium = load_environment("local-cilium")
    assert {n: sc.mesh for n, sc in cilium.scenarios.items() if sc.mesh} == {
        "bridge-sidecars-mtls": "sidecars-mtls",
        "bridge-node-proxies": "node-proxies-mtls",
        "cilium-native-ebpf-sidecars-mtls": "sidecars-mtls",
    }


SUBNETS = {1: "10.244.1.0/24", 2: "10.244.2.0/24"}


def test_node_proxies_run_in_a_host_network_pod_per_node_and_leave_the_benchmark_pods_alone():
    env = mesh_env()
    for role in ("client", "server"):  # the benchmark pods carry no sidecar: the nodes capture
        assert "initContainers" not in manifests.pod_manifest(env, "n1", role, "sid", SERVERS)["spec"]
    pods = manifests.node_proxy_pods(env, "n1", "sid", SERVERS, {1: "bk8s-node1", 2: "bk8s-node2"})
    assert [p["metadata"]["name"] for p in pods] == ["n1-node1", "n1-node2"]
    for i, pod in enumerate(pods, 1):
        spec = pod["spec"]
        assert spec["hostNetwork"] and spec["nodeSelector"] == {"kubernetes.io/hostname": f"bk8s-node{i}"}
        assert [c["name"] for c in spec["initContainers"]] == [sidecars.INIT, sidecars.SIDECAR]
        init, proxy = spec["initContainers"]
        assert "iptables" not in init["command"][-1] and "capabilities" not in init["securityContext"]
        assert proxy["securityContext"]["runAsUser"] == shapes.PROXY_UID and proxy["restartPolicy"] == "Always"
        assert proxy["command"][:3] == ["taskset", "-c", str(i - 1)]  # on its side's CPU
        [capture] = spec["containers"]
        assert capture["name"] == sidecars.CAPTURE
        assert set(capture["securityContext"]["capabilities"]["add"]) == {"NET_ADMIN", "NET_RAW"}
        assert capture["startupProbe"]["exec"]["command"] == ["iptables", "-t", "nat", "-S", sidecars.NODE_CHAIN]
        assert spec["terminationGracePeriodSeconds"] >= 5  # time for the capture container to clean up
        assert {v["name"] for v in spec["volumes"]} == {"mesh-config", "mesh-secret", "mesh-tls"}  # HBONE: mTLS


def test_node_capture_rules_take_only_cross_node_pod_traffic_in_a_chain_of_their_own():
    env = mesh_env()
    cm = manifests.mesh_configmap(env, "n1", "sid", SERVERS, SUBNETS)
    assert sorted(cm["data"]) == ["node1.json", "node1.rules", "node2.json", "node2.rules"]
    rules = cm["data"]["node1.rules"].splitlines()
    chain = sidecars.NODE_CHAIN
    assert rules == [
        "*nat",
        f":{chain} - [0:0]",
        f"-A PREROUTING -j {chain}",
        f"-A {chain} -p tcp -s 10.244.1.0/24 -d 10.244.2.0/24 -j REDIRECT --to-ports 15001",
        f"-A {chain} -p tcp -d 10.244.1.0/24 --dport 15008 -j REDIRECT --to-ports 15008",
        "COMMIT",
    ]
    assert "-s 10.244.2.0/24 -d 10.244.1.0/24" in cm["data"]["node2.rules"]
    node1 = json.loads(cm["data"]["node1.json"])
    assert [ln["name"] for ln in node1["static_resources"]["listeners"]] == ["outbound", "inbound"]
    with pytest.raises(ValueError, match="pod subnets"):
        manifests.mesh_configmap(env, "n1", "sid", SERVERS)


def test_a_node_proxys_capture_container_installs_its_rules_and_removes_them_when_stopped(tmp_path):
    """capture_script, as the capture container runs it (busybox sh, iptables), in a network namespace
    of its own: the rules are in while it runs; SIGTERM (a pod's deletion) leaves the nat table as it was."""
    require_root()
    rules = tmp_path / "capture.rules"
    rules.write_text(sidecars.node_capture_rules(SUBNETS[1], SUBNETS[2]))
    script = sidecars.capture_script().replace(f"{sidecars.CONFIG_DIR}/{sidecars.RULES}", str(rules))
    busybox = shutil.which("busybox")
    assert busybox
    r = subprocess.run(
        [
            "unshare",
            "--net",
            "sh",
            "-c",
            f'{busybox} sh -c "$0" & p=$!; sleep 1; iptables -t nat -S; kill -TERM $p; wait $p; echo exit=$?; '
            "iptables -t nat -S",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    running, _, stopped = r.stdout.partition("exit=")
    assert f"-A PREROUTING -j {sidecars.NODE_CHAIN}" in running and "--to-ports 15008" in running, r.stdout + r.stderr
    assert stopped.startswith("0") and sidecars.NODE_CHAIN not in stopped, r.stdout + r.stderr


def test_a_killed_sessions_certificates_are_removed_and_a_live_ones_kept(tmp_path):
    ended = subprocess.Popen(["true"])
    ended.wait()  # its pid names a session that is gone
    dead = tmp_path / f"{TLS_PREFIX}{ended.pid}-x1"
    live = tmp_path / f"{TLS_PREFIX}{os.getpid()}-x2"
    other = tmp_path / "benchlib-mesh-notapid"
    for d in (dead, live, other):
        d.mkdir()
        (d / "ca.key").write_text("key")
    assert remove_stale_certificates(lambda m: None, tmp_path) == [str(dead)]
    assert not dead.exists() and live.exists() and other.exists()
