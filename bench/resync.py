"""Re-sync of a ~1,000-chunk document: unchanged, then with one paragraph edited.

    .venv/bin/python bench/resync.py [--chunks 1000] [--chunk-size 128] [--chunk-overlap 16]

The document is SciFact abstracts joined as paragraphs (blank lines between them), as many
as it takes for the collection's chunking (``--chunk-size`` tokens, ``--chunk-overlap``) to
yield about ``--chunks`` chunks. The embedder is django-rag's hashing embedder with counters
for ``embed_documents`` calls and the texts they carry, so the figures count exactly what a
paid embedding API would be sent. Three timed ``collection.index([doc])`` calls:

1. first index (every chunk embedded);
2. the same text again: must embed nothing; reports the time and how much of it the
   ``vectors_for`` reuse query took;
3. one paragraph in the middle edited (one sentence's words reversed: same length, new text);
4. the same paragraph grown by one sentence (so the chunks after it may shift).

Steps 3 and 4 report chunks added/removed/unchanged and texts embedded, against the chunks
the edit touched: chunks of the new text that overlap the edited paragraph and whose text is
new, computed offline with the same chunker. New chunks outside the paragraph are counted
apart: they are boundary shifts of the greedy packing, not text the edit changed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from common import (
    CountingHashingEmbedder,
    Timer,
    bench_database,
    load_abstracts,
    machine_line,
    setup_django,
)

COLLECTION = "resync"
SOURCE_ID = "bench/long-document"


def build_text(abstracts: list[tuple[str, str, str]], count: int) -> list[str]:
    return [text for _, _, text in abstracts[:count]]


def chunk_spans(text: str, size: int, overlap: int) -> list[tuple[int, int, str]]:
    from django_rag.ingest.chunking import chunk_document
    from django_rag.types import RagDocument

    chunks = chunk_document(RagDocument(SOURCE_ID, text), chunk_size=size, chunk_overlap=overlap)
    return [(c.char_start, c.char_end, c.content_hash) for c in chunks]


def paragraphs_for(target: int, size: int, overlap: int) -> list[str]:
    """The fewest abstracts whose joined text chunks into at least ``target`` chunks."""
    abstracts = load_abstracts()
    low, high = 1, len(abstracts)
    while low < high:
        mid = (low + high) // 2
        if len(chunk_spans("\n\n".join(build_text(abstracts, mid)), size, overlap)) >= target:
            high = mid
        else:
            low = mid + 1
    return build_text(abstracts, low)


def reverse_sentence(paragraph: str) -> str:
    """The paragraph with its second sentence's words reversed: same length, new text."""
    sentences = paragraph.split(". ")
    i = 1 if len(sentences) > 2 else 0
    sentences[i] = " ".join(reversed(sentences[i].split()))
    return ". ".join(sentences)


def add_sentence(paragraph: str) -> str:
    return paragraph + " These findings were revised after the re-sync benchmark edited this paragraph."


@dataclass
class Version:
    label: str
    text: str
    spans: list[tuple[int, int, str]]
    chunking: float  # seconds the chunker takes on this text, measured offline
    edited: tuple[int, int] | None = None  # character range of the edited paragraph

    def new_chunks(self, before: Version) -> tuple[int, int]:
        """(new chunks inside the edited paragraph, new chunks outside it) against ``before``."""
        old = {h for _, _, h in before.spans}
        start, end = self.edited or (0, 0)
        inside = sum(1 for s, e, h in self.spans if h not in old and s < end and e > start)
        outside = sum(1 for s, e, h in self.spans if h not in old and not (s < end and e > start))
        return inside, outside


def versions(paragraphs: list[str], size: int, overlap: int) -> list[Version]:
    middle = len(paragraphs) // 2

    def version(label: str, paras: list[str], edited: bool) -> Version:
        text = "\n\n".join(paras)
        start = len("\n\n".join(paras[:middle])) + 2
        span = (start, start + len(paras[middle])) if edited else None
        with Timer() as timer:
            spans = chunk_spans(text, size, overlap)
        return Version(label, text, spans, timer.seconds, span)

    reversed_ = [*paragraphs[:middle], reverse_sentence(paragraphs[middle]), *paragraphs[middle + 1 :]]
    grown = [*reversed_[:middle], add_sentence(reversed_[middle]), *reversed_[middle + 1 :]]
    return [
        version("first index", paragraphs, False),
        version("re-sync, unchanged", paragraphs, False),
        version("re-sync, sentence rewritten", reversed_, True),
        version("re-sync, sentence added", grown, True),
    ]


