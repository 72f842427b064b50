"""The default report and the compare report as a reader's browser shows them: headless Chromium
over the DevTools protocol, after plotly drew the figures.

Both reports are rendered from real campaigns' tidy tables (tests/fixtures/tidy). Screenshots of each
report's first screen, of the blog post (whole, and each of its figures with its caption) and of each
figure of the blog index are written to reports/screenshots/ (kept by CI as artefacts; the paths are printed).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import polars as pl
import pytest
from browser import CHROMIUM, Page

from benchlib.analysis import compare, load_tables
from benchlib.report import post, render as report
from benchlib.report.export import BLOG_PAGES
from benchlib.report.theme import BLOG_WIDTH

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "tidy"
SCREENSHOTS = REPO / "reports" / "screenshots"
WIDTH, HEIGHT = 1280, 900
# a reader's page with every disclosure closed: the findings, their figures and the short tables, at most
# a third of what the report measured when every table, note and figure was open on the page (31,644 px)
LENGTH_MAX = 10_548
POST_WIDTH = 800  # a blog column of BLOG_WIDTH px and its margins
DTYPES = {"str", "f64", "f32", "i64", "i32", "u32", "u64", "bool", "date", "null", "list[str]"}
UNIT = re.compile(r"\(.+\)|%")

# What the reader sees, read from the DOM after the scripts ran.
INSPECT = """(() => {
  const text = e => (e ? e.textContent.replace(/\\s+/g, ' ').replace(/¶/g, '').trim() : '');
  const top = e => e.getBoundingClientRect().top + window.scrollY;
  const h1 = [...document.querySelectorAll('h1')].map(h => ({text: text(h), id: h.id, top: top(h)}));
  const links = [...document.querySelectorAll('nav a[href^="#"]')].map(a => ({
    text: text(a), target: !!document.getElementById(decodeURIComponent(a.getAttribute('href').slice(1)))}));
  const tables = [...document.querySelectorAll('table')].map(t => [...t.rows].map(r => [...r.cells].map(text)));
  const figures = [...document.querySelectorAll('.plotly-graph-div')].map(gd => {
    const fig = gd.closest('figure');
    const titles = [...gd.querySelectorAll('text')].filter(t => /^[xy]\\d*title$/.test(t.getAttribute('class')));
    return {title: text(gd.querySelector('.gtitle')), top: top(gd),
            cartesian: gd._fullLayout._has('cartesian'),
            x: titles.filter(t => t.getAttribute('class').startsWith('x')).map(text),
            y: titles.filter(t => t.getAttribute('class').startsWith('y')).map(text),
            alt: fig ? fig.getAttribute('aria-label') : null,
            caption: fig ? text(fig.querySelector('figcaption')) : null};
  });
  const rerun = document.querySelector('aside.rerun');
  const header = document.querySelector('header.first-screen');
  const first_screen = header ? {takeaways: text(header.querySelector('.takeaways')),
    context: [...header.querySelectorAll('.context-label')].map(text),
    bottom: header.getBoundingClientRect().bottom + window.scrollY} : null;
  return {title: document.title, h1, links, tables, figures, rerun: rerun ? text(rerun) : null, first_screen,
          length: document.documentElement.scrollHeight,
          closed: [...document.querySelectorAll('details')].filter(d => !d.open).length,
          why: [...document.querySelectorAll('details.why')].map(d => text(d.querySelector('summary'))),
          resources: performance.getEntriesByType('resource').map(r => r.name)};
})()"""


# The blog index as a reader sees it: each figure's heading, whether its image loaded, its caption.
BLOG_INSPECT = """(() => {
  const text = e => (e ? e.textContent.replace(/\\s+/g, ' ').trim() : '');
  return {figures: [...document.querySelectorAll('h2')].map(h => {
    let img = null, caption = null, next = h.nextElementSibling;
    for (; next && next.tagName !== 'H2'; next = next.nextElementSibling) {
      img = img || next.querySelector('img');
      caption = caption || next.querySelector('em');
    }
    return {name: text(h), src: img && img.getAttribute('src'), loaded: !!img && img.complete && img.naturalWidth > 0,
            width: img ? img.getBoundingClientRect().width : 0, caption: text(caption)};
  })};
})()"""


# The blog post as a reader sees it: its headings, its lead, and each image with its drawn size, its
# caption (the paragraph after it) and the area of both on the page.
POST_INSPECT = """(() => {
  const text = e => (e ? e.textContent.replace(/\\s+/g, ' ').trim() : '');
  const box = e => { const r = e.getBoundingClientRect();
    return {x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, height: r.height}; };
  return {h1: text(document.querySelector('h1')), h2: [...document.querySelectorAll('h2')].map(text),
          lead: text(document.querySelector('h1 + p')), length: document.documentElement.scrollHeight,
          images: [...document.querySelectorAll('img')].map(img => {
            const next = img.closest('p').nextElementSibling, em = next && next.querySelector('em');
            const b = box(img), c = em ? box(next) : b;
            return {src: img.getAttribute('src'), alt: img.getAttribute('alt'), width: b.width, height: b.height,
                    loaded: img.complete && img.naturalWidth > 0, caption: text(em),
                    area: {x: b.x, y: b.y, width: b.width, height: c.y + c.height - b.y}};
          })};
})()"""


def build_compare(out: Path) -> Path:
    def campaign(name: str) -> compare.Campaign:
        runs, metrics = load_tables(FIXTURES / name / "runs.parquet", FIXTURES / name / "metrics.parquet")
        # the fixtures keep the tidy tables, not the raw records the setup facts are read from
        facts = pl.DataFrame(schema={c: pl.String for c in ("environment", "scenario", "test", "field", "value")})
        return compare.Campaign(name, runs, metrics, facts)

    return report.build_compare(compare.run(campaign("lab-default-002"), campaign("lab-default-003")), out)


@pytest.fixture(scope="module")
def pages(tmp_path_factory, default_report):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM}: not installed (the project installs chromium for kaleido and these tests)")
    out = tmp_path_factory.mktemp("browser")
    # the default report is the session's one (conftest.default_report), whose content test_report checks
    built = {"report": default_report["html"], "compare": build_compare(out / "compare" / "reports")}
    seen = {}
    with Page(WIDTH, HEIGHT) as page:
        for name, path in built.items():
            page.requests.clear()
            page.open(path)
            seen[name] = {**page.evaluate(INSPECT), "requests": list(page.requests), "path": path}
            shot = page.screenshot(SCREENSHOTS / f"{name}-first-screen.png")
            print(f"first screen of the {name} report: {shot}")
        index = built["report"].parent / "blog" / "index.html"
        page.requests.clear()
        page.open(index)
        seen["blog"] = {**page.evaluate(BLOG_INSPECT), "requests": list(page.requests), "path": index}
        print(f"first screen of the blog index: {page.screenshot(SCREENSHOTS / 'blog-index-first-screen.png')}")
        # each figure of the blog as the index shows it
        areas = page.evaluate(
            "[...document.querySelectorAll('img')].map(i => { const r = i.getBoundingClientRect(); "
            "return {name: i.getAttribute('src').replace(/\\.svg$/, ''), x: r.left + scrollX, y: r.top + scrollY, "
            "width: r.width, height: r.height}; })"
        )
        for a in areas:
            page.screenshot(SCREENSHOTS / "blog" / f"{a.pop('name')}.png", a)
        print(f"each blog figure: {SCREENSHOTS / 'blog'}/*.png ({len(areas)})")
    with Page(POST_WIDTH, HEIGHT) as page:  # the post at a blog column's width
        path = built["report"].parent / "blog" / f"{post.POST}.html"
        page.open(path)
        seen["post"] = {**page.evaluate(POST_INSPECT), "requests": list(page.requests), "path": path}
        print(f"the blog post: {page.whole_page(SCREENSHOTS / 'blog-post.png')}")
        for i, image in enumerate(seen["post"]["images"], start=1):
            shot = page.screenshot(SCREENSHOTS / f"blog-post-figure-{i}.png", image["area"])
            print(f"its figure {i}, {image['src']}, with its caption: {shot}")
    return seen


@pytest.mark.parametrize("name", ["report", "compare"])
def test_the_summary_is_the_first_section_with_the_findings_and_the_headline_figure_on_the_first_screen(pages, name):
    p = pages[name]
    first = p["h1"][0]
    expected = (
        "Network datapaths: bridge, veth-routed and vxlan against host (local-lab)"
        if name == "report"
        else "lab-default-003 against lab-default-002"
    )
    assert first["text"] == expected and first["top"] < HEIGHT / 4, p["h1"]
    if name == "report":  # the takeaways and the context strip on the first screen, the findings after them
        assert p["first_screen"]["takeaways"].startswith("The largest difference: "), p["first_screen"]
        assert {"Measured", "Machine", "Kernel", "Tools", "Run length", "Runs", "Report built from"} <= set(
            p["first_screen"]["context"]
        ), p["first_screen"]
        assert p["first_screen"]["bottom"] < HEIGHT, p["first_screen"]
        assert p["title"] == first["text"], p["title"]  # the tab and a bookmark read the report's title
        # long tables, the method's notes and the figures after each test's first behind closed disclosures
        assert p["closed"] >= 10, p["closed"]
        print(f"report length at {WIDTH} px, disclosures closed: {p['length']} px")
        assert p["length"] <= LENGTH_MAX, p["length"]
        # no blank stretch: a notebook cell that displays nothing is not on the page
        assert "jp-mod-noOutputs jp-mod-noInput" not in p["path"].read_text(), "an empty cell is on the page"
    # the headline figure follows the findings: on screen 1 of the compare page, by screen 2 of the report, whose
    # first screen holds its title, takeaways and context strip
    assert p["figures"] and p["figures"][0]["top"] < (2 if name == "report" else 1) * HEIGHT, p["figures"][0]
    assert "is significant" in p["figures"][0]["title"] or "are significant" in p["figures"][0]["title"]
    assert p["rerun"] and ("dvc repro" in p["rerun"] or "benchlib compare" in p["rerun"]), p["rerun"]


def test_the_sections_are_in_reading_order_and_the_contents_reach_them(pages):
    order = [h["text"] for h in pages["report"]["h1"]]
    for earlier, later in [
        ("Findings", "Significance vs the baseline"),
        ("Significance vs the baseline", "Results per test"),
        ("Results per test", "CPU profiles"),
        ("CPU profiles", "Setup, method and CPU normalization"),
    ]:
        assert order.index(earlier) < order.index(later), order
    for name in ("report", "compare"):
        links = pages[name]["links"]
        assert len(links) >= 5 and all(link["target"] for link in links), links
    texts = {link["text"] for link in pages["report"]["links"]}
    assert {"Caveats", "Setup", "Method", "tcp_rr"} <= texts, texts
    assert [link["text"] for link in pages["compare"]["links"]][-2:] == ["Setup", "Method"]


@pytest.mark.parametrize("name", ["report", "compare"])
def test_no_table_shows_a_dtype_row_quoted_strings_or_nulls(pages, name):
    tables = pages[name]["tables"]
    assert len(tables) >= 3
    for table in tables:
        for row in table:
            assert not (row and set(row) <= DTYPES), row
            assert not any(re.fullmatch(r'".*"', cell) or cell == "null" for cell in row), row


@pytest.mark.parametrize("name", ["report", "compare"])
def test_every_figure_has_axis_titles_with_units_alt_text_and_a_caption(pages, name):
    figures = pages[name]["figures"]
    assert len(figures) >= (10 if name == "report" else 1)
    for f in figures:
        assert f["alt"] and f["caption"], f
        if f["cartesian"]:
            assert f["x"] and f["y"], f
            assert not any("_" in t for t in f["x"] + f["y"]), f  # words, not column names
            assert any(UNIT.search(t) for t in f["x"] + f["y"]), f
        assert "iperf3" not in f["title"] or "iperf3" in f["caption"]


@pytest.mark.parametrize("name", ["report", "compare"])
def test_the_page_opens_offline(pages, name):
    p = pages[name]
    remote = [u for u in p["requests"] + p["resources"] if re.match(r"(https?|wss?):", u)]
    assert not remote, remote
    assert p["requests"][0] == p["path"].resolve().as_uri()


def test_the_blog_export_has_each_figure_with_its_caption(pages):
    blog = pages["report"]["path"].parent / "blog"
    figures = pages["report"]["path"].parent / "figures"
    names = sorted(p.stem for p in figures.glob("*.svg"))
    assert names and sorted(p.stem for p in blog.glob("*.md") if p.stem not in BLOG_PAGES) == names
    for name in names:
        md = (blog / f"{name}.md").read_text()
        image, caption = md.split("\n\n")[:2]
        assert image.startswith("![") and image.endswith(f"]({name}.svg)"), image
        assert re.search(r"\d", caption), caption
        assert (blog / f"{name}.svg").stat().st_size > 1000 and (blog / f"{name}.png").stat().st_size > 1000


def test_the_blog_index_shows_every_figure_with_its_caption_offline(pages):
    """reports/blog/index.html in the browser: one entry per exported figure, its image drawn from the
    file beside the page, its caption the one in the figure's snippet; nothing fetched from the network."""
    blog = pages["blog"]
    names = sorted(p.stem for p in (pages["report"]["path"].parent / "figures").glob("*.svg"))
    shown = blog["figures"]
    assert sorted(f["name"] for f in shown) == names
    for f in shown:
        assert f["src"] == f"{f['name']}.svg" and f["loaded"] and f["width"] > 300, f
        caption = (blog["path"].parent / f"{f['name']}.md").read_text().split("\n\n")[1]
        assert re.search(r"\d", f["caption"]) and f["caption"] == html.unescape(caption[1:-1]), f
    assert not [u for u in blog["requests"] if re.match(r"(https?|wss?):", u)]


