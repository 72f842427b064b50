"""A hostile but realistic user, on the real lab: two measurements at
once, a killed pipeline, a changed plan, tampered records, a full or read-only
disk, a hanging tool. Each test reproduces what once lost data or gave wrong
numbers without a word."""

import fcntl
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pytest

from benchlib.base.errors import ConfigError, TargetError
from benchlib.host import machine
from benchlib.measure import runner
from benchlib.measure.plan import plan_environment
from benchlib.records import integrity, layout, record
from benchlib.tables import parse_index, tidy
from benchlib.targets.lab import list_namespaces
from benchlib.vocabulary import schema
from tests.conftest import REPO, RR, lab_target, real_campaign, require_root, short_params, venv_env, write_params
from tests.support.campaigns import TIDY
from tests.support.cli import benchlib


def wait_for(condition, timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.1)


def wait_for_first_record(proc: subprocess.Popen, cdir: Path, timeout: float) -> None:
    """Until ``proc`` (output piped) has recorded its first run; if it ends first, fail with its output."""

    def recorded() -> bool:
        assert proc.poll() is None, f"ended ({proc.returncode}) before its first record:\n{proc.stdout.read()}"
        return bool(layout.find(cdir))

    wait_for(recorded, timeout=timeout, what="the first record")


def dash_env() -> dict:
    """dvc runs a stage's cmd through $SHELL -c, or /bin/sh when SHELL is unset (as under CI); on
    Debian that is dash, which, unlike bash, does not exec a lone command."""
    return {**venv_env(), "SHELL": "/bin/sh"}


