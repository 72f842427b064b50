"""Parsers and the params loader under hostile input: truncated, reordered and
garbage output either parses or raises the package's ParseError; a mangled
params file loads or raises ConfigError; never anything else.

The captured outputs of every tool are also mutated as structure (JSON values
of the wrong type, dropped keys; numbers swapped for text, dropped lines).

At least MIN_CASES generated cases per run (every test here counts its own),
MIN_MUTATIONS of them mutated real outputs, in about a minute and a half on
this 2-CPU machine."""

import copy
import functools
import json
import math
import os
import re
import shutil
import string
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from benchlib.base.errors import ConfigError
from benchlib.collectors import ParseError, netperf
from benchlib.host import cpu
from benchlib.settings.campaign import Params
from benchlib.settings.loading import load_params
from tests.conftest import FIXTURES, REPO

pytestmark = pytest.mark.slow  # hypothesis runs hundreds of examples per test

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


CAPTURED = {
    name: (FIXTURES / "netperf" / f"{name}.stdout").read_text()
    for name in ("tcp_stream", "tcp_rr", "tcp_crr", "error_no_server", "classic_output")
}
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
@given(
    kind=KINDS,
    key=st.sampled_from(["THROUGHPUT", "P50_LATENCY", "MIN_LATENCY", "THROUGHPUT_UNITS"]),
    value=st.one_of(st.text(max_size=12), st.sampled_from(["nan", "inf", "-1", "1e400", ""])),
)
@counted
def test_netperf_corrupted_values_never_become_numbers_silently(kind, key, value):
    name = "tcp_stream" if kind == "TCP_STREAM" else "tcp_rr"
    text = "\n".join(f"{key}={value}" if line.startswith(key + "=") else line for line in CAPTURED[name].splitlines())
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
OTHERS = {
    tool: {p.stem: p.read_text() for p in sorted((FIXTURES / tool).glob("*.stdout"))}
    for tool in ("iperf3", "fortio", "dns")
}
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
    for variant in (text[:cut], text[:cut] + junk + text[cut:], text.replace(text[cut : cut + 5], junk[:5])):
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
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


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


# -- Structural mutation of real captured outputs -------------------------------------------------
# The JSON documents iperf3 and fortio printed, parsed, mutated as data (a value's type swapped, a key
# dropped, an object turned into a list), serialised again and parsed: a result or a ParseError.
# netperf's and dnsperf's text the same way: numbers swapped for text, lines dropped. At least
# MIN_MUTATIONS of these per run, counted apart from the other cases.
MIN_MUTATIONS = 10_000
MUTATION_FUZZ = settings(max_examples=2500, deadline=None)
MUTATION_TESTS = (
    "test_iperf3_json_mutated",
    "test_fortio_json_mutated",
    "test_netperf_text_mutated",
    "test_dnsperf_text_mutated",
)


@pytest.fixture(scope="module", autouse=True)
def enough_mutations(request):
    yield
    ran = {item.name for item in request.session.items if item.module is request.module}
    if set(MUTATION_TESTS) <= ran and all(CASES[t] for t in MUTATION_TESTS):
        mutated = sum(CASES[t] for t in MUTATION_TESTS)
        print(f"\nfuzz: {mutated} mutated real outputs")
        assert mutated >= MIN_MUTATIONS, {t: CASES[t] for t in MUTATION_TESTS}


NATURAL_KIND = {
    "tcp_stream": "TCP_STREAM",
    "tcp_stream_4": "TCP_STREAM",
    "udp_bitrate": "UDP_STREAM",
    "udp_unlimited": "UDP_STREAM",
    "tcp_rr": "TCP_RR",
    "tcp_crr": "TCP_CRR",
}
JSON_OUTPUTS = {
    tool: {name: json.loads(text) for name, text in OTHERS[tool].items() if text.strip()}
    for tool in ("iperf3", "fortio")
}
# what a mutation puts where a value was: every JSON type, and the numbers a parser must not take
REPLACEMENTS = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            "",
            "12",
            "HTTP",
            "TCP",
            "\udcff",
            [],
            [1.5],
            {},
            {"200": 1},
            float("nan"),
            float("inf"),
            float("-inf"),
            -1,
            -1e-9,
            0,
            1e308,
            -1e308,
            10**30,
            10**400,
        ]
    ),
    st.integers(-(2**64), 2**64),
    st.floats(),
    st.text(max_size=8),
)


