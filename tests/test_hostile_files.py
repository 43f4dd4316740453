"""Hostile files: only ``LoaderError`` leaves a loader, every call within time and memory, and one
bad file never stops a folder run (docs/security/hostile-files.md).

Loaders run in a child process with its address space and CPU time capped by
``resource.setrlimit`` (tests/hostile.py), so a bomb that got through would kill the child and
fail the test, not the machine. The fuzz tests are hypothesis properties run inside such a child
(a fixed number of examples, derandomized, no example database: the same inputs in every run);
bench/fuzz_loaders.py runs the same strategies for many more examples.
"""

from __future__ import annotations

import codecs
import io
import random
from pathlib import Path
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_rag.exceptions import ConfigurationError, LoaderError
from django_rag.ingest.chunking import split_text
from django_rag.ingest.loaders import load_bytes, load_html, load_text
from django_rag.ingest.loaders.base import clean_text, decode_text
from django_rag.ingest.loaders.limits import LoaderLimits, loader_limits
from django_rag.ingest.rows import document_for
from django_rag.models import Document
from tests import hostile as h
from tests.mediaapp.models import Upload

# --- fuzzing: hypothesis examples per target, each run in one confined child -------------------------

FUZZ_EXAMPLES = {"text": 150, "html": 150, "bytes": 150, "web": 100, "pdf": 150, "chunker": 150}


@pytest.fixture(scope="module")
def fuzzed() -> dict[str, h.FuzzRun]:
    return h.fuzz_confined(FUZZ_EXAMPLES)


@pytest.mark.parametrize("target", list(FUZZ_EXAMPLES))
def test_fuzzed_input_raises_nothing_but_loader_error_within_the_limits(
    fuzzed: dict[str, h.FuzzRun], target: str
) -> None:
    run = fuzzed[target]
    assert run.error == "", f"{target}: {run.error}"
    assert run.examples >= FUZZ_EXAMPLES[target]
    assert run.slowest < h.CALL_SECONDS


# --- crafted hostile inputs, all in one confined child -----------------------------------------------

# Limits lowered so the bombs stop in a second rather than a minute; test_the_default_limits_...
# shows the defaults, and docs/security/hostile-files.md what each costs at its default.
CRAFTED_LIMITS = {
    "PDF_MAX_PAGES": 1000,
    "PDF_MAX_DECODED_BYTES": 64 * h.MB,
    "PDF_MAX_PAGE_OBJECTS": 5_000,
    "PDF_MAX_LAYOUT_BOXES": 300,
}

# case -> (target, arguments, expected result, a fragment of the detail: the error or the count)
PDF_CASES = {
    "count-lie": (h.pdf_count_lie, "documents", "1"),
    "wide-page-tree": (lambda: h.pdf_wide_page_tree(3000), "loader-error", "more than 1000 pages"),
    "exponential-page-tree": (h.pdf_exponential_page_tree, "documents", "1"),
    "parent-cycle": (h.pdf_parent_cycle, "documents", "1"),
    "reference-cycle": (h.pdf_reference_cycle, "loader-error", "could not be read"),
    "title-cycle": (h.pdf_title_cycle, "documents", "1"),
    "recursive-object-stream": (h.pdf_recursive_object_stream, "documents", "0"),
    "flate-bomb": (h.pdf_flate_bomb, "loader-error", "decodes to more than 67108864 bytes"),
    "lzw-bomb": (h.pdf_lzw_bomb, "loader-error", "decodes to more than 67108864 bytes"),
    "runlength-bomb": (h.pdf_runlength_bomb, "loader-error", "decodes to more than 67108864 bytes"),
    "form-bomb": (h.pdf_form_bomb, "loader-error", "draws more than 5000 objects"),
    "many-text-boxes": (lambda: h.pdf_many_text_boxes(800), "documents", "1"),
    "stacked-glyphs": (lambda: h.pdf_stacked_glyphs(1000), "documents", "1"),
    "broken-xref": (h.pdf_broken_xref, "documents", "1"),
    "truncated": (h.pdf_truncated, "loader-error", "malformed"),
}
HTML_CASES = {
    "nested-100k-levels": (h.html_deeply_nested, "deep text"),
    "unclosed-100k-levels": (lambda: h.html_unclosed_nesting(100_000, tags=b"<span>"), "never closed"),
    "unterminated-tag": (h.html_unterminated_tag, "before"),
    "unterminated-comment": (h.html_unterminated_comment, "before"),
    "20mb-single-line": (h.html_long_line, "word word"),
}


