"""Runs that know they were disturbed: the CPU other processes took over a run's window, a real
CPU hog during a real lab run, and what the tables, the analysis and the summary make of it."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

import polars as pl
import pytest

from benchlib.analysis import estimators
from benchlib.host import cpu, disturbance
from benchlib.measure import runner
from benchlib.measure.plan import plan_environment, schedule
from benchlib.records import layout, record
from benchlib.report import summary
from benchlib.settings.campaign import Experiment
from benchlib.tables import tidy
from benchlib.targets import Placement
from benchlib.vocabulary.schema import SIDES
from tests.conftest import FIXTURES, REPO, RR, cpu_hog, lab_target, require_root, short_params, venv_env
from tests.support.analysis_tables import make_tables


def _process(name: str, parent: int, ticks: int, cpu: int = 0) -> disturbance.Process:
    return disturbance.Process(name, parent, ticks, cpu)


def test_a_process_reaped_in_the_window_counts_only_what_it_used_within_it():
    # make (pid 10) runs a shell (11) that runs cc (12): cc and the shell end within the window, and
    # make's cutime then holds their whole lives, 600 ticks of them from before the window
    start = disturbance.Snapshot(
        0.0, 100, {(10, 1): _process("make", 1, 50), (11, 2): _process("sh", 10, 100), (12, 3): _process("cc", 11, 500)}
    )
    end = disturbance.Snapshot(2.0, 100, {(10, 1): _process("make", 1, 50 + 600 + 150)})
    used = disturbance.usage(start, end, [0])
    assert used["cores"] == pytest.approx(150 / 100 / 2.0)  # what cc and the shell used in the window
    assert used["top"] == [{"name": "make", "pid": 10, "cores": 0.75, "reaped": ["cc", "sh"]}]
    assert disturbance.top_text(used) == "make (cc, sh) 0.75"


def test_foreign_cpu_is_put_on_the_cpu_each_process_last_ran_on():
    start = disturbance.Snapshot(0.0, 100, {(5, 9): _process("hog", 1, 0, cpu=1), (6, 9): _process("cron", 1, 0)})
    end = disturbance.Snapshot(
        1.0, 100, {(5, 9): _process("hog", 1, 90, cpu=1), (6, 9): _process("cron", 1, 4), (7, 9): _process("new", 1, 2)}
    )
    used = disturbance.usage(start, end, [0])
    assert used["cpus"] == {"0": 0.06, "1": 0.9}
    assert used["measured_cores"] == pytest.approx(0.06)  # the hog ran on a CPU the run did not use
    assert [(p["name"], p["reaped"]) for p in used["top"]] == [("cron", []), ("new", [])]
    assert disturbance.top_text(used) == "cron 0.04, new 0.02"


def test_a_scan_tells_the_harness_and_its_children_from_other_processes():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    # started through a shell that exits at once: reparented, no longer the harness's
    other = int(
        subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True).stdout
    )
    try:
        time.sleep(0.2)
        pids = {pid for pid, _ in disturbance.scan(set(), os.getpid()).foreign}
        assert os.getpid() not in pids and child.pid not in pids
        assert other in pids
        assert 2 not in pids  # kthreadd: the kernel's threads are the datapath's
    finally:
        child.kill()
        child.wait()
        os.kill(other, signal.SIGKILL)


def test_a_local_clusters_scan_counts_every_namespace_but_the_machines_and_the_daemons_as_its_own(tmp_path):
    """The local cluster's nodes and pods are network namespaces of this machine, its host daemons
    processes of the machine's own namespace: all the cluster's, what else runs there foreign."""
    require_root()
    ns = f"bl-dist-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    daemon = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)  # a daemon and its child
    inside = int(
        subprocess.run(
            ["ip", "netns", "exec", ns, "sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    other = int(
        subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True).stdout
    )
    try:
        time.sleep(0.2)
        host = os.stat("/proc/self/ns/net").st_ino
        children = [int(p) for p in pathlib.Path(f"/proc/{daemon.pid}/task/{daemon.pid}/children").read_text().split()]
        # no harness root (0 is no process): the daemon is the cluster's by own_roots alone
        snap = disturbance.scan(set(), 0, outside=host, own_roots=[daemon.pid])
        foreign = {pid for pid, _ in snap.foreign}
        assert inside in snap.own and inside not in foreign  # a pod's or a node's process
        assert daemon.pid in snap.own and children and set(children) <= snap.own  # a host daemon and its child
        assert other in foreign  # anything else in the machine's own namespace
        # without the cluster's arguments the same processes are foreign: the lab's scan is unchanged
        assert {inside, daemon.pid} <= {pid for pid, _ in disturbance.scan(set(), 0).foreign}
    finally:
        for pid in (inside, other):
            os.kill(pid, signal.SIGKILL)
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()
        subprocess.run(["ip", "netns", "del", ns], check=True)


def test_a_pods_tool_that_has_exited_but_is_not_yet_reaped_stays_the_clusters():
    """A zombie has no network namespace left to read: at a window's end a pod's netperf, just done and
    not yet reaped, is still the cluster's (it was counted foreign with its whole life's CPU)."""
    require_root()
    # in a namespace of its own, a parent that never reaps: its child, once exited, stays a zombie
    parent = subprocess.Popen(["unshare", "--net", "sh", "-c", "sleep 0.1 & exec sleep 30"])
    try:
        deadline = time.monotonic() + 5
        zombie = None
        while zombie is None and time.monotonic() < deadline:
            children = pathlib.Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
            states = {
                int(c): pathlib.Path(f"/proc/{c}/stat").read_text().rsplit(")", 1)[1].split()[0] for c in children
            }
            zombie = next((c for c, state in states.items() if state == "Z"), None)
            time.sleep(0.05)
        assert zombie is not None, "the child never became a zombie"
        assert disturbance._netns(str(zombie)) is None  # why the parent is asked
        host = os.stat("/proc/self/ns/net").st_ino
        snap = disturbance.scan(set(), 0, outside=host)  # no harness root: by namespace alone
        assert zombie in snap.own and zombie not in {pid for pid, _ in snap.foreign}
    finally:
        parent.kill()
        parent.wait()


def test_cpu_the_hypervisor_took_from_the_runs_cpus_disturbs_the_run():
    """The CPU window of a local-cluster TCP_CRR run (captured from its record) that measured a
    quarter of its configuration's other runs: no process took its CPUs, the hypervisor did (steal:
    72 and 44 of the two CPUs' ticks)."""
    window = json.loads((FIXTURES / "cpu" / "stolen-window.json").read_text())["sides"]
    first = {side: cpu.Snapshot.from_json(window[side]["start"]) for side in SIDES}
    last = {side: cpu.Snapshot.from_json(window[side]["end"]) for side in SIDES}
    shared = Placement("s", "198.18.0.2", "node1", "node2", [0], [1], {"nodes_share_kernel": True})
    steal = runner.steal_cores(first, last, shared)
    assert steal == pytest.approx(116 / 173)  # steal ticks over the ticks each CPU counted, on average
    apart = Placement("s", "198.18.0.2", "node1", "node2", [0], [1], {})  # each side on a node of its own
    # each side from the counters it read itself (the server's window closed 2 ticks apart)
    assert runner.steal_cores(first, last, apart) == pytest.approx(72 / 175 + 42 / 167)
    processes = {
        "window_s": 1.83,
        "cores": 0.01,
        "cpus": {"0": 0.01},
        "measured_cores": 0.01,
        "top": [{"name": "process_api", "pid": 1, "cores": 0.01, "reaped": []}],
    }
    foreign = disturbance.with_steal(processes, steal)
    assert foreign["measured_cores"] == 0.01 and foreign["steal_cores"] == pytest.approx(steal, abs=1e-6)
    assert [p["name"] for p in foreign["top"]] == [disturbance.STEAL, "process_api"]
    default = Experiment.model_fields["steal_max"].default
    why = runner.disturbed(foreign, 0.1, default)
    assert why is not None and "gave 0.67 core(s)" in why and "hypervisor (steal) 0.67" in why
    # the tenth of a core a busy VM can lose in any run is not a disturbance; the processes' threshold
    # is not spent on steal
    assert runner.disturbed(disturbance.with_steal(processes, 0.15), 0.1, default) is None
    assert runner.disturbed(disturbance.with_steal(processes, 0.0), 0.1, default) is None
    # a target that cannot tell processes apart (EKS, SSH hosts) still judges the steal
    alone = disturbance.steal_only(steal)
    assert alone["measured_cores"] is None and [p["name"] for p in alone["top"]] == [disturbance.STEAL]
    why = runner.disturbed(alone, 0.1, default)
    assert why is not None and "gave 0.67 core(s)" in why
    assert runner.disturbed(disturbance.steal_only(0.15), 0.1, default) is None


