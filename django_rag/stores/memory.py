"""A store in process memory: for code and tests that have no database. Not shared between processes."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..exceptions import ConfigurationError, QueryError
from ..types import ChunkData, Hit, SyncResult
from .base import DocumentInfo, QueryScope, check_delete_args, diff_chunks, prefix_matches

__all__ = ["MemoryStore"]


@dataclass
class _Stored:
    document: DocumentInfo
    chunks: dict[str, list[ChunkData]]  # space -> chunks in index order


class MemoryStore:
    """Same contract as the pgvector store, brute-force cosine search.

    Collections are keyed by name: callers may pass the name or the Collection row (its str).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, _Stored]] = {}

    def upsert(
        self, collection: str, document: DocumentInfo, chunks: Sequence[ChunkData], *, space: str
    ) -> SyncResult:
        with self._lock:
            docs = self._data.setdefault(str(collection), {})
            stored = docs.get(document.source_id)
            previous = stored.chunks.get(space, []) if stored else []
            kept, added, removed = diff_chunks([(i, c.content_hash) for i, c in enumerate(previous)], chunks)
            chunk_map = stored.chunks if stored else {}
            chunk_map[space] = sorted((replace(c) for c in chunks), key=lambda c: c.index)
            docs[document.source_id] = _Stored(document=document, chunks=chunk_map)
            return SyncResult(added=len(added), removed=len(removed), unchanged=len(kept), documents=1)

    def upsert_many(
        self, collection: str, items: Sequence[tuple[DocumentInfo, Sequence[ChunkData]]], *, space: str
    ) -> SyncResult:
        result = SyncResult()
        for document, chunks in items:
            result += self.upsert(collection, document, chunks, space=space)
        return result

    def vectors_for(self, space: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        wanted = set(hashes)
        found: dict[str, list[float]] = {}
        with self._lock:
            for docs in self._data.values():
                for stored in docs.values():
                    for chunk in stored.chunks.get(space, []):
                        if chunk.content_hash in wanted and chunk.embedding is not None:
                            found[chunk.content_hash] = chunk.embedding
        return found

    def query(
        self, collection: str, vector: Sequence[float], k: int, *, space: str, scope: QueryScope | None = None
    ) -> list[Hit]:
        scope = scope or QueryScope()
        scored: list[tuple[float, ChunkData, DocumentInfo]] = []
        with self._lock:
            for stored in self._data.get(str(collection), {}).values():
                doc = stored.document
                if not _in_scope(doc, scope):
                    continue
                for chunk in stored.chunks.get(space, []):
                    if scope.filters and any(chunk.metadata.get(k) != v for k, v in scope.filters.items()):
                        continue
                    score = _cosine(vector, chunk.embedding or [])
                    if scope.min_score is None or score >= scope.min_score:
                        scored.append((score, chunk, doc))
        if not scored:
            self._check_space(collection, space)
        scored.sort(key=lambda item: -item[0])
        return [
            Hit(
                chunk=chunk,
                document=None,
                score=score,
                vector_rank=rank,
                page=chunk.page,
                source_id=doc.source_id,
            )
            for rank, (score, chunk, doc) in enumerate(scored[:k], start=1)
        ]

    def search(
        self,
        collection: str,
        *,
        mode: str,
        k: int,
        space: str,
        text: str = "",
        vector: Sequence[float] | None = None,
        scope: QueryScope | None = None,
        **options: object,
    ) -> list[Hit]:
        if mode != "vector" or vector is None:
            raise QueryError(f"the memory store supports vector search only, not mode={mode!r}")
        return self.query(collection, vector, k, space=space, scope=scope)

    def _check_space(self, collection: str, space: str) -> None:
        spaces = {
            s for stored in self._data.get(collection, {}).values() for s, c in stored.chunks.items() if c
        }
        if spaces and space not in spaces:
            raise ConfigurationError(
                f"collection {collection!r} is searched in space {space} but the store holds vectors of "
                f"{', '.join(sorted(spaces))} for it; run `manage.py rag_reindex {collection}`"
            )

    def delete(self, collection: str, *, source_id: str | None = None, prefix: str | None = None) -> int:
        check_delete_args(source_id, prefix)
        with self._lock:
            docs = self._data.get(str(collection), {})
            if source_id is not None:
                return 1 if docs.pop(source_id, None) else 0
            doomed = [sid for sid in docs if prefix_matches(sid, prefix or "")]
            for sid in doomed:
                del docs[sid]
            return len(doomed)


def _in_scope(doc: DocumentInfo, scope: QueryScope) -> bool:
    if scope.tenant is not None and doc.tenant != scope.tenant:
        return False
    if scope.tags and not set(scope.tags) & set(doc.tags):
        return False
    return not (scope.source_prefix and not prefix_matches(doc.source_id, scope.source_prefix))


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