def _json_paths(doc, prefix=()):
    """The path of every value below the root of a JSON document."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from _json_paths(value, (*prefix, key))


JSON_PATHS = {(tool, name): list(_json_paths(doc)) for tool, docs in JSON_OUTPUTS.items() for name, doc in docs.items()}


def _mutate(doc, path, op, value):
    """``doc`` with the value at ``path`` replaced by ``value``, dropped, or (an object or a list)
    turned into the other; a path a previous mutation removed is left alone."""
    parent = doc
    for key in path[:-1]:
        try:
            parent = parent[key]
        except (KeyError, IndexError, TypeError):
            return doc
    key = path[-1]
    present = (
        key in parent
        if isinstance(parent, dict)
        else isinstance(parent, list) and isinstance(key, int) and key < len(parent)
    )
    if not present:
        return doc
    old = parent[key]
    if op == "drop":
        del parent[key]
    elif op == "flip" and isinstance(old, dict):
        parent[key] = list(old.values())
    elif op == "flip" and isinstance(old, list):
        parent[key] = {str(i): v for i, v in enumerate(old)}
    else:
        parent[key] = value
    return doc


def _serialised(doc) -> bytes:
    """JSON as a tool would print it, NaN and Infinity included, a lone surrogate as the byte that
    is not UTF-8 it stands for."""
    return json.dumps(doc, indent=1, ensure_ascii=False).encode("utf-8", "surrogateescape")


def refused_or_sane(module, kind, output) -> dict | None:
    """A result whose every value is finite and non-negative, or None for a ParseError."""
    result = parses_or_refuses(module.parse, kind, [output])
    if result is not None:
        assert all(isinstance(v, float) and math.isfinite(v) and v >= 0 for v in result.values()), result
    return result


def _json_mutated(tool, data):
    name = data.draw(st.sampled_from(sorted(JSON_OUTPUTS[tool])))
    module = _collector(tool)
    kind = NATURAL_KIND.get(name, module.KINDS[0])
    doc = copy.deepcopy(JSON_OUTPUTS[tool][name])
    paths = JSON_PATHS[(tool, name)]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        doc = _mutate(
            doc, path, data.draw(st.sampled_from(["replace", "replace", "drop", "flip"])), data.draw(REPLACEMENTS)
        )
    refused_or_sane(module, kind, _serialised(doc))


@MUTATION_FUZZ
@given(data=st.data())
@counted
def test_iperf3_json_mutated(data):
    _json_mutated("iperf3", data)


@MUTATION_FUZZ
@given(data=st.data())
@counted
def test_fortio_json_mutated(data):
    _json_mutated("fortio", data)


NUMBER = re.compile(rb"\d+(?:\.\d+)?")
# what a mutation puts where a number was
NOT_NUMBERS = st.one_of(
    st.sampled_from(
        [
            b"",
            b"abc",
            b"nan",
            b"NaN",
            b"inf",
            b"-inf",
            b"-1",
            b"1e999",
            b"9" * 400,
            b"0x10",
            b"1,5",
            b"\xff",
            b"1\xfe",
            b" ",
            "\uff11\uff12".encode(),
        ]
    ),
    st.binary(max_size=6),
)
TEXT_OUTPUTS = {("netperf", name): (FIXTURES / "netperf" / f"{name}.stdout").read_bytes() for name in CAPTURED}
TEXT_OUTPUTS.update({("dns", name): (FIXTURES / "dns" / f"{name}.stdout").read_bytes() for name in OTHERS["dns"]})


def _numbers(text: bytes, summary: bool) -> list[re.Match]:
    """The numbers of a text output, in dnsperf's summary or in its per-query lines."""
    return [
        m
        for line in re.finditer(rb"[^\n]*\n?", text)
        for m in NUMBER.finditer(text, line.start(), line.end())
        if line.group().startswith(b"> ") != summary
    ]


