"""PDF into documents with pdfminer.six (the ``pdf`` extra), imported only when a PDF is loaded."""

from __future__ import annotations

import functools
import heapq
import io
import itertools
import os
import re
import time
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from ...exceptions import ConfigurationError, LoaderError
from ...types import RagDocument
from .base import clean_text, content_source_id, make_document
from .limits import LoaderLimits, loader_limits

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
    budget = _Budget(limits, label)
    try:
        document = _bounded_document(PDFDocument)(PDFParser(io.BytesIO(data)), password or "", budget)
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


class _Budget:
    """What one PDF may still cost: decoded stream bytes, objects drawn on a page, time."""

    def __init__(self, limits: LoaderLimits, label: str) -> None:
        self.limits = limits
        self.label = label
        self.decoded = 0
        self.page_objects = 0
        self.deadline = time.monotonic() + limits.pdf_timeout

    def decode(self, size: int) -> None:
        self.decoded += size
        if self.decoded > self.limits.pdf_max_decoded_bytes:
            self.too_large()

    def too_large(self) -> None:
        raise LoaderError(
            f"PDF {self.label} decodes to more than {self.limits.pdf_max_decoded_bytes} bytes "
            "(a compression bomb?; the limit is RAG['LOADERS']['PDF_MAX_DECODED_BYTES'])"
        )

    def remaining(self) -> int:
        return self.limits.pdf_max_decoded_bytes - self.decoded

    def new_page(self) -> None:
        self.page_objects = 0
        self.check_time()

    def draw(self) -> None:
        self.page_objects += 1
        if self.page_objects > self.limits.pdf_max_page_objects:
            raise LoaderError(
                f"PDF {self.label} draws more than {self.limits.pdf_max_page_objects} objects on one page "
                "(the limit is RAG['LOADERS']['PDF_MAX_PAGE_OBJECTS'])"
            )
        if not self.page_objects % 1024:
            self.check_time()

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise LoaderError(
                f"PDF {self.label} took more than {self.limits.pdf_timeout} s to read "
                "(the limit is RAG['LOADERS']['PDF_TIMEOUT'])"
            )


def _inflate(data: bytes, limit: int) -> bytes:
    """zlib data inflated, failing past ``limit`` bytes; corrupt or cut data gives what came before."""
    inflater = zlib.decompressobj()
    parts: list[bytes] = []
    size = 0
    pending = data
    try:
        while pending and not inflater.eof:
            part = inflater.decompress(pending, min(_INFLATE_STEP, limit + 1 - size))
            parts.append(part)
            size += len(part)
            if size > limit:
                raise _TooLarge
            pending = inflater.unconsumed_tail
    except zlib.error:
        pass  # pdfminer reads what it can of a damaged stream too
    return b"".join(parts)


_INFLATE_STEP = 8 * 1024 * 1024


def _unlzw(data: bytes, limit: int) -> bytes:
    """LZW data decoded (pdfminer's decoder, fed code by code), failing past ``limit`` bytes."""
    from pdfminer.lzw import CorruptDataError, LZWDecoder  # the optional "pdf" extra

    decoder = LZWDecoder(io.BytesIO(data))
    parts: list[bytes] = []
    size = 0
    while True:
        try:
            code = decoder.readbits(decoder.nbits)
        except EOFError:
            break
        try:
            part = decoder.feed(code)
        except (CorruptDataError, IndexError, TypeError):
            break  # a damaged stream: what came before, as pdfminer does
        parts.append(part)
        size += len(part)
        if size > limit:
            raise _TooLarge
    return b"".join(parts)


def _unrunlength(data: bytes, limit: int) -> bytes:
    """RunLengthDecode (PDF 1.7, 7.4.5), failing past ``limit`` bytes (one byte claims 128)."""
    out = bytearray()
    position, end = 0, len(data)
    while position < end:
        length = data[position]
        position += 1
        if length == 128:
            break
        if length < 128:
            out += data[position : position + length + 1]
            position += length + 1
        elif position < end:
            out += data[position : position + 1] * (257 - length)
            position += 1
        if len(out) > limit:
            raise _TooLarge
    return bytes(out)


class _TooLarge(Exception):
    pass


