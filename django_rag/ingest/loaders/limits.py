"""The bounds every loader keeps on hostile input: ``RAG["LOADERS"]``, read when a loader runs.

A file's size is bounded before it reaches a loader (``rag_ingest --max-bytes``,
``RAG["MEDIA"]["MAX_BYTES"]``, ``RAG["OUTBOUND"]["MAX_BYTES"]``); these bound the work a small
file can still ask for. See docs/security/hostile-files.md.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ...conf import rag_section
from ...exceptions import ConfigurationError

__all__ = ["LoaderLimits", "loader_limits"]


@dataclass(frozen=True)
class LoaderLimits:
    """Each field is the ``RAG["LOADERS"]`` key of the same name in upper case."""

    # A PDF with more pages fails (LoaderError) before any page is read.
    pdf_max_pages: int = 10_000
    # Bytes all the streams of one PDF may decode to (a few KB of FlateDecode can claim many GB).
    pdf_max_decoded_bytes: int = 256 * 1024 * 1024
    # Characters, figures, paths and images one page may draw (forms drawn inside forms multiply).
    pdf_max_page_objects: int = 100_000
    # Text boxes of one page put in reading order by pdfminer's layout analysis, whose cost grows
    # with the square of their number; a page with more has them sorted top to bottom instead.
    pdf_max_layout_boxes: int = 1_000
    # Seconds of extraction one PDF may take, checked as it draws.
    pdf_timeout: float = 120.0


def loader_limits() -> LoaderLimits:
    """``RAG["LOADERS"]`` over the defaults; the defaults alone where Django is not configured."""
    given = rag_section("LOADERS", {field.name for field in fields(LoaderLimits)})
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigurationError(
                f"RAG['LOADERS']['{key.upper()}'] must be a positive number, got {value!r}"
            )
    return LoaderLimits(**given)
