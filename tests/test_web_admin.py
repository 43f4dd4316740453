"""The admin of the knowledge base: collection health, documents and their actions, the retrieval
test page with the figures behind each rank, the query log report, and pruning the log."""

from __future__ import annotations

import datetime
import html

import pytest
from django.contrib.auth.models import Permission, User
from django.core.checks import run_checks
from django.core.files.base import ContentFile
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

import django_rag as rag
from django_rag.models import Chunk, Document, IngestJob
from django_rag.web.explain import explain
from django_rag.web.models import QueryLog
from tests.mediaapp.models import Upload
from tests.web_support import set_web

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.conftest_web"]

TEXTS = [
    rag.RagDocument("a", "Snapshots are kept for thirty days; snapshots run nightly."),
    rag.RagDocument("b", "Invoices are mailed monthly. Snapshots of invoices are archived."),
    rag.RagDocument("c", "Restores take an hour and are requested from support."),
]


@pytest.fixture
def admin_client(web) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x"))
    return client


def text(response) -> str:
    return html.unescape(response.content.decode())


def test_the_collection_page_shows_status_counts_spaces_checks_and_settings_read_only(
    web, admin_client
) -> None:
    kb = rag.collection("docs")
    kb.index(TEXTS, tenant="acme")
    Document.objects.filter(source_id="c").update(status=Document.Status.FAILED)
    page = text(admin_client.get(f"/admin/django_rag/collection/{kb.pk}/change/"))
    assert "<td>indexed</td><td>2</td>" in page and "<td>failed</td><td>1</td>" in page
    assert f"<td>{kb.space} ✓</td><td>3</td><td>no: run manage.py rag_migration</td>" in page
    assert "django_rag.W001" in page  # the space has no ANN index: the check says so here too
    assert "<td>TEXT_CONFIG</td><td>'english'</td>" in page
    assert 'name="text_config"' not in page  # declared in settings: not editable here
    assert "Test retrieval" in page


def test_the_reindex_action_of_a_collection_moves_old_spaces_and_schedules_rows(
    web, admin_client, committed
) -> None:
    with committed():
        Upload.objects.create(file=ContentFile(b"Snapshots kept a month.", name="u.txt"), tenant="acme")
    kb = rag.collection("docs")
    response = admin_client.post(
        "/admin/django_rag/collection/",
        {"action": "reindex_collections", "_selected_action": [kb.pk]},
        follow=True,
    )
    assert "docs: 1 documents scheduled from their rows, 0 moved" in text(response).lower()


def test_the_document_page_lists_chunks_with_page_and_tokens_and_links_its_row(
    web, admin_client, committed
) -> None:
    with committed():
        row = Upload.objects.create(file=ContentFile(b"Snapshots kept a month.", name="u.txt"), tenant="acme")
    document = Document.objects.get(source_id=f"mediaapp.upload:{row.pk}")
    page = text(admin_client.get(f"/admin/django_rag/document/{document.pk}/change/"))
    chunk = Chunk.objects.get(document=document)
    assert f"<td>0</td><td>-</td><td>{chunk.token_count}</td>" in page
    assert "came from" in page.lower() and "upload:" in page.lower()
    listing = text(admin_client.get("/admin/django_rag/document/", {"q": "uploads/u"}))
    assert "By content type" in listing and "By tenant" in listing
    assert "1 document" in listing


def test_document_actions_remove_from_the_index_and_retry_failed(web, admin_client, committed) -> None:
    with committed():
        row = Upload.objects.create(file=ContentFile(b"Snapshots kept a month.", name="u.txt"), tenant="acme")
    document = Document.objects.get(source_id=f"mediaapp.upload:{row.pk}")
    Document.objects.filter(pk=document.pk).update(status=Document.Status.FAILED, error="boom")
    response = admin_client.post(
        "/admin/django_rag/document/",
        {"action": "retry_failed", "_selected_action": [document.pk]},
        follow=True,
    )
    assert "1 item scheduled for re-indexing." in text(response)
    assert Document.objects.get(pk=document.pk).status == Document.Status.INDEXED
    response = admin_client.post(
        "/admin/django_rag/document/",
        {"action": "remove_from_index", "_selected_action": [document.pk]},
        follow=True,
    )
    assert "1 document removed from the index." in text(response)
    assert not Chunk.objects.filter(document_id=document.pk).exists()
    assert Upload.objects.filter(pk=row.pk).exists()  # the row stays


