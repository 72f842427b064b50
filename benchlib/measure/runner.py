"""The campaign: the run matrix in blocks, raw records, resume.

Every configuration (scenario x test) runs once per block, in an order drawn
from the campaign seed, so slow drift in the machine spreads over all
configurations instead of biasing one. Each run's raw record (benchlib.records.record)
appears only when complete, so resuming skips the runs that have one.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .. import collectors
from ..base.errors import DatapathError, ParseError, RecordError, TargetError
from ..collectors import TestSpec
from ..host import cpu, disturbance
from ..profiling import perf_record
from ..records import integrity, layout, record
from ..settings.analysis import percent_text
from ..settings.campaign import Params
from ..targets import KILL_WAIT_S, Placement, Result, Target, shown
from ..vocabulary.schema import METRICS, PRIMARY_METRICS, SIDES
from .plan import Plan, RunSpec, check_same_plan, expected_runs, schedule

_log = logging.getLogger(__name__)  # the default for log=: where benchlib.base.logs sends messages

VERSION_TIMEOUT_S = 10  # a tool's version probe: it answers at once, or the tool is broken
# After a test's duration, the longest to let the client finish before firing the server's report timer
# (Target.end_server_wait, which fires it as soon as it sees the client done). A client still mid-test
# then fails loudly (connection refused), never quietly.
SERVER_WAIT_MARGIN_S = 0.5


@dataclass(frozen=True)
class Measurement:
    """One attempt at a run, as measured: the client processes' results and the CPU window around them."""

    placement: Placement
    results: tuple[Result, ...]  # one per client process
    started: float  # time.time()
    ended: float
    cpu: dict[str, tuple[cpu.Snapshot, cpu.Snapshot]]  # by side: start and end of the window
    outcome: str
    reason: str | None
    # the target's own datapath processes (proxies) by name: at the start and end of the window
    processes: dict[str, tuple[dict, dict]] | None = None
    profile: perf_record.Profile | None = None  # a profiled run's, when perf succeeded
    foreign: dict | None = None  # CPU of other processes over the window (disturbance.usage); None: not measured
    quiet: dict | None = None  # the quiet window: what was frozen, kept, could not be; None: none asked


def expected_run_s(target: Target, spec: TestSpec) -> float:
    """How long a run of ``spec`` takes on ``target`` (for estimates): the tool's time, less the
    server's wait where the target ends it after SERVER_WAIT_MARGIN_S."""
    collector = collectors.get(spec.tool)
    wait = collector.server_wait_s(spec)
    saved = wait - SERVER_WAIT_MARGIN_S if wait and target.ends_server_wait else 0.0
    return collector.expected_wall_s(spec) - saved


def _wait_all(procs: list, argvs: list[list[str]], deadline: float) -> tuple[Result, ...]:
    results = []
    for p, argv in zip(procs, argvs, strict=True):
        try:
            out, err = p.communicate(timeout=max(0.0, deadline - time.monotonic()))
            results.append(Result(argv, p.returncode, out, err))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate(timeout=KILL_WAIT_S)
            results.append(Result(argv, None, out, err))
    return tuple(results)


def _judge(spec: TestSpec, results: tuple[Result, ...]) -> tuple[str, str | None]:
    """(outcome, reason) of an attempt from its processes' exit and output."""
    timed_out = [i for i, r in enumerate(results) if r.returncode is None]
    failed = [(i, r) for i, r in enumerate(results) if r.returncode not in (0, None)]
    if timed_out:
        return "failed", f"timeout: stream(s) {timed_out} still running after {spec.run_timeout_s:g} s"
    if failed:
        i, r = failed[0]
        # netperf reports its errors on stdout, other tools on stderr
        last_line = (shown(r.stderr.strip() or r.stdout.strip()).splitlines() or ["(no output)"])[-1]
        return "failed", f"{spec.tool} stream {i} exited {r.returncode}: {last_line}"
    try:
        collectors.get(spec.tool).parse(spec.kind, [r.stdout for r in results])
    except ParseError as exc:
        return "failed", f"unparseable output: {exc}"
    return "ok", None


def idle_proxies(first: dict[str, dict], last: dict[str, dict]) -> list[str]:
    """The datapath processes (mesh proxies) whose own byte counters did not move between two readings:
    a run whose traffic bypassed one of its proxies measured another path than its scenario's."""
    return sorted(
        name
        for name, start in first.items()
        if "bytes" in start and last.get(name, {}).get("bytes", start["bytes"]) <= start["bytes"]
    )


