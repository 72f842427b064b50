"""The campaign: the run matrix in blocks, raw records, resume.

Every configuration (scenario x test) runs once per block, in an order drawn
from the campaign seed, so slow drift in the machine spreads over all
configurations instead of biasing one. A run's raw record is written to a
temporary directory and renamed into place only when complete: a record that
exists is complete, and resuming skips it.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from . import collectors
from .collectors import ParseError
from .config import Params, Plan, TestSpec, project_root

SIDES = ("client", "server")
CHECKSUMS = "SHA256SUMS"


@dataclass(frozen=True)
class RunSpec:
    environment: str
    scenario: str
    test: str
    spec: TestSpec
    block: int  # 0-based; every configuration runs once per block
    order: int  # position in the environment's whole schedule

    @property
    def run_id(self) -> str:
        """Unique within the campaign, and the record's path below the campaign directory."""
        return f"{self.environment}/{self.scenario}/{self.test}/r{self.block:03d}"

    def record_dir(self, campaign_dir: Path) -> Path:
        return campaign_dir / self.run_id


def schedule(plan: Plan, repetitions: int, seed: int, interleave_scenarios: bool = True) -> list[RunSpec]:
    """All runs of an environment in blocks: each block runs every configuration once, in a seeded order.

    Where scenarios can stand side by side (the lab), a block spans all of
    them. Where switching scenario costs minutes (a CNI change on a cluster),
    scenarios run one after another, in the order given, each with its own
    blocks of tests.
    """
    rng = random.Random(f"{seed}/{plan.environment.name}")
    groups = [plan.scenarios] if interleave_scenarios else [[s] for s in plan.scenarios]
    runs = []
    for scenarios in groups:
        configs = plan.configurations(scenarios)
        for block in range(repetitions):
            order = configs[:]
            rng.shuffle(order)
            for scenario, test in order:
                runs.append(RunSpec(plan.environment.name, scenario, test, plan.tests[test], block, len(runs)))
    return runs


def campaign_dir(campaign: str, raw_root: Path | None = None) -> Path:
    return (raw_root or project_root() / "data" / "raw") / campaign


def is_done(run: RunSpec, cdir: Path) -> bool:
    return (run.record_dir(cdir) / "meta.json").exists()


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


def _wait_all(procs: list, deadline: float) -> list[tuple[int | None, str, str]]:
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(0.0, deadline - time.monotonic()))
            results.append((p.returncode, out, err))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            results.append((None, out, err))
    return results


def measure(target, run: RunSpec, trim_s: float) -> dict:
    """One attempt: start the tool on the client, sample CPU over the steady-state window."""
    spec = run.spec
    collector = collectors.get(spec.tool)
    placement = target.placement(run.scenario)
    invocations = collector.build(spec, placement.server_address, placement.client_cpus, placement.server_cpus)
    started = time.time()
    deadline = time.monotonic() + spec.run_timeout_s
    procs = []
    try:
        procs = [target.spawn(run.scenario, "client", inv.argv) for inv in invocations]
        time.sleep(collector.warmup_s(spec) + trim_s)
        first = {side: target.cpu_snapshot(side) for side in SIDES}
        time.sleep(max(0.0, spec.duration_s - 2 * trim_s))
        last = {side: target.cpu_snapshot(side) for side in SIDES}
        results = _wait_all(procs, deadline)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    ended = time.time()
    outcome, reason = "ok", None
    timed_out = [i for i, r in enumerate(results) if r[0] is None]
    failed = [(i, r) for i, r in enumerate(results) if r[0] not in (0, None)]
    if timed_out:
        outcome, reason = "failed", f"timeout: stream(s) {timed_out} still running after {spec.run_timeout_s:g} s"
    elif failed:
        i, (rc, out, err) = failed[0]
        # netperf reports its errors on stdout, other tools on stderr
        last_line = ((err.strip() or out.strip()).splitlines() or ["(no output)"])[-1]
        outcome, reason = "failed", f"{spec.tool} stream {i} exited {rc}: {last_line}"
    else:
        try:
            collector.parse(spec.kind, [r[1] for r in results])
        except ParseError as exc:
            outcome, reason = "failed", f"unparseable output: {exc}"
    return {
        "invocations": invocations, "results": results, "started": started, "ended": ended,
        "cpu": {side: (first[side], last[side]) for side in SIDES},
        "outcome": outcome, "reason": reason, "placement": placement,
    }


def _write_attempt(dirpath: Path, attempt: dict) -> None:
    dirpath.mkdir(parents=True, exist_ok=True)
    for i, (_, out, err) in enumerate(attempt["results"]):
        (dirpath / f"stdout-{i}.txt").write_text(out)
        (dirpath / f"stderr-{i}.txt").write_text(err)


