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
from markdown_it import MarkdownIt
from nbconvert.filters.markdown import markdown2html

from benchlib.analysis import analyse, compare
from benchlib.base import escape, logs
from benchlib.report import (
    compare as compare_output,
    export,
    method,
    post,
    profiles as profile_text,
    render as report,
    summary,
    tables,
)
from benchlib.report.prose import PLAIN
from tests.conftest import FIXTURES, venv_env
from tests.support.analysis_tables import analysed, settings
from tests.support.hostile import IMG, SCRIPT, ParsedPage, hostile_campaign, other_schemes
from tests.support.profile_tables import VXLAN_RATE, profile_tables

HOSTILE = [IMG, SCRIPT, "](javascript:alert(1))", "**bold**", "`tick`", "a | b", "\x1b[31mred\x00\x0b", "# h", "1. i"]
# Markdown that makes a link, an image or an element, plainly or disguised, and Markdown's other markup
LINKS = [
    "[click me](javascript:alert(5))",
    "![x](javascript:alert(1))",
    "[x]: javascript:alert(2) [x]",
    "<javascript:alert(3)>",
    "<a href=javascript:alert(4)>raw</a>",
    "[e](JaVaScRiPt:alert(6)) [f](java&#x09;script:alert(7)) [g](&#106;avascript:alert(8))",
    "[ok](http://ok.example)",
    "www.example.com http://ok.example/x a@b.example",
    "**b** _i_ `c` ~~s~~ $x$ {y}",
]
CONTROLS = "\x1b\x00\x0b\r\x07\x9b\u202e"
TIDY = FIXTURES / "tidy"


def rendered_text(markdown: str) -> str:
    """What a reader sees of Markdown in the report (nbconvert) and the blog kit (markdown-it)."""
    pages = [markdown2html(markdown), MarkdownIt("commonmark").render(markdown)]
    for page in pages:  # no element but the paragraph: neither the payload's nor Markdown's
        assert "<img" not in page and "<script" not in page and "<a " not in page, page
        assert "<em>" not in page and "<strong>" not in page and "<code>" not in page and "<h1" not in page, page
    return pages[0]


@pytest.mark.parametrize("text", HOSTILE + LINKS)
def test_page_text_is_shown_as_it_is_in_markdown_and_in_html(text):
    shown = rendered_text(escape.page(text)).strip().removeprefix("<p>").removesuffix("</p>")
    assert html.unescape(shown) == escape.printable(" ".join(text.split()))
    # the same text in HTML that no Markdown renders (an element, an attribute) reads the same
    assert html.unescape(escape.page(text)) == escape.printable(" ".join(text.split()))
    assert "<" not in escape.page(text) and '"' not in escape.page(text)


def test_page_text_after_a_bracket_the_page_wrote_makes_no_link_and_no_definition():
    for text in ("(javascript:alert(1))", ": javascript:alert(1)"):
        page = markdown2html(f"[x]{escape.page(text)}\n\n[x]")
        assert "<a" not in page, page


def test_code_holds_backticks_and_tags():
    page = markdown2html(f"x {escape.code('`a` ' + SCRIPT)}")
    assert "<script" not in page and "<code>`a` &lt;script&gt;" in page, page


def test_page_plotly_and_terminal_text():
    assert escape.page(IMG) == "&lt;img src=x onerror=&quot;document.title=&#x27;pwned&#x27;&quot;&gt;"
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
    assert IMG not in text and escape.page(scenario) in text
    page = rendered_text(text.replace("**", "").replace("- ", ""))
    assert "onerror=&quot;document.title='pwned'&quot;" in page
    runs = res.rows.select("scenario").with_columns(campaign=pl.lit("c"), environment=pl.lit("e"), test=pl.lit("t"))
    campaign = summary.campaign_text(runs.with_columns(outcome=pl.lit("ok")), res.rows, "host")
    assert escape.page(scenario) in campaign and IMG not in campaign
    plain = summary.campaign_text(runs.with_columns(outcome=pl.lit("ok")), res.rows, "host", prose=PLAIN)
    assert scenario in plain and "**" not in plain.replace(scenario, "")