def disturbed(foreign: dict | None, max_cores: float | None, steal_max: float | None = None) -> str | None:
    """Why a run is disturbed whose CPUs gave more than ``max_cores`` to other processes, or more than
    ``steal_max`` to the hypervisor's other guests (steal); None if neither."""
    if foreign is None:
        return None
    # None where the target cannot tell other processes apart: only the steal is judged
    if max_cores is not None and foreign["measured_cores"] is not None and foreign["measured_cores"] > max_cores:
        return (
            f"disturbed: {foreign['measured_cores']:.2f} core(s) of the run's CPUs went to other processes "
            f"(above {max_cores:g}): {disturbance.top_text(foreign)}"
        )
    steal = foreign.get("steal_cores", 0.0)
    if steal_max is not None and steal > steal_max:
        return (
            f"disturbed: the hypervisor gave {steal:.2f} core(s) of the run's CPUs to other guests "
            f"(steal, above {steal_max:g}): {disturbance.top_text(foreign)}"
        )
    return None


def steal_cores(first: dict[str, cpu.Snapshot], last: dict[str, cpu.Snapshot], placement: Placement) -> float:
    """What the hypervisor took from the run's CPUs over the window (cpu.steal_cores), in cores: each
    CPU once where both sides run on one kernel, else each side's on its own node."""
    if placement.details.get("nodes_share_kernel"):
        cpus = sorted({*placement.client_cpus, *placement.server_cpus})
        return cpu.steal_cores(first["client"], last["client"], cpus)
    return cpu.steal_cores(first["client"], last["client"], placement.client_cpus) + cpu.steal_cores(
        first["server"], last["server"], placement.server_cpus
    )


QUIET_PROBE_S = 1.0  # a probe's window: long enough for a busy process to show in CLK_TCK ticks
QUIET_REPORT_S = 5.0  # the waiting line at most this often


def wait_for_quiet(
    target: Target,
    scenario: str,
    placement: Placement,
    foreign_max: float | None,
    steal_max: float | None,
    wait_s: float,
    log=_log.info,
) -> float | None:
    """Wait, at most ``wait_s`` seconds, until the placement's CPUs are quiet: a probe of QUIET_PROBE_S
    taken as a run's CPU window is (the target's foreign_snapshot and cpu_snapshot around it) that
    `disturbed` does not judge disturbed. Returns the seconds waited; None where it did not probe
    (``wait_s`` 0, or a target that cannot see other processes: a steal-only wait would guess)."""
    if wait_s <= 0:
        return None
    cpus = sorted({*placement.client_cpus, *placement.server_cpus})
    where = f"{'CPUs' if len(cpus) > 1 else 'CPU'} {', '.join(map(str, cpus))}"
    started, reported = time.monotonic(), None
    while True:
        opened = target.foreign_snapshot(scenario)
        if opened is None:
            return None
        first = {side: target.cpu_snapshot(scenario, side) for side in SIDES}
        time.sleep(QUIET_PROBE_S)
        last = {side: target.cpu_snapshot(scenario, side) for side in SIDES}
        closed = target.foreign_snapshot(scenario)
        assert closed is not None  # a target sees other processes at every scan or at none
        processes = disturbance.usage(opened, closed, cpus)
        foreign = disturbance.with_steal(processes, steal_cores(first, last, placement))
        waited = time.monotonic() - started
        if disturbed(foreign, foreign_max, steal_max) is None:
            if reported is not None:
                log(f"collect: {where} quiet after {waited:.0f} s: measuring the run again")
            return waited
        takers = f"{disturbance.top_text(foreign)} core"
        if waited >= wait_s:
            log(f"collect: {where} not quiet after {waited:.0f} s ({takers}): measuring the run again all the same")
            return waited
        if reported is None or waited - reported >= QUIET_REPORT_S:
            log(f"collect: waiting for {where} to go quiet: {takers} ({waited:.0f} s of at most {wait_s:g} s)")
            reported = waited


