"""Bounds on what one PDF may cost pdfminer: decoded bytes, objects drawn, time; no reference loops.

``RAG["LOADERS"]`` (``limits.LoaderLimits``) sets them; ``pdf.load_pdf`` applies them.
"""

from __future__ import annotations

import functools
import io
import time
import zlib
from typing import Any

from ...exceptions import LoaderError
from .limits import LoaderLimits

__all__ = ["Budget", "bounded_document"]


class Budget:
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
        while not inflater.eof:
            part = inflater.decompress(pending, min(_INFLATE_STEP, limit + 1 - size))
            parts.append(part)
            size += len(part)
            if size > limit:
                raise _TooLarge
            pending = inflater.unconsumed_tail
            if not pending and not part:
                break  # all read and nothing held back: a stream cut short
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
def bounded_document(document_class: Any) -> Any:
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
        def __init__(self, parser: Any, password: str, budget: Budget) -> None:
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

    def _decode(stream: Any, budget: Budget) -> None:
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
