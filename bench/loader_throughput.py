"""Loader throughput per format (MB/s, pages/s) against the library each one uses, called directly;
OCR seconds per page (issue 26).

    .venv/bin/python bench/loader_throughput.py [--repeat 3] [--formats docx,xlsx,...] [--ocr-pages 4]

Each format's files are made here by the library that writes that format (python-docx,
openpyxl, python-pptx, odfpy, zipfile for EPUB, the standard library's email, a PDF from
tests/hostile.py), with the same text: paragraphs of a few hundred words under headings, tables
of 20 rows, so that sizes and "pages" (pages, slides, sheets, chapters) are comparable. For each
format it times django-rag's ``load_bytes`` (sniffing, bounds checks, structure) and the
"direct" call: the library's own text extraction with nothing around it (python-docx
paragraphs, openpyxl ``iter_rows``, python-pptx text frames, odfpy ``teletype``, zipfile +
lxml for EPUB, ``email`` + ``get_body``, striprtf, ``csv.reader``, trafilatura ``extract``,
pdfminer ``extract_text``). The best of ``--repeat`` runs is kept. OCR: scanned pages (text
typeset with Pillow, saved as an image-only PDF) read by django-rag (render with pypdfium2, then
Tesseract) and by Tesseract alone on the same page images, seconds per page.
"""

from __future__ import annotations

import argparse
import csv
import email
import email.policy
import io
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from django.conf import settings  # noqa: E402

settings.configure(RAG={"OCR": {"ENABLED": True, "LANGUAGES": "eng"}})

from django_rag.ingest.loaders import load_bytes  # noqa: E402

SENTENCE = (
    "backups run nightly and the operator checks the restore log before the morning meeting while "
    "the replica keeps serving reads and the archive grows by a few gigabytes every week so the "
    "team prunes snapshots older than thirty five days and writes down what changed"
)
WORDS = SENTENCE.split(" ")
SECTIONS = 30  # headings per document; a section is a "page" (page, slide, sheet, chapter)


def paragraph(seed: int, words: int = 120) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(words)).capitalize() + "."


def rows(seed: int) -> list[list[str]]:
    return [["Item", "Owner", "Cost"]] + [
        [f"item {seed}-{n}", WORDS[n % len(WORDS)], str(n * 17)] for n in range(20)
    ]


def make_docx() -> bytes:
    import docx

    document = docx.Document()
    for section in range(SECTIONS):
        document.add_heading(f"Section {section}", 1)
        document.add_paragraph(paragraph(section))
        table = document.add_table(rows=0, cols=3)
        for values in rows(section)[:6]:
            cells = table.add_row().cells
            for cell, value in zip(cells, values, strict=True):
                cell.text = value
    return _saved(document)


def make_xlsx() -> bytes:
    import openpyxl

    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for section in range(SECTIONS):
        sheet = workbook.create_sheet(f"S{section}")
        for values in rows(section) * 5:
            sheet.append(values)
    return _saved(workbook)


def make_pptx() -> bytes:
    import pptx

    deck = pptx.Presentation()
    for section in range(SECTIONS):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Section {section}"
        slide.placeholders[1].text = paragraph(section, 60)
    return _saved(deck)


def make_odt() -> bytes:
    from odf.opendocument import OpenDocumentText
    from odf.text import H, P

    document = OpenDocumentText()
    for section in range(SECTIONS):
        document.text.addElement(H(outlinelevel=1, text=f"Section {section}"))
        document.text.addElement(P(text=paragraph(section)))
    buffer = io.BytesIO()
    document.write(buffer)
    return buffer.getvalue()


def make_epub() -> bytes:
    from tests.test_formats import epub_bytes

    return epub_bytes([(f"Chapter {n}", paragraph(n)) for n in range(SECTIONS)], "Bench", "Bench")


def make_eml() -> bytes:
    message = email.message.EmailMessage()
    message["Subject"], message["From"], message["To"] = "Report", "a@example.com", "b@example.com"
    message.set_content("\n\n".join(paragraph(n) for n in range(SECTIONS)))
    return bytes(message)


def make_rtf() -> bytes:
    body = "".join(f"{{\\b Section {n}}}\\par {paragraph(n)}\\par " for n in range(SECTIONS))
    return ("{\\rtf1\\ansi " + body + "}").encode()


def make_csv() -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    for section in range(SECTIONS):
        writer.writerows(rows(section)[1 if section else 0 :])
    return buffer.getvalue().encode()


def make_md() -> bytes:
    return "\n\n".join(f"# Section {n}\n\n{paragraph(n)}" for n in range(SECTIONS)).encode()


