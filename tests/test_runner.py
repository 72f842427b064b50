"""The campaign: blocks, raw records, resume, failures."""

import glob
import itertools
import json
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from benchlib.base.errors import TargetError
from benchlib.measure import runner
from benchlib.measure.plan import plan_environment, schedule
from benchlib.records import integrity, layout
from benchlib.tables import tidy
from benchlib.targets.lab import LabTarget, list_namespaces
from tests.conftest import SHORT_TESTS, TOLERANT_YAML, lab_target, short_params, venv_env, write_params
from tests.support.campaigns import outcomes


def test_every_block_runs_every_configuration_once_in_seeded_order(lab_env):
    params = short_params("s", ["host", "bridge", "vxlan"], SHORT_TESTS, repetitions=4)
    plan = plan_environment(params, "local-lab")
    runs = schedule(plan, 4, seed=1)
    assert [r.order for r in runs] == list(range(24))
    configs = {(s, t) for s in plan.scenarios for t in plan.tests}
    orders = []
    for block in range(4):
        in_block = [(r.scenario, r.test) for r in runs if r.block == block]
        assert sorted(in_block) == sorted(configs)
        orders.append(in_block)
    assert len({tuple(o) for o in orders}) > 1  # shuffled, not the same order every block
    assert schedule(plan, 4, seed=1) == runs
    assert [r.scenario for r in schedule(plan, 4, seed=2)] != [r.scenario for r in runs]


def test_records_are_complete_and_verifiable(short_campaign):
    cdir = short_campaign["dir"]
    assert outcomes(short_campaign["counts"]) == {
        "planned": 8,
        "already_done": 0,
        "ok": 8,
        "failed": 0,
        "disturbed": 0,
        "unwatched": 0,
    }
    records = layout.find(cdir)
    assert len(records) == 8
    for rec in records:
        integrity.verify(rec)
        meta = json.loads((rec / "meta.json").read_text())
        assert meta["outcome"] == "ok" and meta["exit_codes"] == [0] * len(meta["commands"])
        assert meta["target"]["versions"]["netperf"] == "2.7.0"
        assert meta["placement"]["client_node"].endswith("-n1")
        assert meta["started_at"] < meta["ended_at"]
        for i, argv in enumerate(meta["commands"]):
            assert argv[0] == "netperf"
            assert (rec / f"stdout-{i}.txt").read_text().startswith("THROUGHPUT=")
        cpu = json.loads((rec / "cpu.json").read_text())
        assert set(cpu["sides"]) == {"client", "server"}
    assert not list(cdir.rglob(".*tmp*"))


def test_rerun_measures_nothing_new(short_campaign, lab_env):
    before = {p: p.stat().st_mtime_ns for p in short_campaign["dir"].rglob("*")}
    target = lab_target(lab_env, short_campaign["plan"].scenarios)
    counts = runner.run_environment(
        short_campaign["params"], short_campaign["plan"], target, raw_root=short_campaign["raw"], log=lambda m: None
    )
    assert counts == {
        "planned": 8,
        "already_done": 8,
        "ok": 0,
        "failed": 0,
        "disturbed": 0,
        "unwatched": 0,
        "quiet_waits": 0,
        "quiet_wait_s": 0.0,
    }
    assert {p: p.stat().st_mtime_ns for p in short_campaign["dir"].rglob("*")} == before


class WrongAddress(LabTarget):
    """The real lab, but the client is sent to an address where no netserver listens."""

    def placement(self, scenario):
        return replace(super().placement(scenario), server_address="198.18.0.99")


