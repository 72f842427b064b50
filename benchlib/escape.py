"""Text from data, made safe for where it is written.

Names, failure reasons, frame names and tool output come from records, tables and parameters, none
of them checked for markup: each goes through the function of the output it enters, once, where it
enters it. A character that the output cannot hold is written as its escape (``\\x1b``), so the
reader still sees that it was there.
"""

from __future__ import annotations

import html as _html
import re

# C0 and C1 controls and DEL; newline and tab are kept by the functions that allow them
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f"
# Unicode bidirectional overrides and isolates: they reorder what a terminal or an editor shows
_BIDI = "\u202a-\u202e\u2066-\u2069"
_UNPRINTABLE = re.compile(f"[{_CONTROLS}{_BIDI}]")
# what XML 1.0 cannot hold at all (its Char production), plus the C1 controls and DEL it discourages
_XML_UNSAFE = re.compile("[^\x09\x0a\x0d\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# Markdown markup that data could start anywhere in a line: emphasis, code, links and images,
# tables, strikethrough, math (nbconvert), braces, and the autolinks of "scheme://" and "@"
_MARKDOWN_INLINE = re.compile(r"([\\`*\[\]()!|~$@{}]|:(?=//))")
# "_" starts emphasis only beside a space or punctuation, not inside a word ("tcp_rr")
_MARKDOWN_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# at the start of a line: headings, lists, ordered lists ("1."), setext underlines ("=")
_MARKDOWN_LINE_START = re.compile(r"^(\d*)([#+=.-])(?=[#=-]*(?:\s|$))")


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


def html(text: object) -> str:
    """Text for HTML, in an element or a quoted attribute: &, <, >, " and ' as entities."""
    return _html.escape(str(text), quote=True)


def plotly(text: object) -> str:
    """Text for a plotly title, label, legend or hover text: plotly reads a few HTML tags (<b>, <a
    href>, <br>) in them and decodes &amp;, &lt; and &gt;, so those three are entities."""
    return _html.escape(str(text), quote=False)


def markdown(text: object) -> str:
    """Text for Markdown that a page renders (the report through nbconvert, the blog kit), where it may
    stand at a line's start: on one line, every character that could start Markdown markup
    backslash-escaped, and the HTML characters as entities, since Markdown passes raw HTML through."""
    line = printable(" ".join(str(text).split()))
    line = _MARKDOWN_INLINE.sub(r"\\\1", line)
    line = _MARKDOWN_UNDERSCORE.sub(r"\\_", line)
    line = _MARKDOWN_LINE_START.sub(r"\1\\\2", line)
    return _html.escape(line, quote=False)


def markdown_code(text: object) -> str:
    """Text shown as code in Markdown: a code span cannot escape a backtick or hold an entity, so
    this is an HTML <code> element around markdown() text."""
    return f"<code>{markdown(text)}</code>"
