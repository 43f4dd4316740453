"""A semantic chunker: a chunk ends where the meaning of the text moves on.

Adjacent sentences (``ingest.segments`` finds them, as for the default chunker) are embedded with
the collection's embedder; a chunk ends where the cosine similarity of a sentence to the one
before it drops below ``threshold``, at a heading or a page break, or where the next sentence
would take it past ``chunk_size`` tokens. Chunks are sentence-aligned and never overlap; a
sentence longer than a chunk alone is cut by the default chunker. The heading path, contextual
headers and the offsets invariant are the default chunker's (``ingest.chunking``).

Select it per collection with ``"CHUNKER": "semantic"`` (and ``"SEMANTIC_THRESHOLD"``) in
``RAG["COLLECTIONS"]``. It embeds every sentence once at ingest, on top of the chunks: ingest
costs about as many embeddings as the text has sentences.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..embedders.base import Embedder
from ..exceptions import ConfigurationError
from ..types import ChunkData
from .chunking import Chunker, iter_chunks
from .packing import PAGE_BREAK, context_header, embedded_text
from .segments import Heading, new_fence, scan_page
from .tokens import TokenCounting, counting

__all__ = ["CHUNKERS", "DEFAULT_THRESHOLD", "SemanticChunker", "make_chunker"]

CHUNKERS = ("default", "semantic")
DEFAULT_THRESHOLD = 0.5
# A sentence is embedded from its first characters only: enough to place its meaning.
MAX_SENTENCE_CHARS = 2000


class _Sentence(NamedTuple):
    start: int
    end: int
    page: int
    path: tuple[str, ...]
    opens: int  # where its chunk starts if it opens one (the heading line before it, else start)


@dataclass(frozen=True)
class SemanticChunker(Chunker):
    """``Chunker``'s interface; ``embedder`` embeds the sentences, ``threshold`` (-1 to 1) is the
    adjacent-sentence similarity under which a chunk ends."""

    embedder: Embedder | None = None
    threshold: float = DEFAULT_THRESHOLD

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.embedder is None:
            raise ConfigurationError("the semantic chunker needs the collection's embedder")
        threshold = self.threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not -1 <= threshold <= 1:
            raise ConfigurationError(
                f"SEMANTIC_THRESHOLD must be a number between -1 and 1, got {threshold!r}"
            )

    def iter_text(
        self, text: str, *, first_page: int | None = None, title: str | None = None
    ) -> Iterator[ChunkData]:
        if first_page is None and PAGE_BREAK in text:
            first_page = 1
        title = title if self.context_headers else None
        sentences = list(_sentences(text))
        if not sentences:
            return
        count = counting(self.token_counter, self.batch_counter, self.additive)
        tokens = count.many([text[s.start : s.end] for s in sentences])
        assert self.embedder is not None  # checked in __post_init__
        vectors = self.embedder.embed_documents(
            [text[s.start : s.end][:MAX_SENTENCE_CHARS] for s in sentences]
        )
        index = 0
        for group in self._groups(sentences, tokens, vectors):
            for chunk in self._chunks(text, group, first_page, title, count):
                chunk.index = index
                index += 1
                yield chunk

    def _groups(
        self, sentences: Sequence[_Sentence], tokens: Sequence[int], vectors: Sequence[Sequence[float]]
    ) -> Iterator[list[_Sentence]]:
        group: list[_Sentence] = []
        size = 0
        for i, sentence in enumerate(sentences):
            if group:
                previous = sentences[i - 1]
                moved_on = sentence.page != previous.page or sentence.opens != sentence.start
                if (
                    moved_on
                    or size + tokens[i] > self.chunk_size
                    or _cosine(vectors[i - 1], vectors[i]) < self.threshold
                ):
                    yield group
                    group, size = [], 0
            group.append(sentence)
            size += tokens[i]
        if group:
            yield group

    def _chunks(
        self,
        text: str,
        group: Sequence[_Sentence],
        first_page: int | None,
        title: str | None,
        count: TokenCounting,
    ) -> Iterator[ChunkData]:
        first, last = group[0], group[-1]
        start, end = first.opens, last.end
        header = context_header(title, first.path) if title is not None else ""
        page = None if first_page is None else first_page + first.page
        metadata: dict[str, Any] = {"heading_path": list(first.path)} if first.path else {}
        raw = text[start:end]
        content = raw.strip()
        tokens = count.one(content) if content else 0
        if tokens <= self.chunk_size:
            char_start = start + len(raw) - len(raw.lstrip())
            yield _chunk(content, header, tokens, page, char_start, metadata)
            return
        # One sentence (with its heading) longer than a chunk: the default chunker cuts it.
        for piece in iter_chunks(
            raw,
            chunk_size=self.chunk_size,
            chunk_overlap=0,
            token_counter=self.token_counter,
            batch_counter=self.batch_counter,
            additive=self.additive,
        ):
            yield _chunk(piece.content, header, piece.token_count, page, start + piece.char_start, metadata)


def _chunk(
    content: str, header: str, tokens: int, page: int | None, start: int, metadata: dict[str, Any]
) -> ChunkData:
    digest = hashlib.sha1(embedded_text(header, content).encode("utf-8", "surrogatepass")).hexdigest()
    return ChunkData(
        index=0,
        content=content,
        content_hash=digest,
        token_count=tokens,
        page=page,
        char_start=start,
        char_end=start + len(content),
        metadata=dict(metadata),
        header=header,
    )


def _sentences(text: str) -> Iterator[_Sentence]:
    """The text's sentences with their page and heading path; a heading opens the next sentence's chunk."""
    fence = new_fence()
    path: list[tuple[int, str]] = []
    page_start = 0
    for page, part in enumerate(text.split(PAGE_BREAK)):
        start, end = page_start, page_start + len(part)
        page_start = end + 1
        heading_at: int | None = None
        for item in scan_page(text, start, end, fence):
            if isinstance(item, Heading):
                path = [(level, title) for level, title in path if level < item.level] + [
                    (item.level, item.title)
                ]
                heading_at = item.start if heading_at is None else heading_at
                continue
            if not text[item.start : item.end].strip():
                continue
            opens = item.start if heading_at is None else heading_at
            heading_at = None
            yield _Sentence(item.start, item.end, page, tuple(title for _, title in path), opens)


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def make_chunker(options: dict[str, Any], embedder: Embedder) -> Chunker:
    """The chunker ``options`` select (``chunker``: "default" or "semantic"; ``semantic_threshold``),
    built with the other options (``chunk_size``, ``token_counter``... as ``Chunker`` takes them)."""
    kind = options.pop("chunker", None) or "default"
    threshold = options.pop("semantic_threshold", None)
    if kind not in CHUNKERS:
        raise ConfigurationError(f"unknown CHUNKER {kind!r}; use one of {', '.join(CHUNKERS)}")
    if kind == "semantic":
        return SemanticChunker(
            **options, embedder=embedder, threshold=DEFAULT_THRESHOLD if threshold is None else threshold
        )
    return Chunker(**options)
