"""The ORM store: Document and Chunk rows in PostgreSQL, vectors in a pgvector column.

Writes run under a transaction-scoped advisory lock on (collection, source_id), so two syncs
of one document serialize while different documents ingest in parallel. New chunk rows go
in with one ``INSERT ... SELECT FROM unnest(...)`` whose vectors travel in pgvector's binary
format: one round trip per document, never one per row.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
from django.contrib.contenttypes.models import ContentType
from django.db import connections, transaction
from pgvector import Vector
from pgvector.psycopg.vector import register_vector_info
from psycopg.types import TypeInfo
from psycopg.types.json import Jsonb

from ..conf import rag_settings
from ..dberrors import translate_db_errors
from ..exceptions import ConfigurationError
from ..models import Chunk, Collection, Document
from ..types import ChunkData, Hit, SyncResult
from .base import PREFIX_SEPARATORS, DocumentInfo, QueryScope, check_delete_args, diff_chunks

__all__ = ["PgVectorStore", "escape_like", "prefix_q"]

_vector_info: weakref.WeakKeyDictionary[psycopg.Connection[Any], TypeInfo] = weakref.WeakKeyDictionary()

_INSERT_CHUNKS = """
INSERT INTO django_rag_chunk
    (document_id, collection_id, tenant, tags, space, "index", content, content_hash, token_count,
     page, char_start, char_end, metadata, embedding, search_vector)
SELECT %(document)s, %(collection)s, %(tenant)s, %(tags)s, %(space)s, c.idx, c.content, c.hash, c.tokens,
       c.page, c.cstart, c.cend, c.meta, c.embedding, to_tsvector(%(config)s::regconfig, c.content)
FROM unnest(%(idx)s::int4[], %(content)s::text[], %(hash)s::text[], %(tokens)s::int4[], %(page)s::int4[],
            %(cstart)s::int4[], %(cend)s::int4[], %(meta)s::jsonb[], %(embedding)s::vector[])
     AS c(idx, content, hash, tokens, page, cstart, cend, meta, embedding)
"""

_UPDATE_KEPT = """
UPDATE django_rag_chunk AS t
SET "index" = c.idx, page = c.page, char_start = c.cstart, char_end = c.cend, token_count = c.tokens,
    metadata = c.meta
FROM unnest(%(id)s::int8[], %(idx)s::int4[], %(page)s::int4[], %(cstart)s::int4[], %(cend)s::int4[],
            %(tokens)s::int4[], %(meta)s::jsonb[]) AS c(id, idx, page, cstart, cend, tokens, meta)
WHERE t.id = c.id
  AND (t."index", t.page, t.char_start, t.char_end, t.token_count, t.metadata)
      IS DISTINCT FROM (c.idx, c.page, c.cstart, c.cend, c.tokens, c.meta)
