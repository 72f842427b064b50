"""A record read back is checked field by field against the one schema of meta.json and cpu.json
(benchlib.records.record_schema): a field of the wrong type, a meta.json nested 100,000 levels deep, a profile
emptied after the run are refused by every command that reads records (parse, verify, compare), exit 2,
in one line naming the record and the field, never a traceback. Real records
(tests/fixtures/raw/local-cilium-demo-001, schema version 3) in a copy of the project, their SHA256SUMS
written again so that only the schema can tell."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from benchlib.profiling import stacks
from benchlib.records import integrity, layout, migrations
from tests.conftest import REAL_RAW, venv_env

RECORD = "local-cilium/cilium-vxlan-ebpf/tcp_rr/r001"
READERS = {
    "parse": ("parse",),
    "verify": ("verify",),
    "compare": ("compare", REAL_RAW.name, REAL_RAW.name, "--no-html"),
}


@pytest.fixture
def project(real_project_copy) -> Path:
    return real_project_copy


def current(rec: Path) -> dict:
    """The record's meta.json as the current schema version has it (a version 3 record migrated)."""
    return migrations.migrate(json.loads((rec / layout.META).read_text()), rec)


def rewrite(rec: Path, meta_text: str) -> None:
    (rec / layout.META).write_text(meta_text)
    integrity.write_checksums(rec)


def refused(project: Path, command: str) -> str:
    """The one line of stderr with which ``command`` refused the campaign (exit 2, no traceback)."""
    done = subprocess.run(
        ["benchlib", *READERS[command]], cwd=project, env=venv_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("verify: ")]  # its notes
    if lines[0].endswith(":"):  # a list of problems (verify's, parse's against the plan): one, below its count
        assert re.search(r" 1 (problem|record)\(s\) ", lines[0]), done.stderr
        lines = [line.strip() for line in lines[1:]]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["parse", "verify", "compare"])
def test_a_foreign_cpu_that_is_text_is_named_by_its_record_and_field(project, command):
    rec = project / "data/raw" / REAL_RAW.name / RECORD
    meta = current(rec)
    meta["foreign_cpu"] = {"window_s": 2.0, "cores": 0.1, "cpus": {"0": 0.1}, "measured_cores": "abc", "top": []}
    rewrite(rec, json.dumps(meta, indent=1))
    line = refused(project, command)
    assert line.endswith(f"{rec}: meta.json: foreign_cpu.measured_cores: 'abc' is not a number"), line


@pytest.mark.parametrize("command", ["parse", "verify", "compare"])
def test_a_meta_json_nested_100000_levels_deep_is_named_before_it_is_parsed(project, command):
    rec = project / "data/raw" / REAL_RAW.name / RECORD
    meta = current(rec)
    meta["processes"] = "DEEP"
    deep = "[" * 100_000 + "]" * 100_000
    rewrite(rec, json.dumps(meta).replace('"DEEP"', deep))
    assert (rec / layout.META).stat().st_size > 200_000
    line = refused(project, command)
    assert str(rec) in line and "meta.json" in line and "nested deeper than 64 levels" in line, line


def profiled(rec: Path, samples: int, folded: bytes) -> Path:
    """A profiled run of the configuration of measured run ``rec`` (p000 beside it), from its record."""
    into = rec.with_name("p000")
    shutil.copytree(rec, into)
    meta = current(into)
    meta.update(
        block=0,
        run_id=meta["run_id"].rsplit("/", 1)[0] + "/p000",
        profiled=True,
        profile={
            "perf_version": "perf version 6.1",
            "event": "cpu-clock",
            "frequency_hz": 99,
            "kernel": meta["target"]["versions"]["kernel"],
            "cpus": {"client": [0], "server": [1]},
            "attribution": "cpu",
            "window_s": 2.0,
            "samples": samples,
            "kernel_symbols": True,
            "command": ["perf", "record"],
            "bpf": None,
        },
    )
    (into / layout.PROFILE).write_bytes(folded)
    rewrite(into, json.dumps(meta, indent=1))
    return into


def with_profiled_runs(project: Path, empty: bytes) -> Path:
    """Every configuration of the campaign with a profiled run (params: profile_runs 1), that of RECORD's
    configuration with a profile of ``empty`` bytes where its meta.json counts 12 samples."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["experiment"]["profile_runs"] = 1
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    cdir = project / "data/raw" / REAL_RAW.name
    real = stacks.folded_bytes(Counter({"cpu0;netperf;tcp_sendmsg": 7, "cpu1;netserver;tcp_recvmsg": 5}))
    broken = None
    for rec in sorted(cdir.glob("*/*/*/r000")):
        p = profiled(rec, 12, empty if rec.parent == (cdir / RECORD).parent else real)
        broken = p if rec.parent == (cdir / RECORD).parent else broken
    return broken


ZERO_BYTES, GZIP_OF_NOTHING = b"", gzip.compress(b"", mtime=0)


@pytest.mark.parametrize(
    ("command", "empty"),
    [("parse", ZERO_BYTES), ("parse", GZIP_OF_NOTHING), ("verify", ZERO_BYTES), ("compare", GZIP_OF_NOTHING)],
    ids=["parse-zero bytes", "parse-gzip of nothing", "verify-zero bytes", "compare-gzip of nothing"],
)
def test_an_emptied_profile_is_named_by_its_record(project, command, empty):
    broken = with_profiled_runs(project, empty)
    line = refused(project, command)
    assert line.endswith(
        f"{broken}: profile.folded.gz: holds no sample, meta.json profile.samples says 12 (emptied after the run?)"
    ), line


def test_a_profile_that_holds_fewer_samples_than_its_record_counts_is_named(project):
    with_profiled_runs(project, stacks.folded_bytes(Counter({"cpu0;netperf;tcp_sendmsg": 3})))
    line = refused(project, "parse")
    assert line.endswith(
        "profile.folded.gz: holds 3 samples, meta.json profile.samples says 12 (cut short or changed after the run?)"
    ), line
