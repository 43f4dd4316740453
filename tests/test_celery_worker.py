"""Ingestion through real Celery workers on the Redis at 127.0.0.1:6379 (tests/workers.py).

Rows are committed by this process; a worker subprocess ingests them from the same test database.
"""

from __future__ import annotations

import json
import time

import pytest
from django.core.files.base import ContentFile
from django.core.management import call_command
from django.db.models import Count
from django.utils import timezone

import django_rag as rag
from django_rag.ingest.chunking import chunk_document
from django_rag.ingest.rows import document_for
from django_rag.models import Chunk, Document
from django_rag.testing import OpenAICompatibleServer
from tests.mediaapp.models import Note, Upload
from tests.workers import Worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = (
    "Backups run every night at two. Snapshots are kept for thirty days.\n\n"
    "Restores are requested from the support desk and take about an hour.\n\n"
    "Invoices are sent on the first day of each month by email."
)
LONG = "\n\n".join(f"Section {number}. {HANDBOOK}" for number in range(12))


def indexed(source_id: str, worker: Worker, **filters: object) -> Document:
    return wait_for(
        lambda: Document.objects.filter(source_id=source_id, status="indexed", **filters).first(),
        30,
        f"{source_id} to be indexed",
        worker,
    )


def contents(document: Document) -> str:
    return " ".join(Chunk.objects.filter(document=document).values_list("content", flat=True))


def test_a_saved_row_is_indexed_by_the_worker_and_found_by_search(via_celery, worker) -> None:
    note = Note.objects.create(title="Backups", body=HANDBOOK, tenant="acme")
    indexed(f"mediaapp.note:{note.pk}", worker)
    hits = rag.collection("notes").search("how long are snapshots kept", k=3, tenant="acme")
    assert hits[0].source_id == f"mediaapp.note:{note.pk}"
    assert "django_rag.ingest" in worker.log_text()


def test_an_updated_row_is_resynced_by_the_worker(via_celery, worker) -> None:
    note = Note.objects.create(title="Handbook", body=LONG)
    first = indexed(f"mediaapp.note:{note.pk}", worker)
    note.body = LONG + "\n\nA new closing paragraph about the holiday schedule."
    note.save()
    document = wait_for(lambda: "holiday" in contents(first) and first, 30, "the new paragraph", worker)
    assert Document.objects.filter(source_id=f"mediaapp.note:{note.pk}").count() == 1
    assert "holiday" in contents(document)


def test_a_deleted_row_is_removed_by_the_worker(via_celery, worker) -> None:
    note = Note.objects.create(title="Temporary", body="Soon gone.")
    source_id = f"mediaapp.note:{note.pk}"
    indexed(source_id, worker)
    note.delete()
    wait_for(lambda: not Document.objects.filter(source_id=source_id).exists(), 30, "removal", worker)
    assert not rag.collection("notes").search("soon gone", k=3)


def test_a_burst_of_50_uploads_is_all_indexed_without_duplicate_chunks(via_celery, worker, report) -> None:
    started = time.perf_counter()
    for number in range(50):
        Upload.objects.create(
            file=ContentFile(f"Upload {number}. {HANDBOOK}".encode(), name=f"burst-{number}.txt")
        )
    saved = time.perf_counter() - started
    uploads = Document.objects.filter(source_id__startswith="mediaapp.upload:")
    wait_for(lambda: uploads.filter(status="indexed").count() == 50, 90, "50 indexed uploads", worker)
    elapsed = time.perf_counter() - started
    report(
        f"50-upload burst: 50 saves took {saved:.2f}s; all 50 indexed {elapsed:.2f}s after the first save "
        f"({50 / elapsed:.1f} uploads/s, one prefork worker x2)"
    )
    duplicates = (
        Chunk.objects.filter(document__in=uploads).values("document_id", "index").annotate(n=Count("id"))
    ).filter(n__gt=1)
    assert not duplicates.exists()
    assert Chunk.objects.filter(document__in=uploads).count() == 50  # one chunk per short upload
    assert uploads.count() == 50


def test_rag_reindex_async_hands_rows_to_the_worker(via_celery, worker, settings) -> None:
    settings.RAG = {**settings.RAG, "MEDIA": {**settings.RAG["MEDIA"], "SIGNALS": False}}
    notes = [Note.objects.create(title=f"Imported {number}", body=HANDBOOK) for number in range(3)]
    assert not Document.objects.exists()
    call_command("rag_reindex", "mediaapp.Note", "--async", verbosity=0)
    for note in notes:
        indexed(f"mediaapp.note:{note.pk}", worker)


def route_to(settings, queue: str) -> None:
    settings.RAG = {**settings.RAG, "MEDIA": {**settings.RAG["MEDIA"], "QUEUE": queue}}


@pytest.fixture
def own_queue(via_celery, settings):
    """Route this test's ingestion to a queue of its own, consumed only by the workers it starts."""
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-{time.monotonic_ns()}"
    route_to(settings, queue)
    return queue


@pytest.fixture(scope="module")
def flaky_embedder():
    with OpenAICompatibleServer(dimensions=64) as server:
        yield server


