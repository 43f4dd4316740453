"""Hostile text through the loaders and the chunker: MB/s per input class at 1 MB and 10 MB (issue 24).

    .venv/bin/python bench/hostile_text.py                  # every class, 1 MB and 10 MB
    .venv/bin/python bench/hostile_text.py --sizes 1,4 --classes dots,close-tags

Each class is a file of that many bytes, loaded with ``load_bytes`` (the loader its content type
selects: text, HTML or PDF) and chunked with the collection defaults (CHUNK_SIZE 256,
CHUNK_OVERLAP 32) counted by the local MiniLM tokenizer (``LocalEmbedder.count_tokens``, which
the chunker turns into the embedder's batch counter), as ``rag_ingest`` would with the local
embedder. Time is the process's CPU time of loading plus chunking (the machine is shared: wall
time measures the neighbours), one run per cell, after a warm-up on a small input.
Linear classes show the same MB/s at both sizes; a quadratic one 10x less at 10 MB.
No database, no embedding.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import machine_line  # noqa: E402

MB = 1024 * 1024


def _repeat(unit: bytes, size: int) -> bytes:
    return (unit * (size // len(unit) + 1))[:size]


def plain(size: int) -> bytes:
    rng = random.Random(7)
    words = [b"the", b"of", b"backups", b"workspace", b"snapshot", b"restore", b"region", b"plan", b"owner"]
    out = bytearray()
    while len(out) < size:
        sentence = b" ".join(rng.choice(words) for _ in range(rng.randint(6, 24)))
        out += sentence[:1].upper() + sentence[1:] + (b".\n\n" if rng.random() < 0.2 else b". ")
    return bytes(out[:size])


def pdf_text_objects(size: int) -> bytes:
    """One PDF page whose content stream holds text objects worth ``size`` bytes."""
    ops = bytearray()
    i = 0
    while len(ops) < size:
        ops += b"BT /F1 4 Tf %d %d Td (w%d) Tj ET\n" % (5 + (i * 37) % 600, 5 + (i * 53) % 780, i)
        i += 1
    stream = zlib.compress(bytes(ops), 6)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def invalid_utf8(size: int) -> bytes:
    rng = random.Random(3)
    return bytes(rng.choice((0xC3, 0xFF, 0x80, 0x41, 0x20, 0xE2)) for _ in range(size))


# class -> (content type, make(size) -> bytes)
CLASSES: dict[str, tuple[str, Callable[[int], bytes]]] = {
    "plain-words": ("text/plain", plain),
    "dots": ("text/plain", lambda n: _repeat(b".", n)),
    "question-marks": ("text/plain", lambda n: _repeat(b"?!", n)),
    "one-char": ("text/plain", lambda n: _repeat(b"x", n)),
    "no-break": (
        "text/plain",
        lambda n: bytes(random.Random(1).choices(b"abcdefghijklmnopqrstuvwxyz0123456789+/", k=n)),
    ),
    "whitespace": ("text/plain", lambda n: _repeat(b" \n\t \n", n)),
    "form-feeds": ("text/plain", lambda n: _repeat(b"x\f", n)),
    "headings": ("text/plain", lambda n: _repeat(b"# h\n", n)),
    "heading-bodies": ("text/plain", lambda n: _repeat(b"# h\nx\n", n)),
    "short-sentences": ("text/plain", lambda n: _repeat(b"Ab. ", n)),
    "paragraphs": ("text/plain", lambda n: _repeat(b"x\n\n", n)),
    "close-tags": ("text/html", lambda n: _repeat(b"</", n)),
    "unclosed-a": ("text/html", lambda n: _repeat(b"<a", n)),
    "open-comments": ("text/html", lambda n: _repeat(b"<!--", n)),
    "html-words": ("text/html", lambda n: _repeat(b"<p>Some words in a paragraph. </p>", n)),
    "invalid-utf8": ("text/plain", invalid_utf8),
    "pdf-text-objects": ("application/pdf", pdf_text_objects),
}


def run_class(name: str, size: int) -> tuple[float, int]:
    """Seconds to load and chunk ``size`` bytes of class ``name``, and the chunks made."""
    from django_rag.embedders.local import LocalEmbedder
    from django_rag.exceptions import LoaderError
    from django_rag.ingest.chunking import Chunker
    from django_rag.ingest.loaders import load_bytes

    content_type, make = CLASSES[name]
    data = make(size)
    chunker = Chunker(token_counter=LocalEmbedder().count_tokens)
    started = time.process_time()
    chunks = 0
    try:
        for doc in load_bytes(data, content_type=content_type, source_id=name):
            chunks += sum(1 for _ in chunker.iter_document(doc))
    except LoaderError:
        chunks = -1  # refused by a RAG["LOADERS"] limit: the time is what refusing took
    return time.process_time() - started, chunks


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="1,10", help="comma-separated sizes in MB (default 1,10)")
    parser.add_argument("--classes", default=",".join(CLASSES), help="comma-separated classes (default: all)")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    sizes = [float(s) for s in args.sizes.split(",")]
    names = args.classes.split(",")
    print(f"hostile text through load_bytes + Chunker (MiniLM counter); {machine_line()}", flush=True)
    run_class("plain-words", 64 * 1024)  # warm-up: imports, tokenizer
    cells = "".join(f"{f'{s:g} MB cpu s':>14}{'MB/s':>8}" for s in sizes)
    header = f"{'class':<18}{cells}{'chunks':>9}"
    print(header, flush=True)
    for name in names:
        line = f"{name:<18}"
        chunks = 0
        for size in sizes:
            seconds, chunks = run_class(name, int(size * MB))
            line += f"{seconds:>14.2f}{size / seconds:>8.2f}"
        print(line + (f"{chunks:>9}" if chunks >= 0 else "  refused (limit)"), flush=True)
    print(machine_line())


if __name__ == "__main__":
    main()
