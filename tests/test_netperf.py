"""netperf: the pure builder, and the parser on output the real tool printed."""

import json

import pytest

from benchlib.collectors import ParseError, netperf
from tests.conftest import FIXTURES

CAPTURED = FIXTURES / "netperf"


def captured(name):
    return (CAPTURED / f"{name}.stdout").read_text(), json.loads((CAPTURED / f"{name}.json").read_text())


def test_build_pins_streams_round_robin_and_uses_keyval_output():
    invs = netperf.commands("TCP_STREAM", "198.18.0.2", 3, 4, 65536, [0, 2], [1, 3])
    assert [(i.client_cpu, i.server_cpu) for i in invs] == [(0, 1), (2, 3), (0, 1), (2, 3)]
    argv = invs[0].argv
    assert argv[:8] == ["netperf", "-H", "198.18.0.2", "-p", "12865", "-t", "TCP_STREAM", "-l"]
    assert argv[argv.index("-T") + 1] == "0,1"
    assert argv[argv.index("-m") + 1] == "65536"
    assert "-j" not in argv  # latency statistics only for RR tests
    assert argv[argv.index("-k") + 1].split(",")[0] == "THROUGHPUT"


def test_build_rr_sets_request_response_size_and_timing_statistics():
    argv = netperf.commands("TCP_CRR", "h", 2, 1, 1, [0], [1])[0].argv
    assert "-j" in argv and argv[argv.index("-r") + 1] == "1,1"
    assert "P99_LATENCY" in argv[argv.index("-k") + 1]


def test_build_rejects_fractional_seconds_and_unknown_kinds():
    with pytest.raises(ValueError, match="whole seconds"):
        netperf.commands("TCP_RR", "h", 1.5, 1, None, [0], [1])
    with pytest.raises(ValueError, match="UDP_RR"):
        netperf.commands("UDP_RR", "h", 1, 1, None, [0], [1])


def test_builder_output_matches_what_was_captured():
    # The fixtures were produced by the builder: if it changes, recapture.
    for name, kind, size in (("tcp_stream", "TCP_STREAM", 65536), ("tcp_rr", "TCP_RR", 1), ("tcp_crr", "TCP_CRR", 1)):
        _, meta = captured(name)
        host = meta["argv"][meta["argv"].index("-H") + 1]
        assert netperf.commands(kind, host, 1, 1, size, [0], [1])[0].argv == meta["argv"]


def test_parse_captured_stream():
    out, meta = captured("tcp_stream")
    assert meta["returncode"] == 0
    m = netperf.parse("TCP_STREAM", [out])
    values = netperf.parse_keyval(out)
    assert m["throughput"] == pytest.approx(float(values["THROUGHPUT"]) / 1000)
    assert m["throughput"] > 0.1  # Gbit/s over a veth pair
    assert set(m) == {"throughput", "retransmits"}


@pytest.mark.parametrize(
    "name, kind, rate", [("tcp_rr", "TCP_RR", "transaction_rate"), ("tcp_crr", "TCP_CRR", "connection_rate")]
)
def test_parse_captured_rr(name, kind, rate):
    out, _ = captured(name)
    m = netperf.parse(kind, [out])
    assert m[rate] == pytest.approx(float(netperf.parse_keyval(out)["THROUGHPUT"]))
    assert 0 < m["latency_min"] <= m["latency_p50"] <= m["latency_p90"] <= m["latency_p99"]


def test_parse_sums_streams_and_drops_uncombinable_percentiles():
    out, _ = captured("tcp_rr")
    one = netperf.parse("TCP_RR", [out])
    two = netperf.parse("TCP_RR", [out, out])
    assert two == {"transaction_rate": pytest.approx(2 * one["transaction_rate"])}


@pytest.mark.parametrize("name", ["error_no_server", "error_bad_selector", "classic_output"])
def test_parse_refuses_error_and_classic_output(name):
    out, meta = captured(name)
    with pytest.raises(ParseError):
        netperf.parse("TCP_STREAM", [out])
    if name.startswith("error"):
        assert meta["returncode"] != 0
        assert (CAPTURED / f"{name}.stderr").read_text() or out  # netperf said why


def test_parse_refuses_wrong_units_and_truncation():
    out, _ = captured("tcp_rr")
    with pytest.raises(ParseError, match="10\\^6bits/s"):
        netperf.parse("TCP_STREAM", [out])
    truncated = "\n".join(line for line in out.splitlines() if not line.startswith("P99"))
    with pytest.raises(ParseError, match="P99_LATENCY"):
        netperf.parse("TCP_RR", [truncated])
    with pytest.raises(ParseError, match="not a number"):
        netperf.parse("TCP_RR", [out.replace("THROUGHPUT=", "THROUGHPUT=abc")])


def test_live_output_from_the_lab_parses(lab):
    pl = lab.placement("host")
    for kind in ("TCP_STREAM", "TCP_RR"):
        inv = netperf.commands(kind, pl.server_address, 1, 1, None, pl.client_cpus, pl.server_cpus)[0]
        out, err = lab.spawn("host", "client", inv.argv).communicate(timeout=30)
        metrics = netperf.parse(kind, [out])
        assert all(v >= 0 for v in metrics.values()), err
