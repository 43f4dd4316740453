"""The bulk statements of the ORM store's writes, and the columns they bind.

New chunk rows go in with one ``INSERT ... SELECT FROM unnest(...)`` whose array parameters
travel in binary (vectors in pgvector's binary format: no float-to-text conversion), computing
``to_tsvector`` server-side; in a vector-only collection (TEXT_SEARCH off) with one binary COPY.
Documents are upserted, and skip or failure records written, the same way: a fixed number of
statements per batch of documents, never one per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..exceptions import ConfigurationError
from ..types import ChunkData
from .adapters import pack
from .base import DocumentInfo

__all__ = [
    "DESCRIBED",
    "INSERT_CHUNKS",
    "RECORD_DOCUMENTS",
    "SYNC_SCOPE",
    "UPDATE_KEPT",
    "UPSERT_DOCUMENTS",
    "chunk_columns",
    "copy_chunks",
]

UPSERT_DOCUMENTS = """
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
RECORD_DOCUMENTS = """
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
DESCRIBED = """,
    title = EXCLUDED.title, source = EXCLUDED.source, content_type = EXCLUDED.content_type,
    loader = EXCLUDED.loader, metadata = EXCLUDED.metadata, tags = EXCLUDED.tags,
    owner_type_id = EXCLUDED.owner_type_id, owner_id = EXCLUDED.owner_id, content_hash = '', page_count = NULL
"""

SYNC_SCOPE = """
UPDATE django_rag_chunk AS c SET tenant = d.tenant, tags = d.tags
FROM django_rag_document AS d
WHERE c.document_id = d.id AND d.id = ANY(%s) AND (c.tenant, c.tags) IS DISTINCT FROM (d.tenant, d.tags)
"""

INSERT_CHUNKS = """
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

UPDATE_KEPT = """
UPDATE django_rag_chunk AS t
SET "index" = c.idx, page = c.page, char_start = c.cstart, char_end = c.cend, token_count = c.tokens,
    metadata = c.meta
FROM unnest(%(id)b::int8[], %(idx)b::int4[], %(page)b::int4[], %(cstart)b::int4[], %(cend)b::int4[],
            %(tokens)b::int4[], %(meta)b::jsonb[]) AS c(id, idx, page, cstart, cend, tokens, meta)
WHERE t.id = c.id
  AND (t."index", t.page, t.char_start, t.char_end, t.token_count, t.metadata)
      IS DISTINCT FROM (c.idx, c.page, c.cstart, c.cend, c.tokens, c.meta)
"""


def _embedding(chunk: ChunkData) -> list[float]:
    if chunk.embedding is None:  # upsert_many refused such chunks before writing anything
        raise ConfigurationError(f"chunk {chunk.index} has no embedding")
    return chunk.embedding


def chunk_columns(chunks: Sequence[ChunkData], *, with_text: bool) -> dict[str, list[Any]]:
    """Per-column arrays of ``chunks`` for ``INSERT_CHUNKS`` (``with_text``) or ``UPDATE_KEPT``."""
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


def copy_chunks(
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
