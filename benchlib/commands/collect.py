"""`benchlib collect`: run (or resume) one environment's measurements."""

from __future__ import annotations

import os
import signal

from .. import collectors
from ..host import machine
from ..measure import runner
from ..measure.plan import Plan, plan_environment
from ..targets import Target, registry
from .common import ERRORS, RESULT, add, log, params

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "collect",
        help="run (or resume) one environment's measurements",
        description="Set up the environment's scenarios, run every configuration once per "
        "block in seeded random order, and write one raw record per run under "
        "data/raw/<campaign>/<environment>/. Runs already recorded are skipped, "
        "so running it again after an interruption resumes. Everything the "
        "target created is removed at the end, on error and on Ctrl-C.",
        examples=["sudo .venv/bin/benchlib collect --env local-lab", "dvc repro   # runs it for every environment"],
        exit_codes=f"0 every planned run recorded (failed runs included, counted); {ERRORS}, also when another "
        "measurement holds the machine; 130 interrupted (SIGINT, SIGTERM, SIGHUP): completed runs are kept, "
        "the same command resumes.",
    )
    s.add_argument("--env", required=True, help="environment name (a folder under pipelines/)")
    s.set_defaults(func=run, interrupted="completed runs are kept, run the same command to resume")


def make_target(plan: Plan, log=log.info) -> Target:
    """The plan's target, told which servers and client commands its tools need."""
    names = plan.tools()
    env, kw = (
        plan.environment,
        {"servers": collectors.servers(names), "commands": collectors.client_commands(names), "log": log},
    )
    return registry.get(env.target, env, plan.scenarios)(env, plan.scenarios, **kw)


def _interrupt(signum, frame) -> None:
    # Once only: a second signal must not cut the teardown short.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def _stop_on_signals() -> None:
    """Ctrl-C, SIGTERM (dvc, shells, kill) and SIGHUP (a closed terminal or SSH session) all stop
    the collection and tear the target down. Under dvc, the death of dvc does too."""
    for sig in STOP_SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue  # nohup: the user asked to outlive the terminal
        signal.signal(sig, _interrupt)  # SIGINT too where a background job inherited it ignored
    if "DVC_STAGE" in os.environ:
        machine.die_with_parent(signal.SIGTERM)


def precision_of(p, plan: Plan, raw_root=None) -> runner.Precision:
    """The stopping rule's view of an environment's records at a look: parsed in memory as `benchlib parse`
    does, its primary comparisons as `benchlib analyse` computes them, at the look's spent level."""
    import polars as pl

    from ..analysis import planning, sequential
    from ..measure.plan import validate_all
    from ..records import layout
    from ..tables import tidy

    comparisons = len(planning.planned_comparisons(p, validate_all(p)))
    cdir = layout.campaign_dir(p.experiment.campaign, raw_root)

    def judge(look: int, blocks: int) -> tuple[list[tuple[str, float, float]], float]:
        measured = [d for d in sorted((cdir / plan.environment.name).glob("*/*/r*")) if layout.complete(d)]
        runs, metrics = tidy.build_tables(cdir, records=measured)
        runs = runs.filter(pl.col("environment") == plan.environment.name)
        confidence = sequential.stopping_confidence(p.experiment, p.analysis.alpha, look, comparisons)
        widths = sequential.judged(sequential.half_widths(runs, metrics, p.analysis, confidence), p.experiment)
        labels = [
            (f"{r['test']} {r['scenario']} vs {r['baseline']}", float(r["half_width_pct"]), float(r["target_pct"]))
            for r in widths.iter_rows(named=True)
        ]
        return labels, float(runs["duration_s"].sum()) / 60

    return judge


def run(args) -> int:
    p = params(args)
    plan = plan_environment(p, args.env)
    _stop_on_signals()
    with machine.exclusive(f"benchlib collect --env {args.env}, campaign {p.experiment.campaign}"):
        counts = runner.run_environment(
            p,
            plan,
            make_target(plan),
            log=log.info,
            precision=precision_of(p, plan) if p.experiment.precision else None,
        )
    # "0 disturbed" is a finding only where the target read the other processes' CPU; elsewhere only
    # the steal was judged
    unwatched = counts.get("unwatched", 0)
    disturbed = (
        f"{counts['disturbed']} disturbed"
        if not unwatched
        else (
            f"{counts['disturbed']} disturbed by steal; other processes' CPU not measured in {unwatched} run(s) "
            "(this target cannot tell them apart)"
        )
    )
    waits = counts.get("quiet_waits", 0)
    waited = (
        f"; waited {counts['quiet_wait_s']:.0f} s in all for quiet CPUs before {waits} retr{'y' if waits == 1 else 'ies'}"
        if waits
        else ""
    )
    log.info(
        f"collect: {args.env}: {counts['ok']} ok, {counts['failed']} failed, {disturbed}, "
        f"{counts['already_done']} recorded before, {counts['planned']} planned{waited}",
        extra=RESULT,
    )
    return 0
