"""The blog post: reports/blog/post.md (and post.html) that a writer pastes as it is. A lead paragraph
(the report's takeaways), a setup paragraph (where, with what and how the runs were measured), then the
few figures that carry the findings, each with a caption short enough to sit under an image.

The figures are chosen by rule from the headline comparisons and the figures the report exported:
the overview of every scenario x test, then for each significant finding, largest first, its test's
headline figure and the figure of what changed in its CPU profile, as long as they are not taller
than a reader sees at once. post_markdown is a pure function of the analysis and of the exported
figures' heights; write_post gathers them after the notebooks ran and writes the files.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import polars as pl

from ..analysis import analyse, paired, stats
from ..base import escape
from ..settings.analysis import DEFAULT_ANALYSIS, Analysis
from . import export, figures, profiles
from .format import change, interval_wording, level, missing, unit
from .prose import MARKDOWN
from .summary import (
    FINDING,
    INCONCLUSIVE,
    NEGLIGIBLE,
    NOISE,
    context,
    degenerate_text,
    headline_rows,
    metric_label,
    takeaways,
    title_text,
    why_clause,
)
from .theme import BLOG_WIDTH

POST = "post"  # reports/blog/post.md and post.html
MIN_FIGURES, MAX_FIGURES = 3, 6
MAX_HEIGHT = 900  # px at BLOG_WIDTH: taller, an image no longer fits a reader's screen beside its caption
CAPTION_CHARS = 250
OVERVIEW, HEADLINE, WHY = "overview", "headline", "why"


@dataclass(frozen=True)
class PostFigure:
    """A figure of the post: its file name (no extension), alt text and caption, in Markdown."""

    name: str
    alt: str
    caption: str


def choose(rows: pl.DataFrame, heights: Mapping[str, float]) -> list[tuple[str, str, dict | None]]:
    """(name, kind, comparison) of the post's figures among the exported ones (``heights``: name -> px
    tall at BLOG_WIDTH), at most MAX_FIGURES: the overview; then per finding of ``rows`` (headline_rows),
    its test's headline figure and its why figure; then, to reach MIN_FIGURES, the headline figures of
    the tests without a finding, largest change first. A figure taller than MAX_HEIGHT is left out."""
    fits = {n for n, h in heights.items() if h <= MAX_HEIGHT}
    chosen: list[tuple[str, str, dict | None]] = []

    def add(name: str, kind: str, r: dict | None) -> None:
        if name in fits and len(chosen) < MAX_FIGURES and name not in {c[0] for c in chosen}:
            chosen.append((name, kind, r))

    if len(rows):
        add(figures.OVERVIEW, OVERVIEW, None)
    for r in rows.iter_rows(named=True):
        if r["kind"] == FINDING:
            add(figures.headline_name(r["test"], r["metric"]), HEADLINE, r)
            # named with the environment where the profiles span several
            for name in (
                profiles.why_figure(r["test"], r["scenario"], r["environment"]),
                profiles.why_figure(r["test"], r["scenario"]),
            ):
                if name in fits:
                    add(name, WHY, r)
                    break
        elif len(chosen) < MIN_FIGURES:
            add(figures.headline_name(r["test"], r["metric"]), HEADLINE, r)
    return chosen


def visible(markdown: str) -> str:
    """Markdown inline text as a reader sees it: its backslash escapes and character references undone."""
    return html.unescape(re.sub(r"\\(.)", r"\1", markdown))


def clip(text: str, limit: int = CAPTION_CHARS) -> str:
    """Markdown ``text`` cut at a word to at most ``limit`` visible characters, an ellipsis where cut."""
    if len(visible(text)) <= limit:
        return text
    words = text.split(" ")
    while len(words) > 1:
        words.pop()
        cut = " ".join(words).rstrip(",;:") + "…"
        if len(visible(cut)) <= limit:
            return cut
    # not through a character reference (escape.page's "&#91;"), which would show as its pieces
    return re.sub(r"&#?\w*$", "", words[0][: limit - 1]) + "…"


def _fit(head: str, parts: list[str], limit: int = CAPTION_CHARS) -> str:
    """``head`` and as many of ``parts`` (joined by "; ") as fit in ``limit`` visible characters, the
    others counted."""
    for k in range(len(parts), -1, -1):
        rest = len(parts) - k
        text = head + "; ".join(parts[:k] + ([f"{rest} more in the report"] if rest else [])) + "."
        if len(visible(text)) <= limit:
            return text
    return clip(head.rstrip(": ") + ".", limit)


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _runs(rows: pl.DataFrame) -> str:
    """ "n = 10 runs each" (or "n = 6-10 runs") of the comparisons ``rows``, both sides."""
    ns = pl.concat([rows["n"], rows["n_base"]]).drop_nulls()
    lo, hi = (int(ns.min()), int(ns.max())) if len(ns) else (0, 0)  # pyright: ignore[reportArgumentType] (polars types Series.min loosely)
    return f"n = {lo} runs each" if lo == hi else f"n = {lo}-{hi} runs"


# The captions, alt texts and paragraphs below are Markdown: text from the tables and records through
# escape.page (md), the report's own words and numbers (verdicts, formatted changes) as they are.
md = escape.page


def overview_caption(rows: pl.DataFrame, baseline: str, correction: str) -> str:
    """The overview's caption: what a cell is, how many changes are significant, the largest."""
    found = rows.filter(kind=FINDING)
    corr = stats.CORRECTIONS.get(correction, correction)
    base = md(baseline)
    head = f"Each scenario against {base} in each test's headline metric, change in % of {base}'s median"
    if found.is_empty():
        return clip(f"{head}; none of the {len(rows)} changes is significant after {corr}.")
    r = found.row(0, named=True)
    return clip(
        f'{head}; "\\*": significant after {corr} ({len(found)} of {len(rows)}). The largest: '
        f"{md(r['scenario'])}'s {md(r['test'])} {md(metric_label(r['metric'], r['side']))}, "
        f"{change(r['delta_pct'])} %."
    )


