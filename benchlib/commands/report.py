"""`benchlib report`: the analysis rendered as the HTML report by the notebooks."""

from __future__ import annotations

from pathlib import Path

from ..settings.project import project_root
from .common import ERRORS, add, log, out, params, whole_number


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "report",
        help="render the analysis as the HTML report (notebooks, figures)",
        description="Execute the notebooks in notebooks/ with papermill on the tables "
        "`benchlib analyse` wrote: setup, method, CPU normalization, significance "
        "against the baseline, figures (HTML/SVG/PNG), the published reference "
        "numbers and the mesh section. Writes reports/notebooks/*.ipynb, "
        "reports/figures/, reports/significance.csv, reports/report.html (code "
        "hidden, opens offline) and reports/blog/ (each figure with its caption, and "
        "post.md, the findings as a blog post), all in a hidden staging directory in the output "
        "directory first, swapped in once whole: an interrupted or failing report leaves the previous one "
        "as it was. Computes no statistic of its own.",
        examples=["benchlib report", "benchlib report --out-dir /tmp/reports --jobs 1"],
        exit_codes=f"0 the report is written; {ERRORS}: a missing or partial analysis, a notebook that failed; "
        "130 interrupted (Ctrl-C): the previous report is unchanged.",
    )
    s.add_argument("--analysis", default="data/analysis", help="the analysis tables (default: data/analysis)")
    s.add_argument("--out-dir", help="output directory (default: reports)")
    s.add_argument(
        "--jobs",
        type=whole_number(1, 1024),
        help="notebooks executed at once, each in its own kernel (default: the number of CPUs; 1 to save memory)",
    )
    s.set_defaults(func=run, interrupted="the previous report is unchanged; run the same command to write the new one")


def run(args) -> int:
    from benchlib.analysis import analyse
    from benchlib.report import render as report  # heavy imports (papermill, nbconvert) only when reporting

    p = params(args)
    root = project_root()
    out_dir = Path(args.out_dir) if args.out_dir else root / "reports"
    analyse.load(args.analysis)  # a missing or partial analysis is named here, not in a notebook's traceback
    notebooks = [root / "notebooks" / name for name in report.NOTEBOOKS]
    log.info(f"report: executing {len(notebooks)} notebooks into {out_dir}")
    title = p.report.title if "title" in p.report.model_fields_set else None  # unset: the report's heading
    html = report.build_report(
        notebooks,
        out_dir,
        {"analysis_dir": str(args.analysis), "title": title or ""},
        title=title,
        jobs=args.jobs,
    )
    out(f"report: {html}")
    return 0
