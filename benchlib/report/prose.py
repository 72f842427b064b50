"""How a sentence writes the names it takes from the tables and what it stresses, per output.

The sentences (report.summary) are built once; a ``Prose`` says how their parts are written where they
are read: on the page (Markdown, which the report and the post turn into HTML: names escaped, stress in
bold), or as plain text (the terminal, whose writer makes text safe, and the figures' hover and
caption text, which plotly writes as it is given).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..base import escape


@dataclass(frozen=True)
class Prose:
    name: Callable[[str], str]  # a name from the tables (a scenario, a test, a campaign)
    strong: Callable[[str], str]  # what the sentence stresses (a verdict, the compared scenarios)


MARKDOWN = Prose(name=escape.page, strong=lambda text: f"**{text}**")
PLAIN = Prose(name=str, strong=str)