NUMBERS = {(key, summary): _numbers(text, summary) for key, text in TEXT_OUTPUTS.items() for summary in (True, False)}


def _text_mutated(tool, data):
    name = data.draw(st.sampled_from(sorted(n for t, n in TEXT_OUTPUTS if t == tool)))
    module = _collector(tool)
    kind = data.draw(st.sampled_from(module.KINDS)) if name not in NATURAL_KIND else NATURAL_KIND[name]
    text = TEXT_OUTPUTS[(tool, name)]
    # numbers swapped for text, from the last so the earlier positions hold
    summary = data.draw(st.booleans())
    numbers = NUMBERS[((tool, name), summary)] or NUMBERS[((tool, name), not summary)]
    chosen = data.draw(st.lists(st.sampled_from(numbers), max_size=3, unique_by=lambda m: m.start())) if numbers else []
    for m in sorted(chosen, key=lambda m: m.start(), reverse=True):
        text = text[: m.start()] + data.draw(NOT_NUMBERS) + text[m.end() :]
    lines = text.split(b"\n")
    dropped = set(data.draw(st.lists(st.integers(0, len(lines) - 1), max_size=4)))
    if data.draw(st.booleans()):  # a run of lines, as a lost pipe buffer would drop
        start = data.draw(st.integers(0, len(lines) - 1))
        dropped |= set(range(start, start + data.draw(st.integers(1, 200))))
    mutated = b"\n".join(line for i, line in enumerate(lines) if i not in dropped)
    result = refused_or_sane(module, kind, mutated)
    if result is not None and not chosen and not dropped:
        assert result == module.parse(kind, [TEXT_OUTPUTS[(tool, name)].decode()])


@MUTATION_FUZZ
@given(data=st.data())
@counted
def test_netperf_text_mutated(data):
    _text_mutated("netperf", data)


@MUTATION_FUZZ
@given(data=st.data())
@counted
def test_dnsperf_text_mutated(data):
    _text_mutated("dns", data)


# -- Raw records: every field of a real record's meta.json and cpu.json of the wrong type ----------------
# A real record (tests/fixtures/raw), migrated to the current schema version and given every field a
# record of that version can hold (a mesh's proxy process, the foreign CPU, a quiet window, a scenario
# definition; a profiled run beside it with its profile and BPF counters), has a field's value replaced
# by one of the wrong type or range (nested 100,000 levels deep, a MiB of text) or dropped, its
# SHA256SUMS written again: record.load and what `benchlib parse` runs on the campaign read it or refuse
# it with a BenchlibError naming the record, and the field where the schema refused it; never anything else.
RECORD_FUZZ = settings(max_examples=150, deadline=None)
REAL_RECORD = FIXTURES / "raw/local-cilium-demo-001/local-cilium/cilium-vxlan-ebpf/tcp_rr/r001"
SENTINEL = "@@fuzzed-{n}@@"
FOLDED = Counter({"cpu0;netperf;entry_SYSCALL_64;tcp_sendmsg": 7, "cpu1;netserver;tcp_recvmsg": 5})


