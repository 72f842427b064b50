"""The service-mesh scenarios: real HAProxy proxies with real openssl certificates
in the real lab. Each hop must show the traffic in its own counters, the mTLS
legs must carry TLS (and refuse a client without a certificate of the lab's
CA), and every run records the proxies' CPU and peak RSS."""

import json
import os
import subprocess
import time

import pytest

from benchlib.base.errors import ConfigError
from benchlib.collectors import fortio
from benchlib.measure import runner
from benchlib.measure.plan import plan_environment
from benchlib.records import layout, record
from benchlib.settings.loading import load_environment
from benchlib.targets.lab import haproxy
from benchlib.targets.lab.addresses import POD_IP
from benchlib.targets.mesh import certificates, shapes
from tests.conftest import lab_target, require_root, serving_lab, short_params
from tests.support.mesh import campaign_with_a_proxy_killed, rr_run, run_client

MESH = ["proxy-server", "proxy-both", "proxy-both-mtls", "node-proxy-mtls"]
# the proxies each scenario puts on the path and the listeners fortio's HTTP and netperf's TCP go through
HOPS = {
    "proxy-server": {"server-sidecar": ("inbound_http", "inbound_tcp")},
    "proxy-both": {
        "client-sidecar": ("outbound_http", "outbound_tcp"),
        "server-sidecar": ("inbound_http", "inbound_tcp"),
    },
    "proxy-both-mtls": {
        "client-sidecar": ("outbound_http", "outbound_tcp"),
        "server-sidecar": ("inbound_http", "inbound_tcp"),
    },
    "node-proxy-mtls": {"node1": ("outbound", "outbound"), "node2": ("inbound", "inbound")},
}
MTLS = {"proxy-both-mtls": ("client-sidecar", "server-sidecar"), "node-proxy-mtls": ("node1", "node2")}


@pytest.fixture(scope="module")
def mesh_lab(lab_env):
    require_root()
    with serving_lab(lab_env, MESH, ["netperf", "fortio"]) as target:
        yield target


def fortio_run(target, scenario: str, qps, close: bool) -> dict:
    pl = target.placement(scenario)
    inv = fortio.command(pl.server_address, 1, qps, 2, close, pl.client_cpus, pl.server_cpus)
    return fortio.parse("HTTP", [run_client(target, scenario, inv.argv)])


def counters(target, scenario: str) -> dict:
    return {p: haproxy.counters(target.stats_socket(scenario, p)) for p in HOPS[scenario]}


@pytest.mark.parametrize("scenario", MESH)
def test_every_hop_carries_the_traffic(mesh_lab, scenario):
    before = counters(mesh_lab, scenario)
    # Connection: close: one connection per request. The rate is what the path gives: a TLS handshake
    # per request costs the mTLS proxies ~3 ms of CPU, and under contention a request took ~60 ms
    http = fortio_run(mesh_lab, scenario, 50, close=True)
    after_http = counters(mesh_lab, scenario)
    rr = rr_run(mesh_lab, scenario)
    after_rr = counters(mesh_lab, scenario)
    assert http["http_errors"] == 0 and http["http_qps"] >= 10
    requests = http["http_qps"] * 1
    for proxy, (http_listener, tcp_listener) in HOPS[scenario].items():
        # every request opened a connection through this hop, and its bytes passed it
        grew = after_http[proxy][http_listener]["stot"] - before[proxy][http_listener]["stot"]
        assert grew >= 0.9 * requests, (proxy, before[proxy], after_http[proxy])
        assert after_http[proxy][http_listener]["bin"] - before[proxy][http_listener]["bin"] >= 50 * requests
        # netperf's one-byte transactions, each way, through the TCP listener
        moved = after_rr[proxy][tcp_listener]["bin"] - after_http[proxy][tcp_listener]["bin"]
        assert moved >= 0.9 * rr["transaction_rate"], (proxy, moved, rr)


