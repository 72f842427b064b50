"""Every collector module provides what the runner and the tidy step call (collectors.Collector)."""

import inspect
import json
import re

import pytest

from benchlib import collectors
from benchlib.collectors import Collector, ParseError, Server, fortio
from benchlib.targets.kubernetes import images
from tests.conftest import FIXTURES, REPO

TOOLS = ("netperf", "iperf3", "fortio", "dns")


@pytest.mark.parametrize("tool", TOOLS)
def test_collector_module_satisfies_the_protocol(tool):
    module = collectors.get(tool)
    assert isinstance(module, Collector)
    assert module.KINDS and all(isinstance(k, str) for k in module.KINDS)
    assert module.SERVER is None or isinstance(module.SERVER, Server)
    assert module.VERSION_COMMAND and all(isinstance(w, str) for w in module.VERSION_COMMAND)
    for name in ("version", "build", "parse", "warmup_s", "expected_wall_s"):
        declared = [p for p in inspect.signature(getattr(Collector, name)).parameters if p != "self"]
        assert len(inspect.signature(getattr(module, name)).parameters) == len(declared), (tool, name)


SETUP = (REPO / "scripts" / "setup.sh").read_text()
# scripts/setup.sh's Debian packages per profile: `[lab]="netperf iperf3 ...`, over one or more lines
APT_FOR = {name: words.split() for name, words in re.findall(r'^\s+\[(\w+)\]="([^"]*)"', SETUP, re.M)}


@pytest.mark.parametrize("tool", TOOLS)
def test_a_collector_declares_every_program_it_runs_and_how_setup_installs_it(tool):
    module = collectors.get(tool)
    runs = {module.VERSION_COMMAND[0], *([module.SERVER.argv[0]] if module.SERVER else [])}
    assert runs <= set(module.PROGRAMS), (tool, runs, module.PROGRAMS)
    for name, (profile, how) in module.PROGRAMS.items():
        assert profile in APT_FOR, (name, profile)
        if how.startswith("go install "):  # built by setup.sh itself
            assert how.split()[2] in SETUP, (name, how)
        else:  # the Debian package, in that profile's list
            assert how.split()[-1] in APT_FOR[profile], (name, how, APT_FOR[profile])
        assert name in images.BENCH_TOOLS  # in the local cluster's pod image too


def test_servers_and_ports_come_from_the_collectors():
    servers = collectors.servers(["netperf", "iperf3", "netperf"])
    assert [s.name for s in servers] == ["netserver", "iperf3"]  # once each, in order
    netserver = servers[0]
    assert (12865, "tcp") in netserver.ports() and (12866, "tcp") in netserver.ports()
    assert collectors.client_commands(["dns", "netperf"]) == ["dnsperf", "netperf"]
    with pytest.raises(KeyError, match="no collector for tool 'ping'"):
        collectors.get("ping")


# -- the fields a parser reads, in the JSON iperf3 and fortio printed (captured), made wrong -------
def _captured_json(tool: str, name: str) -> dict:
    return json.loads((FIXTURES / tool / f"{name}.stdout").read_text())


def _p(p: float) -> str:
    return f"p{p:g}"


FORTIO_PERCENTILES = [
    (i, e["Percentile"])
    for i, e in enumerate(_captured_json("fortio", "keepalive_1000")["DurationHistogram"]["Percentiles"])
]
# (tool, captured output, kind, path to a field the parser reads, what its ParseError names)
NEEDED = [
    *[
        ("iperf3", "tcp_stream", "TCP_STREAM", path, path[-1])
        for path in [
            ("end", "sum_received", "bits_per_second"),
            ("end", "sum_sent", "retransmits"),
            ("end", "sum_received"),
            ("end",),
            ("start", "test_start", "protocol"),
            ("start",),
        ]
    ],
    *[
        ("iperf3", "udp_bitrate", "UDP_STREAM", path, path[-1])
        for path in [("end", "sum", "lost_percent"), ("end", "sum", "jitter_ms"), ("end", "sum")]
    ],
    *[
        ("fortio", "keepalive_1000", "HTTP", path, name)
        for path, name in [
            (("ActualQPS",), "ActualQPS"),
            (("DurationHistogram", "Count"), "Count"),
            (("RetCodes", "200"), "200"),
            (("RetCodes",), "RetCodes"),
            (("DurationHistogram", "Percentiles"), "Percentiles"),
            (("DurationHistogram",), "DurationHistogram"),
            (("RunType",), "RunType"),
            *[
                (("DurationHistogram", "Percentiles", i, "Value"), _p(p))
                for i, p in FORTIO_PERCENTILES
                if p in fortio.PERCENTILES
            ],
        ]
    ],
]
WRONG = ["12", "", [1.5], {"a": 1}, None, True, float("nan"), float("inf"), -1, 10**400]


def _at(doc, path):
    for key in path:
        doc = doc[key]
    return doc


# every wrong value at every field, but an object where an object belongs (RetCodes without a 200:
# every request failed, which the parser counts)
WRONG_FIELDS = [
    (*case, wrong)
    for case in NEEDED
    for wrong in WRONG
    if not isinstance(wrong, dict) or not isinstance(_at(_captured_json(case[0], case[1]), case[3]), dict)
]


@pytest.mark.parametrize(
    "tool,name,kind,path,names,wrong",
    WRONG_FIELDS,
    ids=[f"{t}-{'.'.join(map(str, p))}-{w!r:.12}" for t, _, _, p, _, w in WRONG_FIELDS],
)
def test_a_wrong_value_where_a_parser_reads_is_a_parse_error_naming_the_field(tool, name, kind, path, names, wrong):
    doc = _captured_json(tool, name)
    _at(doc, path[:-1])[path[-1]] = wrong
    with pytest.raises(ParseError) as refused:
        collectors.get(tool).parse(kind, [json.dumps(doc, indent=1)])
    assert names in str(refused.value)


def test_fortio_error_count_cannot_go_negative():
    doc = _captured_json("fortio", "keepalive_1000")
    doc["RetCodes"]["200"] = doc["DurationHistogram"]["Count"] + 5
    with pytest.raises(ParseError, match=r"RetCodes.200=1005 exceeds DurationHistogram.Count=1000"):
        fortio.parse("HTTP", [json.dumps(doc)])


@pytest.mark.parametrize(
    "tool,name,kind", [("iperf3", "tcp_stream", "TCP_STREAM"), ("fortio", "keepalive_1000", "HTTP")]
)
def test_json_that_python_refuses_beyond_syntax_is_a_parse_error(tool, name, kind):
    text = (FIXTURES / tool / f"{name}.stdout").read_text()
    for bad in (
        text.replace("{", "{" + '"x": ' + "1" * 5000 + ",", 1),  # too many digits for int()
        "[" * 100_000 + "]" * 100_000,
    ):  # deeper than the recursion limit
        with pytest.raises(ParseError, match="not JSON"):
            collectors.get(tool).parse(kind, [bad])
