"""The ORM store: Document and Chunk rows in PostgreSQL, vectors in a pgvector column.

Writes run under a transaction-scoped advisory lock on (collection, source_id), so two syncs
of one document serialize while different documents ingest in parallel. New chunk rows go
in with one ``INSERT ... SELECT FROM unnest(...)`` whose array parameters travel in binary
(vectors in pgvector's binary format: no float-to-text conversion), computing ``to_tsvector``
server-side; in a vector-only collection (TEXT_SEARCH off) with one binary COPY. Either way a
fixed number of statements per batch of documents, never one per row.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
from django.contrib.contenttypes.models import ContentType
from django.db import connections, transaction
from pgvector.psycopg.vector import register_vector_info
from psycopg.types import TypeInfo
from psycopg.types.json import Jsonb

from ..conf import rag_settings
from ..dberrors import translate_db_errors
from ..exceptions import ConfigurationError
from ..models import Chunk, Collection, Document
from ..types import ChunkData, Hit, SyncResult
from .adapters import pack, register_packed_vectors
from .base import PREFIX_SEPARATORS, DocumentInfo, QueryScope, check_delete_args, diff_chunks

__all__ = ["PgVectorStore", "escape_like", "lock_documents", "prefix_q"]

_vector_info: weakref.WeakKeyDictionary[psycopg.Connection[Any], TypeInfo] = weakref.WeakKeyDictionary()

_LOCK = """
SELECT count(pg_advisory_xact_lock(hashtextextended(s, %s::bigint)))
FROM (SELECT s FROM unnest(%s::text[]) AS s ORDER BY s) AS ordered
"""

_UPSERT_DOCUMENTS = """
INSERT INTO django_rag_document
    (collection_id, source_id, title, source, content_type, loader, metadata, tags, tenant, owner_type_id,
     owner_id, status, status_reason, error, content_hash, page_count, created_at, updated_at)
SELECT %(collection)s, d.source_id, d.title, d.source, d.content_type, d.loader, d.metadata,
       ARRAY(SELECT jsonb_array_elements_text(d.tags)), d.tenant, d.owner_type, d.owner_id,
       'indexed', '', '', d.content_hash, d.page_count, now(), now()
FROM unnest(%(source_id)b::text[], %(title)b::text[], %(source)b::text[], %(content_type)b::text[],
            %(loader)b::text[], %(metadata)b::jsonb[], %(tags)b::jsonb[], %(tenant)b::text[],
            %(owner_type)b::int4[], %(owner_id)b::text[], %(content_hash)b::text[], %(page_count)b::int4[])
     AS d(source_id, title, source, content_type, loader, metadata, tags, tenant, owner_type, owner_id,
          content_hash, page_count)
ON CONFLICT (collection_id, source_id) DO UPDATE SET
    title = EXCLUDED.title, source = EXCLUDED.source, content_type = EXCLUDED.content_type,
    loader = EXCLUDED.loader, metadata = EXCLUDED.metadata, tags = EXCLUDED.tags, tenant = EXCLUDED.tenant,
    owner_type_id = EXCLUDED.owner_type_id, owner_id = EXCLUDED.owner_id, status = 'indexed',
    status_reason = '', error = '', content_hash = EXCLUDED.content_hash, page_count = EXCLUDED.page_count,
    updated_at = now()
RETURNING source_id, id
"""

_SYNC_SCOPE = """
UPDATE django_rag_chunk AS c SET tenant = d.tenant, tags = d.tags
FROM django_rag_document AS d
WHERE c.document_id = d.id AND d.id = ANY(%s) AND (c.tenant, c.tags) IS DISTINCT FROM (d.tenant, d.tags)
"""

_INSERT_CHUNKS = """
INSERT INTO django_rag_chunk
    (document_id, collection_id, tenant, tags, space, "index", content, content_hash, token_count,
     page, char_start, char_end, metadata, embedding, search_vector)
SELECT c.doc, %(collection)s, d.tenant, d.tags, %(space)s, c.idx, c.content, c.hash, c.tokens,
       c.page, c.cstart, c.cend, c.meta, c.embedding, to_tsvector(%(config)s::regconfig, c.content)
FROM unnest(%(doc)b::int8[], %(idx)b::int4[], %(content)b::text[], %(hash)b::text[], %(tokens)b::int4[],
            %(page)b::int4[], %(cstart)b::int4[], %(cend)b::int4[], %(meta)b::jsonb[],
            %(embedding)b::vector[])
     AS c(doc, idx, content, hash, tokens, page, cstart, cend, meta, embedding)
JOIN django_rag_document AS d ON d.id = c.doc
"""

_UPDATE_KEPT = """
UPDATE django_rag_chunk AS t
SET "index" = c.idx, page = c.page, char_start = c.cstart, char_end = c.cend, token_count = c.tokens,
    metadata = c.meta
FROM unnest(%(id)b::int8[], %(idx)b::int4[], %(page)b::int4[], %(cstart)b::int4[], %(cend)b::int4[],
            %(tokens)b::int4[], %(meta)b::jsonb[]) AS c(id, idx, page, cstart, cend, tokens, meta)