def make_html() -> bytes:
    body = "".join(f"<h2>Section {n}</h2><p>{paragraph(n)}</p>" for n in range(SECTIONS))
    return (
        "<html><head><title>Bench</title></head><body><nav><a href=/>Home</a></nav>"
        f"<main><h1>Bench</h1>{body}</main><footer>Copyright</footer></body></html>"
    ).encode()


def make_pdf() -> bytes:
    from tests.hostile import FONT, pdf_file, stream, text_ops

    pages = SECTIONS
    kids = b" ".join(b"%d 0 R" % (3 + n) for n in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
    ]
    font = 3 + 2 * pages
    for n in range(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (3 + pages + n, font)
        )
    for n in range(pages):
        objects.append(stream(text_ops(paragraph(n, 12))))
    objects.append(FONT)
    return pdf_file(objects)


def _saved(document: Any) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


# --- the libraries called directly -------------------------------------------------------------


def direct_docx(data: bytes) -> str:
    import docx

    document = docx.Document(io.BytesIO(data))
    parts = [p.text for p in document.paragraphs]
    parts += [cell.text for table in document.tables for row in table.rows for cell in row.cells]
    return "\n".join(parts)


def direct_xlsx(data: bytes) -> str:
    import openpyxl

    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    return "\n".join(
        " ".join(str(v) for v in row if v is not None)
        for sheet in workbook.worksheets
        for row in sheet.iter_rows(values_only=True)
    )


def direct_pptx(data: bytes) -> str:
    import pptx

    deck = pptx.Presentation(io.BytesIO(data))
    return "\n".join(s.text_frame.text for slide in deck.slides for s in slide.shapes if s.has_text_frame)


def direct_odt(data: bytes) -> str:
    from odf import teletype, text
    from odf.opendocument import load

    document = load(io.BytesIO(data))
    return "\n".join(teletype.extractText(p) for p in document.getElementsByType(text.P))


def direct_epub(data: bytes) -> str:
    from lxml import etree

    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return "\n".join(
            "".join(etree.fromstring(archive.read(name)).itertext())
            for name in archive.namelist()
            if name.endswith(".xhtml")
        )


def direct_eml(data: bytes) -> str:
    message = email.message_from_bytes(data, policy=email.policy.default)
    body = message.get_body(preferencelist=("plain",))  # type: ignore[attr-defined]
    return str(body.get_content()) if body is not None else ""


def direct_rtf(data: bytes) -> str:
    from striprtf.striprtf import rtf_to_text

    return str(rtf_to_text(data.decode("latin-1")))


def direct_csv(data: bytes) -> str:
    return "\n".join(" ".join(row) for row in csv.reader(io.StringIO(data.decode())))


def direct_md(data: bytes) -> str:
    return data.decode()


def direct_html(data: bytes) -> str:
    import trafilatura

    return str(trafilatura.extract(data.decode(), output_format="markdown", include_tables=True) or "")


def direct_pdf(data: bytes) -> str:
    from pdfminer.high_level import extract_text

    return str(extract_text(io.BytesIO(data)))


FORMATS: dict[str, tuple[Callable[[], bytes], Callable[[bytes], str], str]] = {
    "docx": (make_docx, direct_docx, "python-docx"),
    "xlsx": (make_xlsx, direct_xlsx, "openpyxl"),
    "pptx": (make_pptx, direct_pptx, "python-pptx"),
    "odt": (make_odt, direct_odt, "odfpy"),
    "epub": (make_epub, direct_epub, "zipfile+lxml"),
    "eml": (make_eml, direct_eml, "email"),
    "rtf": (make_rtf, direct_rtf, "striprtf"),
    "csv": (make_csv, direct_csv, "csv"),
    "md": (make_md, direct_md, "str.decode"),
    "html": (make_html, direct_html, "trafilatura"),
    "pdf": (make_pdf, direct_pdf, "pdfminer.six"),
}
NAMES = {"md": "x.md", "csv": "x.csv", "html": "x.html", "eml": "x.eml"}
CONTENT_TYPES = {"md": "text/markdown", "csv": "text/csv", "html": "text/html", "eml": "message/rfc822"}


def best(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times)


