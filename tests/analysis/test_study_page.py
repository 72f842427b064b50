"""The study page's generated parts, built from a real campaign's analysis (lab-default-003), spliced
between their markers with the prose around them kept; and scripts/docs_from_campaign.py run on the
session's rendered default report, which also takes the screenshot in headless Chromium."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchlib.analysis import load_tables
from benchlib.report import format as fmt, study_page, summary
from tests.support.analysis_tables import analysed

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "tidy" / "lab-default-003"
PAGE = REPO / "docs" / "studies" / "default-lab.md"
SCRIPT = REPO / "scripts" / "docs_from_campaign.py"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    runs, metrics = load_tables(FIXTURE / "runs.parquet", FIXTURE / "metrics.parquet")
    return analysed(runs, metrics, tmp_path_factory.mktemp("real"))[1]


@pytest.fixture(scope="module")
def parts(real):
    return study_page.parts(real, "params.yaml", "the committed default", "git 1a2b3c4")


def outside(page: str) -> str:
    """The page without what its markers enclose: the prose a splice must keep."""
    return re.sub(r"<!-- generated: (\w+)\b.*?<!-- end generated: \1 -->", "", page, flags=re.S)


def test_the_facts_are_the_runs_as_recorded(parts, real):
    facts = parts[study_page.FACTS]
    rows = dict(re.findall(r"^\| (\w[\w ]*) \| (.*) \|$", facts, re.M))
    assert rows["Preset"] == "<code>params.yaml</code> (the committed default)"
    assert rows["Campaign"] == "lab-default-003"
    assert rows["Tools"] == "netperf 2.7.0"
    first, last = real.runs["started_at"].min(), real.runs["ended_at"].max()
    assert rows["Measured"] == fmt.time_span(first, last)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d-\d\d:\d\d UTC", rows["Measured"]), rows["Measured"]
    assert rows["Runs"].startswith("n = 10 per configuration, 160 of 160 ok")
    assert rows["Commit"] == "<code>git 1a2b3c4</code> (the code the report was built from)"


def test_the_medians_are_the_analysis_medians_of_each_tests_headline_metric(parts, real):
    results = parts[study_page.RESULTS]
    table = [line for line in results.splitlines() if line.startswith("|")]
    # the labels are escaped for Markdown, as every name the page takes from the tables
    header = [re.sub(r"\\(.)", r"\1", c.strip()) for c in table[0].strip("|").split("|")]
    assert header == [
        "scenario",
        "TCP connect/request/response (conn/s)",
        "TCP request/response (trans/s)",
        "TCP stream, 1 flow (Gbit/s)",
        "TCP stream, 4 flows (Gbit/s)",
    ]
    rows = {r[0]: r[1:] for r in ([c.strip() for c in line.strip("|").split("|")] for line in table[2:])}
    assert list(rows) == [f"<code>{s}</code>" for s in ("host", "bridge", "veth-routed", "vxlan")]
    host_rr = real.summary.filter(scenario="host", test="tcp_rr", metric="transaction_rate")["median"].item()
    assert rows["<code>host</code>"][1] == fmt.reading(host_rr)
    assert "The median of each configuration's successful runs, in each test's headline metric:" in results


def test_the_findings_are_worded_as_the_report_words_them(parts, real):
    results = parts[study_page.RESULTS]
    s = real.settings
    assert results.startswith(summary.escape.page(" ".join(summary.takeaways(real.comparisons, s.baseline))))
    assert summary.findings_head(real.comparisons, s) + ":" in results
    assert "9 of 12 comparisons significant after Holm" in results
    top = summary.ordered_findings(real.comparisons).row(0, named=True)
    assert f"- {summary.finding_sentence(top, 12, cpu_note=False)}" in results
    assert summary.levels_text(real.families, s) in results
    assert "<details" not in results  # no CPU-profile disclosure: the page has no profiles to open


def test_a_splice_replaces_only_between_the_markers_and_again_changes_nothing(parts):
    page = PAGE.read_text()
    once = study_page.splice(page, parts)
    assert once != page and outside(once) == outside(page)
    assert study_page.splice(once, parts) == once
    for name in study_page.PARTS:
        assert once.count(study_page.begin(name)) == 1 and once.count(study_page.end(name)) == 1
    assert parts[study_page.RESULTS] in once


@pytest.mark.parametrize("broken", ["missing", "twice", "reversed"])
def test_a_page_without_a_parts_markers_is_refused_naming_them(parts, broken):
    page = "# Study\n\n" + "".join(
        f"{study_page.begin(n)}\n\nold\n\n{study_page.end(n)}\n\nprose\n\n" for n in study_page.PARTS
    )
    facts = f"{study_page.begin('facts')}\n\nold\n\n{study_page.end('facts')}\n"
    page = {
        "missing": page.replace(facts, ""),
        "twice": page + facts,
        "reversed": page.replace(facts, f"{study_page.end('facts')}\n\nold\n\n{study_page.begin('facts')}\n"),
    }[broken]
    with pytest.raises(study_page.StudyPageError, match=r"docs/x\.md: .* generated part 'facts'; it needs one line"):
        study_page.splice(page, parts, "docs/x.md")


def test_the_report_context_names_the_campaign_and_the_commit(real):
    html = summary.first_screen_html(real.runs, real.comparisons, "host", "git 1a2b3c4")
    strip = study_page.report_context(html)
    assert strip["Campaign"] == "lab-default-003" and strip["Report built from"] == "git 1a2b3c4"


def _docs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_the_script_says_in_one_line_what_is_missing(tmp_path):
    missing = _docs("--analysis", str(tmp_path / "none"), "--page", str(tmp_path / "page.md"))
    assert missing.returncode == 2 and missing.stdout == "", missing
    assert re.fullmatch(
        r"docs_from_campaign\.py: .*none: no complete analysis .*run `benchlib analyse`.*\n", missing.stderr
    )
    helped = _docs("--help")
    assert helped.returncode == 0 and "Exit codes: 0 page and screenshot written" in helped.stdout


@pytest.mark.slow
def test_the_script_rewrites_the_page_and_takes_the_screenshot_and_a_rerun_changes_nothing(tmp_path, default_report):
    reports = default_report["out"]
    analysis = reports.parent / "data" / "analysis"
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["experiment"]["campaign"] = default_report["campaign"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    page, image = tmp_path / "default-lab.md", tmp_path / "images" / "report.png"
    page.write_text(PAGE.read_text())
    args = [
        "--analysis",
        str(analysis),
        "--report",
        str(default_report["html"]),
        "--params",
        str(tmp_path / "params.yaml"),
    ]
    args += ["--page", str(page), "--image", str(image)]

    first = _docs(*args)
    assert first.returncode == 0, first.stderr
    written = page.read_text()
    assert outside(written) == outside(PAGE.read_text())
    assert "| Campaign | lab-default-003 |" in written
    # the session's report declares a contrast (vxlan against bridge): its findings are the page's too
    assert "13 of 16 comparisons significant after Holm" in written and "- vxlan vs bridge, tcp_rr" in written
    assert "with edits of its own" in written  # a params file that is no shipped preset says so
    png = image.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1400, 900)
    print(f"screenshot of the report's first screen: {image}")

    again = _docs(*args)
    assert again.returncode == 0 and page.read_text() == written, again.stderr
    assert f"wrote {page}" not in again.stdout  # an unchanged page is not rewritten

    other = _docs(*args[:4], "--params", str(REPO / "params.yaml"), *args[6:])
    assert other.returncode == 2 and "names campaign" in other.stderr and other.stderr.count("\n") == 1, other.stderr
    gone = _docs(*args[:2], "--report", str(tmp_path / "report.html"), *args[4:])
    assert gone.returncode == 2 and "no report; run `benchlib report`" in gone.stderr, gone.stderr
