"""iperf3: the pure builder, the parser on output the real tool printed, and a real run in the lab."""

import json
from pathlib import Path

import pytest

from benchlib.base.errors import ConfigError
from benchlib.collectors import ParseError, iperf3
from benchlib.settings.loading import load_params
from tests.conftest import FIXTURES, lab_target, require_root, serving_lab

CAPTURED = FIXTURES / "iperf3"


def captured(name):
    return (CAPTURED / f"{name}.stdout").read_text(), json.loads((CAPTURED / f"{name}.json").read_text())


def test_build_tcp_omits_warmup_and_pins_both_ends():
    spec = iperf3.Spec(tool="iperf3", kind="TCP_STREAM", duration_s=3, streams=4)
    [inv] = iperf3.build(spec, "198.18.0.2", [0, 2], [1, 3])
    argv = inv.argv
    assert argv[:3] == ["iperf3", "-c", "198.18.0.2"] and "-J" in argv
    assert argv[argv.index("-t") + 1] == "3" and argv[argv.index("-P") + 1] == "4"
    assert argv[argv.index("-O") + 1] == "1" and "-u" not in argv
    assert argv[argv.index("-A") + 1] == "0,1"
    assert iperf3.expected_wall_s(spec) == 4


def test_build_udp_bitrate_and_unlimited_without_omit():
    target = iperf3.command("UDP_STREAM", "h", 2, 1, 1400, "500M", 0, 1).argv
    assert target[target.index("-b") + 1] == "500M" and target[target.index("-l") + 1] == "1400"
    assert "-O" not in target  # iperf3 3.12 miscounts UDP loss after an omitted warm-up
    unlimited = iperf3.command("UDP_STREAM", "h", 2, 1, None, "unlimited", 0, 1).argv
    assert unlimited[unlimited.index("-b") + 1] == "0"


def test_build_rejects_what_iperf3_cannot_run():
    with pytest.raises(ValueError, match="whole seconds"):
        iperf3.command("TCP_STREAM", "h", 1.5, 1, None, None, 0, 1)
    with pytest.raises(ValueError, match="needs a bitrate"):
        iperf3.command("UDP_STREAM", "h", 1, 1, None, None, 0, 1)
    with pytest.raises(ValueError, match="UDP_STREAM only"):
        iperf3.command("TCP_STREAM", "h", 1, 1, None, "1G", 0, 1)
    with pytest.raises(ValueError, match="TCP_RR"):
        iperf3.command("TCP_RR", "h", 1, 1, None, None, 0, 1)


def test_builder_output_matches_what_was_captured():
    # The fixtures were produced by the builder: if it changes, recapture.
    cases = {
        "tcp_stream": ("TCP_STREAM", 1, None, None),
        "tcp_stream_4": ("TCP_STREAM", 4, None, None),
        "udp_bitrate": ("UDP_STREAM", 1, 1400, "500M"),
        "udp_unlimited": ("UDP_STREAM", 1, 1400, "unlimited"),
    }
    for name, (kind, streams, size, bitrate) in cases.items():
        _, meta = captured(name)
        argv = meta["argv"]
        c, _, s = argv[argv.index("-A") + 1].partition(",")
        assert iperf3.command(kind, argv[2], 1, streams, size, bitrate, int(c), int(s)).argv == argv


@pytest.mark.parametrize("name", ["tcp_stream", "tcp_stream_4"])
def test_parse_captured_tcp(name):
    out, meta = captured(name)
    doc = json.loads(out)
    m = iperf3.parse("TCP_STREAM", [out])
    assert meta["returncode"] == 0 and set(m) == {"throughput", "retransmits"}
    assert m["throughput"] == pytest.approx(doc["end"]["sum_received"]["bits_per_second"] / 1e9)
    assert m["throughput"] > 0.1  # Gbit/s over a veth pair
    assert m["retransmits"] == doc["end"]["sum_sent"]["retransmits"]


@pytest.mark.parametrize("name", ["udp_bitrate", "udp_unlimited"])
def test_parse_captured_udp(name):
    out, _ = captured(name)
    doc = json.loads(out)
    m = iperf3.parse("UDP_STREAM", [out])
    assert set(m) == {"throughput", "udp_loss_pct", "udp_jitter"}
    assert m["udp_loss_pct"] == pytest.approx(doc["end"]["sum"]["lost_percent"])
    assert 0 <= m["udp_loss_pct"] <= 100
    assert m["udp_jitter"] == pytest.approx(doc["end"]["sum"]["jitter_ms"] * 1000)
    assert m["throughput"] <= doc["end"]["sum_sent"]["bits_per_second"] / 1e9  # received <= sent


