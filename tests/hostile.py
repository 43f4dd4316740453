"""Hostile inputs for the loaders and the chunker, and a confined child process to run them in.

The files are built here, small, when a test (or bench/fuzz_loaders.py) asks for them: none is
committed. ``run_confined`` runs a batch of calls in ONE fresh Python process whose address
space and CPU time are capped with ``resource.setrlimit``, so a bomb that slips through kills
that child (and fails the test) instead of the machine.
"""

from __future__ import annotations

import codecs
import json
import os
import pickle
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict

from django_rag.ingest.chunking import split_text
from django_rag.ingest.loaders import load_bytes, load_html, load_pdf, load_text
from django_rag.ingest.loaders.web import load_fetched
from django_rag.ingest.outbound import FetchResult

ROOT = Path(__file__).resolve().parent.parent

# CPU seconds every call of a batch must finish within (the child as a whole is also held to a
# wall-clock timeout and RLIMIT_CPU).
CALL_SECONDS = 10.0
MEMORY_BYTES = 1536 * 1024 * 1024  # RLIMIT_AS of the child: imports take ~400 MB of address space


# --- PDF ------------------------------------------------------------------------------------------


def pdf_file(objects: list[bytes], *, root: int = 1, xref: bool = True, trailer_extra: bytes = b"") -> bytes:
    """A PDF whose object ``n`` (1-based) is ``objects[n-1]``, with a correct xref unless told not to."""
    out, offsets = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    start = len(out)
    if xref:
        out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
        out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        root,
        trailer_extra,
        start,
    )
    return bytes(out)


def stream(data: bytes, entries: bytes = b"") -> bytes:
    return b"<< /Length %d %s >>\nstream\n%s\nendstream" % (len(data), entries, data)


FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def page(parent: int, contents: int, font: int) -> bytes:
    resources = b"/Resources << /Font << /F1 %d 0 R >> >>" % font
    return b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] %s /Contents %d 0 R >>" % (
        parent,
        resources,
        contents,
    )


def text_ops(text: str) -> bytes:
    return b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % text.encode("latin-1")


def good_pdf(text: str = "A good page about backups.") -> bytes:
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            page(2, 4, 5),
            stream(text_ops(text)),
            FONT,
        ]
    )


def pdf_count_lie() -> bytes:
    """One page, but the page tree says it has two billion."""
    return good_pdf().replace(b"/Count 1", b"/Count 2147483647")


def pdf_wide_page_tree(pages: int = 20000) -> bytes:
    """A flat page tree of ``pages`` distinct pages sharing one content stream (~1.5 MB)."""
    first = 4
    kids = b" ".join(b"%d 0 R" % (first + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        stream(text_ops("Page.")),
    ]
    objects += [
        b"<< /Type /Page /Parent 2 0 R /Contents 3 0 R /Resources << /Font << /F1 %d 0 R >> >> >>"
        % (first + pages)
    ] * pages
    objects.append(FONT)
    return pdf_file(objects)


def pdf_exponential_page_tree(depth: int = 64) -> bytes:
    """Each Pages node lists the next one twice: 2**depth leaves from ``depth`` objects."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(depth):
        child = 2 + level + 1
        objects.append(
            b"<< /Type /Pages /Kids [%d 0 R %d 0 R] /Count %d >>"
            % (child, child, 2 ** min(depth - level, 62))
        )
    leaf = 2 + depth
    objects.append(page(leaf - 1, leaf + 1, leaf + 2))
    objects.append(stream(text_ops("Leaf.")))
    objects.append(FONT)
    return pdf_file(objects)


def pdf_parent_cycle() -> bytes:
    """A page whose /Parent is itself, and a Pages node that is its own kid."""
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 1 /Parent 2 0 R >>",
            b"<< /Type /Page /Parent 3 0 R /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
            stream(text_ops("Cycle.")),
            FONT,
        ]
    )


def pdf_reference_cycle() -> bytes:
    """Objects that are references to themselves or to each other (1 -> 6 -> 7 -> 6, 8 -> 8)."""
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R /Extra 6 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /Contents 6 0 R /Resources 8 0 R /MediaBox 7 0 R >>",
            stream(text_ops("Cycle.")),
            FONT,
            b"7 0 R",
            b"6 0 R",
            b"8 0 R",
        ]
    )


def pdf_title_cycle() -> bytes:
    """The document information's /Title is a reference that leads back to itself."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        page(2, 4, 5),
        stream(text_ops("Titled.")),
        FONT,
        b"<< /Title 7 0 R >>",
        b"7 0 R",
    ]
    return pdf_file(objects, trailer_extra=b" /Info 6 0 R")