def capture_wire(node: str, seconds_of: callable) -> bytes:
    """The node's wire (eth0) packets while ``seconds_of()`` runs, as a pcap's bytes."""
    proc = subprocess.Popen(
        ["ip", "netns", "exec", node, "tcpdump", "-i", "eth0", "-U", "-s", "0", "-w", "-", "tcp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(1)  # tcpdump attaches
    try:
        seconds_of()
        time.sleep(0.5)
    finally:
        proc.terminate()
    out, err = proc.communicate(timeout=10)
    assert b"listening on eth0" in err, err
    return out


@pytest.mark.parametrize("scenario", ["proxy-both", *MTLS])
def test_the_wire_carries_tls_exactly_where_mtls_is_on(mesh_lab, scenario):
    node1 = mesh_lab.placement(scenario).details["nodes"][1]
    infos = {p: haproxy.info(mesh_lab.stats_socket(scenario, p)) for p in HOPS[scenario]}
    # fortio's requests, and netperf's new connections (HAProxy may reuse idle HTTP connections to
    # its upstream, never a TCP-mode one: netperf's make new TLS sessions for sure)
    wire = capture_wire(node1, lambda: (fortio_run(mesh_lab, scenario, 100, close=False), rr_run(mesh_lab, scenario)))
    after = {p: haproxy.info(mesh_lab.stats_socket(scenario, p)) for p in HOPS[scenario]}
    if scenario in MTLS:
        assert b"GET /echo" not in wire  # no request in clear text between the nodes
        assert b"\x17\x03\x03" in wire  # TLS application-data records
        for p in MTLS[scenario]:  # both proxies completed TLS handshakes of their own
            assert int(after[p]["CumSslConns"]) > int(infos[p]["CumSslConns"]), p
    else:
        assert b"GET /echo" in wire
        assert all(int(after[p]["CumSslConns"]) == 0 for p in after)


def openssl_client(node: str, *args: str) -> subprocess.CompletedProcess:
    """openssl s_client from a node namespace (outside any pod's capture) to the server pod's HTTP port.

    -ign_eof: read until the proxy closes, so a TLS 1.3 server's rejection of the
    client certificate (sent after the client's side of the handshake) is seen."""
    return subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            node,
            "openssl",
            "s_client",
            "-connect",
            f"{POD_IP[2]}:{fortio.PORT}",
            "-brief",
            "-ign_eof",
            *args,
        ],
        input="GET /echo HTTP/1.0\r\n\r\n",
        capture_output=True,
        text=True,
        timeout=20,
    )


@pytest.mark.parametrize("scenario", list(MTLS))
def test_mtls_refuses_a_client_without_a_valid_certificate(mesh_lab, scenario, intruder_certificate):
    node1 = mesh_lab.placement(scenario).details["nodes"][1]
    tls = mesh_lab.stats_socket(scenario, MTLS[scenario][0]).parent / "tls"
    cert, key = intruder_certificate
    no_cert = openssl_client(node1, "-CAfile", str(tls / "ca.crt"))
    foreign = openssl_client(node1, "-CAfile", str(tls / "ca.crt"), "-cert", str(cert), "-key", str(key))
    valid = openssl_client(
        node1,
        "-CAfile",
        str(tls / "ca.crt"),
        "-cert",
        str(tls / f"{MTLS[scenario][0]}.crt"),
        "-key",
        str(tls / f"{MTLS[scenario][0]}.key"),
    )
    for refused in (no_cert, foreign):
        assert "HTTP/1.0 200" not in refused.stdout
        assert "alert certificate required" in refused.stderr or "alert unknown ca" in refused.stderr, refused.stderr
    # the lab's own certificate is accepted, over TLS 1.3, and reaches the server
    assert "Protocol version: TLSv1.3" in valid.stderr, valid.stderr
    assert "Verification: OK" in valid.stderr
    assert "HTTP/1.0 200" in valid.stdout
    # plaintext to the same port gets no HTTP answer
    plain = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            node1,
            "python3",
            "-c",
            "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), 5);"
            "s.sendall(b'GET /echo HTTP/1.0\\r\\n\\r\\n'); s.settimeout(5);"
            "print(s.recv(100))",
            POD_IP[2],
            str(fortio.PORT),
        ],
        capture_output=True,
        text=True,
    )
    assert "HTTP/1" not in plain.stdout, plain.stdout


def test_certificates_are_never_recorded(mesh_lab):
    for scenario in MTLS:
        details = json.dumps(mesh_lab.placement(scenario).details)
        tls = mesh_lab.stats_socket(scenario, MTLS[scenario][0]).parent / "tls"
        for pem in tls.glob("*.key"):
            key_body = "".join(pem.read_text().splitlines()[1:-1])
            assert key_body[:40] not in details
        assert "BEGIN" not in details


def test_a_campaign_records_the_proxies_cpu_and_peak_rss(lab_env, tmp_path):
    require_root()
    tests = {"http": {"tool": "fortio", "kind": "HTTP", "duration_s": 1.5, "qps": 500, "streams": 2}}
    params = short_params("mesh-usage", ["veth-routed", "proxy-both-mtls"], tests, repetitions=1)
    plan = plan_environment(params, "local-lab")
    counts = runner.run_environment(
        params, plan, lab_target(lab_env, plan.scenarios, ["fortio"]), raw_root=tmp_path, log=lambda m: None
    )
    assert counts["ok"] == 2, counts
    cdir = layout.campaign_dir("mesh-usage", tmp_path)
    recs = {r.scenario: r for r in map(record.load, layout.find(cdir))}
    assert recs["veth-routed"].processes == {}
    procs = recs["proxy-both-mtls"].processes
    assert set(procs) == {"client-sidecar", "server-sidecar"}
    for name, p in procs.items():
        start, end = p["cpu_ticks"]
        assert end > start, (name, p)  # 500 TLS-wrapped requests/s cost the proxy CPU time
        assert p["peak_rss_kib"] > 1000
        assert p["version"] == recs["proxy-both-mtls"].target["versions"]["haproxy"]
    assert procs["client-sidecar"]["side"] == "client" and procs["server-sidecar"]["side"] == "server"
    assert recs["proxy-both-mtls"].placement["mesh"]["kind"] == "sidecars-mtls"