def _every_field(meta: dict) -> dict:
    """The real record's meta.json as the current version writes it, with every optional part filled in."""
    from benchlib.records import migrations

    meta = migrations.migrate(meta, REAL_RECORD)
    meta["placement"].update(
        services=1,
        ip_family=4,
        cpu_placement="split",
        big_tcp={"size": 65536},
        mesh={"kind": "sidecars", "proxy": "envoy", "proxy_version": "1.30.1", "proxies": {"c1": {"side": "client"}}},
    )
    meta["target"]["machine"] = {"cpu_model": "Intel Xeon", "cpus": 2, "memory": "8123456 kB"}
    meta["processes"] = {
        "c1": {"side": "client", "cpus": [0], "version": "1.30.1", "cpu_ticks": [100, 150], "peak_rss_kib": 2048}
    }
    meta["scenario_definition"] = {
        "scenario": {"mtu": 1500, "settings": {"cni": "cilium"}},
        "environment": {"target": "kubernetes", "cpu_placement": {}},
        "files": {"values.yaml": "sha256:" + "0" * 64},
    }
    meta["foreign_cpu"] = {
        "window_s": 2.0,
        "cores": 0.2,
        "cpus": {"0": 0.1, "1": 0.1},
        "measured_cores": 0.2,
        "top": [{"name": "make", "pid": 123, "cores": 0.15, "reaped": ["cc1"]}],
        "steal_cores": 0.01,
    }
    meta["quiet"] = {"window_s": 2.0, "mechanism": "cgroup v2", "frozen": {"containerd": 321}, "kept": {}}
    return meta


def _profiled(meta: dict) -> dict:
    program = {"id": 7, "type": "sched_cls", "name": "cil_from_container", "tag": "ab12", "run_cnt": 10}
    return {
        **copy.deepcopy(meta),
        "run_id": meta["run_id"].removesuffix("r001") + "p001",
        "profiled": True,
        "profile": {
            "perf_version": "6.1",
            "event": "cpu-clock",
            "frequency_hz": 99,
            "kernel": "6.1.0",
            "cpus": {"client": [0], "server": [1]},
            "attribution": "cpu",
            "window_s": 2.0,
            "samples": sum(FOLDED.values()),
            "kernel_symbols": True,
            "command": ["perf", "record"],
            "bpf": {
                "before": [{**program, "run_time_ns": 1000}],
                "after": [{**program, "run_cnt": 30, "run_time_ns": 4000}],
                "attached": [
                    {"netns": None, "net": [{"tc": [{"devname": "eth0", "kind": "clsact/ingress", "id": 7}]}]}
                ],
            },
        },
    }


BASE_META = _every_field(json.loads((REAL_RECORD / "meta.json").read_text()))
BASES = {
    "r001": {"meta.json": BASE_META, "cpu.json": json.loads((REAL_RECORD / "cpu.json").read_text())},
    "p001": {"meta.json": _profiled(BASE_META), "cpu.json": json.loads((REAL_RECORD / "cpu.json").read_text())},
}
RECORD_PATHS = {(run, name): list(_json_paths(doc)) for run, docs in BASES.items() for name, doc in docs.items()}


def _deep(levels: int, dicts: bool) -> str:
    return '{"a": ' * levels + "1" + "}" * levels if dicts else "[" * levels + "]" * levels


# what a mutation puts where a field's value was, as JSON text
HOSTILE = st.one_of(
    st.sampled_from(
        [
            '"abc"',
            '""',
            '"1.5"',
            '"2026-11-23T18:21:16"',
            "[]",
            '[1, "x"]',
            "[-1, 2, 3]",
            "{}",
            '{"a": 1}',
            "null",
            "true",
            "false",
            str(10**30),
            str(2**63),
            "NaN",
            "Infinity",
            "-1",
            "-0.5",
            "0",
            "1e308",
            '"' + "x" * 2**20 + '"',
        ]
    ),
    st.builds(_deep, st.sampled_from([60, 64, 65, 1000, 100_000]), st.booleans()),
    st.integers(-(2**70), 2**70).map(json.dumps),
    st.floats().map(json.dumps),
    st.text(max_size=8).map(json.dumps),
)


