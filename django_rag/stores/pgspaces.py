"""The ORM store's reads by embedding space: stored vectors, documents to re-embed, space sizes.

What a switch of embedder (``ingest.switch``), relevance (``space_counts``) and MMR
(``embeddings``) read, and ``check_space``, which turns an empty search on the wrong space into
a configuration error. ``SpaceReads`` is a part of ``PgVectorStore``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from django.db import connections, transaction
from django.db.models import Count, Exists, OuterRef, Q
from pgvector.psycopg.vector import register_vector_info

from ..dberrors import translate_db_errors
from ..exceptions import ConfigurationError
from ..models import Chunk, Collection, Document
from ..types import ChunkData, Hit
from .adapters import raw_connection, vector_type
from .base import DocumentInfo, StoredDocument

__all__ = ["SpaceReads"]


class SpaceReads:
    """``vectors_for``, ``missing_from_space``, ``holding_space``, ``space_counts``, ``drop_space``,
    ``embeddings`` and ``check_space`` of ``PgVectorStore``."""

    using: str

    def vectors_for(
        self, collection: Collection, space: str, hashes: Sequence[str], *, tenant: str
    ) -> dict[str, list[float]]:
        if not hashes:
            return {}
        with translate_db_errors(self.using):
            raw = raw_connection(self.using)
            with psycopg.Cursor(raw) as cur:
                register_vector_info(cur, vector_type(raw))  # type: ignore[arg-type]
                cur.execute(
                    "SELECT DISTINCT ON (content_hash) content_hash, embedding FROM django_rag_chunk "
                    "WHERE space = %s AND content_hash = ANY(%s) AND collection_id = %s AND tenant = %s",
                    [space, list(set(hashes)), collection.pk, tenant],
                    binary=True,
                )
                return {row[0]: row[1].to_list() for row in cur.fetchall()}

    def missing_from_space(
        self, collection: Collection, space: str, source_space: str, *, after: Any = None, limit: int
    ) -> list[StoredDocument]:
        chunks = Chunk.objects.using(self.using)
        documents = (
            Document.objects.using(self.using)
            .filter(collection=collection)
            .filter(Exists(chunks.filter(document=OuterRef("pk")).exclude(space=space)))
            .exclude(Exists(chunks.filter(document=OuterRef("pk"), space=space)))
            .order_by("pk")
        )
        if after is not None:
            documents = documents.filter(pk__gt=after)
        batch = list(documents[:limit])
        rows = chunks.filter(document__in=batch).exclude(space=space).defer("embedding", "search_vector")
        by_doc: dict[int, dict[str, list[Chunk]]] = {}
        for row in rows.order_by("document_id", "space", "index"):
            by_doc.setdefault(row.document_id, {}).setdefault(row.space, []).append(row)
        stored = []
        for doc in batch:
            spaces = by_doc.get(doc.pk)
            if not spaces:
                continue  # its chunks went between the two reads
            source = spaces.get(source_space) or max(spaces.values(), key=lambda cs: max(c.pk for c in cs))
            stored.append(
                StoredDocument(_stored_info(doc), source[0].space, [_chunk_data(c) for c in source], doc.pk)
            )
        return stored

    def holding_space(
        self, collection: Collection, keys: Sequence[tuple[str, str]], space: str
    ) -> set[tuple[str, str]]:
        if not keys:
            return set()
        chunks = Chunk.objects.using(self.using).filter(document=OuterRef("pk"), space=space)
        held = (
            Document.objects.using(self.using)
            .filter(collection=collection)
            .filter(_keys_q(keys))
            .filter(Exists(chunks))
            .values_list("tenant", "source_id")
        )
        return set(held)

    def space_counts(self, collection: Collection) -> dict[str, tuple[int, int]]:
        rows = (
            Chunk.objects.using(self.using)
            .filter(collection=collection)
            .values("space")
            .annotate(chunks=Count("id"), documents=Count("document", distinct=True))
            .order_by("space")
        )
        return {row["space"]: (row["chunks"], row["documents"]) for row in rows}

    def drop_space(self, collection: Collection, space: str, *, batch_size: int = 5000) -> int:
        dropped = 0
        while True:
            # A batch per transaction: a large space never holds one long lock or one huge trigger run.
            with (
                translate_db_errors(self.using),
                transaction.atomic(using=self.using),
                connections[self.using].cursor() as cursor,
            ):
                cursor.execute(_DROP_SPACE, [collection.pk, space, batch_size])
                deleted = int(cursor.rowcount)
            dropped += deleted
            if deleted < batch_size:
                return dropped

    def embeddings(self, hits: Sequence[Hit]) -> list[list[float] | None]:
        ids = [hit.chunk.pk for hit in hits if isinstance(hit.chunk, Chunk)]
        found = dict(Chunk.objects.using(self.using).filter(pk__in=ids).values_list("pk", "embedding"))
        vectors: list[list[float] | None] = []
        for hit in hits:
            chunk = hit.chunk
            vector = found.get(chunk.pk) if isinstance(chunk, Chunk) else chunk.embedding
            vectors.append(None if vector is None else [float(x) for x in vector])
        return vectors

    def siblings(self, collection: Collection, hits: Sequence[Hit], *, space: str) -> list[list[ChunkData]]:
        documents = {hit.chunk.document_id for hit in hits if isinstance(hit.chunk, Chunk)}
        rows = (
            Chunk.objects.using(self.using)
            .filter(collection=collection, document_id__in=documents, space=space)
            .order_by("document_id", "index")
            .values_list(
                "document_id", "index", "content", "token_count", "page", "char_start", "char_end", "metadata"
            )
        )
        families: dict[int, list[ChunkData]] = {}
        with translate_db_errors(self.using):
            for document_id, index, content, tokens, page, start, end, metadata in rows:
                families.setdefault(document_id, []).append(
                    ChunkData(index, content, "", tokens, page, start, end, metadata or {})
                )
        # Hits of one document share one list (strategies.to_parents folds them by it).
        return [
            families.get(hit.chunk.document_id, []) if isinstance(hit.chunk, Chunk) else [] for hit in hits
        ]

    def check_space(self, collection: Collection, space: str) -> None:
        """An empty result because the collection holds another space's vectors is a configuration error."""
        chunks = Chunk.objects.using(self.using).filter(collection=collection)
        if chunks.filter(space=space).exists():
            return
        other = chunks.exclude(space=space).values_list("space", flat=True).first()
        if other is not None:
            raise ConfigurationError(
                f"collection {collection.name!r} uses embedder {collection.embedder!r} ({space}, "
                f"{space.rpartition(':')[2]} dims) but the store holds "
                f"{other.rpartition(':')[2]}-dim vectors of {other} for it; "
                f"run `manage.py rag_reindex {collection.name}`"
            )