def test_the_blog_post_opens_on_the_findings_and_its_figures_fit_a_column(pages):
    """reports/blog/post.html in the browser at a blog column's width: the report's title and takeaways,
    the setup, then 3 to 6 figures, each drawn from the PNG beside the post at BLOG_WIDTH px wide and at
    most post.MAX_HEIGHT px tall, none of a figure with a widget, each with a short caption; offline."""
    p, out = pages["post"], pages["report"]["path"].parent
    assert p["h1"] == pages["report"]["h1"][0]["text"], p["h1"]
    assert p["lead"].startswith("The largest difference: ") and p["h2"] == ["Setup and method", "Results"], p
    images = p["images"]
    assert 3 <= len(images) <= 6 and images[0]["src"] == "overview.png", images
    for image in images:
        name = Path(image["src"]).stem
        assert image["loaded"] and image["alt"], image
        # drawn at the column's width (and its 1 px border), no taller than a screen
        assert abs(image["width"] - (BLOG_WIDTH + 2)) <= 1 and image["height"] <= post.MAX_HEIGHT + 2, image
        assert 0 < len(image["caption"]) <= post.CAPTION_CHARS and re.search(r"\d", image["caption"]), image
        assert '"buttons"' not in (out / "figures" / f"{name}.html").read_text(), name  # no menu in the image
    print(
        "post figures (name, caption characters, height px at 700 px wide):",
        [(Path(i["src"]).stem, len(i["caption"]), round(i["height"] - 2)) for i in images],
        f"post length {p['length']} px",
    )
    assert not [u for u in p["requests"] if re.match(r"(https?|wss?):", u)]