@pytest.fixture(scope="module")
def remote_worker(flaky_embedder, celery_app, django_db_setup, tmp_path_factory):
    """A worker whose embedder is the OpenAI backend against a loopback server, without its own retries."""
    from django.conf import settings

    embedder = {
        "BACKEND": "django_rag.embedders.openai.OpenAIEmbedder",
        "MODEL": "hashing",  # the hashing space, so this process can search what it wrote
        "DIMENSIONS": 64,
        "BASE_URL": flaky_embedder.base_url,
        "API_KEY": "test",
        "MAX_RETRIES": 0,
    }
    env = {"DJANGO_RAG_TEST_RAG": json.dumps({"EMBEDDERS": {"default": embedder}})}
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-remote"
    started = Worker("remote", queue, tmp_path_factory.mktemp("remote"), env=env).start()
    yield started
    started.stop()


@pytest.fixture
def via_remote_worker(remote_worker, flaky_embedder, via_celery, settings):
    route_to(settings, remote_worker.queue)
    flaky_embedder.reset()
    yield remote_worker
    remote_worker.wait_idle()


def test_an_embedder_503_is_retried_with_backoff_until_it_succeeds(flaky_embedder, via_remote_worker) -> None:
    retries_before = via_remote_worker.log_text().count("Retry in")
    flaky_embedder.fail_next(2, status=503)
    row = Upload.objects.create(file=ContentFile(HANDBOOK.encode(), name="retried.txt"))
    indexed(f"mediaapp.upload:{row.pk}", via_remote_worker)
    assert len(flaky_embedder.requests) == 3
    assert via_remote_worker.log_text().count("Retry in") - retries_before == 2


def test_an_embedder_that_keeps_failing_leaves_the_document_failed(flaky_embedder, via_remote_worker) -> None:
    finished_before = via_remote_worker.log_text().count("succeeded")
    flaky_embedder.fail_next(10, status=429)
    row = Upload.objects.create(file=ContentFile(HANDBOOK.encode(), name="doomed.txt"))
    wait_for(
        lambda: via_remote_worker.log_text().count("succeeded") > finished_before,
        30,
        "the last attempt",
        via_remote_worker,
    )
    document = Document.objects.get(source_id=f"mediaapp.upload:{row.pk}")
    assert len(flaky_embedder.requests) == 4  # the first attempt and MAX_RETRIES = 3 retries
    assert (document.status, "HTTP 429" in document.error) == ("failed", True)


@pytest.mark.parametrize("moment", ["while-embedding", "after-writing"])
def test_a_worker_killed_mid_ingestion_is_redelivered_and_leaves_one_copy(
    moment, own_queue, tmp_path, django_db_setup, report
) -> None:
    marker = tmp_path / "paused"
    if moment == "while-embedding":
        pausing = {"BACKEND": "tests.doubles.PausingEmbedder", "DIMENSIONS": 64, "MARKER": str(marker)}
        env = {"DJANGO_RAG_TEST_RAG": json.dumps({"EMBEDDERS": {"default": pausing}})}
    else:  # the chunks are committed, the task has not been acknowledged
        env = {"DJANGO_RAG_TEST_PAUSE_AFTER_INDEXED": str(marker)}
    doomed = Worker("doomed", own_queue, tmp_path, env=env).start()
    try:
        row = Upload.objects.create(file=ContentFile(LONG.encode(), name="killed.txt"))
        wait_for(marker.exists, 30, "the worker to be mid-ingestion", doomed)
        killed_at = timezone.now()
        doomed.kill()
    finally:
        doomed.stop()
    survivor = Worker("survivor", own_queue, tmp_path).start()
    try:
        document = indexed(f"mediaapp.upload:{row.pk}", survivor, updated_at__gt=killed_at)
    finally:
        survivor.stop()
    redelivered = (timezone.now() - killed_at).total_seconds()
    # Chunked as the pipeline does: with the upload's title as the contextual header.
    titled = rag.RagDocument("x", LONG, metadata={"title": document.title})
    expected = chunk_document(titled, chunk_size=256, chunk_overlap=32, context_headers=True)
    stored = Chunk.objects.filter(document=document)
    report(
        f"worker killed {moment}: task redelivered to a new worker and indexed {redelivered:.1f}s after "
        f"the kill; {stored.count()} chunks stored for {len(expected)} expected"
    )
    assert len(expected) > 1
    assert sorted(stored.values_list("content_hash", flat=True)) == sorted(c.content_hash for c in expected)
    assert Document.objects.filter(source_id=f"mediaapp.upload:{row.pk}").count() == 1
    assert "django_rag.ingest" in survivor.log_text()


def queued_while_no_worker_listens(settings) -> Note:
    """A note indexed inline, then edited with its task left waiting on a queue nobody consumes."""
    settings.RAG = {**settings.RAG, "ASYNC": False}
    note = Note.objects.create(title="Queued", body="Indexed inline first.")
    settings.RAG = {**settings.RAG, "ASYNC": True}
    note.body = "Then edited while no worker listens."
    note.save()
    return note


def test_a_row_waiting_for_a_worker_is_marked_pending(own_queue, settings) -> None:
    note = queued_while_no_worker_listens(settings)
    assert document_for(note).status == "pending"
    assert "Indexed inline" in contents(document_for(note))  # searchable as it was until then


def test_rag_reindex_changed_only_catches_up_a_pending_row(own_queue, settings) -> None:
    note = queued_while_no_worker_listens(settings)
    settings.RAG = {**settings.RAG, "ASYNC": False}
    call_command("rag_reindex", "mediaapp.Note", "--changed-only", verbosity=0)
    assert document_for(note).status == "indexed"
    assert "Then edited" in contents(document_for(note))