def headline_caption(rows: pl.DataFrame, test: str, metric: str, baseline: str) -> str:
    """A test's headline figure: its metric, runs and interval, then each scenario's verdict against
    ``baseline`` as the report writes it (findings, largest first; the others grouped by verdict)."""
    t = rows.filter(test=test, metric=metric)
    head = (
        f"{md(test)} {md(metric_label(metric, 'none'))}, median of runs with 95 % CI ({_runs(t)}). "
        f"Against {md(baseline)}: "
    )
    parts = [f"{md(r['scenario'])} {unit(r['verdict'])}" for r in t.filter(kind=FINDING).iter_rows(named=True)]
    for kind, word in ((NEGLIGIBLE, "negligible"), (INCONCLUSIVE, "inconclusive"), (NOISE, "not significant")):
        if len(g := t.filter(kind=kind)):
            parts.append(f"{_and([md(s) for s in g['scenario']])} {word}")
    untested = t.filter(~pl.col("kind").is_in([FINDING, NEGLIGIBLE, INCONCLUSIVE, NOISE]))
    if len(untested):
        parts.append(f"{_and([md(s) for s in untested['scenario']])} not tested (too few runs)")
    return _fit(head, parts)


def why_caption(r: dict, explanations: pl.DataFrame | None) -> str:
    """A finding's why figure: what it shows, the finding's verdict and, where it fits, the profiles' clause."""
    text = (
        f"What changed in {md(r['test'])} for {md(r['scenario'])} ({md(metric_label(r['metric'], r['side']))} "
        f"{unit(r['verdict'])}): the functions whose own CPU per unit of work changed most against "
        f"{md(r['baseline'])}."
    )
    clause = why_clause(r, explanations)
    with_why = f"{text} {md(clause[:1].upper() + clause[1:])}." if clause else text
    return with_why if len(visible(with_why)) <= CAPTION_CHARS else clip(text)


def post_figures(
    rows: pl.DataFrame,
    heights: Mapping[str, float],
    baseline: str,
    correction: str = DEFAULT_ANALYSIS.correction,
    explanations: pl.DataFrame | None = None,
) -> list[PostFigure]:
    """The post's figures (choose) with their alt text and captions."""
    out = []
    base = md(baseline)
    for name, kind, r in choose(rows, heights):
        if kind == OVERVIEW:
            alt = f"Heatmap of the change against {base} of every scenario in every test's headline metric"
            out.append(PostFigure(name, alt, overview_caption(rows, baseline, correction)))
        elif kind == HEADLINE and r is not None:
            alt = f"Bars of {md(r['test'])} {md(metric_label(r['metric'], 'none'))} per scenario with their 95 % CIs"
            out.append(PostFigure(name, alt, headline_caption(rows, r["test"], r["metric"], baseline)))
        elif r is not None:
            alt = (
                f"Bars of the CPU per unit of work in the functions that changed most, {md(r['scenario'])} "
                f"beside {base} ({md(r['test'])})"
            )
            out.append(PostFigure(name, alt, why_caption(r, explanations)))
    return out


def _method(rows: pl.DataFrame, families: pl.DataFrame, settings: Analysis) -> str:
    """How the values were compared, in the report's words for the interval (format.interval_wording)."""
    baseline, correction = settings.baseline, settings.correction
    how = (
        "Each block runs every scenario × test once, in a seeded random order; a configuration's value is the "
        "median of its runs."
    )
    base = md(baseline)
    if rows.is_empty():
        return f"{how} Nothing was compared with {base}."
    methods = set(rows["test_method"].drop_nulls())
    test = (
        "the sign test of the per-block ratios (paired by block)"
        if methods == {paired.TEST}
        else "a two-sided Mann-Whitney U test"
        + (" or, where paired by block, the sign test of the per-block ratios" if paired.TEST in methods else "")
    )
    primary = families.filter(family=stats.PRIMARY) if "family" in families.columns else families.clear()
    at = ""
    if len(primary) and not missing(pct := primary["interval_level_pct"][0]):
        at = f" (at {level(pct / 100)} in this campaign)"
    corr = stats.CORRECTIONS.get(correction, correction)
    return (
        f"{how} Each scenario is compared with {base} by {test}, {corr}-corrected over the {len(rows)} "
        f"headline comparisons. A change is in % of {base}'s median, its interval the "
        f"{interval_wording(correction, settings.alpha)}{at}."
    )