def test_profile_and_setup_sentences_escape_what_the_records_say():
    profiled = pl.DataFrame(
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
    text = profile_text.method_text(profiled)
    assert IMG not in text and SCRIPT not in text and "6.1&#96;x&#96;" in text
    rendered_text(text.replace("`perf record -a -g`", ""))
    runs = pl.DataFrame({"environment": [f"e{SCRIPT}"], "nodes_share_kernel": [True]})
    assert SCRIPT not in method.shared_kernel_note(runs) and escape.page(f"e{SCRIPT}") in method.shared_kernel_note(
        runs
    )


def test_publication_tables_show_hostile_cells_headers_and_groups_as_text():
    df = pl.DataFrame({f"col{SCRIPT}": [IMG, f"a | b{CONTROLS}"], "group": [f"g{SCRIPT}", f"g{SCRIPT}"]})
    page = tables.html(tables.publication_table(df, group="group", title=IMG, note=SCRIPT))
    assert "<img" not in page and "<script" not in page
    assert "&lt;img src=x onerror=" in page and "&lt;script&gt;" in page
    assert "a | b\\x1b\\x00\\x0b\\x0d\\x07\\x9b\\u202e" in page and not set(CONTROLS) & set(page)


def test_the_report_contents_link_to_headings_that_carry_escaped_names():
    cell = nbformat.v4.new_markdown_cell(f"# Results\n## {escape.page('tcp_rr' + SCRIPT)}")
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


MARK = "markedframe"  # ends every frame of vxlan's profile; each test puts its text in its place


@pytest.fixture(scope="module")
def profiled():
    """lab-default-003's tables analysed with CPU profiles of host and vxlan (the captured perf output of
    host and veth-routed), every frame of vxlan's ending in MARK, and its failed run's reason MARK."""
    c = hostile_campaign("lab-default-003", "vxlan", MARK)
    stacks, profile_runs = profile_tables(
        {"host": "host", "vxlan": "veth-routed"}, runs_each=3, rates={"vxlan": VXLAN_RATE}
    )
    stacks = stacks.with_columns(
        stack=pl.when(pl.col("scenario") == "vxlan")
        .then(pl.col("stack").str.replace_all(";", MARK + ";", literal=True) + MARK)
        .otherwise("stack")
    )
    return analyse.run(c.runs, c.metrics, settings(), profile_stacks=stacks, profile_runs=profile_runs)


def pages(result, text: str) -> dict[str, str]:
    """{page: its HTML} of what the report and the blog post make of ``text`` in a frame name, a failed
    run's reason, the kernel and a tool's version: the report's findings with their CPU-profile
    disclosures (notebooks/00_summary and 05_cpu_profiles) rendered by nbconvert's Markdown filter as
    the report is, its first screen, and the post rendered by markdown-it as post.html is (alone, and as
    export.blog_html writes it)."""
    s = result.settings
    runs = result.runs.with_columns(
        pl.col("failure_reason").str.replace(MARK, text, literal=True),
        kernel=pl.lit(f"6.1 {text}"),
        tool_version=pl.lit(f"2.7 {text}"),
    )
    parts = result.profile_attribution.with_columns(pl.col("name").str.replace(MARK, text, literal=True))
    why = profile_text.explanations({**result.profile_tables(), "profile_attribution": parts}, s.baseline)
    assert why["sentence"].str.contains(text, literal=True).any()  # the text reached the sentences
    findings = summary.summary_markdown(runs, result.comparisons, result.families, s, explanations=why, campaign=False)
    explained = tables.collapsed(f"sentences of {text}", summary.explained_markdown(result.comparisons, why))
    why_figure = profile_text.why_figure("tcp_rr", "vxlan")
    text_post = post.post_markdown(
        runs, result.comparisons, result.families, s, heights={why_figure: 400.0}, explanations=why
    )
    return {
        "report findings": markdown2html(f"# Findings\n\n{findings}\n\n## What the profiles say\n{explained}"),
        "report first screen": summary.first_screen_html(runs, result.comparisons, s.baseline),
        "post": MarkdownIt("commonmark").render(text_post),
        "post.html": export.blog_html(f"post {text}", text_post),
    }


@pytest.mark.parametrize("text", [*LINKS, IMG, SCRIPT])
def test_text_from_the_records_makes_no_link_and_no_element_in_the_report_or_the_post(profiled, text):
    benign, hostile = pages(profiled, "plain"), pages(profiled, text)
    for name, page in hostile.items():
        assert not other_schemes(page), (name, other_schemes(page))
        assert ParsedPage(page).elements == ParsedPage(benign[name]).elements, name  # no element from the text
        assert " ".join(text.split()) in ParsedPage(page).text, name  # shown as it is


HIDDEN_SCRIPT = [
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    " java&#x09;script:alert(1)",
    "java&#10;script:alert(1)",
    "&#106;avascript:alert(1)",
    "&#x01;javascript:alert(1)",
    "data:text/html,&lt;script&gt;alert(1)&lt;/script&gt;",
    "vbscript:msgbox(1)",
    "file:///etc/passwd",
]


@pytest.mark.parametrize("target", HIDDEN_SCRIPT)
def test_links_leaves_no_target_of_another_scheme_than_http(target):
    page = (
        f'<p><a href="{target}">a</a> <img src=\'{target}\' alt="i"/> <a href={target.strip()}>b</a>'
        f'<svg><a xlink:href="{target}"><text>s</text></a></svg><img srcset="a.png 1x, {target} 2x"></p>'
    )
    assert len(other_schemes(page)) >= 4  # the check sees them as a browser does (in srcset a tab splits one)
    out = escape.links(page)
    assert not other_schemes(out), out
    assert ParsedPage(out).text == ParsedPage(page).text and out.count("<a") == page.count("<a")  # the text stays


def test_links_leaves_http_anchors_files_scripts_and_styles_as_they_are():
    page = (
        '<!DOCTYPE html><html><head><script type="text/javascript">var a = \'<a href="javascript:x">\';</script>'
        "<style>a { background: url(x.png) }</style></head><body>"
        '<a href="https://example.org/a?b=1&amp;c=2">x</a> <a href="#Findings">y</a> <img src="overview.png" />'
        '<a href="HTTP://EXAMPLE.ORG">z</a><!-- <a href="javascript:x"> --></body></html>'
    )
    assert escape.links(page) == page


def test_the_report_renderers_keep_no_javascript_link_the_page_makes():
    # a link of the page's own that a renderer would keep (nbconvert's mistune keeps every scheme)
    made = markdown2html("[a](javascript:alert(1)) <a href='JaVaScRiPt:alert(2)'>b</a>")
    assert len(other_schemes(made)) == 2
    assert not other_schemes(escape.links(made))
    assert not other_schemes(export.blog_html("t", "[a](javascript:alert(1)) <a href='vbscript:x'>b</a>"))