@functools.cache
def _bounded_document(document_class: Any) -> Any:
    """pdfminer's ``PDFDocument`` that never loops on a reference cycle and decodes within a budget.

    pdfminer follows an object that is only a reference to another (``7 0 obj 6 0 R``) until it
    finds something else, forever when the references go round, and inflates FlateDecode streams
    whole, however large. Every object and stream is fetched through ``getobj``, so both are
    bounded here: a reference cycle is null (as a reference to a missing object is), and streams
    are inflated against the document's ``PDF_MAX_DECODED_BYTES``.
    """
    # pdfminer is the optional "pdf" extra, imported only when a PDF is loaded.
    from pdfminer import pdftypes
    from pdfminer.ascii85 import ascii85decode, asciihexdecode
    from pdfminer.ccitt import ccittfaxdecode
    from pdfminer.pdfexceptions import PDFObjectNotFound
    from pdfminer.pdftypes import PDFObjRef, PDFStream
    from pdfminer.utils import apply_png_predictor, apply_tiff_predictor

    class BoundedDocument(document_class):  # type: ignore[misc]
        def __init__(self, parser: Any, password: str, budget: _Budget) -> None:
            self.budget = budget  # before pdfminer reads the catalog, which may sit in a stream
            super().__init__(parser, password=password)

        def getobj(self, objid: int) -> object:
            obj = super().getobj(objid)
            seen = {objid}
            while isinstance(obj, PDFObjRef):
                if obj.objid in seen:
                    return None
                seen.add(obj.objid)
                try:
                    obj = super().getobj(obj.objid)
                except PDFObjectNotFound:
                    return None
            if isinstance(obj, PDFStream) and obj.data is None:
                # pdfminer decodes a stream when it first reads it (get_data -> self.decode()):
                # this instance's decode is the bounded one.
                obj.decode = functools.partial(_decode, obj, self.budget)  # type: ignore[method-assign]
            return obj

    def _decode(stream: Any, budget: _Budget) -> None:
        # pdfminer's PDFStream.decode with every filter that expands bounded by the budget, and
        # LZW without pdfminer's per-code debug log (it copies the whole code table every code).
        data = stream.rawdata
        if stream.decipher:
            data = stream.decipher(stream.objid, stream.genno, data, stream.attrs)
        try:
            for name, params in stream.get_filters():
                if name in pdftypes.LITERALS_FLATE_DECODE:
                    data = _inflate(data, budget.remaining())
                elif name in pdftypes.LITERALS_LZW_DECODE:
                    data = _unlzw(data, budget.remaining())
                elif name in pdftypes.LITERALS_RUNLENGTH_DECODE:
                    data = _unrunlength(data, budget.remaining())
                elif name in pdftypes.LITERALS_ASCII85_DECODE:
                    data = ascii85decode(data)
                elif name in pdftypes.LITERALS_ASCIIHEX_DECODE:
                    data = asciihexdecode(data)
                elif name in pdftypes.LITERALS_CCITTFAX_DECODE:
                    data = ccittfaxdecode(data, params)
                elif name in image_filters:
                    pass  # left encoded, as pdfminer leaves them
                else:
                    raise pdftypes.PDFNotImplementedError(f"Unsupported filter: {name!r}")
                if params and "Predictor" in params:
                    data = _unpredict(data, params)
        except _TooLarge:
            budget.too_large()
        budget.decode(len(data))
        stream.data, stream.rawdata = data, None

    def _unpredict(data: bytes, params: Any) -> bytes:
        predictor = pdftypes.int_value(params["Predictor"])
        if predictor == 1:
            return data
        colors = pdftypes.int_value(params.get("Colors", 1))
        columns = pdftypes.int_value(params.get("Columns", 1))
        bits = pdftypes.int_value(params.get("BitsPerComponent", 8))
        if predictor == 2:
            return bytes(apply_tiff_predictor(colors, columns, bits, data))
        if predictor >= 10:
            return bytes(apply_png_predictor(predictor, colors, columns, bits, data))
        raise pdftypes.PDFNotImplementedError(f"Unsupported predictor: {predictor!r}")

    image_filters = {
        *pdftypes.LITERALS_DCT_DECODE,
        *pdftypes.LITERALS_JBIG2_DECODE,
        *pdftypes.LITERALS_JPX_DECODE,
    }

    return BoundedDocument


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
    from pdfminer.layout import LTPage, LTTextBoxVertical, LTTextGroupLRTB, LTTextGroupTBRL
    from pdfminer.utils import Plane

    def gap(a: Any, b: Any) -> float:
        # pdfminer's distance: the area of the pair's bounding box less the area of each one.
        width = max(a.x1, b.x1) - min(a.x0, b.x0)
        height = max(a.y1, b.y1) - min(a.y0, b.y0)
        return float(width * height - a.width * a.height - b.width * b.height)

    class StablePage(LTPage):
        max_boxes = 0  # set per page from the budget; 0: no limit

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
        budget: _Budget | None = None

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
