"""A web page kept to its main content, with trafilatura (the ``html`` extra).

Navigation, headers, footers, cookie banners and other boilerplate are dropped by trafilatura's
extractor; headings stay as Markdown heading lines and tables become rows that keep their
headers. The title is the page's own (``og:title`` or ``<title>``, else its first heading), not
its address. Without trafilatura, or when it finds no main content (a tiny page, a page of
links), ``html.load_html`` reads the whole page as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from html import unescape
from typing import Any

from ...types import RagDocument
from .base import clean_text, make_document
from .structure import table_lines, title_from_text

__all__ = ["load_main_html"]

# A page this long is read whole by html.py, whose cost is linear: trafilatura's tree walk on a
# pathological multi-megabyte page is not bounded the same way.
_MAX_CHARS = 5_000_000
# trafilatura's Markdown marks bold and italic text; a passage reads (and matches) without them.
_HEAD_CHARS = 65_536
_LANG = re.compile(r"<html[^>]*\slang\s*=\s*[\"']?([A-Za-z0-9-]{1,35})", re.I)
_TITLE = re.compile(r"<title[^>]*>([^<]{1,2000})</title", re.I)
_OG_TITLE = re.compile(
    r"<meta[^>]+property\s*=\s*[\"']og:title[\"'][^>]*content\s*=\s*\"([^\"]{1,2000})\"", re.I
)
_AUTHOR = re.compile(r"<meta[^>]+name\s*=\s*[\"']author[\"'][^>]*content\s*=\s*\"([^\"]{1,500})\"", re.I)
_EMPHASIS = re.compile(r"(\*\*|__|\*)(?=\S)(.+?)(?<=\S)\1")


def load_main_html(
    html: str,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    base_url: str | None = None,
) -> list[RagDocument] | None:
    """The page's main content as one document; None when trafilatura is missing or finds none."""
    if len(html) > _MAX_CHARS:
        return None
    try:
        import trafilatura  # the optional "html" extra
    except ImportError:
        return None
    try:
        extracted = trafilatura.extract(
            html,
            output_format="markdown",
            include_tables=True,
            include_comments=False,
            include_links=False,
            include_images=False,
            deduplicate=False,
        )
    except Exception:  # lxml and trafilatura raise many types on broken markup; html.py copes
        return None
    text = clean_text(_EMPHASIS.sub(r"\2", "\n".join(_tables_as_rows(extracted or ""))))
    if not text:
        return None
    # The head's own words, read with a few expressions: trafilatura's metadata pass (dates,
    # site names) costs four times its extraction.
    head = html[:_HEAD_CHARS]
    derived: dict[str, Any] = {
        "source": base_url or source_id,
        "loader": "html",
        "content_type": "text/html",
        "title": _meta(_OG_TITLE, head) or _meta(_TITLE, head) or title_from_text(text),
        "author": _meta(_AUTHOR, head),
        "language": _meta(_LANG, head),
    }
    return [make_document(source_id, text, derived, metadata, tags)]


def _meta(pattern: re.Pattern[str], head: str) -> str | None:
    match = pattern.search(head)
    return clean_text(unescape(match.group(1))) or None if match else None


def _tables_as_rows(markdown: str) -> Iterator[str]:
    """Markdown tables (``| a | b |`` lines) as one line per row after its column headers."""
    table: list[list[str]] = []
    for line in markdown.split("\n"):
        stripped = line.strip()
        if stripped.startswith("|"):
            cells = [cell.strip() for cell in stripped.strip("|").split("|")]
            if not all(set(cell) <= {"-", ":", " "} for cell in cells):
                table.append(cells)
            continue
        if table:
            yield from table_lines(table)
            table = []
        yield line
    if table:
        yield from table_lines(table)
