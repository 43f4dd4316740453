"""A store in process memory: for code and tests that have no database. Not shared between processes.

Same contract as the pgvector store, brute-force cosine search, vector mode only. Collections
are keyed by name, documents by ``(tenant, source_id)``; there are no ``Document`` rows, so
``record`` and ``document`` return None.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Collection as Container
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..conf import rag_settings
from ..exceptions import ConfigurationError, QueryError
from ..models import Document
from ..sql import prefix_matches
from ..types import ChunkData, Hit, SyncResult
from .base import (
    ALL_TENANTS,
    DocumentInfo,
    QueryScope,
    Record,
    SearchRequest,
    SourceState,
    StoredDocument,
    TermWeights,
    check_delete_args,
    check_tenant,
    diff_chunks,
    last_wins,
    plan_rescope,
)

if TYPE_CHECKING:
    from ..models import Collection

__all__ = ["MemoryStore"]

Key = tuple[str, str]  # (tenant, source_id)


@dataclass
class _Stored:
    document: DocumentInfo
    chunks: dict[str, list[ChunkData]]  # space -> chunks in index order
    status: str = Document.Status.INDEXED


class MemoryStore:
    """Documents and chunks in a dict, guarded by a lock."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using or rag_settings.DATABASE
        self._lock = threading.RLock()
        self._data: dict[str, dict[Key, _Stored]] = {}

    def _docs(self, collection: Collection) -> dict[Key, _Stored]:
        return self._data.setdefault(collection.name, {})

    def upsert_many(
        self, collection: Collection, items: Sequence[tuple[DocumentInfo, Sequence[ChunkData]]], *, space: str
    ) -> SyncResult:
        result = SyncResult()
        with self._lock:
            docs = self._docs(collection)
            for document, chunks in last_wins(items):
                key = (document.tenant, document.source_id)
                stored = docs.get(key)
                previous = stored.chunks.get(space, []) if stored else []
                kept, added, removed = diff_chunks(
                    [(i, c.content_hash) for i, c in enumerate(previous)], chunks
                )
                chunk_map = stored.chunks if stored else {}
                chunk_map[space] = sorted((replace(c) for c in chunks), key=lambda c: c.index)
                docs[key] = _Stored(document=document, chunks=chunk_map)
                result += SyncResult(added=len(added), removed=len(removed), unchanged=len(kept), documents=1)
        return result

    def vectors_for(
        self, collection: Collection, space: str, hashes: Sequence[str], *, tenant: str
    ) -> dict[str, list[float]]:
        wanted = set(hashes)
        found: dict[str, list[float]] = {}
        with self._lock:
            for (doc_tenant, _), stored in self._docs(collection).items():
                if doc_tenant != tenant:
                    continue
                for chunk in stored.chunks.get(space, []):
                    if chunk.content_hash in wanted and chunk.embedding is not None:
                        found[chunk.content_hash] = chunk.embedding
        return found

    def search(self, collection: Collection, request: SearchRequest) -> list[Hit]:
        if request.mode != "vector" or request.vector is None:
            raise QueryError(f"the memory store supports vector search only, not mode={request.mode!r}")
        scope = request.scope
        scored: list[tuple[float, ChunkData, DocumentInfo]] = []
        with self._lock:
            for stored in self._docs(collection).values():
                doc = stored.document
                if stored.status != Document.Status.INDEXED or not _in_scope(doc, scope):
                    continue
                for chunk in stored.chunks.get(request.space, []):
                    if scope.filters and not _matches(chunk.metadata, scope.filters):
                        continue
                    score = _cosine(request.vector, chunk.embedding or [])
                    if scope.min_score is None or score >= scope.min_score:
                        scored.append((score, chunk, doc))
        if not scored:
            self.check_space(collection, request.space)
        scored.sort(key=lambda item: -item[0])
        return [
            Hit(
                chunk=chunk,
                document=None,
                score=score,
                vector_rank=rank,
                page=chunk.page,
                source_id=doc.source_id,
                similarity=score,
            )
            for rank, (score, chunk, doc) in enumerate(scored[: request.k], start=1)
        ]

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
        check_delete_args(source_id, prefix)
        check_tenant(tenant)
        with self._lock:
            docs = self._docs(collection)
            doomed = [
                key
                for key in docs
                if (tenant is ALL_TENANTS or key[0] == tenant)
                and (key[1] == source_id if source_id is not None else prefix_matches(key[1], prefix or ""))
                and key not in keep
            ]
            return self._drop(docs, doomed, progress)

    def delete_many(
        self,
        collection: Collection,
        source_ids: Iterable[str],
        *,
        tenant: str = "",
        progress: Callable[[int], None] | None = None,
    ) -> int:
        check_tenant(tenant)
        with self._lock:
            docs = self._docs(collection)
            return self._drop(docs, [(tenant, s) for s in set(source_ids) if (tenant, s) in docs], progress)

    def delete_collection(
        self, collection: Collection, *, progress: Callable[[int], None] | None = None
    ) -> int:
        with self._lock:
            docs = self._data.pop(collection.name, {})
        if progress is not None and docs:
            progress(len(docs))
        return len(docs)

    @staticmethod
    def _drop(docs: dict[Key, _Stored], doomed: list[Key], progress: Callable[[int], None] | None) -> int:
        for key in doomed:
            del docs[key]
        if progress is not None and doomed:
            progress(len(doomed))  # in one step: nothing here has transactions to keep small
        return len(doomed)

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
        with self._lock:
            docs = self._docs(collection)
            key = (info.tenant, info.source_id)
            stored = docs.get(key)
            if stored is None or drop_chunks:
                docs[key] = _Stored(document=info, chunks={}, status=status)
            # A failure keeps the stored version (and its status) searchable, as the ORM store does.
        return None

    def record_many(self, collection: Collection, records: Sequence[Record]) -> int:
        last = list({(r.info.tenant, r.info.source_id): r for r in records}.values())
        for r in last:
            self.record(
                collection,
                r.info,
                status=r.status,
                reason=r.reason,
                error=r.error,
                drop_chunks=r.status != "failed",
            )
        return len(last)

    def sources(self, collection: Collection, *, tenant: str, prefix: str | None = None) -> list[SourceState]:
        with self._lock:
            found = [
                SourceState(key[1], stored.document.source, stored.document.content_hash, stored.status)
                for key, stored in self._docs(collection).items()
                if key[0] == tenant and (prefix is None or prefix_matches(key[1], prefix))
            ]
        return sorted(found, key=lambda state: state.source_id)

    def document(
        self, collection: Collection, source_id: str, *, tenant: str | None = None
    ) -> Document | None:
        return None

    def mark_pending(self, collection: Collection, source_ids: Sequence[str]) -> int:
        return 0

    def rescope(self, collection: Collection, *, prefix: str, tenant: str, tags: Sequence[str]) -> int:
        tags = sorted(set(tags))
        with self._lock:
            docs = self._docs(collection)
            keys = [key for key in docs if prefix_matches(key[1], prefix)]
            order = {key: number for number, key in enumerate(docs)}  # insertion order: latest last
            rows = [(order[key], key[0], key[1], docs[key].document.tags) for key in keys]
            moving, replaced = plan_rescope(rows, tenant, tags)
            by_order = {order[key]: key for key in keys}
            moved = [(by_order[n], docs[by_order[n]]) for n in moving]
            for n in [*moving, *replaced]:
                docs.pop(by_order[n])
            for key, stored in moved:
                stored.document = replace(stored.document, tenant=tenant, tags=list(tags))
                docs[(tenant, key[1])] = stored
        return len(moving)

    def source_ids(self, collection: Collection, *, prefix: str) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(
                (key for key in self._docs(collection) if prefix_matches(key[1], prefix)),
                key=lambda key: (key[1], key[0]),
            )

    @contextmanager
    def locked(self, collection: Collection, keys: Sequence[tuple[str, str]]) -> Iterator[None]:
        with self._lock:
            yield

    def missing_from_space(
        self, collection: Collection, space: str, source_space: str, *, after: Any = None, limit: int
    ) -> list[StoredDocument]:
        with self._lock:
            keys = sorted(
                key
                for key, stored in self._docs(collection).items()
                if space not in stored.chunks and any(stored.chunks.values())
            )
            found = []
            for key in keys:
                if after is not None and key <= after:
                    continue
                stored = self._docs(collection)[key]
                source = source_space if stored.chunks.get(source_space) else next(iter(stored.chunks))
                chunks = [replace(c, embedding=None) for c in stored.chunks[source]]
                found.append(StoredDocument(stored.document, source, chunks, key))
                if len(found) >= limit:
                    break
        return found

    def holding_space(
        self, collection: Collection, keys: Sequence[tuple[str, str]], space: str
    ) -> set[tuple[str, str]]:
        with self._lock:
            docs = self._docs(collection)
            return {key for key in keys if key in docs and space in docs[key].chunks}

    def space_counts(self, collection: Collection) -> dict[str, tuple[int, int]]:
        counts: dict[str, tuple[int, int]] = {}
        with self._lock:
            for stored in self._docs(collection).values():
                for space, chunks in stored.chunks.items():
                    held, documents = counts.get(space, (0, 0))
                    counts[space] = (held + len(chunks), documents + 1)
        return dict(sorted(counts.items()))

    def drop_space(self, collection: Collection, space: str, *, batch_size: int = 5000) -> int:
        dropped = 0
        with self._lock:
            for stored in self._docs(collection).values():
                dropped += len(stored.chunks.pop(space, []))
        return dropped

    def embeddings(self, hits: Sequence[Hit]) -> list[list[float] | None]:
        return [getattr(hit.chunk, "embedding", None) for hit in hits]

    def siblings(self, collection: Collection, hits: Sequence[Hit], *, space: str) -> list[list[ChunkData]]:
        # A memory hit holds the stored chunk itself: its document is the one whose list holds it.
        with self._lock:
            families = [stored.chunks.get(space, []) for stored in self._docs(collection).values()]
            owner = {id(chunk): family for family in families for chunk in family}
        return [owner.get(id(hit.chunk), []) for hit in hits]

    def check_space(self, collection: Collection, space: str) -> None:
        with self._lock:
            spaces = {s for stored in self._docs(collection).values() for s, c in stored.chunks.items() if c}
        if spaces and space not in spaces:
            raise ConfigurationError(
                f"collection {collection.name!r} is searched in space {space} but the store holds vectors of "
                f"{', '.join(sorted(spaces))} for it; run `manage.py rag_reindex {collection.name}`"
            )

    def term_weights(
        self, collection: Collection, space: str, text: str, chunk_ids: Sequence[int]
    ) -> TermWeights:
        return TermWeights()  # vector search only: no term ever contributes


def _in_scope(doc: DocumentInfo, scope: QueryScope) -> bool:
    if scope.tenant is not None and doc.tenant != scope.tenant:
        return False
    if scope.tags is not None and not set(scope.tags) & set(doc.tags):
        return False
    return not (scope.source_prefix and not prefix_matches(doc.source_id, scope.source_prefix))


def _matches(metadata: dict[str, Any], filters: dict[str, Any]) -> bool:
    """Metadata equality as jsonb compares: the key present, true is not 1, a tuple is a list."""
    return all(key in metadata and _same_json(metadata[key], value) for key, value in filters.items())


def _same_json(stored: Any, wanted: Any) -> bool:
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return isinstance(stored, bool) and isinstance(wanted, bool) and stored == wanted
    if isinstance(wanted, dict):
        return (
            isinstance(stored, dict)
            and stored.keys() == wanted.keys()
            and all(_same_json(stored[key], wanted[key]) for key in wanted)
        )
    if isinstance(wanted, list | tuple):
        return (
            isinstance(stored, list | tuple)
            and len(stored) == len(wanted)
            and all(_same_json(a, b) for a, b in zip(stored, wanted, strict=True))
        )
    if isinstance(stored, dict | list | tuple):
        return False
    return bool(stored == wanted)


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
