"""`benchlib parse`: the campaign's raw records, checked against the plan, as the tidy tables."""

from __future__ import annotations

from pathlib import Path

from ..measure.plan import campaign_schedule, expected_runs, plan_digest, planned_definitions, planned_params
from ..records import layout, record, survey
from ..settings.project import project_root
from ..tables import tidy
from .common import ERRORS, add, log, out, params


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "parse",
        help="raw records -> data/processed/{runs,metrics}.parquet",
        description="Verify the campaign's raw records against their checksums, parse the tool output "
        "and write the tidy tables. Only what is new is read: a record parsed before whose files are "
        "unchanged (name, size, inode, mtime and ctime of each, as DVC tells a changed file; recorded in "
        "parse_index.parquet beside the tables) keeps its rows of the previous tables, which are the same "
        "as reading it again would give. A changed record is verified and parsed again, a removed one "
        "leaves the tables; another benchlib version, other tables or an unreadable index: every record "
        "is read. --full reads every record regardless.",
        examples=["benchlib parse", "benchlib parse --full", "benchlib parse --skip-corrupt --out /tmp/tables"],
        exit_codes=f"0 the tables are written; {ERRORS}: a record that is corrupt or not of the plan, "
        "or planned runs not recorded yet (without --skip-corrupt).",
    )
    s.add_argument("--out", help="output directory (default: data/processed)")
    s.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="skip records that fail verification or do not match the plan (counted and listed), "
        "and parse a campaign whose planned runs are not all recorded yet, instead of stopping",
    )
    s.add_argument(
        "--full",
        action="store_true",
        help="read, verify and parse every record, even those the last parse read unchanged "
        "(e.g. to check every checksum again)",
    )
    s.set_defaults(func=run)


def run(args) -> int:
    p = params(args)
    cdir = layout.campaign_dir(p.experiment.campaign)
    planned = planned_params(p)
    records, problems = survey.survey(cdir, planned, planned_definitions(p))
    if problems and not args.skip_corrupt:
        raise record.RecordError(
            f"{cdir}: {len(problems)} record(s) do not match the plan of "
            f"{p.source} (--skip-corrupt lists and skips them):\n  " + "\n  ".join(problems)
        )
    if problems:
        log.warning(
            f"parse: skipped {len(problems)} record(s) that do not match the plan (--skip-corrupt):\n  "
            + "\n  ".join(problems)
        )
    # with experiment.precision: the blocks up to the look each environment's records reached
    by_env: dict[str, list] = {}
    for run in campaign_schedule(p):
        by_env.setdefault(run.environment, []).append(run)
    expected = [r.run_id for runs in by_env.values() for r in expected_runs(p, runs, cdir)]
    missing = [rid for rid in expected if not layout.exists(cdir, rid)]
    if missing:
        envs = sorted({rid.split("/")[0] for rid in missing})
        what = (
            f"{cdir}: {len(missing)} of {len(expected)} planned runs not recorded yet (the first: {missing[0]}): "
            f"run {' and '.join(f'`benchlib collect --env {e}`' for e in envs)}"
        )
        if not args.skip_corrupt:
            raise record.RecordError(f"{what} (--skip-corrupt parses the {len(expected) - len(missing)} recorded)")
        log.warning(f"parse: {what}; parsing the {len(records)} recorded that match the plan (--skip-corrupt)")
    where = Path(args.out) if args.out else project_root() / "data" / "processed"
    parsed = tidy.parse_campaign(
        cdir,
        where,
        skip_corrupt=args.skip_corrupt,
        log=log.warning,
        records=records,
        plan=plan_digest(p),
        incremental=not args.full,
    )
    out(
        f"parse: {parsed.runs} runs ({parsed.failed} failed, {parsed.disturbed} disturbed), {parsed.metric_rows} metric rows, "
        f"{parsed.profiled} profiled runs ({parsed.profile_rows} stack rows) -> {where}; "
        f"{parsed.read} record(s) read, {parsed.reused} unchanged since the last parse reused"
    )
    return 0