def timed_vectors_for(store: Any) -> Callable[[], float]:
    """Wrap ``store.vectors_for`` to add up its time; returns a reader of the total."""
    original = store.vectors_for
    spent = [0.0]

    def vectors_for(space: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        with Timer() as timer:
            found = original(space, hashes)
        spent[0] += timer.seconds
        return found

    store.vectors_for = vectors_for
    return lambda: spent[0]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--chunk-size", type=int, default=128, help="tokens")
    parser.add_argument("--chunk-overlap", type=int, default=16, help="tokens")
    args = parser.parse_args(argv)

    rag = {
        "EMBEDDERS": {"default": {"BACKEND": "common.CountingHashingEmbedder", "DIMENSIONS": 384}},
        "COLLECTIONS": {
            COLLECTION: {
                "TEXT_CONFIG": "english",
                "CHUNK_SIZE": args.chunk_size,
                "CHUNK_OVERLAP": args.chunk_overlap,
            },
        },
    }
    with bench_database() as db:
        setup_django(db, rag)
        import django_rag
        from django_rag.ingest.chunking import default_token_counter
        from django_rag.models import Chunk
        from django_rag.stores import get_store
        from django_rag.types import RagDocument

        paragraphs = paragraphs_for(args.chunks, args.chunk_size, args.chunk_overlap)
        steps = versions(paragraphs, args.chunk_size, args.chunk_overlap)
        counter = getattr(default_token_counter(), "__name__", "?")
        print(
            f"re-sync: one document of {len(paragraphs)} SciFact abstracts, "
            f"{len(steps[0].text):,} characters, {len(steps[0].spans)} chunks of <= {args.chunk_size} "
            f"tokens (overlap {args.chunk_overlap}, counted with {counter}); hashing embedder, 384 dims"
        )
        print(f"server: {db.server}")
        kb = django_rag.collection(COLLECTION)
        spent = timed_vectors_for(get_store())
        rows: list[tuple[Version, Any, float, float, int]] = []
        for step in steps:
            CountingHashingEmbedder.reset()
            before = spent()
            with Timer() as timer:
                result = kb.index([RagDocument(SOURCE_ID, step.text, metadata={"title": "long document"})])
            rows.append((step, result, timer.seconds, spent() - before, CountingHashingEmbedder.calls))
            stored = Chunk.objects.filter(document__source_id=SOURCE_ID).count()
            if stored != len(step.spans) or result.added + result.unchanged != len(step.spans):
                raise SystemExit(f"{step.label}: {stored} chunks stored, the chunker makes {len(step.spans)}")

    print()
    print(
        f"{'step':<30} {'seconds':>8} {'added':>6} {'removed':>7} {'unchanged':>9} {'embedded':>8} "
        f"{'embed calls':>11} {'vectors_for s':>13} {'chunking s':>10}"
    )
    for step, result, seconds, reuse, calls in rows:
        print(
            f"{step.label:<30} {seconds:8.3f} {result.added:6} {result.removed:7} {result.unchanged:9} "
            f"{result.embedded:8} {calls:11} {reuse:13.3f} {step.chunking:10.3f}"
        )
    print()
    _, unchanged, _, _, calls = rows[1]
    verdict = "OK" if unchanged.embedded == 0 and calls == 0 else "FAIL: must be 0"
    print(f"unchanged re-sync: {unchanged.embedded} texts embedded in {calls} calls ({verdict})")
    for (before, *_), (step, result, *_) in pairwise(rows[1:]):
        inside, outside = step.new_chunks(before)
        verdict = "OK" if result.embedded == inside + outside and outside == 0 else "check"
        print(
            f"{step.label}: {result.embedded} texts embedded; new chunks inside the edited paragraph "
            f"{inside}, outside it (boundary shifts) {outside} ({verdict})"
        )
    print(machine_line())


if __name__ == "__main__":
    main()
