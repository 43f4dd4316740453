"""Every file format a site holds, each made in the test by the library that writes it, loaded
with its text, title, headings and the page, slide or sheet numbers that reach a citation."""

from __future__ import annotations

import io
import zipfile
from email.message import EmailMessage
from typing import Any

import docx
import openpyxl
import pptx
import pytest
from odf.opendocument import OpenDocumentPresentation, OpenDocumentSpreadsheet, OpenDocumentText
from odf.style import MasterPage, PageLayout
from odf.table import Table, TableCell, TableRow
from odf.text import H, P

from django_rag.exceptions import FileRefusedError
from django_rag.ingest.chunking import chunk_document
from django_rag.ingest.loaders import load_bytes
from django_rag.ingest.loaders.sniff import sniff_content_type
from django_rag.types import page_label


def chunks_of(doc: Any) -> list[Any]:
    return chunk_document(doc, chunk_size=400, chunk_overlap=0)


def cited(doc: Any, phrase: str) -> str:
    """How a citation names the page of the chunk holding ``phrase``."""
    [chunk] = [c for c in chunks_of(doc) if phrase in c.content]
    return page_label(doc.metadata, chunk.page)


def as_bytes(document: Any) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def test_docx_keeps_headings_tables_title_and_author() -> None:
    document = docx.Document()
    document.core_properties.title = "Staff handbook"
    document.core_properties.author = "Ana Lima"
    document.add_heading("Leave", 1)
    document.add_paragraph("Everyone gets 25 vacation days a year.")
    document.add_heading("Sick leave", 2)
    document.add_paragraph("Tell your manager before 10:00.", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for (row, col), value in {(0, 0): "Name", (0, 1): "Days", (1, 0): "Ana", (1, 1): "25"}.items():
        table.cell(row, col).text = value
    [doc] = load_bytes(as_bytes(document), content_type="application/octet-stream", source_id="h.docx")
    assert doc.text == (
        "# Leave\n\nEveryone gets 25 vacation days a year.\n\n## Sick leave\n\n"
        "- Tell your manager before 10:00.\n\n- Name: Ana; Days: 25"
    )
    assert (doc.metadata["title"], doc.metadata["author"]) == ("Staff handbook", "Ana Lima")
    assert doc.metadata["content_type"].endswith("wordprocessingml.document")


def test_xlsx_sheets_number_like_pages_and_rows_keep_their_headers() -> None:
    workbook = openpyxl.Workbook()
    budget = workbook.active
    budget.title = "Budget"
    budget.append(["Item", "Cost"])
    budget.append(["Laptops", 1200])
    staff = workbook.create_sheet("Staff")
    staff.append(["Name", "Role"])
    staff.append(["Ana", "administrator"])
    workbook.properties.title = "Plan 2026"
    [doc] = load_bytes(as_bytes(workbook), content_type="text/plain", source_id="plan.xlsx")
    assert doc.text == "# Budget\n\n- Item: Laptops; Cost: 1200\f# Staff\n\n- Name: Ana; Role: administrator"
    assert doc.metadata["title"] == "Plan 2026"
    assert (doc.metadata["page_unit"], doc.metadata["page_names"]) == ("sheet", ["Budget", "Staff"])
    assert cited(doc, "administrator") == "sheet Staff"
    assert cited(doc, "Laptops") == "sheet Budget"


def test_pptx_slides_number_like_pages_with_titles_and_notes() -> None:
    deck = pptx.Presentation()
    deck.core_properties.title = "Roadmap 2026"
    for title, body in [("Goals", "Ship OCR in May"), ("Risks", "Tesseract may be slow")]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    slide.notes_slide.notes_text_frame.text = "Mention the budget"
    [doc] = load_bytes(as_bytes(deck), content_type="application/pdf", source_id="deck.pptx")
    assert (
        doc.text
        == "## Goals\n\nShip OCR in May\f## Risks\n\nTesseract may be slow\n\nNotes: Mention the budget"
    )
    assert (doc.metadata["title"], doc.metadata["page_unit"]) == ("Roadmap 2026", "slide")
    assert cited(doc, "Tesseract") == "slide 2"


def odf_bytes(document: Any) -> bytes:
    buffer = io.BytesIO()
    document.write(buffer)
    return buffer.getvalue()


def test_odt_keeps_outline_headings_and_tables() -> None:
    document = OpenDocumentText()
    document.text.addElement(H(outlinelevel=1, text="Backups"))
    document.text.addElement(P(text="Backups run nightly at 02:00."))
    document.text.addElement(H(outlinelevel=2, text="Restores"))
    table = Table(name="Owners")
    for values in (["System", "Owner"], ["Postgres", "Ops"]):
        row = TableRow()
        for value in values:
            cell = TableCell()
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    document.text.addElement(table)
    [doc] = load_bytes(odf_bytes(document), content_type="text/plain", source_id="ops.odt")
    assert (
        doc.text
        == "# Backups\n\nBackups run nightly at 02:00.\n\n## Restores\n\n- System: Postgres; Owner: Ops"
    )
    assert doc.metadata["title"] == "Backups"  # no dc:title: the first heading


def test_ods_sheets_are_named_pages() -> None:
    document = OpenDocumentSpreadsheet()
    for name, rows in [("Budget", [["Item", "Cost"], ["Desks", "300"]]), ("Staff", [["Name"], ["Rui"]])]:
        table = Table(name=name)
        for values in rows:
            row = TableRow()
            for value in values:
                cell = TableCell()
                cell.addElement(P(text=value))
                row.addElement(cell)
            table.addElement(row)
        document.spreadsheet.addElement(table)
    [doc] = load_bytes(odf_bytes(document), content_type="", source_id="plan.ods")
    assert doc.text == "# Budget\n\n- Item: Desks; Cost: 300\f# Staff\n\n- Name: Rui"
    assert cited(doc, "Rui") == "sheet Staff"


def test_odp_slides_are_pages() -> None:
    from odf.draw import Frame, Page, TextBox

    document = OpenDocumentPresentation()
    layout = PageLayout(name="L")
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="M", pagelayoutname=layout)
    document.masterstyles.addElement(master)
    for number, text in enumerate(["Welcome to the team", "Where the coffee is"], start=1):
        page = Page(name=f"s{number}", masterpagename=master)
        frame = Frame(width="20cm", height="3cm", x="1cm", y="1cm")
        box = TextBox()
        box.addElement(P(text=text))
        frame.addElement(box)
        page.addElement(frame)
        document.presentation.addElement(page)
    [doc] = load_bytes(odf_bytes(document), content_type="", source_id="intro.odp")
    assert doc.text == "Welcome to the team\fWhere the coffee is"
    assert cited(doc, "coffee") == "slide 2"


