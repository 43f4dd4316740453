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
    # Zip packages (DOCX, XLSX, PPTX, ODF, EPUB): entries listed, bytes all entries declare once
    # inflated (reads stop there whatever the entry claims), and the inflated/compressed ratio of
    # any entry past 1 MB (text compresses 5-20x; a bomb claims 1000x).
    zip_max_entries: int = 10_000
    zip_max_bytes: int = 256 * 1024 * 1024
    zip_max_ratio: int = 200
    # Cells one spreadsheet (all its sheets) may give; past it the file is refused.
    sheet_max_cells: int = 2_000_000
    # Pixels of one image (or one rendered PDF page) handed to OCR; read from the header first,
    # so a small PNG claiming 100k x 100k pixels is refused before it is decoded.
    image_max_pixels: int = 40_000_000
    # Pages of one PDF (or frames of one TIFF) read by OCR; further ones are left out, and said so.
    ocr_max_pages: int = 200
    # Seconds Tesseract may spend on one page or image before it is stopped.
    ocr_timeout: float = 60.0
    # Attachments of one e-mail loaded as documents of their own, and messages nested in messages.
    email_max_attachments: int = 100
    email_max_depth: int = 3


def loader_limits() -> LoaderLimits:
    """``RAG["LOADERS"]`` over the defaults; the defaults alone where Django is not configured."""
    given = rag_section("LOADERS", {field.name for field in fields(LoaderLimits)})
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigurationError(
                f"RAG['LOADERS']['{key.upper()}'] must be a positive number, got {value!r}"
            )
    return LoaderLimits(**given)