def ocr_pages(pages: int, repeat: int) -> tuple[float, float]:
    """Seconds per page: django-rag on an image-only PDF, and Tesseract alone on the same images."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=34)
    images = []
    for n in range(pages):
        lines = textwrap.wrap(paragraph(n, 90), width=60)
        image = Image.new("L", (1400, 140 + 52 * len(lines)), 255)
        draw = ImageDraw.Draw(image)
        for number, line in enumerate(lines):
            draw.text((70, 70 + 52 * number), line, font=font, fill=0)
        images.append(image.convert("RGB"))
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", resolution=200, save_all=True, append_images=images[1:])
    data = buffer.getvalue()
    ours = best(lambda: load_bytes(data, content_type="application/pdf", source_id="scan.pdf"), repeat)
    pngs = []
    for image in images:
        png = io.BytesIO()
        image.convert("L").save(png, format="PNG")
        pngs.append(png.getvalue())
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}

    def tesseract() -> None:
        for png in pngs:
            subprocess.run(
                ["tesseract", "stdin", "stdout", "-l", "eng"], input=png, capture_output=True, env=env
            )

    return ours / pages, best(tesseract, repeat) / pages


def measure(name: str, repeat: int) -> str:
    """One table row: django-rag's load_bytes and the library called directly on the same file."""
    make, direct, library = FORMATS[name]
    data = make()
    content_type = CONTENT_TYPES.get(name, "application/octet-stream")
    source_id = NAMES.get(name, f"x.{name}")
    [doc, *_] = load_bytes(data, content_type=content_type, source_id=source_id)
    pages = doc.text.count("\f") + 1 if "\f" in doc.text else SECTIONS
    ours = best(lambda: load_bytes(data, content_type=content_type, source_id=source_id), repeat)
    theirs = best(lambda: direct(data), repeat)
    megabytes = len(data) / 1e6
    return (
        f"| {name} | {len(data) / 1024:.0f} KB | {pages} | {megabytes / ours:.2f} | {pages / ours:.0f} "
        f"| {library} | {megabytes / theirs:.2f} | {pages / theirs:.0f} | {ours / theirs:.2f}x |"
    )


BOMBS = {
    "zip bomb (300 MiB of zeros in a DOCX)": "zip_bomb_docx()",
    "entry lying about its size (50 MB as 1,000 bytes)": (
        "lying_sizes(rewritten(docx_bytes(), {'word/document.xml': b'<?xml version=\\'1.0\\'?><w:document>'"
        " + b'<w:p/>' * 8_000_000 + b'</w:document>'}), 'word/document.xml', 1000)"
    ),
    "billion laughs in a DOCX": "rewritten(docx_bytes(), {'word/document.xml': BILLION_LAUGHS})",
    "external entity in a DOCX": "rewritten(docx_bytes(), {'word/document.xml': EXTERNAL_ENTITY})",
    "PNG claiming 100,000 x 100,000 pixels": "png_claiming(100_000, 100_000)",
    "PNG claiming 8,000 x 8,000 pixels": "png_claiming(8_000, 8_000)",
}
CHILD = """
import resource, sys, time
sys.path.insert(0, {root!r})
from django.conf import settings
settings.configure(RAG={{"OCR": {{"ENABLED": True}}}})
from tests.hostile_formats import *
from django_rag.exceptions import FileRefusedError
from django_rag.ingest.loaders import load_bytes
data = {build}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
try:
    load_bytes(data, content_type="application/octet-stream", source_id="bomb")
    outcome = "loaded"
except FileRefusedError as exc:
    outcome = exc.reason
elapsed = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fields = (f"{{len(data) / 1024:.0f}}", outcome, f"{{elapsed * 1000:.1f}}", before // 1024, after // 1024)
print("|".join(str(field) for field in fields))
"""


def bombs() -> None:
    """Each bomb loaded in a child process: its outcome, time and the child's peak RSS."""
    print("| file | size | outcome | time | peak RSS before -> after loading |")
    print("|---|---|---|---|---|")
    for name, build in BOMBS.items():
        code = CHILD.format(root=str(ROOT), build=build)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        size, outcome, elapsed, before, after = done.stdout.strip().splitlines()[-1].split("|")
        print(f"| {name} | {size} KB | {outcome} | {elapsed} ms | {before} -> {after} MB |")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--ocr-pages", type=int, default=4, help="0: no OCR measurement")
    parser.add_argument("--bombs", action="store_true", help="only the hostile files, in child processes")
    options = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    if options.bombs:
        bombs()
        return 0
    print("| format | file | pages | django-rag MB/s | pages/s | direct library | MB/s | pages/s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in options.formats.split(","):
        print(measure(name, options.repeat))
    if options.ocr_pages:
        ours, tesseract = ocr_pages(options.ocr_pages, options.repeat)
        print(f"\nOCR: {ours:.2f} s/page (render with pypdfium2 at 200 dpi + Tesseract)")
        print(f"Tesseract alone on the same page images: {tesseract:.2f} s/page")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
