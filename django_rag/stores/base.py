"""The store protocol between the pipelines (ingest, search) and the database, and what stores share.

Every read or write of documents and chunks that ingestion and search make goes through one of
these methods, so a second store (the memory store here) works without touching them. A store
instance serves one database alias (``get_store(using)``); collections are always passed as
their ``Collection`` row, which the Django database holds whatever the store.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Collection as Container
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from django.utils.module_loading import import_string

from ..conf import on_rag_change, rag_settings
from ..exceptions import ConfigurationError, QueryError
from ..sql import check_prefix
from ..types import ChunkData, Hit, SyncResult

if TYPE_CHECKING:
    from ..models import Collection, Document

__all__ = [
    "ALL_TENANTS",
    "DocumentInfo",
    "QueryScope",
    "Record",
    "SearchRequest",
    "SourceState",
    "StoredDocument",
    "TermWeights",
    "VectorStore",
    "check_delete_args",
    "diff_chunks",
    "get_store",
]


class _AllTenants:
    def __repr__(self) -> str:
        return "ALL_TENANTS"


# ``delete(..., tenant=ALL_TENANTS)``: every tenant's documents (a registered row moving tenant).
ALL_TENANTS: Any = _AllTenants()


@dataclass
class DocumentInfo:
    """What a store records about a document besides its chunks. ``(tenant, source_id)`` is its key."""

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
    # An indexed document's note for operators (``status_reason``): "ocr" when OCR read its text.
    status_reason: str = ""


@dataclass
class Record:
    """A document that is not indexed, with why: what ``record_many`` writes."""

    info: DocumentInfo
    status: str  # "skipped" | "failed" | "pending"
    reason: str = ""
    error: str = ""


@dataclass(frozen=True)
class SourceState:
    """What a store holds about one document, for mirroring a folder: is it there, is it current."""

    source_id: str
    source: str
    content_hash: str
    status: str


@dataclass
class StoredDocument:
    """A document as stored: its description and its chunks in one embedding space (for re-embedding)."""

    info: DocumentInfo
    space: str
    chunks: list[ChunkData]
    key: Any = None  # the store's own key of the document (its row id), for resuming a walk


@dataclass
class QueryScope:
    """Filters every search leg applies. ``tags`` match on overlap (``[]``: nothing); ``filters`` on
    metadata equality."""

    tenant: str | None = None
    tags: Sequence[str] | None = None
    filters: dict[str, Any] | None = None
    source_prefix: str | None = None
    min_score: float | None = None


@dataclass
class SearchRequest:
    """One validated search as a store runs it (``django_rag.search`` builds and checks it)."""

    mode: str
    k: int
    space: str
    text: str = ""
    vector: Sequence[float] | None = None
    scope: QueryScope = field(default_factory=QueryScope)
    candidates: int = 50
    rrf_k: int = 60
    weights: tuple[float, float] = (1.0, 1.0)
    syntax: str = "plain"
    ef_search: int = 40
    snippets: bool = True


@dataclass
class TermWeights:
    """How BM25 scored some chunks: the query's terms, and each chunk's weight per matched term.

    ``weights[chunk_id][term]`` summed over a chunk's terms is its text-leg BM25 score.
    """

    terms: list[str] = field(default_factory=list)
    weights: dict[int, dict[str, float]] = field(default_factory=dict)


@runtime_checkable
class VectorStore(Protocol):
    """Documents and their embedded chunks: upsert, search, delete, and the bookkeeping around them."""

    using: str

    def upsert_many(
        self, collection: Collection, items: Sequence[tuple[DocumentInfo, Sequence[ChunkData]]], *, space: str
    ) -> SyncResult:
        """Make each document's chunks (embedded) exactly ``chunks`` in ``space``, in one transaction
        where the backend has them; unchanged hashes keep their rows. Marks the documents indexed."""
        ...

    def vectors_for(
        self, collection: Collection, space: str, hashes: Sequence[str], *, tenant: str
    ) -> dict[str, list[float]]:
        """Vectors already stored for these chunk texts in ``space``, within one collection and
        tenant (reuse never tells a tenant what another one stored)."""
        ...

    def search(self, collection: Collection, request: SearchRequest) -> list[Hit]:
        """The ``request.k`` best chunks, best first."""
        ...

    def delete(
        self,
        collection: Collection,
        *,
        source_id: str | None = None,
        prefix: str | None = None,
        tenant: str = "",
        keep: Container[tuple[str, str]] = (),
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Delete one document (exact ``source_id``) or all under ``prefix`` in ``tenant``
        (``ALL_TENANTS``: in any tenant), except the ``(tenant, source_id)`` pairs in ``keep``.

        Any number of documents: a backend with transactions commits them in batches (each
        document atomically) and calls ``progress(n)`` after each with the documents it removed.
        """
        ...

    def delete_many(
        self,
        collection: Collection,
        source_ids: Iterable[str],
        *,
        tenant: str = "",
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Delete ``tenant``'s documents of these source ids (any number, batched like ``delete``)."""
        ...

    def delete_collection(
        self, collection: Collection, *, progress: Callable[[int], None] | None = None
    ) -> int:
        """Delete every document of ``collection`` (batched like ``delete``), then the collection.
        Returns the number of documents deleted."""
        ...

    def record(
        self,
        collection: Collection,
        info: DocumentInfo,
        *,
        status: str,
        reason: str = "",
        error: str = "",
        drop_chunks: bool,
    ) -> Document | None:
        """Record a document that is not (or no longer) indexed: skipped (``drop_chunks``: its old
        chunks go) or failed (its old chunks stay searchable). Returns the ORM row if there is one."""
        ...

    def record_many(self, collection: Collection, records: Sequence[Record]) -> int:
        """``record`` for many documents in one transaction: a skipped record drops the document's
        chunks, a failed one keeps them. Returns how many were written."""
        ...

    def sources(self, collection: Collection, *, tenant: str, prefix: str | None = None) -> list[SourceState]:
        """The documents of ``tenant`` (under ``prefix``, or all), sorted by source id."""
        ...

    def document(
        self, collection: Collection, source_id: str, *, tenant: str | None = None
    ) -> Document | None:
        """The stored ``Document`` row (any tenant when ``tenant`` is None); None without a row."""
        ...

    def mark_pending(self, collection: Collection, source_ids: Sequence[str]) -> int:
        """Flag existing documents as waiting for ingestion (a task was enqueued)."""
        ...

    def rescope(self, collection: Collection, *, prefix: str, tenant: str, tags: Sequence[str]) -> int:
        """Move every document under ``prefix`` (any tenant) and its chunks to ``tenant`` and ``tags``
        at once, without re-embedding; returns how many documents changed. A document the target
        tenant already holds under the same source id is replaced."""
        ...

    def source_ids(self, collection: Collection, *, prefix: str) -> list[tuple[str, str]]:
        """``(tenant, source_id)`` of every document under ``prefix``."""
        ...

    def locked(self, collection: Collection, keys: Sequence[tuple[str, str]]) -> AbstractContextManager[None]:
        """A transaction holding the write locks of these ``(tenant, source_id)`` documents."""
        ...

    def missing_from_space(
        self, collection: Collection, space: str, source_space: str, *, after: Any = None, limit: int
    ) -> list[StoredDocument]:
        """Up to ``limit`` documents (by key, after ``after``) that hold chunks but none in ``space``,
        each with its chunks of ``source_space`` (else of the space written last): an embedder
        switch's work left, read from what the target space holds, so a restart resumes."""
        ...

    def holding_space(
        self, collection: Collection, keys: Sequence[tuple[str, str]], space: str
    ) -> set[tuple[str, str]]:
        """Which of these ``(tenant, source_id)`` documents already hold chunks in ``space``."""
        ...

    def space_counts(self, collection: Collection) -> dict[str, tuple[int, int]]:
        """``{space: (chunks, documents)}`` of the collection."""
        ...

    def drop_space(self, collection: Collection, space: str, *, batch_size: int = 5000) -> int:
        """Delete the collection's chunks of ``space``, ``batch_size`` per transaction; returns how many."""
        ...

    def embeddings(self, hits: Sequence[Hit]) -> list[list[float] | None]:
        """Each hit's chunk embedding (search leaves them out of hits), None for a vanished chunk."""
        ...

    def siblings(self, collection: Collection, hits: Sequence[Hit], *, space: str) -> list[list[ChunkData]]:
        """For each hit, every chunk of its document in ``space`` (index order; no embeddings): the
        material of a parent-document search. Hits of one document share one list; [] for a
        vanished chunk."""
        ...

    def check_space(self, collection: Collection, space: str) -> None:
        """Raise ``ConfigurationError`` when the collection holds vectors of other spaces only."""
        ...

    def term_weights(
        self, collection: Collection, space: str, text: str, chunk_ids: Sequence[int]
    ) -> TermWeights:
        """The BM25 contribution of each query term to each of these chunks (for explaining a rank);
        empty for a store without text search."""
        ...


def check_delete_args(source_id: str | None, prefix: str | None) -> None:
    if (source_id is None) == (prefix is None):
        raise QueryError("pass exactly one of source_id= or prefix=")
    if source_id is not None and not isinstance(source_id, str):
        raise QueryError(f"source_id must be a string, got {type(source_id).__name__}")
    if prefix is not None:
        check_prefix(prefix)


def check_tenant(tenant: Any) -> None:
    if tenant is not ALL_TENANTS and not isinstance(tenant, str):
        raise QueryError(f"tenant must be a string, got {type(tenant).__name__}")


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


def plan_rescope(
    rows: Sequence[tuple[Any, str, str, Sequence[str]]], tenant: str, tags: Sequence[str]
) -> tuple[list[Any], list[Any]]:
    """For ``rescope``: which ``(key, tenant, source_id, tags)`` rows move and which are replaced.

    Per source id, one copy ends in ``tenant`` with ``tags``: the copy from another tenant with the
    highest key (the latest written) moves there and replaces the target tenant's own copy and any
    other one; with no copy elsewhere, the target tenant's copy is updated if its tags differ.
    """
    by_source: dict[str, list[tuple[Any, str, Sequence[str]]]] = {}
    for key, row_tenant, source_id, row_tags in rows:
        by_source.setdefault(source_id, []).append((key, row_tenant, row_tags))
    moving: list[Any] = []
    replaced: list[Any] = []
    for copies in by_source.values():
        incoming = sorted((c for c in copies if c[1] != tenant), key=lambda c: c[0])
        resident = [c for c in copies if c[1] == tenant]
        if incoming:
            moving.append(incoming[-1][0])
            replaced += [c[0] for c in incoming[:-1] + resident]
        else:
            moving += [key for key, _, row_tags in resident if sorted(row_tags) != list(tags)]
    return moving, replaced


def last_wins(
    items: Sequence[tuple[DocumentInfo, Sequence[ChunkData]]],
) -> list[tuple[DocumentInfo, Sequence[ChunkData]]]:
    """One entry per document: a batch naming a document twice syncs it to its last version."""
    return list({(doc.tenant, doc.source_id): (doc, chunks) for doc, chunks in items}.values())


@functools.cache
def _cached_store(backend: str, using: str) -> VectorStore:
    try:
        cls = import_string(backend)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import RAG['STORE'] backend {backend!r}: {exc}") from exc
    store: VectorStore = cls(using=using)
    return store


on_rag_change(_cached_store.cache_clear)


def get_store(using: str | None = None) -> VectorStore:
    """The store named by ``RAG["STORE"]`` (the pgvector ORM store by default) for database ``using``."""
    return _cached_store(rag_settings.STORE, using or rag_settings.DATABASE)
