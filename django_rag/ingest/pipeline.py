"""The one ingest pipeline: chunk -> hash diff -> embed -> atomic upsert, through the store.

``index_documents`` is the only code that chunks, diffs, embeds and writes: files, folders, URLs,
registered model rows and Celery tasks all produce ``RagDocument`` objects and call it (through
``kb.index``). Only chunk texts whose vectors are not already stored for the same collection
and tenant go to the embedder, and embedding happens before the write transaction, so a slow
embedder never holds a lock or a transaction open.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from ..conf import rag_settings
from ..dberrors import translate_db_errors
from ..embedders import Embedder
from ..exceptions import ConfigurationError, EmbedderError, QueryError
from ..models import Collection, embedder_for_space
from ..stores import DocumentInfo, VectorStore, get_store
from ..types import OCR, ChunkData, RagDocument, SyncResult
from ..validation import FLOAT4_MAX
from .chunking import Chunker
from .registration import registrations
from .semantic import make_chunker

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "MAX_BATCH_CHUNKS",
    "IndexProgress",
    "chunking_options",
    "document_info",
    "embed_missing",
    "index_documents",
    "reserved_prefixes",
]

DEFAULT_BATCH_SIZE = 64  # documents per embedding round
# A batch closes early once its documents hold this many chunks, so a run of long documents
# holds a bounded number of chunks (and vectors) between two commits. One document is never
# split across batches: its chunks are replaced in one transaction.
MAX_BATCH_CHUNKS = 2048
# Texts per embed_documents call, so progress (and an interrupt) is never far away.
EMBED_SLICE = 256


class IndexProgress:
    """What ``index_documents`` reports as it goes; subclass it (the defaults do nothing).

    Per batch: ``chunked`` once its documents are chunked (with how many of their chunk texts
    the store does not hold yet), ``embedded`` after every slice of texts embedded, ``written``
    once the batch is committed.
    """

    def chunked(self, documents: int, chunks: int, to_embed: int) -> None:
        pass

    def embedded(self, texts: int) -> None:
        pass

    def written(self, result: SyncResult) -> None:
        pass


def index_documents(
    collection: Collection,
    docs: Iterable[RagDocument] | RagDocument,
    *,
    tags: Sequence[str] = (),
    tenant: str = "",
    owner: Any = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    using: str | None = None,
    progress: IndexProgress | None = None,
    stop: Callable[[], bool] | None = None,
    chunking: dict[str, Any] | None = None,
) -> SyncResult:
    """Sync ``docs`` into ``collection``: each document's stored chunks become exactly its new chunks.

    ``chunking`` overrides the collection's chunking options for this run (``rag_eval`` compares
    chunkers with it), e.g. ``{"chunker": "semantic", "semantic_threshold": 0.4}``.

    Re-indexing a ``source_id`` in a tenant never duplicates: unchanged chunks are kept (and not
    embedded again), vanished ones are deleted, new ones are embedded and inserted, in one
    transaction per batch. Other tenants' documents of the same source id are never touched.

    Batches (``batch_size`` documents, fewer when they hold ``MAX_BATCH_CHUNKS`` chunks) are
    committed one by one, so an interrupted run keeps what it wrote, and running it again embeds
    only what is missing (vectors are reused by chunk hash). ``docs`` is read lazily, one batch
    at a time. ``stop`` is asked before each batch: once it returns True, nothing more is read.
    """
    if isinstance(docs, RagDocument):
        docs = [docs]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigurationError("batch_size must be at least 1")
    if not isinstance(tenant, str):
        raise QueryError(f"tenant must be a string, got {type(tenant).__name__}")
    if isinstance(tags, str) or not all(isinstance(tag, str) for tag in tags):
        raise QueryError("tags must be a list of strings")
    reserved = () if owner is not None else reserved_prefixes(collection)
    embedder = collection.get_embedder()
    store = get_store(using or collection.using)
    report = progress or IndexProgress()
    chunker = make_chunker({**chunking_options(collection, embedder), **(chunking or {})}, embedder)
    result = SyncResult()
    iterator = iter(docs)
    while not (stop and stop()):
        prepared: list[tuple[DocumentInfo, list[ChunkData]]] = []
        chunk_count = 0
        for doc in iterator:
            if not isinstance(doc, RagDocument):
                raise QueryError(f"index() takes RagDocument objects, got {type(doc).__name__}")
            if reserved and doc.source_id.startswith(reserved):
                raise QueryError(
                    f"source id {doc.source_id!r} is reserved for the rows of a model registered "
                    f"with django_rag.register() in collection {collection.name!r} "
                    "(ids '<app_label.model>:<pk>'); index it under another source id"
                )
            chunks = _chunks(doc, chunker)
            if chunks:
                prepared.append((document_info(doc, tags=tags, tenant=tenant, owner=owner), chunks))
                chunk_count += len(chunks)
            else:
                result.skipped += 1
            if len(prepared) >= batch_size or chunk_count >= MAX_BATCH_CHUNKS or (stop and stop()):
                break
        else:
            if not prepared:
                break
        written = _write_batch(store, collection, tenant, prepared, report)
        report.written(written)
        result += written
    return result


def _write_batch(
    store: VectorStore,
    collection: Collection,
    tenant: str,
    prepared: list[tuple[DocumentInfo, list[ChunkData]]],
    report: IndexProgress,
) -> SyncResult:
    """Embed a batch into the collection's active space, and a switch's target too, then commit both.

    The spaces are read from the database, then checked again under the collection row's share
    lock in the write transaction: a switch that began, flipped or was aborted in between sends
    the batch round again (vectors already made are kept), so no document misses a space.
    """
    chunks = [c for _, cs in prepared for c in cs]
    vectors: dict[str, dict[str, list[float]]] = {}
    embedded = 0
    first = True
    while True:
        state = collection.space_state(using=store.using)
        spaces: list[tuple[str, tuple[str, ...]]] = [
            (state.active_space, (state.active_embedder, collection.embedder))
        ]
        if state.target_space and state.target_space != state.active_space:
            spaces.append((state.target_space, (state.target_embedder or "",)))
        copies: dict[str, list[ChunkData]] = {}
        for space, aliases in spaces:
            embedder = embedder_for_space(space, aliases, collection.name)
            own = [replace(c, embedding=vectors.get(space, {}).get(c.content_hash)) for c in chunks]
            todo = [c for c in own if c.embedding is None]
            embedded += embed_missing(
                embedder,
                store,
                collection,
                tenant,
                todo,
                progress=report if first and space == state.active_space else None,
                documents=len(prepared),
            )
            vectors.setdefault(space, {}).update((c.content_hash, c.embedding or []) for c in todo)
            copies[space] = own
        first = False
        keys = [(info.tenant, info.source_id) for info, _ in prepared]
        with translate_db_errors(store.using), store.locked(collection, keys):
            if collection.space_state(lock=True, using=store.using) != state:
                continue  # a switch moved on while we embedded: round again, outside the transaction
            written = SyncResult()
            for space, _ in spaces:
                own_chunks = iter(copies[space])
                items = [(info, [next(own_chunks) for _ in cs]) for info, cs in prepared]
                done = store.upsert_many(collection, items, space=space)
                if space == state.active_space:
                    written = done
        written.embedded = embedded
        return written


def reserved_prefixes(collection: Collection) -> tuple[str, ...]:
    """Source-id prefixes of the models registered in ``collection``: only their rows' ingestion writes them.

    A row's ingestion deletes and moves the documents under its source id in every tenant (its
    earlier versions, in the tenant it left). Were any other writer free to use such an id, a
    tenant's own document could be deleted, or moved into another tenant, by a row it does not own.
    """
    return tuple(f"{r.label}:" for r in registrations() if r.collection == collection.name)


def _chunks(doc: RagDocument, chunker: Chunker) -> list[ChunkData]:
    metadata = _json_safe(doc.metadata)
    chunks = chunker.chunk_document(doc)
    for chunk in chunks:
        # Document metadata rides on every chunk so metadata filters need no join.
        chunk.metadata = {**metadata, **chunk.metadata}
    return chunks


def chunking_options(collection: Collection, embedder: Embedder) -> dict[str, Any]:
    """How ``collection``'s documents are chunked: its sizes, counted with the embedder's tokenizer,
    and the chunker its ``RAG["COLLECTIONS"]`` entry selects (``CHUNKER``, ``SEMANTIC_THRESHOLD``)."""
    declared = rag_settings.collection_options(collection.name) or {}
    return {
        "chunker": declared.get("CHUNKER"),
        "semantic_threshold": declared.get("SEMANTIC_THRESHOLD"),
        "chunk_size": collection.chunk_size,
        "chunk_overlap": collection.chunk_overlap,
        # The model's own tokenizer when it has one, so no chunk is truncated by the embedder.
        "token_counter": getattr(embedder, "count_tokens", None),
        "batch_counter": getattr(embedder, "count_tokens_batch", None),
        "additive": bool(getattr(embedder, "tokens_add_up", False)),
        # The title and heading path embedded and matched with every chunk (CONTEXT_HEADERS).
        "context_headers": collection.context_headers,
    }


def embed_missing(
    embedder: Embedder,
    store: VectorStore,
    collection: Collection,
    tenant: str,
    chunks: list[ChunkData],
    *,
    progress: IndexProgress | None = None,
    documents: int = 0,
) -> int:
    """Attach vectors to ``chunks``, embedding only texts not stored yet. Returns texts embedded.

    ``progress`` hears of the batch (``documents`` documents) once it is known what is missing,
    then after every slice of texts embedded."""
    known = store.vectors_for(collection, embedder.space, [c.content_hash for c in chunks], tenant=tenant)
    missing: dict[str, str] = {}
    for chunk in chunks:
        if chunk.content_hash not in known:
            missing.setdefault(chunk.content_hash, chunk.embedded_text)
    if progress is not None:
        progress.chunked(documents, len(chunks), len(missing))
    hashes, texts = list(missing), list(missing.values())
    for start in range(0, len(texts), EMBED_SLICE):
        vectors = embedder.embed_documents(texts[start : start + EMBED_SLICE])
        for vector in vectors:
            _check_vector(embedder, vector)
        known.update(zip(hashes[start : start + EMBED_SLICE], vectors, strict=True))
        if progress is not None:
            progress.embedded(len(vectors))
    for chunk in chunks:
        chunk.embedding = [float(x) for x in known[chunk.content_hash]]
    return len(missing)


def _check_vector(embedder: Embedder, vector: Sequence[float]) -> None:
    """Refuse, before the write transaction opens, a vector that pgvector would reject mid-batch."""
    if len(vector) != embedder.dimensions:
        raise ConfigurationError(
            f"embedder {embedder.model!r} is declared with {embedder.dimensions} dimensions but returned "
            f"a {len(vector)}-dim vector; set DIMENSIONS to {len(vector)} in RAG['EMBEDDERS']"
        )
    # The sum is NaN or infinite as soon as one value is; max and min catch what float4 cannot hold.
    if not math.isfinite(sum(vector)) or max(vector) > FLOAT4_MAX or min(vector) < -FLOAT4_MAX:
        raise EmbedderError(
            f"embedder {embedder.model!r} returned a vector whose values are not finite (NaN, infinity "
            "or beyond float32), which pgvector cannot store; nothing was written. "
            "Check the model and its inputs"
        )


def document_info(
    doc: RagDocument, *, tags: Sequence[str] = (), tenant: str = "", owner: Any = None
) -> DocumentInfo:
    """How a loaded document is recorded: its metadata's derived keys, scope and content hash."""
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
        status_reason=OCR if meta.get("ocr") else "",
    )


def _json_safe(value: dict[str, Any]) -> dict[str, Any]:
    safe: dict[str, Any] = json.loads(json.dumps(value, cls=DjangoJSONEncoder))
    return safe