@pytest.mark.parametrize(
    "name, says", [("error_no_server", "No route to host"), ("error_server_busy", "server is busy")]
)
def test_parse_refuses_captured_errors(name, says):
    out, meta = captured(name)
    # iperf3 3.12 with -J exits 0 after such errors: only the document says it failed.
    assert meta["returncode"] == 0
    with pytest.raises(ParseError, match=says):
        iperf3.parse("TCP_STREAM", [out])


def test_parse_refuses_wrong_protocol_truncation_and_impossible_loss():
    tcp, _ = captured("tcp_stream")
    udp, _ = captured("udp_bitrate")
    with pytest.raises(ParseError, match="TCP test, expected UDP_STREAM"):
        iperf3.parse("UDP_STREAM", [tcp])
    with pytest.raises(ParseError, match="not JSON"):
        iperf3.parse("TCP_STREAM", [tcp[: len(tcp) // 2]])
    doc = json.loads(udp)
    doc["end"]["sum"]["lost_percent"] = 119.6  # what 3.12 prints for UDP with -O (esnet/iperf#1489)
    with pytest.raises(ParseError, match="outside 0-100"):
        iperf3.parse("UDP_STREAM", [json.dumps(doc)])
    del doc["end"]["sum"]["jitter_ms"]
    doc["end"]["sum"]["lost_percent"] = 1.0
    with pytest.raises(ParseError, match="end.sum.jitter_ms"):
        iperf3.parse("UDP_STREAM", [json.dumps(doc)])


def test_version():
    assert iperf3.version("iperf 3.12 (cJSON 1.7.15)\nLinux vm 6.18\n") == "3.12"


@pytest.fixture(scope="module")
def iperf3_lab(lab_env):
    """The host and vxlan scenarios with an iperf3 server in each (the session's `lab` runs netperf only)."""
    require_root()
    with serving_lab(lab_env, ["host", "vxlan"], ["iperf3"]) as target:
        yield target


def test_live_runs_in_the_lab_parse(iperf3_lab):
    lab = iperf3_lab
    for scenario in ("host", "vxlan"):
        pl = lab.placement(scenario)
        for kind, bitrate in (("TCP_STREAM", None), ("UDP_STREAM", "200M")):
            inv = iperf3.command(kind, pl.server_address, 1, 1, None, bitrate, pl.client_cpus[0], pl.server_cpus[0])
            out, err = lab.spawn(scenario, "client", inv.argv).communicate(timeout=30)
            m = iperf3.parse(kind, [out])
            assert m["throughput"] > 0.01, (scenario, kind, err)


# -- the three new collectors together through the runner and the tidy tables ----------------------
CAMPAIGN_TESTS = {
    "iperf3_tcp": {"tool": "iperf3", "kind": "TCP_STREAM", "duration_s": 1, "streams": 2},
    "iperf3_udp": {"tool": "iperf3", "kind": "UDP_STREAM", "duration_s": 1, "bitrate": "200M", "message_size": 1400},
    "http_close": {"tool": "fortio", "kind": "HTTP", "duration_s": 1, "qps": 300, "connection_close": True},
    "dns_udp": {"tool": "dns", "kind": "DNS_UDP", "duration_s": 1, "qps": 1000},
}


def test_short_campaign_of_the_new_tools_reaches_the_tidy_tables(tmp_path, lab_env):
    require_root()
    from benchlib.measure import runner
    from benchlib.measure.plan import plan_environment
    from benchlib.records import layout
    from benchlib.tables import tidy
    from benchlib.vocabulary import schema
    from tests.conftest import short_params

    params = short_params("newtools", ["host", "veth-routed"], CAMPAIGN_TESTS, repetitions=2)
    plan = plan_environment(params, "local-lab")
    tools = sorted({t.tool for t in plan.tests.values()})
    target = lab_target(lab_env, plan.scenarios, tools)
    counts = runner.run_environment(params, plan, target, raw_root=tmp_path, log=lambda m: None)
    assert counts["ok"] == counts["planned"] == 2 * 4 * 2, counts
    runs, metrics = tidy.build_tables(layout.campaign_dir("newtools", tmp_path))
    assert set(runs["tool_version"]) >= {"3.12", "1.65.0", "2.10.0"}
    per_test = {t: set(g["metric"]) for (t,), g in metrics.filter(side="none").group_by("test")}
    assert per_test == {
        "iperf3_tcp": {"throughput", "retransmits"},
        "iperf3_udp": {"throughput", "udp_loss_pct", "udp_jitter"},
        "http_close": {
            "http_qps",
            "http_latency_p50",
            "http_latency_p90",
            "http_latency_p99",
            "http_latency_p999",
            "http_errors",
        },
        "dns_udp": {"dns_qps", "dns_latency_p50", "dns_latency_p99", "dns_errors"},
    }
    assert all(unit == schema.METRICS[m].unit for m, unit in metrics.select("metric", "unit").iter_rows())
    http = metrics.filter(metric="http_qps")["value"]
    assert http.is_between(300 * 0.8, 300 * 1.05).all(), http.to_list()
    cpu = metrics.filter(metric="cpu_busy_pct")
    assert len(cpu) == 2 * len(runs) and set(cpu["side"]) == {"client", "server"} and (cpu["value"] >= 0).all()
    # A light test may leave no 1/100 s tick in a 0.6 s window; a TCP stream keeps its sender busy.
    assert (cpu.filter(test="iperf3_tcp", side="client")["value"] > 10).all()
    # the CPU window starts after iperf3's omitted TCP warm-up second, right away for the others
    trim = params.experiment.cpu_trim_s
    for run in runs.iter_rows(named=True):
        window_start = json.loads((Path(run["record"]) / "cpu.json").read_text())["sides"]["client"]["start"]["wall"]
        delay = window_start - run["started_at"].timestamp()
        warmup = 1 if run["test"] == "iperf3_tcp" else 0
        assert warmup + trim <= delay < warmup + trim + 0.5, (run["run_id"], delay)
    # the tidy runs table carries what the figures put on an axis
    rate = {r["test"]: r for r in runs.unique("test", keep="first").iter_rows(named=True)}
    assert rate["http_close"]["offered_qps"] == 300 and rate["http_close"]["connection_close"]
    assert rate["dns_udp"]["offered_qps"] == 1000 and runs["services"].is_null().all()


def params_with(tmp_path, test: dict):
    import yaml

    from tests.conftest import REPO

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["tests"]["new"] = test
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "test, expected",
    [
        (
            {"tool": "iperf3", "kind": "TCP_RR", "duration_s": 2},
            "tests.new.kind: 'TCP_RR' is not a kind iperf3 runs; allowed: ['TCP_STREAM', 'UDP_STREAM']",
        ),
        (
            {"tool": "iperf3", "kind": "UDP_STREAM", "duration_s": 2},
            "tests.new.bitrate: iperf3 UDP_STREAM needs bitrate",
        ),
        (
            {"tool": "iperf3", "kind": "UDP_STREAM", "duration_s": 2, "bitrate": "fast"},
            "tests.new.bitrate: 'fast' is not a bitrate",
        ),
        (
            {"tool": "iperf3", "kind": "TCP_STREAM", "duration_s": 2, "bitrate": "1G"},
            "tests.new.bitrate: not used by iperf3 TCP_STREAM",
        ),
        ({"tool": "iperf3", "kind": "TCP_STREAM", "duration_s": 1.5}, "duration_s: iperf3 runs whole seconds"),
        ({"tool": "fortio", "kind": "HTTP", "duration_s": 2}, "tests.new.qps: fortio HTTP needs qps"),
        ({"tool": "fortio", "kind": "HTTP", "duration_s": 2, "qps": 0}, "tests.new.qps"),
        (
            {"tool": "fortio", "kind": "HTTP", "duration_s": 2, "qps": 10, "message_size": 64},
            "tests.new.message_size: not used by fortio",
        ),
        (
            {"tool": "dns", "kind": "DNS_UDP", "duration_s": 2, "qps": 10, "connection_close": True},
            "tests.new.connection_close: not used by dns",
        ),
        ({"tool": "dns", "kind": "UDP", "duration_s": 2, "qps": 10}, "allowed: ['DNS_UDP']"),
        (
            {"tool": "netperf", "kind": "TCP_RR", "duration_s": 2, "qps": 10},
            "tests.new.qps: not used by netperf; remove it (netperf takes kind, duration_s, streams, timeout_s, message_size)",
        ),
        ({"tool": "wrk", "kind": "HTTP", "duration_s": 2}, "tests.new.tool"),
    ],
)
def test_params_for_the_new_tools_name_the_bad_key(tmp_path, test, expected):
    with pytest.raises(ConfigError) as err:
        load_params(params_with(tmp_path, test))
    assert expected in str(err.value) and "params.yaml" in str(err.value)


def test_params_for_the_new_tools_accept_good_tests(tmp_path):
    good = [
        {"tool": "iperf3", "kind": "UDP_STREAM", "duration_s": 2, "bitrate": "unlimited", "message_size": 1400},
        {"tool": "fortio", "kind": "HTTP", "duration_s": 2, "qps": "max", "connection_close": True},
        {"tool": "dns", "kind": "DNS_UDP", "duration_s": 2.5, "qps": 2000},
    ]
    for test in good:
        spec = load_params(params_with(tmp_path, test)).tests["new"]
        assert spec.model_dump(exclude_defaults=True) == test
