"""Loaders: text, HTML, PDF, bytes by content type, and the web through guarded_fetch.

The PDFs and the HTML page are real files from pypdf, OCRmyPDF and the Python docs
(see tests/fixtures/README.md); web tests serve them from 127.0.0.1.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_rag.exceptions import ConfigurationError, FileRefusedError, LoaderError, OutboundPolicyError
from django_rag.ingest.loaders import (
    get_loader,
    guess_content_type,
    load_bytes,
    load_html,
    load_pdf,
    load_text,
    load_web,
    register_loader,
)
from django_rag.ingest.outbound import OutboundPolicy
from django_rag.types import RagDocument
from tests.test_outbound import FakeDNS, LoopbackServer, redirect, reply

FIXTURES = Path(__file__).parent / "fixtures"
PDF = FIXTURES / "pdf"
PYTHON_JSON_PAGE = FIXTURES / "html" / "python-library-json.html"


def make_pdf(pages: list[str], title: str | None = None) -> bytes:
    """A minimal valid PDF: one line of Helvetica text per page ("" for a blank page)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(len(pages)))
    objects.append(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(pages)))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        stream = b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % text.encode("latin-1") if text else b""
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    if title is not None:
        objects.append(b"<< /Title (%s) >>" % title.encode("latin-1"))
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    info = b" /Info %d 0 R" % len(objects) if title is not None else b""
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, info, xref)
    return bytes(out)


# --- text -------------------------------------------------------------------------------------


def test_load_text_gives_one_document_with_derived_metadata() -> None:
    [doc] = load_text("Backups run nightly.\nThey are kept 30 days.", source_id="faq-backups")
    assert doc.source_id == "faq-backups"
    assert doc.text == "Backups run nightly.\nThey are kept 30 days."
    assert doc.metadata == {
        "source": "faq-backups",
        "loader": "text",
        "content_type": "text/plain",
        "title": "Backups run nightly.",
    }


def test_load_text_without_source_id_derives_a_stable_id_from_the_content() -> None:
    [first] = load_text("same words")
    [second] = load_text("  same words \n")
    [other] = load_text("other words")
    assert first.source_id == second.source_id != other.source_id
    assert re.fullmatch(r"text:[0-9a-f]{16}", first.source_id)


@pytest.mark.parametrize("blank", ["", "   ", "\n\t \r\n", ["", "  "], {"source_id": "x", "text": " "}, []])
def test_load_text_blank_input_gives_no_document(blank: Any) -> None:
    assert load_text(blank) == []


def test_load_text_records_and_strings_give_one_document_each() -> None:
    docs = load_text(
        [
            {"source_id": "faq-billing", "text": "Invoices are monthly.", "metadata": {"section": "billing"}},
            "A bare string.",
            {"text": "A record without an id."},
        ]
    )
    assert docs[0].source_id == "faq-billing"
    assert docs[0].metadata["section"] == "billing"
    assert [doc.text for doc in docs[1:]] == ["A bare string.", "A record without an id."]
    assert all(doc.source_id.startswith("text:") for doc in docs[1:])


def test_load_text_source_id_becomes_a_prefix_for_many_items() -> None:
    docs = load_text(["one", " ", "three"], source_id="faq")
    assert [doc.source_id for doc in docs] == ["faq#1", "faq#3"]


def test_load_text_refuses_two_texts_with_the_same_source_id() -> None:
    with pytest.raises(LoaderError, match="same source_id 'a'"):
        load_text([{"source_id": "a", "text": "one"}, {"source_id": "a", "text": "two"}])


def test_load_text_refuses_a_record_with_unknown_keys() -> None:
    with pytest.raises(LoaderError, match=r"unknown keys \['id'\]"):
        load_text({"id": "x", "text": "hello"})


def test_load_text_removes_characters_postgres_cannot_store() -> None:
    [doc] = load_text("nul\x00byte\r\nwindows line")
    assert doc.text == "nulbyte\nwindows line"


def test_markdown_heading_becomes_the_title() -> None:
    [doc] = load_text("# Backup guide\n\nRun `backup` nightly.", source_id="guide")
    assert doc.metadata["title"] == "Backup guide"


