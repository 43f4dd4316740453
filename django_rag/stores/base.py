"""The store protocol every backend satisfies, and what stores share."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from django.utils.module_loading import import_string

from ..exceptions import ConfigurationError, QueryError
from ..types import ChunkData, Hit, SyncResult

__all__ = ["PREFIX_SEPARATORS", "DocumentInfo", "QueryScope", "VectorStore", "get_store", "prefix_matches"]

# A prefix matches whole path segments: "docs" covers "docs", "docs/a" and "docs#p2", never "docs2".
PREFIX_SEPARATORS = ("/", "#", ":", "?")


def prefix_matches(source_id: str, prefix: str) -> bool:
    if not prefix:
        raise QueryError("an empty prefix would match every document; pass a non-empty prefix")
    if source_id == prefix:
        return True
    if prefix.endswith(PREFIX_SEPARATORS):
        return source_id.startswith(prefix)
    return any(source_id.startswith(prefix + sep) for sep in PREFIX_SEPARATORS)


@dataclass
class DocumentInfo:
    """What a store records about a document besides its chunks."""

    source_id: str
    title: str = ""
    source: str = ""
    content_type: str = ""
    loader: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    tenant: str = ""
    content_hash: str = ""
    page_count: int | None = None
    owner: Any = None  # a model instance; or, without loading it, owner_type_id + owner_id
    owner_type_id: int | None = None
    owner_id: str | None = None


@dataclass
class QueryScope:
    """Filters every search leg applies. ``tags`` match on overlap; ``filters`` on metadata equality."""

    tenant: str | None = None
    tags: Sequence[str] | None = None
    filters: dict[str, Any] | None = None
    source_prefix: str | None = None
    min_score: float | None = None


@runtime_checkable
class VectorStore(Protocol):
    """Upsert a document's chunks, query by vector, delete by source id or prefix.

    ``collection`` is the collection's name or its ``Collection`` row (whose ``str`` is the
    name); passing the row spares the ORM store a lookup per call.
    """

    def upsert(
        self, collection: str, document: DocumentInfo, chunks: Sequence[ChunkData], *, space: str
    ) -> SyncResult:
        """Make ``chunks`` (embedded) the document's chunks in ``space``; unchanged hashes keep their rows."""
        ...

    def upsert_many(
        self, collection: str, items: Sequence[tuple[DocumentInfo, Sequence[ChunkData]]], *, space: str
    ) -> SyncResult:
        """``upsert`` for several documents at once (one transaction where the backend has them)."""
        ...

    def vectors_for(self, space: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        """Stored vectors for chunk texts already embedded in ``space``, by content hash."""
        ...

    def query(
        self, collection: str, vector: Sequence[float], k: int, *, space: str, scope: QueryScope | None = None
    ) -> list[Hit]:
        """The ``k`` chunks nearest ``vector``, best first, scored by cosine similarity."""
        ...

    def search(
        self,
        collection: Any,
        *,
        mode: str,
        k: int,
        space: str,
        text: str = "",
        vector: Sequence[float] | None = None,
        scope: QueryScope | None = None,
        **options: Any,
    ) -> list[Hit]:
        """``query`` generalised to modes ("vector", "text", "hybrid"); ``collection`` is a name or a row."""
        ...

    def delete(self, collection: str, *, source_id: str | None = None, prefix: str | None = None) -> int:
        """Delete one document (exact ``source_id``) or all under ``prefix``; return how many."""
        ...


def check_delete_args(source_id: str | None, prefix: str | None) -> None:
    if (source_id is None) == (prefix is None):
        raise QueryError("pass exactly one of source_id= or prefix=")
    if prefix is not None:
        prefix_matches("", prefix)  # rejects the empty prefix


def diff_chunks(
    existing: Sequence[tuple[Any, str]], chunks: Sequence[ChunkData]
) -> tuple[list[tuple[Any, ChunkData]], list[ChunkData], list[Any]]:
    """Match stored ``(key, content_hash)`` rows to new chunks by hash.

    Returns (kept: [(key, new chunk)], added: [chunk], removed: [key]). Duplicate texts match
    one stored row each, so a repeated paragraph is neither lost nor stored twice.
    """
    by_hash: dict[str, list[Any]] = {}
    for key, content_hash in existing:
        by_hash.setdefault(content_hash, []).append(key)
    kept: list[tuple[Any, ChunkData]] = []
    added: list[ChunkData] = []
    for chunk in chunks:
        keys = by_hash.get(chunk.content_hash)
        if keys:
            kept.append((keys.pop(0), chunk))
        else:
            added.append(chunk)
    removed = [key for keys in by_hash.values() for key in keys]
    return kept, added, removed


@functools.cache
def _cached_store(backend: str) -> VectorStore:
    try:
        return import_string(backend)()
    except ImportError as exc:
        raise ConfigurationError(f"cannot import RAG['STORE'] backend {backend!r}: {exc}") from exc


def get_store() -> VectorStore:
    """The store named by ``RAG["STORE"]`` (the pgvector ORM store by default)."""
    from ..conf import rag_settings

    return _cached_store(rag_settings.STORE)
