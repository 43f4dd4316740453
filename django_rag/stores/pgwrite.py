"""The ORM store's writes: documents and their chunks in batches, skip and failure records.

Writes run under a transaction-scoped advisory lock on (collection, source_id), so two syncs
of one document serialize while different documents ingest in parallel (``locks``). The
statements themselves are in ``pgbulk``. ``DocumentWrites`` is a part of ``PgVectorStore``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from django.contrib.contenttypes.models import ContentType
from django.db import connections, transaction
from psycopg.types.json import Jsonb

from ..dberrors import translate_db_errors
from ..exceptions import ConfigurationError
from ..models import Chunk, Collection, Document
from ..types import ChunkData, SyncResult
from .adapters import raw_connection, register_packed_vectors, vector_type
from .base import DocumentInfo, Record, diff_chunks, last_wins
from .locks import lock_documents
from .pgbulk import (
    DESCRIBED,
    INSERT_CHUNKS,
    RECORD_DOCUMENTS,
    SYNC_SCOPE,
    UPDATE_KEPT,
    UPSERT_DOCUMENTS,
    chunk_columns,
    copy_chunks,
)

__all__ = ["DocumentWrites"]


class DocumentWrites:
    """``upsert_many``, ``record``, ``record_many`` and ``locked`` of ``PgVectorStore``."""

    using: str

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
                    UPSERT_DOCUMENTS,
                    {
                        "collection": coll.pk,
                        "indexed": Document.Status.INDEXED,
                        **self._documentchunk_columns(items),
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
                cur.execute(SYNC_SCOPE, [list(doc_ids.values())])
                if kept:
                    cur.execute(UPDATE_KEPT, {"id": kept_ids, **chunk_columns(kept, with_text=False)})
                if added and not coll.text_search:
                    copy_chunks(cur, coll.pk, space, added_docs, documents, added)
                elif added:
                    cur.execute(
                        INSERT_CHUNKS,
                        {
                            "doc": added_docs,
                            "collection": coll.pk,
                            "space": space,
                            "config": coll.text_config,
                            **chunk_columns(added, with_text=True),
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

    def _documentchunk_columns(
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
                    columns = self._documentchunk_columns([(r.info, ()) for r in group])
                    del columns["content_hash"], columns["page_count"], columns["status_reason"]
                    columns["status"] = [r.status for r in group]
                    columns["reason"] = [r.reason[:100] for r in group]
                    columns["error"] = [r.error for r in group]
                    statement = RECORD_DOCUMENTS.format(described=DESCRIBED if drop else "")
                    cur.execute(statement, {"collection": collection.pk, **columns})
                    ids = [row[0] for row in cur.fetchall()]
                    if drop:
                        cur.execute("DELETE FROM django_rag_chunk WHERE document_id = ANY(%s)", [ids])
        return len(last)

    @contextmanager
    def locked(self, collection: Collection, keys: Sequence[tuple[str, str]]) -> Iterator[None]:
        self._reconnect_if_dropped()  # reembed writes here after embedding a batch
        with transaction.atomic(using=self.using):
            with connections[self.using].cursor() as cursor:
                lock_documents(cursor, collection.pk, keys)
            yield