def test_explicit_metadata_wins_over_derived_keys_and_tags_go_on_every_document() -> None:
    docs = load_text(
        ["first", {"text": "second", "metadata": {"title": "From the record"}, "tags": ["faq"]}],
        metadata={"title": "From the caller", "section": "billing"},
        tags=["manual", "manual"],
    )
    assert [doc.metadata["title"] for doc in docs] == ["From the caller", "From the record"]
    assert all(doc.metadata["section"] == "billing" and doc.metadata["loader"] == "text" for doc in docs)
    assert [doc.tags for doc in docs] == [["manual"], ["manual", "faq"]]


# --- HTML -------------------------------------------------------------------------------------

PAGE = """<!doctype html>
<html lang="pt-BR"><head><title>Backups &amp; restores</title>
<style>body { color: red }</style><script>var secret = "do not index";</script></head>
<body>
<header><a href="/">Home</a></header><nav><ul><li>Menu item</li></ul></nav>
<div role="navigation">Previous topic</div>
<main><h1>Backups<a class="headerlink" href="#b">¶</a></h1>
<p>Run   the backup
   every   night &mdash; it takes &lt;5&nbsp;minutes &#8230;</p>
<p>Keep copies<br>off site.</p>
<pre>
def backup():
    return  "done"
</pre>
<template><p>hidden template</p></template><noscript>enable js</noscript>
<form><label>Search</label><button>Go</button></form><svg><text>chart label</text></svg>
</main>
<aside>Related links</aside><footer>© Example</footer>
</body></html>"""


def test_load_html_drops_scripts_styles_and_page_chrome() -> None:
    [doc] = load_html(PAGE, source_id="page")
    for chrome in ("do not index", "color: red", "Home", "Menu item", "Previous topic", "hidden template"):
        assert chrome not in doc.text
    for chrome in ("enable js", "Search", "chart label", "Related links", "© Example", "¶"):
        assert chrome not in doc.text


def test_load_html_decodes_entities_and_collapses_whitespace() -> None:
    [doc] = load_html(PAGE, source_id="page")
    assert "Run the backup every night — it takes <5 minutes …" in doc.text


def test_load_html_turns_blocks_into_paragraphs_and_keeps_preformatted_lines() -> None:
    [doc] = load_html(PAGE, source_id="page")
    assert doc.text.split("\n\n") == [
        "Backups",
        "Run the backup every night — it takes <5 minutes …",
        "Keep copies\noff site.",
        'def backup():\n    return  "done"',
    ]


def test_load_html_takes_the_title_and_language() -> None:
    [doc] = load_html(PAGE, source_id="page", base_url="https://example.com/backups")
    assert doc.metadata == {
        "source": "https://example.com/backups",
        "loader": "html",
        "content_type": "text/html",
        "title": "Backups & restores",
        "language": "pt-BR",
    }


def test_load_html_without_title_uses_the_first_heading() -> None:
    [doc] = load_html("<h1>Getting <em>started</em></h1><p>Text.</p>", source_id="start")
    assert doc.metadata["title"] == "Getting started"
    assert "language" not in doc.metadata


@pytest.mark.parametrize(
    "html",
    ["", "   \n", "<html><head><title>Only a title</title><script>x()</script></head><body> </body></html>"],
)
def test_load_html_without_text_gives_no_document(html: str) -> None:
    assert load_html(html, source_id="empty") == []


def test_load_html_reads_a_python_docs_page() -> None:
    [doc] = load_html(PYTHON_JSON_PAGE.read_text("utf-8"), source_id="json")
    assert doc.metadata["title"] == "json — JSON encoder and decoder — Python 3.11.2 documentation"
    assert doc.metadata["language"] == "en"
    assert doc.text.startswith("json — JSON encoder and decoder\n\n")
    assert "JSON (JavaScript Object Notation), specified by RFC 7159" in doc.text
    assert ">>> import json\n>>> json.dumps(['foo', {'bar': ('baz', None, 1.0, 2)}])" in doc.text
    assert "Table of Contents" not in doc.text  # the sidebar is navigation
    assert "¶" not in doc.text


