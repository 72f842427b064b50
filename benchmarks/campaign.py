"""Benchmarks 2 and 3: harness CPU overhead and duty cycle of the default lab campaign.

Runs params.yaml's (or --params) local-lab campaign (its scenarios, tests and durations;
``--reps`` blocks instead of experiment.repetitions, since the duty cycle is a
per-run ratio) through the real runner and LabTarget, into a temporary raw
root, and reports:

* harness CPU: user + system time of this process alone (``RUSAGE_SELF``
  excludes netperf, ip and every other child) over the campaign's wall time,
  as % of one core;
* harness CPU per run kind (measured and profiled runs apart): this process's
  CPU over each attempt (`runner.measure`), the profiled runs' folding included;
* duty cycle: campaign wall time / sum of the configured test durations, and
  where the rest goes: lab build and teardown, TCP_CRR's wait for netserver's
  report (4 s where the target cannot end it; on the lab until the client stops
  connecting), the profiled runs' perf (start, stop, `perf script`), and the
  fixed cost per run (process start, waiting for the tool, writing the record).

    uv run python benchmarks/campaign.py [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from common import figure

from benchlib import collectors
from benchlib.measure import runner
from benchlib.measure.plan import plan_environment
from benchlib.settings.loading import load_environment, load_params
from benchlib.settings.project import project_root
from benchlib.targets.lab import LabTarget


class TimedTarget:
    """The lab, with its build (enter) and teardown (exit) timed."""

    def __init__(self, target: LabTarget):
        self._target = target
        self.build_s = self.teardown_s = 0.0

    def __enter__(self):
        t0 = time.monotonic()
        self._target.__enter__()
        self.build_s = time.monotonic() - t0
        return self

    def __exit__(self, *exc):
        t0 = time.monotonic()
        self._target.__exit__(*exc)
        self.teardown_s = time.monotonic() - t0

    def __getattr__(self, name):
        return getattr(self._target, name)


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=2, help="blocks (default 2; params.yaml has 8)")
    p.add_argument("--params", type=Path, default=project_root() / "params.yaml")
    args = p.parse_args()
    params = load_params(args.params)
    params = params.model_copy(
        update={
            "experiment": params.experiment.model_copy(update={"campaign": "bench-campaign", "repetitions": args.reps})
        }
    )
    plan = plan_environment(params, "local-lab")
    tools = plan.tools()
    target = TimedTarget(
        LabTarget(
            load_environment("local-lab"),
            plan.scenarios,
            servers=collectors.servers(tools),
            commands=collectors.client_commands(tools),
            log=lambda m: None,
        )
    )
    harness = defaultdict(list)  # (kind, profiled): this process's CPU-seconds per attempt
    measure = runner.measure

    def timed_measure(target, run, trim_s, profile=None, *args, **kwargs):
        cpu0 = _cpu_s()
        try:
            return measure(target, run, trim_s, profile, *args, **kwargs)
        finally:
            harness[(run.spec.kind, profile is not None)].append(_cpu_s() - cpu0)

    runner.measure = timed_measure
    with tempfile.TemporaryDirectory(prefix="bench-campaign-") as raw:
        cpu0, t0 = _cpu_s(), time.monotonic()
        counts = runner.run_environment(params, plan, target, raw_root=Path(raw), log=lambda m: None)
        wall, cpu = time.monotonic() - t0, _cpu_s() - cpu0
        metas = [json.loads(p.read_text()) for p in Path(raw).glob("*/*/*/*/*/meta.json")]
    runner.measure = measure
    configured = sum(m["test_params"]["duration_s"] for m in metas)
    spans = {m["run_id"]: _span(m) for m in metas}

    def extra(keep) -> list[float]:  # run length beyond the test's duration
        return sorted(spans[m["run_id"]] - m["test_params"]["duration_s"] for m in metas if keep(m))

    crr = extra(lambda m: m["kind"] == "TCP_CRR" and not m["profiled"])
    profiled = extra(lambda m: m["profiled"])
    other = extra(lambda m: m["kind"] != "TCP_CRR" and not m["profiled"])
    in_runs = sum(spans.values())
    between = wall - target.build_s - target.teardown_s - in_runs
    print(
        f"campaign: {len(metas)} runs ({counts['ok']} ok, {counts['failed']} failed), "
        f"{len(plan.scenarios)} scenarios x {len(plan.tests)} tests x {args.reps} blocks, "
        f"{len(profiled)} of them profiled"
    )
    figure("harness CPU (this process, no children)", 100 * cpu / wall, "% of one core", "< 1 %")
    figure("harness CPU-seconds", cpu, "s")
    for (kind, is_profiled), seconds in sorted(harness.items()):
        label = f"{kind}{' profiled' if is_profiled else ''}"
        figure(f"  harness CPU per {label} run ({len(seconds)})", 1000 * sum(seconds) / len(seconds), "ms")
    figure("campaign wall time", wall, "s")
    figure("sum of configured durations", configured, "s")
    figure("duty cycle (wall / configured)", wall / configured, "", "<= 1.05")
    figure("lab build", target.build_s, "s")
    figure("lab teardown", target.teardown_s, "s")
    for label, extras in (("TCP_CRR runs", crr), ("profiled runs", profiled), ("other runs", other)):
        if extras:  # a campaign without TCP_CRR (the mesh presets) has no server wait to show
            figure(f"{label}: length - duration, total", sum(extras), "s")
            figure(f"{label}: length - duration, median", extras[len(extras) // 2], "s")
    figure("between runs (records, progress), total", between, "s")
    figure("duty cycle without TCP_CRR's extra length", (wall - sum(crr)) / configured, "")


def _span(meta: dict) -> float:
    """A run's wall time as recorded: from starting the tool to the end of the last attempt."""
    return (datetime.fromisoformat(meta["ended_at"]) - datetime.fromisoformat(meta["started_at"])).total_seconds()


if __name__ == "__main__":
    main()
