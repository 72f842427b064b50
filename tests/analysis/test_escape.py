"""Text from records, tables and parameters in every output: hostile names, failure reasons and frame
names stay text in Markdown, HTML and XML, and drive no terminal."""

from __future__ import annotations

import html
import logging
import subprocess
import xml.etree.ElementTree as ET

import nbformat
import polars as pl
import pytest
from analysis_tables import analysed
from markdown_it import MarkdownIt
from nbconvert.filters.markdown import markdown2html

from benchlib import escape, logs
from benchlib.analysis import compare, load_tables
from benchlib.report import compare as compare_output, profiles as profile_text, render as report, summary, tables
from tests.conftest import FIXTURES, venv_env

IMG = "<img src=x onerror=\"document.title='pwned'\">"
SCRIPT = "<script>document.title='pwned'</script>"
HOSTILE = [IMG, SCRIPT, "](javascript:alert(1))", "**bold**", "`tick`", "a | b", "\x1b[31mred\x00\x0b", "# h", "1. i"]
CONTROLS = "\x1b\x00\x0b\r\x07\x9b\u202e"
TIDY = FIXTURES / "tidy"


def rendered_text(markdown: str) -> str:
    """What a reader sees of Markdown in the report (nbconvert) and the blog kit (markdown-it)."""
    pages = [markdown2html(markdown), MarkdownIt("commonmark").render(markdown)]
    for page in pages:  # no element but the paragraph: neither the payload's nor Markdown's
        assert "<img" not in page and "<script" not in page and "<a " not in page, page
        assert "<em>" not in page and "<strong>" not in page and "<code>" not in page and "<h1" not in page, page
    return pages[0]


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_text_is_shown_as_it_is(text):
    shown = rendered_text(escape.markdown(text)).strip().removeprefix("<p>").removesuffix("</p>")
    assert html.unescape(shown) == escape.printable(" ".join(text.split()))


def test_markdown_code_holds_backticks_and_tags():
    page = markdown2html(f"x {escape.markdown_code('`a` ' + SCRIPT)}")
    assert "<script" not in page and "<code>`a` &lt;script&gt;" in page, page


def test_html_plotly_and_terminal_text():
    assert escape.html(IMG) == "&lt;img src=x onerror=&quot;document.title=&#x27;pwned&#x27;&quot;&gt;"
    assert escape.plotly("<b>a</b> & b") == "&lt;b&gt;a&lt;/b&gt; &amp; b"
    assert escape.printable(f"a{CONTROLS}\tb\nc") == "a\\x1b\\x00\\x0b\\x0d\\x07\\x9b\\u202e\tb\nc"
    assert escape.printable("naïve ü 日本") == "naïve ü 日本"


def test_xml_text_is_what_xml_1_0_holds():
    text = escape.xml(f"{SCRIPT}{CONTROLS}\ud800 ok\t\n")
    assert text == f"{SCRIPT}\\x1b\\x00\\x0b\r\\x07\\x9b\u202e\\ud800 ok\t\n"
    element = ET.Element("case", name=text)
    element.text = text
    parsed = ET.fromstring(ET.tostring(element))  # a character XML forbids would raise here
    assert parsed.get("name") == text and parsed.text.replace("\n", "\r") == text.replace("\n", "\r")


def hostile_campaign(name: str, scenario: str, reason: str, tests: tuple[str, ...] = ()) -> compare.Campaign:
    """A real campaign's tables (of ``tests`` only, where given) with vxlan renamed to ``scenario`` and
    its first tcp_rr run failed with ``reason``, as a table may say though no record of benchlib would."""
    runs, metrics = load_tables(TIDY / name / "runs.parquet", TIDY / name / "metrics.parquet")
    if tests:
        runs, metrics = runs.filter(pl.col("test").is_in(tests)), metrics.filter(pl.col("test").is_in(tests))
    runs = runs.with_columns(pl.col("scenario").replace("vxlan", scenario))
    metrics = metrics.with_columns(pl.col("scenario").replace("vxlan", scenario))
    failed = runs.filter(scenario=scenario, test="tcp_rr")["run_id"][0]
    runs = runs.with_columns(
        outcome=pl.when(pl.col("run_id") == failed).then(pl.lit("failed")).otherwise("outcome"),
        failure_reason=pl.when(pl.col("run_id") == failed).then(pl.lit(reason)).otherwise("failure_reason"),
    )
    metrics = metrics.filter(pl.col("run_id") != failed)
    facts = pl.DataFrame(schema={c: pl.String for c in ("environment", "scenario", "test", "field", "value")})
    return compare.Campaign(name, runs, metrics, facts)


@pytest.fixture(scope="module")
def hostile_compare():
    scenario, reason = f"vx{IMG}**|`", f"\x1b[31m{SCRIPT}\x00\x0b"
    a = hostile_campaign("lab-default-002", scenario, reason, ("tcp_rr",))
    b = hostile_campaign("lab-default-003", scenario, reason, ("tcp_rr",))
    return compare.run(a, b), scenario, reason