@pytest.mark.parametrize("mesh", haproxy.MESHES)
def test_haproxy_accepts_each_generated_configuration(tmp_path, mesh):
    require_root()  # the configuration drops to the proxy's uid, which haproxy -c checks
    nodes, pods = {1: "n1", 2: "n2"}, {1: "p1", 2: "p2"}
    plan = shapes.proxies(mesh, nodes, pods, [fortio.PORT])
    tls = tmp_path / "tls"
    certificates.make_certificates(tls, [p.identity for p in plan])
    for p in plan:
        cfg = tmp_path / f"{p.name}.cfg"
        cfg.write_text(haproxy.haproxy_cfg(p, tmp_path / f"{p.name}.sock", tls))
        proc = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert ("verify required" in cfg.read_text()) == (mesh in shapes.MTLS_MESHES)


def test_a_mesh_needs_pods(tmp_path, monkeypatch):
    from tests.conftest import project_with_environment

    project_with_environment(
        tmp_path,
        monkeypatch,
        "m",
        "description: x\ntarget: lab\nscenarios:\n  a: {topology: host, mesh: sidecars, description: x}\n",
    )
    with pytest.raises(ConfigError, match="mesh: needs pods"):
        load_environment("m")


def test_a_waypoint_needs_envoy(tmp_path, monkeypatch):
    from tests.conftest import project_with_environment

    project_with_environment(
        tmp_path,
        monkeypatch,
        "m",
        "description: x\ntarget: lab\nscenarios:\n"
        "  a: {topology: veth-routed, mesh: node-proxies-waypoint, description: x}\n",
    )
    with pytest.raises(ConfigError, match=r"scenarios.a.mesh: node-proxies-waypoint needs proxy: envoy"):
        load_environment("m")
    assert set(haproxy.MESHES) < set(shapes.MESHES)


def test_the_eks_istio_scenarios_render_their_namespace_label_and_mtls_record(monkeypatch):
    """Istio on EKS is never run here (no cluster with Istio at hand): what can be checked is what
    `benchlib render` would apply, without contacting anything."""
    from benchlib import collectors
    from benchlib.targets.kubernetes import manifests, render

    env = load_environment("eks-m6i")
    items = render(env, list(env.scenarios), collectors.servers(["netperf", "fortio"]))
    titles = {title: body for title, body in items}
    label = "namespace labels, set before its pods are created and removed after"
    namespace = manifests.namespace_name(env, "<id>")
    assert (
        titles[f"istio-sidecar: {label}"] == f"kubectl label namespace {namespace} istio-injection=enabled --overwrite"
    )
    assert (
        titles[f"istio-ambient: {label}"]
        == f"kubectl label namespace {namespace} istio.io/dataplane-mode=ambient --overwrite"
    )
    assert not any(t.startswith("A: namespace labels") for t in titles)
    for name in ("istio-sidecar", "istio-sidecar-plaintext", "istio-ambient"):
        assert "peerauthentication" in titles[f"{name}: record mtls_mode"]
        assert env.scenarios[name].placement == "service"  # Istio's mTLS applies to a known Service
    assert env.scenarios["istio-sidecar"].settings["mtls"] == "STRICT"
    assert env.scenarios["istio-sidecar-plaintext"].settings["mtls"] == "DISABLE"
    # every pod's container has the name exec asks for, sidecar or not
    assert titles["istio-sidecar: server pod"]["spec"]["containers"][0]["name"] == manifests.CONTAINER
    assert titles["daemonset"]["spec"]["template"]["spec"]["containers"][0]["name"] == manifests.CONTAINER
    # the next scenario's patch removes the previous one's label
    assert manifests.namespace_labels_patch({"istio-injection": "enabled"}, {}) == {
        "metadata": {"labels": {"istio-injection": None}}
    }


def test_private_keys_are_mode_0600_even_over_an_old_readable_file(tmp_path):
    tls = tmp_path / "tls"
    tls.mkdir(mode=0o755)
    (tls / "client.pem").write_text("an old file left readable\n")
    (tls / "client.pem").chmod(0o644)
    certificates.make_certificates(tls, ["client", "server"])
    assert tls.stat().st_mode & 0o777 == 0o700
    private = sorted(tls.glob("*.key")) + sorted(tls.glob("*.pem"))
    assert len(private) == 5  # the CA's key, and each identity's key and PEM
    assert {p.name: p.stat().st_mode & 0o777 for p in private} == {p.name: 0o600 for p in private}


def test_a_haproxy_killed_mid_run_fails_that_run_only_and_is_started_again(lab_env, tmp_path):
    require_root()
    counts, (failed, after), pid = campaign_with_a_proxy_killed(lab_env, tmp_path, "proxy-server", "server-sidecar")
    assert (counts["failed"], counts["ok"]) == (1, 1), counts
    reason = failed.attempts[-1].reason
    assert "proxy server-sidecar exited -9" in reason and "(restarted: server-sidecar)" in reason, reason
    assert after.attempts[-1].outcome == "ok"
    assert after.processes["server-sidecar"]["cpu_ticks"][1] > after.processes["server-sidecar"]["cpu_ticks"][0]
    assert not os.path.exists(f"/proc/{pid}")
