"""Removal at any size (issue 24, finding 11): prefixes, prunes and collections in committed batches.

One transaction took one advisory lock per document, and PostgreSQL's shared lock table holds
about ``max_locks_per_transaction * (max_connections + max_prepared_transactions)`` of them:
a prefix of 200,000 documents failed with "out of shared memory". The sizes here exceed that
capacity (read from the server's settings) more than twice over.
"""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.test import override_settings

import django_rag as rag
from django_rag.api import KnowledgeBase
from django_rag.models import Chunk, Collection, Document, TextStats
from django_rag.stores import get_store
from tests.text_index import assert_text_index_matches_chunks

RAG = {
    "EMBEDDERS": {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}},
    "COLLECTIONS": {"docs": {"TEXT_CONFIG": "english"}},
}

_BULK = """
WITH d AS (
    INSERT INTO django_rag_document (collection_id, source_id, title, source, content_type, loader,
        metadata, tags, tenant, status, status_reason, error, content_hash, created_at, updated_at)
    SELECT %(c)s, %(prefix)s || i, '', '', 'text/plain', '', '{}', '{}', %(tenant)s, 'indexed', '', '',
           md5(i::text), now(), now()
    FROM generate_series(%(first)s, %(last)s) AS i
    RETURNING id, source_id
)
INSERT INTO django_rag_chunk (document_id, collection_id, tenant, tags, "index", content, content_hash,
    token_count, char_start, char_end, metadata, search_vector, space, embedding)
SELECT d.id, %(c)s, %(tenant)s, '{}', 0, 'zebra note ' || d.source_id, md5(d.source_id), 3, 0, 20, '{}',
       to_tsvector('english', 'zebra note ' || d.source_id), %(space)s, array_fill(0.125, ARRAY[64])::vector
FROM d
"""


@pytest.fixture(autouse=True)
def rag_settings():
    with override_settings(RAG=RAG):
        yield


def lock_capacity() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('max_locks_per_transaction')::int"
            " * (current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int)"
        )
        return int(cursor.fetchone()[0])


def bulk_documents(kb: Collection, prefix: str, count: int, *, tenant: str = "") -> None:
    """``count`` documents ``<prefix><n>`` of one chunk each, straight in SQL, in statements of
    500 as ingestion writes them (the triggers keep the text index as for any write)."""
    with connection.cursor() as cursor:
        for first in range(0, count, 500):
            last = min(first + 500, count) - 1
            values = {"c": kb.pk, "prefix": prefix, "tenant": tenant, "space": kb.space}
            cursor.execute(_BULK, {**values, "first": first, "last": last})


@pytest.mark.django_db(transaction=True)
def test_a_prefix_larger_than_the_lock_table_is_removed_in_batches_with_progress() -> None:
    count = 2 * lock_capacity() + 5_000  # 17,800 with PostgreSQL's defaults
    kb = rag.collection("docs")
    bulk_documents(kb, "bulk/", count)
    kb.index([rag.RagDocument("keep/me", "zebra kept apart"), rag.RagDocument("bulky", "not under bulk/")])
    batches: list[int] = []

    removed = kb.remove(prefix="bulk", progress=batches.append)

    assert removed == count == sum(batches) and len(batches) >= count // 500
    assert set(Document.objects.values_list("source_id", flat=True)) == {"keep/me", "bulky"}
    assert Chunk.objects.count() == 2
    assert_text_index_matches_chunks()
    assert [hit.source_id for hit in kb.search("zebra", mode="text")] == ["keep/me"]


@pytest.mark.django_db(transaction=True)
def test_a_collection_of_any_size_is_deleted_in_batches() -> None:
    count = 2 * lock_capacity() + 5_000
    kb = rag.collection("docs")
    bulk_documents(kb, "a/", count, tenant="acme")
    bulk_documents(kb, "g/", 100, tenant="globex")
    other = rag.collection("other", create=True)
    other.index([rag.RagDocument("stays", "zebra elsewhere")])
    batches: list[int] = []

    total, per_model = kb.delete(progress=batches.append)

    assert per_model == {"django_rag.Document": count + 100, "django_rag.Collection": 1}
    assert sum(batches) == count + 100 and total == count + 101
    assert not Collection.objects.filter(name="docs").exists()
    assert list(Document.objects.values_list("source_id", flat=True)) == ["stays"]
    assert not TextStats.objects.filter(collection_id=kb.pk).exists()
    assert_text_index_matches_chunks()


