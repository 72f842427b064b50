"""Raw records: one type reads and writes them; versions are checked and migrated."""

import json
import re
import shutil

import pytest

from benchlib.base import limits
from benchlib.records import integrity, layout, migrations, record
from benchlib.tables import tidy
from tests.conftest import FIXTURES, REPO


def test_a_version_1_record_is_migrated_on_load(v1_record):
    rec = record.load(v1_record)
    assert (rec.block, rec.run_id, rec.outcome) == (2, "local-lab/host/rr/r002", "ok")
    assert not hasattr(rec, "repetition") and "repetition" not in rec.meta_json()
    assert [a.outcome for a in rec.attempts] == ["failed", "ok"]
    assert b"establish control" in rec.attempts[0].outputs[0].stdout
    assert rec.stdouts[0].startswith(b"THROUGHPUT=")
    assert rec.cpu["server"].cpus == [1] and rec.cpu["client"].end.counters[0][0] == 150
    assert rec.processes == {}  # version 3: a run before proxies existed had none
    assert rec.foreign_cpu is None  # version 6: what other processes took is unknown
    assert rec.quiet is None  # version 7: whether the window was quiet is unknown


def test_written_again_a_migrated_record_reads_back_equal(v1_record, tmp_path):
    rec = record.load(v1_record)
    written = rec.write(tmp_path / "again")
    assert written == tmp_path / "again" / rec.run_id
    assert json.loads((written / "meta.json").read_text())["schema_version"] == migrations.SCHEMA_VERSION
    assert record.load(written) == rec
    # and it parses to the same rows (the record column aside)
    (run_v1, rows_v1), (run_v2, rows_v2) = tidy.load_record(v1_record), tidy.load_record(written)
    assert {**run_v1, "record": ""} == {**run_v2, "record": ""} and rows_v1 == rows_v2
    assert {r["metric"] for r in rows_v1} >= {"transaction_rate", "latency_p99", "cpu_busy_pct"}


def test_a_quiet_window_is_kept_in_the_record_and_its_frozen_daemons_in_the_runs_table(v1_record, tmp_path):
    import dataclasses

    q = {"mechanism": "cgroup v1 freezer", "frozen": {"kubelet1": 7, "etcd": 3}, "kept": {}, "failed": {}}
    written = dataclasses.replace(record.load(v1_record), quiet=q).write(tmp_path / "again")
    assert record.load(written).quiet == q
    assert tidy.load_record(written)[0]["quiet_frozen"] == "etcd,kubelet1"
    assert tidy.load_record(v1_record)[0]["quiet_frozen"] is None  # an older record: unknown


def test_an_existing_record_is_never_overwritten(v1_record, tmp_path):
    rec = record.load(v1_record)
    cdir = v1_record.parents[3]
    before = (v1_record / "meta.json").read_bytes()
    with pytest.raises(record.RecordError, match="already there; kept it and discarded the run just measured"):
        rec.write(cdir)  # loud: the caller must not count a run it did not keep
    assert (v1_record / "meta.json").read_bytes() == before
    assert not list(cdir.rglob(".*tmp*"))


@pytest.mark.parametrize("version", [0, migrations.SCHEMA_VERSION + 1, "2", None])
def test_an_unknown_schema_version_is_refused(v1_record, version):
    meta = json.loads((v1_record / "meta.json").read_text())
    meta["schema_version"] = version
    (v1_record / "meta.json").write_text(json.dumps(meta))
    integrity.write_checksums(v1_record)
    with pytest.raises(record.RecordError, match=rf"{v1_record}: meta.json: schema_version {version!r} is unknown"):
        record.load(v1_record)


def test_a_version_1_record_whose_repetition_is_not_its_block_is_refused(v1_record):
    meta = json.loads((v1_record / "meta.json").read_text())
    meta["repetition"] = 5
    (v1_record / "meta.json").write_text(json.dumps(meta))
    integrity.write_checksums(v1_record)
    with pytest.raises(record.RecordError, match="repetition 5 differs from block 2"):
        record.load(v1_record)


def test_a_record_moved_to_another_run_is_refused(v1_record):
    moved = v1_record.parent / "r003"
    shutil.move(v1_record, moved)
    with pytest.raises(record.RecordError, match="holds run 'local-lab/host/rr/r002'"):
        record.load(moved)


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": NaN, "b": -Infinity}',  # json.dumps writes these
        b"[1e400]",
        b'{"order": 18446744073709551616, "block": -9223372036854775809}',  # beyond 64 bits: a float in orjson
        b"[0.123456789012345678901234, 1.0, -0, 5e-324, 1.7976931348623157e308]",
        "[1]".encode("utf-16"),
        b"\xef\xbb\xbf[1]",
        b'["\\ud800"]',
        b'{"a": 1, "a": 2}',
    ],
)
def test_a_record_json_document_reads_as_json_reads_it(text):
    assert repr(limits.parse_json(text)) == repr(json.loads(text))  # repr: NaN equals itself, 1 is not 1.0