def epub_bytes(chapters: list[tuple[str, str]], title: str, author: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:'
            'xmlns:container"><rootfiles><rootfile full-path="OEBPS/book.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        items = "".join(
            f'<item id="c{n}" href="c{n}.xhtml" media-type="application/xhtml+xml"/>'
            for n in range(len(chapters))
        )
        spine = "".join(f'<itemref idref="c{n}"/>' for n in range(len(chapters)))
        archive.writestr(
            "OEBPS/book.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
            f"<dc:title>{title}</dc:title><dc:creator>{author}</dc:creator></metadata>"
            f"<manifest>{items}</manifest><spine>{spine}</spine></package>",
        )
        for n, (heading, text) in enumerate(chapters):
            archive.writestr(
                f"OEBPS/c{n}.xhtml",
                '<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><head><title>x</title>'
                f"</head><body><h1>{heading}</h1><p>{text}</p></body></html>",
            )
    return buffer.getvalue()


def test_epub_chapters_number_like_pages_with_title_and_author() -> None:
    data = epub_bytes(
        [("Arrival", "The ship docked at dawn."), ("Harbour", "Gulls circled the cranes.")], "Port", "Rui"
    )
    [doc] = load_bytes(data, content_type="application/zip", source_id="port.epub")
    assert doc.text == "# Arrival\n\nThe ship docked at dawn.\f# Harbour\n\nGulls circled the cranes."
    assert (doc.metadata["title"], doc.metadata["author"]) == ("Port", "Rui")
    assert doc.metadata["page_names"] == ["Arrival", "Harbour"]
    assert cited(doc, "Gulls") == "chapter 2"


