"""Parsers and the params loader under hostile input: truncated, reordered and
garbage output either parses or raises the package's ParseError; a mangled
params file loads or raises ConfigError; never anything else.

At least MIN_CASES generated cases per run (every test here counts its own),
in about a minute on this 2-CPU machine (most of it the params loader)."""
import functools
import os
import shutil
import string
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from benchlib import cpu
from benchlib.collectors import ParseError, netperf
from benchlib.config import ConfigError, Params, load_params
from tests.conftest import FIXTURES, REPO

MIN_CASES = 10_000
CASES: Counter = Counter()  # test name -> examples run


@pytest.fixture(scope="module", autouse=True)
def enough_cases(request):
    yield
    shutil.rmtree(SCRATCH, ignore_errors=True)
    fuzz_tests = {item.name for item in request.session.items if item.module is request.module}
    if set(CASES) == fuzz_tests:  # the whole module ran: hold it to its promise
        print(f"\nfuzz: {sum(CASES.values())} cases: {dict(CASES)}")
        assert sum(CASES.values()) >= MIN_CASES, CASES


def counted(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        CASES[fn.__name__] += 1
        return fn(*args, **kwargs)
    return wrapper

CAPTURED = {name: (FIXTURES / "netperf" / f"{name}.stdout").read_text()
            for name in ("tcp_stream", "tcp_rr", "tcp_crr", "error_no_server", "classic_output")}
PROC_STAT = open("/proc/stat").read()
KINDS = st.sampled_from(netperf.KINDS)
FUZZ = settings(max_examples=1500, deadline=None)


def parses_or_refuses(fn, *args):
    try:
        result = fn(*args)
    except ParseError:
        return None
    assert isinstance(result, dict)
    return result


@FUZZ
@given(kind=KINDS, name=st.sampled_from(sorted(CAPTURED)), cut=st.integers(min_value=0, max_value=400))
@counted
def test_netperf_truncated(kind, name, cut):
    parses_or_refuses(netperf.parse, kind, [CAPTURED[name][:cut]])


@FUZZ
@given(kind=KINDS, name=st.sampled_from(sorted(CAPTURED)), data=st.data())
@counted
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
@counted
def test_netperf_garbage(kind, text):
    parses_or_refuses(netperf.parse, kind, [text])


@FUZZ
@given(kind=KINDS, key=st.sampled_from(["THROUGHPUT", "P50_LATENCY", "MIN_LATENCY", "THROUGHPUT_UNITS"]),
       value=st.one_of(st.text(max_size=12), st.sampled_from(["nan", "inf", "-1", "1e400", ""])))
@counted
def test_netperf_corrupted_values_never_become_numbers_silently(kind, key, value):
    name = "tcp_stream" if kind == "TCP_STREAM" else "tcp_rr"
    text = "\n".join(f"{key}={value}" if line.startswith(key + "=") else line
                     for line in CAPTURED[name].splitlines())
    result = parses_or_refuses(netperf.parse, kind, [text])
    if result is not None:
        assert all(v >= 0 and v != float("inf") and v == v for v in result.values())


@FUZZ
@given(cut=st.integers(min_value=0, max_value=len(PROC_STAT)), junk=st.text(max_size=40))
@counted
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
@counted
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
@counted
def test_other_collectors_reordered_lines(case, data):
    tool, name = case
    module = _collector(tool)
    lines = OTHERS[tool][name].splitlines()
    shuffled = data.draw(st.permutations(lines)) if len(lines) < 200 else lines[::-1]
    parses_or_refuses(module.parse, data.draw(st.sampled_from(module.KINDS)), ["\n".join(shuffled)])


# The params loader: a mangled params.yaml loads or says what is wrong, in one ConfigError.
PARAMS_TEXT = (REPO / "params.yaml").read_text()
PARAMS = yaml.safe_load(PARAMS_TEXT)
SCRATCH = Path(tempfile.mkdtemp(prefix="fuzz-params-"))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=20), st.lists(st.integers(), max_size=3),
                    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


def _paths(doc, prefix=()):
    """Every key path of a nested mapping."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


PARAM_PATHS = list(_paths(PARAMS))


def loads_or_refuses(data: bytes) -> None:
    path = SCRATCH / f"params-{os.getpid()}.yaml"
    path.write_bytes(data)
    try:
        assert isinstance(load_params(path), Params)
    except ConfigError as exc:
        assert str(path) in str(exc)


PARAMS_FUZZ = settings(max_examples=700, deadline=None)  # a load costs ~10 ms: pydantic, YAML, a file


@PARAMS_FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(PARAM_PATHS), SCALARS), min_size=1, max_size=3))
@counted
def test_params_with_changed_values(edits):
    import copy
    doc = copy.deepcopy(PARAMS)
    for path, value in edits:
        node = doc
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node[path[-1]] = value
    loads_or_refuses(yaml.safe_dump(doc).encode())


@PARAMS_FUZZ
@given(cut=st.integers(0, len(PARAMS_TEXT)), junk=st.binary(max_size=12))
@counted
def test_params_text_truncated_or_corrupted(cut, junk):
    data = PARAMS_TEXT.encode()
    for variant in (data[:cut], data[:cut] + junk + data[cut:]):
        loads_or_refuses(variant)