WHERE t.id = c.id
  AND (t."index", t.page, t.char_start, t.char_end, t.token_count, t.metadata)
      IS DISTINCT FROM (c.idx, c.page, c.cstart, c.cend, c.tokens, c.meta)
"""


def lock_documents(cursor: Any, collection_id: int, source_ids: Sequence[str]) -> None:
    """Take the transaction-scoped advisory locks that serialize writes to these documents.

    Every writer of a document (the store's sync, media ingestion's skip/failure records) uses
    this one key; locks are taken in sorted order so two batches never deadlock.
    """
    cursor.execute(_LOCK, [collection_id, sorted(set(source_ids))])


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

    def upsert(
        self, collection: str, document: DocumentInfo, chunks: Sequence[ChunkData], *, space: str
    ) -> SyncResult:
        return self.upsert_many(collection, [(document, chunks)], space=space)

    def upsert_many(
        self, collection: str, items: Sequence[tuple[DocumentInfo, Sequence[ChunkData]]], *, space: str
    ) -> SyncResult:
        """``upsert`` for a batch of documents: one transaction and a fixed number of statements."""
        items = _last_wins(items)
        for document, chunks in items:
            for chunk in chunks:
                if chunk.embedding is None:
                    raise ConfigurationError(
                        f"chunk {chunk.index} of {document.source_id!r} has no embedding"
                    )
        result = SyncResult(documents=len(items))
        if not items:
            return result
        with translate_db_errors(self.using), transaction.atomic(using=self.using):
            coll = _collection(collection, self.using)
            raw = _raw_connection(self.using)
            with psycopg.Cursor(raw) as cur:
                register_packed_vectors(cur, _vector_type(raw))
                # Sorted, so two batches sharing documents always lock in the same order (no deadlock).
                lock_documents(cur, coll.pk, [doc.source_id for doc, _ in items])
                cur.execute(_UPSERT_DOCUMENTS, {"collection": coll.pk, **self._document_columns(items)})
                doc_ids = dict(cur.fetchall())
                cur.execute(
                    "SELECT id, document_id, content_hash FROM django_rag_chunk "
                    "WHERE document_id = ANY(%s) AND space = %s",
                    [list(doc_ids.values()), space],
                )
                existing: dict[int, list[tuple[int, str]]] = {}
                for chunk_id, doc_id, content_hash in cur.fetchall():
                    existing.setdefault(doc_id, []).append((chunk_id, content_hash))
                kept_ids: list[int] = []
                kept: list[ChunkData] = []
                added_docs: list[int] = []
                added: list[ChunkData] = []
                removed: list[int] = []
                for document, chunks in items:
                    doc_id = doc_ids[document.source_id]
                    doc_kept, doc_added, doc_removed = diff_chunks(existing.get(doc_id, []), chunks)
                    kept_ids += [key for key, _ in doc_kept]
                    kept += [chunk for _, chunk in doc_kept]
                    added_docs += [doc_id] * len(doc_added)
                    added += doc_added
                    removed += doc_removed
                if removed:
                    cur.execute("DELETE FROM django_rag_chunk WHERE id = ANY(%s)", [removed])
                # Denormalised scope columns follow the document, also on chunks whose text did not change.
                cur.execute(_SYNC_SCOPE, [list(doc_ids.values())])
                if kept:
                    cur.execute(_UPDATE_KEPT, {"id": kept_ids, **_columns(kept, with_text=False)})
                if added and not coll.text_search:
                    documents = {doc_ids[doc.source_id]: doc for doc, _ in items}
                    _copy_chunks(cur, coll.pk, space, added_docs, documents, added)
                elif added:
                    cur.execute(
                        _INSERT_CHUNKS,
                        {
                            "doc": added_docs,
                            "collection": coll.pk,
                            "space": space,
                            "config": coll.text_config,
                            **_columns(added, with_text=True),
                        },
                    )
        result.added, result.removed, result.unchanged = len(added), len(removed), len(kept)
        return result

    def _document_columns(
        self, items: Sequence[tuple[DocumentInfo, Sequence[ChunkData]]]
    ) -> dict[str, list[Any]]:
        docs = [doc for doc, _ in items]
        owner_types: list[int | None] = []
        owner_ids: list[str | None] = []
        for doc in docs:
            if doc.owner is not None:
                owner_types.append(ContentType.objects.db_manager(self.using).get_for_model(doc.owner).pk)
                owner_ids.append(str(doc.owner.pk))
            else:
                owner_types.append(doc.owner_type_id)
                owner_ids.append(doc.owner_id)
        return {
            "source_id": [d.source_id for d in docs],
            "title": [d.title[:1024] for d in docs],
            "source": [d.source for d in docs],
            "content_type": [d.content_type[:255] for d in docs],
            "loader": [d.loader[:100] for d in docs],
            "metadata": [Jsonb(d.metadata) for d in docs],
            # text[][] must be rectangular, so each document's tags travel as one JSON array.
            "tags": [Jsonb(list(d.tags)) for d in docs],
            "tenant": [d.tenant for d in docs],
            "owner_type": owner_types,
            "owner_id": owner_ids,
            "content_hash": [d.content_hash for d in docs],
            "page_count": [d.page_count for d in docs],
        }

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
                    [space, list(set(hashes))],
                    binary=True,
                )
                return {row[0]: row[1].to_list() for row in cur.fetchall()}

    def query(
        self, collection: str, vector: Sequence[float], k: int, *, space: str, scope: QueryScope | None = None
    ) -> list[Hit]:
        return self.search(collection, mode="vector", k=k, space=space, vector=vector, scope=scope)

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
        **options: Any,
    ) -> list[Hit]:
        """Vector, text (BM25) or hybrid (RRF) search in one statement; see ``pgsearch``."""
        from .pgsearch import SearchRequest, run_search

        with translate_db_errors(self.using):
            coll = _collection(collection, self.using)
            request = SearchRequest(
                mode=mode,
                collection_id=coll.pk,
                text_config=coll.text_config,
                space=space,
                k=k,
                text=text,
                vector=vector,
                scope=scope or QueryScope(),
                ef_search=rag_settings.EF_SEARCH,
                **options,
            )
            hits = run_search(request, self.using)
            if not hits and mode != "text":
                _check_space(coll, space, self.using)
        return hits

    def delete(self, collection: str, *, source_id: str | None = None, prefix: str | None = None) -> int:
        check_delete_args(source_id, prefix)
        with translate_db_errors(self.using), transaction.atomic(using=self.using):
            coll = _collection(collection, self.using)
            docs = Document.objects.using(self.using).filter(collection=coll)
            docs = (
                docs.filter(source_id=source_id)
                if source_id is not None
                else docs.filter(prefix_q("source_id", prefix or ""))
            )
            # Chunks first in one statement, so the cascade does not walk them row by row.
            Chunk.objects.using(self.using).filter(document__in=docs.values("pk")).delete()
            return docs.delete()[1].get(Document._meta.label, 0)


def _collection(name: str | Collection, using: str) -> Collection:
    from ..api import collection

    # Callers holding the row already (Collection.search) save the lookup's round trip.
    return name if isinstance(name, Collection) else collection(name, using=using)


def _last_wins(
    items: Sequence[tuple[DocumentInfo, Sequence[ChunkData]]],
) -> list[tuple[DocumentInfo, Sequence[ChunkData]]]:
    """One entry per source_id: a batch naming a document twice syncs it to its last version."""
    return list({doc.source_id: (doc, chunks) for doc, chunks in items}.values())


def _check_space(coll: Collection, space: str, using: str) -> None:
    """An empty result because the collection holds another space's vectors is a configuration error."""
    chunks = Chunk.objects.using(using).filter(collection=coll)
    if chunks.filter(space=space).exists():
        return
    other = chunks.exclude(space=space).values_list("space", flat=True).first()
    if other is not None:
        held = other.rpartition(":")[2]
        raise ConfigurationError(
            f"collection {coll.name!r} uses embedder {coll.embedder!r} ({space}, "
            f"{space.rpartition(':')[2]} dims) but the store holds {held}-dim vectors of {other} for it; "
            f"run `manage.py rag_reindex {coll.name}`"
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
        columns["embedding"] = [pack(c.embedding) for c in chunks]
    return columns


_COPY_CHUNKS = """
COPY django_rag_chunk (document_id, collection_id, tenant, tags, space, "index", content, content_hash,
                       token_count, page, char_start, char_end, metadata, embedding)
FROM STDIN (FORMAT BINARY)
"""
_COPY_TYPES = ["int8", "int8", "varchar", "varchar[]", "varchar", "int4", "text", "varchar", "int4", "int4",
               "int4", "int4", "jsonb", "vector"]


def _copy_chunks(
    cur: psycopg.Cursor[Any],
    collection_id: int,
    space: str,
    doc_ids: Sequence[int],
    documents: dict[int, DocumentInfo],
    chunks: Sequence[ChunkData],
) -> None:
    """New chunks of a vector-only collection, by binary COPY: nothing is computed in the database.

    COPY inserts heap rows in batches, which a multi-row INSERT does not; with no tsvector to
    compute server-side, that is the cheapest write PostgreSQL has. The scope columns come from
    the document as the caller wrote it (the upsert stores exactly these values).
    """
    with cur.copy(_COPY_CHUNKS) as copy:
        copy.set_types(_COPY_TYPES)
        for doc_id, chunk in zip(doc_ids, chunks, strict=True):
            document = documents[doc_id]
            copy.write_row((
                doc_id, collection_id, document.tenant, list(document.tags), space, chunk.index,
                chunk.content, chunk.content_hash, chunk.token_count, chunk.page, chunk.char_start,
                chunk.char_end, Jsonb(chunk.metadata), pack(chunk.embedding),
            ))


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
                "the pgvector extension is not installed in this database; "
                "run `manage.py migrate django_rag` "
                "(it runs CREATE EXTENSION vector) or ask a superuser to run CREATE EXTENSION vector"
            )
        _vector_info[conn] = info
    return info
