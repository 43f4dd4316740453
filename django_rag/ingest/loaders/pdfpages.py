"""What a PDF's text layer lacks: its outline as headings, its title, and OCR of pages without text.

``load_pdf`` (pdfminer) reads the text layer. Here, with pypdfium2 (the ``pdf`` extra's
renderer, PDFium), the outline's entries become Markdown heading lines at the top of the page
they point to, the ``/Title`` names the document (else its first heading), and, when
``RAG["OCR"]`` is on, every page without a text layer is rendered and read by Tesseract, up to
``OCR_MAX_PAGES`` pages, its number kept. Such a document has ``metadata["ocr"]`` (recorded as
``status_reason`` ``ocr``) and ``metadata["ocr_pages"]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...exceptions import FileRefusedError, LoaderError
from ...types import CORRUPT_FILE, RagDocument
from .base import clean_text, make_document
from .limits import loader_limits
from .ocr import ocr_enabled, ocr_image, ocr_settings
from .pdf import PAGE_BREAK, load_pdf
from .structure import heading, title_from_text

__all__ = ["load_pdf_pages"]

_MAX_OUTLINE = 5_000  # outline entries read; a hostile outline cannot make the text grow without end


def load_pdf_pages(
    data: bytes,
    *,
    source_id: str,
    per_page: bool = False,
    password: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
) -> list[RagDocument]:
    """``load_pdf`` plus the outline as headings, the title, and OCR of text-less pages."""
    loaded = load_pdf(data, source_id=source_id, password=password)
    pages = loaded[0].text.split(PAGE_BREAK) if loaded else []
    derived: dict[str, Any] = dict(loaded[0].metadata) if loaded else {}
    try:
        import pypdfium2  # the optional "pdf" extra: without it, the text layer alone
    except ImportError:
        pypdfium2 = None
    ocr_pages: list[int] = []
    if pypdfium2 is not None:
        try:
            document = pypdfium2.PdfDocument(data, password=password)
        except pypdfium2.PdfiumError as exc:
            if not loaded:
                raise FileRefusedError(CORRUPT_FILE, f"PDF {source_id!r} cannot be opened: {exc}") from exc
            document = None
        if document is not None:
            with document:
                count = len(document)
                pages += [""] * (count - len(pages))
                if ocr_enabled():
                    ocr_pages = _ocr_blank_pages(document, pages, source_id)
                _add_outline(document, pages)
                title = clean_text(document.get_metadata_value("Title") or "")
                if title:
                    derived["title"] = title
    if not any(page.strip() for page in pages):
        return []
    derived.setdefault("source", source_id)
    derived.update(loader="pdf", content_type="application/pdf", page_count=len(pages))
    if not derived.get("title") or derived.get("title") == source_id:
        derived["title"] = title_from_text("\n".join(pages))
    if ocr_pages:
        derived.update(ocr=True, ocr_pages=ocr_pages)
    if per_page:
        return [
            make_document(f"{source_id}#p{number}", text, {**derived, "page": number}, metadata, tags)
            for number, text in enumerate(pages, start=1)
            if text.strip()
        ]
    return [make_document(source_id, PAGE_BREAK.join(pages), derived, metadata, tags)]


def _ocr_blank_pages(document: Any, pages: list[str], source_id: str) -> list[int]:
    """OCR every page of ``pages`` without text, in place; the numbers of the pages read."""
    limits = loader_limits()
    dpi = float(ocr_settings()["DPI"])
    done: list[int] = []
    for index, text in enumerate(pages):
        if text.strip():
            continue
        if len(done) >= limits.ocr_max_pages:
            break
        page = document[index]
        try:
            width, height = page.get_size()
            scale = dpi / 72
            # Fit the bitmap under IMAGE_MAX_PIXELS: a huge page is read at a lower resolution.
            pixels = width * height * scale * scale
            if pixels > limits.image_max_pixels:
                scale *= (limits.image_max_pixels / pixels) ** 0.5
            image = page.render(scale=scale).to_pil()
        except Exception as exc:
            raise LoaderError(f"PDF {source_id!r}: page {index + 1} cannot be rendered: {exc}") from exc
        finally:
            page.close()
        pages[index] = clean_text(ocr_image(image, f"PDF {source_id!r} page {index + 1}", limits))
        if pages[index]:
            done.append(index + 1)
    return done


def _add_outline(document: Any, pages: list[str]) -> None:
    """Each outline entry as a heading line at the top of its page, in outline order."""
    tops: dict[int, list[str]] = {}
    for number, bookmark in enumerate(document.get_toc(max_depth=6)):
        if number >= _MAX_OUTLINE:
            break
        dest = bookmark.get_dest()
        index = dest.get_index() if dest is not None else None
        title = bookmark.get_title() or ""
        line = heading(bookmark.level + 1, title)
        if index is None or not 0 <= index < len(pages) or not line:
            continue
        tops.setdefault(index, []).append(line)
    for index, lines in tops.items():
        pages[index] = "\n\n".join([*lines, pages[index]]).strip()