def write_record(cdir: Path, campaign: str, run: RunSpec, attempts: list[dict], target_info: dict) -> Path:
    """Write the run's raw record atomically: build it under a temporary name, then rename."""
    final = run.record_dir(cdir)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    last = attempts[-1]
    _write_attempt(tmp, last)
    for n, earlier in enumerate(attempts[:-1], start=1):
        _write_attempt(tmp / f"failed-attempt-{n}", earlier)
    pl = last["placement"]
    side_cpus = {"client": pl.client_cpus, "server": pl.server_cpus}
    side_nodes = {"client": pl.client_node, "server": pl.server_node}
    cpu_record = {"clk_tck": target_info["clk_tck"], "sides": {
        side: {"node": side_nodes[side], "cpus": side_cpus[side],
               "start": last["cpu"][side][0].to_json(), "end": last["cpu"][side][1].to_json()}
        for side in SIDES}}
    (tmp / "cpu.json").write_text(json.dumps(cpu_record, indent=1))
    meta = {
        "schema_version": 1,
        "campaign": campaign, "environment": run.environment, "scenario": run.scenario,
        "test": run.test, "run_id": run.run_id, "repetition": run.block, "block": run.block,
        "order": run.order, "tool": run.spec.tool, "kind": run.spec.kind,
        "test_params": run.spec.model_dump(),
        "commands": [inv.argv for inv in last["invocations"]],
        "exit_codes": [r[0] for r in last["results"]],
        "started_at": _utc(last["started"]), "ended_at": _utc(last["ended"]),
        "outcome": last["outcome"], "failure_reason": last["reason"],
        "attempts": [{"outcome": a["outcome"], "reason": a["reason"], "started_at": _utc(a["started"])}
                     for a in attempts],
        "placement": {"server_address": pl.server_address, "client_node": pl.client_node,
                      "server_node": pl.server_node, "client_cpus": pl.client_cpus,
                      "server_cpus": pl.server_cpus, **pl.details},
        "target": target_info,
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    _write_checksums(tmp)
    os.replace(tmp, final) if not final.exists() else shutil.rmtree(tmp)
    return final


def _write_checksums(record: Path) -> None:
    lines = [f"{sha256(p)}  {p.relative_to(record)}" for p in sorted(record.rglob("*"))
             if p.is_file() and p.name != CHECKSUMS]
    (record / CHECKSUMS).write_text("\n".join(lines) + "\n")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def remove_partial_records(cdir: Path) -> int:
    """Temporary record directories of a killed run; they are never valid data."""
    partial = list(cdir.glob("*/*/*/.*.tmp-*")) if cdir.exists() else []
    for p in partial:
        shutil.rmtree(p, ignore_errors=True)
    return len(partial)


class Progress:
    def __init__(self, total: int, done: int, stream=sys.stderr):
        self.total, self.done, self.stream = total, done, stream
        self.t0 = time.monotonic()
        self.measured = 0

    def report(self, run: RunSpec, outcome: str, summary: str) -> None:
        self.done += 1
        self.measured += 1
        elapsed = time.monotonic() - self.t0
        eta = elapsed / self.measured * (self.total - self.done)
        print(f"[{self.done:>{len(str(self.total))}}/{self.total}] block {run.block + 1} "
              f"{run.scenario:<14} {run.test:<14} {outcome:<6} {summary:<22} "
              f"elapsed {_mmss(elapsed)} ETA {_mmss(eta)}", file=self.stream, flush=True)


def _mmss(s: float) -> str:
    return f"{int(s // 60)}:{int(s % 60):02d}"


def _headline(spec: TestSpec, stdouts: list[str]) -> str:
    m = collectors.get(spec.tool).parse(spec.kind, stdouts)
    if "throughput" in m:
        return f"{m['throughput']:.2f} Gbit/s"
    rate = m.get("transaction_rate", m.get("connection_rate", m.get("http_qps", m.get("dns_qps"))))
    return f"{rate:,.0f} /s"


def run_environment(params: Params, plan: Plan, target, raw_root: Path | None = None, log=print) -> dict:
    """Run (or resume) every run of one environment. Returns counts."""
    exp = params.experiment
    cdir = campaign_dir(exp.campaign, raw_root)
    runs = schedule(plan, exp.repetitions, exp.seed, target.interleaves_scenarios)
    cleaned = remove_partial_records(cdir)
    if cleaned:
        log(f"collect: removed {cleaned} incomplete record(s) of an interrupted run")
    todo = [r for r in runs if not is_done(r, cdir)]
    counts = {"planned": len(runs), "already_done": len(runs) - len(todo), "ok": 0, "failed": 0}
    if not todo:
        log(f"collect: {plan.environment.name}: all {len(runs)} runs of campaign {exp.campaign} are recorded")
        return counts
    if counts["already_done"]:
        log(f"collect: resuming campaign {exp.campaign}: {counts['already_done']} of {len(runs)} runs already recorded")
    progress = Progress(len(runs), counts["already_done"])
    with target:
        info = target.describe()
        active = None
        for run in todo:
            if run.scenario != active:
                target.activate(run.scenario)
                active = run.scenario
            attempts = []
            for _ in range(1 + exp.retries):
                attempts.append(measure(target, run, exp.cpu_trim_s))
                if attempts[-1]["outcome"] == "ok":
                    break
            last = attempts[-1]
            write_record(cdir, exp.campaign, run, attempts, info)
            counts[last["outcome"]] += 1
            summary = (_headline(run.spec, [r[1] for r in last["results"]])
                       if last["outcome"] == "ok" else (last["reason"] or "")[:60])
            progress.report(run, last["outcome"], summary)
    return counts
