"""`benchlib verify`: a campaign's raw records, whole as DVC committed them and as their checksums say."""

from __future__ import annotations

from ..base.errors import BenchlibError
from ..records import store
from ..settings.names import require_name
from ..settings.project import project_root
from .common import RESULT, add, log, out, params


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "verify",
        help="check a campaign's raw records after `dvc pull`",
        description="Check that every raw record of a campaign is whole: each file against "
        "what DVC committed of the stage output (dvc.lock: each file's md5), then against the "
        "record's own SHA256SUMS. Each changed or missing file, each record DVC does not track "
        "and each link or special file is named by its record, also when `dvc pull` refused or "
        "could not fetch an object. A campaign (or environment) DVC never committed is checked "
        "against SHA256SUMS only, and a line says so.",
        examples=["dvc pull && benchlib verify", "benchlib verify lab-default-003"],
        exit_codes="0 all is whole; 2 with the list of problems (or another error, one line on stderr).",
    )
    s.add_argument("campaign", nargs="?", help="campaign id under data/raw/ (default: experiment.campaign)")
    s.set_defaults(func=run)


def run(args) -> int:
    campaign = args.campaign or params(args).experiment.campaign
    require_name(campaign, "campaign")
    checked = store.verify_campaign(project_root(), campaign)
    for note in checked.notes:
        log.info(f"verify: {note}", extra=RESULT)
    if checked.problems:
        raise BenchlibError(
            f"campaign {campaign}: {len(checked.problems)} problem(s) after {checked.records} record(s) were "
            "checked:\n  " + "\n  ".join(checked.problems)
        )
    how = "as DVC committed them and as their SHA256SUMS say" if checked.against_dvc else "by their SHA256SUMS"
    out(f"verify: {checked.records} records of {campaign} are whole, {how}")
    return 0
