"""Every command on the state the README's main command leaves: a project holding exactly one campaign,
parsed and analysed (the real records of a local-cilium campaign, tests/fixtures/raw). Each command ends
in its output or in one line and exit 2, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest
import yaml

from benchlib.tables import parse_index, tidy
from tests.conftest import REAL_RAW, copy_project, real_campaign, venv_env


def benchlib(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["benchlib", *args], cwd=project, env=venv_env(), capture_output=True, text=True, timeout=300)


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    project = copy_project(tmp_path_factory.mktemp("one-campaign") / "project")
    real_campaign(project)
    for command in ("parse", "analyse"):
        done = benchlib(project, command)
        assert done.returncode == 0, done.stderr
    return project


def test_history_of_a_single_campaign_lists_it_without_changes(project):
    text = benchlib(project, "history")
    assert text.returncode == 0, text.stderr
    assert f"benchlib history: 1 campaign(s), in the order measured: {REAL_RAW.name} (" in text.stdout
    assert "Changes against the campaign before (significant and beyond the threshold): 0" in text.stdout
    rows = json.loads(benchlib(project, "history", "--json").stdout)
    assert rows and {r["campaign"] for r in rows} == {REAL_RAW.name}
    assert all(r["previous"] is None and r["delta_pct"] is None and r["changed"] is None for r in rows)


def test_compare_of_the_campaign_with_itself_finds_no_change(project):
    done = benchlib(project, "compare", REAL_RAW.name, REAL_RAW.name, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["comparisons"]


def test_summary_lists_as_many_findings_as_asked_and_refuses_counts_out_of_bounds(project):
    done = benchlib(project, "summary", "--top", "1")
    assert done.returncode == 0, done.stderr
    assert "reports/report.html" in done.stdout
    for top in ("99999999999999999999", "0", "-1", "3.5", "1e3"):
        refused = benchlib(project, "summary", "--top", top)  # argparse: its usage, then the one error line
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert refused.stderr.splitlines()[-1] == (
            f"benchlib summary: error: argument --top: {top!r} is not a whole number from 1 to 10,000"
        )


def test_a_missing_profile_table_is_named_missing(project):
    processed = project / "data/processed"
    (processed / "profiles.parquet").rename(processed / "profiles.parquet.aside")
    try:
        error = one_line_error(benchlib(project, "analyse"))
    finally:
        (processed / "profiles.parquet.aside").rename(processed / "profiles.parquet")
    assert f"{processed / 'profiles.parquet'}: missing (`benchlib parse` writes it with runs.parquet)" in error


def test_validate_refuses_a_complete_campaign_whose_test_changed_as_collect_would(project):
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert "is complete" in benchlib(project, "validate").stdout
    params["tests"]["tcp_rr"]["duration_s"] += 1
    changed = project / "changed.yaml"
    changed.write_text(yaml.safe_dump(params))
    error = one_line_error(benchlib(project, "--params", str(changed), "validate"))
    assert f"{changed}: tests.tcp_rr: campaign {REAL_RAW.name} recorded it with other parameters" in error
    assert "duration_s: 2.0 -> 3.0" in error


def test_the_tables_do_not_depend_on_where_the_project_lives(project, tmp_path):
    elsewhere = tmp_path / "moved"
    shutil.copytree(project, elsewhere, symlinks=True)
    done = benchlib(elsewhere, "parse", "--full")  # read every record again, in the other place
    assert done.returncode == 0, done.stderr
    for table in tidy.TABLES:
        name = f"data/processed/{table}.parquet"
        assert (elsewhere / name).read_bytes() == (project / name).read_bytes(), name
    runs = pl.read_parquet(elsewhere / "data/processed/runs.parquet")
    assert runs["record"].str.starts_with(f"data/raw/{REAL_RAW.name}/").all()
    for where in (project, elsewhere):
        header = pl.read_parquet_metadata(where / "data/processed" / parse_index.INDEX)[parse_index.KEY]
        assert json.loads(header)["campaign_dir"] == f"data/raw/{REAL_RAW.name}"