def setup_text(
    runs: pl.DataFrame,
    rows: pl.DataFrame,
    families: pl.DataFrame,
    settings: Analysis = DEFAULT_ANALYSIS,
    commit: str | None = None,
) -> str:
    """The setup paragraph: the context strip of the report's first screen (summary.context) in
    sentences, then the method (the ``settings``' baseline, correction and alpha)."""
    c = {label: md(value) for label, value in context(runs, commit)}
    facts = "; ".join(
        f"{label if label == 'CPUs per side' else label.lower()}: {c[label]}"
        for label in ("Machine", "Kernel", "CPUs per side", "Tools", "Run length", "Runs")
        if label in c
    )
    built = f" Report built from {c['Report built from']}." if "Report built from" in c else ""
    return (
        f"Campaign {c['Campaign']}, measured {c['Measured']} in {c['Environment']}. {facts[:1].upper()}{facts[1:]}. "
        + _method(rows, families, settings)
        + built
    )


def post_markdown(
    runs: pl.DataFrame,
    comparisons: pl.DataFrame,
    families: pl.DataFrame,
    settings: Analysis = DEFAULT_ANALYSIS,
    heights: Mapping[str, float] | None = None,
    explanations: pl.DataFrame | None = None,
    commit: str | None = None,
    title: str | None = None,
) -> str:
    """The post as Markdown: the report's title (``title``, the user's report.title, else what was
    compared), the lead (the takeaways, or why there is nothing to
    conclude), the setup and method, the figures (post_figures; the PNGs beside the post) with their
    captions, and where the rest is; against the ``settings``' baseline. Names from the tables are escaped
    for Markdown."""
    baseline = settings.baseline
    rows = headline_rows(comparisons, baseline)
    degenerate = degenerate_text(runs, comparisons, baseline)
    lead = [degenerate] if degenerate else []
    lead += takeaways(comparisons, baseline, prose=MARKDOWN)
    if not lead:
        lead = [f"Nothing was compared with {md(baseline)}."]
    heights = heights or {}
    chosen = post_figures(rows, heights, baseline, settings.correction, explanations)
    if chosen:
        shown = [f"![{f.alt}]({quote(f.name)}.png)\n\n*{f.caption}*" for f in chosen]
    elif rows.is_empty():
        shown = [f"No figure: nothing was compared with {md(baseline)}."]
    elif not heights:
        shown = ["No figure: the report drew none of these comparisons."]
    else:
        shown = [f"No figure: none of the report's figures is at most {MAX_HEIGHT} px tall at {BLOG_WIDTH} px wide."]
    return (
        "\n\n".join(
            [
                f"# {escape.page(title) if title else title_text(runs, baseline, prose=MARKDOWN)}",
                " ".join(lead),
                "## Setup and method",
                setup_text(runs, rows, families, settings, commit),
                "## Results",
                *shown,
                "Every number here is computed from the campaign's tables. The full report (report.html) has "
                "every comparison with its interval, the caveats, the CPU profiles and the method; "
                "index.html in this folder has every figure with its long caption.",
            ]
        )
        + "\n"
    )


_SVG_SIZE = re.compile(r'<svg\b[^>]*?\bwidth="([\d.]+)"[^>]*?\bheight="([\d.]+)"')


def exported_heights(blog: Path) -> dict[str, float]:
    """{figure name: its height in px at BLOG_WIDTH} of the figures the report exported to ``blog``
    (an SVG and a PNG each), read from the SVGs as drawn."""
    out = {}
    for name in export.written_names(blog):
        svg = blog / name
        if svg.suffix != ".svg" or not svg.with_suffix(".png").is_file() or not svg.is_file():
            continue
        with open(svg, encoding="utf-8") as f:
            m = _SVG_SIZE.search(f.read(4096))
        if m and float(m.group(1)) > 0:
            out[svg.stem] = float(m.group(2)) * BLOG_WIDTH / float(m.group(1))
    return out


def write_post(blog: Path, analysis: analyse.Result, commit: str | None = None, title: str | None = None) -> list[Path]:
    """<blog>/post.md and post.html from ``analysis`` (analyse.load's tables) and the figures the
    report exported to ``blog``, headed by ``title`` (the user's report.title) where given; listed as
    written there, so the next report replaces them."""
    s = analysis.settings
    why = profiles.explanations(analysis.profile_tables(), s.baseline)
    text = post_markdown(
        analysis.runs,
        analysis.comparisons,
        analysis.families,
        s,
        exported_heights(blog),
        why,
        commit,
        title,
    )
    markdown, page = blog / f"{POST}.md", blog / f"{POST}.html"
    markdown.write_text(text, encoding="utf-8")
    # the images at the width they were drawn for, so their text reads at 1:1
    page.write_text(
        export.blog_html(title or title_text(analysis.runs, s.baseline), text, BLOG_WIDTH), encoding="utf-8"
    )
    with export.one_writer(blog):
        export.note_written(blog, [markdown, page])
    return [markdown, page]