# --- PDF --------------------------------------------------------------------------------------


def test_load_pdf_separates_pages_with_form_feeds() -> None:
    [doc] = load_pdf(PDF / "pdflatex-outline.pdf", source_id="outline")
    pages = doc.text.split("\f")
    assert len(pages) == 4
    assert pages[0].startswith("Contents") and pages[1].startswith("1 Foo")
    assert doc.metadata == {
        "source": str(PDF / "pdflatex-outline.pdf"),
        "loader": "pdf",
        "content_type": "application/pdf",
        "title": "pdflatex-outline",
        "page_count": 4,
    }


def test_load_pdf_per_page_gives_one_document_per_page() -> None:
    docs = load_pdf(PDF / "pdflatex-outline.pdf", source_id="outline", per_page=True, tags=["manual"])
    assert [doc.source_id for doc in docs] == ["outline#p1", "outline#p2", "outline#p3", "outline#p4"]
    assert [(doc.metadata["page"], doc.metadata["page_count"]) for doc in docs] == [
        (n, 4) for n in (1, 2, 3, 4)
    ]
    assert all(doc.tags == ["manual"] and "\f" not in doc.text for doc in docs)


def test_load_pdf_per_page_drops_pages_without_text() -> None:
    [doc] = load_pdf(PDF / "multipage.pdf", source_id="multi", per_page=True)
    assert doc.source_id == "multi#p4"
    assert (doc.metadata["page"], doc.metadata["page_count"]) == (4, 6)


def test_load_pdf_whole_document_keeps_the_position_of_blank_pages() -> None:
    [doc] = load_pdf(PDF / "multipage.pdf", source_id="multi")
    pages = doc.text.split("\f")
    assert len(pages) == 6 and doc.metadata["page_count"] == 6
    assert [bool(page) for page in pages] == [False, False, False, True, False, False]


@pytest.mark.parametrize("per_page", [False, True])
def test_load_pdf_image_only_gives_no_document(per_page: bool) -> None:
    assert load_pdf(PDF / "linn.pdf", per_page=per_page) == []


@pytest.mark.parametrize("name", ["libreoffice-writer-password.pdf", "r4-aes-user-password.pdf"])
def test_load_pdf_encrypted_without_password_says_to_pass_one(name: str) -> None:
    with pytest.raises(LoaderError, match=re.escape(f"{name}' is encrypted; pass password=")):
        load_pdf(PDF / name)


@pytest.mark.parametrize(
    ("name", "password", "words"),
    [
        ("libreoffice-writer-password.pdf", "openpassword", "Lorem ipsum dolor sit amet"),
        ("r4-aes-user-password.pdf", "asdfzxcv", "pdf encryption test"),
    ],
)
def test_load_pdf_encrypted_opens_with_the_password(name: str, password: str, words: str) -> None:
    [doc] = load_pdf(PDF / name, password=password)
    assert doc.text.startswith(words)


def test_load_pdf_wrong_password_is_a_loader_error() -> None:
    with pytest.raises(LoaderError, match="wrong password"):
        load_pdf(PDF / "libreoffice-writer-password.pdf", password="guess")


@pytest.mark.parametrize(
    "source",
    [PDF / "invalid.pdf", b"", b"not a pdf at all", (PDF / "pdflatex-outline.pdf").read_bytes()[:4000]],
)
def test_load_pdf_malformed_is_a_loader_error(source: Path | bytes) -> None:
    with pytest.raises(LoaderError, match=r"PDF .* (malformed|could not be read)"):
        load_pdf(source, source_id="broken")


def test_load_pdf_missing_file_is_a_loader_error(tmp_path: Path) -> None:
    with pytest.raises(LoaderError, match="cannot read PDF"):
        load_pdf(tmp_path / "missing.pdf")


def test_load_pdf_accepts_bytes_and_binary_files() -> None:
    data = (PDF / "pdflatex-outline.pdf").read_bytes()
    [from_bytes] = load_pdf(data)
    with open(PDF / "pdflatex-outline.pdf", "rb") as handle:
        [from_file] = load_pdf(handle)
    [from_buffer] = load_pdf(io.BytesIO(data), source_id="manual")
    assert from_bytes.text == from_file.text == from_buffer.text
    assert re.fullmatch(r"pdf:[0-9a-f]{16}", from_bytes.source_id)
    assert from_file.source_id == str(PDF / "pdflatex-outline.pdf")
    assert from_buffer.source_id == "manual"


