"""Parsers under hostile input: truncated, reordered and garbage output either
parses or raises the package's ParseError, never anything else."""
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from benchlib import cpu
from benchlib.collectors import ParseError, netperf
from tests.conftest import FIXTURES

CAPTURED = {name: (FIXTURES / "netperf" / f"{name}.stdout").read_text()
            for name in ("tcp_stream", "tcp_rr", "tcp_crr", "error_no_server", "classic_output")}
PROC_STAT = open("/proc/stat").read()
KINDS = st.sampled_from(netperf.KINDS)
FUZZ = settings(max_examples=300, deadline=None)


def parses_or_refuses(fn, *args):
    try:
        result = fn(*args)
    except ParseError:
        return None
    assert isinstance(result, dict)
    return result


@FUZZ
@given(kind=KINDS, name=st.sampled_from(sorted(CAPTURED)), cut=st.integers(min_value=0, max_value=400))
def test_netperf_truncated(kind, name, cut):
    parses_or_refuses(netperf.parse, kind, [CAPTURED[name][:cut]])


@FUZZ
@given(kind=KINDS, name=st.sampled_from(sorted(CAPTURED)), data=st.data())
def test_netperf_reordered_and_duplicated_lines(kind, name, data):
    lines = CAPTURED[name].splitlines()
    shuffled = data.draw(st.permutations(lines))
    extra = data.draw(st.lists(st.sampled_from(lines or [""]), max_size=3))
    result = parses_or_refuses(netperf.parse, kind, ["\n".join(shuffled + extra)])
    if result is not None and kind == "TCP_STREAM" and name == "tcp_stream" and not extra:
        # order does not matter for key=value output
        assert result == netperf.parse(kind, [CAPTURED[name]])


@FUZZ
@given(kind=KINDS, text=st.text(alphabet=string.printable + "=é\x00", max_size=500))
def test_netperf_garbage(kind, text):
    parses_or_refuses(netperf.parse, kind, [text])


@FUZZ
@given(kind=KINDS, key=st.sampled_from(["THROUGHPUT", "P50_LATENCY", "MIN_LATENCY", "THROUGHPUT_UNITS"]),
       value=st.one_of(st.text(max_size=12), st.sampled_from(["nan", "inf", "-1", "1e400", ""])))
def test_netperf_corrupted_values_never_become_numbers_silently(kind, key, value):
    name = "tcp_stream" if kind == "TCP_STREAM" else "tcp_rr"
    text = "\n".join(f"{key}={value}" if line.startswith(key + "=") else line
                     for line in CAPTURED[name].splitlines())
    result = parses_or_refuses(netperf.parse, kind, [text])
    if result is not None:
        assert all(v >= 0 and v != float("inf") and v == v for v in result.values())


@FUZZ
@given(cut=st.integers(min_value=0, max_value=len(PROC_STAT)), junk=st.text(max_size=40))
def test_proc_stat_truncated_or_corrupted(cut, junk):
    for text in (PROC_STAT[:cut], PROC_STAT[:cut] + junk, junk + PROC_STAT[cut:]):
        try:
            counters = cpu.parse_proc_stat(text)
        except ParseError:
            continue
        assert all(isinstance(v, list) and len(v) == len(cpu.FIELDS) for v in counters.values())


# The JSON and per-query parsers of the other collectors, on their captured outputs.
OTHERS = {tool: {p.stem: p.read_text() for p in sorted((FIXTURES / tool).glob("*.stdout"))}
          for tool in ("iperf3", "fortio", "dns")}
OTHER_CASES = [(tool, name) for tool, outputs in OTHERS.items() for name in outputs]


def _collector(tool):
    from benchlib.collectors import get
    return get(tool)


@FUZZ
@given(case=st.sampled_from(OTHER_CASES), data=st.data())
def test_other_collectors_truncated_or_corrupted(case, data):
    tool, name = case
    module = _collector(tool)
    kind = data.draw(st.sampled_from(module.KINDS))
    text = OTHERS[tool][name]
    cut = data.draw(st.integers(min_value=0, max_value=len(text)))
    junk = data.draw(st.text(alphabet=string.printable + '{}[]":,', max_size=30))
    for variant in (text[:cut], text[:cut] + junk + text[cut:], text.replace(text[cut:cut + 5], junk[:5])):
        result = parses_or_refuses(module.parse, kind, [variant])
        if result is not None:
            assert all(v == v and v not in (float("inf"), float("-inf")) for v in result.values())


@FUZZ
@given(case=st.sampled_from(OTHER_CASES), data=st.data())
def test_other_collectors_reordered_lines(case, data):
    tool, name = case
    module = _collector(tool)
    lines = OTHERS[tool][name].splitlines()
    shuffled = data.draw(st.permutations(lines)) if len(lines) < 200 else lines[::-1]
    parses_or_refuses(module.parse, data.draw(st.sampled_from(module.KINDS)), ["\n".join(shuffled)])
