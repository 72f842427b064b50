"""The generated parts of a study page (docs/studies/*.md): the campaign's facts and its results, built
from what `benchlib analyse` wrote, so that the page says what the current campaign found.

Each part sits between two marker comments of the page; `splice` replaces only what is between them,
so the prose around them stays as written, and splicing a page's own output again changes nothing.
The numbers and sentences are the report's: its formatters (format.py), its context strip, takeaways
and finding sentences (summary.py), and its test labels (tables.py).
"""

from __future__ import annotations

import html
import re

import polars as pl

from ..analysis import stats
from ..base import escape
from ..base.errors import BenchlibError
from . import summary, tables
from .format import reading, time_span, unit

FACTS, RESULTS = "facts", "results"
PARTS = (FACTS, RESULTS)
WRITER = "scripts/docs_from_campaign.py"


class StudyPageError(BenchlibError, ValueError):
    """A study page lacks the marker comments of a generated part, or holds them out of order."""


def begin(name: str) -> str:
    return f"<!-- generated: {name} (written by {WRITER}; edit the prose outside these markers) -->"


def end(name: str) -> str:
    return f"<!-- end generated: {name} -->"


def _span(runs: pl.DataFrame) -> str:
    return time_span(runs["started_at"].min(), runs["ended_at"].max())


def facts_markdown(runs: pl.DataFrame, preset: str, preset_note: str, commit: str | None) -> str:
    """The campaign's facts as a two-column table: the preset it ran (its path, and ``preset_note`` on
    where it came from), then the report's context strip (summary.context: campaign, environment,
    machine, kernel, CPUs, tools, run length, runs) with the time span the runs were measured in, and
    the commit the report was built from."""
    note = f" ({escape.page(preset_note)})" if preset_note else ""
    rows = [("Preset", escape.code(preset) + note)]
    for label, value in summary.context(runs):
        rows.append((label, escape.page(_span(runs) if label == "Measured" else value)))
    rows.append(("Commit", escape.code(commit) + " (the code the report was built from)" if commit else "-"))
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def _headlines(comparisons: pl.DataFrame) -> pl.DataFrame:
    """Each test's headline metric (the primary family's), with its unit: one row per test."""
    primary = comparisons.filter(pl.col("family") == stats.PRIMARY)
    return primary.select(*stats.PEERS, "unit").unique(stats.PEERS, keep="first", maintain_order=True)


def medians_markdown(summary_table: pl.DataFrame, comparisons: pl.DataFrame, runs: pl.DataFrame, baseline: str) -> str:
    """The median of each scenario (rows, the baseline first) in each test's headline metric (columns,
    the test's label with its unit), as the analysis' summary holds them; "" without comparisons."""
    heads = _headlines(comparisons)
    if heads.is_empty():
        return ""
    cells = summary_table.join(heads.drop("unit"), on=stats.PEERS, how="semi", nulls_equal=True)
    labels = tables.test_labels(runs)
    columns = heads.sort("environment", "test").select("environment", "test", "unit").rows()
    several = heads["environment"].n_unique() > 1
    median = {(r["environment"], r["scenario"], r["test"]): r["median"] for r in cells.iter_rows(named=True)}
    header = ["scenario"] + [
        f"{labels.get(t, t)}" + (f" ({unit(u)})" if u else "") + (f", {e}" if several else "") for e, t, u in columns
    ]
    rows = []
    for env in sorted(heads["environment"].unique().to_list()):
        for scenario in summary.stats_order(cells.filter(environment=env)["scenario"].unique().to_list(), baseline):
            values = [
                reading(v) if (v := median.get((env, scenario, t))) is not None and e == env else "-"
                for e, t, _ in columns
            ]
            name = escape.code(scenario) + (f" ({escape.page(env)})" if several else "")
            rows.append([name, *values])
    lines = ["| " + " | ".join(escape.page(h) for h in header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def results_markdown(result) -> str:
    """The campaign's results (``result``: analyse.Result): the takeaways, the medians of each test's
    headline metric, the findings with their intervals as the report words them, the campaign-wide
    caveats and the level the intervals came out at."""
    s, comparisons = result.settings, result.comparisons
    parts = []
    if said := summary.takeaways(comparisons, s.baseline):
        parts.append(escape.page(" ".join(said)))
    if why := summary.degenerate_text(result.runs, comparisons, s.baseline):
        parts.append(why)
    if medians := medians_markdown(result.summary, comparisons, result.runs, s.baseline):
        # n per configuration is in the facts (the context's Runs), not counted again here
        parts += ["The median of each configuration's successful runs, in each test's headline metric:", medians]
    if listed := summary.findings_markdown(comparisons, result.families, stats.PRIMARY):
        parts.append(f"{summary.findings_head(comparisons, s)}:\n\n{listed}")
    if caveats := summary.caveats_markdown(comparisons, result.profile_contrasts):
        parts.append(caveats)
    if len(result.families):
        parts.append(summary.levels_text(result.families, s))
    return "\n\n".join(parts)


def parts(result, preset: str, preset_note: str, commit: str | None) -> dict[str, str]:
    """{part: its Markdown} of a study page for the analysed campaign ``result`` (analyse.Result)."""
    return {FACTS: facts_markdown(result.runs, preset, preset_note, commit), RESULTS: results_markdown(result)}


def _markers(name: str) -> re.Pattern:
    # the begin marker by its name alone: its wording may change without orphaning a page's markers
    return re.compile(rf"<!-- generated: {re.escape(name)}\b[^\n]*?-->.*?{re.escape(end(name))}", re.S)


def splice(page: str, generated: dict[str, str], where: str = "the page") -> str:
    """``page`` with the text between each part's markers replaced by ``generated[part]``; everything
    outside the markers as it was. A part whose markers are missing is refused, naming the markers."""
    for name, text in generated.items():
        found = list(_markers(name).finditer(page))
        if len(found) != 1:
            raise StudyPageError(
                f"{where}: {'no' if not found else 'more than one'} generated part {name!r}; it needs one "
                f"line {begin(name)} and, below it, one line {end(name)}"
            )
        m = found[0]
        page = page[: m.start()] + f"{begin(name)}\n\n{text.strip()}\n\n{end(name)}" + page[m.end() :]
    return page


_CONTEXT_ITEM = re.compile(
    r'class="context-label"[^>]*>([^<]*)</span>\s*<span class="context-value"[^>]*>([^<]*)</span>'
)


def report_context(report_html: str) -> dict[str, str]:
    """{label: value} of a rendered report's context strip (summary.first_screen_html): its campaign,
    the commit it was built from, ...; {} for a report without one."""
    return {html.unescape(k): html.unescape(v) for k, v in _CONTEXT_ITEM.findall(report_html)}
