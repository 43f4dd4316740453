"""Load -> chunk -> hash diff -> embed -> atomic upsert.

Only chunk texts whose vectors are not already stored in the collection's embedding space go
to the embedder, and embedding happens before the write transaction, so a slow embedder
never holds a lock or a transaction open.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any

from django.core.serializers.json import DjangoJSONEncoder

from .exceptions import ConfigurationError
from .stores import get_store
from .stores.base import DocumentInfo
from .types import ChunkData, RagDocument, SyncResult

if TYPE_CHECKING:
    from .models import Collection

__all__ = ["DEFAULT_BATCH_SIZE", "index_documents", "reembed"]

DEFAULT_BATCH_SIZE = 64  # documents per embedding round


def index_documents(
    collection: Collection,
    docs: Iterable[RagDocument],
    *,
    tags: Sequence[str] = (),
    tenant: str = "",
    owner: Any = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> SyncResult:
    """Sync ``docs`` into ``collection``: each document's stored chunks become exactly its new chunks.

    Re-indexing a ``source_id`` never duplicates: unchanged chunks are kept (and not embedded
    again), vanished ones are deleted, new ones are embedded and inserted, all in one
    transaction per document. Returns counts of chunks added, removed and unchanged.
    """
    if isinstance(docs, RagDocument):
        docs = [docs]
    if batch_size < 1:
        raise ConfigurationError("batch_size must be at least 1")
    embedder = collection.get_embedder()
    # Count chunk tokens with the model's own tokenizer when it has one, so no chunk is truncated.
    token_counter = getattr(embedder, "count_tokens", None)
    store = get_store()
    result = SyncResult()
    for batch in _batches(docs, batch_size):
        prepared = []
        for doc in batch:
            if not isinstance(doc, RagDocument):
                raise TypeError(f"index() takes RagDocument objects, got {type(doc).__name__}")
            chunks = _chunks(collection, doc, token_counter)
            if chunks:
                prepared.append((doc, chunks))
            else:
                result.skipped += 1
        result.embedded += _embed_missing(embedder, store, [c for _, chunks in prepared for c in chunks])
        result += store.upsert_many(
            collection,  # the row itself: the store need not look it up again
            [(_document_info(doc, tags, tenant, owner), chunks) for doc, chunks in prepared],
            space=embedder.space,
        )
    return result


def _batches(docs: Iterable[RagDocument], size: int) -> Iterator[list[RagDocument]]:
    iterator = iter(docs)
    while batch := list(islice(iterator, size)):
        yield batch


def _chunks(
    collection: Collection, doc: RagDocument, token_counter: Callable[[str], int] | None
) -> list[ChunkData]:
    from .chunking import chunk_document

    metadata = _json_safe(doc.metadata)
    chunks = chunk_document(
        doc,
        chunk_size=collection.chunk_size,
        chunk_overlap=collection.chunk_overlap,
        token_counter=token_counter,
    )
    for chunk in chunks:
        # Document metadata rides on every chunk so metadata filters need no join.
        chunk.metadata = {**metadata, **chunk.metadata}
    return chunks


def _embed_missing(embedder: Any, store: Any, chunks: list[ChunkData]) -> int:
    """Attach vectors to ``chunks``, embedding only texts the space has never seen. Returns texts embedded."""
    known = store.vectors_for(embedder.space, [c.content_hash for c in chunks])
    missing: dict[str, str] = {}
    for chunk in chunks:
        if chunk.content_hash not in known:
            missing.setdefault(chunk.content_hash, chunk.content)
    if missing:
        vectors = embedder.embed_documents(list(missing.values()))
        known.update(zip(missing.keys(), vectors, strict=True))
    for chunk in chunks:
        chunk.embedding = [float(x) for x in known[chunk.content_hash]]
    return len(missing)


def _document_info(doc: RagDocument, tags: Sequence[str], tenant: str, owner: Any) -> DocumentInfo:
    meta = doc.metadata
    page_count = meta.get("page_count")
    return DocumentInfo(
        source_id=doc.source_id,
        title=str(meta.get("title") or doc.source_id),
        source=str(meta.get("source") or ""),
        content_type=str(meta.get("content_type") or ""),
        loader=str(meta.get("loader") or ""),
        metadata=_json_safe(meta),
        tags=sorted({*doc.tags, *tags}),
        tenant=tenant,
        content_hash=hashlib.sha1(doc.text.encode()).hexdigest(),
        page_count=int(page_count) if isinstance(page_count, int) else None,
        owner=owner,
    )


def _json_safe(value: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def reembed(
    collection: Collection,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
) -> SyncResult:
    """Move every document of ``collection`` into its embedder's current space.

    Used after changing a collection's EMBEDDER: chunk texts are reused as stored (no loader
    runs again), embedded in the new space (texts the space already holds are not embedded
    again), and each document's chunks of other spaces are deleted in the same transaction
    as its new ones are written. ``progress`` is called with the number of documents done.
    """
    from django.db import transaction
    from django.db.models import Exists, OuterRef

    from .conf import rag_settings
    from .models import Chunk, Document

    using = rag_settings.DATABASE
    embedder = collection.get_embedder()
    space = embedder.space
    store = get_store()
    stale = Chunk.objects.using(using).filter(document=OuterRef("pk")).exclude(space=space)
    pending = Document.objects.using(using).filter(collection=collection).filter(Exists(stale)).order_by("pk")
    result = SyncResult()
    for batch in _batches(pending.iterator(chunk_size=batch_size), batch_size):
        rows = Chunk.objects.using(using).filter(document__in=batch).defer("embedding", "search_vector")
        by_doc: dict[int, dict[str, list[Chunk]]] = {}
        for row in rows.order_by("document_id", "space", "index"):
            by_doc.setdefault(row.document_id, {}).setdefault(row.space, []).append(row)
        items = []
        for doc in batch:
            spaces = by_doc.get(doc.pk, {})
            if space in spaces:
                continue  # already current: only its stale spaces go
            # Several old spaces: take the one written last.
            source = max(spaces.values(), key=lambda chunks: max(c.pk for c in chunks))
            chunks = [
                ChunkData(
                    index=c.index,
                    content=c.content,
                    content_hash=c.content_hash,
                    token_count=c.token_count,
                    page=c.page,
                    char_start=c.char_start,
                    char_end=c.char_end,
                    metadata=c.metadata,
                )
                for c in source
            ]
            items.append((_stored_document_info(doc), chunks))
        result.embedded += _embed_missing(embedder, store, [c for _, chunks in items for c in chunks])
        with transaction.atomic(using=using):
            if items:
                result += store.upsert_many(collection, items, space=space)
            Chunk.objects.using(using).filter(document__in=batch).exclude(space=space).delete()
        if progress:
            progress(len(batch))
    return result


def _stored_document_info(doc: Any) -> DocumentInfo:
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