def test_a_bad_threshold_exits_2_naming_the_key(tmp_path):
    from tests.support.params import write

    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    for key in ("foreign_cpu_max", "steal_max"):
        write(tmp_path, lambda d, key=key: d["experiment"].update({key: -0.5}))
        done = subprocess.run(["benchlib", "validate"], cwd=tmp_path, env=venv_env(), capture_output=True, text=True)
        assert done.returncode == 2, done.stderr
        assert f"experiment.{key}" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_disturbed_runs_are_left_out_and_counted_as_failed_runs_are():
    samples = {("host", "rr"): {("throughput", "none"): [9.0, 9.5, 10.0, 10.2, 10.4, 11.0]}}
    runs, metrics = make_tables(samples, failed={("host", "rr"): 2})
    runs = runs.with_columns(
        outcome=pl.when(pl.col("run_id") == "host-rr-7").then(pl.lit("disturbed")).otherwise("outcome")
    )
    counted = estimators.failed_runs(runs).row(0, named=True)
    assert (counted["failed_runs"], counted["disturbed_runs"]) == (2, 1)
    text = summary.campaign_text(runs, pl.DataFrame(), "host")
    assert "6 successful run(s) per configuration, 1 failed and 1 disturbed (left out) of 8" in text
    (row,) = estimators.summarize(metrics, runs).iter_rows(named=True)
    (as_failed,) = estimators.summarize(
        metrics, runs.with_columns(pl.col("outcome").replace("disturbed", "failed"))
    ).iter_rows(named=True)
    assert row["flags"].endswith("1 failed run(s); 1 disturbed run(s) left out")
    assert (row["n"], row["median"], row["ci_low"]) == (as_failed["n"], as_failed["median"], as_failed["ci_low"])
    assert runs["foreign_cpu"].is_null().all()  # a table from before the column: null, not 0


