r"""Text from the program under test, made safe for the reader it is rendered for.

The trainer's output reaches a report as evidence lines, first error lines, dashboard keys and
values, paths and frame names: bytes the harness does not control. Each renderer passes them
through one function here, chosen by its reader:

- a terminal (`terminal_safe`): escape sequences (clear screen, window title, OSC 8 hyperlinks,
  DCS/APC/PM/SOS strings), C0 and C1 controls and bidirectional overrides are removed, so
  trainer text can neither drive the terminal nor disguise what it says;
- XML (`xml_safe`): the characters XML 1.0 forbids are removed (a C0 control makes junit.xml
  not well-formed, and our own junitparser could not read it back); the rest is kept as is;
- Markdown (`markdown_text`, `markdown_code`): controls stripped as for a terminal, then
  escaped so that trainer text stays text: no raw HTML, entity, link, heading, list, block
  quote, table cell break or code fence. Only what Markdown would read as markup is escaped,
  with a backslash, so the raw file (issue.md, report.md) reads as well as the rendered one:
  a `<` that would open a tag, a comment or an autolink (`\<script>`), a `&` that would make
  an entity (`\&lt;`), a `>` that would open a block quote; `a > b`, `x => y`, `a < b` and
  `a && b` stay as written. A backslash escape is CommonMark's, so it holds wherever the
  Markdown is rendered, GitHub's step summary (Markdown with HTML) included;
- HTML (`html_text`): controls and bidi overrides stripped (newlines kept), then `html.escape`.

Why not rich's helpers: `rich.control.strip_control_codes` removes five C0 codes only (BEL,
BS, VT, FF, CR), not ESC, NUL or C1, and `rich.text.Text.from_ansi` interprets SGR colours
and OSC 8 links but keeps what it does not recognise, and neither knows bidi overrides. The
sequences are therefore matched here, by their ECMA-48 shape."""

from __future__ import annotations

import html
import re

# ECMA-48 sequences, 7-bit (ESC ...) and 8-bit (C1) introducers alike
_CSI = r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # e.g. clear screen ESC[2J, cursor home ESC[H
# OSC (window title, OSC 8 hyperlink) and DCS / SOS / PM / APC strings run to a terminator:
# BEL, ST (ESC \ or U+009C); a string never terminated swallows the rest, as a terminal would
_STRING = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]).*?(?:\x07|\x1b\\|\x9c|\Z)"
_ESCAPE = r"\x1b[ -/]*[0-~]"  # any other escape: charset (ESC ( B), reset (ESC c), ESC 7 …
_SEQUENCE = re.compile(f"{_CSI}|{_STRING}|{_ESCAPE}", re.DOTALL)
# characters that break a line: shown as one space, so words on either side stay apart
_BREAKS = re.compile(r"[\n\r\x0b\x0c\x85\u2028\u2029]+")
# what is left: C0 controls but TAB, DEL, C1 controls, and the bidirectional overrides,
# embeddings and isolates (U+202A–U+202E, U+2066–U+2069) with the marks LRM, RLM and ALM,
# which reorder what a reader sees without being seen themselves
_INVISIBLE = re.compile(
    r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
# XML 1.0 Char: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# Markdown: what opens a construct anywhere in a line. `_` is left alone: it only
# emphasises between words, changes no meaning, and identifiers are full of it. A `<` opens
# raw HTML or an autolink only before a letter, `/`, `!` or `?` (CommonMark 6.5, 6.6), a `&`
# an entity only as `&name;`, `&#digits;` or `&#xhex;` (2.5): elsewhere they are text
_MD_INLINE = re.compile(r"[\\`*\[\]|~]|<(?=[A-Za-z/!?])|&(?=#?[0-9A-Za-z]+;)")
# …and at the start of a paragraph: a heading, a list item, a block quote, a setext
# underline, a numbered item (its `.` or `)` is escaped), a thematic break of underscores
_MD_LEADING = re.compile(r"^(\d+)([.)])|^()([#+=>-])|^()(_)(?=(?: *_){2,} *$)")


def strip_controls(text: str, keep_newlines: bool = False) -> str:
    """`text` without escape sequences, control characters or bidi overrides; line breaks
    become one space, or with `keep_newlines` one newline each (for a block of lines)."""
    text = _SEQUENCE.sub("", text)
    if keep_newlines:
        text = text.replace("\r\n", "\n")
        text = re.sub(r"[\r\x0b\x0c\x85\u2028\u2029]", "\n", text)
        return _INVISIBLE.sub(lambda m: m[0] if m[0] == "\n" else "", text)
    return _INVISIBLE.sub("", _BREAKS.sub(" ", text))


def terminal_safe(text: str) -> str:
    """One line for a terminal: nothing in it is a control (TAB aside) or a bidi override."""
    return strip_controls(text)


def xml_safe(text: str) -> str:
    """`text` with the characters XML 1.0 forbids removed (C0 controls but TAB, LF and CR;
    U+FFFE, U+FFFF; lone surrogates, which an undecodable byte may leave): any XML writer
    then escapes the rest into a well-formed document."""
    return _NOT_XML.sub("", text)


def markdown_text(text: str, paragraph: bool = True) -> str:
    """One line of Markdown that renders as exactly `text` (controls stripped, whitespace
    runs as one space): no HTML, entity, link, code, table cell break, heading, list or block
    quote comes of it, and what is not markup stays as written (`a > b`, not `a &gt; b`).
    `paragraph=False` for a table cell or the rest of a line, where no block starts."""
    flat = " ".join(strip_controls(text).split())
    escaped = _MD_INLINE.sub(lambda m: "\\" + m[0], flat)
    if paragraph:
        escaped = _MD_LEADING.sub(_escape_leading, escaped, count=1)
    return escaped


def _escape_leading(m: re.Match[str]) -> str:
    digits, mark = next((m[i], m[i + 1]) for i in (1, 3, 5) if m[i + 1])
    return f"{digits}\\{mark}"


def markdown_code(text: str) -> str:
    """An inline code span holding `text` (one line, controls stripped): its fence is longer
    than any run of backticks inside it, and a `|` is escaped, which a GitHub table cell
    needs even inside code."""
    flat = " ".join(strip_controls(text).split())
    if not flat:
        return ""
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    body = flat.replace("|", "\\|")
    return f"{fence}{pad}{body}{pad}{fence}"


def html_text(text: str, quote: bool = True) -> str:
    """`text` for an HTML page, element or attribute: controls and bidi overrides stripped
    (newlines kept, for <pre>), then escaped."""
    return html.escape(strip_controls(text, keep_newlines=True), quote=quote)
