"""PDF into documents with pdfminer.six (the ``pdf`` extra), imported only when a PDF is loaded."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from ...exceptions import ConfigurationError, LoaderError
from ...types import RagDocument
from .base import clean_text, content_source_id, make_document

__all__ = ["PAGE_BREAK", "PdfInput", "load_pdf"]

PdfInput = str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes]
# The chunker counts form feeds to give every chunk its page number, so pages are joined with
# one, blank pages included, and a form feed inside a page's own text is turned into a newline.
PAGE_BREAK = "\f"
_CID = re.compile(r"\(cid:\d+\)")
_HYPHENATED = re.compile(r"([a-z])-\n([a-z])")
_SPACES = re.compile(r"[ \t\r\f\v\xa0]+")
INSTALL_HINT = 'loading PDFs needs pdfminer.six: pip install "django-rag[pdf]"'


def load_pdf(
    path_or_bytes_or_file: PdfInput,
    *,
    source_id: str | None = None,
    per_page: bool = False,
    password: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
) -> list[RagDocument]:
    """Extract the text layer of a PDF.

    By default one document whose pages are separated by ``"\\f"``, with ``metadata["page_count"]``.
    With ``per_page=True`` one document per page that has text, ``source_id`` suffixed ``#p<n>``
    and ``metadata["page"]`` (1-based). Pages without a text layer (scans, images) are dropped,
    so an image-only PDF gives no document. Encrypted PDFs need ``password``.
    """
    data, name = _read(path_or_bytes_or_file)
    if source_id is None:
        source_id = name or content_source_id("pdf", data)
    label = repr(name or source_id)
    title, pages = _extract(data, label, password)
    derived: dict[str, Any] = {
        "source": name or source_id,
        "loader": "pdf",
        "content_type": "application/pdf",
        "title": title or (Path(name).stem if name else None),
        "page_count": len(pages),
    }
    if per_page:
        return [
            make_document(f"{source_id}#p{number}", text, {**derived, "page": number}, metadata, tags)
            for number, text in enumerate(pages, start=1)
            if text
        ]
    if not any(pages):
        return []
    return [make_document(source_id, PAGE_BREAK.join(pages), derived, metadata, tags)]


def _read(source: PdfInput) -> tuple[bytes, str | None]:
    """The PDF's bytes and, when it has one, its file name (used as the default source)."""
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source), None
    if isinstance(source, str | os.PathLike):
        try:
            return Path(source).read_bytes(), os.fspath(source)
        except OSError as exc:
            raise LoaderError(f"cannot read PDF {os.fspath(source)!r}: {exc}") from exc
    if hasattr(source, "read"):
        data = source.read()
        if not isinstance(data, bytes):
            raise LoaderError("load_pdf() needs a file opened in binary mode ('rb')")
        name = getattr(source, "name", None)
        return data, name if isinstance(name, str) else None
    raise LoaderError(f"load_pdf() takes a path, bytes or a binary file, not {type(source).__name__}")


def _extract(data: bytes, label: str, password: str | None) -> tuple[str | None, list[str]]:
    """The document title and the cleaned text of every page (empty string for a page without text)."""
    try:
        from pdfminer.converter import PDFPageAggregator
        from pdfminer.layout import LAParams, LTTextContainer
        from pdfminer.pdfdocument import PDFDocument, PDFPasswordIncorrect
        from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
        from pdfminer.pdfpage import PDFPage
        from pdfminer.pdfparser import PDFParser
    except ImportError as exc:
        raise ConfigurationError(INSTALL_HINT) from exc

    try:
        document = PDFDocument(PDFParser(io.BytesIO(data)), password=password or "")
    except PDFPasswordIncorrect as exc:
        if password:
            raise LoaderError(f"wrong password for PDF {label}") from exc
        raise LoaderError(f"PDF {label} is encrypted; pass password=...") from exc
    except Exception as exc:
        # pdfminer raises a zoo of exceptions (PSEOF, KeyError, TypeError...) on broken files;
        # callers should only ever have to catch LoaderError.
        raise LoaderError(f"PDF {label} is malformed or unreadable: {exc or type(exc).__name__}") from exc

    try:
        resources = PDFResourceManager()
        device = PDFPageAggregator(resources, laparams=LAParams())
        interpreter = PDFPageInterpreter(resources, device)
        pages = []
        for page in PDFPage.create_pages(document):
            interpreter.process_page(page)
            boxes = [item.get_text() for item in device.get_result() if isinstance(item, LTTextContainer)]
            pages.append(_clean_page(boxes))
    except Exception as exc:
        raise LoaderError(f"PDF {label} could not be read: {exc or type(exc).__name__}") from exc
    return _title(document), pages


def _clean_page(boxes: list[str]) -> str:
    """Text boxes (roughly paragraphs) separated by a blank line, layout spacing and glyph ids removed."""
    paragraphs = []
    for box in boxes:
        # "(cid:13)" is how pdfminer spells a glyph it cannot map to a character: noise to a reader.
        lines = (_SPACES.sub(" ", line).strip() for line in _CID.sub("", box).split("\n"))
        paragraph = "\n".join(line for line in lines if line)
        if paragraph:
            paragraphs.append(paragraph)
    text = "\n\n".join(paragraphs).replace(PAGE_BREAK, "\n")
    # Rejoin words hyphenated across a line break ("vis-\nitors"), or search never finds them.
    return clean_text(_HYPHENATED.sub(r"\1\2", text))


def _title(document: Any) -> str | None:
    """``/Title`` from the document information dictionary, decoded, when it is not blank."""
    from pdfminer.pdftypes import resolve1
    from pdfminer.utils import decode_text

    for info in document.info or ():
        value = resolve1(info.get("Title")) if isinstance(info, dict) else None
        if isinstance(value, bytes):
            value = decode_text(value)
        if isinstance(value, str) and clean_text(value):
            return clean_text(value)
    return None
