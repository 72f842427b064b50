"""Hostile text in a campaign's names and reasons, and what a page must not do with it."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import polars as pl

from benchlib.analysis import compare, load_tables
from tests.conftest import FIXTURES

IMG = "<img src=x onerror=\"document.title='pwned'\">"


SCRIPT = "<script>document.title='pwned'</script>"


class ParsedPage(HTMLParser):
    """What a rendered page holds: its start tags with their attributes, its link and image targets,
    and the text a reader sees (references decoded)."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements, self.targets, self.texts = [], [], []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, attrs))
        for name, value in attrs:
            if name == "srcset" and value:  # image candidates: a URL and a size each
                self.targets += [c.split()[0] for c in value.split(",") if c.split()]
            elif name in ("href", "src", "xlink:href", "action") and value:
                self.targets.append(value)

    def handle_data(self, data):
        self.texts.append(data)

    @property
    def text(self) -> str:
        return " ".join("".join(self.texts).split())


def hostile_campaign(name: str, scenario: str, reason: str, tests: tuple[str, ...] = ()) -> compare.Campaign:
    """A real campaign's tables (of ``tests`` only, where given) with vxlan renamed to ``scenario`` and
    its first tcp_rr run failed with ``reason``, as a table may say though no record of benchlib would."""
    runs, metrics = load_tables(FIXTURES / "tidy" / name / "runs.parquet", FIXTURES / "tidy" / name / "metrics.parquet")
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


def other_schemes(page: str) -> list[str]:
    """The targets of ``page`` with a scheme other than http(s), read as a browser reads them."""
    schemes = [
        re.match(r"([a-z][a-z0-9+.-]*):", re.sub(r"[\t\n\r]", "", t).strip(" \x00-\x1f").lower())
        for t in ParsedPage(page).targets
    ]
    return [
        t for t, m in zip(ParsedPage(page).targets, schemes, strict=True) if m and m.group(1) not in ("http", "https")
    ]
