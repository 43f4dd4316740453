"""The ORM store: Document and Chunk rows in PostgreSQL, vectors in a pgvector column.

Writes run under a transaction-scoped advisory lock on (collection, source_id), so two syncs
of one document serialize while different documents ingest in parallel (``locks``); removals
go in committed batches of such locks (``removal``). New chunk rows go
in with one ``INSERT ... SELECT FROM unnest(...)`` whose array parameters travel in binary
(vectors in pgvector's binary format: no float-to-text conversion), computing ``to_tsvector``
server-side; in a vector-only collection (TEXT_SEARCH off) with one binary COPY. Either way a
fixed number of statements per batch of documents, never one per row.
"""

from __future__ import annotations

from collections.abc import Collection as Container
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from django.contrib.contenttypes.models import ContentType
from django.db import connections, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from pgvector.psycopg.vector import register_vector_info
from psycopg.types.json import Jsonb

from ..conf import rag_settings
from ..dberrors import translate_db_errors
from ..exceptions import ConfigurationError
from ..models import Chunk, Collection, Document
from ..sql import prefix_q
from ..types import ChunkData, Hit, SyncResult
from .adapters import pack, raw_connection, register_packed_vectors, vector_type
from .base import (
    ALL_TENANTS,
    DocumentInfo,
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
from .locks import lock_documents
from .pgexplain import term_weights
from .pgsearch import run_search
from .removal import DEFAULT_REMOVE_BATCH, Progress, remove_batched, remove_keys

__all__ = ["PgVectorStore", "lock_documents"]

_UPSERT_DOCUMENTS = """
INSERT INTO django_rag_document
    (collection_id, source_id, title, source, content_type, loader, metadata, tags, tenant, owner_type_id,
     owner_id, status, status_reason, error, content_hash, page_count, created_at, updated_at)
SELECT %(collection)s, d.source_id, d.title, d.source, d.content_type, d.loader, d.metadata,
       ARRAY(SELECT jsonb_array_elements_text(d.tags)), d.tenant, d.owner_type, d.owner_id,
       %(indexed)s, d.status_reason, '', d.content_hash, d.page_count, now(), now()
FROM unnest(%(source_id)b::text[], %(title)b::text[], %(source)b::text[], %(content_type)b::text[],
            %(loader)b::text[], %(metadata)b::jsonb[], %(tags)b::jsonb[], %(tenant)b::text[],
            %(owner_type)b::int4[], %(owner_id)b::text[], %(content_hash)b::text[], %(page_count)b::int4[],
            %(status_reason)b::text[])
     AS d(source_id, title, source, content_type, loader, metadata, tags, tenant, owner_type, owner_id,
          content_hash, page_count, status_reason)
ON CONFLICT (collection_id, tenant, source_id) DO UPDATE SET
    title = EXCLUDED.title, source = EXCLUDED.source, content_type = EXCLUDED.content_type,
    loader = EXCLUDED.loader, metadata = EXCLUDED.metadata, tags = EXCLUDED.tags, tenant = EXCLUDED.tenant,
    owner_type_id = EXCLUDED.owner_type_id, owner_id = EXCLUDED.owner_id, status = %(indexed)s,
    status_reason = EXCLUDED.status_reason, error = '', content_hash = EXCLUDED.content_hash,
    page_count = EXCLUDED.page_count, updated_at = now()
RETURNING tenant, source_id, id
"""

# Skip and failure records in bulk. On conflict a skip rewrites the description (its chunks go),
# a failure only its state (its old chunks stay searchable, so their description stays too).
_RECORD_DOCUMENTS = """
INSERT INTO django_rag_document
    (collection_id, source_id, title, source, content_type, loader, metadata, tags, tenant, owner_type_id,
     owner_id, status, status_reason, error, content_hash, page_count, created_at, updated_at)
SELECT %(collection)s, d.source_id, d.title, d.source, d.content_type, d.loader, d.metadata,
       ARRAY(SELECT jsonb_array_elements_text(d.tags)), d.tenant, d.owner_type, d.owner_id,
       d.status, d.reason, d.error, '', NULL, now(), now()
FROM unnest(%(source_id)b::text[], %(title)b::text[], %(source)b::text[], %(content_type)b::text[],
            %(loader)b::text[], %(metadata)b::jsonb[], %(tags)b::jsonb[], %(tenant)b::text[],
            %(owner_type)b::int4[], %(owner_id)b::text[], %(status)b::text[], %(reason)b::text[],
            %(error)b::text[])
     AS d(source_id, title, source, content_type, loader, metadata, tags, tenant, owner_type, owner_id,
          status, reason, error)
ON CONFLICT (collection_id, tenant, source_id) DO UPDATE SET
    status = EXCLUDED.status, status_reason = EXCLUDED.status_reason, error = EXCLUDED.error,
    updated_at = now() {described}
RETURNING id
"""
_DESCRIBED = """,
    title = EXCLUDED.title, source = EXCLUDED.source, content_type = EXCLUDED.content_type,
    loader = EXCLUDED.loader, metadata = EXCLUDED.metadata, tags = EXCLUDED.tags,
    owner_type_id = EXCLUDED.owner_type_id, owner_id = EXCLUDED.owner_id, content_hash = '', page_count = NULL
"""

_SYNC_SCOPE = """
UPDATE django_rag_chunk AS c SET tenant = d.tenant, tags = d.tags
FROM django_rag_document AS d
WHERE c.document_id = d.id AND d.id = ANY(%s) AND (c.tenant, c.tags) IS DISTINCT FROM (d.tenant, d.tags)
"""

_INSERT_CHUNKS = """
INSERT INTO django_rag_chunk
    (document_id, collection_id, tenant, tags, space, "index", content, header, content_hash, token_count,
     page, char_start, char_end, metadata, embedding, search_vector)
SELECT c.doc, %(collection)s, d.tenant, d.tags, %(space)s, c.idx, c.content, c.header, c.hash, c.tokens,
       c.page, c.cstart, c.cend, c.meta, c.embedding,
       to_tsvector(%(config)s::regconfig, concat_ws(E'\n\n', NULLIF(c.header, ''), c.content))
FROM unnest(%(doc)b::int8[], %(idx)b::int4[], %(content)b::text[], %(header)b::text[], %(hash)b::text[],
            %(tokens)b::int4[], %(page)b::int4[], %(cstart)b::int4[], %(cend)b::int4[], %(meta)b::jsonb[],
            %(embedding)b::vector[])
     AS c(doc, idx, content, header, hash, tokens, page, cstart, cend, meta, embedding)
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


class PgVectorStore:
    """Document and Chunk rows through the Django ORM (raw SQL only for the bulk statements)."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using or rag_settings.DATABASE

    def upsert_many(
        self, collection: Collection, items: Sequence[tuple[DocumentInfo, Sequence[ChunkData]]], *, space: str
    ) -> SyncResult:
        """``upsert`` for a batch of documents: one transaction and a fixed number of statements."""
        items = last_wins(items)
        for document, chunks in items:
            for chunk in chunks:
                if chunk.embedding is None:
                    raise ConfigurationError(
                        f"chunk {chunk.index} of {document.source_id!r} has no embedding"
                    )
        result = SyncResult(documents=len(items))
        if not items:
            return result
        self._reconnect_if_dropped()
        coll = collection
        with translate_db_errors(self.using), transaction.atomic(using=self.using):
            raw = raw_connection(self.using)
            with psycopg.Cursor(raw) as cur:
                register_packed_vectors(cur, vector_type(raw))
                lock_documents(cur, coll.pk, [(doc.tenant, doc.source_id) for doc, _ in items])
                cur.execute(
                    _UPSERT_DOCUMENTS,
                    {
                        "collection": coll.pk,
                        "indexed": Document.Status.INDEXED,
                        **self._document_columns(items),
                    },
                )
                doc_ids = {(tenant, source_id): pk for tenant, source_id, pk in cur.fetchall()}
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
                documents: dict[int, DocumentInfo] = {}
                for document, chunks in items:
                    doc_id = doc_ids[(document.tenant, document.source_id)]
                    documents[doc_id] = document
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

    def _reconnect_if_dropped(self) -> None:
        """Open a new session if the server ended the idle one while the batch was being embedded
        (``idle_session_timeout``, a proxy's idle limit): the vectors in hand are not thrown away.
        Never inside a caller's transaction, which a new session could not continue."""
        wrapper = connections[self.using]
        if wrapper.connection is not None and not wrapper.in_atomic_block and not wrapper.is_usable():
            wrapper.close()

    def _document_columns(
        self, items: Sequence[tuple[DocumentInfo, Sequence[ChunkData]]]
    ) -> dict[str, list[Any]]:
        docs = [doc for doc, _ in items]
        owners = [self._owner(doc) for doc in docs]
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
            "owner_type": [owner_type for owner_type, _ in owners],
            "owner_id": [owner_id for _, owner_id in owners],
            "content_hash": [d.content_hash for d in docs],
            "page_count": [d.page_count for d in docs],
            "status_reason": [d.status_reason[:100] for d in docs],
        }

    def _owner(self, doc: DocumentInfo) -> tuple[int | None, str | None]:
        if doc.owner is not None:
            owner_type = ContentType.objects.db_manager(self.using).get_for_model(type(doc.owner))
            return owner_type.pk, str(doc.owner.pk)
        return doc.owner_type_id, doc.owner_id

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

    def search(self, collection: Collection, request: SearchRequest) -> list[Hit]:
        """Vector, text (BM25) or hybrid (RRF) search in one statement; see ``pgsearch``."""
        with translate_db_errors(self.using):
            hits = run_search(collection, request, self.using)
            if not hits and request.mode != "text":
                self.check_space(collection, request.space)
        return hits

    def delete(
        self,
        collection: Collection,
        *,
        source_id: str | None = None,
        prefix: str | None = None,
        tenant: str = "",
        keep: Container[tuple[str, str]] = (),
        progress: Progress | None = None,
        batch_size: int = DEFAULT_REMOVE_BATCH,
    ) -> int:
        check_delete_args(source_id, prefix)
        check_tenant(tenant)
        docs = self._documents(collection, tenant)
        docs = (
            docs.filter(source_id=source_id)
            if source_id is not None
            else docs.filter(prefix_q("source_id", prefix or ""))
        )
        with translate_db_errors(self.using):
            return remove_batched(docs, collection.pk, keep=keep, progress=progress, batch_size=batch_size)

    def delete_many(
        self,
        collection: Collection,
        source_ids: Iterable[str],
        *,
        tenant: str = "",
        progress: Progress | None = None,
        batch_size: int = DEFAULT_REMOVE_BATCH,
    ) -> int:
        check_tenant(tenant)
        docs = self._documents(collection, tenant)
        with translate_db_errors(self.using):
            return remove_keys(docs, collection.pk, source_ids, progress=progress, batch_size=batch_size)

    def delete_collection(
        self,
        collection: Collection,
        *,
        progress: Progress | None = None,
        batch_size: int = DEFAULT_REMOVE_BATCH,
    ) -> int:
        docs = self._documents(collection, ALL_TENANTS)
        with translate_db_errors(self.using):
            removed = remove_batched(docs, collection.pk, progress=progress, batch_size=batch_size)
            with transaction.atomic(using=self.using):
                # What is left refers to the collection by a few rows (jobs, a switch: cascaded),
                # and by text statistics without a foreign key (zeros by now), dropped with it.
                Collection.objects.using(self.using).filter(pk=collection.pk).delete()
                with connections[self.using].cursor() as cursor:
                    for table in ("django_rag_textstats", "django_rag_postblock"):
                        cursor.execute(f"DELETE FROM {table} WHERE collection_id = %s", [collection.pk])
        return removed

    def _documents(self, collection: Collection, tenant: Any) -> QuerySet[Document]:
        docs = Document.objects.using(self.using).filter(collection=collection)
        return docs if tenant is ALL_TENANTS else docs.filter(tenant=tenant)

    def record(
        self,
        collection: Collection,
        info: DocumentInfo,
        *,
        status: str,
        reason: str = "",
        error: str = "",
        drop_chunks: bool,
    ) -> Document:
        owner_type_id, owner_id = self._owner(info)
        state = {"status": status, "status_reason": reason[:100], "error": error}
        described: dict[str, Any] = {
            "title": (info.title or info.source_id)[:1024],
            "source": info.source,
            "content_type": info.content_type[:255],
            "tags": list(info.tags),
            "owner_type_id": owner_type_id,
            "owner_id": owner_id,
        }
        with translate_db_errors(self.using), self.locked(collection, [(info.tenant, info.source_id)]):
            documents = Document.objects.using(self.using)
            key: dict[str, Any] = {
                "collection": collection,
                "tenant": info.tenant,
                "source_id": info.source_id,
            }
            if drop_chunks:
                fields = {**state, **described, "content_hash": "", "page_count": None}
                document, _ = documents.update_or_create(defaults=fields, **key)
                Chunk.objects.using(self.using).filter(document=document).delete()
            else:
                document, _ = documents.update_or_create(
                    defaults=state, create_defaults={**state, **described}, **key
                )
        return document

    def record_many(self, collection: Collection, records: Sequence[Record]) -> int:
        # One record per document, the last one given; skips and failures in one statement each.
        last = list({(r.info.tenant, r.info.source_id): r for r in records}.values())
        if not last:
            return 0
        with translate_db_errors(self.using), transaction.atomic(using=self.using):
            raw = raw_connection(self.using)
            with psycopg.Cursor(raw) as cur:
                lock_documents(cur, collection.pk, [(r.info.tenant, r.info.source_id) for r in last])
                for drop in (True, False):
                    group = [r for r in last if (r.status != Document.Status.FAILED) == drop]
                    if not group:
                        continue
                    columns = self._document_columns([(r.info, ()) for r in group])
                    del columns["content_hash"], columns["page_count"], columns["status_reason"]
                    columns["status"] = [r.status for r in group]
                    columns["reason"] = [r.reason[:100] for r in group]
                    columns["error"] = [r.error for r in group]
                    statement = _RECORD_DOCUMENTS.format(described=_DESCRIBED if drop else "")
                    cur.execute(statement, {"collection": collection.pk, **columns})
                    ids = [row[0] for row in cur.fetchall()]
                    if drop:
                        cur.execute("DELETE FROM django_rag_chunk WHERE document_id = ANY(%s)", [ids])
        return len(last)

    def sources(self, collection: Collection, *, tenant: str, prefix: str | None = None) -> list[SourceState]:
        documents = Document.objects.using(self.using).filter(collection=collection, tenant=tenant)
        if prefix is not None:
            documents = documents.filter(prefix_q("source_id", prefix))
        rows = documents.order_by("source_id").values_list("source_id", "source", "content_hash", "status")
        return [SourceState(*row) for row in rows.iterator(chunk_size=2000)]

    def document(
        self, collection: Collection, source_id: str, *, tenant: str | None = None
    ) -> Document | None:
        documents = Document.objects.using(self.using).filter(collection=collection, source_id=source_id)
        if tenant is not None:
            documents = documents.filter(tenant=tenant)
        return documents.order_by("-updated_at").first()

    def mark_pending(self, collection: Collection, source_ids: Sequence[str]) -> int:
        return (
            Document.objects.using(self.using)
            .filter(collection=collection, source_id__in=list(source_ids))
            .exclude(status=Document.Status.PENDING)
            .update(status=Document.Status.PENDING)
        )

    def rescope(self, collection: Collection, *, prefix: str, tenant: str, tags: Sequence[str]) -> int:
        tags = sorted(set(tags))
        with translate_db_errors(self.using), transaction.atomic(using=self.using):
            documents = Document.objects.using(self.using).filter(collection=collection)
            rows = list(
                documents.filter(prefix_q("source_id", prefix)).values_list(
                    "pk", "tenant", "source_id", "tags"
                )
            )
            moving, replaced = plan_rescope(rows, tenant, tags)
            if not moving:
                return 0
            with connections[self.using].cursor() as cursor:
                lock_documents(
                    cursor,
                    collection.pk,
                    [(t, s) for _, t, s, _ in rows] + [(tenant, s) for _, _, s, _ in rows],
                )
            Chunk.objects.using(self.using).filter(document_id__in=replaced).delete()
            documents.filter(pk__in=replaced).delete()
            documents.filter(pk__in=moving).update(tenant=tenant, tags=tags)
            Chunk.objects.using(self.using).filter(document_id__in=moving).update(tenant=tenant, tags=tags)
        return len(moving)

    def source_ids(self, collection: Collection, *, prefix: str) -> list[tuple[str, str]]:
        return list(
            Document.objects.using(self.using)
            .filter(collection=collection)
            .filter(prefix_q("source_id", prefix))
            .order_by("source_id", "tenant")
            .values_list("tenant", "source_id")
        )

    @contextmanager
    def locked(self, collection: Collection, keys: Sequence[tuple[str, str]]) -> Iterator[None]:
        self._reconnect_if_dropped()  # reembed writes here after embedding a batch
        with transaction.atomic(using=self.using):
            with connections[self.using].cursor() as cursor:
                lock_documents(cursor, collection.pk, keys)
            yield

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

    def term_weights(
        self, collection: Collection, space: str, text: str, chunk_ids: Sequence[int]
    ) -> TermWeights:
        with translate_db_errors(self.using):
            return term_weights(collection, space, text, chunk_ids, self.using)