"""


def escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def prefix_q(field: str, prefix: str) -> Any:
    """A Q object matching ``prefix`` by whole segments (see ``prefix_matches``); wildcards are literal."""
    from django.db.models import Q

    # Django's startswith escapes %, _ and \ itself; the separators keep "docs" from matching "docs2".
    if prefix.endswith(PREFIX_SEPARATORS):
        return Q(**{f"{field}__startswith": prefix})
    q = Q(**{field: prefix})
    for sep in PREFIX_SEPARATORS:
        q |= Q(**{f"{field}__startswith": prefix + sep})
    return q


class PgVectorStore:
    """Document and Chunk rows through the Django ORM (raw SQL only for the bulk statements)."""

    @property
    def using(self) -> str:
        return rag_settings.DATABASE

    def upsert(self, collection: str, document: DocumentInfo, chunks: Sequence[ChunkData], *,
               space: str) -> SyncResult:
        for chunk in chunks:
            if chunk.embedding is None:
                raise ConfigurationError(f"chunk {chunk.index} of {document.source_id!r} has no embedding")
        with translate_db_errors(self.using), transaction.atomic(using=self.using):
            coll = _collection(collection, self.using)
            with connections[self.using].cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))",
                               [document.source_id, coll.pk])
            doc = self._save_document(coll, document)
            existing = list(
                Chunk.objects.using(self.using).filter(document=doc, space=space).values_list("id", "content_hash")
            )
            kept, added, removed = diff_chunks(existing, chunks)
            if removed:
                Chunk.objects.using(self.using).filter(id__in=removed).delete()
            # Denormalised scope columns follow the document even on chunks whose text did not change.
            Chunk.objects.using(self.using).filter(document=doc).exclude(
                tenant=doc.tenant, tags=doc.tags).update(tenant=doc.tenant, tags=doc.tags)
            raw = _raw_connection(self.using)
            with psycopg.Cursor(raw) as cur:
                register_vector_info(cur, _vector_type(raw))
                if kept:
                    cur.execute(_UPDATE_KEPT, {
                        "id": [key for key, _ in kept],
                        **_columns([chunk for _, chunk in kept], with_text=False),
                    })
                if added:
                    cur.execute(_INSERT_CHUNKS, {
                        "document": doc.pk, "collection": coll.pk, "tenant": doc.tenant, "tags": doc.tags,
                        "space": space, "config": coll.text_config, **_columns(added, with_text=True),
                    })
        return SyncResult(added=len(added), removed=len(removed), unchanged=len(kept), documents=1)

    def _save_document(self, coll: Collection, info: DocumentInfo) -> Document:
        owner_type, owner_id = None, None
        if info.owner is not None:
            owner_type = ContentType.objects.db_manager(self.using).get_for_model(info.owner)
            owner_id = str(info.owner.pk)
        doc, _ = Document.objects.using(self.using).update_or_create(
            collection=coll, source_id=info.source_id,
            defaults={
                "title": info.title[:1024], "source": info.source, "content_type": info.content_type,
                "loader": info.loader, "metadata": info.metadata, "tags": list(info.tags),
                "tenant": info.tenant, "content_hash": info.content_hash, "page_count": info.page_count,
                "owner_type": owner_type, "owner_id": owner_id,
                "status": Document.Status.INDEXED, "status_reason": "", "error": "",
            },
        )
        return doc

    def vectors_for(self, space: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        if not hashes:
            return {}
        with translate_db_errors(self.using):
            raw = _raw_connection(self.using)
            with psycopg.Cursor(raw) as cur:
                register_vector_info(cur, _vector_type(raw))
                cur.execute(
                    "SELECT DISTINCT ON (content_hash) content_hash, embedding FROM django_rag_chunk "
                    "WHERE space = %s AND content_hash = ANY(%s)",
                    [space, list(set(hashes))], binary=True,
                )
                return {row[0]: row[1].to_list() for row in cur.fetchall()}

    def query(self, collection: str, vector: Sequence[float], k: int, *, space: str,
              scope: QueryScope | None = None) -> list[Hit]:
        with translate_db_errors(self.using):
            coll = _collection(collection, self.using)
            qs = self.scoped(Chunk.objects.using(self.using).filter(collection=coll), scope)
            qs = qs.nearest(vector, k, space=space)
            if scope and scope.min_score is not None:
                qs = qs.filter(score__gte=scope.min_score)
            chunks = list(qs.select_related("document"))
            if not chunks:
                _check_space(coll, space, self.using)
        return [
            Hit(chunk=chunk, document=chunk.document, score=float(chunk.score), vector_rank=rank,
                page=chunk.page, source_id=chunk.document.source_id)
            for rank, chunk in enumerate(chunks, start=1)
        ]

    @staticmethod
    def scoped(qs: Any, scope: QueryScope | None) -> Any:
        """Apply a QueryScope to a Chunk QuerySet (tenant, tags overlap, metadata, source prefix)."""
        if scope is None:
            return qs
        if scope.tenant is not None:
            qs = qs.filter(tenant=scope.tenant)
        if scope.tags:
            qs = qs.filter(tags__overlap=list(scope.tags))
        if scope.filters:
            qs = qs.filter(metadata__contains=scope.filters)
        if scope.source_prefix:
            qs = qs.filter(prefix_q("document__source_id", scope.source_prefix))
        return qs

    def delete(self, collection: str, *, source_id: str | None = None, prefix: str | None = None) -> int:
        check_delete_args(source_id, prefix)
        with translate_db_errors(self.using), transaction.atomic(using=self.using):
            coll = _collection(collection, self.using)
            docs = Document.objects.using(self.using).filter(collection=coll)
            docs = docs.filter(source_id=source_id) if source_id is not None else docs.filter(
                prefix_q("source_id", prefix or ""))
            # Chunks first in one statement, so the cascade does not walk them row by row.
            Chunk.objects.using(self.using).filter(document__in=docs.values("pk")).delete()
            return docs.delete()[1].get(Document._meta.label, 0)


def _collection(name: str, using: str) -> Collection:
    from ..api import collection

    return collection(name, using=using)


def _check_space(coll: Collection, space: str, using: str) -> None:
    """An empty result because the collection holds another space's vectors is a configuration error."""
    chunks = Chunk.objects.using(using).filter(collection=coll)
    if chunks.filter(space=space).exists():
        return
    other = chunks.exclude(space=space).values_list("space", flat=True).first()
    if other is not None:
        held = other.rpartition(":")[2]
        raise ConfigurationError(
            f"collection {coll.name!r} uses embedder {coll.embedder!r} ({space}, {space.rpartition(':')[2]} dims) "
            f"but the store holds {held}-dim vectors of {other} for it; run `manage.py rag_reindex {coll.name}`"
        )


def _columns(chunks: Sequence[ChunkData], *, with_text: bool) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {
        "idx": [c.index for c in chunks],
        "page": [c.page for c in chunks],
        "cstart": [c.char_start for c in chunks],
        "cend": [c.char_end for c in chunks],
        "tokens": [c.token_count for c in chunks],
        "meta": [Jsonb(c.metadata) for c in chunks],
    }
    if with_text:
        columns["content"] = [c.content for c in chunks]
        columns["hash"] = [c.content_hash for c in chunks]
        columns["embedding"] = [Vector(c.embedding) for c in chunks]
    return columns


def _raw_connection(using: str) -> psycopg.Connection[Any]:
    wrapper = connections[using]
    wrapper.ensure_connection()
    return wrapper.connection


def _vector_type(conn: psycopg.Connection[Any]) -> TypeInfo:
    info = _vector_info.get(conn)
    if info is None:
        info = TypeInfo.fetch(conn, "vector")
        if info is None:
            raise ConfigurationError(
                "the pgvector extension is not installed in this database; run `manage.py migrate django_rag` "
                "(it runs CREATE EXTENSION vector) or ask a superuser to run CREATE EXTENSION vector"
            )
        _vector_info[conn] = info
    return info