# -- the real lab ---------------------------------------------------------------------------


def _collect(
    lab_env, raw, campaign: str, retries: int, quiet_wait_s: float, log=lambda m: None
) -> tuple[dict, record.RunRecord, dict]:
    params = short_params(campaign, ["host"], {"rr": RR}, repetitions=1, retries=retries, tolerant=False)
    params = params.model_copy(
        update={"experiment": params.experiment.model_copy(update={"quiet_wait_s": quiet_wait_s})}
    )
    plan = plan_environment(params, "local-lab")
    target = lab_target(lab_env, plan.scenarios)
    counts = runner.run_environment(params, plan, target, raw_root=raw, log=log)
    path = layout.find(layout.campaign_dir(campaign, raw))[0]
    return counts, record.load(path), tidy.load_record(path)[0]


def test_a_run_with_a_cpu_hog_beside_it_is_disturbed_retried_and_names_the_hog(lab_env, tmp_path, caplog):
    require_root()
    cpus = lab_target(lab_env, ["host"]).client_cpus  # measured whatever the test's CPU placement
    hog = cpu_hog(cpus)
    try:
        with caplog.at_level(logging.INFO, logger="benchlib.progress"):
            counts, rec, row = _collect(lab_env, tmp_path, "hog", retries=1, quiet_wait_s=0)  # measured again at once
    finally:
        os.kill(hog, signal.SIGKILL)
    assert counts["disturbed"] == 1, counts
    assert [a.outcome for a in rec.attempts] == ["disturbed", "disturbed"]  # measured again, kept with its flag
    assert all("sha256sum" in a.reason for a in rec.attempts)
    names = [p["name"] for p in rec.foreign_cpu["top"]]
    assert "sha256sum" in names and hog in [p["pid"] for p in rec.foreign_cpu["top"]], rec.foreign_cpu
    assert rec.foreign_cpu["measured_cores"] > Experiment.model_fields["foreign_cpu_max"].default
    assert row["outcome"] == "disturbed" and "sha256sum" in row["foreign_top"] and row["foreign_cpu"] > 0.3
    assert tidy.load_record(layout.find(layout.campaign_dir("hog", tmp_path))[0])[1] == []  # no metric rows
    line = next(r.getMessage() for r in caplog.records if r.name == "benchlib.progress")
    assert " disturbed " in line and "sha256sum" in line, line
    meta = json.loads((layout.campaign_dir("hog", tmp_path) / rec.run_id / "meta.json").read_text())
    assert meta["outcome"] == "disturbed" and meta["foreign_cpu"] == rec.foreign_cpu