_DROP_SPACE = """
DELETE FROM django_rag_chunk WHERE id IN (
    SELECT id FROM django_rag_chunk WHERE collection_id = %s AND space = %s LIMIT %s
)
"""


def _embedding(chunk: ChunkData) -> list[float]:
    if chunk.embedding is None:  # upsert_many refused such chunks before writing anything
        raise ConfigurationError(f"chunk {chunk.index} has no embedding")
    return chunk.embedding


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
        columns["header"] = [c.header for c in chunks]
        columns["hash"] = [c.content_hash for c in chunks]
        columns["embedding"] = [pack(_embedding(c)) for c in chunks]
    return columns


_COPY_CHUNKS = """
COPY django_rag_chunk (document_id, collection_id, tenant, tags, space, "index", content, header,
                       content_hash, token_count, page, char_start, char_end, metadata, embedding)
FROM STDIN (FORMAT BINARY)
"""
_COPY_TYPES = [
    "int8",
    "int8",
    "varchar",
    "varchar[]",
    "varchar",
    "int4",
    "text",
    "text",
    "varchar",
    "int4",
    "int4",
    "int4",
    "int4",
    "jsonb",
    "vector",
]


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
            copy.write_row(
                (
                    doc_id,
                    collection_id,
                    document.tenant,
                    list(document.tags),
                    space,
                    chunk.index,
                    chunk.content,
                    chunk.header,
                    chunk.content_hash,
                    chunk.token_count,
                    chunk.page,
                    chunk.char_start,
                    chunk.char_end,
                    Jsonb(chunk.metadata),
                    pack(_embedding(chunk)),
                )
            )
