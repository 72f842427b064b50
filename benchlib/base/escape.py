"""Text from data, made safe for where it is written.

Names, failure reasons, frame names and tool output come from records, tables and parameters, none
of them checked for markup: each goes through the function of the output it enters, once, where it
enters it. A page has one (page, and code for code): its text is right in Markdown, in HTML inside
Markdown and in plain HTML alike, so where in the page it lands cannot make it wrong. A rendered page
then goes through links, the second defence: no link or image target but http(s) is left in it. A
character that the output cannot hold is written as its escape (``\\x1b``), so the reader still sees
that it was there.
"""

from __future__ import annotations

import html as _html
import re
from html.parser import HTMLParser

# C0 and C1 controls and DEL; newline and tab are kept by the functions that allow them
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f"
# Unicode bidirectional overrides and isolates: they reorder what a terminal or an editor shows
_BIDI = "\u202a-\u202e\u2066-\u2069"
_UNPRINTABLE = re.compile(f"[{_CONTROLS}{_BIDI}]")
# what XML 1.0 cannot hold at all (its Char production), plus the C1 controls and DEL it discourages
_XML_UNSAFE = re.compile("[^\x09\x0a\x0d\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# What data could start markup with in a page, written as character references: Markdown renderers
# (nbconvert's mistune, markdown-it) decode a reference after they have parsed the markup, so it never
# starts any, and HTML shows it as the character, so the same text is right in Markdown, in inline HTML
# that Markdown surrounds and in plain HTML. Anywhere in a line: the HTML characters, backslash
# escapes, code, emphasis, links and images, tables, strikethrough, math (nbconvert), braces, "_"
# beside a space or punctuation (not inside a word: "tcp_rr"), the autolinks of "scheme://", "www."
# and "@"; at the text's start, "(" and ":", which would turn a "[...]" the page puts before the text
# into a link or a reference definition.
_MARKUP = re.compile(r"""[\\`*\[\]|~$@{}&<>"']|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|:(?=//)|(?i:(?<=www))\.|^[(:]""")
# at the start of a line: headings, lists, ordered lists ("1." and "1)"), setext underlines ("="),
# definition lists (":")
_LINE_START = re.compile(r"^(\d*)([#+=.):-])(?=[#=-]*(?:\s|$))")
_NAMED = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"}


def _visible(match: re.Match) -> str:
    """A character as its escape: "\\x1b", "\\u202e"."""
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object) -> str:
    """Text for a terminal, a log file or a table cell: control characters (ESC and so ANSI sequences,
    CR, BEL, NUL, ...) and bidirectional overrides written as escapes; newline and tab kept."""
    return _UNPRINTABLE.sub(_visible, str(text))


def xml(text: object) -> str:
    """Text an XML 1.0 document can hold (ElementTree then escapes &, < and >): the characters XML
    forbids or discourages (NUL, ESC, vertical tab, C1 controls, lone surrogates) written as escapes."""
    return _XML_UNSAFE.sub(_visible, str(text))


def plotly(text: object) -> str:
    """Text for a plotly title, label, legend or hover text: plotly reads a few HTML tags (<b>, <a
    href>, <br>) in them and decodes &amp;, &lt; and &gt;, so those three are entities."""
    return _html.escape(str(text), quote=False)


def _reference(char: str) -> str:
    return _NAMED.get(char) or f"&#{ord(char)};"


def page(text: object) -> str:
    """Text from data for a page: the report and the blog kit, where it enters Markdown, inline HTML in
    Markdown or plain HTML (an element or a quoted attribute). On one line, every character that could
    start Markdown or HTML markup written as its character reference (see _MARKUP), so that what a
    record says is shown as it is, wherever it stands in the page."""
    line = _MARKUP.sub(lambda m: _reference(m.group()), printable(" ".join(str(text).split())))
    return _LINE_START.sub(lambda m: m.group(1) + _reference(m.group(2)), line)


def code(text: object) -> str:
    """Text from data shown as code in a page: a Markdown code span cannot escape a backtick or hold a
    reference, so this is an HTML <code> element around page() text."""
    return f"<code>{page(text)}</code>"


# the attributes whose URL a browser follows or loads
_URL_ATTRIBUTES = frozenset(
    {"href", "src", "srcset", "xlink:href", "action", "formaction", "poster", "data", "background", "cite", "ping"}
)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
# around a URL, what a browser strips before it reads the scheme: spaces and C0 controls
_URL_PADDING = "".join(map(chr, range(0x21)))


def _http_or_relative(url: str) -> bool:
    """Whether a URL (an attribute's value, its references decoded) is http(s) or has no scheme (a file
    beside the page, an anchor in it), read as a browser reads it: tabs and newlines anywhere dropped."""
    scheme = _SCHEME.match(re.sub(r"[\t\n\r]", "", url).strip(_URL_PADDING))
    return scheme is None or scheme.group(1).lower() in ("http", "https")


def _safe_target(name: str, value: str | None) -> bool:
    if name not in _URL_ATTRIBUTES or value is None:
        return True
    if name == "srcset":  # image candidates, each a URL and a size, comma-separated
        return all(_http_or_relative(c.split()[0]) for c in value.split(",") if c.split())
    return _http_or_relative(value)


class _UnsafeTargets(HTMLParser):
    """The start tags of a page with a link or image target of another scheme than http(s), each as
    (offset, its text in the page, the tag without those targets)."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=False)
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", page)]
        self.found: list[tuple[int, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._check(tag, attrs, ">")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._check(tag, attrs, " />")

    def _check(self, tag: str, attrs: list[tuple[str, str | None]], end: str) -> None:
        if all(_safe_target(n, v) for n, v in attrs):
            return
        kept = "".join(f" {n}" if v is None else f' {n}="{_html.escape(v)}"' for n, v in attrs if _safe_target(n, v))
        line, column = self.getpos()
        self.found.append((self._line_starts[line - 1] + column, self.get_starttag_text() or "", f"<{tag}{kept}{end}"))


def links(page: str) -> str:
    """A rendered HTML page in which no link or image target has another scheme than http(s)
    (javascript:, data:, vbscript:, file:, however spelled or obfuscated with references, case,
    tabs or spaces): each such href, src (and the like) is removed from its tag, so it is no link and
    loads nothing. The second defence behind page(), for what a renderer made a link of; the page's
    scripts and styles are left as they are."""
    parser = _UnsafeTargets(page)
    parser.feed(page)
    parser.close()
    for offset, original, tag in reversed(parser.found):
        page = page[:offset] + tag + page[offset + len(original) :]
    return page
