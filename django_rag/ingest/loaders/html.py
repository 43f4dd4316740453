"""HTML into readable text with the standard library's ``html.parser``.

Chrome (scripts, navigation, headers and footers, forms) is dropped, block elements become
paragraph breaks, ``<pre>`` keeps its lines, everything else has its whitespace collapsed the
way a browser renders it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from html.parser import HTMLParser
from typing import Any

from ...exceptions import LoaderError
from ...types import RagDocument
from .base import clean_text, make_document
from .htmlbounds import neutralize_unclosed_markup

__all__ = ["html_to_text", "load_html"]

# fmt: off
# Elements whose content is never readable text (or is page chrome repeated on every page).
SKIPPED_TAGS = frozenset({
    "script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "svg",
    "iframe", "object", "canvas", "select", "button", "math"
})
# ARIA landmarks that mean the same as the tags above; Sphinx and many CMSs mark chrome this way.
SKIPPED_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search"})
BLOCK_TAGS = frozenset({
    "address", "article", "blockquote", "body", "caption", "dd", "details", "dialog", "div", "dl",
    "dt", "fieldset", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "html",
    "legend", "li", "main", "ol", "p", "pre", "section", "summary", "table", "tbody", "td",
    "tfoot", "th", "thead", "tr", "ul"
})
VOID_TAGS = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr"
})
# fmt: on
# Runs of whitespace that collapse to one space; a lone " " already is one (most of any text, so
# matching it too would make a 20 MB page take seconds for no change).
_SPACE = re.compile(r"[ \t\n\r\f\v\xa0]{2,}|[\t\n\r\f\v\xa0]")


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self.lines: list[str] = []
        self.words: list[str] = []
        self.title_parts: list[str] | None = None
        self.title = ""
        self.h1_parts: list[str] | None = None  # collecting the first <h1>, a fallback title
        self.h1 = ""
        self.language = ""
        self.placeholder = ""  # what stands for a "<" that starts no markup (see _parse)
        self.skip_tag = ""  # the element being skipped, and how deep we are inside copies of it
        self.skip_depth = 0
        self.pre_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skip_depth:
            self.skip_depth += tag == self.skip_tag and tag not in VOID_TAGS
            return
        attributes = {name: value or "" for name, value in attrs}
        if tag == "html" and attributes.get("lang"):
            self.language = attributes["lang"].strip()
        if tag == "title" and not self.title:
            self.title_parts = []
            return
        if tag not in VOID_TAGS and _is_chrome(tag, attributes):
            self.skip_tag, self.skip_depth = tag, 1
            return
        if tag == "br":
            self._end_line()
        elif tag in BLOCK_TAGS:
            self._end_block()
        if tag == "pre":
            self.pre_depth += 1
        elif tag == "h1" and not self.h1 and self.h1_parts is None:
            self.h1_parts = []
        elif tag in {"td", "th"}:
            self.words.append(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # <br/>, <div/>: treat like an element that opens and closes at once.
        self.handle_starttag(tag, attrs)
        if tag not in VOID_TAGS:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.skip_depth:
            self.skip_depth -= tag == self.skip_tag
            return
        if tag == "title" and self.title_parts is not None:
            self.title = _collapse("".join(self.title_parts))
            self.title_parts = None
        elif tag == "pre" and self.pre_depth:
            self._end_block()
            self.pre_depth -= 1
        elif tag == "h1" and self.h1_parts is not None:
            self.h1 = _collapse("".join(self.h1_parts))
            self.h1_parts = None
        if tag in BLOCK_TAGS:
            self._end_block()

    def handle_data(self, data: str) -> None:
        if self.skip_depth:
            return
        if self.title_parts is not None:
            self.title_parts.append(data)
            return
        if self.h1_parts is not None:
            self.h1_parts.append(data)
        if self.pre_depth:
            # Keep the lines of preformatted text (code), so flush the prose around it first.
            *complete, rest = data.split("\n")
            for line in complete:
                self.words.append(line)
                self._end_line(preformatted=True)
            self.words.append(rest)
        else:
            self.words.append(data)

    def _end_line(self, preformatted: bool = False) -> None:
        text = "".join(self.words)
        self.words = []
        line = text.replace("\xa0", " ").rstrip() if preformatted or self.pre_depth else _collapse(text)
        if line or (preformatted and self.lines):
            self.lines.append(line)

    def _end_block(self) -> None:
        self._end_line()
        while self.lines and not self.lines[-1].strip():
            self.lines.pop()
        if self.lines:
            self.blocks.append("\n".join(self.lines))
        self.lines = []

    def result(self) -> str:
        self._end_block()
        return "\n\n".join(self.blocks)


def _is_chrome(tag: str, attributes: Mapping[str, str]) -> bool:
    if tag in SKIPPED_TAGS:
        return True
    if "hidden" in attributes or attributes.get("aria-hidden", "").lower() == "true":
        return True
    if attributes.get("role", "").lower() in SKIPPED_ROLES:
        return True
    # Sphinx's "¶" permalink after every heading would otherwise end up in every title and chunk.
    return tag == "a" and "headerlink" in attributes.get("class", "").split()


_MARKED_SECTION = re.compile(r"<!\[(?!CDATA\[)")
_PLACEHOLDERS = "\ue000\ue001\ue002\ue003"


def _parse(html: str) -> _TextExtractor:
    # The "<" that cannot start markup become a private-use character the page does not hold,
    # made "<" again in what is read: written "&lt;", megabytes of "</" cost html.parser one
    # charref call each (two million per 4 MB).
    lt = next((c for c in _PLACEHOLDERS if c not in html), "&lt;")
    parser = _TextExtractor()
    parser.feed(neutralize_unclosed_markup(html, lt))
    parser.close()
    parser.placeholder = lt if lt != "&lt;" else ""
    return parser


def _collapse(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def html_to_text(html: str) -> tuple[str, dict[str, str]]:
    """Readable text of ``html`` and what it says about itself (``title``, ``language``)."""
    try:
        parser = _parse(html)
    except AssertionError:
        # html.parser (before Python 3.13.4) asserts on a "<![" not followed by a keyword it
        # knows, e.g. "<![ x" or binary data; browsers read it as a bogus comment. Make it text.
        parser = _parse(_MARKED_SECTION.sub("&lt;![", html))
    lt = parser.placeholder

    def restored(value: str) -> str:
        return value.replace(lt, "<") if lt else value

    text = clean_text(restored(parser.result()))
    info: dict[str, str] = {}
    # Metadata goes to a JSONB column, which refuses NUL and lone surrogates as text does.
    title = clean_text(restored(parser.title or parser.h1))
    if title:
        info["title"] = title
    language = clean_text(restored(parser.language))
    if language:
        info["language"] = language
    return text, info


def load_html(
    html: str,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """One document with the readable text of ``html``; none if the page has no text.

    ``metadata["title"]`` comes from ``<title>`` (or the first ``<h1>``), ``metadata["language"]``
    from ``<html lang>``; ``base_url`` (the page's address, when known) becomes ``metadata["source"]``.
    """
    try:
        text, info = html_to_text(html)
    except AssertionError as exc:  # html.parser's way of saying it cannot go on; see html_to_text
        raise LoaderError(f"HTML {source_id!r} cannot be parsed: {exc}") from exc
    if not text:
        return []
    derived = {"source": base_url or source_id, "loader": "html", "content_type": "text/html", **info}
    return [make_document(source_id, text, derived, metadata, tags)]
