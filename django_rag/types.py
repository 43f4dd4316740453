"""Values that cross module borders."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.safestring import SafeString

if TYPE_CHECKING:
    from .models import Chunk, Document

__all__ = [
    "BINARY_CONTENT",
    "CORRUPT_FILE",
    "EMPTY_TEXT",
    "ENCRYPTED",
    "EXTRACTION_FAILED",
    "OCR",
    "OUTBOUND_REFUSED",
    "SYMLINK_LOOP",
    "SYMLINK_OUTSIDE",
    "TOO_LARGE",
    "UNREADABLE",
    "UNSAFE_FILE",
    "UNSUPPORTED_TYPE",
    "Answer",
    "ChunkData",
    "Completion",
    "Hit",
    "IngestResult",
    "RagDocument",
    "SyncResult",
    "page_label",
]

# Why a source was skipped (``IngestResult.reason``, ``Document.status_reason``).
UNSUPPORTED_TYPE = "unsupported-type"
TOO_LARGE = "too-large"
EMPTY_TEXT = "empty-text"
# A text file (by its name) whose bytes are not text: NUL bytes and no byte-order mark.
BINARY_CONTENT = "binary-content"
# Why a file could not be read (``status="failed"``): not a regular file, gone, I/O error.
UNREADABLE = "unreadable"
# A symbolic link that leads back into a folder being walked, or to itself.
SYMLINK_LOOP = "symlink-loop"
# A symbolic link that resolves outside the folder walked (or outside ``--root``): not followed
# unless asked (``rag_ingest --follow-links``), so writing into a folder cannot publish other files.
SYMLINK_OUTSIDE = "symlink-outside"
# The loader could not extract text (a broken or encrypted PDF...): ``status="failed"``.
EXTRACTION_FAILED = "extraction-failed"
# A password-protected file (an encrypted OOXML package, ODF document or e-mail part): skipped.
ENCRYPTED = "encrypted"
# A file its format's library cannot read (truncated, broken structure): skipped.
CORRUPT_FILE = "corrupt-file"
# A file past a bound of RAG["LOADERS"] (a zip bomb, an XML entity or DTD, an image bomb): skipped.
UNSAFE_FILE = "unsafe-file"
# An indexed document whose text (some of it) was read by OCR (``Document.status_reason``).
OCR = "ocr"
# RAG["OUTBOUND"] (the OutboundPolicy) refused to fetch a URL: ``status="failed"``.
OUTBOUND_REFUSED = "outbound-refused"


def page_label(metadata: dict[str, Any] | None, page: int | None) -> str:
    """How a citation names ``page`` of a document: "page 3", "slide 4", "sheet Budget", "chapter 2".

    Loaders of slides, sheets and e-book chapters number them like pages and say so in the
    document's metadata: ``page_unit`` ("slide", "sheet", "chapter") and, where they have names,
    ``page_names`` (one per page, in order).
    """
    if page is None:
        return ""
    meta = metadata or {}
    unit = str(meta.get("page_unit") or "page")
    names = meta.get("page_names")
    if unit == "sheet" and isinstance(names, list) and 0 < page <= len(names) and names[page - 1]:
        return f"sheet {names[page - 1]}"
    return f"{unit} {page}"


@dataclass
class RagDocument:
    """One logical source as a loader emits it: the unit ``Collection.index`` syncs."""

    source_id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return str(self.metadata.get("title") or self.source_id)


@dataclass
class ChunkData:
    """A chunk on its way into a store: text, position and (once embedded) its vector.

    ``header`` is its contextual header (the document's title and heading path): embedded and
    matched with ``content`` (see ``embedded_text``), never displayed. ``content_hash`` is the
    SHA-1 of the embedded text, so a chunk whose header changed is embedded again.
    """

    index: int
    content: str
    content_hash: str = ""
    token_count: int = 0
    page: int | None = None
    char_start: int = 0
    char_end: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    embedding: list[float] | None = None
    header: str = ""

    @property
    def embedded_text(self) -> str:
        """What is embedded and what the text leg matches: the header, a blank line, the content."""
        return f"{self.header}\n\n{self.content}" if self.header else self.content


class _Snippet:
    """``Hit.snippet``: the string it was given, or for ``None`` the chunk's opening (its first
    40 words, HTML-escaped), made when first read and then kept.

    Vector hits have nothing lexical to highlight: their snippet is cut in Python from the
    chunk text the hit already holds, and only if read, so hits passed on to ``ask()``, a
    reranker or an API without snippets never pay for it.
    """

    def __get__(self, hit: Hit | None, owner: type | None = None) -> Any:
        if hit is None:
            return ""  # the field's default, as dataclasses read it from a descriptor
        found = hit.__dict__.get("snippet")
        if found is None:
            found = hit.__dict__["snippet"] = _opening(hit.chunk.content)
        return found

    def __set__(self, hit: Hit, value: str | None) -> None:
        hit.__dict__["snippet"] = value


def _opening(content: str, words: int = 40) -> SafeString:
    """The first ``words`` words of a chunk, HTML-escaped."""
    parts = content.split(maxsplit=words)  # the words, then the rest of the text if any
    text = " ".join(parts[:words]) + (" …" if len(parts) > words else "")
    # html.escape is what django.utils.html.escape runs, without its lazy-string wrapper.
    return SafeString(html.escape(text))


@dataclass
class Hit:
    """One search result. ``score`` is higher-is-better (cosine similarity for vector search,
    BM25 for text search, the RRF sum for hybrid search): it orders the hits of one query.

    ``relevance`` (0 to 1) means the same across queries and modes: how much better than chance
    the passage matches (``django_rag.search.relevance``); ``min_score`` filters on it.
    ``similarity`` is the cosine similarity to the query (None in text mode) and ``text_match``
    the share of the query's weighted terms the chunk holds (None in vector mode): the evidence
    relevance is computed from. ``snippet`` is safe HTML; ``None`` stands for the chunk's
    opening, made on first read.
    """

    chunk: Chunk | ChunkData
    document: Document | None
    score: float
    vector_rank: int | None = None
    text_rank: int | None = None
    snippet: str = _Snippet()  # type: ignore[assignment]
    page: int | None = None
    source_id: str = ""
    relevance: float | None = None
    similarity: float | None = None
    text_match: float | None = None

    @property
    def content(self) -> str:
        return self.chunk.content


@dataclass
class SyncResult:
    """What ``index`` changed, counted in chunks."""

    added: int = 0
    removed: int = 0
    unchanged: int = 0
    documents: int = 0
    skipped: int = 0
    embedded: int = 0  # chunk texts sent to the embedder

    def __iadd__(self, other: SyncResult) -> SyncResult:
        self.added += other.added
        self.removed += other.removed
        self.unchanged += other.unchanged
        self.documents += other.documents
        self.skipped += other.skipped
        self.embedded += other.embedded
        return self


@dataclass
class Completion:
    """What the chat backend returned for one answer: its model, its text, its token usage."""

    model: str
    text: str
    usage: dict[str, int] = field(default_factory=dict)


@dataclass
class Answer:
    """The result of ``ask``: the text, the hits it cites, every hit it was given, the completion.

    ``citations`` are in order of first citation; ``sources[n - 1]`` is passage ``[n]``;
    ``completion`` is None when no backend was called (no passage found).
    """

    text: str
    citations: list[Hit] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    sources: list[Hit] = field(default_factory=list)
    completion: Completion | None = None


@dataclass
class IngestResult:
    """The outcome of ingesting one model row or file: indexed, skipped (with reason) or failed."""

    status: str
    reason: str = ""
    error: str = ""
    sync: SyncResult | None = None