def test_a_failing_tool_is_recorded_as_failed_with_its_output(tmp_path, lab_env):
    params = short_params("fail", ["host"], {"rr": SHORT_TESTS["rr"]}, repetitions=1, retries=1)
    plan = plan_environment(params, "local-lab")
    counts = runner.run_environment(
        params, plan, WrongAddress(lab_env, ["host"], log=lambda m: None), raw_root=tmp_path, log=lambda m: None
    )
    assert counts["failed"] == 1
    rec = layout.find(tmp_path / "fail")[0]
    meta = json.loads((rec / "meta.json").read_text())
    assert meta["outcome"] == "failed"
    assert "exited 255" in meta["failure_reason"] and "198.18.0.99" in meta["failure_reason"]
    assert [a["outcome"] for a in meta["attempts"]] == ["failed", "failed"]  # one retry
    assert "establish control" in (rec / "stdout-0.txt").read_text() + (rec / "stderr-0.txt").read_text()
    assert (rec / "failed-attempt-1" / "stderr-0.txt").exists()
    runs, metrics = tidy.build_tables(tmp_path / "fail")
    assert runs["outcome"].to_list() == ["failed"] and metrics.is_empty()


def test_a_hanging_tool_is_killed_at_the_timeout(tmp_path, lab_env):
    slow = {**SHORT_TESTS["rr"], "duration_s": 3, "timeout_s": 1}
    params = short_params("hang", ["host"], {"rr": slow}, repetitions=1, retries=0)
    plan = plan_environment(params, "local-lab")
    runner.run_environment(params, plan, lab_target(lab_env, ["host"]), raw_root=tmp_path, log=lambda m: None)
    meta = json.loads((layout.find(tmp_path / "hang")[0] / "meta.json").read_text())
    assert meta["outcome"] == "failed" and meta["failure_reason"].startswith("timeout")
    assert meta["exit_codes"] == [None]


# retried once, as a user's campaign is: the hypervisor's steal makes a run disturbed now and then; other
# processes' CPU (TOLERANT) does not, so a busy machine cannot hold the runs the test interrupts in quiet waits
INTERRUPT_PARAMS = """
experiment: {campaign: intr, environments: [local-lab], repetitions: 3, seed: 3, cpu_trim_s: 0.2, retries: 1,
  TOLERANT}
tests:
  stream: {tool: netperf, kind: TCP_STREAM, duration_s: 1}
  rr: {tool: netperf, kind: TCP_RR, duration_s: 1}
environments:
  local-lab: {scenarios: [host, vxlan]}
""".replace("TOLERANT", TOLERANT_YAML)
INTERRUPT_COLLECT = ["benchlib", "collect", "--env", "local-lab"]


def _interrupt_dir(project: Path) -> Path:
    return project / "data" / "raw" / "intr"