def leftovers(pid: int) -> list[str]:
    """Namespaces and temporary directories of the labs process ``pid`` built."""
    return [ns for ns in list_namespaces() if ns.startswith(f"bl-{pid}_")] + glob.glob(f"/tmp/bl-{pid}_*")


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` (the lab's servers among them), pid -> command line."""
    parents = {}
    for p in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(p.name)] = int((p / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            pass
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child in (c for c, pp in parents.items() if pp == parent):
            found[child] = _cmdline(Path(f"/proc/{child}"), whole=True)
            todo.append(child)
    return found


def still_running(processes: dict[int, str]) -> list[str]:
    """Those of ``processes`` alive with the same command line (a reused pid is not the same process)."""
    return [cmd for pid, cmd in processes.items() if alive(pid) and _cmdline(Path(f"/proc/{pid}"), whole=True) == cmd]


def holder_pid() -> int:
    return int(re.match(r"pid (\d+):", machine.holder()).group(1))


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# -- 1. one measurement at a time ---------------------------------------------------------------


def test_a_second_collect_is_refused_at_once_and_lab_clean_respects_the_first(project_copy):
    require_root()
    write_params(project_copy, "first", repetitions=30)
    other = write_params(project_copy, "second", repetitions=1, name="other.yaml")
    first = subprocess.Popen(
        ["benchlib", "collect", "--env", "local-lab"],
        cwd=project_copy,
        env=venv_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: layout.find(project_copy / "data/raw/first"), what="the first collect's first record")
        t0 = time.monotonic()
        second = benchlib(project_copy, "--params", str(other), "collect", "--env", "local-lab", timeout=30)
        assert time.monotonic() - t0 < 15  # refused at once, not after waiting
        assert second.returncode == 2, second.stderr
        assert f"pid {first.pid}: benchlib collect --env local-lab, campaign first" in second.stderr
        assert str(machine.LOCK_PATH) in second.stderr and len(second.stderr.strip().splitlines()) == 1
        assert not (project_copy / "data/raw/second").exists()
        # lab clean may not touch a running campaign's lab, nor race a starting one
        clean = benchlib(project_copy, "lab", "clean", timeout=30)
        assert clean.returncode == 2 and f"pid {first.pid}" in clean.stderr
        assert [ns for ns in list_namespaces() if ns.startswith(f"bl-{first.pid}_")]
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 130
    assert benchlib(project_copy, "lab", "clean", timeout=60).returncode == 0  # free again
    assert not leftovers(first.pid)


# -- 2. killing the pipeline stops the measurement ---------------------------------------------


@contextmanager
def started(argv: list[str], project: Path, **popen) -> Iterator[subprocess.Popen]:
    """``argv`` run in ``project`` (dvc under dash), in a session of its own, output piped; on the way
    out, also after a failure, it and whatever still runs in the project end."""
    proc = subprocess.Popen(
        argv,
        cwd=project,
        env=dash_env(),
        **{"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, "start_new_session": True, **popen},
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_strays(project)


def end_and_await_collect(proc: subprocess.Popen, collect: int, sig: int | None = None) -> None:
    """Signal ``proc`` (unless ``sig`` is None: it was told otherwise), then wait for it and for collect."""
    if sig is not None:
        os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    wait_for(lambda: not alive(collect), timeout=30, what="collect to end with its pipeline")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGHUP], ids=lambda s: s.name)
def test_killing_dvc_repro_ends_collect_and_leaves_nothing(project_copy, sig):
    require_root()
    write_params(project_copy, "killed", repetitions=30)
    cdir = project_copy / "data/raw/killed"
    with started(["dvc", "repro", "collect@local-lab"], project_copy) as dvc:
        wait_for_first_record(dvc, cdir, timeout=120)
        collect = holder_pid()
        # the premise: dvc runs the command as its own child (dvc.yaml's cmd execs it, whatever the shell)
        assert int(Path(f"/proc/{collect}/stat").read_text().split(") ")[1].split()[1]) == dvc.pid
        assert leftovers(collect)
        below = descendants(collect)
        assert any("netserver" in cmd for cmd in below.values()), below
        end_and_await_collect(dvc, collect, sig)
    out = dvc.stdout.read()  # collect wrote here too: its pipe is closed now
    assert "benchlib: interrupted; completed runs are kept" in out, out
    assert not leftovers(collect)
    assert not still_running(below)  # the servers ended with the lab
    done = layout.find(cdir)
    assert 1 <= len(done) < 30
    for rec in done:
        record.load(rec)


def test_ctrl_c_at_the_terminal_of_dvc_repro_ends_collect_and_leaves_nothing(project_copy):
    """A real terminal: dvc repro on a pseudo-terminal it controls, and the interrupt character typed
    there. The kernel's line discipline sends SIGINT to the foreground process group (dvc and collect)."""
    require_root()
    write_params(project_copy, "ctrl-c", repetitions=30)
    master, slave = os.openpty()

    def own_terminal():  # in the child: a session whose controlling terminal is the pty
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    screen = []

    def read_screen():  # until the terminal's last writer is gone (EIO)
        try:
            while chunk := os.read(master, 4096):
                screen.append(chunk.decode(errors="replace"))
        except OSError:
            pass

    reader = threading.Thread(target=read_screen, daemon=True)
    cdir = project_copy / "data/raw/ctrl-c"
    try:
        with started(
            ["dvc", "repro", "collect@local-lab"],
            project_copy,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=False,
            preexec_fn=own_terminal,
        ) as dvc:
            os.close(slave)
            reader.start()
            wait_for(lambda: dvc.poll() is not None or layout.find(cdir), timeout=120, what="the first record")
            assert dvc.poll() is None, "".join(screen)
            collect = holder_pid()
            os.write(master, termios.tcgetattr(master)[6][termios.VINTR])  # Ctrl-C
            end_and_await_collect(dvc, collect)
    finally:
        reader.join(timeout=10)
        os.close(master)
    out = "".join(screen)
    assert dvc.returncode != 0 and "benchlib: interrupted; completed runs are kept" in out, out
    assert not leftovers(collect)
    assert 1 <= len(layout.find(cdir)) < 30


def test_a_campaign_under_nohup_outlives_the_hangup_and_still_stops_with_dvc(project_copy):
    require_root()
    write_params(project_copy, "nohup", repetitions=30)
    cdir = project_copy / "data/raw/nohup"
    with started(["nohup", "dvc", "repro", "collect@local-lab"], project_copy) as dvc:
        wait_for_first_record(dvc, cdir, timeout=120)
        collect = holder_pid()
        os.killpg(dvc.pid, signal.SIGHUP)  # what a closing terminal sends its session
        recorded = len(layout.find(cdir))
        wait_for(lambda: len(layout.find(cdir)) >= recorded + 2, timeout=60, what="two more records")
        assert alive(collect) and dvc.poll() is None
        end_and_await_collect(dvc, collect, signal.SIGTERM)
    assert "benchlib: interrupted; completed runs are kept" in dvc.stdout.read()
    assert not leftovers(collect)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_killing_reproduce_sh_ends_dvc_and_collect(project_copy, sig):
    """reproduce.sh passes SIGTERM and SIGHUP on to dvc and runs dvc with a parent-death signal: even
    SIGKILL of the script stops everything."""
    require_root()
    write_params(project_copy, "repro-killed", repetitions=30)
    # The installation is this checkout's: setup.sh would sync a venv of the copy (minutes); the
    # script's own part, validate then dvc, runs as written.
    (project_copy / "scripts/setup.sh").write_text("exit 0\n")
    for name in (".venv", ".tools"):
        (project_copy / name).symlink_to(REPO / name)
    cdir = project_copy / "data/raw/repro-killed"
    with started(["bash", "scripts/reproduce.sh", "collect@local-lab"], project_copy) as script:
        wait_for_first_record(script, cdir, timeout=180)
        collect = holder_pid()
        below = descendants(collect)
        end_and_await_collect(script, collect, sig)
    out = script.stdout.read()
    assert "benchlib: interrupted" in out, out
    assert not leftovers(collect)
    assert not still_running(below)
    assert not [
        p
        for p in Path("/proc").glob("[0-9]*")
        if _cmdline(p).startswith("dvc repro collect@local-lab") and str(project_copy) in _cwd(p)
    ]


def stop_strays(project: Path) -> None:
    """End whatever still runs in ``project`` (only after a failure), so that it holds no lock for the next test."""
    strays = [int(p.name) for p in Path("/proc").glob("[0-9]*") if _cwd(p) == str(project)]
    for pid in strays:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    wait_for(lambda: not any(alive(pid) for pid in strays), timeout=60, what=f"{strays} to end")


def _cmdline(p: Path, whole: bool = False) -> str:
    """The process's arguments (without the program unless ``whole``)."""
    try:
        args = Path(p / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return ""
    return " ".join(args if whole else args[1:]).strip()


def _cwd(p: Path) -> str:
    try:
        return os.readlink(p / "cwd")
    except OSError:
        return ""


# -- 3. a campaign's identity is its plan ---------------------------------------------------------


@pytest.mark.parametrize(
    "change, field", [({"duration_s": 2}, "duration_s: 1.0 -> 2.0"), ({"message_size": 64}, "message_size: 1 -> 64")]
)
def test_resuming_with_a_changed_test_is_refused(tmp_path, lab_env, change, field):
    require_root()
    params = short_params("plan", ["host"], {"rr": RR}, repetitions=1, retries=0)
    plan = plan_environment(params, "local-lab")
    runner.run_environment(params, plan, lab_target(lab_env, ["host"]), raw_root=tmp_path, log=lambda m: None)
    changed = short_params("plan", ["host"], {"rr": {**RR, **change}}, repetitions=2, retries=0)
    with pytest.raises(ConfigError) as err:
        runner.run_environment(
            changed,
            plan_environment(changed, "local-lab"),
            lab_target(lab_env, ["host"]),
            raw_root=tmp_path,
            log=lambda m: None,
        )
    assert "tests.rr: campaign plan recorded it with other parameters" in str(err.value)
    assert field in str(err.value) and "new experiment.campaign" in str(err.value)
    assert len(layout.find(tmp_path / "plan")) == 1  # nothing measured, nothing lost


def _edit_environment(project: Path, edit) -> Path:
    """pipelines/local-lab/environment.yaml of ``project`` after ``edit`` (a function of its mapping)."""
    import yaml

    path = project / "pipelines/local-lab/environment.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _as_version_3(rec: Path) -> None:
    """Record ``rec`` as benchlib wrote it before records kept their scenario's definition."""
    meta = json.loads((rec / "meta.json").read_text())
    del meta["scenario_definition"]
    (rec / "meta.json").write_text(json.dumps({**meta, "schema_version": 3}, indent=1))
    integrity.write_checksums(rec)


def test_an_edited_scenario_is_refused_at_collect_and_at_parse_naming_it_and_what_changed(project_copy):
    require_root()
    write_params(project_copy, "edited", repetitions=1)
    assert benchlib(project_copy, "collect", "--env", "local-lab").returncode == 0
    rec = project_copy / "data/raw/edited/local-lab/host/rr/r000"
    assert record.load(rec).scenario_definition["scenario"]["topology"] == "host"
    original = (project_copy / "pipelines/local-lab/environment.yaml").read_text()
    for edit, change in [
        (
            lambda d: d["scenarios"]["host"].update(firewall="conntrack"),
            "scenarios.host.firewall: (none) -> 'conntrack'",
        ),
        (lambda d: d["cpu_placement"].update(TCP_RR="split"), "cpu_placement.TCP_RR: 'shared' -> 'split'"),
    ]:
        env_file = _edit_environment(project_copy, edit)
        collect = benchlib(project_copy, "collect", "--env", "local-lab")
        assert collect.returncode == 2 and "Traceback" not in collect.stderr, collect.stderr
        assert collect.stderr == (
            f"benchlib: error: {env_file}: scenarios.host: campaign edited recorded it with another definition "
            f"({rec}): {change}. A changed scenario is a new campaign: set a new experiment.campaign (or restore "
            "the scenario)\n"
        )
        parse = benchlib(project_copy, "parse")
        assert parse.returncode == 2 and "Traceback" not in parse.stderr, parse.stderr
        assert (
            f"{rec}: measured with another definition of scenario host than {env_file} gives now: {change}"
            in parse.stderr
        ), parse.stderr
        assert not (project_copy / "data/processed/runs.parquet").exists()
        env_file.write_text(original)
    assert [p.name for p in (project_copy / "data/raw/edited/local-lab/host/rr").iterdir()] == ["r000"]
    # prose is no part of what a scenario measures
    _edit_environment(project_copy, lambda d: d["scenarios"]["host"].update(description="the baseline, reworded"))
    assert benchlib(project_copy, "collect", "--env", "local-lab").returncode == 0
    parse = benchlib(project_copy, "parse")
    assert parse.returncode == 0 and "parse: 1 runs" in parse.stdout, parse.stderr
    # a record that predates recorded definitions cannot be compared: it is accepted, and collect says so
    _as_version_3(rec)
    _edit_environment(project_copy, lambda d: d["scenarios"]["host"].update(mtu=9000))
    collect = benchlib(project_copy, "collect", "--env", "local-lab")
    assert collect.returncode == 0, collect.stderr
    assert (
        "collect: 1 record(s) of campaign edited predate recorded scenario definitions: their scenarios are "
        "not compared with the environment as it is now"
    ) in collect.stderr
    assert benchlib(project_copy, "parse").returncode == 0


def test_parse_names_how_many_planned_runs_are_not_recorded_yet(project_copy):
    require_root()
    write_params(project_copy, "grown", repetitions=1)
    assert benchlib(project_copy, "collect", "--env", "local-lab").returncode == 0
    write_params(project_copy, "grown", repetitions=3)  # the plan grew after collect
    parse = benchlib(project_copy, "parse")
    cdir = project_copy / "data/raw/grown"
    assert (parse.returncode, parse.stderr) == (
        2,
        (
            f"benchlib: error: {cdir}: 2 of 3 planned runs not recorded yet (the first: local-lab/host/rr/r001): "
            "run `benchlib collect --env local-lab` (--skip-corrupt parses the 1 recorded)\n"
        ),
    )
    assert not (project_copy / "data/processed/runs.parquet").exists()
    partial = benchlib(project_copy, "parse", "--skip-corrupt")
    assert partial.returncode == 0 and "parse: 1 runs" in partial.stdout, partial.stderr
    assert "2 of 3 planned runs not recorded yet" in partial.stderr


# -- 4/5. parse checks the records against the plan; collect keeps what it reports ---------------


def test_parse_names_every_record_that_does_not_match_the_plan_and_collect_remeasures_incomplete_ones(project_copy):
    require_root()
    write_params(project_copy, "tamper", repetitions=8)
    assert benchlib(project_copy, "collect", "--env", "local-lab").returncode == 0
    cdir = project_copy / "data/raw/tamper/local-lab/host/rr"
    shutil.copytree(cdir / "r000", cdir / "r009")  # outside the plan
    shutil.rmtree(cdir / "r004")
    shutil.copytree(cdir / "r000", cdir / "r004")  # a copy where a planned record is missing
    (cdir / "r001" / "meta.json").unlink()  # incomplete
    (cdir / "r002" / "SHA256SUMS").write_bytes(b"\xff\xfe\x00binary")
    (cdir / "r003" / "stdout-0.txt").unlink()
    (cdir / "r003" / "stdout-0.txt").mkdir()  # a directory where a file should be
    shutil.rmtree(cdir / "r007")
    (cdir / "r007").write_text("not a record")  # a file where a record should be
    parse = benchlib(project_copy, "parse")
    assert parse.returncode == 2 and "Traceback" not in parse.stderr
    for path, why in [
        ("r009", "run local-lab/host/rr/r009 is not in the plan"),
        ("r004", "holds run 'local-lab/host/rr/r000'"),
        ("r001", "incomplete record"),
        ("r007", "not a directory"),
    ]:
        assert f"{cdir / path}: {why}" in parse.stderr, parse.stderr
    skipped = benchlib(project_copy, "parse", "--skip-corrupt")
    assert skipped.returncode == 0 and "Traceback" not in skipped.stderr, skipped.stderr
    assert f"{cdir / 'r002' / 'SHA256SUMS'}: not text" in skipped.stderr
    assert f"{cdir / 'r003' / 'stdout-0.txt'}: unreadable" in skipped.stderr
    assert "parse: 3 runs" in skipped.stdout  # r000, r005, r006
    # collect: r002 and r003 are not as recorded: it refuses (DVC would commit them after it), naming them
    collect = benchlib(project_copy, "collect", "--env", "local-lab")
    assert collect.returncode == 2 and "2 record(s) are not as they were recorded" in collect.stderr, collect.stderr
    assert f"{cdir / 'r002' / 'SHA256SUMS'}: not text" in collect.stderr
    assert f"{cdir / 'r003' / 'stdout-0.txt'}: unreadable" in collect.stderr
    shutil.rmtree(cdir / "r002")
    shutil.rmtree(cdir / "r003")
    # r001 is not done; it is set aside (kept) and measured again, and reported only once kept
    collect = benchlib(project_copy, "collect", "--env", "local-lab")
    assert collect.returncode == 0, collect.stderr
    assert f"{cdir / 'r001'} was not a whole record: moved to .r001.incomplete-" in collect.stderr
    assert f"{cdir / 'r007'} was not a whole record" in collect.stderr
    assert re.search(r"\[ *\d+/8\] block 2 .* ok ", collect.stderr)
    assert record.load(cdir / "r001").outcome == "ok" and record.load(cdir / "r007").outcome == "ok"
    assert glob.glob(str(cdir / ".r001.incomplete-*/stdout-0.txt"))  # nothing the user had is deleted
    # the same campaign parsed under a plan whose test changed: every record is named, none pooled
    changed = write_params(project_copy, "tamper", repetitions=8, name="changed.yaml")
    changed.write_text(changed.read_text().replace("duration_s: 1", "duration_s: 2"))
    parse = benchlib(project_copy, "--params", str(changed), "parse")
    assert parse.returncode == 2
    assert (
        f"{cdir / 'r005'}: measured with other test parameters than the plan's: duration_s: 1.0 -> 2.0" in parse.stderr
    )


# -- 6. every subprocess has a timeout ----------------------------------------------------------


def test_a_hanging_version_probe_ends_the_collection(tmp_path, lab_env, monkeypatch):
    require_root()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "netperf").write_text('#!/bin/sh\n[ "$1" = -V ] && exec sleep 600\nexec /usr/bin/netperf "$@"\n')
    (bin_dir / "netperf").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(runner, "VERSION_TIMEOUT_S", 2)
    params = short_params("probe", ["host"], {"rr": RR}, repetitions=1)
    target = lab_target(lab_env, ["host"])
    t0 = time.monotonic()
    with pytest.raises(TargetError, match=r"`netperf -V` on the client side did not answer within 2 s"):
        runner.run_environment(
            params, plan_environment(params, "local-lab"), target, raw_root=tmp_path, log=lambda m: None
        )
    assert time.monotonic() - t0 < 30
    assert not [ns for ns in list_namespaces() if ns.startswith(target.lab_id + "-")]
    assert not subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True).stdout


# -- 7. OS errors are one line naming the path; what was written is kept --------------------------


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


@pytest.mark.parametrize("fs", ["full", "read-only"])
def test_a_full_or_read_only_disk_is_one_line_and_resume_works(project_copy, fs):
    require_root()
    write_params(project_copy, "disk", repetitions=6)
    raw = project_copy / "data/raw"
    raw.mkdir(parents=True)
    if fs == "full":
        _mount("-t", "tmpfs", "-o", "size=20k", "tmpfs", str(raw))  # five pages: one record takes four
    else:
        _mount("--bind", str(raw), str(raw))
        _mount("-o", "remount,bind,ro", str(raw))
    try:
        failed = benchlib(project_copy, "collect", "--env", "local-lab")
        assert failed.returncode == 2
        error = [line for line in failed.stderr.splitlines() if line.startswith("benchlib: error:")]
        assert len(error) == 1 and "Traceback" not in failed.stderr, failed.stderr
        reason = "No space left on device" if fs == "full" else "Read-only file system"
        assert re.match(rf"benchlib: error: {raw}/\S+: {reason}$", error[0]), error[0]
        kept = layout.find(raw / "disk") if (raw / "disk").exists() else []
        for rec in kept:
            record.load(rec)
        if fs == "full":
            assert kept, "the records written before the disk filled up are kept"
            _mount("-o", "remount,size=8m", str(raw))
        else:
            _mount("-o", "remount,bind,rw", str(raw))
        resumed = benchlib(project_copy, "collect", "--env", "local-lab")
        assert resumed.returncode == 0, resumed.stderr
        assert len(layout.find(raw / "disk")) == 6
        assert not list((raw / "disk").rglob(".*tmp*"))
    finally:
        subprocess.run(["umount", "-l", str(raw)], capture_output=True, timeout=30)


def _fill(directory: Path, leave: int = 0) -> None:
    """Take the free space of the file system holding ``directory`` but ``leave`` bytes."""
    with open(directory / "filler", "wb", buffering=0) as f:
        try:
            while (free := os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize) > leave:
                f.write(b"\0" * min(1 << 16, free - leave))
        except OSError:
            pass


@pytest.mark.parametrize("room", ["none", "for the runs table only"])
def test_a_full_disk_during_parse_is_one_line_and_keeps_the_old_tables(project_copy, tmp_path, room):
    require_root()
    real_campaign(project_copy)
    params = project_copy / "params.yaml"
    plan = params.read_text()
    params.write_text(plan.replace("repetitions: 3", "repetitions: 2"))  # the old tables: two blocks
    assert "parse: 24 runs" in benchlib(project_copy, "parse", "--skip-corrupt").stdout
    params.write_text(plan)
    new = tmp_path / "new"
    parse = benchlib(project_copy, "parse", "--out", str(new))
    assert parse.returncode == 0 and "parse: 36 runs" in parse.stdout, parse.stderr
    processed = project_copy / "data/processed"
    old = {p.name: p.read_bytes() for p in processed.iterdir()}
    assert set(old) == {f"{t}.parquet" for t in tidy.TABLES} | {parse_index.INDEX}

    def pages(name: str) -> int:
        return -(-(new / name).stat().st_size // 4096)

    # parse writes each table's parts (none for the profile tables, empty here), joins each beside its
    # place, then renames them all: room for the parts and the joined runs table, not the joined metrics table
    leave = 0 if room == "none" else (2 * pages("runs.parquet") + pages("metrics.parquet")) * 4096
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(processed))
    try:
        (processed / "kept").mkdir()  # the old tables also linked from elsewhere (a DVC cache, a
        for name, data in old.items():  # snapshot): replacing one frees no space
            (processed / name).write_bytes(data)
            os.link(processed / name, processed / "kept" / name)
        _fill(processed, leave)
        failed = benchlib(project_copy, "parse")
        table = "runs.parquet" if room == "none" else "metrics.parquet"
        assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr
        assert failed.stderr == f"benchlib: error: {processed / table}: No space left on device\n", failed.stderr
        assert {p.name: p.read_bytes() for p in processed.iterdir() if p.name not in ("filler", "kept")} == old
        (processed / "filler").unlink()
        again = benchlib(project_copy, "parse")
        assert again.returncode == 0 and "parse: 36 runs" in again.stdout, again.stderr
        assert {p.name: p.read_bytes() for p in processed.iterdir() if p.name != "kept"} == {
            p.name: p.read_bytes() for p in new.iterdir()
        }
    finally:
        subprocess.run(["umount", "-l", str(processed)], capture_output=True, timeout=30)


PROFILE_TABLES = [name for name in tidy.TABLES if name not in ("runs", "metrics")]


def _reported_before(project: Path) -> Path:
    """``project`` with real tidy tables in data/processed and a previous report's metrics.json;
    returns the data/processed directory."""
    processed, reports = project / "data/processed", project / "reports"
    processed.mkdir(parents=True)
    reports.mkdir()
    for name in ("runs.parquet", "metrics.parquet"):
        shutil.copy2(TIDY / name, processed / name)
    for name in PROFILE_TABLES:  # as `benchlib parse` writes them for a campaign without profiles
        schema.write(schema.empty(name), name, processed / f"{name}.parquet")
    shutil.copy2(REPO / "reports/metrics.json", reports / "metrics.json")
    return processed


@pytest.mark.parametrize(
    "table, damage, says",
    [
        ("runs", "missing", "not found (the runs table; `benchlib parse` writes it)"),
        ("metrics", "empty", "empty (0 bytes), not the metrics table"),
        ("metrics", "truncated", "not a readable parquet file, truncated or overwritten? (parquet: File out of spec"),
        ("runs", "another table", "holds the metrics table, not the runs table"),
    ],
)
def test_analyse_names_a_missing_or_broken_table_in_one_line(project_copy, table, damage, says):
    path = _reported_before(project_copy) / f"{table}.parquet"
    if damage == "missing":
        path.unlink()
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        shutil.copy2(path.with_name("metrics.parquet"), path)
    out = benchlib(project_copy, "analyse", timeout=300)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith(f"benchlib: error: {path}: {says}"), out.stderr
    assert not (project_copy / "data/analysis").exists()  # nothing ran
    assert (project_copy / "reports/metrics.json").read_bytes() == (REPO / "reports/metrics.json").read_bytes()


def test_a_failed_analysis_under_dvc_keeps_the_previous_metrics_json(project_copy):
    """reports/metrics.json is not in DVC's cache: DVC could not restore it once deleted."""
    processed = _reported_before(project_copy)
    (processed / "metrics.parquet").write_bytes(b"")
    out = subprocess.run(
        ["dvc", "repro", "--single-item", "analyse"],
        cwd=project_copy,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0
    assert f"benchlib: error: {processed / 'metrics.parquet'}: empty (0 bytes)" in out.stdout + out.stderr
    assert (project_copy / "reports/metrics.json").read_bytes() == (REPO / "reports/metrics.json").read_bytes()


def _one_error(out: subprocess.CompletedProcess) -> str:
    """The one line a refused command printed (exit 2, nothing else on stderr, no traceback)."""
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
    return out.stderr.rstrip("\n")


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def test_analyse_refuses_tables_of_different_parses_campaigns_or_plans(project_copy, tmp_path):
    real_campaign(project_copy)
    params = project_copy / "params.yaml"
    plan = params.read_text()
    processed, other = project_copy / "data/processed", tmp_path / "other"
    params.write_text(plan.replace("repetitions: 3", "repetitions: 2"))
    assert benchlib(project_copy, "parse", "--skip-corrupt", "--out", str(other)).returncode == 0
    params.write_text(plan)
    assert benchlib(project_copy, "parse").returncode == 0
    new_metrics = (processed / "metrics.parquet").read_bytes()
    shutil.copy2(other / "metrics.parquet", processed / "metrics.parquet")  # the metrics of another parse
    line = _one_error(benchlib(project_copy, "analyse", timeout=300))
    assert line.startswith(
        f"benchlib: error: {processed / 'metrics.parquet'}: not written by the same `benchlib parse` as runs.parquet "
        "(campaign local-cilium-demo-001, parse "
    ) and line.endswith("; run `benchlib parse`"), line
    (processed / "metrics.parquet").write_bytes(new_metrics)
    params.write_text(plan.replace("repetitions: 3", "repetitions: 2"))  # tables of another plan than params.yaml's
    assert "parsed with another plan than the one of" in _one_error(benchlib(project_copy, "analyse", timeout=300))
    params.write_text(plan.replace("campaign: local-cilium-demo-001", "campaign: lab-other-001"))
    assert "parsed from campaign local-cilium-demo-001, but" in _one_error(benchlib(project_copy, "analyse"))
    assert not (project_copy / "data/analysis").exists()
    # tables without a parse identity (an older benchlib): their contents must still be of one campaign
    processed = project_copy / "data/processed"
    shutil.copy2(TIDY / "runs.parquet", processed / "runs.parquet")
    shutil.copy2(REPO / "tests/fixtures/tidy/lab-default-002/metrics.parquet", processed / "metrics.parquet")
    for name in PROFILE_TABLES:
        schema.write(schema.empty(name), name, processed / f"{name}.parquet")
    params.write_text(plan)
    line = _one_error(benchlib(project_copy, "analyse", timeout=300))
    assert re.match(
        rf"benchlib: error: {processed / 'metrics.parquet'}: metric rows of \d+ run\(s\) that {processed / 'runs.parquet'} "
        r"does not hold \(the first: \S+ of campaign lab-default-002\): the tables are of different parses",
        line,
    ), line


def test_summary_and_report_refuse_an_analysis_of_other_tables_or_a_mixed_one(project_copy, tmp_path):
    real_campaign(project_copy)
    assert benchlib(project_copy, "parse").returncode == 0
    analysed = benchlib(project_copy, "analyse", timeout=300)
    assert analysed.returncode == 0, analysed.stderr
    assert benchlib(project_copy, "summary").returncode == 0
    analysis, processed = project_copy / "data/analysis", project_copy / "data/processed"
    kept = tmp_path / "kept"
    shutil.copytree(analysis, kept)
    # a newer parse (another plan) beside the older analysis
    params = project_copy / "params.yaml"
    params.write_text(params.read_text().replace("repetitions: 3", "repetitions: 2"))
    assert benchlib(project_copy, "parse", "--skip-corrupt").returncode == 0
    for command in ("summary", "report"):
        line = _one_error(benchlib(project_copy, command, timeout=300))
        assert (
            line.startswith(
                f"benchlib: error: {processed / 'runs.parquet'}: not the table the analysis in {analysis} was made from "
                "(now: campaign local-cilium-demo-001, parse "
            )
            and "run `benchlib analyse` (or `dvc repro`)" in line
        ), line
    assert not (project_copy / "reports/notebooks").exists()
    # swapped analysis tables, and headline numbers of another analysis
    assert benchlib(project_copy, "analyse", timeout=300).returncode == 0
    summary, comparisons = analysis / "summary.parquet", analysis / "comparisons.parquet"
    a, b = summary.read_bytes(), comparisons.read_bytes()
    summary.write_bytes(b)
    comparisons.write_bytes(a)
    line = _one_error(benchlib(project_copy, "summary"))
    assert line.startswith(
        f"benchlib: error: {summary}: not the table the analysis of {analysis}/settings.json wrote (its sha256 differs"
    ), line
    summary.write_bytes(a)
    comparisons.write_bytes(b)
    metrics_json = project_copy / "reports/metrics.json"
    metrics_json.write_text(json.dumps({**json.loads(metrics_json.read_text()), "alpha": 0.5}))
    assert _one_error(benchlib(project_copy, "summary")).startswith(
        f"benchlib: error: {metrics_json}: not the headline numbers the analysis in {analysis} wrote"
    )


def test_analyse_says_plainly_that_the_baseline_has_no_successful_run(project_copy):
    processed = _reported_before(project_copy)
    runs = schema.read_runs(processed / "runs.parquet")
    baseline = "host"
    failed = runs.with_columns(
        outcome=pl.when(pl.col("scenario") == baseline).then(pl.lit("failed")).otherwise("outcome"),
        failure_reason=pl.when(pl.col("scenario") == baseline)
        .then(pl.lit("netperf exited 1"))
        .otherwise("failure_reason"),
    )
    schema.write(failed, "runs", processed / "runs.parquet")
    out = benchlib(project_copy, "analyse", timeout=300)
    assert out.returncode == 0, out.stderr
    n = int((runs["scenario"] == baseline).sum())
    assert f"the baseline host has no successful run ({n} failed), so nothing was compared with it" in out.stdout
    summary = benchlib(project_copy, "summary")
    assert "No finding: the baseline host has no successful run" in summary.stdout, summary.stdout
    assert "0 to " in summary.stdout.splitlines()[0]


@pytest.mark.parametrize("full", ["data/analysis", "reports"])
def test_a_full_disk_during_analyse_is_one_line_and_keeps_the_previous_set(project_copy, full):
    """The analysis tables and reports/metrics.json are one set: the disk filling up while either is
    written leaves the previous set whole (summary still reads it), and no temporary file."""
    require_root()
    _reported_before(project_copy)
    assert benchlib(project_copy, "analyse", timeout=300).returncode == 0
    analysis, reports = project_copy / "data/analysis", project_copy / "reports"
    before = {d: _files(d) for d in (analysis, reports)}
    params = project_copy / "params.yaml"
    params.write_text(params.read_text().replace("alpha: 0.05", "alpha: 0.01"))  # a new analysis differs
    target = project_copy / full
    _mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", str(target))
    try:
        for name, data in before[target].items():
            (target / name).write_bytes(data)
        _fill(target)
        line = _one_error(benchlib(project_copy, "-q", "analyse", timeout=300))
        assert re.match(rf"benchlib: error: {target}/[\w.]+: No space left on device$", line), line
        assert {d: _files(d) for d in (analysis, reports)} == {
            d: {**files, **({"filler": (target / "filler").read_bytes()} if d == target else {})}
            for d, files in before.items()
        }
        assert not [p for d in (analysis, reports) for p in d.iterdir() if ".tmp-" in p.name]
        assert benchlib(project_copy, "summary").returncode == 0
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True, timeout=30)


def test_the_next_parse_and_analyse_remove_what_a_killed_one_left_but_not_a_live_ones(project_copy):
    real_campaign(project_copy)
    processed, analysis = project_copy / "data/processed", project_copy / "data/analysis"
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = os.getpid()
    left = []
    for directory, names in (
        (processed, ["runs.parquet", "profiles.parquet"]),
        (analysis, ["summary.parquet", "settings.json"]),
    ):
        directory.mkdir(parents=True, exist_ok=True)
        for name in names:
            for pid in (dead.pid, live):
                (directory / f".{name}.tmp-{pid}").write_bytes(b"PAR1")
                left.append(directory / f".{name}.tmp-{pid}")
        (directory / f".{names[0]}.tmp-{dead.pid}-parts-x1").mkdir()  # a killed parse's parts
        (directory / f".{names[0]}.tmp-{dead.pid}-parts-x1" / "00000000.parquet").write_bytes(b"PAR1")
    # DVC would not cache them in data/analysis, an output directory
    check = subprocess.run(
        ["dvc", "check-ignore", *(str(p.relative_to(project_copy)) for p in left)],
        cwd=project_copy,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0 and len(check.stdout.split()) == len(left), check.stdout + check.stderr
    assert benchlib(project_copy, "parse").returncode == 0
    assert benchlib(project_copy, "analyse", timeout=300).returncode == 0
    remaining = sorted(p.name for d in (processed, analysis) for p in d.iterdir() if ".tmp-" in p.name)
    assert remaining == sorted(p.name for p in left if p.name.endswith(f"-{live}")), remaining


def test_a_report_without_an_analysis_is_one_line(project_copy):
    _reported_before(project_copy)
    out = benchlib(project_copy, "report", timeout=300)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith(f"benchlib: error: {project_copy}/data/analysis: no complete analysis"), out.stderr
    assert "run `benchlib analyse`" in out.stderr
    assert not (project_copy / "reports/notebooks").exists()  # nothing ran


def test_a_failing_report_names_the_cell_and_leaves_the_analysis_alone(project_copy):
    """The analysis is computed once, by `benchlib analyse`; the report then fails (the first notebook in
    report order, edited to raise): one line naming the notebook and its cell, and the executed notebook
    with the traceback in the failed report's staging directory; nothing of the report is published, and
    metrics.json is as analyse wrote it."""
    _reported_before(project_copy)
    (project_copy / "reports/metrics.json").write_text("{}")
    assert benchlib(project_copy, "analyse", timeout=600).returncode == 0
    analysed = (project_copy / "reports/metrics.json").read_bytes()
    assert json.loads(analysed)["comparisons"]
    notebook = project_copy / "notebooks/00_summary.py"
    notebook.write_text(notebook.read_text() + '\n# %%\nraise ValueError("edited by hand")\n')
    out = benchlib(project_copy, "report", timeout=900)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    failed = re.search(
        rf"^benchlib: error: {notebook}: cell \d+ raised ValueError: edited by hand "
        rf"\(the traceback is in ({project_copy}/reports/\.report\.tmp-\d+)/notebooks/00_summary\.ipynb\)$",
        out.stderr,
        re.MULTILINE,
    )
    assert failed, out.stderr
    staging = Path(failed.group(1))
    assert "edited by hand" in (staging / "notebooks/00_summary.ipynb").read_text()
    assert sorted(p.name for p in (project_copy / "reports").iterdir()) == sorted(["metrics.json", staging.name])
    assert (project_copy / "reports/metrics.json").read_bytes() == analysed


def test_an_over_long_campaign_id_is_one_line(project_copy):
    path = write_params(project_copy, "x", repetitions=1)
    path.write_text(path.read_text().replace("campaign: x", "campaign: " + "c" * 300))
    out = benchlib(project_copy, "collect", "--env", "local-lab")
    assert out.returncode == 2, out.stderr
    assert "experiment.campaign: 'cccc" in out.stderr and "(300 characters) is not a name: 1 to 100" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_permission_error_is_one_line(tmp_path):
    """EACCES, as a user without root's override would meet it (root reads any file)."""
    require_root()
    shared = Path(tempfile.mkdtemp(prefix="benchlib-test-perm-"))  # tmp_path is root's own (0700)
    try:
        shared.chmod(0o755)
        params = shared / "params.yaml"
        shutil.copy2(REPO / "params.yaml", params)
        params.chmod(0o600)
        out = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                str(REPO / ".venv/bin/benchlib"),
                "--params",
                str(params),
                "validate",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (out.returncode, out.stderr) == (2, f"benchlib: error: {params}: Permission denied\n")
    finally:
        shutil.rmtree(shared)


# -- 10. no leftovers after SIGKILL ----------------------------------------------------------------


def test_lab_clean_removes_what_a_sigkilled_collect_left(project_copy):
    """(The next start removing them: tests/test_runner.py::test_interrupted_campaign_tears_down_and_resumes.)"""
    require_root()
    write_params(project_copy, "left", repetitions=30)
    collect = subprocess.Popen(
        ["benchlib", "collect", "--env", "local-lab"], cwd=project_copy, env=venv_env(), stderr=subprocess.DEVNULL
    )
    wait_for(lambda: layout.find(project_copy / "data/raw/left"), what="the first record")
    collect.kill()
    collect.wait(timeout=10)
    left = leftovers(collect.pid)
    assert any(p.startswith("/tmp/bl-") for p in left) and any(not p.startswith("/") for p in left)
    clean = benchlib(project_copy, "lab", "clean", timeout=60)
    assert clean.returncode == 0, clean.stderr
    assert "temporary director" in clean.stdout and all(item in clean.stderr + clean.stdout for item in left)
    assert not leftovers(collect.pid)


def test_preset_never_overwrites_an_edited_params_yaml(project_copy):
    """--preset replaces params.yaml only when it is the committed file or a copy of a preset."""
    (project_copy / "scripts/setup.sh").write_text("exit 0\n")  # this checkout's installation, as above
    for name in (".venv", ".tools"):
        (project_copy / name).symlink_to(REPO / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "params.yaml"], cwd=project_copy, check=True)
    subprocess.run([*git, "commit", "-qm", "default"], cwd=project_copy, check=True)
    params = project_copy / "params.yaml"
    edited = params.read_text().replace("repetitions: ", "repetitions: 12 #", 1)
    params.write_text(edited)
    mesh, bigtcp = "pipelines/local-lab/params-mesh.yaml", "pipelines/local-lab/params-bigtcp.yaml"
    proc = subprocess.run(
        ["bash", "scripts/reproduce.sh", "--preset", mesh, "--dry"],
        cwd=project_copy,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and params.read_text() == edited
    assert proc.stderr.startswith("reproduce.sh: params.yaml has edits of its own"), proc.stderr
    # the committed file, then a preset's copy, are replaced (--dry: dvc only prints the collect stage)
    subprocess.run(["git", "checkout", "-q", "params.yaml"], cwd=project_copy, check=True)
    for preset in (mesh, bigtcp):
        proc = subprocess.run(
            ["bash", "scripts/reproduce.sh", "--preset", preset, "--dry", "collect@local-lab"],
            cwd=project_copy,
            env=venv_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert params.read_text() == (project_copy / preset).read_text()