def pdf_recursive_object_stream() -> bytes:
    """The page lives in an object stream that /Extends itself and holds a reference to itself."""
    inner = b"3 0 << /Type /Page /Parent 2 0 R /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >> "
    inner += b"6 40 6 0 R"
    objstm = stream(inner, b"/Type /ObjStm /N 2 /First 9 /Extends 6 0 R")
    body = bytearray(b"%PDF-1.7\n")
    offsets = {}
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        4: stream(text_ops("In a stream.")),
        5: FONT,
        6: objstm,
    }
    for number, obj in objects.items():
        offsets[number] = len(body)
        body += b"%d 0 obj\n%s\nendobj\n" % (number, obj)
    # A cross-reference stream would be the honest way; a classic xref marking 3 as compressed
    # is not valid, so leave object 3 to the fallback scan and the object stream's own index.
    start = len(body)
    body += b"xref\n0 7\n0000000000 65535 f \n"
    for number in range(1, 7):
        body += b"%010d 00000 n \n" % offsets.get(number, 0)
    body += b"trailer\n<< /Size 7 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % start
    return bytes(body)


def zero_bomb(gigabytes: int) -> bytes:
    """zlib data that inflates to ``gigabytes`` GiB of zeros, built without inflating it (~1 MB/GiB).

    Blocks flushed with Z_FULL_FLUSH are independent, so one compressed MiB of zeros repeats;
    the Adler-32 of n zeros is a=1, b=n mod 65521.
    """
    mib = 1024 * 1024
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(bytes(mib)) + compressor.flush(zlib.Z_FULL_FLUSH)
    tail = compressor.flush(zlib.Z_FINISH)
    total = gigabytes * 1024 * mib
    adler = ((total % 65521) << 16) | 1
    return b"\x78\xda" + block * (gigabytes * 1024) + tail + adler.to_bytes(4, "big")


def pdf_flate_bomb(gigabytes: int = 4) -> bytes:
    """A content stream that inflates, through two FlateDecode filters, to ``gigabytes`` GiB."""
    twice = zlib.compress(zero_bomb(gigabytes), 9)
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            page(2, 4, 5),
            stream(twice, b"/Filter [/FlateDecode /FlateDecode]"),
            FONT,
        ]
    )


