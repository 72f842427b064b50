"""Capture keeps bytes: a tool that prints bytes that are not UTF-8 keeps its whole output in the
record, byte for byte, and its parser decides what they mean; no reader thread dies.

The runner here is the real one, and so are the client processes: a target on this machine whose
client command is a stand-in for one netperf invocation (`cat` of what netperf printed, with bytes
added that are not UTF-8). No lab is built, so the machine lock is not needed."""

import platform
import threading

import pytest

from benchlib.collectors import ParseError, get, netperf
from benchlib.host import cpu
from benchlib.measure import runner
from benchlib.measure.plan import plan_environment
from benchlib.records import layout, record
from benchlib.tables import tidy
from benchlib.targets import LocalProcess, Placement, Target
from tests.conftest import FIXTURES, RR, short_params

RR_OUTPUT = (FIXTURES / "netperf" / "tcp_rr.stdout").read_bytes()
# what each scenario's stand-in prints: (stdout, stderr, exit code)
PRINTED = {
    # a log line of raw bytes besides the keyval lines the parser reads: harmless
    "host": (b"\xff\xfe netperf's own chatter \xc3(\n" + RR_OUTPUT, b"warning: \xe9t\xe9\n", 0),
    # a byte that is not UTF-8 in a field the parser needs
    "bridge": (RR_OUTPUT.replace(b"P50_LATENCY=", b"P50_LATENCY=1\xff"), b"", 0),
    # a failing tool whose last words are not UTF-8
    "veth-routed": (b"", b"send_data: data send error: \xff\xfe\n", 1),
}


class StandIn(Target):
    """The client runs ``cat`` of what the scenario's tool printed (PRINTED)."""

    kind = "stand-in"

    def __init__(self, env, scenarios, scratch):
        super().__init__(env, scenarios, log=lambda m: None)
        self.scratch = scratch

    def setup(self):
        for scenario, (out, err, _) in PRINTED.items():
            (self.scratch / f"{scenario}.out").write_bytes(out)
            (self.scratch / f"{scenario}.err").write_bytes(err)

    def teardown(self):
        pass

    def activate(self, scenario):
        self.placements[scenario] = Placement(scenario, "127.0.0.1", "local", "local", [0], [1])

    def start_server(self, scenario, server, cpus):
        pass

    def spawn(self, scenario, side, argv):
        if argv == netperf.VERSION_COMMAND:
            return LocalProcess(["echo", "Netperf version 2.7.0"])
        code = PRINTED[scenario][2]
        return LocalProcess(
            [
                "sh",
                "-c",
                f'cat "$1"; cat "$2" >&2; exit {code}',
                "sh",
                self.scratch / f"{scenario}.out",
                self.scratch / f"{scenario}.err",
            ]
        )

    def cpu_snapshot(self, scenario, side):
        return cpu.read_local()

    def describe(self):
        return {"target": self.kind, "versions": {"kernel": platform.release()}, "clk_tck": cpu.clk_tck()}


@pytest.fixture
def thread_deaths(monkeypatch):
    """Every exception that ended a thread while the test ran."""
    died = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args.exc_value))
    return died


def test_bytes_that_are_not_utf8_are_recorded_as_printed_and_judged_by_the_parser(tmp_path, lab_env, thread_deaths):
    params = short_params("bytes", list(PRINTED), {"rr": RR}, repetitions=1, retries=0)
    plan = plan_environment(params, "local-lab")
    (tmp_path / "scratch").mkdir()
    counts = runner.run_environment(
        params,
        plan,
        StandIn(lab_env, plan.scenarios, tmp_path / "scratch"),
        raw_root=tmp_path / "raw",
        log=lambda m: None,
    )
    assert counts["ok"] == 1 and counts["failed"] == 2, counts
    assert thread_deaths == []
    cdir = layout.campaign_dir("bytes", tmp_path / "raw")
    for scenario, (out, err, _) in PRINTED.items():
        path = cdir / "local-lab" / scenario / "rr" / "r000"
        # the record holds every byte as printed, and reads back the same
        assert (path / "stdout-0.txt").read_bytes() == out
        assert (path / "stderr-0.txt").read_bytes() == err
        rec = record.load(path)
        assert rec.attempts[-1].outputs == (record.Output(out, err),)
    # a stray byte outside the fields the parser needs costs nothing
    ok = record.load(cdir / "local-lab/host/rr/r000")
    assert ok.outcome == "ok"
    run, rows = tidy.load_record(cdir / "local-lab/host/rr/r000")
    assert {r["metric"]: r["value"] for r in rows if r["side"] == "none"} == netperf.parse("TCP_RR", [RR_OUTPUT])
    # in a field it needs, the parser refuses, naming the field; the record says which run
    bad = record.load(cdir / "local-lab/bridge/rr/r000")
    assert bad.outcome == "failed"
    assert "P50_LATENCY" in bad.failure_reason and "not UTF-8" in bad.failure_reason
    assert "'1\\udcff" in bad.failure_reason  # the byte, shown escaped
    with pytest.raises(ParseError, match=r"netperf P50_LATENCY: bytes that are not UTF-8"):
        netperf.parse("TCP_RR", bad.stdouts)
    # a failure's last words keep their bytes, escaped in the reason
    failed = record.load(cdir / "local-lab/veth-routed/rr/r000")
    assert failed.failure_reason == r"netperf stream 0 exited 1: send_data: data send error: \xff\xfe"


# Every parser, on what its tool printed (captured): (tool, output, kind, a stray byte where it reads
# nothing, a byte in a field it needs, what its ParseError names)
STRAY_BYTES = [
    (
        "dns",
        "udp_1000",
        "DNS_UDP",
        (b"Started at: Sat", b"Started at: S\xe4t"),
        (b"> NOERROR", b"> NOERR\xff"),
        "query line 8",
    ),
    (
        "dns",
        "udp_1000",
        "DNS_UDP",
        (b"Started at: Sat", b"Started at: S\xe4t"),
        (b"second:   999.9", b"second:   999.9\xff"),
        "Queries per second",
    ),
    (
        "fortio",
        "keepalive_1000",
        "HTTP",
        (b"echo , vm", b"echo , \xff\xfe"),
        (b'"RunType": "HTTP"', b'"RunType": "HTTP\xff"'),
        "RunType",
    ),
    (
        "iperf3",
        "tcp_stream",
        "TCP_STREAM",
        (b'"3qpjx', b'"\xff3qpjx'),
        (b'"protocol":\t"TCP"', b'"protocol":\t"TC\xff"'),
        "protocol",
    ),
]


@pytest.mark.parametrize(
    "tool,name,kind,harmless,needed,names", STRAY_BYTES, ids=[f"{c[0]}-{c[5]}" for c in STRAY_BYTES]
)
def test_each_parser_decides_what_a_byte_that_is_not_utf8_means(tool, name, kind, harmless, needed, names):
    printed = (FIXTURES / tool / f"{name}.stdout").read_bytes()
    parse = get(tool).parse
    assert harmless[0] in printed and needed[0] in printed
    assert parse(kind, [printed.replace(*harmless, 1)]) == parse(kind, [printed])
    with pytest.raises(ParseError) as refused:
        parse(kind, [printed.replace(*needed, 1)])
    assert names in str(refused.value)
    str(refused.value).encode()  # the message prints anywhere: the byte shows escaped
