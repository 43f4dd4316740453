"""A streaming, sentence-aligned, heading-aware splitter: linear time, bounded memory.

Chunks end where text ends: at a heading, a paragraph or a sentence (``ingest.segments`` finds
them), never inside a sentence unless that sentence alone is longer than a chunk (then it is
cut at a line break, else at whitespace, else anywhere). Page breaks (``\\f``) are never crossed.

- A heading line starts a new chunk: a chunk holds one section (and the heading lines that open
  it), and knows that section's heading path (``metadata["heading_path"]``, outermost first;
  absent for text before any heading).
- A paragraph that fits in a chunk is never split: it goes whole into the chunk being built or
  opens the next one. A longer paragraph fills chunks sentence by sentence.
- Each chunk after the first of a section starts with whole sentences of the previous one (at
  most ``chunk_overlap`` tokens): never a piece of a sentence, never across a heading or a page.
- With ``context_headers``, each chunk carries a contextual header, the document's title and
  the heading path (``ChunkData.header``): embedded and matched with the chunk, never shown.
  Its tokens count against ``chunk_size``, so the embedder never truncates a chunk.

Offsets invariant: every chunk's ``content`` is non-empty, has no leading or trailing
whitespace, and equals ``text[chunk.char_start:chunk.char_end]``.

Every sentence is counted once, in batches of about ``BATCH_CHARS`` characters (``ingest.tokens``
picks the fastest counter the caller has); one longer than ``MAX_COUNT_CHARS`` is cut before it
is counted. With an additive counter (WordPiece, word counts: counts add up where text is cut
after whitespace) a chunk's count is the sum of its sentences'; otherwise each chunk is counted
once more. Memory holds one batch and the chunk being built, never the whole text's tokens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..exceptions import ConfigurationError
from ..types import ChunkData, RagDocument
from .packing import (
    BATCH_CHARS,
    HEADER_SEPARATOR,
    MAX_COUNT_CHARS,
    MAX_PAGES,
    PAGE_BREAK,
    Splitter,
    context_header,
    embedded_text,
)
from .tokens import (
    BatchCounter,
    TokenCounter,
    counting,
    default_token_counter,
    estimate_tokens,
)

__all__ = [
    "BATCH_CHARS",
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "HEADER_SEPARATOR",
    "MAX_COUNT_CHARS",
    "MAX_PAGES",
    "PAGE_BREAK",
    "BatchCounter",
    "Chunker",
    "TokenCounter",
    "chunk_document",
    "context_header",
    "default_token_counter",
    "embedded_text",
    "estimate_tokens",
    "iter_chunks",
    "split_text",
]

DEFAULT_CHUNK_SIZE = 256
DEFAULT_CHUNK_OVERLAP = 32


def _check_options(chunk_size: Any, chunk_overlap: Any) -> None:
    for name, value in (("chunk_size", chunk_size), ("chunk_overlap", chunk_overlap)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigurationError(f"{name} must be an integer number of tokens, got {value!r}")
    if chunk_size <= 0:
        raise ConfigurationError(f"chunk_size must be a positive number of tokens, got {chunk_size}")
    if chunk_overlap < 0:
        raise ConfigurationError(f"chunk_overlap must be 0 or more tokens, got {chunk_overlap}")
    if chunk_overlap >= chunk_size:
        raise ConfigurationError(
            f"chunk_overlap ({chunk_overlap}) must be smaller than chunk_size ({chunk_size}); "
            "set CHUNK_OVERLAP to about a tenth of CHUNK_SIZE"
        )


def iter_chunks(
    text: str,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    token_counter: TokenCounter | None = None,
    batch_counter: BatchCounter | None = None,
    additive: bool = False,
    first_page: int | None = None,
    title: str | None = None,
) -> Iterator[ChunkData]:
    """The chunks of ``text`` one by one (see :func:`split_text`), holding only a few at a time.

    ``title`` (a string, possibly empty) turns contextual headers on: each chunk's ``header`` is
    ``title`` and its heading path (:func:`context_header`); ``None`` leaves headers off.
    """
    _check_options(chunk_size, chunk_overlap)
    count = counting(token_counter, batch_counter, additive)
    if first_page is None and PAGE_BREAK in text:
        first_page = 1
    splitter = Splitter(text, chunk_size, chunk_overlap, count, title)
    index = 0
    for start, end, tokens, section, page_index in splitter.spans():
        raw = text[start:end]
        content = raw.strip()
        if not content:
            continue
        char_start = start + len(raw) - len(raw.lstrip())
        embedded = embedded_text(section.header, content)
        yield ChunkData(
            index=index,
            content=content,
            content_hash=hashlib.sha1(embedded.encode("utf-8", "surrogatepass")).hexdigest(),
            token_count=tokens,
            page=None if first_page is None else first_page + page_index,
            char_start=char_start,
            char_end=char_start + len(content),
            metadata={"heading_path": list(section.path)} if section.path else {},
            header=section.header,
        )
        index += 1


def split_text(
    text: str,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    token_counter: TokenCounter | None = None,
    batch_counter: BatchCounter | None = None,
    additive: bool = False,
    first_page: int | None = None,
    title: str | None = None,
) -> list[ChunkData]:
    """Split ``text`` into chunks of at most ``chunk_size`` tokens that never cross a ``\\f``.

    ``page`` is ``first_page`` plus the number of page breaks before the chunk; ``first_page``
    defaults to 1 when the text holds a page break and to ``None`` (no page) otherwise.
    """
    return list(
        iter_chunks(
            text,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            token_counter=token_counter,
            batch_counter=batch_counter,
            additive=additive,
            first_page=first_page,
            title=title,
        )
    )


@dataclass(frozen=True)
class Chunker:
    """Chunking options a collection carries (``CHUNK_SIZE``, ``CHUNK_OVERLAP``,
    ``CONTEXT_HEADERS``), validated once."""

    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
    token_counter: TokenCounter | None = None
    batch_counter: BatchCounter | None = None
    additive: bool = False
    context_headers: bool = False

    def __post_init__(self) -> None:
        _check_options(self.chunk_size, self.chunk_overlap)

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None = None) -> Chunker:
        """Build from a settings dict such as ``{"CHUNK_SIZE": 512, "CHUNK_OVERLAP": 64}``."""
        lowered = {key.lower(): value for key, value in (options or {}).items()}
        return cls(
            chunk_size=lowered.get("chunk_size", DEFAULT_CHUNK_SIZE),
            chunk_overlap=lowered.get("chunk_overlap", DEFAULT_CHUNK_OVERLAP),
            context_headers=bool(lowered.get("context_headers", False)),
        )

    def iter_text(
        self, text: str, *, first_page: int | None = None, title: str | None = None
    ) -> Iterator[ChunkData]:
        return iter_chunks(
            text,
            chunk_size=self.chunk_size,
            chunk_overlap=self.chunk_overlap,
            token_counter=self.token_counter,
            batch_counter=self.batch_counter,
            additive=self.additive,
            first_page=first_page,
            title=title if self.context_headers else None,
        )

    def split_text(self, text: str, *, first_page: int | None = None) -> list[ChunkData]:
        return list(self.iter_text(text, first_page=first_page))

    def iter_document(self, doc: RagDocument) -> Iterator[ChunkData]:
        """Chunks of ``doc`` one by one; a ``page`` in its metadata numbers the page its text
        starts on, its ``title`` heads the contextual headers."""
        page = doc.metadata.get("page")
        if isinstance(page, str) and page.isdigit():
            page = int(page)
        first_page = page if isinstance(page, int) and not isinstance(page, bool) else None
        return self.iter_text(doc.text, first_page=first_page, title=document_title(doc))

    def chunk_document(self, doc: RagDocument) -> list[ChunkData]:
        """Chunks of ``doc``; a ``page`` in its metadata numbers the page its text starts on."""
        return list(self.iter_document(doc))


def document_title(doc: RagDocument) -> str:
    """The title a document's contextual headers start with: ``metadata["title"]``, unless it
    is only the source id (which says nothing a reader would search for)."""
    title = doc.metadata.get("title")
    if not isinstance(title, str) or title.strip() == doc.source_id:
        return ""
    return " ".join(title.split())[:200]


def chunk_document(
    doc: RagDocument,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    token_counter: TokenCounter | None = None,
    batch_counter: BatchCounter | None = None,
    additive: bool = False,
    context_headers: bool = False,
) -> list[ChunkData]:
    """Chunks of one loaded document (see :meth:`Chunker.chunk_document`)."""
    return Chunker(
        chunk_size, chunk_overlap, token_counter, batch_counter, additive, context_headers
    ).chunk_document(doc)
