"""Hostile text in the pages a reader opens: `benchlib report` and the compare page, rendered from a real
campaign's tables whose failure reason, report title and CPU-profile frame names carry HTML, Markdown
and control characters (and, on the compare page, a campaign name and a scenario name, which the
commands would refuse at their entry but compare.run takes as given), opened in headless Chromium. No
payload runs or makes an element; each is shown as the text it is. The compare's JUnit file stays XML."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl
import pytest
import yaml
from browser import CHROMIUM, Page

from benchlib.analysis import analyse, compare
from benchlib.report import compare as compare_output, render as report
from benchlib.tables import tidy
from tests.conftest import REPO, venv_env
from tests.support.analysis_tables import settings
from tests.support.hostile import IMG, SCRIPT, hostile_campaign
from tests.support.once import made_once
from tests.support.profile_tables import VXLAN_RATE, profile_tables

pytestmark = pytest.mark.slow

SCENARIO = "vxlan"  # a name in the tables follows the name rule, or `benchlib report` refuses them
COMPARED = f"vx{IMG}**|`"  # replaces vxlan in the tables handed to compare.run
REASON = f"\x1b[31m{SCRIPT}\x00\x0b"  # a failed run's failure reason
FRAME = "<img src=y onerror=\"document.title='pwned'\">[click me](javascript:alert(1))"  # ends every frame of SCENARIO
TITLE = f"Lab {SCRIPT} **report**"

# What the payloads could have done, and what the reader sees of them.
# every disclosure opened first, as a reader would to see what it holds
INSPECT = """(() => (document.querySelectorAll('details').forEach(d => { d.open = true; }), {
  title: document.title,
  payload_elements: document.querySelectorAll('img[src="x"], img[src="y"], [onerror], a[href^="javascript"]').length,
  scripts_with_payload: [...document.scripts].filter(s => s.textContent.includes("document.title='pwned'")
                                                       && !s.textContent.includes('"data"')).length,
  text: document.body.innerText,
  links: [...document.querySelectorAll('nav a[href^="#"]')].map(a => ({
    text: a.textContent, target: !!(document.getElementById(a.getAttribute('href').slice(1))
                                    || document.getElementById(decodeURIComponent(a.getAttribute('href').slice(1))))})),
}))()"""


def hostile_tables(tmp: Path) -> Path:
    """The real lab-default-003 tables with SCENARIO, REASON and FRAME in them, analysed as `benchlib
    analyse` does (CPU profiles of host and SCENARIO from the captured perf output): the analysis dir."""
    c = hostile_campaign("lab-default-003", SCENARIO, REASON)
    runs, metrics = c.runs, c.metrics
    stacks, profile_runs = profile_tables(
        {"host": "host", SCENARIO: "veth-routed"}, runs_each=3, rates={SCENARIO: VXLAN_RATE}
    )
    stacks = stacks.with_columns(
        stack=pl.when(pl.col("scenario") == SCENARIO)
        .then(pl.col("stack").str.replace_all(";", FRAME + ";", literal=True) + FRAME)
        .otherwise("stack")
    )
    tidy.write_tables(runs, metrics, tmp)
    result = analyse.run(runs, metrics, settings(), profile_stacks=stacks, profile_runs=profile_runs)
    return analyse.write(result, tmp / "analysis", tmp / "runs.parquet", tmp / "metrics.parquet")


def project(tmp: Path) -> Path:
    """A project to run `benchlib report` in: this one's pipeline, notebooks and reference data, its
    params with the campaign of the tables and a hostile report title."""
    root = tmp / "project"
    (root / "data").mkdir(parents=True)
    for name in ("dvc.yaml", "notebooks", "pipelines", "data/reference"):
        os.symlink(REPO / name, root / name)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["experiment"]["campaign"] = "lab-default-003"
    params["report"]["title"] = TITLE
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return root


def benchlib(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["benchlib", *args], cwd=root, env=venv_env(), capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """What Chromium shows of the hostile report, blog and compare pages, rendered and inspected once
    for the session (a render takes a minute on 2 cores)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM}: not installed (the project installs chromium for kaleido and these tests)")
    seen = made_once(tmp_path_factory, "hostile-pages", inspect_pages) / "seen.json"
    return json.loads(seen.read_text(encoding="utf-8"))


def inspect_pages(tmp: Path) -> None:
    """The hostile report, blog and compare pages made in ``tmp``, and what Chromium shows of each in
    <tmp>/seen.json."""
    root = project(tmp)
    analysis_dir = hostile_tables(root / "data")
    out = root / "reports"
    made = benchlib(root, "report", "--analysis", str(analysis_dir), "--out-dir", str(out))
    assert made.returncode == 0, made.stderr
    a = hostile_campaign("lab-default-002", COMPARED, REASON)
    b = hostile_campaign("lab-default-003", COMPARED, REASON)
    res = compare.run(a, compare.Campaign(f"lab-default-003{IMG}", b.runs, b.metrics, b.facts))
    built = {
        "report": out / "report.html",
        "blog": out / "blog" / "index.html",
        "compare": report.build_compare(res, tmp / "compare"),
    }
    seen: dict = {"junit": compare_output.write_junit(res, tmp / "junit.xml")}
    with Page() as page:
        for name, path in built.items():
            page.open(path)
            seen[name] = page.evaluate(INSPECT)
    (tmp / "seen.json").write_text(json.dumps(seen, default=str), encoding="utf-8")


@pytest.mark.parametrize("name", ["report", "blog", "compare"])
def test_no_payload_runs_or_makes_an_element(pages, name):
    p = pages[name]
    assert p["title"] != "pwned" and p["payload_elements"] == 0 and p["scripts_with_payload"] == 0, p["title"]
    assert "&lt;" not in p["text"] and "&amp;" not in p["text"]  # nothing escaped twice


def test_the_report_shows_the_names_reasons_frames_and_title_as_text(pages):
    p = pages["report"]
    assert p["title"] == TITLE
    assert "\\x1b[31m" + SCRIPT in p["text"]  # the failure reason in the caveats, its ESC as an escape
    assert FRAME in p["text"]  # a frame named by the CPU-profile sentences


def test_the_compare_page_and_its_junit_keep_the_names_as_text(pages):
    assert f"lab-default-003{IMG} against lab-default-002" in pages["compare"]["text"]
    links = pages["compare"]["links"]  # the contents reach the heading that carries the name
    assert links[0]["text"] == f"lab-default-003{IMG} against lab-default-002" and all(x["target"] for x in links), (
        links
    )
    root = ET.parse(pages["junit"]).getroot()  # a control character in a reason would make it malformed
    assert root.get("name") == f"benchlib compare lab-default-002 vs lab-default-003{IMG}"
    assert any(COMPARED in (c.get("classname") or "") for c in root.iter("testcase"))
