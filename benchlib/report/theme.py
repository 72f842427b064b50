"""The look every figure shares: one plotly template ("benchlib"), registered on import, sized for a
700 px blog column, and the words that go with a figure (axis titles with units, alt text, caption).

A figure states its caption and alt text in ``layout.meta`` ({"caption": ..., "alt": ...}); the
report's display (`show`) puts them beside the figure and the blog export writes them under it.
"""

# plotly generates its figure and layout properties at run time, so pyright cannot see them here:
# pyright: reportAttributeAccessIssue=false, reportOptionalMemberAccess=false
from __future__ import annotations

import html
import re

import plotly.graph_objects as go
import plotly.io as pio
from plotly.io.base_renderers import PlotlyRenderer

from ..base import escape
from . import colours
from .format import unit as display_unit

TEMPLATE = "benchlib"
BAND_COLOR = "rgba(120, 120, 120, 0.18)"
# A blog column: static images are drawn at this width, so their text is read at 1:1.
BLOG_WIDTH = 700
HEIGHT = 440


def _template() -> go.layout.Template:
    t = go.layout.Template(pio.templates["plotly_white"])
    t.layout.update(
        font=dict(family="Helvetica, Arial, sans-serif", size=13, color="#222"),
        title=dict(x=0.015, xanchor="left", font=dict(size=16)),
        colorway=list(colours.SCENARIOS),  # a figure colours its scenarios itself: colours.py
        height=HEIGHT,
        margin=dict(l=70, r=20, t=80, b=60),
        hoverlabel=dict(font_size=12),
        legend=dict(font=dict(size=12)),
        xaxis=dict(title=dict(font=dict(size=13)), tickfont=dict(size=12), automargin=True),
        yaxis=dict(title=dict(font=dict(size=13)), tickfont=dict(size=12), automargin=True),
    )
    return t


pio.templates[TEMPLATE] = _template()


def axis_title(quantity: str, unit: str | None) -> str:
    """A value axis in words with its unit: "Transaction rate (transactions/s)"."""
    text = quantity[:1].upper() + quantity[1:]
    return f"{text} ({display_unit(unit)})" if unit else text


def plain(text: str) -> str:
    """A plotly title as plain text: <br> and <sup> become sentence breaks, other tags go, entities
    are the characters they stand for."""
    text = re.sub(r"<br\s*/?>", ". ", text or "")
    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    text = re.sub(r"\s*\.\s*\.", ".", text)
    return " ".join(text.split()).strip(" .")


def describe(fig: go.Figure, caption: str | None = None, alt: str | None = None) -> go.Figure:
    """Attach the caption (what the figure shows, with its numbers) and alt text to ``fig``; without
    them they are made from the title and the axis titles."""
    caption = caption or plain(fig.layout.title.text)
    if alt is None:
        kinds = sorted({type(t).__name__.lower() for t in fig.data}) or ["figure"]
        axes = [a.title.text for a in (fig.layout.xaxis, fig.layout.yaxis) if a.title.text]
        alt = (
            f"{' and '.join(kinds)} chart"
            + (f" of {' against '.join(reversed(axes))}" if axes else "")
            + f": {plain(fig.layout.title.text).split('. ')[0]}"
        )
    fig.update_layout(meta={"caption": caption, "alt": alt})
    return fig


def words(fig: go.Figure | dict) -> tuple[str, str]:
    """(caption, alt text) of a figure, made by describe() where the figure was not described."""
    layout = fig["layout"] if isinstance(fig, dict) else fig.layout.to_plotly_json()
    meta = layout.get("meta") or {}
    if not isinstance(meta, dict) or "caption" not in meta:
        meta = describe(go.Figure(fig)).layout.meta
    return meta["caption"], meta["alt"]


def figure_html(fig: go.Figure | dict) -> str:
    """The figure as the report shows it: a <figure> with its alt text and caption around a div that
    expects plotly.js on the page."""
    fig_dict = fig.to_dict() if isinstance(fig, go.Figure) else fig
    div = pio.to_html(
        fig_dict,
        include_plotlyjs=False,
        include_mathjax=False,
        full_html=False,
        default_width="100%",
        validate=False,
    )
    caption, alt = words(fig_dict)
    return (
        f'<figure class="benchlib-figure" role="img" aria-label="{escape.page(alt)}" '
        f'style="margin:0 0 1.5em 0;max-width:{BLOG_WIDTH + 260}px">{div}'
        f'<figcaption style="font-size:13px;color:#444;margin-top:.3em">{escape.page(caption)}'
        "</figcaption></figure>"
    )


def figure_bundle(fig: go.Figure, collapsed: bool = False) -> dict:
    """What the report displays for ``fig``: `figure_html`, behind a closed disclosure whose line is the
    figure's title where ``collapsed`` (the page resizes a figure when its disclosure opens: render's
    template), with plotly's JSON for JupyterLab and the colour checks."""
    fig_dict = fig.to_dict()
    body = figure_html(fig_dict)
    if collapsed:
        title = plain(fig.layout.title.text).split(". ")[0]
        body = (
            '<details class="figure"><summary style="cursor:pointer;margin:.3em 0">'
            f"{escape.page(title)}</summary>{body}</details>"
        )
    return {**PlotlyRenderer().to_mimebundle(fig_dict), "text/html": body}


# Figures are displayed here rather than through a plotly renderer: registering one imports plotly's
# renderer module, and with it nbformat and its schema validators (about 1 s in every notebook kernel).
def show(fig: go.Figure) -> None:
    """Display ``fig`` open, as the report shows it (`figure_bundle`)."""
    from IPython.display import display

    display(figure_bundle(fig), raw=True)


def show_collapsed(fig: go.Figure) -> None:
    """Display ``fig`` behind its title, so that the report stays short (`figure_bundle`)."""
    from IPython.display import display

    display(figure_bundle(fig, collapsed=True), raw=True)