def test_email_subject_sender_date_and_attachments_as_documents_of_their_own() -> None:
    message = EmailMessage()
    message["Subject"] = "Quarterly backup report"
    message["From"] = "Ana Lima <ana@example.com>"
    message["To"] = "ops@example.com"
    message["Date"] = "Tue, 01 Dec 2026 09:30:00 +0000"
    message.set_content("All 42 restores succeeded this quarter.")
    workbook = openpyxl.Workbook()
    workbook.active.append(["Month", "Restores"])
    workbook.active.append(["October", "14"])
    message.add_attachment(
        as_bytes(workbook), maintype="application", subtype="octet-stream", filename="restores.xlsx"
    )
    message.add_attachment(b"PK\x03\x04broken", maintype="application", subtype="zip", filename="broken.docx")
    mail, sheet = load_bytes(bytes(message), content_type="message/rfc822", source_id="inbox/42.eml")
    assert mail.text.startswith("# Quarterly backup report\n\nFrom: Ana Lima <ana@example.com>")
    assert "All 42 restores succeeded" in mail.text
    assert mail.metadata["title"] == "Quarterly backup report"
    assert mail.metadata["email_from"] == "Ana Lima <ana@example.com>"
    assert mail.metadata["email_date"] == "2026-12-01T09:30:00+00:00"
    assert [s["name"] for s in mail.metadata["attachments_skipped"]] == ["broken.docx"]
    assert sheet.source_id == "inbox/42.eml#attachment-1"
    assert sheet.metadata["email_message"] == "inbox/42.eml"
    # The attachment's own title (here its first heading, the sheet's name) before its file name.
    assert sheet.metadata["title"] == "Sheet"
    assert "- Month: October; Restores: 14" in sheet.text


def test_rtf_text_title_and_author() -> None:
    data = (
        rb"{\rtf1\ansi{\info{\title Visitor policy}{\author Rui}}"
        rb"Visitors sign in at reception.\par Badges are returned at 18:00.\par}"
    )
    [doc] = load_bytes(data, content_type="text/plain", source_id="visitors.rtf")
    assert "Visitors sign in at reception." in doc.text and "Badges are returned" in doc.text
    assert (doc.metadata["title"], doc.metadata["author"]) == ("Visitor policy", "Rui")


def test_csv_and_tsv_rows_keep_their_headers() -> None:
    [csv_doc] = load_bytes(b"name;team\nAna;ops\nRui;web\n", content_type="text/csv", source_id="t.csv")
    assert csv_doc.text == "- name: Ana; team: ops\n- name: Rui; team: web"
    [tsv] = load_bytes(b"a\tb\n1\t2\n", content_type="text/tab-separated-values", source_id="t.tsv")
    assert tsv.text == "- a: 1; b: 2"


def test_markdown_front_matter_and_setext_headings() -> None:
    data = (
        b"---\ntitle: Runbook\nauthor: Ana\n---\n"
        b"Database\n========\n\nRestart it.\n\nReplicas\n--------\n\nTwo."
    )
    [doc] = load_bytes(data, content_type="text/markdown", source_id="runbook.md")
    assert doc.text == "# Database\n\nRestart it.\n\n## Replicas\n\nTwo."
    assert (doc.metadata["title"], doc.metadata["author"]) == ("Runbook", "Ana")


def test_html_keeps_its_main_content_and_the_page_title() -> None:
    page = (
        b'<html><head><title>Onboarding - Acme</title><meta property="og:title" content="Onboarding guide">'
        b"</head><body><nav><a href=/>Home</a> <a href=/blog>Blog</a></nav>"
        b'<div id="cookie-banner" class="cookie-consent">We use cookies. Accept all cookies?</div>'
        b"<main><h1>Onboarding guide</h1><p>New staff get a laptop on their first day and meet their "
        b"mentor before lunch.</p><h2>Accounts</h2><p>Your e-mail account is created by IT the week "
        b"before you start, and the password is sent by SMS.</p></main>"
        b"<footer>Copyright Acme 2026. All rights reserved.</footer></body></html>"
    )
    [doc] = load_bytes(page, content_type="text/html", source_id="https://acme.test/onboarding")
    assert doc.text.startswith("# Onboarding guide\n\nNew staff get a laptop")
    assert "## Accounts" in doc.text
    for chrome in ("cookies", "Copyright", "Blog"):
        assert chrome not in doc.text
    assert doc.metadata["title"] == "Onboarding guide"


def test_pdf_outline_becomes_headings_and_its_title_the_documents() -> None:
    from tests.hostile import FONT, page, pdf_file, stream, text_ops

    data = pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R /Outlines 6 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            page(2, 4, 5),
            stream(text_ops("Vacuum runs weekly.")),
            FONT,
            b"<< /Type /Outlines /First 7 0 R /Last 7 0 R /Count 1 >>",
            b"<< /Title (Maintenance) /Parent 6 0 R /Dest [3 0 R /Fit] >>",
        ]
    )
    [doc] = load_bytes(data, content_type="application/pdf", source_id="m.pdf")
    assert doc.text == "# Maintenance\n\nVacuum runs weekly."
    assert doc.metadata["title"] == "Maintenance"