def crafted_cases() -> list[tuple[str, str, dict[str, object]]]:
    cases: list[tuple[str, str, dict[str, object]]] = [
        (f"pdf/{name}", "pdf", {"data": build()}) for name, (build, _, _) in PDF_CASES.items()
    ]
    cases += [
        (f"html/{name}", "bytes", {"data": build(), "content_type": "text/html"})
        for name, (build, _) in HTML_CASES.items()
    ]
    cases.append(
        ("text/20mb-single-line", "bytes", {"data": h.text_long_line(), "content_type": "text/plain"})
    )
    cases.append(("chunker/2mb-of-punctuation", "chunker", {"text": h.punctuation_run()}))
    for name, data in h.ENCODINGS.items():
        for content_type in ("text/plain", "text/html"):
            cases.append(
                (f"encoding/{name}/{content_type}", "bytes", {"data": data, "content_type": content_type})
            )
    for charset in h.ODD_CHARSETS:
        body = b"caf\xc3\xa9 \\ud800 +2D- text"
        meta = b'<meta charset="%s"><p>%s</p>' % (charset.encode("latin-1"), body)
        cases.append(
            (
                f"charset/{charset!r}/header",
                "bytes",
                {"data": body, "content_type": "text/plain", "charset": charset},
            )
        )
        cases.append((f"charset/{charset!r}/meta", "bytes", {"data": meta, "content_type": "text/html"}))
    return cases


@pytest.fixture(scope="module")
def crafted() -> dict[str, h.Outcome]:
    outcomes = h.run_confined(crafted_cases(), loaders=CRAFTED_LIMITS, wall_seconds=150)
    return {outcome.case: outcome for outcome in outcomes}


@pytest.mark.parametrize("name", list(PDF_CASES))
def test_a_pdf_bomb_is_refused_or_read_within_the_limits(crafted: dict[str, h.Outcome], name: str) -> None:
    _, result, detail = PDF_CASES[name]
    outcome = crafted[f"pdf/{name}"]
    assert (outcome.result, detail in outcome.detail) == (result, True), outcome
    assert outcome.seconds < h.CALL_SECONDS


@pytest.mark.parametrize("name", list(HTML_CASES))
def test_hostile_html_is_read_within_the_limits(crafted: dict[str, h.Outcome], name: str) -> None:
    outcome = crafted[f"html/{name}"]
    assert (outcome.result, outcome.detail) == ("documents", "1"), outcome
    assert outcome.seconds < h.CALL_SECONDS


def test_a_20_mb_single_line_of_text_is_read_within_the_limits(crafted: dict[str, h.Outcome]) -> None:
    outcome = crafted["text/20mb-single-line"]
    assert (outcome.result, outcome.detail) == ("documents", "1"), outcome
    assert outcome.seconds < h.CALL_SECONDS


def test_a_long_run_of_punctuation_is_chunked_within_the_limits(crafted: dict[str, h.Outcome]) -> None:
    outcome = crafted["chunker/2mb-of-punctuation"]
    assert outcome.result == "chunks" and int(outcome.detail) > 100, outcome
    assert outcome.seconds < h.CALL_SECONDS


@pytest.mark.parametrize("name", list(h.ENCODINGS))
@pytest.mark.parametrize("content_type", ["text/plain", "text/html"])
def test_broken_encodings_load_as_storable_text(
    crafted: dict[str, h.Outcome], name: str, content_type: str
) -> None:
    outcome = crafted[f"encoding/{name}/{content_type}"]
    assert (outcome.result, outcome.detail) == ("documents", "1"), outcome


@pytest.mark.parametrize("charset", h.ODD_CHARSETS, ids=repr)
def test_an_odd_declared_charset_never_escapes_as_an_error(
    crafted: dict[str, h.Outcome], charset: str
) -> None:
    for where in ("header", "meta"):
        outcome = crafted[f"charset/{charset!r}/{where}"]
        assert (outcome.result, outcome.detail) == ("documents", "1"), outcome


@pytest.fixture(scope="module")
def at_default_limits() -> dict[str, h.Outcome]:
    # The default limits, but for PDF_TIMEOUT, low so that the form bomb shows it in a second.
    cases = [
        ("flate-bomb", "pdf", {"data": h.pdf_flate_bomb(4)}),
        ("form-bomb", "pdf", {"data": h.pdf_form_bomb()}),
    ]
    outcomes = h.run_confined(cases, loaders={"PDF_TIMEOUT": 1, "PDF_MAX_PAGE_OBJECTS": 10**9})
    return {outcome.case: outcome for outcome in outcomes}