@pytest.mark.parametrize("text", [b"{", b'{"a": 1} x', b"\xff", b""])
def test_a_broken_record_json_document_is_the_error_json_gives(text):
    with pytest.raises(ValueError) as expected:
        json.loads(text)
    with pytest.raises(type(expected.value), match=f"^{re.escape(str(expected.value))}$"):
        limits.parse_json(text)


def test_a_record_integer_beyond_64_bits_is_named_not_read_as_a_float(v1_record):
    meta = json.loads((v1_record / "meta.json").read_text())
    meta["order"] = 2**64
    (v1_record / "meta.json").write_text(json.dumps(meta))
    integrity.write_checksums(v1_record)
    (error,) = tidy._load_chunk([str(v1_record)]).errors
    assert str(error) == f"{v1_record}: meta.json: order: 18446744073709551616 is beyond a 64-bit integer"


DEEP = limits.JSON_DEPTH


@pytest.mark.parametrize(
    "text",
    [
        b"[" * DEEP + b"]" * DEEP,
        b'{"a": "' + b"[{" * 500 + b'", "b": "\\"[[[["}',  # brackets in strings, escaped quotes, do not nest
        b"[" + b",".join([b"[[]]"] * 100) + b"]",  # many brackets, shallow
    ],
)
def test_a_json_document_within_the_depth_cap_reads_as_json_reads_it(text):
    assert limits.parse_json(text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        b"[" * (DEEP + 1) + b"]" * (DEEP + 1),
        b'{"processes": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"a": ' * 100_000 + b"1" + b"}" * 100_000,
        ("[" * 100_000 + "]" * 100_000).encode("utf-16"),
        "[" * 100_000 + "]" * 100_000,  # text, as a parquet file's metadata holds it
        b"[" * 100_000,  # not JSON either: json itself would run out of stack
    ],
)
def test_a_json_document_nested_beyond_the_cap_is_a_value_error_before_any_parser_recurses(text):
    with pytest.raises(ValueError, match=f"^nested deeper than {DEEP} levels"):
        limits.parse_json(text)


def test_find_skips_temporary_directories_and_remove_partial_clears_them(v1_record):
    cdir = v1_record.parents[3]
    partial = v1_record.parent / ".r003.tmp-1234"
    shutil.copytree(v1_record, partial)
    assert layout.find(cdir) == [v1_record]
    assert layout.exists(cdir, "local-lab/host/rr/r002") and not layout.exists(cdir, "local-lab/host/rr/r003")
    assert layout.remove_partial(cdir) == 1 and not partial.exists()


def test_find_lists_complete_records_in_path_order_as_a_glob_would(v1_record):
    cdir = v1_record.parents[3]
    for rid in (
        "local-lab/host/rr/r010",
        "local-lab/bridge/rr/r001",
        "local-lab/host-b/rr/r000",
        "other/host/stream/r000",
    ):
        shutil.copytree(v1_record, cdir / rid)
    shutil.copytree(v1_record, cdir / "local-lab/host/rr/r011", ignore=shutil.ignore_patterns(layout.META))
    (cdir / "local-lab" / "host" / "rr" / "r012").write_text("a file, not a record")
    (cdir / "local-lab" / ".set-aside").mkdir()
    globbed = sorted(p.parent for p in cdir.glob(f"*/*/*/*/{layout.META}"))
    assert layout.find(cdir) == globbed and len(globbed) == 5
    assert layout.find(cdir / "nothing") == []


# Every key of test_params in the order records have always had it: each tool's model holds only the
# fields it uses, and Spec.test_params fills in the others.
RECORDED_KEYS = [
    "tool",
    "kind",
    "duration_s",
    "streams",
    "message_size",
    "timeout_s",
    "bitrate",
    "qps",
    "connection_close",
]
PARAMS_FILES = [
    "params.yaml",
    *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "pipelines").glob("*/params*.yaml")),
]


@pytest.mark.parametrize("path", PARAMS_FILES)
def test_every_shipped_test_records_its_params_as_records_always_had_them(path):
    from benchlib.settings.loading import load_params

    tests = load_params(REPO / path).tests
    unused = {"message_size": None, "timeout_s": None, "bitrate": None, "qps": None, "connection_close": False}
    for name, spec in tests.items():
        params = spec.test_params()
        assert list(params) == RECORDED_KEYS, name
        assert isinstance(params["duration_s"], float), name  # 2.0 in JSON, never 2
        for key, value in unused.items():
            if key not in type(spec).model_fields:
                assert params[key] == value, (name, key)


def test_test_params_are_byte_identical_to_the_captured_records():
    from benchlib.settings.loading import load_params

    metas = sorted((FIXTURES / "raw").glob("*/*/*/*/r*/meta.json"))
    assert len(metas) >= 30
    tests = {}
    for meta_path in metas:
        meta = json.loads(meta_path.read_bytes())
        env = meta["environment"]
        tests.setdefault(env, load_params(REPO / "pipelines" / env / "params.yaml").tests)
        recorded = json.dumps(meta["test_params"])
        assert json.dumps(tests[env][meta["test"]].test_params()) == recorded, meta_path