def _fuzzed_record(run: str, edits: list) -> Path:
    """A campaign of the record ``run`` (r001 or p001) whose files have ``edits`` (file, path, op, JSON
    text) applied, its checksums written again; returns the record's directory."""
    from benchlib.profiling import stacks
    from benchlib.records import integrity, layout

    cdir = Path(tempfile.mkdtemp(dir=SCRATCH)) / "local-cilium-demo-001"
    rec = cdir / "local-cilium/cilium-vxlan-ebpf/tcp_rr" / run
    shutil.copytree(REAL_RECORD, rec)
    docs = copy.deepcopy(BASES[run])
    texts = {}
    for n, (name, path, op, text) in enumerate(edits):
        texts[SENTINEL.format(n=n)] = text
        docs[name] = _mutate(docs[name], path, op, SENTINEL.format(n=n))
    for name, doc in docs.items():
        out = json.dumps(doc, indent=1)
        for sentinel, text in texts.items():
            out = out.replace(json.dumps(sentinel), text)
        (rec / name).write_text(out)
    if run == "p001":
        (rec / layout.PROFILE).write_bytes(stacks.folded_bytes(FOLDED))
    integrity.write_checksums(rec)
    return rec


def _parsed(cdir: Path) -> None:
    """What `benchlib parse` does with a campaign directory, short of writing the parquet files: each
    chunk's tables checked as its table writer checks them, and the facts `benchlib compare` reads."""
    from benchlib.records import survey
    from benchlib.tables import tidy
    from benchlib.vocabulary import schema

    survey.survey(cdir, None)
    for chunk in tidy._checked_chunks(cdir, False, lambda message: None, None, fingerprints=True):
        for name in tidy.TABLES:
            table = schema.conform(getattr(chunk, name), name)
            if name == "metrics" and not table.is_empty():
                schema.check_metrics(table)
        tidy.build_facts(chunk.runs)


def _field_names(edits: list) -> set[str]:
    """Every field path (as a message names it) an edit touched, and the paths it lies below."""
    names = set()
    for _name, path, _op, _text in edits:
        text = ""
        for part in path:
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
            names.add(text)
    return names


def reads_or_names_the_record(rec: Path, edits: list) -> None:
    from benchlib.base.errors import BenchlibError
    from benchlib.records import record
    from benchlib.tables import tidy

    for read in (lambda: record.load(rec), lambda: tidy.load_record(rec), lambda: _parsed(rec.parents[3])):
        try:
            read()
        except BenchlibError as exc:
            message = str(exc)
            assert str(rec) in message and "\n" not in message and len(message) < 1000, message
            for name in ("meta.json", "cpu.json"):
                said = re.match(rf"^{re.escape(str(rec))}: {name}: ([^ ]+): ", message)
                if said and not said[1].startswith(("unreadable", "not")):
                    touched = _field_names([e for e in edits if e[0] == name])
                    # the field edited, a field it lies below, or a part of the value the edit put there
                    assert any(
                        t == said[1] or t.startswith(said[1] + ".") or said[1].startswith((t + ".", t + "["))
                        for t in touched
                    ), (message, edits)
            return


@counted
def test_the_records_fuzzed_read_as_they_are_unmutated():
    from benchlib.records import record

    for run in BASES:
        rec = _fuzzed_record(run, [])
        _parsed(rec.parents[3])
        assert record.load(rec).run_id.endswith(run)


@RECORD_FUZZ
@given(data=st.data())
@counted
def test_record_fields_of_the_wrong_type_are_read_or_named(data):
    run = data.draw(st.sampled_from(sorted(BASES)))
    edits = []
    for _ in range(data.draw(st.integers(1, 2))):
        name = data.draw(st.sampled_from(["meta.json", "meta.json", "meta.json", "cpu.json"]))
        path = data.draw(st.sampled_from(RECORD_PATHS[(run, name)]))
        edits.append((name, path, data.draw(st.sampled_from(["replace"] * 5 + ["drop"])), data.draw(HOSTILE)))
    rec = _fuzzed_record(run, edits)
    try:
        reads_or_names_the_record(rec, edits)
    finally:
        shutil.rmtree(rec.parents[4], ignore_errors=True)