def test_the_default_decoded_bytes_limit_stops_a_flate_bomb_within_memory(
    at_default_limits: dict[str, h.Outcome],
) -> None:
    outcome = at_default_limits["flate-bomb"]
    assert outcome.result == "loader-error" and "RAG['LOADERS']['PDF_MAX_DECODED_BYTES']" in outcome.detail
    # Inflated output is kept once and joined once: twice the 256 MiB limit, not the 4 GiB claimed.
    assert outcome.peak_rss_mb < 700, outcome


def test_the_pdf_timeout_stops_a_pdf_that_draws_for_too_long(at_default_limits: dict[str, h.Outcome]) -> None:
    outcome = at_default_limits["form-bomb"]
    assert outcome.result == "loader-error" and "took more than 1 s" in outcome.detail, outcome
    assert outcome.seconds < 3


# --- the fixes, one behaviour each (in process: these inputs are small) ---------------------------


def test_a_lone_surrogate_becomes_a_replacement_character_and_a_pair_its_character() -> None:
    assert clean_text("a\ud800b \ud83d\ude00") == "a\ufffdb \U0001f600"
    [doc] = load_text("lone \udfff surrogate", source_id="s")
    assert doc.text == "lone \ufffd surrogate"
    [page] = load_html("<title>t\x00\ud800</title><p>x\ud800</p>", source_id="p")
    assert (page.text, page.metadata["title"]) == ("x\ufffd", "t\ufffd")


@pytest.mark.parametrize(
    "charset", ["unicode_escape", "raw-unicode-escape", "punycode", "idna", "utf-8\x00", "x" * 300]
)
def test_a_codec_that_is_not_a_charset_is_ignored(charset: str) -> None:
    assert decode_text(b"caf\\ud800 <", charset) == "caf\\ud800 <"


def test_a_marked_section_html_parser_asserts_on_is_read_as_text() -> None:
    [doc] = load_html("<p>a<![ b</p><![<p>c<![foo d", source_id="m")
    assert doc.text == "a<![ b\n\n<![\n\nc<![foo d"
    noise = random.Random(13).randbytes(64 * 1024)  # binary served as HTML: the same asserts, often
    assert load_bytes(noise, content_type="text/html", source_id="n")


def test_text_records_with_values_of_the_wrong_type_are_loader_errors() -> None:
    for record in ({"text": "t", "metadata": True}, {"text": "t", "tags": 3}, {"text": "t", "source_id": 5}):
        with pytest.raises(LoaderError, match="text record #1"):
            load_text(record)


def test_utf16_with_a_bom_is_decoded_and_a_lying_bom_still_gives_text() -> None:
    [doc] = load_bytes(h.ENCODINGS["utf16-be-bom"], content_type="text/plain", source_id="u")
    assert doc.text == "Big endian text."
    [lied] = load_bytes(h.bom_lie(), content_type="text/plain", source_id="l")
    lied.text.encode("utf-8")


def test_loader_limits_come_from_rag_loaders_and_are_checked() -> None:
    assert loader_limits() == LoaderLimits()
    with override_settings(RAG={"LOADERS": {"PDF_MAX_PAGES": 5}}):
        assert loader_limits().pdf_max_pages == 5
    with (
        override_settings(RAG={"LOADERS": {"PDF_PAGES": 5}}),
        pytest.raises(ConfigurationError, match="PDF_PAGES"),
    ):
        loader_limits()
    with (
        override_settings(RAG={"LOADERS": {"PDF_TIMEOUT": -1}}),
        pytest.raises(ConfigurationError, match="positive"),
    ):
        loader_limits()


def test_the_chunker_keeps_offsets_on_text_with_surrogates_and_page_breaks() -> None:
    text = "\ud800" * 50 + "\f" + ".!?" * 400 + "\f\f"
    chunks = split_text(text, chunk_size=8, chunk_overlap=2)
    assert chunks and all(c.content == text[c.char_start : c.char_end] for c in chunks)


# --- one folder of everything: the run completes and records every file ------------------------------

