"""Hostile office files, e-books and images: bombs refused within their bounds, corrupt and
encrypted files recorded as skips with a reason, and a run over a mixed folder that goes on."""

from __future__ import annotations

import io
import random
import time
import tracemalloc
from pathlib import Path
from typing import Any

import openpyxl
import pptx
import pytest
from django.core.management import call_command

from django_rag.exceptions import FileRefusedError
from django_rag.ingest.loaders import load_bytes
from django_rag.models import Document
from tests.hostile_formats import (
    BILLION_LAUGHS,
    EXTERNAL_ENTITY,
    MB,
    docx_bytes,
    encrypted_office,
    lying_sizes,
    many_entries_docx,
    png_claiming,
    rewritten,
    zip_bomb_docx,
)
from tests.outlook_file import msg_file, utf16
from tests.test_formats import epub_bytes, odf_bytes
from tests.test_formats_ocr import FIRE, OCR_ON, PHOTO, photographed, scanned_pdf


@pytest.fixture(scope="module")
def zip_bomb() -> bytes:
    return zip_bomb_docx()


def refused(data: bytes, name: str) -> tuple[FileRefusedError, float, float]:
    """The refusal of loading ``data``, its wall time (s) and the peak of Python memory (MB)."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(FileRefusedError) as error:
            load_bytes(data, content_type="application/octet-stream", source_id=name)
    finally:
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1] / MB
        tracemalloc.stop()
    print(
        f"{name}: {len(data) / 1024:.0f} KB refused in {elapsed * 1000:.1f} ms, "
        f"peak {peak:.1f} MB ({error.value})"
    )
    return error.value, elapsed, peak


def test_a_zip_bomb_is_refused_from_its_directory_before_anything_is_inflated(zip_bomb: bytes) -> None:
    error, elapsed, peak = refused(zip_bomb, "bomb.docx")
    assert error.reason == "unsafe-file" and "ZIP_MAX_RATIO" in str(error)
    assert elapsed < 2 and peak < 2 * len(zip_bomb) / MB + 8


def test_an_entry_that_lies_about_its_size_is_inflated_no_further_than_it_declares() -> None:
    # 50 MB of markup under a central directory that says 1000 bytes: the ratio check passes, and
    # zipfile stops at the size declared (then fails the CRC), so nothing near 50 MB is ever held.
    body = b'<?xml version="1.0"?><w:document xmlns:w="x">' + b"<w:p/>" * (50 * MB // 6) + b"</w:document>"
    package = lying_sizes(rewritten(docx_bytes(), {"word/document.xml": body}), "word/document.xml", 1000)
    error, elapsed, peak = refused(package, "liar.docx")
    assert error.reason == "corrupt-file" and peak < 16 and elapsed < 2


def test_the_inflated_total_and_the_entry_count_are_bounded(settings: Any) -> None:
    settings.RAG = {**settings.RAG, "LOADERS": {"ZIP_MAX_BYTES": 2 * MB, "ZIP_MAX_ENTRIES": 500}}
    incompressible = rewritten(
        docx_bytes(), {}, lambda out: out.writestr("word/media/noise.bin", random.Random(1).randbytes(3 * MB))
    )
    error, _, _ = refused(incompressible, "big.docx")
    assert "ZIP_MAX_BYTES" in str(error)
    error, _, _ = refused(many_entries_docx(600), "many.docx")
    assert "ZIP_MAX_ENTRIES" in str(error)


@pytest.mark.parametrize(("part", "name"), [(BILLION_LAUGHS, "laughs.docx"), (EXTERNAL_ENTITY, "xxe.docx")])
def test_xml_entities_are_refused_before_a_parser_sees_them(part: bytes, name: str) -> None:
    error, elapsed, peak = refused(rewritten(docx_bytes(), {"word/document.xml": part}), name)
    assert error.reason == "unsafe-file" and "DTD or entities" in str(error)
    assert elapsed < 1 and peak < 16


def test_an_epub_with_an_entity_bomb_is_refused() -> None:
    book = epub_bytes([("One", "Text.")], "T", "A")
    error, _, _ = refused(rewritten(book, {"OEBPS/c0.xhtml": BILLION_LAUGHS}), "laughs.epub")
    assert error.reason == "unsafe-file"


def test_an_image_bomb_is_refused_from_its_header(settings: Any) -> None:
    settings.RAG = {**settings.RAG, "OCR": OCR_ON}
    error, elapsed, peak = refused(png_claiming(100_000, 100_000), "bomb.png")
    assert error.reason == "unsafe-file" and elapsed < 1 and peak < 16
    error, _, _ = refused(png_claiming(8_000, 8_000), "large.png")
    assert "IMAGE_MAX_PIXELS" in str(error)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (docx_bytes()[:2000], "corrupt-file"),
        (encrypted_office(), "encrypted"),
        (rewritten(docx_bytes(), {"word/document.xml": b"<w:document><unclosed>"}), "corrupt-file"),
    ],
)
def test_corrupt_and_encrypted_files_are_refused_with_their_reason(data: bytes, reason: str) -> None:
    with pytest.raises(FileRefusedError) as error:
        load_bytes(data, content_type=docx_content_type(), source_id="x.docx")
    assert error.value.reason == reason


def docx_content_type() -> str:
    return "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def save(document: Any) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


@pytest.mark.django_db
def test_a_folder_of_every_format_and_hostile_files_records_every_outcome_and_goes_on(
    settings: Any, tmp_path: Path, zip_bomb: bytes
) -> None:
    from odf.opendocument import OpenDocumentText
    from odf.text import P

    settings.RAG = {**settings.RAG, "OCR": OCR_ON}
    workbook = openpyxl.Workbook()
    workbook.active.append(["Item", "Cost"])
    workbook.active.append(["Laptops", "1200"])
    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = "Roadmap"
    odt = OpenDocumentText()
    odt.text.addElement(P(text="Printers are on the second floor."))
    mail = (
        b"From: ana@example.com\nTo: ops@example.com\nSubject: Restore drill\n"
        b"Date: Tue, 01 Dec 2026 09:30:00 +0000\n\nThe restore drill is on Friday.\n"
    )
    files = {
        "handbook.docx": (docx_bytes("Everyone gets 25 vacation days."), ("indexed", "")),
        "budget.xlsx": (save(workbook), ("indexed", "")),
        "roadmap.pptx": (save(deck), ("indexed", "")),
        "printers.odt": (odf_bytes(odt), ("indexed", "")),
        "book.epub": (epub_bytes([("One", "Gulls circled.")], "Port", "Rui"), ("indexed", "")),
        "drill.eml": (mail, ("indexed", "")),
        "drill.msg": (
            msg_file({"__substg1.0_0037001F": utf16("Drill moved to Monday")}, []),
            ("indexed", ""),
        ),
        "visitors.rtf": (rb"{\rtf1\ansi Visitors sign in.\par}", ("indexed", "")),
        "staff.csv": (b"name,team\nAna,ops\n", ("indexed", "")),
        "runbook.md": (b"# Runbook\n\nRestart the database.\n", ("indexed", "")),
        "page.html": (b"<title>Page</title><p>Restore with pg_restore.</p>", ("indexed", "")),
        "scan.pdf": (scanned_pdf(FIRE), ("indexed", "ocr")),
        "photo.jpg": (photographed(PHOTO), ("indexed", "ocr")),
        "report.txt": (docx_bytes("A Word file named as text."), ("indexed", "")),
        "bomb.docx": (zip_bomb, ("skipped", "unsafe-file")),
        "laughs.docx": (
            rewritten(docx_bytes(), {"word/document.xml": BILLION_LAUGHS}),
            ("skipped", "unsafe-file"),
        ),
        "bomb.png": (png_claiming(100_000, 100_000), ("skipped", "unsafe-file")),
        "truncated.xlsx": (save(workbook)[:1500], ("skipped", "corrupt-file")),
        "secret.docx": (encrypted_office(), ("skipped", "encrypted")),
        "archive.zip": (
            rewritten(docx_bytes(), {}, None)[:0] + b"PK\x05\x06" + bytes(18),
            ("skipped", "unsupported-type"),
        ),
        "model.xyz": (b"some text no loader reads", ("skipped", "unsupported-type")),
    }
    folder = tmp_path / "kb"
    folder.mkdir()
    for name, (data, _) in files.items():
        (folder / name).write_bytes(data)
    out = io.StringIO()
    started = time.perf_counter()
    call_command("rag_ingest", str(folder), root=str(tmp_path), stdout=out, stderr=io.StringIO())
    print(f"mixed folder of {len(files)} files ingested in {time.perf_counter() - started:.1f} s")
    rows = {d.source_id: (d.status, d.status_reason) for d in Document.objects.all()}
    assert rows == {f"kb/{name}": expected for name, (_, expected) in files.items()}
    errors = dict(Document.objects.exclude(status="indexed").values_list("source_id", "error"))
    assert "ZIP_MAX_RATIO" in errors["kb/bomb.docx"]
    assert "password-protected" in errors["kb/secret.docx"]
    assert Document.objects.get(source_id="kb/report.txt").content_type == docx_content_type()
    titles = dict(Document.objects.filter(status="indexed").values_list("source_id", "title"))
    assert (titles["kb/book.epub"], titles["kb/drill.msg"], titles["kb/runbook.md"]) == (
        "Port",
        "Drill moved to Monday",
        "Runbook",
    )
    assert titles["kb/staff.csv"] == "staff.csv"  # no title of its own: the file name