def measure(
    target: Target,
    run: RunSpec,
    trim_s: float,
    profile: tuple[int, str] | None = None,
    foreign_max: float | None = None,
    quiet: bool = False,
    steal_max: float | None = None,
) -> Measurement:
    """One attempt: start the tool on the client, sample CPU over the steady-state window.

    ``profile``: (frequency, perf version) for a profiled run: perf records the CPU window.
    ``foreign_max``: the attempt is disturbed when other processes took more of its CPUs (cores);
    ``steal_max``: when the hypervisor gave more of them to other guests.
    ``quiet``: ask the target to quiet the machine over the CPU window (Target.quiet_window)."""
    spec = run.spec
    collector = collectors.get(spec.tool)
    placement = target.placement_for(run.scenario, spec.kind)
    invocations = collector.build(spec, placement.server_address, placement.client_cpus, placement.server_cpus)
    recorder = target.recorder(placement, *profile) if profile else None
    perf_error = None
    started = time.time()
    procs = []
    first = None
    quieted = None
    try:
        if recorder:
            recorder.start()  # returns once perf samples
        spawned = time.monotonic()
        deadline = spawned + spec.run_timeout_s
        procs = [target.spawn(run.scenario, "client", inv.argv) for inv in invocations]
        time.sleep(collector.warmup_s(spec) + trim_s)
        # the scans just outside the CPU snapshots, so that their own CPU stays out of the window
        scans = [target.foreign_snapshot(run.scenario)]
        if recorder:
            recorder.mark()
        first = {side: target.cpu_snapshot(run.scenario, side) for side in SIDES}
        first_usage = target.datapath_usage(run.scenario, reset_peak=True)
        window_s, opened = max(0.0, spec.duration_s - 2 * trim_s), time.monotonic()
        # frozen once the tool runs and the first readings are taken; thawed before the last ones,
        # which (on a cluster) go through the very daemons frozen
        window = target.quiet_window(run.scenario, window_s, procs) if quiet else None
        try:
            time.sleep(max(0.0, opened + window_s - time.monotonic()))
        finally:
            quieted = window.end() if window is not None else None
        last = {side: target.cpu_snapshot(run.scenario, side) for side in SIDES}
        if recorder:
            recorder.mark()
        scans.append(target.foreign_snapshot(run.scenario))
        if recorder:
            try:
                recorder.stop()
            except perf_record.PerfError as exc:
                perf_error = exc
        last_usage = target.datapath_usage(run.scenario, reset_peak=False)
        if collector.server_wait_s(spec) and target.ends_server_wait and collector.SERVER is not None:
            # The server would idle on its own timer before it reports: once the client's test is
            # over (its timer starts after a few ms of set-up), the target fires that timer.
            ends, latest = spawned + spec.duration_s, spawned + spec.duration_s + SERVER_WAIT_MARGIN_S
            time.sleep(max(0.0, min(ends, latest) - time.monotonic()))
            target.end_server_wait(run.scenario, collector.SERVER, latest)
        results = _wait_all(procs, [inv.argv for inv in invocations], deadline)
    except DatapathError as exc:
        if recorder:
            recorder.close()
        return _datapath_died(target, run, placement, procs, [inv.argv for inv in invocations], started, first, exc)
    except BaseException:
        if recorder:
            recorder.close()  # perf must not outlive the run (an interrupt, a target error)
        raise
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=KILL_WAIT_S)
    outcome, reason = _judge(spec, results)
    bypassed = idle_proxies(first_usage, last_usage)
    if outcome == "ok" and bypassed:
        outcome, reason = (
            "failed",
            (
                f"proxy {', '.join(bypassed)} carried no bytes over the CPU window: "
                "the traffic did not go through the mesh"
            ),
        )
    steal = steal_cores(first, last, placement)
    foreign = (
        disturbance.with_steal(
            disturbance.usage(scans[0], scans[1], sorted({*placement.client_cpus, *placement.server_cpus})), steal
        )
        if scans[0] is not None and scans[1] is not None
        else disturbance.steal_only(steal)
    )
    why = disturbed(foreign, foreign_max, steal_max)
    if outcome == "ok" and why:
        outcome, reason = "disturbed", why
    folded = None
    if recorder:
        try:  # folded once the tool is done, so that perf script's own CPU is outside every window
            if perf_error is None:
                recorder.finish()
                own = scans[0].own | scans[1].own if scans[0] and scans[1] else None
                folded = recorder.profile(min(first[s].mono for s in SIDES), max(last[s].mono for s in SIDES), own)
        except perf_record.PerfError as exc:
            perf_error = exc
        finally:
            recorder.close()
        if perf_error is not None and outcome == "ok":
            outcome, reason = "failed", f"perf: {perf_error}"
    return Measurement(
        placement,
        results,
        started,
        time.time(),
        {side: (first[side], last[side]) for side in SIDES},
        outcome,
        reason,
        {name: (first_usage[name], last_usage[name]) for name in first_usage},
        folded,
        foreign,
        quieted,
    )


