"""How chunk rows are written: vector-only COPY path, vectors kept in the row, exact round trips."""

from __future__ import annotations

import hashlib
import random

import pytest
from django.db import connection
from django.test import override_settings

import django_rag as rag
from django_rag.models import Chunk, Document
from django_rag.stores.base import DocumentInfo
from django_rag.stores.pgvector import PgVectorStore
from django_rag.types import ChunkData

pytestmark = pytest.mark.django_db

HASHING = {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}}


def chunk(index: int, text: str, dims: int, seed: int) -> ChunkData:
    rng = random.Random(seed)
    return ChunkData(
        index=index,
        content=text,
        content_hash=hashlib.sha1(text.encode()).hexdigest(),
        token_count=len(text) // 4,
        page=index + 1,
        char_start=index * 10,
        char_end=index * 10 + len(text),
        metadata={"n": index, "note": "ü"},
        embedding=[rng.uniform(-1, 1) for _ in range(dims)],
    )


@pytest.mark.parametrize("text_search", [True, False])
def test_both_write_paths_store_every_column_exactly(text_search: bool) -> None:
    collections = {"kb": {"TEXT_SEARCH": text_search}}
    with override_settings(RAG={"EMBEDDERS": HASHING, "COLLECTIONS": collections}):
        kb = rag.collection("kb")
        items = [
            (
                DocumentInfo("a", tags=["x", "y"], tenant="acme"),
                [chunk(0, "alpha", 64, 1), chunk(1, "beta", 64, 2)],
            ),
            (DocumentInfo("b", tenant="other"), [chunk(0, "gamma", 64, 3)]),
        ]
        result = PgVectorStore().upsert_many(kb, items, space="hashing:64")
        assert result.added == 3
        for info, expected in items:
            document = Document.objects.get(collection=kb, source_id=info.source_id)
            stored = list(Chunk.objects.filter(document=document).order_by("index"))
            assert [(c.tenant, c.tags, c.space, c.collection_id) for c in stored] == [
                (info.tenant, info.tags, "hashing:64", kb.pk)
            ] * len(expected)
            for row, want in zip(stored, expected, strict=True):
                got = (
                    row.index,
                    row.content,
                    row.content_hash,
                    row.token_count,
                    row.page,
                    row.char_start,
                    row.char_end,
                    row.metadata,
                )
                assert got == (
                    want.index,
                    want.content,
                    want.content_hash,
                    want.token_count,
                    want.page,
                    want.char_start,
                    want.char_end,
                    want.metadata,
                )
                # float4 in the database: equal to the float32 rounding of what went in.
                assert list(row.embedding) == pytest.approx(want.embedding, abs=1e-6)
                assert (row.search_vector is not None) is text_search


def test_a_384_dim_chunk_row_keeps_its_vector_out_of_toast() -> None:
    with override_settings(RAG={"EMBEDDERS": HASHING, "COLLECTIONS": {"kb": {}}}):
        kb = rag.collection("kb")
        text = "A paragraph of about a thousand characters. " * 23
        PgVectorStore().upsert_many(kb, [(DocumentInfo("a"), [chunk(0, text, 384, 7)])], space="minilm:384")
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltoastrelid::regclass FROM pg_class WHERE relname = 'django_rag_chunk'")
        toast = cursor.fetchone()[0]
        cursor.execute(f"SELECT count(*) FROM {toast}")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT pg_column_size(embedding), pg_column_size(content) FROM django_rag_chunk")
        vector_bytes, _ = cursor.fetchone()
        assert vector_bytes == 4 + 4 * 384 + 4  # varlena header + dims/unused + floats, inline


def test_a_vector_only_collection_resyncs_by_hash_like_any_other() -> None:
    collections = {"kb": {"TEXT_SEARCH": False, "CHUNK_SIZE": 16, "CHUNK_OVERLAP": 0}}
    paragraphs = [f"Paragraph {i} keeps its own distinct words here." for i in range(6)]
    with override_settings(RAG={"EMBEDDERS": HASHING, "COLLECTIONS": collections}):
        kb = rag.collection("kb")
        first = kb.index([rag.RagDocument("doc", "\n\n".join(paragraphs))])
        paragraphs[2] = "Paragraph 2 was rewritten with other words."
        second = kb.index([rag.RagDocument("doc", "\n\n".join(paragraphs))])
        assert (first.added, first.embedded) == (6, 6)
        assert (second.added, second.removed, second.unchanged, second.embedded) == (1, 1, 5, 1)
        stored = list(Chunk.objects.filter(collection=kb).order_by("index").values_list("content", flat=True))
        assert stored == paragraphs
        assert kb.search("rewritten with other words", k=1)[0].chunk.content == paragraphs[2]
