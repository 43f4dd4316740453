"""Hostile text costs time linear in its size, through the loaders and the chunker (issue 24, item 8).

Each class is loaded and chunked at n and at 4n bytes; linear work takes about 4 times as long,
quadratic work 16 times. The bound (6x, plus a little for timer noise on small inputs) catches the
second; CPU time, not wall time, so that a busy machine does not fail the test.
bench/hostile_text.py prints the MB/s of every class at 1 MB and 10 MB.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable

import pytest

from django_rag.ingest.chunking import Chunker, split_text
from django_rag.ingest.loaders import load_bytes, load_pdf
from django_rag.ingest.segments import MAX_HEADING_RUN
from tests import hostile as h

KB = 1024


def _repeat(unit: bytes, size: int) -> bytes:
    return (unit * (size // len(unit) + 1))[:size]


def _no_break(size: int) -> bytes:
    rng = random.Random(1)
    return bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(size))


def _invalid_utf8(size: int) -> bytes:
    rng = random.Random(3)
    return bytes(rng.choice((0xC3, 0xFF, 0x80, 0x41, 0x20, 0xE2)) for _ in range(size))


def _words(size: int) -> bytes:
    return _repeat(b"Lumen keeps every snapshot for days. Owners restore them.\n\n", size)


# class -> (content type, bytes of about n)
CLASSES: dict[str, tuple[str, Callable[[int], bytes]]] = {
    "plain-words": ("text/plain", _words),
    "dots": ("text/plain", lambda n: _repeat(b".", n)),
    "question-marks": ("text/plain", lambda n: _repeat(b"?!", n)),
    "short-sentences": ("text/plain", lambda n: _repeat(b"Ab. ", n)),
    "one-character": ("text/plain", lambda n: _repeat(b"x", n)),
    "no-break": ("text/plain", _no_break),
    "whitespace": ("text/plain", lambda n: _repeat(b" \n\t \n", n)),
    "form-feeds": ("text/plain", lambda n: _repeat(b"x\f", n)),
    "headings": ("text/plain", lambda n: _repeat(b"# h\n", n)),
    "headings-between-blank-lines": ("text/plain", lambda n: _repeat(b"# h\n\n", n)),
    "heading-bodies": ("text/plain", lambda n: _repeat(b"# h\nx\n", n)),
    "paragraphs": ("text/plain", lambda n: _repeat(b"x\n\n", n)),
    "close-tags": ("text/html", lambda n: _repeat(b"</", n)),
    "unclosed-a": ("text/html", lambda n: _repeat(b"<a", n)),
    "unclosed-a-attributes": ("text/html", lambda n: _repeat(b"<a href=x ", n)),
    "open-comments": ("text/html", lambda n: _repeat(b"<!--", n)),
    "open-marked-sections": ("text/html", lambda n: _repeat(b"<![", n)),
    "html-paragraphs": ("text/html", lambda n: _repeat(b"<p>Some words in a paragraph. </p>", n)),
    "invalid-utf8": ("text/plain", _invalid_utf8),
}
SIZE = 64 * KB


def _cpu_seconds(content_type: str, data: bytes) -> float:
    # This thread's CPU time: process_time also counts other threads of the test process (an ONNX
    # Runtime pool spinning, a chat worker thread left by an earlier test), which made it flaky.
    chunker = Chunker()
    started = time.thread_time()
    for doc in load_bytes(data, content_type=content_type, source_id="hostile"):
        for _ in chunker.iter_document(doc):
            pass
    return time.thread_time() - started


@pytest.mark.parametrize("name", list(CLASSES))
def test_every_hostile_class_loads_and_chunks_in_linear_time(name: str) -> None:
    content_type, make = CLASSES[name]
    small, large = make(SIZE), make(4 * SIZE)
    _cpu_seconds(content_type, small)  # warm-up
    t_small = min(_cpu_seconds(content_type, small) for _ in range(2))
    t_large = min(_cpu_seconds(content_type, large) for _ in range(2))
    assert t_large < 6 * t_small + 0.3, (name, t_small, t_large)


def test_the_old_quadratic_punctuation_case_is_fast_at_a_megabyte() -> None:
    # 32 KB of "." took 16.8 s before (quadratic); a megabyte now takes well under a second of CPU.
    started = time.process_time()
    chunks = split_text("." * (1024 * KB))
    assert time.process_time() - started < 5
    assert len(chunks) > 100 and sum(len(c.content) for c in chunks) == 1024 * KB


def test_a_run_of_heading_lines_past_the_limit_is_text() -> None:
    # Megabytes of "# h" lines each opened a section in Python (0.4 MB/s); past MAX_HEADING_RUN
    # heading lines in a row, the rest of the run is text, chunked as text is.
    lines = [f"# h{i}" for i in range(MAX_HEADING_RUN + 100)]
    text = "\n".join(lines) + "\nThe body under them."
    chunks = split_text(text)
    assert {tuple(c.metadata.get("heading_path", ())) for c in chunks} <= {
        (f"h{i}",) for i in range(MAX_HEADING_RUN)
    }
    assert chunks[-1].metadata["heading_path"] == [f"h{MAX_HEADING_RUN - 1}"]
    assert "# h100" in "".join(c.content for c in chunks) and chunks[-1].content.endswith("under them.")
    # Body text between heading lines ends a run: every heading of a long document is a heading.
    sections = "\n\n".join(f"# s{i}\n\nText of section {i}." for i in range(3 * MAX_HEADING_RUN))
    assert split_text(sections)[-1].metadata["heading_path"] == [f"s{3 * MAX_HEADING_RUN - 1}"]


def _pdf_of_text_objects(count: int) -> bytes:
    ops = b"".join(
        b"BT /F1 4 Tf %d %d Td (w%d) Tj ET\n" % (5 + (i * 37) % 600, 5 + (i * 53) % 780, i)
        for i in range(count)
    )
    return h._one_stream_pdf(h.stream(zlib.compress(ops, 6), b"/Filter /FlateDecode"))


def test_a_pdf_page_of_many_text_objects_is_read_in_linear_time() -> None:
    def seconds(count: int) -> float:
        started = time.process_time()
        load_pdf(_pdf_of_text_objects(count), source_id="many.pdf")
        return time.process_time() - started

    # Above RAG["LOADERS"]["PDF_MAX_LAYOUT_BOXES"] (1,000), whose square-time grouping it bounds,
    # and up to the finding's 15,000 objects: before the fix 6,000 took 0.9 s and 15,000 took 15 s.
    seconds(200)
    t_small = min(seconds(3750) for _ in range(2))
    t_large = seconds(15_000)
    assert t_large < 6 * t_small + 0.3, (t_small, t_large)
