"""Rewrite the docs' view of the default campaign from its current output: the generated parts of
the study page (its facts table and its results) and the report's screenshot.

Run after `bash scripts/reproduce.sh`, from the project root: `uv run python scripts/docs_from_campaign.py`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from benchlib.analysis import analyse, project_root, resolve
from benchlib.base.errors import BenchlibError
from benchlib.base.files import write_atomically
from benchlib.commands.common import ERRORS, EXIT_ERROR, HelpFormatter, epilog
from benchlib.report import method, screenshot, study_page, summary
from benchlib.settings.loading import load_params

NAME = "docs_from_campaign.py"


class DocsError(BenchlibError, ValueError):
    """The campaign's output is missing or is not of one campaign."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python scripts/{NAME}",
        formatter_class=HelpFormatter,
        description="Rewrite the generated parts of a study page (between its `<!-- generated: facts ... -->` "
        "and `<!-- generated: results ... -->` markers and their end markers: the campaign's facts table, "
        "then its takeaways, medians, findings and interval levels) from what `benchlib analyse` wrote, and "
        "save the report's first screen (headless Chromium, "
        f"{screenshot.WIDTH} x {screenshot.HEIGHT} px) as the docs' screenshot. The prose outside the "
        "markers stays as written; run on its own output, it changes nothing. Run it after "
        "`bash scripts/reproduce.sh`, then review and commit the page and the image.",
        epilog=epilog(
            [
                f"uv run python scripts/{NAME}",
                f"uv run python scripts/{NAME} --image /tmp/report.png   # look at the screenshot before replacing the docs' one",
            ],
            f"0 page and screenshot written (or already this campaign's); {ERRORS}: no analysis or report, a report or preset of another "
            "campaign, a page without the markers, no Chromium.",
        ),
    )
    p.add_argument(
        "--analysis", default=analyse.ANALYSIS_DIR, help="what `benchlib analyse` wrote (default: %(default)s)"
    )
    p.add_argument("--report", default="reports/report.html", help="the rendered report (default: %(default)s)")
    p.add_argument("--params", default="params.yaml", help="the campaign's params file (default: %(default)s)")
    p.add_argument("--page", default="docs/studies/default-lab.md", help="the study page (default: %(default)s)")
    p.add_argument("--image", default="docs/images/report.png", help="the screenshot's path (default: %(default)s)")
    return p


def preset_of(params: Path) -> tuple[str, str]:
    """(the preset's path, where it came from): the file as committed (params.yaml: the committed
    default), a shipped preset that it is a copy of, or a file with edits of its own (as reproduce.sh
    tells them apart)."""
    root = project_root()
    text = params.read_bytes()
    shown = str(params.relative_to(root)) if params.is_relative_to(root) else str(params)
    committed = subprocess.run(["git", "-C", str(root), "show", f"HEAD:{shown}"], capture_output=True, timeout=10)
    if committed.returncode == 0 and committed.stdout == text:
        return shown, "the committed default" if shown == "params.yaml" else ""
    for shipped in sorted(root.glob("pipelines/*/params*.yaml")):
        if shipped.read_bytes() == text:
            return str(shipped.relative_to(root)), f"copied to {shown}"
    return shown, "with edits of its own, not committed"


def run(args) -> list[Path]:
    result = analyse.load(args.analysis)
    report = resolve(args.report)
    if not report.is_file():
        raise DocsError(f"{report}: no report; run `benchlib report` (or `bash scripts/reproduce.sh`)")
    strip = study_page.report_context(report.read_text(encoding="utf-8", errors="replace"))
    analysed = dict(summary.context(result.runs))["Campaign"]
    if strip.get("Campaign") != analysed:
        raise DocsError(
            f"{report}: a report of campaign {strip.get('Campaign', '(not named)')}, the analysis in "
            f"{resolve(args.analysis)} is of {analysed}; run `benchlib report` (or `dvc repro`)"
        )
    params = resolve(args.params)
    named = load_params(params).experiment.campaign
    if named != analysed:
        raise DocsError(
            f"{params} names campaign {named}, the analysis is of {analysed}: pass the --params it ran with"
        )
    page = resolve(args.page)
    try:
        before = page.read_text(encoding="utf-8")
    except OSError as exc:
        raise DocsError(f"{page}: cannot read the study page ({exc.strerror})") from None
    preset, note = preset_of(params)
    parts = study_page.parts(result, preset, note, strip.get("Report built from") or method.code_revision())
    after = study_page.splice(before, parts, str(page))
    png = screenshot.first_screen(report)
    image = resolve(args.image)
    # each written whole or not at all, and only when it changed: a second run leaves both as they are
    written = []
    if after != before:
        written.append(write_atomically(page, lambda tmp: tmp.write_text(after, encoding="utf-8")))
    if not image.is_file() or image.read_bytes() != png:
        image.parent.mkdir(parents=True, exist_ok=True)
        written.append(write_atomically(image, lambda tmp: tmp.write_bytes(png)))
    return written


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        written = run(args)
    except BenchlibError as exc:
        print(f"{NAME}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for path in written:
        print(f"wrote {path}")
    if not written:
        print("the page and the screenshot already show this campaign's output: nothing written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
