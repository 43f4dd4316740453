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
from typing import Any

from ...types import RagDocument
from .base import clean_text, make_document
from .markup import markdown_structure
from .structure import table_lines, title_from_text

__all__ = ["load_main_html"]

# A page this long is read whole by html.py, whose cost is linear: trafilatura's tree walk on a
# pathological multi-megabyte page is not bounded the same way.
_MAX_CHARS = 5_000_000
# trafilatura's Markdown marks bold and italic text; a passage reads (and matches) without them.
_LANG = re.compile(r"<html[^>]*\slang\s*=\s*[\"']?([A-Za-z0-9-]{1,35})", re.I)
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
        # One pass: the main content as Markdown, its metadata (og:title or <title>, author) as
        # front matter.
        extracted = trafilatura.extract(
            html,
            output_format="markdown",
            with_metadata=True,
            include_tables=True,
            include_comments=False,
            include_links=False,
            include_images=False,
            deduplicate=False,
        )
    except Exception:  # lxml and trafilatura raise many types on broken markup; html.py copes
        return None
    body, info = markdown_structure(extracted or "")
    text = clean_text(_EMPHASIS.sub(r"\2", "\n".join(_tables_as_rows(body))))
    if not text:
        return None
    language = _LANG.search(html[:4096])
    derived: dict[str, Any] = {
        "source": base_url or source_id,
        "loader": "html",
        "content_type": "text/html",
        "title": clean_text(info.get("title", "")) or title_from_text(text),
        "author": clean_text(info.get("author", "")) or None,
        "language": clean_text(language.group(1)) if language else None,
    }
    return [make_document(source_id, text, derived, metadata, tags)]


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