def lzw_zero_bomb(repeats: int) -> bytes:
    """LZW codes (as pdfminer reads them) for a run of zeros whose last code repeats: each repeat
    of code 4095 spells 3,839 bytes in 12 bits."""
    bits, nbits, table = [], 9, 258

    def put(code: int) -> None:
        bits.append(format(code, f"0{nbits}b"))

    put(256)  # clear
    put(0)
    while table < 4096:
        put(table)  # the entry being defined: the previous string plus its first byte
        table += 1
        nbits = {511: 10, 1023: 11, 2047: 12}.get(table, nbits)
    put(4095)
    joined = "".join(bits) + format(4095, "012b") * repeats
    joined += "0" * (-len(joined) % 8)
    return int(joined, 2).to_bytes(len(joined) // 8, "big")


def pdf_lzw_bomb(gigabytes: int = 1) -> bytes:
    """A content stream through FlateDecode then LZWDecode that claims ``gigabytes`` GiB."""
    data = zlib.compress(lzw_zero_bomb(gigabytes * 1024**3 // 3839), 9)
    return _one_stream_pdf(stream(data, b"/Filter [/FlateDecode /LZWDecode]"))


def pdf_runlength_bomb(gigabytes: int = 1) -> bytes:
    """RunLengthDecode turns two bytes into 128: ``gigabytes`` GiB of zeros, deflated first."""
    data = zlib.compress(b"\x81\x00" * (gigabytes * 1024**3 // 128), 9)
    return _one_stream_pdf(stream(data, b"/Filter [/FlateDecode /RunLengthDecode]"))


def _one_stream_pdf(contents: bytes) -> bytes:
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            page(2, 4, 5),
            contents,
            FONT,
        ]
    )


def pdf_many_text_boxes(boxes: int = 6000) -> bytes:
    """One page with ``boxes`` scattered one-word text boxes (layout analysis pairs them up)."""
    ops = b"".join(
        b"BT /F1 4 Tf %d %d Td (w%d) Tj ET\n" % (5 + (i * 37) % 600, 5 + (i * 53) % 780, i)
        for i in range(boxes)
    )
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            page(2, 4, 5),
            stream(zlib.compress(ops, 9), b"/Filter /FlateDecode"),
            FONT,
        ]
    )


def pdf_form_bomb(depth: int = 40) -> bytes:
    """Form k draws form k-1 twice: 2**depth glyphs from ``depth`` small objects (a PDF "billion laughs")."""
    first = 6  # objects 6.. are the forms; form 0 draws a word
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /XObject << /X %d 0 R >> >> >>" % (first + depth),
        stream(b"/X Do"),
        FONT,
    ]
    for level in range(depth + 1):
        if level == 0:
            body, resources = text_ops("laugh"), b"/Font << /F1 5 0 R >>"
        else:
            body, resources = b"/X Do /X Do", b"/XObject << /X %d 0 R >>" % (first + level - 1)
        objects.append(
            stream(body, b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << %s >>" % resources)
        )
    return pdf_file(objects)


def pdf_stacked_glyphs(glyphs: int = 20000) -> bytes:
    """Thousands of one-letter words drawn on the same spot (every line neighbours every other)."""
    ops = b"BT /F1 12 Tf " + b"72 720 Td (x) Tj -0 0 Td " * glyphs + b"ET"
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            page(2, 4, 5),
            stream(zlib.compress(ops, 9), b"/Filter /FlateDecode"),
            FONT,
        ]
    )


def pdf_broken_xref() -> bytes:
    """Offsets that point nowhere and a startxref past the end of the file."""
    data = bytearray(good_pdf())
    xref = data.index(b"xref\n")
    data[xref:] = data[xref:].replace(b"00000 n", b"00000 n").replace(b"0000000", b"9999999")
    return bytes(data).replace(b"startxref\n", b"startxref\n99999999")