def _interrupt(project: Path, sig: int, after_runs: int) -> tuple[subprocess.Popen, str]:
    """`benchlib collect` of INTERRUPT_PARAMS, sent ``sig`` once it has recorded ``after_runs`` runs."""
    (project / "params.yaml").write_text(INTERRUPT_PARAMS)
    cdir = _interrupt_dir(project)
    proc = subprocess.Popen(INTERRUPT_COLLECT, cwd=project, env=venv_env(), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(layout.find(cdir)) < after_runs and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    return proc, err


def _namespaces_of(pid: int) -> list[str]:
    return [ns for ns in list_namespaces() if ns.startswith(f"bl-{pid}_")]


# SIGINT stands for the signals collect handles (SIGTERM and SIGHUP take the same path, checked below);
# SIGKILL for the ones no process can
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupted_campaign_tears_down_and_resumes(project_copy, sig):
    cdir = _interrupt_dir(project_copy)
    proc, err = _interrupt(project_copy, sig, after_runs=3)
    if sig == signal.SIGKILL:
        assert proc.returncode == -9
        assert _namespaces_of(proc.pid), (
            "a SIGKILLed campaign cannot clean up: its namespaces are left for the next start"
        )
        assert glob.glob(f"/tmp/bl-{proc.pid}_*"), "and so is its temporary directory"
    else:
        assert proc.returncode == 130, err
        assert "interrupted" in err
        assert not _namespaces_of(proc.pid)
    done = {r.relative_to(cdir) for r in layout.find(cdir)}
    assert 3 <= len(done) < 12
    resumed = subprocess.run(
        INTERRUPT_COLLECT, cwd=project_copy, env=venv_env(), capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(done)} of 12 runs already recorded" in resumed.stderr
    if sig == signal.SIGKILL:
        assert "left by a killed campaign" in resumed.stderr
    assert not _namespaces_of(proc.pid) and not glob.glob(f"/tmp/bl-{proc.pid}_*")
    # the same keys and counts as an uninterrupted campaign: every scheduled run exactly once
    runs, _ = tidy.build_tables(cdir)
    assert sorted(runs["run_id"]) == sorted(
        f"local-lab/{s}/{t}/r{b:03d}" for s in ("host", "vxlan") for t in ("stream", "rr") for b in range(3)
    )
    assert set(runs["outcome"]) == {"ok"}
    assert not list(cdir.rglob(".*tmp*"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_a_campaign_as_sigint_does(project_copy, sig):
    """A logout or `kill` stops collect as Ctrl-C does: exit 130, its namespaces and scratch removed, the
    runs it finished recorded (resuming them is the SIGINT case's)."""
    proc, err = _interrupt(project_copy, sig, after_runs=1)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not _namespaces_of(proc.pid) and not glob.glob(f"/tmp/bl-{proc.pid}_*")
    cdir = _interrupt_dir(project_copy)
    assert 1 <= len(layout.find(cdir)) < 12
    assert not list(cdir.rglob(".*tmp*"))


def test_validate_says_in_one_line_that_a_complete_campaign_measures_nothing(project_copy):
    """The main command validates before it runs dvc: the second time, the plan and its power would
    read as if a measurement followed."""
    write_params(project_copy, "done", repetitions=1)

    def benchlib(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["benchlib", *args], cwd=project_copy, env=venv_env(), capture_output=True, text=True)

    first = benchlib("validate")
    assert first.returncode == 0, first.stderr
    assert "0 already recorded" in first.stdout and "complete" not in first.stdout
    collected = benchlib("collect", "--env", "local-lab")
    assert collected.returncode == 0, collected.stderr
    second = benchlib("validate")
    assert second.returncode == 0, second.stderr
    (line,) = second.stdout.strip().splitlines()
    assert line.endswith(
        "params.yaml is valid; campaign done is complete (1 of 1 runs recorded in data/raw/done): nothing is "
        "measured; to measure again, give experiment.campaign a new name"
    )


class Recording(LabTarget):
    """The real lab, noting which Target methods the runner calls, in order."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.calls = []

    def describe(self):
        self.calls.append(("describe",))
        return super().describe()

    def activate(self, scenario):
        self.calls.append(("activate", scenario))
        return super().activate(scenario)

    def start_server(self, scenario, server, cpus):
        self.calls.append(("start_server", scenario, server.name))
        return super().start_server(scenario, server, cpus)

    def run(self, scenario, side, argv, timeout):
        self.calls.append(("run", scenario, side, argv[0]))
        return super().run(scenario, side, argv, timeout)

    def spawn(self, scenario, side, argv):
        self.calls.append(("spawn", scenario, side))
        return super().spawn(scenario, side, argv)


def test_the_runner_calls_the_target_in_the_declared_order(tmp_path, lab_env):
    params = short_params("order", ["host", "bridge"], {"rr": SHORT_TESTS["rr"]}, repetitions=2, retries=0)
    plan = plan_environment(params, "local-lab")
    target = Recording(lab_env, plan.scenarios, log=lambda m: None)
    counts = runner.run_environment(params, plan, target, raw_root=tmp_path, log=lambda m: None)
    assert counts["ok"] == 4
    calls = target.calls
    assert calls[0] == ("describe",)
    first = schedule(plan, 2, params.experiment.seed)[0].scenario
    # each scenario once: activated, then its server started, before its first run
    for scenario in ("host", "bridge"):
        assert calls.count(("activate", scenario)) == 1
        a = calls.index(("activate", scenario))
        assert calls[a + 1] == ("start_server", scenario, "netserver")
        assert calls.index(("spawn", scenario, "client")) > a + 1
    # the version probe runs once, on the client side of the first scenario, after its server
    assert [c for c in calls if c[0] == "run"] == [("run", first, "client", "netperf")]
    assert calls.index(("run", first, "client", "netperf")) == calls.index(("start_server", first, "netserver")) + 1
    meta = json.loads((layout.find(tmp_path / "order")[0] / "meta.json").read_text())
    assert meta["target"]["versions"]["netperf"] == "2.7.0" and meta["target"]["versions"]["kernel"]


class Switching(Recording):
    """The real lab taken as a target that switches scenarios (as a cluster switches pod networks):
    host and bridge share one switch, vxlan has its own. Its servers run once for the campaign, so a
    later visit's start_server is only noted."""

    interleaves_scenarios = False

    def switch_of(self, scenario):
        return "vxlan" if scenario == "vxlan" else "one"

    def start_server(self, scenario, server, cpus):
        if ("start_server", scenario, server.name) in self.calls:
            self.calls.append(("start_server", scenario, server.name))
            return None
        return super().start_server(scenario, server, cpus)


class FailsItsSecondVisit(Switching):
    """The switching lab whose server does not start on vxlan's second visit."""

    def start_server(self, scenario, server, cpus):
        if scenario == "vxlan" and [c[1] for c in self.calls if c[0] == "activate"].count("vxlan") == 2:
            raise TargetError(f"lab: {server.name} in vxlan did not listen on port {server.port} within 10 s")
        return super().start_server(scenario, server, cpus)


def test_a_scenario_that_cannot_start_mid_campaign_says_what_is_kept_and_how_to_resume(tmp_path, lab_env):
    params = short_params("halt", ["host", "vxlan"], {"rr": SHORT_TESTS["rr"]}, repetitions=2, retries=0)
    params = params.model_copy(update={"experiment": params.experiment.model_copy(update={"foreign_cpu_max": 2.0})})
    plan = plan_environment(params, "local-lab")
    target = FailsItsSecondVisit(lab_env, plan.scenarios, log=lambda m: None)
    with pytest.raises(TargetError) as failed:
        runner.run_environment(params, plan, target, raw_root=tmp_path, log=lambda m: None)
    kept = len(layout.find(tmp_path / "halt"))
    assert 1 <= kept < 4
    assert str(failed.value).startswith("lab: netserver in vxlan did not listen"), failed.value
    assert str(failed.value).endswith(
        f"collect: round 2, scenario vxlan could not start; {kept} of 4 runs are recorded and kept: "
        "run the same command to resume"
    ), failed.value


def test_a_switching_target_is_activated_once_per_visit_of_each_round(tmp_path, lab_env):
    params = short_params("rounds", ["host", "bridge", "vxlan"], {"rr": SHORT_TESTS["rr"]}, repetitions=2, retries=0)
    params = params.model_copy(update={"experiment": params.experiment.model_copy(update={"foreign_cpu_max": 2.0})})
    plan = plan_environment(params, "local-lab")
    target = Switching(lab_env, plan.scenarios, log=lambda m: None)
    lines = []
    counts = runner.run_environment(params, plan, target, raw_root=tmp_path, log=lines.append)
    assert counts["ok"] == 6
    expected = runner.schedule_on(target, plan, 2, params.experiment.seed, 0)
    activations = [c[1] for c in target.calls if c[0] == "activate"]
    changes = [scenario for scenario, _ in itertools.groupby(r.scenario for r in expected)]
    assert activations == changes and len(changes) >= 5  # at each change of scenario, rounds included
    for i, c in enumerate(target.calls):
        if c[0] == "activate":
            assert target.calls[i + 1] == ("start_server", c[1], "netserver")
    for block in (0, 1):  # host and bridge side by side in each round, vxlan before or after them
        visit = [r.scenario for r in expected if r.block == block]
        assert visit.index("vxlan") in (0, 2)
    assert sum("ready after" in line for line in lines) == len(changes)
    assert any(line.startswith(f"collect: {len(changes)} scenario switches in 2 round(s) took") for line in lines)
