"""A campaign holds only the files and directories benchlib wrote: a link, a FIFO or a linked
directory planted among real records (tests/fixtures/raw/local-cilium-demo-001) is refused by every
command that reads records, naming the record and the file, without following, opening or quoting it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REAL_RAW, require_root, venv_env

SYSTEM_FILE = Path("/etc/passwd")
RECORD = "local-cilium/cilium-vxlan-ebpf/tcp_rr/r001"


@pytest.fixture
def project(real_project_copy) -> Path:
    return real_project_copy


def benchlib(project: Path, *args: str) -> subprocess.CompletedProcess:
    # the timeout fails a test whose command waits on a FIFO
    return subprocess.run(["benchlib", *args], cwd=project, env=venv_env(), capture_output=True, text=True, timeout=120)


READERS = {
    "parse": ("parse",),
    "verify": ("verify",),
    "compare": ("compare", REAL_RAW.name, REAL_RAW.name, "--no-html"),
}


def refused(project: Path, command: str, says: str) -> str:
    done = benchlib(project, *READERS[command])
    out = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in out, out
    assert says in out, out
    return out


def assert_nothing_of(target: Path, out: str) -> None:
    for line in target.read_text().splitlines():
        if len(line) > 8:
            assert line not in out, f"{target} quoted: {line!r}"


@pytest.mark.parametrize("name", ["stdout-0.txt", "SHA256SUMS", "meta.json", "notes.txt"])
def test_a_record_file_linked_to_a_system_file_is_refused_unread(project, name):
    rec = project / "data/raw" / REAL_RAW.name / RECORD
    (rec / name).unlink(missing_ok=True)
    (rec / name).symlink_to(SYSTEM_FILE)  # a record's own file replaced, or one added beside them
    for command in ("parse", "verify"):
        out = refused(project, command, f"{rec}: {name}: a symbolic link: a record holds only")
        assert_nothing_of(SYSTEM_FILE, out)
        assert str(SYSTEM_FILE) not in out


def test_a_fifo_in_a_record_is_refused_without_waiting_on_it(project):
    rec = project / "data/raw" / REAL_RAW.name / RECORD
    (rec / "stdout-0.txt").unlink()
    os.mkfifo(rec / "stdout-0.txt")
    for command in READERS:
        refused(project, command, f"{rec}: stdout-0.txt: a FIFO: a record holds only")


@pytest.mark.parametrize(
    "linked, where",
    [
        ("", "the campaign's directory"),
        ("local-cilium", "an environment's directory"),
        (RECORD, "a record"),
    ],
)
def test_a_linked_directory_of_the_campaign_is_refused_not_followed(project, tmp_path, linked, where):
    path = project / "data/raw" / REAL_RAW.name / linked
    outside = tmp_path / "outside"
    shutil.move(path, outside)  # the same records, out of the project
    path.symlink_to(outside)
    for command in READERS:
        refused(project, command, f"{path}: a symbolic link where {where} should be")


@pytest.mark.lab
def test_collect_under_dvc_refuses_a_linked_file_before_dvc_commits_it(project):
    """DVC replaces a link in a stage's output by a copy of what it points to before it runs the stage
    again (it "unprotects" it), and commits the output after: collect must fail before that."""
    require_root()  # collect takes the machine's measurement lock, under /run
    run = lambda *argv: subprocess.run(argv, cwd=project, env=venv_env(), capture_output=True, text=True, timeout=300)  # noqa: E731
    assert run("dvc", "commit", "-f", "collect@local-cilium").returncode == 0
    lock = (project / "dvc.lock").read_text()
    rec = project / "data/raw" / REAL_RAW.name / RECORD
    (rec / "notes.txt").symlink_to(SYSTEM_FILE)
    done = run("dvc", "repro", "collect@local-cilium")
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert f"{rec}: notes.txt: not listed in SHA256SUMS" in out, out
    assert_nothing_of(SYSTEM_FILE, out)
    assert (project / "dvc.lock").read_text() == lock  # nothing committed, so nothing to push
    md5 = hashlib.md5(SYSTEM_FILE.read_bytes()).hexdigest()
    assert not (project / ".dvc/cache/files/md5" / md5[:2] / md5[2:]).exists()


@pytest.mark.lab
def test_collect_refuses_a_link_or_fifo_among_the_records(project):
    require_root()  # collect takes the machine's measurement lock, under /run
    cdir = project / "data/raw" / REAL_RAW.name
    (cdir / RECORD / "notes.txt").symlink_to(SYSTEM_FILE)
    os.mkfifo(cdir / "local-cilium/cilium-vxlan-ebpf/tcp_rr/.r009.incomplete-x")  # hidden: DVC commits it too
    done = benchlib(project, "collect", "--env", "local-cilium")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{cdir / RECORD}: notes.txt: a symbolic link" in done.stderr
    assert f"{cdir}/local-cilium/cilium-vxlan-ebpf/tcp_rr/.r009.incomplete-x: a FIFO" in done.stderr
    assert_nothing_of(SYSTEM_FILE, done.stderr)


def test_the_campaign_log_is_never_written_through_a_link(project, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("kept as it was\n")
    log = project / "data/raw" / f"{REAL_RAW.name}.log"
    log.symlink_to(victim)
    done = benchlib(project, "parse")
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "kept as it was\n"
    assert f"no log file: {log}" in done.stderr