def pdf_truncated() -> bytes:
    data = good_pdf()
    return data[: len(data) // 2]


PDF_BOMBS: dict[str, Any] = {
    "count-lie": pdf_count_lie,
    "wide-page-tree": pdf_wide_page_tree,
    "exponential-page-tree": pdf_exponential_page_tree,
    "parent-cycle": pdf_parent_cycle,
    "reference-cycle": pdf_reference_cycle,
    "title-cycle": pdf_title_cycle,
    "recursive-object-stream": pdf_recursive_object_stream,
    "flate-bomb": pdf_flate_bomb,
    "lzw-bomb": pdf_lzw_bomb,
    "runlength-bomb": pdf_runlength_bomb,
    "many-text-boxes": pdf_many_text_boxes,
    "form-bomb": pdf_form_bomb,
    "stacked-glyphs": pdf_stacked_glyphs,
    "broken-xref": pdf_broken_xref,
    "truncated": pdf_truncated,
}


# --- HTML and text --------------------------------------------------------------------------------

MB = 1024 * 1024


def html_deeply_nested(levels: int = 100_000) -> bytes:
    return b"<html><body>" + b"<div>" * levels + b"deep text" + b"</div>" * levels + b"</body></html>"


def html_unclosed_nesting(levels: int = 100_000, tags: bytes = b"<span><b><i>") -> bytes:
    return b"<html><body>" + tags * levels + b"never closed"


def html_unterminated_tag() -> bytes:
    return b'<html><body><p>before</p><div class="' + b"x" * MB


def html_unterminated_comment() -> bytes:
    return b"<html><body><p>before</p><!--" + b"<p>hidden</p>" * 10_000


def html_long_line(size: int = 20 * MB) -> bytes:
    return b"<html><body><p>" + b"word " * (size // 5) + b"</p></body></html>"


def text_long_line(size: int = 20 * MB) -> bytes:
    return b"lorem ipsum " * (size // 12)


def punctuation_run(size: int = 2 * MB) -> str:
    return ".,;:!?-" * (size // 7)


ODD_CHARSETS = [
    "utf-7",
    "unicode_escape",
    "raw_unicode_escape",
    "rot13",
    "base64",
    "hex",
    "zlib",
    "idna",
    "punycode",
    "x-user-defined",
    "utf-32",
    "",
    "\x00",
    "utf-8\x00evil",
    "a" * 300,
    "../../etc/passwd",
]


def bom_lie() -> bytes:
    """A UTF-16 little-endian BOM in front of UTF-8 text with an odd length."""
    return codecs.BOM_UTF16_LE + "Über café, résumé.".encode()


ENCODINGS: dict[str, bytes] = {
    "invalid-utf8": b"Valid start \xff\xfe\xfd \xc3\x28 \xa0\xa1 \xe2\x82 \xf0\x28\x8c\x28 end.",
    "nul-bytes": b"text\x00with\x00nul\x00bytes " * 100,
    "utf16-le-bom": codecs.BOM_UTF16_LE + "Little endian text.".encode("utf-16-le"),
    "utf16-be-bom": codecs.BOM_UTF16_BE + "Big endian text.".encode("utf-16-be"),
    "utf16-bom-lie": bom_lie(),
    "utf32-bom-truncated": codecs.BOM_UTF32_LE + b"a\x00\x00",
    "surrogates-escaped": b"lone \xed\xa0\x80 surrogate \xed\xbf\xbf bytes",
}


# --- hypothesis strategies, one per fuzz target ---------------------------------------------------
# Shared with bench/fuzz_loaders.py, which runs the same ones for many more examples.


def strategies() -> dict[str, Any]:
    """Target name -> a strategy of the keyword arguments ``call_target`` takes for it."""
    # Every code point, lone surrogates included (st.characters() leaves them out by default).
    anything = st.characters(codec=None, exclude_categories=())
    tricky = st.sampled_from(
        [
            "\x00",
            "\f",
            "\r",
            "\n",
            "\u200b",
            "\ufeff",
            "\ud800",
            "\udfff",
            "\ud83d\ude00",
            "\u2029",
            "ﬁ",
            ".",
            "!?",
            "…",
            "。",
            " ",
            "\t",
            "#",
        ]
    )
    text = st.lists(st.one_of(st.text(anything, max_size=30), tricky), max_size=40).map("".join)
    punctuation = st.text(st.sampled_from(".,;:!?-…。\"')]»"), min_size=1, max_size=3000)
    value = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(anything, max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=6,
    )
    record = st.dictionaries(
        st.sampled_from(["source_id", "text", "metadata", "tags", "other"]),
        st.one_of(text, value),
        max_size=4,
    )
    html_bits = st.sampled_from(
        [
            "<p>",
            "</p>",
            "<div>",
            "</div>",
            "<pre>",
            "</pre>",
            "<script>",
            "</script>",
            "<style>",
            "<title>",
            "</title>",
            "<h1>",
            "</h1>",
            "<nav>",
            "</nav>",
            "<br>",
            "<br/>",
            "<td>",
            "<html lang=",
            "<!--",
            "-->",
            "<![CDATA[",
            "<![",
            "<![if",
            "<![foo",
            "<![endif]>",
            "]]>",
            "<!DOCTYPE html>",
            "<?xml ?>",
            "&#0;",
            "&#xD800;",
            "&#x110000;",
            "&amp",
            "&",
            "<",
            ">",
            '"',
            "'",
            '<meta charset="',
            "<div hidden>",
            '<a class="headerlink">',
            "<svg><svg>",
            "<td role=navigation>",
            "</",
            "<p/",
            "=",
            "<textarea>",
            "<plaintext>",
        ]
    )
    html = st.lists(st.one_of(html_bits, text), max_size=60).map("".join)
    charset = st.one_of(
        st.none(),
        st.sampled_from([*ODD_CHARSETS, "utf-8", "latin-1", "utf-16", "cp1252", "shift_jis"]),
        st.text(max_size=12),
    )
    content_type = st.sampled_from(
        [
            "text/plain",
            "text/markdown",
            "text/html",
            "application/xhtml+xml",
            "application/pdf",
            "TEXT/HTML; charset=",
            "image/png",
            "",
        ]
    )
    boms = st.sampled_from(
        [
            b"",
            codecs.BOM_UTF8,
            codecs.BOM_UTF16_LE,
            codecs.BOM_UTF16_BE,
            codecs.BOM_UTF32_LE,
            codecs.BOM_UTF32_BE,
        ]
    )
    raw = st.one_of(
        st.binary(max_size=400),
        st.tuples(boms, text).map(lambda pair: pair[0] + pair[1].encode("utf-8", "surrogatepass")),
        st.tuples(boms, html).map(lambda pair: pair[0] + pair[1].encode("utf-16-le", "surrogatepass")),
        html.map(lambda h: h.encode("utf-8", "surrogatepass")),
    )
    return {
        "text": st.fixed_dictionaries(
            {"text": st.one_of(text, record, st.lists(st.one_of(text, record), max_size=4))}
        ),
        "html": st.fixed_dictionaries({"html": html}),
        "bytes": st.fixed_dictionaries({"data": raw, "content_type": content_type, "charset": charset}),
        "web": st.fixed_dictionaries(
            {
                "url": st.just("https://example.test/page"),
                "final_url": st.one_of(
                    st.sampled_from(
                        [
                            "https://example.test/a.pdf",
                            "https://example.test/b.html?x",
                            "https://example.test/",
                        ]
                    ),
                    st.text(max_size=30),
                ),
                "status": st.integers(0, 999),
                "content_type": st.one_of(content_type, st.text(max_size=40)).flatmap(
                    lambda ct: st.sampled_from(
                        [ct, f"{ct}; charset=utf-16", f'{ct};charset="unicode_escape"', f"{ct}; charset=;;"]
                    )
                ),
                "data": raw,
            }
        ),
        "pdf": st.fixed_dictionaries({"data": pdf_strategy(), "per_page": st.booleans()}),
        "chunker": st.one_of(
            st.fixed_dictionaries(
                {"text": st.one_of(text, punctuation), "chunk_size": st.integers(1, 64)}
            ).flatmap(
                lambda args: st.fixed_dictionaries(
                    {
                        "text": st.just(args["text"]),
                        "chunk_size": st.just(args["chunk_size"]),
                        "chunk_overlap": st.integers(0, args["chunk_size"] - 1),
                    }
                )
            ),
        ),
    }


PDF_TOKENS = [
    b" 0 R",
    b"<<",
    b">>",
    b"[",
    b"]",
    b"/Kids",
    b"/Parent",
    b"/Count 99999999",
    b"/Type /Pages",
    b"/Type /Page",
    b"/Filter /FlateDecode",
    b"/Filter /LZWDecode",
    b"/Length 999999",
    b"/Length -1",
    b"stream\n",
    b"endstream",
    b"obj",
    b"endobj",
    b"xref",
    b"trailer",
    b"startxref",
    b"%%EOF",
    b"(",
    b")",
    b"\\",
    b"<",
    b">",
    b"9999999999",
    b"-0.0",
    b"1e308",
    b"/Contents",
    b"/Resources",
    b"/Font",
    b"Tj",
    b"TJ",
    b"BT",
    b"ET",
    b"Do",
    b"/XObject",
    b"/ObjStm",
    b"/Extends",
    b"/Encrypt",
    b"/Info",
    b"/Root",
    b" 2 0 R",
    b" 1 0 R",
    b"\x00",
    b"\xff",
]


def pdf_seeds() -> list[bytes]:
    two_pages = pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>",
            page(2, 5, 7),
            page(2, 6, 7),
            stream(zlib.compress(text_ops("First page, compressed."))),
            stream(text_ops("Second page.")),
            FONT,
        ]
    ).replace(b"<< /Length", b"<< /Filter /FlateDecode /Length", 1)
    return [good_pdf(), two_pages, pdf_title_cycle(), pdf_recursive_object_stream()]


def pdf_strategy() -> Any:
    """Valid PDFs bent out of shape: bytes replaced, PDF tokens inserted, slices cut or repeated."""

    def mutate(seed: bytes, edits: list[tuple[int, int, int, bytes]]) -> bytes:
        data = bytearray(seed)
        for kind, at, length, token in edits:
            at %= max(1, len(data))
            if kind == 0:
                data[at : at + len(token)] = token
            elif kind == 1:
                data[at:at] = token
            elif kind == 2:
                del data[at : at + length]
            else:
                data[at:at] = data[at : at + length] * 3
        return bytes(data)

    edit = st.tuples(
        st.integers(0, 3),
        st.integers(0, 10**6),
        st.integers(1, 64),
        st.sampled_from(PDF_TOKENS) | st.binary(min_size=1, max_size=4),
    )
    return st.one_of(
        st.builds(mutate, st.sampled_from(pdf_seeds()), st.lists(edit, min_size=1, max_size=6)),
        st.binary(max_size=300).map(lambda tail: b"%PDF-1.4\n" + tail),
    )


FUZZ_CHILD = r"""
import json, resource, sys, time
memory, cpu = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
plan, deadline_ms, derandomize = json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
import traceback
from datetime import timedelta
from hypothesis import HealthCheck, given, settings
from tests.hostile import call_target, strategies
from django_rag.exceptions import LoaderError
every = strategies()
for target, examples in plan.items():
    calls = []

    @settings(
        max_examples=examples,
        deadline=timedelta(milliseconds=deadline_ms),
        derandomize=derandomize,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(every[target])
    def only_loader_errors(args):
        began = time.process_time()
        try:
            call_target(target, args)
        except LoaderError:
            pass
        calls.append(time.process_time() - began)

    began = time.perf_counter()
    error = ""
    try:
        only_loader_errors()
    except BaseException as exc:
        error = "".join(traceback.format_exception(exc))[-4000:]
    # VmHWM, not ru_maxrss: Linux carries the parent's peak over fork+exec into ru_maxrss, so a
    # test process grown large by earlier tests made a small child look 850 MB.
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    print(json.dumps({"target": target, "examples": len(calls), "seconds": time.perf_counter() - began,
                      "slowest": max(calls, default=0.0), "peak_rss_mb": peak, "error": error}), flush=True)
"""


@dataclass
class FuzzRun:
    target: str
    examples: int  # examples run (shrinking a failure runs more)
    seconds: float
    slowest: float  # CPU seconds of the slowest single call
    peak_rss_mb: float  # the child's peak resident set so far
    error: str  # hypothesis's report of the smallest failing example, or ""


def fuzz_confined(
    plan: dict[str, int],
    *,
    deadline_ms: int = 5000,
    memory_bytes: int = MEMORY_BYTES,
    cpu_seconds: int = 300,
    wall_seconds: float = 600.0,
    derandomize: bool = True,
) -> dict[str, FuzzRun]:
    """Run each target's property for its number of hypothesis examples, all in one confined child."""
    options = [str(memory_bytes), str(cpu_seconds), json.dumps(plan), str(deadline_ms), "01"[derandomize]]
    stdout, stderr, code = _run_child(
        [FUZZ_CHILD, *options],
        b"",
        wall_seconds,
    )
    runs = [FuzzRun(**json.loads(line)) for line in stdout.decode().splitlines() if line.startswith("{")]
    assert code == 0 and len(runs) == len(plan), (
        f"the fuzz child exited with {code} after {[r.target for r in runs]}: {stderr.decode()[-3000:]}"
    )
    return {run.target: run for run in runs}


# --- running inputs in a confined child -----------------------------------------------------------


@dataclass
class Outcome:
    case: str
    result: str  # "documents" | "chunks" | "loader-error" | an escaped exception's type
    detail: str
    seconds: float
    peak_rss_mb: float


CHILD = r"""
import json, os, pickle, resource, sys, time
memory, cpu = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
loaders = json.loads(sys.argv[3])
if loaders:
    from django.conf import settings
    settings.configure(RAG={"LOADERS": loaders})
cases = pickle.load(sys.stdin.buffer)
from tests.hostile import call_target
from django_rag.exceptions import LoaderError
out = sys.stdout
for name, target, args in cases:
    began = time.process_time()
    try:
        result, detail = call_target(target, args)
    except LoaderError as exc:
        result, detail = "loader-error", str(exc)[:300]
    except BaseException as exc:
        result, detail = type(exc).__name__, repr(exc)[:300]
    seconds = time.process_time() - began
    # VmHWM, not ru_maxrss: Linux carries the parent's peak over fork+exec into ru_maxrss, so a
    # test process grown large by earlier tests made a small child look 850 MB.
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    out.write(json.dumps([name, result, detail, seconds, peak]) + "\n")
    out.flush()
"""


def call_target(target: str, args: dict[str, Any]) -> tuple[str, str]:
    """Call one loader (or the chunker) the way a caller would; return what it gave."""
    if target == "chunker":
        chunks = split_text(
            args["text"], chunk_size=args.get("chunk_size", 256), chunk_overlap=args.get("chunk_overlap", 32)
        )
        for chunk in chunks:
            assert chunk.content == args["text"][chunk.char_start : chunk.char_end], chunk
        return "chunks", str(len(chunks))
    if target == "text":
        docs = load_text(args["text"], source_id="fuzz")
    elif target == "html":
        docs = load_html(args["html"], source_id="fuzz")
    elif target == "pdf":
        docs = load_pdf(args["data"], source_id="fuzz", per_page=args.get("per_page", False))
    elif target == "bytes":
        docs = load_bytes(
            args["data"], content_type=args["content_type"], source_id="fuzz", charset=args.get("charset")
        )
    elif target == "web":
        headers = CaseInsensitiveDict({"Content-Type": args["content_type"]})
        response = FetchResult(args["url"], args["final_url"], args["status"], headers, args["data"])
        docs = load_fetched(response, source_id="fuzz")
    else:
        raise ValueError(target)
    for doc in docs:
        # What a file or a response holds must be storable; records' metadata and tags are the
        # caller's own values, stored as given.
        derived = [] if target == "text" else [json.dumps(doc.metadata, ensure_ascii=False), *doc.tags]
        _assert_storable(doc.text, *derived)
    return "documents", str(len(docs))


def _assert_storable(*texts: str) -> None:
    """PostgreSQL text and JSONB hold neither NUL nor a lone surrogate (not UTF-8)."""
    for text in texts:
        text.encode("utf-8")
        assert "\x00" not in text and "\\u0000" not in text, text[:200]


def run_confined(
    cases: list[tuple[str, str, dict[str, Any]]],
    *,
    memory_bytes: int = MEMORY_BYTES,
    cpu_seconds: int = 60,
    wall_seconds: float = 120.0,
    loaders: dict[str, Any] | None = None,
) -> list[Outcome]:
    """Run ``(name, target, args)`` calls in one child under the limits; every call's outcome.

    ``loaders`` is the child's ``RAG["LOADERS"]``. Raises AssertionError if the child did not
    finish them all and exit cleanly.
    """

    stdout, stderr, code = _run_child(
        [CHILD, str(memory_bytes), str(cpu_seconds), json.dumps(loaders or {})],
        pickle.dumps(cases),
        wall_seconds,
    )
    outcomes = [Outcome(*json.loads(line)) for line in stdout.decode().splitlines() if line.strip()]
    done = {o.case for o in outcomes}
    missing = [name for name, _, _ in cases if name not in done]
    assert code == 0 and not missing, (
        f"the confined child exited with {code} in {missing[:1]} (and {len(missing) - 1} more "
        f"not run): {stderr.decode()[-2000:]}"
    )
    return outcomes


def _run_child(argv: list[str], stdin: bytes, wall_seconds: float) -> tuple[bytes, bytes, int]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        # glibc gives every thread a 64 MB heap arena; the address-space limit should bound the
        # loaders' memory, not the number of threads a library starts.
        "MALLOC_ARENA_MAX": "2",
    }
    with subprocess.Popen(
        [sys.executable, "-c", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    ) as child:
        try:
            stdout, stderr = child.communicate(stdin, timeout=wall_seconds)
        except subprocess.TimeoutExpired:
            child.kill()  # this child only, which this function started
            stdout, stderr = child.communicate()
            stderr += f"\nkilled after {wall_seconds} s of wall time".encode()
    return stdout, stderr, child.returncode