_DROP_SPACE = """
DELETE FROM django_rag_chunk WHERE id IN (
    SELECT id FROM django_rag_chunk WHERE collection_id = %s AND space = %s LIMIT %s
)
"""


def _keys_q(keys: Sequence[tuple[str, str]]) -> Q:
    q = Q(pk__in=[])
    for tenant, source_id in keys:
        q |= Q(tenant=tenant, source_id=source_id)
    return q


def _stored_info(doc: Document) -> DocumentInfo:
    return DocumentInfo(
        source_id=doc.source_id,
        title=doc.title,
        source=doc.source,
        content_type=doc.content_type,
        loader=doc.loader,
        metadata=doc.metadata,
        tags=list(doc.tags),
        tenant=doc.tenant,
        content_hash=doc.content_hash,
        page_count=doc.page_count,
        owner_type_id=doc.owner_type_id,
        owner_id=doc.owner_id,
    )


def _chunk_data(chunk: Chunk) -> ChunkData:
    return ChunkData(
        index=chunk.index,
        content=chunk.content,
        header=chunk.header,
        content_hash=chunk.content_hash,
        token_count=chunk.token_count,
        page=chunk.page,
        char_start=chunk.char_start,
        char_end=chunk.char_end,
        metadata=chunk.metadata,
    )