def test_a_disturbed_run_waits_for_its_cpus_to_be_quiet_then_is_measured_again(lab_env, tmp_path):
    """A campaign on a busy machine waits, it does not drop the run: the hog beside the first attempt
    is named while collect waits, and once it is gone the retry measures."""
    require_root()
    cpus = lab_target(lab_env, ["host"]).client_cpus
    busy: list[str] = []
    runner.wait_for_quiet(
        _ThisMachine(), "s", Placement("s", "198.18.0.2", "n1", "n2", cpus, cpus, {}), 0.1, 0.3, 5, busy.append
    )
    if any(" not quiet after " in line for line in busy):  # the retry it asserts would never see them quiet
        pytest.skip(f"needs the run's CPUs quiet once its own hog is gone, and others keep them busy: {busy[-1]}")
    hog = cpu_hog(cpus)
    lines: list[str] = []
    ended = threading.Timer(2.0, os.kill, (hog, signal.SIGKILL))  # the hog's work ends a few s into the wait

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("collect: waiting for CPU") and ended.ident is None:  # the first such line
            ended.start()

    try:
        counts, rec, _ = _collect(lab_env, tmp_path, "wait", retries=1, quiet_wait_s=30, log=log)
    finally:
        ended.cancel()
        with contextlib.suppress(ProcessLookupError):  # gone already, as it should be
            os.kill(hog, signal.SIGKILL)
    waiting = [line for line in lines if line.startswith(("collect: waiting for CPU", "collect: CPU"))]
    assert [a.outcome for a in rec.attempts] == ["disturbed", "ok"], (rec.attempts[-1].reason, waiting)
    assert "sha256sum" in rec.attempts[0].reason and counts["ok"] == 1 and counts["disturbed"] == 0
    assert "sha256sum" in waiting[0] and "of at most 30 s)" in waiting[0], waiting
    assert " quiet after " in waiting[-1], waiting
    assert counts["quiet_waits"] == 1 and 2 < counts["quiet_wait_s"] < 30, counts


class _ThisMachine:
    """What the wait asks a target, answered as the lab answers it, without its namespaces: every process
    of the machine but this test's and its children's is foreign."""

    def foreign_snapshot(self, scenario: str) -> disturbance.Snapshot:
        return disturbance.scan(set(), os.getpid())

    def cpu_snapshot(self, scenario: str, side: str) -> cpu.Snapshot:
        return cpu.read_local()


class _Blind(_ThisMachine):
    """A target that cannot tell other processes apart (a remote cluster's, SSH hosts)."""

    def foreign_snapshot(self, scenario: str) -> None:
        return None


def test_the_wait_for_quiet_cpus_gives_up_at_its_bound_and_says_who_kept_them_busy():
    placement = Placement("s", "198.18.0.2", "n1", "n2", [0], [0], {})
    lines: list[str] = []
    hog = cpu_hog([0])
    try:
        started = time.monotonic()
        waited = runner.wait_for_quiet(_ThisMachine(), "s", placement, 0.1, 0.3, 2, lines.append)
        took = time.monotonic() - started
    finally:
        os.kill(hog, signal.SIGKILL)
    assert waited is not None and 2 <= waited <= took < 2 + 2 * runner.QUIET_PROBE_S, (waited, took)
    assert len(lines) == 2, lines  # a line every few seconds, not one per probe
    assert lines[0].startswith("collect: waiting for CPU 0 to go quiet: ") and "sha256sum" in lines[0], lines
    assert lines[0].endswith("(1 s of at most 2 s)"), lines
    assert lines[1].startswith("collect: CPU 0 not quiet after 2 s (") and "sha256sum" in lines[1], lines
    # no wait asked, or a target that cannot see other processes: measured again at once, unprobed
    started = time.monotonic()
    assert runner.wait_for_quiet(_ThisMachine(), "s", placement, 0.1, 0.3, 0, lines.append) is None
    assert runner.wait_for_quiet(_Blind(), "s", placement, 0.1, 0.3, 60, lines.append) is None
    assert time.monotonic() - started < 0.5 and len(lines) == 2


def test_a_quiet_run_is_not_disturbed_and_never_counts_its_own_processes(lab_env):
    require_root()
    params = short_params("quiet", ["host"], {"rr": RR}, repetitions=1, retries=0)
    (run,) = schedule(plan_environment(params, "local-lab"), 1, 7)
    with runner.serving(lab_target(lab_env, ["host"])) as target:
        measured = runner.measure(target, run, params.experiment.cpu_trim_s, None, params.experiment.foreign_cpu_max)
        resident = target.spawn("host", "client", ["sleep", "5"])  # a process of the lab's, as a client is
        try:
            time.sleep(0.2)
            snapshot = target.foreign_snapshot("host")
            ours = {
                int(pid)
                for side in SIDES
                for pid in subprocess.run(
                    ["ip", "netns", "pids", target.namespace("host", side)], capture_output=True, text=True, check=True
                ).stdout.split()
            }
        finally:
            resident.kill()
    assert len(ours) >= 2 and ours <= snapshot.own  # netserver and the sleep, whatever their names
    assert not ours & {pid for pid, _ in snapshot.foreign} and os.getpid() in snapshot.own
    # measured with TOLERANT thresholds: a machine where someone else is working (a hog beside the suite)
    # leaves the run ok and names them, never the lab's own processes
    assert measured.outcome == "ok" and measured.foreign is not None, measured.reason
    assert not ours & {p["pid"] for p in measured.foreign["top"]}, measured.foreign
