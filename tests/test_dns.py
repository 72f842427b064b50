"""dns (dnsperf against dnsmasq): the pure builder, the parser on output the real tool printed, and real runs."""

import json
import re
import statistics

import pytest

from benchlib.collectors import ParseError, dns
from tests.conftest import FIXTURES, require_root, serving_lab

CAPTURED = FIXTURES / "dns"


def captured(name):
    return (CAPTURED / f"{name}.stdout").read_text(), json.loads((CAPTURED / f"{name}.json").read_text())


def answered(out):
    return [float(m.group(1)) for m in re.finditer(r"^> NOERROR \S+ A (\S+)$", out, re.M)]


def test_build_fixed_rate_and_unpaced():
    spec = dns.Spec(tool="dns", kind="DNS_UDP", duration_s=2, qps=5000)
    [inv] = dns.build(spec, "198.19.2.10", [0], [1])
    assert inv.argv[:2] == ["sh", "-c"]
    script = inv.argv[2]
    assert script.startswith(f"yes '{dns.NAME} A' | exec taskset -c 0 dnsperf -s 198.19.2.10 -p 53 -m udp")
    assert " -l 2 -t 1 " in script and script.endswith(" -v -Q 5000")
    unpaced = dns.command("DNS_UDP", "h", 2, "max", 3, [0], [1]).argv[2]
    assert " -c 3 " in unpaced and "-Q" not in unpaced  # max: no rate limit


def test_build_rejects_bad_kind_and_qps():
    with pytest.raises(ValueError, match="DNS_TCP"):
        dns.command("DNS_TCP", "h", 1, 100, 1, [0], [1])
    with pytest.raises(ValueError, match="qps"):
        dns.command("DNS_UDP", "h", 1, 0, 1, [0], [1])
    with pytest.raises(ValueError, match="not an address"):
        dns.command("DNS_UDP", "h; reboot", 1, 100, 1, [0], [1])


def test_builder_output_matches_what_was_captured():
    # The fixtures were produced by the builder: if it changes, recapture.
    _, meta = captured("udp_1000")
    host = meta["argv"][2].split(" -s ")[1].split()[0]
    assert dns.command("DNS_UDP", host, 1, 1000, 1, [0], [1]).argv == meta["argv"]


def test_parse_captured_run():
    out, meta = captured("udp_1000")
    m = dns.parse("DNS_UDP", [out])
    assert meta["returncode"] == 0
    lat = answered(out)
    assert len(lat) > 900  # one line per query at 1000 queries/s for 1 s
    assert m["dns_latency_p50"] == pytest.approx(statistics.median(lat) * 1e6)
    assert min(lat) * 1e6 <= m["dns_latency_p50"] <= m["dns_latency_p99"] <= max(lat) * 1e6
    assert m["dns_qps"] == pytest.approx(1000, rel=0.05)
    assert m["dns_errors"] == 0


def test_percentile_interpolates_like_numpy():
    import numpy as np

    values = sorted(answered(captured("udp_1000")[0]))
    for p in (50, 99):
        assert dns._percentile(values, p) == pytest.approx(np.percentile(values, p))


@pytest.mark.parametrize(
    "name, says",
    [
        ("error_refused", r"no query was answered with NOERROR \([1-9]\d* errors"),
        ("error_no_server", r"NOERROR \(0 errors, [1-9]\d* timeouts"),
    ],
)
def test_parse_refuses_captured_failures(name, says):
    out, meta = captured(name)
    assert meta["returncode"] == 0  # dnsperf exits 0 even when nothing was answered
    with pytest.raises(ParseError, match=says):
        dns.parse("DNS_UDP", [out])


def test_parse_counts_errors_next_to_answers():
    good, _ = captured("udp_1000")
    refused = [line for line in captured("error_refused")[0].splitlines() if line.startswith("> REFUSED")]
    timeouts = [line for line in captured("error_no_server")[0].splitlines() if line.startswith("> T ")]
    lines = good.splitlines()
    first_answer = next(i for i, line in enumerate(lines) if line.startswith("> NOERROR"))
    mixed = lines[:first_answer] + refused[:3] + timeouts[:2] + lines[first_answer:]
    assert dns.parse("DNS_UDP", ["\n".join(mixed)])["dns_errors"] == 5
    # Timeouts after the last answer were still in flight when the time limit stopped dnsperf.
    cut_off = good.replace("[Status] Testing complete", "\n".join(timeouts[:2]) + "\n[Status] Testing complete")
    assert dns.parse("DNS_UDP", [cut_off])["dns_errors"] == 0


def test_parse_refuses_a_run_cut_short():
    good, _ = captured("udp_1000")
    with pytest.raises(ParseError, match="no statistics"):
        dns.parse("DNS_UDP", [good[: good.index("Statistics:")]])


@pytest.fixture(scope="module")
def dns_lab(lab_env):
    """The host and bridge scenarios with dnsmasq in each (the session's `lab` runs netperf only)."""
    require_root()
    with serving_lab(lab_env, ["host", "bridge"], ["dns"]) as target:
        yield target


def test_live_runs_in_the_lab_parse(dns_lab):
    for scenario in ("host", "bridge"):
        pl = dns_lab.placement(scenario)
        for kind in dns.KINDS:
            inv = dns.command(kind, pl.server_address, 1, 500, 1, pl.client_cpus, pl.server_cpus)
            proc = dns_lab.spawn(scenario, "client", inv.argv)
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, (scenario, kind, out[-500:], err[-500:])
            m = dns.parse(kind, [out])
            assert m["dns_qps"] == pytest.approx(500, rel=0.1), (scenario, kind, err)
            assert m["dns_errors"] == 0 and 0 < m["dns_latency_p50"] <= m["dns_latency_p99"]


def test_a_5000_qps_run_through_the_runner_loses_no_query(tmp_path, lab_env):
    """The runner reads a run's output only at its end. dnsperf -v prints a line per query
    (~500 kB per 2 s run): when nothing drained the pipe, dnsperf blocked on it, stopped
    reading answers for over a second and counted ~99 queries lost in every run, at
    ~3000 q/s instead of 5000. Now the target drains the pipe as it fills."""
    require_root()
    from benchlib.measure import runner
    from benchlib.measure.plan import plan_environment
    from benchlib.records import layout, record
    from tests.conftest import lab_target, short_params

    test = {"tool": "dns", "kind": "DNS_UDP", "duration_s": 2, "qps": 5000}
    params = short_params("dns5000", ["host"], {"dns": test}, repetitions=2, retries=1)
    plan = plan_environment(params, "local-lab")
    runner.run_environment(params, plan, lab_target(lab_env, ["host"], ["dns"]), raw_root=tmp_path, log=lambda m: None)
    records = [record.load(p) for p in layout.find(tmp_path / "dns5000")]
    assert len(records) == 2
    for rec in records:
        values = dns.parse("DNS_UDP", rec.stdouts)
        assert values["dns_errors"] == 0 and values["dns_qps"] > 4500, (rec.run_id, values)
        assert len(rec.stdouts[0]) > 256 * 1024  # far more than a pipe holds
