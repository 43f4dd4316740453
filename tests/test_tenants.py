"""A document belongs to its tenant: writes in one tenant never alter, move or delete another's."""

from __future__ import annotations

import pytest

import django_rag as rag
from django_rag.ingest.rows import document_for
from django_rag.models import Chunk, Document
from tests.mediaapp.models import Note

pytestmark = pytest.mark.django_db

URL = "https://example.com/shared-page"


def stored(tenant: str) -> list[str]:
    return list(
        Chunk.objects.filter(document__source_id=URL, tenant=tenant)
        .order_by("index")
        .values_list("content", flat=True)
    )


def test_two_tenants_index_reindex_and_remove_the_same_source_id_each_keeping_its_own() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument(URL, "Acme's copy: backups run nightly.")], tenant="acme")
    first = Document.objects.get(source_id=URL, tenant="acme")
    kb.index([rag.RagDocument(URL, "Globex's copy: backups run weekly.")], tenant="globex")
    assert Document.objects.filter(source_id=URL).count() == 2
    assert stored("acme") == ["Acme's copy: backups run nightly."]
    assert stored("globex") == ["Globex's copy: backups run weekly."]

    kb.index([rag.RagDocument(URL, "Globex's copy, edited: backups run daily.")], tenant="globex")
    again = Document.objects.get(source_id=URL, tenant="acme")
    assert (again.pk, again.content_hash, again.updated_at) == (
        first.pk,
        first.content_hash,
        first.updated_at,
    )
    assert stored("acme") == ["Acme's copy: backups run nightly."]
    assert stored("globex") == ["Globex's copy, edited: backups run daily."]

    assert kb.remove(source_id=URL, tenant="globex") == 1
    assert stored("acme") == ["Acme's copy: backups run nightly."] and stored("globex") == []
    assert kb.remove(prefix="https://example.com", tenant="globex") == 0
    assert kb.remove(prefix="https://example.com", tenant="acme") == 1


def test_search_sees_only_its_tenants_copy() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument(URL, "Acme's copy: backups run nightly.")], tenant="acme")
    kb.index([rag.RagDocument(URL, "Globex's copy: backups run weekly.")], tenant="globex")
    for mode in ("vector", "text", "hybrid"):
        hits = kb.search("backups", k=5, mode=mode, tenant="acme")
        assert [hit.content for hit in hits] == ["Acme's copy: backups run nightly."], mode


def test_a_sync_result_reveals_nothing_of_another_tenants_text() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("a", "A confidential sentence only acme wrote.")], tenant="acme")
    result = kb.index([rag.RagDocument("b", "A confidential sentence only acme wrote.")], tenant="globex")
    # Reusing acme's stored vector would tell globex that acme holds this exact text (embedded == 0).
    assert result.embedded == 1
    same_tenant = kb.index([rag.RagDocument("c", "A confidential sentence only acme wrote.")], tenant="acme")
    assert same_tenant.embedded == 0


def test_a_row_that_moves_tenant_leaves_no_document_behind(committed) -> None:
    with committed():
        note = Note.objects.create(title="Plan", body="The launch plan for next quarter.", tenant="acme")
    notes = rag.collection("notes")
    assert [hit.source_id for hit in notes.search("launch plan", k=3, tenant="acme")] == [
        f"mediaapp.note:{note.pk}"
    ]
    with committed():
        note.tenant = "globex"
        note.save()
    assert notes.search("launch plan", k=3, tenant="acme") == []
    assert [hit.source_id for hit in notes.search("launch plan", k=3, tenant="globex")] == [
        f"mediaapp.note:{note.pk}"
    ]
    assert list(
        Document.objects.filter(source_id=f"mediaapp.note:{note.pk}").values_list("tenant", flat=True)
    ) == ["globex"]
    assert document_for(note).tenant == "globex"


def test_a_tenant_and_a_source_id_that_spell_the_same_text_are_different_documents() -> None:
    kb = rag.collection("docs")
    # Joined naively, ("a:b", "c") and ("a", "b:c") would share a lock key or a row.
    kb.index([rag.RagDocument("c", "first document")], tenant="a:b")
    kb.index([rag.RagDocument("b:c", "second document")], tenant="a")
    assert Document.objects.filter(collection=kb).count() == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_broker")
def test_a_queued_row_that_moves_tenant_is_out_of_reach_before_its_job_runs(settings) -> None:
    # No broker: the save queues a Tasks API job in the database; no worker runs it here.
    settings.RAG = {**settings.RAG, "ASYNC": True}
    from django_rag.ingest.rows import ingest_instance

    note = Note.objects.create(title="Plan", body="The launch plan for next quarter.", tenant="acme")
    ingest_instance("mediaapp", "note", note.pk)  # what the job would have done
    notes = rag.collection("notes")
    assert notes.search("launch plan", k=3, tenant="acme")
    note.tenant = "globex"
    note.save()  # autocommit: the on_commit callbacks run now, and queue the re-ingestion
    assert notes.search("launch plan", k=3, tenant="acme") == []
    assert [hit.source_id for hit in notes.search("launch plan", k=3, tenant="globex")] == [
        f"mediaapp.note:{note.pk}"
    ]
    assert Document.objects.get(source_id=f"mediaapp.note:{note.pk}").status == Document.Status.PENDING
