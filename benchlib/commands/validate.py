"""`benchlib validate`: check params.yaml and the environments; print the run plan and its power."""

from __future__ import annotations

from ..measure import runner
from ..measure.plan import check_same_plan, validate_all
from ..profiling import perf_record
from ..records import layout
from ..settings.project import project_root
from ..tables import tidy
from .collect import make_target
from .common import ERRORS, add, out, params

PER_RUN_OVERHEAD_S = 0.2  # spawn, CPU sampling and record writing, measured on the lab


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "validate",
        help="check params.yaml and the environments; print the run plan",
        description="Validate params.yaml and every environment it names, then print "
        "how many runs each environment has, the estimated time and how many "
        "are already recorded; then the planned power: from the spread of a "
        "previous campaign of the same configurations (data/processed, the newest "
        "campaign under data/raw, or --pilot), the minimum detectable effect of each "
        "primary comparison at the planned repetitions and the runs needed for the "
        "noise band and for 5 %. A campaign whose runs are all recorded gets one line "
        "instead: it is complete and nothing is measured. A recorded run measured with other test parameters "
        "or another scenario definition than the files give now is refused, as collect refuses it. Touches nothing.",
        examples=["benchlib validate", "benchlib validate --params pipelines/local-lab/params-datapaths.yaml"],
        exit_codes=f"0 valid; {ERRORS} (the file and key).",
    )
    s.add_argument(
        "--pilot", metavar="DIR", help="tidy tables (runs.parquet, metrics.parquet) of a previous campaign to plan from"
    )
    s.set_defaults(func=run)


def run(args) -> int:
    p = params(args)
    plans = validate_all(p)
    minutes_per_block = {}
    lines_of_plan, planned, recorded = [], 0, 0
    for plan in plans:
        target = make_target(plan)
        runs = runner.schedule_on(target, plan, p.experiment.repetitions, p.experiment.seed, p.experiment.profile_runs)
        seconds = sum(
            runner.expected_run_s(target, r.spec) + PER_RUN_OVERHEAD_S + (perf_record.EXTRA_S if r.profiled else 0.0)
            for r in runs
        )
        if p.experiment.profile_runs and not target.perf_is_remote:  # validate contacts no host
            # the targets whose perf runs here collect as root (the lab, the local cluster): root's permissions
            perf_record.check_plan(target.kind, target.can_profile, root=True)
        side_by_side = clusters_text(plan, target)
        minutes_per_block[plan.environment.name] = seconds / 60 / p.experiment.repetitions
        e = p.experiment
        up_to = (
            f" (the first look; run until precise: up to {e.blocks_planned()} blocks)"
            if e.precision is not None and e.max_repetitions is not None
            else f" (the first look; run until precise: up to {e.max_minutes:g} min)"
            if e.precision is not None
            else ""
        )
        cdir = layout.campaign_dir(p.experiment.campaign)
        check_same_plan(p, runs, cdir)  # records of other tests or scenarios: what collect would refuse
        done = sum(layout.exists(cdir, r.run_id) for r in runs)
        planned, recorded = planned + len(runs), recorded + done
        lines_of_plan.append(
            f"{plan.environment.name}: {len(plan.scenarios)} scenarios {plan.scenarios}, "
            f"{len(plan.tests)} tests {list(plan.tests)}: {len(plan.configurations())} configurations "
            f"x {p.experiment.repetitions} blocks{up_to} "
            f"= {sum(not r.profiled for r in runs)} runs + {sum(r.profiled for r in runs)} profiled, about {seconds / 60:.1f} min; {done} already recorded "
            f"in {cdir}{side_by_side}"
        )
    if planned and recorded == planned and p.experiment.precision is None:
        # a second run of the main command: nothing to plan, so no plan and no power to print
        cdir = layout.campaign_dir(p.experiment.campaign)
        shown = cdir.relative_to(project_root()) if cdir.is_relative_to(project_root()) else cdir
        out(
            f"{p.source} is valid; campaign {p.experiment.campaign} is complete ({recorded} of {planned} runs "
            f"recorded in {shown}): nothing is measured; to measure again, give experiment.campaign a new name"
        )
        return 0
    for line in lines_of_plan:
        out(line)
    from ..analysis import planning  # scipy and statsmodels only here

    lines = planning.planned_power(p, plans, project_root(), args.pilot, tidy.build_tables, minutes_per_block)
    for line in lines:
        out(line)
    out(f"{p.source} is valid")
    return 0


def clusters_text(plan, target) -> str:
    """Where the plan's scenarios run on clusters of their own: how the runs go over them (validate
    contacts no cluster; collect looks at every one before its first run, doctor in full)."""
    env = plan.environment
    if env.target != "kubernetes":
        return ""
    from ..targets.kubernetes import clusters

    if not clusters.names_clusters(env, plan.scenarios):
        return ""
    names = ", ".join(name or clusters.DEFAULT for name in target.clusters)
    if target.apart is None:
        return f"; clusters {names} side by side, every run interleaved in each block"
    return f"; clusters {names} in rounds ({target.apart})"