@pytest.mark.django_db(transaction=True)
def test_prune_of_a_folder_larger_than_the_lock_table(tmp_path: Path) -> None:
    count = 2 * lock_capacity() + 5_000
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "still-here.md").write_text("a file that stays")
    kb = rag.collection("docs")
    bulk_documents(kb, "kb/gone-", count)
    Document.objects.filter(source_id__startswith="kb/gone-").update(source=str(folder / "gone"))
    out = io.StringIO()

    call_command("rag_ingest", str(folder), "--prune", "--json", root=str(tmp_path), stdout=out, verbosity=0)

    assert Document.objects.filter(source_id__startswith="kb/gone-").count() == 0
    assert list(Document.objects.values_list("source_id", flat=True)) == ["kb/still-here.md"]
    assert_text_index_matches_chunks()


def _text(source_id: str, version: int) -> str:
    return f"{source_id} version {version} " + "zebra " * (version % 5 + 1)


@pytest.mark.django_db(transaction=True)
def test_a_removal_stays_correct_against_concurrent_writers_of_the_same_documents() -> None:
    """A writer re-indexes documents of the prefix while the removal runs through it.

    Each document is removed whole under its lock: it ends either gone (the removal reached it
    after the writer, or the writer never came) or present and complete with the writer's last
    version (the writer came after the removal had passed it); never a document without its
    chunks, a chunk of a removed document, or a text index that disagrees with the chunks.
    """
    kb = rag.collection("docs")
    ids = [f"p/{n:04}" for n in range(1_500)]
    kb.index([rag.RagDocument(sid, _text(sid, 0)) for sid in ids])
    written: dict[str, int] = {}  # the last version the writer committed, per document
    started, errors = threading.Event(), []

    def writer() -> None:
        try:
            store_kb = rag.collection("docs")
            started.wait(10)
            version = 1
            while not finished.is_set():
                # From the end of the prefix: the removal (in id order) reaches them last, so the
                # writer's documents are met both before and after the removal passed them.
                batch = ids[-300:][version % 10 :: 10]
                store_kb.index([rag.RagDocument(sid, _text(sid, version)) for sid in batch])
                written.update(dict.fromkeys(batch, version))
                version += 1
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            connections.close_all()

    def progress(n: int) -> None:
        started.set()
        time.sleep(0.05)  # give the writer room between batches

    finished = threading.Event()
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        removed = get_store(kb.using).delete(kb, prefix="p", progress=progress, batch_size=50)
    finally:
        finished.set()
        thread.join(60)

    assert errors == []
    assert written, "the writer never ran during the removal"
    remaining = dict(Document.objects.values_list("source_id", "content_hash"))
    assert set(remaining) <= set(written), "a document the writer never touched survived"
    assert removed >= len(ids) - len(remaining)
    for source_id in remaining:
        document = Document.objects.get(source_id=source_id)
        contents = list(Chunk.objects.filter(document=document).values_list("content", flat=True))
        assert document.status == "indexed" and contents == [_text(source_id, written[source_id]).strip()]
    assert not Chunk.objects.exclude(document__in=Document.objects.all()).exists()
    assert_text_index_matches_chunks()


@pytest.mark.django_db(transaction=True)
def test_a_document_moved_out_of_scope_while_queued_for_removal_stays() -> None:
    kb: KnowledgeBase = rag.collection("docs")
    kb.index([rag.RagDocument(f"p/{n}", f"text {n}") for n in range(10)], tenant="acme")
    store = get_store(kb.using)
    moved: list[Any] = []

    def progress(n: int) -> None:
        if not moved:  # after the first batch: p/9 goes to another tenant before its batch is locked
            moved.append(store.rescope(kb, prefix="p/9", tenant="globex", tags=[]))

    store.delete(kb, prefix="p", tenant="acme", progress=progress, batch_size=3)

    assert list(Document.objects.values_list("tenant", "source_id")) == [("globex", "p/9")]
    assert Chunk.objects.filter(document__source_id="p/9", tenant="globex").count() == 1
