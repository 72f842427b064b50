"""`benchlib history`: the primary metrics of every campaign, in the order measured, each campaign's
change against the one before it judged as `benchlib compare` judges it."""

from __future__ import annotations

import json

from ..base.errors import ConfigError
from ..records import layout, store
from ..settings.project import project_root
from ..tables import tidy
from .common import add, log, out, params


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "history",
        help="line up the campaigns over time: each test's headline metric per campaign, and what changed",
        description="Every campaign under data/raw/ (or the ones named), in the order of their first run: per "
        "configuration (environment, test, scenario), the headline metric's median with its distribution-free "
        "95 % CI in each campaign, and the change against the campaign just before it with its interval and "
        "verdict, judged as `benchlib compare` judges B against A (two-sided Mann-Whitney U on the runs, the "
        "headline metrics of each pair of campaigns corrected together: analysis.correction, Holm by default). "
        "A change is marked where it is significant and beyond the threshold (analysis.threshold_pct, else "
        "analysis.noise_band_pct). Changes are tested between neighbours only, never at a split searched for "
        "along the series. Each campaign is read once and reduced to its headline values, so hundreds of "
        "campaigns fit in little memory.",
        examples=[
            "benchlib history",
            "benchlib history --env local-lab",
            "benchlib history lab-default-002 lab-default-003 HEAD~5:lab-default-001 --json",
        ],
        exit_codes="0 the history was printed (changes do not fail it: `benchlib compare` is the gate); "
        "2 an error, one line on stderr: an unknown, empty or unparseable campaign, a REV:ID whose records "
        "are in neither the DVC cache nor a remote, or no campaign at all.",
    )
    s.add_argument(
        "campaigns",
        nargs="*",
        metavar="CAMPAIGN",
        help="campaign ids under data/raw/, or REV:ID through DVC (as for compare); default: every campaign "
        "under data/raw/ with a record",
    )
    s.add_argument("--env", help="only this environment's configurations")
    s.add_argument("--json", action="store_true", help="print the rows as JSON instead of text")
    s.set_defaults(func=run)


def recorded_campaigns() -> list[str]:
    """Every campaign under data/raw/ that holds at least one complete record."""
    raw = layout.campaign_dir("x").parent
    if not raw.is_dir():
        return []
    return sorted(d.name for d in raw.iterdir() if d.is_dir() and next(layout.walk(d), None) is not None)


def run(args) -> int:
    from benchlib.analysis import history
    from benchlib.analysis.compare import Campaign
    from benchlib.report import history as output

    analysis = params(args).analysis
    specs = args.campaigns or recorded_campaigns()
    if not specs:
        raise ConfigError("history: no campaign under data/raw/ holds a record; measure one (dvc repro)")

    def loaded():
        for i, spec in enumerate(specs, 1):
            log.info(f"history: reading {spec} ({i} of {len(specs)})")
            yield Campaign(spec, *tidy.campaign_tables(store.campaign_records(spec, project_root()), spec))

    table = history.line_up(loaded(), analysis, environment=args.env)
    for spec in sorted(set(specs) - set(table["campaign"])):
        where = f" in {args.env}" if args.env else ""
        log.warning(f"history: {spec} has no successful run{where} (every run failed or was disturbed): left out")
    out(json.dumps(output.to_json(table), indent=1, default=str) if args.json else output.text(table))
    return 0
