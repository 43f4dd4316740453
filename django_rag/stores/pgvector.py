"""The ORM store: Document and Chunk rows in PostgreSQL, vectors in a pgvector column.

``PgVectorStore`` is assembled from its concerns: batched writes under advisory locks
(``pgwrite``, statements in ``pgbulk``), reads by embedding space (``pgspaces``), search
(``pgsearch``), and here what is left: removals in committed batches (``removal``), document
listings and rescoping.
"""

from __future__ import annotations

from collections.abc import Collection as Container
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connections, transaction
from django.db.models import QuerySet

from ..conf import rag_settings
from ..dberrors import translate_db_errors
from ..models import Chunk, Collection, Document
from ..sql import prefix_q
from ..types import Hit
from .base import (
    ALL_TENANTS,
    SearchRequest,
    SourceState,
    TermWeights,
    check_delete_args,
    check_tenant,
    plan_rescope,
)
from .locks import lock_documents
from .pgexplain import term_weights
from .pgsearch import run_search
from .pgspaces import SpaceReads
from .pgwrite import DocumentWrites
from .removal import DEFAULT_REMOVE_BATCH, Progress, remove_batched, remove_keys

__all__ = ["PgVectorStore", "lock_documents"]


class PgVectorStore(DocumentWrites, SpaceReads):
    """Document and Chunk rows through the Django ORM (raw SQL only for the bulk statements)."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using or rag_settings.DATABASE

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

    def term_weights(
        self, collection: Collection, space: str, text: str, chunk_ids: Sequence[int]
    ) -> TermWeights:
        with translate_db_errors(self.using):
            return term_weights(collection, space, text, chunk_ids, self.using)
