"""PDF into documents with pdfminer.six (the ``pdf`` extra), imported only when a PDF is loaded."""

from __future__ import annotations

import functools
import heapq
import io
import itertools
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from ...exceptions import ConfigurationError, LoaderError
from ...types import RagDocument
from .base import clean_text, content_source_id, make_document
from .limits import loader_limits
from .pdfbounds import Budget, bounded_document

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

    limits = loader_limits()
    budget = Budget(limits, label)
    try:
        document = bounded_document(PDFDocument)(PDFParser(io.BytesIO(data)), password or "", budget)
    except PDFPasswordIncorrect as exc:
        if password:
            raise LoaderError(f"wrong password for PDF {label}") from exc
        raise LoaderError(f"PDF {label} is encrypted; pass password=...") from exc
    except LoaderError:
        raise
    except Exception as exc:
        # pdfminer raises a zoo of exceptions (PSEOF, KeyError, TypeError...) on broken files;
        # callers should only ever have to catch LoaderError.
        raise LoaderError(f"PDF {label} is malformed or unreadable: {exc or type(exc).__name__}") from exc

    try:
        listed = list(itertools.islice(PDFPage.create_pages(document), limits.pdf_max_pages + 1))
        if len(listed) > limits.pdf_max_pages:
            raise LoaderError(
                f"PDF {label} has more than {limits.pdf_max_pages} pages "
                "(the limit is RAG['LOADERS']['PDF_MAX_PAGES'])"
            )
        resources = PDFResourceManager()
        device = _stable_aggregator(PDFPageAggregator)(resources, laparams=LAParams())
        device.budget = budget
        interpreter = PDFPageInterpreter(resources, device)
        pages = []
        for page in listed:
            interpreter.process_page(page)
            boxes = [item.get_text() for item in device.get_result() if isinstance(item, LTTextContainer)]
            pages.append(_clean_page(boxes))
        title = _title(document)
    except LoaderError:
        raise
    except Exception as exc:
        raise LoaderError(f"PDF {label} could not be read: {exc or type(exc).__name__}") from exc
    return title, pages


@functools.cache
def _stable_aggregator(aggregator: Any) -> Any:
    """pdfminer's ``PDFPageAggregator`` with a layout analysis that gives the same text every run.

    pdfminer orders the text boxes of a page by merging the closest pairs first, from a heap of
    ``(distance, id(box1), id(box2), ...)``: boxes at equal distances (the columns of a printed
    matrix or table) are taken in the order of their memory addresses, which change from run to
    run, and so does the reading order of those boxes. The same merge with a creation counter in
    place of ``id()`` breaks those ties by the order the boxes appear in the page, every time.
    """
    # pdfminer is the optional "pdf" extra, imported only when a PDF is loaded.
    from pdfminer.layout import (
        LTPage,
        LTTextBoxHorizontal,
        LTTextBoxVertical,
        LTTextGroupLRTB,
        LTTextGroupTBRL,
        LTTextLineVertical,
    )
    from pdfminer.utils import Plane

    def gap(a: Any, b: Any) -> float:
        # pdfminer's distance: the area of the pair's bounding box less the area of each one.
        width = max(a.x1, b.x1) - min(a.x0, b.x0)
        height = max(a.y1, b.y1) - min(a.y0, b.y0)
        return float(width * height - a.width * a.height - b.width * b.height)

    class StablePage(LTPage):
        max_boxes = 0  # set per page from the budget; 0: no limit

        def group_textlines(self, laparams: Any, lines: Any) -> Any:
            lines = list(lines)
            if self.max_boxes and len(lines) > self.max_boxes:
                # pdfminer rebuilds a box from all its lines each time a neighbour joins it: time
                # grows with the square of a group's size (a page of 15,000 overlapping text
                # objects took over a minute). So many lines are read as boxes of one line each,
                # which group_textboxes then sorts.
                for line in lines:
                    box = (
                        LTTextBoxVertical() if isinstance(line, LTTextLineVertical) else LTTextBoxHorizontal()
                    )
                    box.add(line)
                    yield box
                return
            yield from super().group_textlines(laparams, lines)

        def group_textboxes(self, laparams: Any, boxes: Any) -> list[Any]:
            if self.max_boxes and len(boxes) > self.max_boxes:
                # Grouping pairs every box with every other: too slow for this many. Read them
                # top to bottom, left to right (pdfminer's order without layout analysis).
                return sorted(boxes, key=_reading_key)
            serial = itertools.count()
            numbered = [(next(serial), box) for box in boxes]
            plane: Any = Plane(self.bbox)
            heap = [(False, gap(a, b), i, j, a, b) for (i, a), (j, b) in itertools.combinations(numbered, 2)]
            heapq.heapify(heap)
            plane.extend(boxes)
            serials = {id(box): i for i, box in numbered}  # only while the boxes are alive
            merged: set[int] = set()
            while heap:
                checked, distance, i, j, a, b = heapq.heappop(heap)
                if i in merged or j in merged:
                    continue
                if not checked and _between(plane, a, b):
                    heapq.heappush(heap, (True, distance, i, j, a, b))
                    continue
                vertical = isinstance(a, LTTextBoxVertical | LTTextGroupTBRL) or isinstance(
                    b, LTTextBoxVertical | LTTextGroupTBRL
                )
                group = LTTextGroupTBRL([a, b]) if vertical else LTTextGroupLRTB([a, b])
                plane.remove(a)
                plane.remove(b)
                merged.update((i, j))
                number = next(serial)
                serials[id(group)] = number
                for other in plane:
                    heapq.heappush(heap, (False, gap(group, other), number, serials[id(other)], group, other))
                plane.add(group)
            return list(plane)

    class StableAggregator(aggregator):  # type: ignore[misc]
        budget: Budget | None = None

        def begin_page(self, page: Any, ctm: Any) -> None:
            super().begin_page(page, ctm)
            plain: Any = getattr(self, "cur_item")  # noqa: B009 - the base class is untyped here
            self.cur_item = StablePage(plain.pageid, plain.bbox)
            if self.budget is not None:
                self.budget.new_page()
                self.cur_item.max_boxes = self.budget.limits.pdf_max_layout_boxes

        # What a page draws is counted, so forms drawn inside forms cannot multiply without end.
        def begin_figure(self, *args: Any) -> None:
            self._draw()
            super().begin_figure(*args)

        def render_char(self, *args: Any) -> Any:
            self._draw()
            return super().render_char(*args)

        def render_image(self, *args: Any) -> None:
            self._draw()
            super().render_image(*args)

        def paint_path(self, *args: Any) -> None:
            self._draw()
            super().paint_path(*args)

        def _draw(self) -> None:
            if self.budget is not None:
                self.budget.draw()

    return StableAggregator


def _reading_key(box: Any) -> tuple[int, float, float]:
    from pdfminer.layout import LTTextBoxVertical  # the optional "pdf" extra

    if isinstance(box, LTTextBoxVertical):
        return (0, -box.x1, -box.y0)
    return (1, -box.y0, box.x0)


def _between(plane: Any, a: Any, b: Any) -> bool:
    """Whether another box of ``plane`` lies in the bounding box of ``a`` and ``b``."""
    area = (min(a.x0, b.x0), min(a.y0, b.y0), max(a.x1, b.x1), max(a.y1, b.y1))
    return any(obj is not a and obj is not b for obj in plane.find(area))


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
