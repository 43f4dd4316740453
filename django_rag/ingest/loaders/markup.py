"""Markdown with its structure, and CSV/TSV tables as rows that keep their column headers."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ...exceptions import FileRefusedError
from ...types import CORRUPT_FILE, UNSAFE_FILE, RagDocument
from .base import clean_text, decode_text, make_document
from .limits import loader_limits
from .structure import flow_document, table_lines, title_from_text

__all__ = ["load_markdown_bytes", "load_tabular", "markdown_structure"]

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_FRONT_KEY = re.compile(r"^(title|author|authors|description|lang|language)\s*:\s*(.+?)\s*$", re.M | re.I)
_FENCE = re.compile(r"^(```|~~~)")


def markdown_structure(text: str) -> tuple[str, dict[str, str]]:
    """``text`` with YAML front matter taken off (its title, author, language returned) and Setext
    headings written as ATX lines, so every heading reaches the chunker the same way."""
    info: dict[str, str] = {}
    match = _FRONT_MATTER.match(text)
    if match:
        for key, value in _FRONT_KEY.findall(match.group(1)):
            key = {"authors": "author", "lang": "language"}.get(key.lower(), key.lower())
            info.setdefault(key, value.strip().strip("\"'"))
        text = text[match.end() :]
    return "\n".join(_atx_lines(text)), info


def _atx_lines(text: str) -> Iterator[str]:
    lines = text.split("\n")
    fenced = False
    consumed = -1  # the underline of the heading just written
    for position, line in enumerate(lines):
        if position == consumed:
            continue
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        if fenced:
            yield line
            continue
        following = lines[position + 1] if position + 1 < len(lines) else ""
        rule = following.strip()
        underlined = len(rule) >= 2 and len(set(rule)) == 1 and rule[0] in "=-"
        if line.strip() and underlined and not line.lstrip().startswith(("#", ">", "-", "*", "+", "|")):
            yield ("# " if rule[0] == "=" else "## ") + line.strip()
            consumed = position + 1
            continue
        yield line


def load_markdown_bytes(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    charset: str | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """A Markdown file: its headings as ATX lines, its front matter as metadata, its first heading
    (or front matter ``title``) as the title."""
    text, info = markdown_structure(decode_text(data, charset).replace("\r\n", "\n"))
    text = clean_text(text)
    if not text:
        return []
    derived: dict[str, Any] = {
        "source": base_url or source_id,
        "loader": "markdown",
        "content_type": "text/markdown",
        **info,
    }
    derived["title"] = info.get("title") or title_from_text(text) or _short_first_line(text)
    return [make_document(source_id, text, derived, metadata, tags)]


def _short_first_line(text: str) -> str | None:
    first = text.split("\n", 1)[0].strip()
    return first if len(first) <= 80 else None


def _delimiter(sample: str) -> str:
    """The one of ``,;|\\t`` found the same number of times (and most) on the first lines; csv.Sniffer
    does the same with regular expressions at forty times the cost of reading the file."""
    lines = [line for line in sample.split("\n")[:10] if line.strip()][:5]
    best, best_count = ",", 0
    for candidate in ",;\t|":
        counts = {line.count(candidate) for line in lines[:-1] or lines}
        if len(counts) == 1 and (count := counts.pop()) > best_count:
            best, best_count = candidate, count
    return best


def load_tabular(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    charset: str | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """A CSV or TSV file: the first row is the header; each other row one line ``- Col: value``.

    The delimiter is a tab for TSV, else the one ``csv.Sniffer`` finds among ``,;|\\t``.
    """
    content_type = str((metadata or {}).get("content_type") or "text/csv")
    text = decode_text(data, charset)
    delimiter = "\t" if content_type == "text/tab-separated-values" else _delimiter(text[:8192])
    budget = loader_limits().sheet_max_cells
    rows = []
    try:
        for row in csv.reader(io.StringIO(text), delimiter=delimiter):
            budget -= len(row)
            if budget < 0:
                raise FileRefusedError(
                    UNSAFE_FILE,
                    f"table {source_id!r} has more than {loader_limits().sheet_max_cells} cells "
                    "(RAG['LOADERS']['SHEET_MAX_CELLS'])",
                )
            rows.append(row)
    except csv.Error as exc:
        raise FileRefusedError(CORRUPT_FILE, f"table {source_id!r} cannot be parsed: {exc}") from exc
    derived = {"source": base_url or source_id, "loader": "csv", "content_type": content_type}
    return flow_document(source_id, ["\n".join(table_lines(rows))], derived, metadata, tags)
