"""Markdown as a reader's renderer sees it, for the tests of what the harness writes as
Markdown (report.md, issue.md, the step summary): CommonMark with GitHub's tables and
strikethrough, raw HTML passed through (as GitHub's renderer does before its sanitizer), so
a tag that trainer text opened shows up as a tag in the HTML."""

from __future__ import annotations

from html.parser import HTMLParser

from markdown_it import MarkdownIt

_MD = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def render(markdown: str) -> str:
    return str(_MD.render(markdown))


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_comment(self, data: str) -> None:
        self.tags.append("!--")

    def handle_decl(self, decl: str) -> None:
        self.tags.append("!")

    def handle_pi(self, data: str) -> None:
        self.tags.append("?")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def read(markdown: str) -> tuple[list[str], str]:
    """The elements the rendered `markdown` opens (comments, declarations and processing
    instructions as `!--`, `!`, `?`) and its text, entities decoded."""
    reader = _Reader()
    reader.feed(render(markdown))
    reader.close()
    return reader.tags, "".join(reader.text)
