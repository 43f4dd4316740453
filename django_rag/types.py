"""Values that cross module borders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import Chunk, Document

__all__ = ["Answer", "ChunkData", "Hit", "IngestResult", "RagDocument", "SyncResult"]


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
    """A chunk on its way into a store: text, position and (once embedded) its vector."""

    index: int
    content: str
    content_hash: str = ""
    token_count: int = 0
    page: int | None = None
    char_start: int = 0
    char_end: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    embedding: list[float] | None = None


@dataclass
class Hit:
    """One search result. ``score`` is higher-is-better (cosine similarity for vector search)."""

    chunk: Chunk | ChunkData
    document: Document | None
    score: float
    vector_rank: int | None = None
    text_rank: int | None = None
    snippet: str = ""
    page: int | None = None
    source_id: str = ""

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
class Answer:
    """The result of ``ask``: generated text and the hits it cites."""

    text: str
    citations: list[Hit] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)


@dataclass
class IngestResult:
    """The outcome of ingesting one model row or file: indexed, skipped (with reason) or failed."""

    status: str
    reason: str = ""
    error: str = ""
    sync: SyncResult | None = None