def _datapath_died(
    target: Target,
    run: RunSpec,
    placement: Placement,
    procs: list,
    argvs: list[list[str]],
    started: float,
    first: dict | None,
    exc: DatapathError,
) -> Measurement:
    """The failed attempt of a run during which a process on its path (a mesh proxy) died: what the
    clients printed up to then is kept, and the target starts the process again for the next attempt."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    results = _wait_all(procs, argvs, time.monotonic() + KILL_WAIT_S)
    last = {side: target.cpu_snapshot(run.scenario, side) for side in SIDES}
    restarted = target.recover(run.scenario)
    reason = f"{exc}" + (f" (restarted: {', '.join(restarted)})" if restarted else "")
    return Measurement(
        placement,
        results,
        started,
        time.time(),
        {side: ((first or last)[side], last[side]) for side in SIDES},
        "failed",
        reason,
        {},
        None,
    )


def to_record(campaign: str, run: RunSpec, attempts: list[Measurement], target_info: dict) -> record.RunRecord:
    """The raw record of a run from its attempts (the last one is the run's)."""
    last = attempts[-1]
    pl = last.placement
    side_cpus = {"client": pl.client_cpus, "server": pl.server_cpus}
    side_nodes = {"client": pl.client_node, "server": pl.server_node}
    return record.RunRecord(
        campaign=campaign,
        environment=run.environment,
        scenario=run.scenario,
        test=run.test,
        block=run.block,
        order=run.order,
        tool=run.spec.tool,
        kind=run.spec.kind,
        test_params=run.spec.test_params(),
        commands=[r.argv for r in last.results],
        exit_codes=[r.returncode for r in last.results],
        started_at=record.utc(last.started),
        ended_at=record.utc(last.ended),
        placement={
            "server_address": pl.server_address,
            "client_node": pl.client_node,
            "server_node": pl.server_node,
            "client_cpus": pl.client_cpus,
            "server_cpus": pl.server_cpus,
            **pl.details,
        },
        target=target_info,
        clk_tck=target_info["clk_tck"],
        cpu={side: record.SideCpu(side_nodes[side], side_cpus[side], *last.cpu[side]) for side in SIDES},
        processes={name: record.process_window(start, end) for name, (start, end) in (last.processes or {}).items()},
        scenario_definition=run.definition,
        profiled=run.profiled,
        profile=last.profile.meta if last.profile else None,
        profile_folded=last.profile.folded if last.profile else None,
        foreign_cpu=last.foreign,
        quiet=last.quiet,
        attempts=tuple(
            record.Attempt(
                m.outcome, m.reason, record.utc(m.started), tuple(record.Output(r.stdout, r.stderr) for r in m.results)
            )
            for m in attempts
        ),
    )


def start_servers(target: Target, scenario: str, tool_names: list[str]) -> None:
    """Start every server the tools need on the scenario's server side (after activate)."""
    cpus = target.placement(scenario).server_cpus
    for server in collectors.servers(tool_names):
        target.start_server(scenario, server, cpus)


@contextmanager
def serving(target: Target) -> Iterator[Target]:
    """The target entered, every scenario activated and the target's servers started in each:
    for scripts and tests that run commands by hand on a target whose scenarios stand side by side."""
    with target:
        for scenario in target.scenarios:
            target.activate(scenario)
            for server in target.servers:
                target.start_server(scenario, server, target.placement(scenario).server_cpus)
        yield target


def probe_versions(target: Target, scenario: str, tool_names: list[str]) -> dict[str, str]:
    """Each tool's version, asked on the scenario's client side (where its runs start)."""
    versions = {}
    for tool in tool_names:
        collector = collectors.get(tool)
        r = target.run(scenario, "client", collector.VERSION_COMMAND, VERSION_TIMEOUT_S)
        versions[tool] = collector.version(shown(r.stdout + r.stderr))
        if r.returncode is None:
            raise TargetError(
                f"{target.kind}: scenario {scenario}: `{' '.join(collector.VERSION_COMMAND)}` "
                f"on the client side did not answer within {VERSION_TIMEOUT_S} s; killed it"
            )
        if not versions[tool]:
            raise TargetError(
                f"{target.kind}: scenario {scenario}: `{' '.join(collector.VERSION_COMMAND)}` "
                f"on the client side exited {r.returncode} and printed no version: "
                f"{shown(r.stderr or r.stdout).strip()[-500:]}"
            )
    return versions


# under "benchlib": the terminal shows it at the level -q/-v choose (benchlib/base/logs.py)
_progress_log = logging.getLogger("benchlib.progress")


class Progress:
    """One line per measured run on the ``benchlib.progress`` logger: a run that measured at INFO, which
    the terminal shows by default and hides with -q, a failed one at WARNING, which -q shows too. The
    campaign's log file keeps them all."""

    def __init__(self, total: int, done: int):
        self.total, self.done = total, done
        self.t0 = time.monotonic()
        self.measured = 0

    def report(self, run: RunSpec, outcome: str, summary: str) -> None:
        self.done += 1
        self.measured += 1
        elapsed = time.monotonic() - self.t0
        eta = elapsed / self.measured * (self.total - self.done)
        test = f"{run.test} (profiled)" if run.profiled else run.test
        _progress_log.log(
            logging.INFO if outcome == "ok" else logging.WARNING,
            f"[{self.done:>{len(str(self.total))}}/{self.total}] block {run.block + 1} "
            f"{run.scenario:<14} {test:<14} {outcome:<9} {summary:<22} "
            f"elapsed {_mmss(elapsed)} ETA {_mmss(eta)}",
        )


def _mmss(s: float) -> str:
    return f"{int(s // 60)}:{int(s % 60):02d}"


def _headline(spec: TestSpec, stdouts: list[bytes]) -> str:
    """The run's first primary metric, for the progress line."""
    values = collectors.get(spec.tool).parse(spec.kind, stdouts)
    name = next(m for m in PRIMARY_METRICS if m in values)
    return (
        f"{values[name]:,.2f} {METRICS[name].unit}"
        if name == "throughput"
        else f"{values[name]:,.0f} {METRICS[name].unit}"
    )


@dataclass
class _Session:
    """The target entered once for all the looks of a collect, and what it has done so far."""

    stack: ExitStack
    info: dict | None = None  # target.describe() with the tools' versions
    activated: list = field(default_factory=list)  # scenarios, or (round, scenario) visits where switched
    probed: bool = False
    switch_s: list[float] = field(default_factory=list)  # each visit's activation and servers, where switched


# Run until precise: (look, blocks recorded) -> the primary comparisons' (label, half-width in %, target
# in %), worst first, and the minutes the environment's recorded runs took; the caller parses and
# analyses the records
Precision = Callable[[int, int], tuple[list[tuple[str, float, float]], float]]


def run_environment(
    params: Params,
    plan: Plan,
    target: Target,
    raw_root: Path | None = None,
    log=_log.info,
    precision: Precision | None = None,
) -> dict:
    """Run (or resume) every run of one environment. Returns counts.

    With experiment.precision, ``precision`` judges each look once its blocks are recorded, and the next
    look's blocks are added until every primary comparison meets the target or the budget is spent. What
    is added depends only on the records, so a resumed campaign takes the same decisions."""
    exp = params.experiment
    cdir = layout.campaign_dir(exp.campaign, raw_root)
    # before reading or removing anything there, and before DVC commits the records as the stage's
    # output (it would follow a link, and cache and push what it points to)
    foreign = layout.foreign(cdir)
    if foreign:
        raise RecordError(
            f"{cdir}: {len(foreign)} link(s) or special file(s) in the campaign's records "
            "(remove them, or restore the records: `dvc checkout`):\n  " + "\n  ".join(foreign)
        )
    every = schedule_on(target, plan, exp.blocks_planned(), exp.seed, exp.profile_runs)
    unchecked = check_same_plan(params, every, cdir)
    if unchecked:
        log(
            f"collect: {unchecked} record(s) of campaign {exp.campaign} predate recorded scenario definitions: "
            "their scenarios are not compared with the environment as it is now"
        )
    # Under `dvc repro`, DVC has already replaced a link in the records by a copy of what it points to
    # (it "unprotects" the stage's output): only the checksums tell; DVC commits the output after collect.
    changed = []
    for path in (p for p in layout.walk(cdir) if layout.complete(p)):
        try:
            integrity.verify(path)
        except RecordError as exc:
            changed.append(str(exc))
    if changed:
        raise RecordError(
            f"{cdir}: {len(changed)} record(s) are not as they were recorded (restore them: `dvc checkout`; "
            "or remove them, and collect measures those runs again):\n  " + "\n  ".join(changed)
        )
    cleaned = layout.remove_partial(cdir)
    if cleaned:
        log(f"collect: removed {cleaned} incomplete record(s) of an interrupted run")
    for path, aside in layout.set_aside_incomplete(cdir, [r.run_id for r in every]):
        log(f"collect: {path} was not a whole record: moved to {aside.name}, measuring the run again")
    runs = expected_runs(params, every, cdir)
    counts = {
        "planned": len(runs),
        "already_done": sum(layout.exists(cdir, r.run_id) for r in every),
        "ok": 0,
        "failed": 0,
        "disturbed": 0,
        "unwatched": 0,  # measured without other processes' CPU read (the target cannot tell them apart)
        "quiet_waits": 0,  # retries of disturbed runs that waited for quiet CPUs first
        "quiet_wait_s": 0.0,  # how long those waits took, in all
    }
    with ExitStack() as stack:
        session = _Session(stack)
        while True:
            counts["planned"] = len(runs)
            todo = [r for r in runs if not layout.exists(cdir, r.run_id)]
            if todo:
                _measure(params, plan, target, cdir, todo, counts, len(runs), session, log)
            else:
                log(f"collect: {plan.environment.name}: all {len(runs)} runs of campaign {exp.campaign} are recorded")
            runs = _next_look(exp, runs, every, precision, log) if precision and exp.precision else []
            if not runs:
                if session.switch_s:
                    rounds = len({block for block, _ in session.activated})
                    log(
                        f"collect: {len(session.switch_s)} scenario switches in {rounds} round(s) took "
                        f"{sum(session.switch_s):.0f} s, {sum(session.switch_s) / rounds:.0f} s per round"
                    )
                return counts


def schedule_on(target: Target, plan: Plan, blocks: int, seed: int, profile_runs: int) -> list[RunSpec]:
    """The environment's runs as ``target`` takes them: side by side in each block, or in rounds of
    the switches it names where it cannot hold scenarios side by side."""
    if target.interleaves_scenarios:
        return schedule(plan, blocks, seed, profile_runs=profile_runs)
    return schedule(plan, blocks, seed, target.switch_of, profile_runs, target.kept_objects)


def _needs_activation(target: Target, session: _Session, run: RunSpec) -> bool:
    """Whether ``run``'s scenario must be activated before it, noting the visit. Side by side: once per
    campaign. Switched: at each change of scenario; schedule_on keeps a scenario's runs of a round
    together, so a round that returns to one is a bug."""
    if target.interleaves_scenarios:
        fresh = run.scenario not in session.activated
        if fresh:
            session.activated.append(run.scenario)
        return fresh
    visit, last = (run.block, run.scenario), session.activated[-1] if session.activated else None
    if visit == last:
        return False
    if visit in session.activated:
        raise RuntimeError(
            f"schedule returns to scenario {run.scenario} in round {run.block} on a {target.kind} target"
        )
    session.activated.append(visit)
    return last is None or last[1] != run.scenario


def _next_look(exp, runs: list[RunSpec], every: list[RunSpec], precision: Precision, log) -> list[RunSpec]:
    """The runs up to the next look, or [] where this look is precise or the budget is spent."""
    blocks = max(r.block for r in runs) + 1
    marks = exp.looks()
    look = exp.look_of(blocks)
    widths, minutes = precision(look, blocks)
    worst = ", ".join(f"{label} {hw:.2f} %" for label, hw, _ in widths[:6]) + (" ..." if len(widths) > 6 else "")
    met = bool(widths) and all(hw <= target for _, hw, target in widths)  # NaN: not met
    target = percent_text(exp.precision)
    left = [] if exp.max_repetitions is None else [f"{exp.max_repetitions - blocks} blocks"]
    if exp.max_minutes is not None:
        left.append(f"{exp.max_minutes - minutes:.1f} min")
    log(
        f"collect: look {look}{f' of {len(marks)}' if exp.max_repetitions is not None else ''} "
        f"after {blocks} blocks: half-widths (target {target}) {worst or 'none'}; "
        f"budget left {', '.join(left)}"
    )
    if met:
        log(f"collect: every primary comparison is within its target (+/- {target}) after {blocks} blocks")
        return []
    if not widths:
        log(f"collect: no primary comparison in {runs[0].environment} (no baseline run): no blocks added")
        return []
    if look == len(marks):
        log(f"collect: the budget of {blocks} blocks is spent; not every comparison reached the target")
        return []
    step = marks[look] - blocks
    if exp.max_minutes is not None and minutes + minutes / blocks * step > exp.max_minutes:
        log(
            f"collect: {step} more blocks (about {minutes / blocks * step:.1f} min) would exceed max_minutes "
            f"({exp.max_minutes:g}); stopping after {blocks} blocks"
        )
        return []
    log(f"collect: adding blocks {blocks + 1}-{marks[look]} (look {look + 1})")
    return [r for r in every if r.block < marks[look]]


def _measure(
    params: Params,
    plan: Plan,
    target: Target,
    cdir: Path,
    todo: list[RunSpec],
    counts: dict,
    total: int,
    session: _Session,
    log=_log.info,
) -> None:
    """Measure and record ``todo``, entering the target the first time."""
    exp = params.experiment
    perf = None
    if any(r.profiled for r in todo):  # before any run: a campaign must not find out halfway
        perf = (exp.profile_hz, target.check_profiling())
    done = total - len(todo)
    if done and session.info is None:  # a later look's blocks are no resume
        log(f"collect: resuming campaign {exp.campaign}: {done} of {total} runs already recorded")
    progress = Progress(total, done)
    names = plan.tools()
    if session.info is None:
        session.stack.enter_context(target)
        session.info = target.describe()
    for run in todo:
        if _needs_activation(target, session, run):
            started = time.monotonic()
            try:
                target.activate(run.scenario)
                start_servers(target, run.scenario, names)
            except TargetError as exc:  # hours into a campaign: say what is kept and how to go on
                raise TargetError(
                    f"{exc}\ncollect: round {run.block + 1}, scenario {run.scenario} could not start; "
                    f"{progress.done} of {total} runs are recorded and kept: run the same command to resume"
                ) from None
            if not target.interleaves_scenarios:
                session.switch_s.append(time.monotonic() - started)
                log(f"collect: round {run.block + 1}: {run.scenario} ready after {session.switch_s[-1]:.1f} s")
            unavailable = target.profile_unavailable(run.scenario) if perf else None
            if unavailable:
                raise TargetError(
                    f"cannot record profiled runs: experiment.profile_runs: target {target.kind}, "
                    f"scenario {run.scenario}: {unavailable}; {perf_record.OFF}"
                )
            if not session.probed:
                session.info = {
                    **session.info,
                    "versions": {**session.info["versions"], **probe_versions(target, run.scenario, names)},
                }
                session.probed = True
        attempts = []
        for _ in range(1 + exp.retries):
            if attempts and attempts[-1].outcome == "disturbed":  # on a busy machine: wait, not drop the run
                waited = wait_for_quiet(
                    target,
                    run.scenario,
                    attempts[-1].placement,
                    exp.foreign_cpu_max,
                    exp.steal_max,
                    exp.quiet_wait_s,
                    log,
                )
                if waited is not None:
                    counts["quiet_waits"] += 1
                    counts["quiet_wait_s"] += waited
            attempts.append(
                measure(
                    target,
                    run,
                    exp.cpu_trim_s,
                    perf if run.profiled else None,
                    exp.foreign_cpu_max,
                    exp.quiet_windows,
                    exp.steal_max,
                )
            )
            if attempts[-1].outcome == "ok":
                break
        last = attempts[-1]
        to_record(exp.campaign, run, attempts, session.info).write(cdir)
        counts[last.outcome] += 1
        counts["unwatched"] += last.foreign is None or last.foreign["measured_cores"] is None
        if last.outcome == "ok":
            summary = _headline(run.spec, [r.stdout for r in last.results])
        elif last.outcome == "disturbed" and last.foreign:
            taken = (last.foreign["measured_cores"] or 0.0) + last.foreign.get("steal_cores", 0.0)
            summary = f"{taken:.2f} core: {disturbance.top_text(last.foreign)}"[:60]
        else:
            summary = (last.reason or "")[:60]
        progress.report(run, last.outcome, summary)