def test_load_pdf_title_comes_from_the_document_info() -> None:
    [doc] = load_pdf(
        make_pdf(["Hello page one", "", "Page three"], title="Operations Manual"), source_id="ops"
    )
    assert doc.metadata["title"] == "Operations Manual"
    assert doc.text == "Hello page one\f\fPage three"


def test_load_pdf_explicit_metadata_wins() -> None:
    docs = load_pdf(make_pdf(["One", "Two"], title="Info title"), per_page=True, metadata={"title": "Mine"})
    assert [(doc.metadata["title"], doc.metadata["page"]) for doc in docs] == [("Mine", 1), ("Mine", 2)]


def test_load_pdf_without_pdfminer_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pdfminer.converter", None)  # makes the import fail
    with pytest.raises(ConfigurationError, match=re.escape('pip install "django-rag[pdf]"')):
        load_pdf(make_pdf(["x"]))


# --- bytes by content type --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "data", "loader", "text"),
    [
        ("text/plain", b"plain words", "text", "plain words"),
        ("text/markdown; charset=utf-8", b"# Title\n\nbody", "markdown", "# Title\n\nbody"),
        ("text/html", b"<p>html <b>words</b></p>", "html", "html words"),
        (
            "application/xhtml+xml",
            b'<?xml version="1.0"?><html><body><p>xhtml</p></body></html>',
            "html",
            "xhtml",
        ),
        ("application/pdf", make_pdf(["pdf words"]), "pdf", "pdf words"),
    ],
)
def test_load_bytes_picks_the_loader_by_content_type(
    content_type: str, data: bytes, loader: str, text: str
) -> None:
    [doc] = load_bytes(data, content_type=content_type, source_id="upload")
    assert (doc.source_id, doc.text, doc.metadata["loader"]) == ("upload", text, loader)
    assert doc.metadata["content_type"] == content_type.split(";")[0]


def test_load_bytes_falls_back_when_text_is_not_utf8() -> None:
    [doc] = load_bytes("Olá, café com açúcar".encode("cp1252"), content_type="text/plain", source_id="pt")
    assert doc.text == "Olá, café com açúcar"


def test_load_bytes_honours_the_declared_charset() -> None:
    data = "Grüße".encode("utf-16")
    [doc] = load_bytes(data, content_type="text/plain; charset=utf-16", source_id="de")
    assert doc.text == "Grüße"


def test_load_bytes_reads_the_html_meta_charset() -> None:
    data = '<meta charset="iso-8859-1"><p>Ação</p>'.encode("latin-1")
    [doc] = load_bytes(data, content_type="text/html", source_id="pt")
    assert doc.text == "Ação"


def test_load_bytes_refuses_an_unsupported_content_type() -> None:
    with pytest.raises(LoaderError, match="no loader for content type 'application/x-blender'"):
        load_bytes(b"BLENDER-v279", content_type="application/x-blender", source_id="scene")


def test_load_bytes_refuses_an_image_while_ocr_is_off() -> None:
    with pytest.raises(FileRefusedError, match=r"needs OCR, which is off \(RAG\['OCR'\]\['ENABLED'\]\)"):
        load_bytes(b"\x89PNG\r\n\x1a\n", content_type="image/png", source_id="logo")


def test_register_loader_adds_a_content_type(monkeypatch: pytest.MonkeyPatch) -> None:
    from django_rag.ingest.loaders import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    def load_csv(data: bytes, *, source_id: str, **options: Any) -> list[RagDocument]:
        return [RagDocument(source_id, data.decode().replace(",", " "))]

    register_loader("Text/CSV", load_csv)
    assert get_loader("text/csv; charset=utf-8") is load_csv
    assert load_bytes(b"a,b", content_type="text/csv", source_id="sheet")[0].text == "a b"


