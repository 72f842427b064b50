"""Bounded inputs and deterministic outputs, through the real commands: a params path that never ends, a
profile beyond a cap (benchlib.base.limits) in a real record, and two analyses of the same real tables."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
import yaml

from benchlib.base import limits
from benchlib.profiling import stacks
from benchlib.records import integrity, layout, migrations
from tests.conftest import FIXTURES, REPO, real_campaign, venv_env
from tests.support.campaigns import TIDY
from tests.support.cli import benchlib


def _validate(params: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["benchlib", "validate", "--params", str(params)],
        cwd=REPO,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("kind", ["device", "fifo", "huge"])
def test_validate_refuses_a_params_path_that_never_ends_in_one_line(tmp_path, kind):
    if kind == "device":
        path, says = Path("/dev/zero"), "not a regular file"
    elif kind == "fifo":
        path, says = tmp_path / "params.yaml", "not a regular file"
        os.mkfifo(path)  # no writer: reading it would wait for ever
    else:
        path, says = tmp_path / "params.yaml", f"larger than {limits.size_text(limits.CONFIG_BYTES)}"
        path.write_text("# padding\n" * (limits.CONFIG_BYTES // 10 + 1))
    out = _validate(path)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith(f"benchlib: error: {path}: {says}"), out.stderr


def _profiled_campaign(project: Path, folded: Counter) -> Path:
    """The real records of a local-cilium campaign in ``project``, each configuration's first run copied as
    its profiled run with the real profile of tests/fixtures/perf; returns the campaign directory."""
    cdir = real_campaign(project)
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["experiment"]["profile_runs"] = 1
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    for src in sorted(cdir.glob("*/*/*/r000")):
        dst = src.with_name("p000")
        shutil.copytree(src, dst)
        meta = migrations.migrate(json.loads((dst / layout.META).read_text()), dst)
        meta.update(
            profiled=True,
            run_id=meta["run_id"].replace("/r000", "/p000"),
            profile={
                "cpus": {"client": [0], "server": [0]},
                "attribution": "shared",
                "samples": sum(folded.values()),
                "frequency_hz": 499,
                "window_s": 2.5,
                "kernel_symbols": True,
                "perf_version": "perf version 6.1.76",
                "kernel": "6.1.0",
            },
        )
        (dst / layout.META).write_text(json.dumps(meta))
        (dst / layout.PROFILE).write_bytes(stacks.folded_bytes(folded))
        integrity.write_checksums(dst)
    return cdir


def _tamper(rec: Path, data: bytes) -> None:
    (rec / layout.PROFILE).write_bytes(data)
    integrity.write_checksums(rec)


def _perf_fixture() -> Counter:
    return stacks.fold(gzip.decompress((FIXTURES / "perf" / "tcp_rr-host.script.gz").read_bytes()).decode())


def test_parse_refuses_a_profile_beyond_a_cap_naming_the_record_and_the_cap(project_copy):
    real = _perf_fixture()
    cdir = _profiled_campaign(project_copy, real)
    parse = benchlib(project_copy, "parse", timeout=300)
    assert parse.returncode == 0, parse.stderr  # the real profiles pass
    rec = cdir / "local-cilium/bridge-iptables/tcp_rr/p000"
    stack = next(iter(real))
    deep = ";".join([stack, *(f"frame_{i}" for i in range(10_000))])
    cases = [
        (
            stacks.folded_bytes(Counter({**real, stack: 10**30})),
            f"beyond the cap of {limits.PROFILE_SAMPLES:,} samples per profile",
        ),
        (stacks.folded_bytes(Counter({**real, deep: 1})), f"a stack deeper than {limits.STACK_DEPTH} frames"),
        # a few hundred KiB that unpack to more than the cap
        (gzip.compress(b"\0" * (limits.PROFILE_BYTES + 1), compresslevel=1), "unpacks to more than 256 MiB"),
    ]
    for data, says in cases:
        _tamper(rec, data)
        parse = benchlib(project_copy, "parse", timeout=300)
        assert parse.returncode == 2 and len(parse.stderr.splitlines()) == 1, parse.stderr
        assert parse.stderr.startswith(f"benchlib: error: {rec}: {layout.PROFILE}:"), parse.stderr
        assert says in parse.stderr, parse.stderr


def test_two_analyses_of_the_same_tables_are_the_same_bytes(project_copy):
    """Real tidy tables and real profiles (host and veth-routed of tests/fixtures/perf), analysed in two
    processes with different polars thread counts: every output file is the same, byte for byte."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "analysis"))
    from tests.support.profile_tables import profile_tables

    processed = project_copy / "data/processed"
    processed.mkdir(parents=True)
    for name in ("runs.parquet", "metrics.parquet"):
        shutil.copy2(TIDY / name, processed / name)
    campaign = pl.read_parquet(processed / "runs.parquet")["campaign"][0]  # the profiles are of the same campaign
    p, r = (t.with_columns(campaign=pl.lit(campaign)) for t in profile_tables())
    p.write_parquet(processed / "profiles.parquet")
    r.write_parquet(processed / "profile_runs.parquet")
    outputs = []
    for threads in ("1", "2"):
        out = subprocess.run(
            ["benchlib", "analyse", "--out", f"data/analysis-{threads}", "--metrics-json", f"metrics-{threads}.json"],
            cwd=project_copy,
            env={**venv_env(), "POLARS_MAX_THREADS": threads},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr
        d = project_copy / f"data/analysis-{threads}"
        files = {f.name: f.read_bytes() for f in sorted(d.iterdir())}
        files["metrics.json"] = (project_copy / f"metrics-{threads}.json").read_bytes()
        outputs.append(files)
    one, two = outputs
    assert "profile_differences.parquet" in one and "profile_frames.parquet" in one
    assert sorted(one) == sorted(two)
    assert [name for name in one if one[name] != two[name] and name != "settings.json"] == []
    # the settings name where each analysis wrote its metrics.json (and so differ in their digest), and
    # otherwise agree
    settings = [json.loads(o["settings.json"]) for o in outputs]
    for s in settings:
        del s["digest"]
    assert json.dumps(settings[0]).replace("metrics-1.json", "metrics-2.json") == json.dumps(settings[1])