@pytest.mark.parametrize(
    ("data", "declared", "holds"),
    [
        (b"%PDF-1.7\n", "text/html", "application/pdf"),
        (b"<!DOCTYPE html><p>x</p>", "application/pdf", "text/html"),
        (b"From: a@b.c\nSubject: hi\nDate: now\n\nbody", "", "message/rfc822"),
        (b"{\\rtf1 x}", "text/plain", "application/rtf"),
        (b"a,b\n1,2", "text/csv", "text/csv"),
    ],
)
def test_the_content_type_comes_from_the_bytes(data: bytes, declared: str, holds: str) -> None:
    assert sniff_content_type(data, declared) == holds


def test_an_encrypted_office_file_is_a_recorded_skip() -> None:
    # What Office writes for a password: an OLE compound file holding an "EncryptedPackage" stream.
    data = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(100) + "EncryptedPackage".encode("utf-16-le")
    with pytest.raises(FileRefusedError) as refused:
        load_bytes(data, content_type="application/octet-stream", source_id="secret.docx")
    assert refused.value.reason == "encrypted"


@pytest.mark.django_db
def test_a_citation_names_the_slide_and_the_sheet() -> None:
    import django_rag as rag
    from django_rag.answer.prompts import format_context

    deck = pptx.Presentation()
    for title, body in [("Goals", "Ship OCR in May"), ("Risks", "Tesseract may be slow on scans")]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    workbook = openpyxl.Workbook()
    workbook.active.title = "Intro"
    workbook.active.append(["Note"])
    workbook.active.append(["Nothing here"])
    budget = workbook.create_sheet("Budget")
    budget.append(["Item", "Cost"])
    budget.append(["Scanners", "900"])
    kb = rag.collection("docs")
    kb.index(load_bytes(as_bytes(deck), content_type="", source_id="deck.pptx"))
    kb.index(load_bytes(as_bytes(workbook), content_type="", source_id="plan.xlsx"))
    [slide_hit, *_] = kb.search("Tesseract slow scans", mode="text")
    assert (slide_hit.source_id, slide_hit.page) == ("deck.pptx", 2)
    assert ", slide 2) ## Risks" in format_context([slide_hit])
    [sheet_hit, *_] = kb.search("Scanners cost", mode="text")
    assert page_label(sheet_hit.document.metadata, sheet_hit.page) == "sheet Budget"
    assert ", sheet Budget) # Budget" in format_context([sheet_hit])


def test_an_outlook_msg_gives_subject_sender_date_body_and_its_attachments() -> None:
    from tests.outlook_file import msg_file, properties, utf16

    rows = "month,restores\n" + "".join(f"2026-{m:02d},{m * 3}\n" for m in range(1, 13)) * 40
    data = msg_file(
        {
            "__substg1.0_0037001F": utf16("Quarterly restore drill"),
            "__substg1.0_0C1A001F": utf16("Ana Lima"),
            "__substg1.0_0C1F001F": utf16("ana@example.com"),
            "__substg1.0_0E04001F": utf16("Ops team"),
            "__substg1.0_1000001F": utf16("The drill restored all 42 databases in under an hour."),
            # 2026-12-01 09:30 UTC as a FILETIME (100 ns ticks since 1601).
            "__properties_version1.0": properties(134_405_910_000_000_000),
        },
        [{"__substg1.0_3707001F": utf16("restores.csv"), "__substg1.0_37010102": rows.encode()}],
    )
    assert sniff_content_type(data, "text/plain") == "application/vnd.ms-outlook"
    mail, table = load_bytes(data, content_type="application/vnd.ms-outlook", source_id="inbox/7.msg")
    assert mail.text == (
        "# Quarterly restore drill\n\nFrom: Ana Lima <ana@example.com>\nTo: Ops team\n"
        "Date: 2026-12-01T09:30:00+00:00\n\nThe drill restored all 42 databases in under an hour."
    )
    assert (mail.metadata["title"], mail.metadata["email_from"]) == (
        "Quarterly restore drill",
        "Ana Lima <ana@example.com>",
    )
    assert (table.source_id, table.metadata["title"]) == ("inbox/7.msg#attachment-1", "restores.csv")
    assert table.text.startswith("- month: 2026-01; restores: 3\n")