# file name -> the Document row it must leave: (status, status_reason)
INDEXED = ("indexed", "")
FOLDER = {
    "good.md": (b"# Good\n\nBackups run nightly with pg_dump.\n", INDEXED),
    "good.html": (b"<title>Good</title><p>Restore with pg_restore.</p>", INDEXED),
    "good.pdf": (h.good_pdf("Vacuum runs weekly."), INDEXED),
    "utf16.txt": (codecs.BOM_UTF16_LE + "Sixteen bits per unit.".encode("utf-16-le"), INDEXED),
    "invalid-utf8.txt": (h.ENCODINGS["invalid-utf8"], INDEXED),
    "odd-charset.html": (b'<meta charset="unicode_escape"><p>caf\\ud800</p>', INDEXED),
    "nested.html": (h.html_deeply_nested(10_000), INDEXED),
    "unterminated.html": (h.html_unterminated_tag(), INDEXED),
    "count-lie.pdf": (h.pdf_count_lie(), INDEXED),
    "parent-cycle.pdf": (h.pdf_parent_cycle(), INDEXED),
    "title-cycle.pdf": (h.pdf_title_cycle(), INDEXED),
    "20mb-line.txt": (h.text_long_line(), ("skipped", "too-large")),
    "20mb-line.html": (h.html_long_line(), ("skipped", "too-large")),
    "nul-bytes.txt": (h.ENCODINGS["nul-bytes"], ("skipped", "binary-content")),
    "image.txt": (b"\x89PNG\r\n\x1a\n" + bytes(64), ("skipped", "binary-content")),
    "archive.txt": (b"PK\x03\x04" + b"\x14" * 40, ("skipped", "binary-content")),
    # A file is what its bytes say: a PDF named .html is read as a PDF, HTML named .pdf as HTML.
    "pdf-named.html": (h.good_pdf("A PDF in disguise."), INDEXED),
    "recursive-object-stream.pdf": (h.pdf_recursive_object_stream(), ("skipped", "empty-text")),
    "html-named.pdf": (b"<html><p>Not a PDF at all.</p></html>", INDEXED),
    "flate-bomb.pdf": (h.pdf_flate_bomb(1), ("failed", "extraction-failed")),
    "form-bomb.pdf": (h.pdf_form_bomb(), ("failed", "extraction-failed")),
    "wide-page-tree.pdf": (h.pdf_wide_page_tree(3000), ("failed", "extraction-failed")),
    "reference-cycle.pdf": (h.pdf_reference_cycle(), ("failed", "extraction-failed")),
    "truncated.pdf": (h.pdf_truncated(), ("failed", "extraction-failed")),
}


@pytest.mark.django_db
def test_a_folder_of_hostile_files_is_ingested_to_the_end_with_every_file_recorded(
    tmp_path: Path, settings: Any
) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    for name, (data, _) in FOLDER.items():
        (folder / name).write_bytes(data)
    out = io.StringIO()
    # The crafted cases' lowered limits, so the bombs fail in a second each.
    settings.RAG = {**settings.RAG, "LOADERS": CRAFTED_LIMITS}
    with pytest.raises(CommandError) as failed:
        call_command(
            "rag_ingest",
            str(folder),
            root=str(tmp_path),
            max_bytes=4 * h.MB,
            stdout=out,
            stderr=io.StringIO(),
        )
    # Non-zero exit because sources failed; it names them, after the run went through every file.
    assert "5 source(s) failed" in str(failed.value)
    rows = {d.source_id: (d.status, d.status_reason) for d in Document.objects.all()}
    assert rows == {f"kb/{name}": expected for name, (_, expected) in FOLDER.items()}
    errors = dict(Document.objects.filter(status="failed").values_list("source_id", "error"))
    assert "PDF_MAX_DECODED_BYTES" in errors["kb/flate-bomb.pdf"]
    assert "PDF_MAX_PAGE_OBJECTS" in errors["kb/form-bomb.pdf"]
    assert "PDF_MAX_PAGES" in errors["kb/wide-page-tree.pdf"]


@pytest.mark.django_db
def test_a_folder_run_with_only_skips_exits_zero(tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "good.md").write_bytes(FOLDER["good.md"][0])
    (folder / "image.txt").write_bytes(FOLDER["image.txt"][0])
    (folder / "pdf-named.html").write_bytes(FOLDER["pdf-named.html"][0])
    call_command("rag_ingest", str(folder), root=str(tmp_path), stdout=io.StringIO(), stderr=io.StringIO())
    assert dict(Document.objects.values_list("source_id", "status_reason")) == {
        "kb/good.md": "",
        "kb/image.txt": "binary-content",
        "kb/pdf-named.html": "",
    }
    assert "holds a PNG image" in Document.objects.get(source_id="kb/image.txt").error


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "data", "holds"),
    [
        ("scan.txt", b"\x89PNG\r\n\x1a\n" + bytes(32), "a PNG image"),
        ("notes.md", b"\x7fELF\x02\x01\x01" + bytes(32), "an executable"),
    ],
)
def test_an_upload_whose_extension_lies_is_skipped_as_binary_content(
    committed: Any, name: str, data: bytes, holds: str
) -> None:
    with committed():
        row = Upload.objects.create(file=ContentFile(data, name=name))
    document = document_for(row)
    assert (document.status, document.status_reason) == ("skipped", "binary-content")
    assert f"holds {holds}" in document.error
