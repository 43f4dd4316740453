"""How every structured loader writes what it read: headings, table rows, pages, slides, sheets.

The contract with the chunker (BRIEF): headings are Markdown ATX lines (``# Title``, ``## Part``)
on their own lines; the chunker turns them into each chunk's heading path. Pages, slides, sheets
and chapters are separated by a form feed, so every chunk gets its number in ``chunk.page``;
``metadata["page_unit"]`` says what that number counts and ``page_names`` names them (sheets),
which ``django_rag.types.page_label`` turns into "slide 4" or "sheet Budget" for a citation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ...types import RagDocument
from .base import clean_text, make_document

__all__ = [
    "PAGE_BREAK",
    "flow_document",
    "heading",
    "one_line",
    "paged_document",
    "table_lines",
    "title_from_text",
]

PAGE_BREAK = "\f"
_SPACES = re.compile(r"[ \t\r\xa0]+")
_FIRST_HEADING = re.compile(r"^#{1,6} +(.+)$", re.M)


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of spaces made one space (a cell, a heading)."""
    return _SPACES.sub(" ", text.replace("\n", " ").replace("\f", " ")).strip()


def heading(level: int, text: str) -> str:
    """A Markdown ATX heading line (level clamped to 1-6), or "" for a blank heading."""
    text = one_line(text).lstrip("#").strip()
    return f"{'#' * min(max(level, 1), 6)} {text}" if text else ""


def table_lines(rows: Iterable[Sequence[Any]]) -> list[str]:
    """One line per data row, each value after its column's header: ``- Name: Ana; Role: admin``.

    The first row with a value is the header row; a row keeps its headers wherever a chunk cuts
    the table, so a passage about a row still says what each value is.
    """
    header: list[str] | None = None
    lines = []
    for raw in rows:
        cells = [one_line("" if value is None else str(value)) for value in raw]
        if not any(cells):
            continue
        if header is None:
            header = cells
            continue
        pairs = []
        for position, value in enumerate(cells):
            if not value:
                continue
            name = header[position] if position < len(header) else ""
            pairs.append(f"{name}: {value}" if name and name != value else value)
        lines.append("- " + "; ".join(pairs))
    if header is not None and not lines:
        lines.append("- " + "; ".join(cell for cell in header if cell))
    return lines


def title_from_text(text: str) -> str | None:
    """The first Markdown heading of ``text``, a title of last resort before the file name."""
    match = _FIRST_HEADING.search(text[:100_000])
    return match.group(1).strip() if match else None


def paged_document(
    source_id: str,
    pages: Sequence[str],
    derived: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    tags: Iterable[str] | None,
    *,
    unit: str = "page",
    names: Sequence[str] | None = None,
) -> list[RagDocument]:
    """One document of ``pages`` joined by form feeds (blank ones kept, so numbers hold), or none
    when no page has text. ``unit`` and ``names`` go to ``page_unit`` and ``page_names``."""
    cleaned = [clean_text(page).replace(PAGE_BREAK, "\n") for page in pages]
    if not any(cleaned):
        return []
    text = PAGE_BREAK.join(cleaned)
    info: dict[str, Any] = dict(derived)
    if len(cleaned) > 1 or unit != "page":
        info.update(page_count=len(cleaned), page_unit=unit)
    if names is not None:
        info["page_names"] = list(names)
    if not info.get("title"):
        info["title"] = title_from_text(text)
    return [make_document(source_id, text, info, metadata, tags)]


def flow_document(
    source_id: str,
    blocks: Iterable[str],
    derived: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    tags: Iterable[str] | None,
) -> list[RagDocument]:
    """One document of text blocks (paragraphs, heading lines, table lines) without pages."""
    text = clean_text("\n\n".join(block for block in blocks if block.strip()).replace(PAGE_BREAK, "\n"))
    if not text:
        return []
    info = dict(derived)
    if not info.get("title"):
        info["title"] = title_from_text(text)
    return [make_document(source_id, text, info, metadata, tags)]
