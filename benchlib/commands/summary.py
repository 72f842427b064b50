"""`benchlib summary`: what the analysed campaign found, in a few lines, and where the report is."""

from __future__ import annotations

from .common import ERRORS, add, out, whole_number


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "summary",
        help="print what the campaign found and where the report is",
        description="Print the analysed campaign in a few lines: its runs, the largest significant "
        "primary findings with their intervals, and the report's path. "
        "scripts/reproduce.sh ends with it.",
        examples=["benchlib summary", "benchlib summary --top 10"],
        exit_codes=f"0 printed; {ERRORS}: no analysis, or a partial one.",
    )
    s.add_argument("--analysis", default="data/analysis", help="what `benchlib analyse` wrote (default: %(default)s)")
    s.add_argument("--report", default="reports/report.html", help="the report's path (default: %(default)s)")
    s.add_argument(
        "--top", type=whole_number(1, 10_000), default=5, help="how many findings to list (default: %(default)s)"
    )
    s.set_defaults(func=run)


def run(args) -> int:
    from benchlib.analysis import analyse, resolve
    from benchlib.report import summary

    a = analyse.load(resolve(args.analysis))
    report = resolve(args.report)
    where = str(report) if report.exists() else f"{report} (not rendered yet: benchlib report)"
    out(summary.terminal_text(a.runs, a.comparisons, a.settings.baseline, where, args.top, a.precision))
    return 0