def test_the_junit_file_is_xml_with_the_names_and_reasons_as_text(hostile_compare, tmp_path):
    res, scenario, _ = hostile_compare
    res = compare.Result(**{**res.__dict__, "b": f"b\x1b[31m{SCRIPT}"})
    path = compare_output.write_junit(res, tmp_path / "junit.xml", strict_setup=True)
    root = ET.parse(path).getroot()  # a malformed file raises here
    assert root.get("name") == f"benchlib compare lab-default-002 vs b\\x1b[31m{SCRIPT}"
    assert any(scenario in (c.get("classname") or "") for c in root.iter("testcase"))
    assert "\x1b" not in path.read_text(encoding="utf-8") and "\x00" not in path.read_text(encoding="utf-8")


def test_the_summary_sentences_escape_names_in_markdown_and_not_in_plain_text(hostile_compare):
    res, scenario, _ = hostile_compare
    text = summary.findings_markdown(res.rows, pl.DataFrame(), compare.stats.PRIMARY)
    assert IMG not in text and escape.markdown(scenario) in text
    page = rendered_text(text.replace("**", "").replace("- ", ""))
    assert "onerror=&quot;document.title='pwned'&quot;" in page
    runs = res.rows.select("scenario").with_columns(campaign=pl.lit("c"), environment=pl.lit("e"), test=pl.lit("t"))
    campaign = summary.campaign_text(runs.with_columns(outcome=pl.lit("ok")), res.rows, "host")
    assert escape.markdown(scenario) in campaign and IMG not in campaign
    plain = summary.campaign_text(runs.with_columns(outcome=pl.lit("ok")), res.rows, "host", markdown=False)
    assert scenario in plain and "**" not in plain.replace(scenario, "")


def test_profile_and_setup_sentences_escape_what_the_records_say():
    method = pl.DataFrame(
        {
            "environment": [f"env{IMG}"],
            "perf_version": [f"perf {SCRIPT}"],
            "kernel": ["6.1`x`"],
            "event": ["cpu-clock"],
            "frequency_hz": ["499"],
            "attribution": ["cpu"],
            "profiled_runs": [1],
            "failed": [0],
            "samples": [10],
            "kernel_symbols": [True],
        }
    )
    text = profile_text.method_text(method)
    assert IMG not in text and SCRIPT not in text and "6.1\\`x\\`" in text
    rendered_text(text.replace("`perf record -a -g`", ""))
    runs = pl.DataFrame({"environment": [f"e{SCRIPT}"], "nodes_share_kernel": [True]})
    assert SCRIPT not in report.shared_kernel_note(runs) and escape.markdown(f"e{SCRIPT}") in report.shared_kernel_note(
        runs
    )


def test_publication_tables_show_hostile_cells_headers_and_groups_as_text():
    df = pl.DataFrame({f"col{SCRIPT}": [IMG, f"a | b{CONTROLS}"], "group": [f"g{SCRIPT}", f"g{SCRIPT}"]})
    page = tables.html(tables.publication_table(df, group="group", title=IMG, note=SCRIPT))
    assert "<img" not in page and "<script" not in page
    assert "&lt;img src=x onerror=" in page and "&lt;script&gt;" in page
    assert "a | b\\x1b\\x00\\x0b\\x0d\\x07\\x9b\\u202e" in page and not set(CONTROLS) & set(page)


def test_the_report_contents_link_to_headings_that_carry_escaped_names():
    cell = nbformat.v4.new_markdown_cell(f"# Results\n## {escape.markdown('tcp_rr' + SCRIPT)}")
    nav = report.contents([cell])
    assert "<script" not in nav, nav
    assert '<a href="#tcp_rr%3Cscript%3Edocument.title=&#x27;pwned&#x27;%3C/script%3E">tcp_rr&lt;script' in nav, nav


def test_the_terminal_shows_control_characters_as_escapes(capsys):
    logs.setup(logs.NORMAL)
    try:
        logging.getLogger("benchlib").warning(f"reason: \x1b[31mred\x07\r{SCRIPT}")
    finally:
        logs.setup(logs.NORMAL)
    assert capsys.readouterr().err == f"reason: \\x1b[31mred\\x07\\x0d{SCRIPT}\n"


def test_benchlib_summary_refuses_a_name_from_the_tables_without_passing_its_control_characters(tmp_path):
    hostile = "vxlan\x1b]0;pwned\x07\x1b[2J"
    c = hostile_campaign("lab-default-003", hostile, "", ("tcp_rr",))
    analysis_dir, _ = analysed(c.runs, c.metrics, tmp_path)
    out = subprocess.run(
        ["benchlib", "summary", "--analysis", str(analysis_dir), "--report", str(tmp_path / "r.html")],
        cwd=tmp_path,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "'vxlan\\x1b]0;pwned\\x07\\x1b[2J' is not a name" in out.stderr, out.stderr
    assert "\x1b" not in out.stdout + out.stderr and "Traceback" not in out.stderr