def test_staff_see_the_documents_of_their_scope_only(web) -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("mine", "Acme text.")], tenant="acme")
    kb.index([rag.RagDocument("theirs", "Globex text.")], tenant="globex")
    alice = User.objects.create_user("alice", is_staff=True)
    alice.user_permissions.add(Permission.objects.get(codename="view_document"))
    client = Client()
    client.force_login(alice)
    listing = text(client.get("/admin/django_rag/document/"))
    assert ">mine<" in listing and ">theirs<" not in listing


def test_the_retrieval_test_explains_each_hybrid_hit(web, admin_client) -> None:
    kb = rag.collection("docs")
    kb.index(TEXTS, tenant="acme")
    params = {
        "q": "snapshots kept",
        "mode": "hybrid",
        "k": 3,
        "candidates": 50,
        "vector_weight": 1,
        "text_weight": 2,
        "rrf_k": 60,
    }
    response = admin_client.get(f"/admin/django_rag/collection/{kb.pk}/retrieval-test/", params)
    assert response.status_code == 200
    page = text(response)
    assert (
        "Query terms (after the collection's text configuration): <code>kept</code>, <code>snapshot</code>"
        in page
    )
    explained = response.context["explanation"].hits
    vector = {h.source_id: h.score for h in kb.search("snapshots kept", k=3, mode="vector")}
    bm25 = {h.source_id: h.score for h in kb.search("snapshots kept", k=3, mode="text")}
    for item in explained:
        hit = item.hit
        assert item.similarity == pytest.approx(vector[hit.source_id], abs=1e-5)
        if item.text_rank is not None:
            assert item.bm25 == pytest.approx(bm25[hit.source_id], rel=1e-9)
            assert sum(weight for _, weight in item.terms) == pytest.approx(item.bm25)
        expected = (1 / (60 + item.vector_rank) if item.vector_rank else 0) + (
            2 / (60 + item.text_rank) if item.text_rank else 0
        )
        assert item.fused == pytest.approx(expected)
    top = explained[0]
    assert top.hit.source_id == "a" and dict(top.terms).keys() == {"snapshot", "kept"}
    assert explained[-1].missing  # a chunk without one of the query terms says which


def test_term_contributions_follow_bm25_idf_a_rare_term_weighs_more(web) -> None:
    kb = rag.collection("docs")
    kb.index(TEXTS, tenant="acme")
    hits = kb.search("snapshots thirty", k=1, mode="text")
    terms = dict(explain(kb, "snapshots thirty", hits, mode="text").hits[0].terms)
    # "thirty" is in 1 of 3 chunks, "snapshot" in 2: same tf, so the rarer term contributes more.
    assert terms["thirti"] > terms["snapshot"] > 0


def test_the_retrieval_test_refuses_bad_input_with_a_message(web, admin_client) -> None:
    kb = rag.collection("docs")
    url = f"/admin/django_rag/collection/{kb.pk}/retrieval-test/"
    base = {"q": "x", "mode": "hybrid", "k": 5, "vector_weight": 1, "text_weight": 1, "rrf_k": 60}
    assert admin_client.get(url, {**base, "k": 0}).status_code == 400
    response = admin_client.get(url, {**base, "candidates": 2})
    assert response.status_code == 400 and "Candidates must be at least k." in text(response)
    assert admin_client.get(url, {**base, "mode": "fuzzy"}).status_code == 400
    assert admin_client.get("/admin/django_rag/collection/999999/retrieval-test/").status_code == 404


def test_the_query_report_lists_frequent_and_zero_hit_queries(web, admin_client) -> None:
    for query, hits in [
        ("Backups", 3),
        ("backups ", 2),
        ("backups", 1),
        ("zebra", 0),
        ("Zebra", 0),
        ("x", 1),
    ]:
        QueryLog.objects.create(kind="search", query=query, mode="text", collection="docs", hit_count=hits)
    page = text(admin_client.get("/admin/django_rag/querylog/report/"))
    frequent = page.split('id="frequent-queries"')[1].split("</table>")[0]
    zero = page.split('id="zero-hit-queries"')[1].split("</table>")[0]
    assert frequent.index("<td>backups</td><td>3</td><td>2.0</td>") < frequent.index(
        "<td>zebra</td><td>2</td>"
    )
    assert "<td>zebra</td><td>2</td>" in zero and "backups" not in zero
    assert "Frequent and zero-hit queries" in text(admin_client.get("/admin/django_rag/querylog/"))


