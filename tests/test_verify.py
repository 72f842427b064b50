"""`benchlib verify` checks the records against what DVC committed of them, not only against their
own SHA256SUMS, which a record rewritten with fresh checksums satisfies. Real records
(tests/fixtures/raw/local-cilium-demo-001) in a copy of the project, committed as the pipeline
commits them: `dvc commit` of the collect stage's output, data/raw/<campaign>/<env>, in dvc.lock."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from benchlib.records import integrity, record
from tests.conftest import REAL_RAW, copy_project, real_campaign, venv_env
from tests.support.projects import committed

OUTPUT = f"data/raw/{REAL_RAW.name}/local-cilium"  # the collect@local-cilium stage's output


def run(project: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=project, env=venv_env(), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def uncommitted(tmp_path_factory) -> Path:
    project = copy_project(tmp_path_factory.mktemp("verify") / "uncommitted")
    real_campaign(project)
    return project


@pytest.fixture(scope="module")
def dvc_committed(uncommitted, tmp_path_factory) -> Path:
    project = Path(shutil.copytree(uncommitted, tmp_path_factory.mktemp("verify") / "committed", symlinks=True))
    done = run(project, "dvc", "commit", "-f", "collect@local-cilium")
    assert done.returncode == 0, done.stderr
    return project


@pytest.fixture
def project(dvc_committed, tmp_path) -> Path:
    return Path(shutil.copytree(dvc_committed, tmp_path / "project", symlinks=True))


def verify(project: Path) -> subprocess.CompletedProcess:
    return run(project, "benchlib", "verify")


def test_records_as_dvc_committed_them_are_whole(project):
    done = verify(project)
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout
        == f"verify: 36 records of {REAL_RAW.name} are whole, as DVC committed them and as their SHA256SUMS say\n"
    )


def test_a_record_rewritten_with_fresh_checksums_is_named(project):
    rec = project / OUTPUT / "cilium-vxlan-ebpf/tcp_rr/r001"
    (rec / "stdout-0.txt").write_bytes((rec / "stdout-0.txt").read_bytes().replace(b"1", b"9"))
    integrity.write_checksums(rec)  # the record agrees with itself again
    integrity.verify(rec)
    done = verify(project)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{rec}: SHA256SUMS, stdout-0.txt: not as DVC committed {OUTPUT}" in done.stderr, done.stderr
    assert done.stderr.count("\n  ") == 1  # the one record, nothing else


def test_a_record_added_by_hand_and_one_removed_are_named(project):
    tests = project / OUTPUT / "cilium-vxlan-ebpf/tcp_rr"
    added, removed = tests / "r003", tests / "r000"
    shutil.copytree(tests / "r002", added)  # made consistent: its own run id, its own checksums
    meta = json.loads((added / "meta.json").read_text())
    meta.update(block=3, run_id="local-cilium/cilium-vxlan-ebpf/tcp_rr/r003")
    (added / "meta.json").write_text(json.dumps(meta))
    integrity.write_checksums(added)
    record.load(added)
    shutil.rmtree(removed)
    done = verify(project)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{added}: a record DVC does not track: not in what it committed of {OUTPUT}" in done.stderr
    assert f"{removed}: missing, though DVC tracks it in {OUTPUT} (`dvc checkout` restores it" in done.stderr
    assert done.stderr.count("\n  ") == 2, done.stderr


def test_a_campaign_dvc_never_committed_is_checked_by_its_checksums_and_says_so(uncommitted, tmp_path):
    project = Path(shutil.copytree(uncommitted, tmp_path / "project", symlinks=True))
    done = verify(project)
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        f"verify: data/raw/{REAL_RAW.name}: not tracked by DVC (never committed: no output of dvc.lock or a "
        ".dvc file): its records are checked against their own SHA256SUMS only\n"
    )
    assert done.stdout == f"verify: 36 records of {REAL_RAW.name} are whole, by their SHA256SUMS\n"
    rec = project / OUTPUT / "cilium-vxlan-ebpf/tcp_rr/r001"
    (rec / "cpu.json").write_text("{}")
    done = verify(project)
    assert done.returncode == 2 and f"{rec / 'cpu.json'}: checksum mismatch" in done.stderr, done.stderr


def test_compare_of_a_revision_whose_dvc_tracks_another_campaign_says_so(project):
    committed(project)  # revision 1: dvc.lock tracks local-cilium-demo-001
    params = project / "params.yaml"
    params.write_text(params.read_text().replace(REAL_RAW.name, "local-cilium-demo-002"))
    shutil.copytree(project / "data/raw" / REAL_RAW.name, project / "data/raw/local-cilium-demo-002")
    assert run(project, "dvc", "commit", "-f", "collect@local-cilium").returncode == 0
    run(project, "git", "add", "-A")
    run(project, "git", "commit", "-q", "-m", "another campaign")  # HEAD: dvc.lock tracks only -002
    done = run(project, "benchlib", "compare", f"HEAD:{REAL_RAW.name}", f"HEAD~1:{REAL_RAW.name}", "--no-html")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr == (
        f"benchlib: error: campaign HEAD:{REAL_RAW.name}: revision HEAD has data/raw/{REAL_RAW.name} but DVC "
        "tracks no records there (its dvc.lock and .dvc files track data/raw/local-cilium-demo-002/local-cilium): "
        "give the revision that measured it (`git log -- dvc.lock`)\n"
    )
    done = run(project, "benchlib", "compare", f"HEAD~1:{REAL_RAW.name}", f"HEAD~1:{REAL_RAW.name}", "--no-html")
    assert done.returncode == 0, done.stderr
