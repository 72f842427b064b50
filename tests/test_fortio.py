"""fortio: the pure builder, the parser on output the real tool printed, and a real run in the lab."""

import json

import pytest

from benchlib.collectors import ParseError, fortio
from tests.conftest import FIXTURES, require_root, serving_lab

CAPTURED = FIXTURES / "fortio"


def captured(name):
    return (CAPTURED / f"{name}.stdout").read_text(), json.loads((CAPTURED / f"{name}.json").read_text())


def load_args(argv):
    """The fortio arguments, without the pinning and the machine-specific binary path."""
    return argv[argv.index("load") :]


def test_build_fixed_qps_keepalive_and_close():
    spec = fortio.Spec(tool="fortio", kind="HTTP", duration_s=2, qps=5000, streams=4)
    [inv] = fortio.build(spec, "198.19.2.10", [0], [1])
    assert inv.argv[:3] == ["taskset", "-c", "0"] and inv.argv[3].endswith("fortio")
    args = load_args(inv.argv)
    assert args[args.index("-qps") + 1] == "5000" and args[args.index("-t") + 1] == "2s"
    assert args[args.index("-c") + 1] == "4" and args[args.index("-json") + 1] == "-"
    assert args[args.index("-p") + 1] == "50,90,99,99.9"
    assert args[args.index("-r") + 1] == "1e-05"  # 10 us histogram buckets, not fortio's 1 ms
    assert args[-1] == "http://198.19.2.10:8080/echo" and "-keepalive=false" not in args
    close = fortio.Spec(tool="fortio", kind="HTTP", duration_s=2, qps="max", connection_close=True)
    args = load_args(fortio.build(close, "h", [0], [1])[0].argv)
    assert "-keepalive=false" in args and args[args.index("-qps") + 1] == "0"  # fortio: 0 = no pacing


def test_build_rejects_bad_qps():
    for qps in (0, -5, "fast", None):
        with pytest.raises(ValueError, match="qps"):
            fortio.command("h", 1, qps, 1, False, [0], [1])


def test_builder_output_matches_what_was_captured():
    # The fixtures were produced by the builder: if it changes, recapture.
    for name, qps, conns, close in (
        ("keepalive_1000", 1000, 1, False),
        ("close_1000", 1000, 1, True),
        ("keepalive_max", "max", 2, False),
    ):
        _, meta = captured(name)
        host = meta["argv"][-1].split("//")[1].split(":")[0]
        assert load_args(fortio.command(host, 1, qps, conns, close, [0], [1]).argv) == load_args(meta["argv"])


@pytest.mark.parametrize("name", ["keepalive_1000", "close_1000", "keepalive_max"])
def test_parse_captured_runs(name):
    out, meta = captured(name)
    doc = json.loads(out)
    m = fortio.parse("HTTP", [out])
    assert meta["returncode"] == 0
    assert set(m) == {
        "http_qps",
        "http_latency_p50",
        "http_latency_p90",
        "http_latency_p99",
        "http_latency_p999",
        "http_errors",
    }
    assert m["http_qps"] == pytest.approx(doc["ActualQPS"])
    assert 0 < m["http_latency_p50"] <= m["http_latency_p90"] <= m["http_latency_p99"] <= m["http_latency_p999"]
    assert m["http_latency_p50"] == pytest.approx(doc["DurationHistogram"]["Percentiles"][0]["Value"] * 1e6)
    assert m["http_errors"] == 0


def test_connection_close_opens_a_socket_per_request():
    # What the close variant measures: fortio really reconnected for every request.
    keep, _ = captured("keepalive_1000")
    close, _ = captured("close_1000")
    assert json.loads(keep)["SocketCount"] == 1
    doc = json.loads(close)
    assert doc["SocketCount"] >= doc["DurationHistogram"]["Count"]


def test_parse_counts_http_errors():
    out, _ = captured("errors_503")
    doc = json.loads(out)
    m = fortio.parse("HTTP", [out])
    assert doc["RetCodes"]["503"] > 0
    assert m["http_errors"] == doc["RetCodes"]["503"] == doc["ErrorsDurationHistogram"]["Count"]


def test_parse_refuses_captured_abort_and_broken_output():
    out, meta = captured("error_no_server")
    assert meta["returncode"] != 0
    assert "connection refused" in (CAPTURED / "error_no_server.stderr").read_text()
    with pytest.raises(ParseError, match="no JSON"):
        fortio.parse("HTTP", [out])
    good, _ = captured("keepalive_1000")
    with pytest.raises(ParseError, match="not JSON"):
        fortio.parse("HTTP", [good[:200]])
    doc = json.loads(good)
    doc["DurationHistogram"]["Percentiles"] = doc["DurationHistogram"]["Percentiles"][:2]
    with pytest.raises(ParseError, match="p99 latency"):
        fortio.parse("HTTP", [json.dumps(doc)])
    with pytest.raises(ParseError, match="unknown test kind"):
        fortio.parse("TCP_RR", [good])


@pytest.fixture(scope="module")
def fortio_lab(lab_env):
    """The host and veth-routed scenarios with a fortio echo server in each (the session's `lab` runs netperf only)."""
    require_root()
    with serving_lab(lab_env, ["host", "veth-routed"], ["fortio"]) as target:
        yield target


def test_live_runs_in_the_lab_parse(fortio_lab):
    for scenario in ("host", "veth-routed"):
        pl = fortio_lab.placement(scenario)
        for close in (False, True):
            inv = fortio.command(pl.server_address, 1, 200, 1, close, pl.client_cpus, pl.server_cpus)
            out, err = fortio_lab.spawn(scenario, "client", inv.argv).communicate(timeout=30)
            m = fortio.parse("HTTP", [out])
            assert m["http_qps"] == pytest.approx(200, rel=0.2), (scenario, close, err[-500:])
            assert m["http_errors"] == 0