def test_the_query_log_list_shows_feedback(web, admin_client) -> None:
    QueryLog.objects.create(
        kind="ask", query="q?", mode="vector", collection="docs", feedback=1, feedback_comment="spot on"
    )
    page = text(admin_client.get("/admin/django_rag/querylog/"))
    assert "👍 helpful</span>: spot on" in page


def test_rag_prune_queries_deletes_entries_older_than_the_retention(web, settings) -> None:
    old = QueryLog.objects.create(kind="search", query="old", mode="text", collection="docs")
    QueryLog.objects.filter(pk=old.pk).update(created_at=timezone.now() - datetime.timedelta(days=91))
    QueryLog.objects.create(kind="search", query="new", mode="text", collection="docs")
    call_command("rag_prune_queries", verbosity=0)
    assert list(QueryLog.objects.values_list("query", flat=True)) == ["new"]
    set_web(settings, LOG_RETENTION_DAYS=0)
    call_command("rag_prune_queries", verbosity=0)
    assert not QueryLog.objects.exists()


def test_misconfigured_web_settings_are_reported_by_checks(web, settings) -> None:
    set_web(
        settings, SCOP="x", SCOPE="no.such.module.scope", ASK_RATE="lots", COLLECTIONS=["nope"], PAGE_SIZE=0
    )
    ids = {message.id for message in run_checks()}
    assert {
        "django_rag.E120",
        "django_rag.E121",
        "django_rag.E122",
        "django_rag.E124",
        "django_rag.E125",
    } <= ids


def test_staff_count_only_the_documents_of_their_scope_on_the_collection_page(web) -> None:
    kb = rag.collection("docs")
    kb.index(TEXTS[:2], tenant="acme")
    kb.index(TEXTS, tenant="globex")
    alice = User.objects.create_user("alice", is_staff=True)
    alice.user_permissions.add(Permission.objects.get(codename="view_collection"))
    client = Client()
    client.force_login(alice)
    page = text(client.get(f"/admin/django_rag/collection/{kb.pk}/change/"))
    assert "<td>indexed</td><td>2</td><td>2</td>" in page
    assert f"<td>{kb.space} ✓</td><td>2</td>" in page


def test_ingest_jobs_are_listed_read_only_with_their_progress(web, admin_client) -> None:
    kb = rag.collection("docs")
    job = IngestJob.objects.create(
        collection=kb, queue="django_rag.docs", total=40, batches=3, batches_done=2, loaded=25, failed=2
    )
    listing = text(admin_client.get("/admin/django_rag/ingestjob/"))
    assert "27 / 40" in listing and "django_rag.docs" in listing
    page = text(admin_client.get(f"/admin/django_rag/ingestjob/{job.pk}/change/"))
    assert "2 / 3" in page  # batches done
    assert 'name="_save"' not in page
    assert admin_client.get("/admin/django_rag/ingestjob/add/").status_code == 403


def test_staff_see_only_the_query_log_entries_and_ingest_jobs_of_their_scope(web) -> None:
    notes, docs = rag.collection("notes"), rag.collection("docs")
    for tenant in ("acme", "globex"):
        for name in ("notes", "docs"):
            QueryLog.objects.create(
                kind="search", query=f"{tenant}-{name}", mode="text", collection=name, tenant=tenant
            )
        for kb in (notes, docs):
            IngestJob.objects.create(collection=kb, tenant=tenant, queue=f"queue-{tenant}-{kb.name}")
    dave = User.objects.create_user("dave", is_staff=True)  # tenant acme, collection notes
    dave.user_permissions.add(*Permission.objects.filter(codename__in=["view_querylog", "view_ingestjob"]))
    client = Client()
    client.force_login(dave)
    log = text(client.get("/admin/django_rag/querylog/"))
    assert "acme-notes" in log
    assert all(other not in log for other in ("acme-docs", "globex-notes", "globex-docs"))
    jobs = text(client.get("/admin/django_rag/ingestjob/"))
    assert "queue-acme-notes" in jobs
    assert all(other not in jobs for other in ("queue-acme-docs", "queue-globex-notes", "queue-globex-docs"))