@pytest.mark.parametrize(
    ("filename", "content_type"),
    [
        ("notes.md", "text/markdown"),
        ("README.TXT", "text/plain"),
        ("docs/page.htm", "text/html"),
        ("manual.pdf", "application/pdf"),
        ("uploads/x.xhtml", "application/xhtml+xml"),
        ("no-extension", None),
    ],
)
def test_guess_content_type_from_the_file_name(filename: str, content_type: str | None) -> None:
    assert guess_content_type(filename) == content_type


# --- the web ----------------------------------------------------------------------------------


@pytest.fixture
def site() -> Iterator[LoopbackServer]:
    server = LoopbackServer().start()
    server.routes.update(
        {
            "/old": redirect("/guide"),
            "/guide": reply(
                b"<html lang='en'><title>Guide</title><nav>menu</nav><p>Read the guide.</p></html>",
                headers={"Content-Type": "text/html; charset=utf-8"},
            ),
            "/notes.txt": reply(
                "Plain notes, café.".encode("latin-1"), headers={"Content-Type": "text/plain"}
            ),
            "/manual.pdf": reply(
                (PDF / "pdflatex-outline.pdf").read_bytes(), headers={"Content-Type": "application/pdf"}
            ),
            "/logo.png": reply(b"\x89PNG", headers={"Content-Type": "image/png"}),
        }
    )
    yield server
    server.stop()


def web_policy() -> OutboundPolicy:
    return OutboundPolicy(
        allowed_schemes=("http",),
        allow_networks=["127.0.0.0/8"],
        resolver=FakeDNS({"docs.test": ["127.0.0.1"]}),
    )


def test_load_web_html_uses_the_final_url_as_source(site: LoopbackServer) -> None:
    url = f"http://docs.test:{site.port}/old"
    [doc] = load_web(url, policy=web_policy(), tags=["web"], metadata={"section": "guides"})
    assert (doc.source_id, doc.text, doc.tags) == (url, "Read the guide.", ["web"])
    assert doc.metadata == {
        "source": f"http://docs.test:{site.port}/guide",
        "loader": "web",
        "content_type": "text/html",
        "title": "Guide",
        "language": "en",
        "section": "guides",
    }


def test_load_web_plain_text(site: LoopbackServer) -> None:
    [doc] = load_web(f"http://docs.test:{site.port}/notes.txt", policy=web_policy(), source_id="notes")
    assert (doc.source_id, doc.text, doc.metadata["content_type"]) == (
        "notes",
        "Plain notes, café.",
        "text/plain",
    )


def test_load_web_pdf(site: LoopbackServer) -> None:
    [doc] = load_web(f"http://docs.test:{site.port}/manual.pdf", policy=web_policy())
    assert doc.metadata["page_count"] == 4 and doc.metadata["loader"] == "web"
    assert doc.metadata["source"] == f"http://docs.test:{site.port}/manual.pdf"
    assert doc.text.count("\f") == 3


def test_load_web_refuses_an_image_while_ocr_is_off(site: LoopbackServer) -> None:
    with pytest.raises(FileRefusedError, match="needs OCR, which is off"):
        load_web(f"http://docs.test:{site.port}/logo.png", policy=web_policy())


def test_load_web_error_status_is_a_loader_error(site: LoopbackServer) -> None:
    with pytest.raises(LoaderError, match="returned HTTP 404"):
        load_web(f"http://docs.test:{site.port}/missing", policy=web_policy())


def test_load_web_without_a_policy_uses_the_strict_settings_default(site: LoopbackServer) -> None:
    with pytest.raises(OutboundPolicyError, match="scheme 'http' is not allowed"):
        load_web(f"http://127.0.0.1:{site.port}/guide")


def test_load_web_follows_the_outbound_setting(site: LoopbackServer, settings: Any) -> None:
    settings.RAG = {
        **settings.RAG,
        "OUTBOUND": {"ALLOWED_SCHEMES": ["http"], "ALLOW_NETWORKS": ["127.0.0.1/32"]},
    }
    [doc] = load_web(f"http://127.0.0.1:{site.port}/guide")
    assert doc.text == "Read the guide."
