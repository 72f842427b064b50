"""The report's files: each figure written as offline HTML, SVG and PNG, its snippet for a blog post,
the blog folder's index and pages, and the list of what the report wrote in a folder (so that a
later report replaces its own files and no one else's), under a lock: the report's notebooks run
side by side and write the same folders."""

from __future__ import annotations

import fcntl
import re
import shutil
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from markdown_it import MarkdownIt

from benchlib.base import escape

from .colours import natural
from .theme import BLOG_WIDTH, TEMPLATE, words


def write_figures(
    figures: Mapping[str, go.Figure],
    out_dir: str | Path,
    png_scale: float = 2.0,
    blog_dir: str | Path | None = None,
    html_only: Collection[str] = (),
) -> list[Path]:
    """Write each figure as <name>.html (self-contained, offline), <name>.svg and <name>.png, drawn at
    the blog column's width (the PNG at ``png_scale`` pixels per point, sharp on dense screens). The
    figures named in ``html_only`` (those with a widget, which an image would show dead) as HTML alone.

    With ``blog_dir``, the SVG and PNG go there too, beside <name>.md: the figure embedded with its
    caption (theme.describe), for a post to take as it is. All static images go through one kaleido
    call, so Chromium starts once.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written, figs, files, heights, scales = [], [], [], [], []
    for name, fig in figures.items():
        html = out / f"{name}.html"
        # plotly.min.js once, beside the pages (offline, and 5 MB instead of 5 MB a figure)
        fig.write_html(html, include_plotlyjs="directory", include_mathjax=False, full_html=True, default_width="100%")
        written.append(html)
        if name in html_only:
            continue
        height = fig.layout.height or pio.templates[TEMPLATE].layout.height  # pyright: ignore[reportAttributeAccessIssue, reportOptionalMemberAccess] (plotly's generated properties are not typed)
        for ext, scale in (("svg", 1.0), ("png", png_scale)):
            figs.append(fig)
            files.append(out / f"{name}.{ext}")
            heights.append(height)
            scales.append(scale)
    if figs:
        pio.write_images(figs, files, width=BLOG_WIDTH, height=heights, scale=scales)
    written += files
    with one_writer(out):
        note_written(out, [*written, out / "plotly.min.js"])
    if blog_dir is not None:
        written += blog_snippets({n: f for n, f in figures.items() if n not in html_only}, out, Path(blog_dir))
    return written


WRITTEN = ".benchlib-written"  # in a folder of figures: the names of the files the report wrote there, a line each


@contextmanager
def one_writer(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s lock (on its WRITTEN file): the report's notebooks run side by side, each in
    its own kernel process, and list their files and rewrite the blog index in the same folders."""
    with open(directory / WRITTEN, "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def note_written(directory: Path, paths: list[Path]) -> None:
    """Add ``paths`` (files in ``directory``) to its list of what the report wrote (WRITTEN)."""
    listed = written_names(directory)
    with open(directory / WRITTEN, "a", encoding="utf-8") as f:
        f.writelines(f"{p.name}\n" for p in dict.fromkeys(paths) if p.name not in listed)


def written_names(directory: Path) -> list[str]:
    """The names WRITTEN lists in ``directory`` (none where it is missing)."""
    path = directory / WRITTEN
    return [n for n in path.read_text(encoding="utf-8").splitlines() if n] if path.is_file() else []


def blog_snippets(figures: Mapping[str, go.Figure], images: Path, blog: Path) -> list[Path]:
    """<blog>/<name>.svg and .png (copied from ``images``) and <name>.md: the SVG with its alt text,
    then its caption, both generated with the figure."""
    blog.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fig in figures.items():
        for ext in ("svg", "png"):
            written.append(Path(shutil.copyfile(images / f"{name}.{ext}", blog / f"{name}.{ext}")))
        caption, alt = words(fig)
        md = blog / f"{name}.md"
        md.write_text(
            f"![{escape.page(alt)}]({name}.svg)\n\n*{escape.page(caption)}*\n\n"
            f"<!-- the same figure as PNG: {name}.png -->\n",
            encoding="utf-8",
        )
        written.append(md)
    with one_writer(blog):
        note_written(blog, written)
        index = blog_index(blog, list(figures))
        note_written(blog, index)
    return written + index


INDEX_HEADING = re.compile(r"^## `([^`]+)`$", re.M)


def blog_index(blog: Path, names: list[str]) -> list[Path]:
    """<blog>/index.md and index.html: every figure of the directory (each <name>.md snippet) with its
    image, caption and links to its SVG, PNG and snippet, so an author sees them all on one page.

    Each report notebook exports its own figures, so the index is rewritten at every export: the
    figures it listed before keep their place, then ``names`` (this export's) in their order, then any
    other snippet the report wrote there (WRITTEN) by name. index.html is index.md rendered by markdown-it (CommonMark),
    a page that opens offline: the images are the files beside it."""
    index = blog / "index.md"
    present = {Path(n).stem for n in written_names(blog) if n.endswith(".md") and Path(n).stem not in BLOG_PAGES} & {
        p.stem for p in blog.glob("*.md")
    }
    before = INDEX_HEADING.findall(index.read_text(encoding="utf-8")) if index.exists() else []
    order = list(dict.fromkeys([*before, *names, *sorted(present, key=natural)]))
    entries = []
    for name in (n for n in order if n in present):
        image, caption = (blog / f"{name}.md").read_text(encoding="utf-8").split("\n\n")[:2]
        entries.append(
            f"## `{name}`\n\n{image}\n\n{caption}\n\n"
            f"Files: [{name}.svg]({name}.svg) · [{name}.png]({name}.png) · [{name}.md]({name}.md) "
            "(the SVG with its alt text and caption, to paste into a post)\n"
        )
    text = (
        "# Figures for a post\n\n"
        f"{len(entries)} figures, each drawn {BLOG_WIDTH} px wide for a blog column and captioned with its "
        "numbers. To use one, copy its `.md` file into the post and its `.svg` (or `.png`) beside it.\n\n"
        + "\n".join(entries)
    )
    index.write_text(text, encoding="utf-8")
    page = blog / "index.html"
    page.write_text(blog_html("Figures for a post", text), encoding="utf-8")
    return [index, page]


# the blog folder's pages, beside the figures' snippets: the index of every figure and the post
BLOG_PAGES = ("index", "post")


def blog_html(title: str, markdown: str, column: int = BLOG_WIDTH + 60) -> str:
    """A page of the blog folder: ``markdown`` rendered by markdown-it (CommonMark) in a column
    ``column`` px wide at most, images at the column's width, no link but http(s) and the files beside
    it (escape.links); it opens offline, its images the files beside it."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape.page(title)}</title>"
        "<style>body{font-family:Helvetica,Arial,sans-serif;color:#222;max-width:"
        f"{column}px;margin:2em auto;padding:0 1em;line-height:1.45}}"
        "img{width:100%;height:auto;border:1px solid #ddd}em{font-style:normal;font-size:14px;color:#444}"
        "h2{margin-top:2.2em;font-size:18px}</style></head><body>\n"
        + escape.links(MarkdownIt("commonmark").render(markdown))
        + "</body></html>\n"
    )
