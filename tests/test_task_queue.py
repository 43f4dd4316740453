"""No Celery broker: a saved row is queued in the database and ingested by a worker, never in the request.

The queue is Django's Tasks API with django-tasks-db's ``DatabaseBackend`` (tests/settings.py);
the worker is its real ``manage.py db_worker`` command, in a process of its own, started after
the request has returned (so the job also survives the web process: it is a row).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path
from django_tasks_db.models import DBTaskResult

from django_rag.embedders.hashing import HashingEmbedder
from django_rag.models import Chunk, Document
from tests.mediaapp.models import Note

ROOT = Path(__file__).resolve().parent.parent
EMBED_SECONDS = 2.0


class SlowEmbedder(HashingEmbedder):
    """Takes EMBED_SECONDS per call: a request that embedded would take at least that long."""

    def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
        time.sleep(EMBED_SECONDS)
        return super()._embed(texts, kind)


def create_note(request: HttpRequest) -> HttpResponse:
    note = Note.objects.create(title=request.POST["title"], body=request.POST["body"])
    return HttpResponse(str(note.pk), status=201)


urlpatterns = [path("notes/", create_note)]

SLOW = {
    "EMBEDDERS": {"default": {"BACKEND": "tests.test_task_queue.SlowEmbedder", "DIMENSIONS": 64}},
    "COLLECTIONS": {"notes": {"TEXT_CONFIG": "simple", "CHUNK_SIZE": 256, "CHUNK_OVERLAP": 0}},
    "MEDIA": {"MAX_RETRIES": 0},
}


pytestmark = pytest.mark.usefixtures("no_broker")


def db_worker() -> subprocess.CompletedProcess[str]:
    """Run the queued jobs with the real worker command, until the queue is empty."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DJANGO_RAG_TEST_WORKER": "1"}
    return subprocess.run(
        [sys.executable, "-m", "django", "db_worker", "--batch", "--no-startup-delay", "--interval", "0.1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.mark.django_db(transaction=True)
@override_settings(ROOT_URLCONF=__name__, RAG=SLOW)
def test_a_request_that_saves_a_registered_row_returns_before_its_ingestion_runs(report) -> None:
    body = "\n\n".join(f"Paragraph {i} of a long note, words enough for a few chunks." for i in range(8000))
    assert len(body.encode()) > 500_000  # the 500 KB that blocked a create() for 153 s
    started = time.perf_counter()
    response = Client().post("/notes/", {"title": "Long note", "body": body})
    elapsed = time.perf_counter() - started
    assert response.status_code == 201
    pk = int(response.content)
    # Nothing was ingested during the request: no chunk, and the job waits in the database.
    assert elapsed < EMBED_SECONDS
    assert not Chunk.objects.filter(document__source_id=f"mediaapp.note:{pk}").exists()
    [job] = DBTaskResult.objects.all()
    assert job.task_path == "django_rag.tasks.ingest_job" and job.status == "READY"
    assert job.args_kwargs["args"][:3] == ["mediaapp", "note", pk]

    worker = db_worker()  # a worker that did not exist when the request ran
    document = Document.objects.get(source_id=f"mediaapp.note:{pk}")
    assert document.status == "indexed" and document.chunks.count() > 100
    job.refresh_from_db()
    assert job.status == "SUCCESSFUL", worker.stderr
    report(f"POST of a 500 KB note: {elapsed * 1000:.0f} ms; its ingestion ran afterwards in db_worker")


@pytest.mark.django_db(transaction=True)
def test_deleting_a_row_queues_its_removal(settings) -> None:
    note = Note.objects.create(title="Doomed", body="text of a row that goes away")
    db_worker()
    assert Document.objects.filter(source_id=f"mediaapp.note:{note.pk}", status="indexed").exists()
    note.delete()
    assert DBTaskResult.objects.filter(task_path="django_rag.tasks.remove_job", status="READY").count() == 1
    db_worker()
    assert not Document.objects.filter(source_id=f"mediaapp.note:{note.pk}").exists()


@pytest.mark.django_db
def test_a_text_registration_over_the_size_limit_is_skipped_as_too_large(committed, settings) -> None:
    settings.RAG = {**settings.RAG, "ASYNC": False, "MEDIA": {"MAX_TEXT_BYTES": 1000}}
    with committed():
        note = Note.objects.create(title="Big", body="x " * 1000)
    document = Document.objects.get(source_id=f"mediaapp.note:{note.pk}")
    assert (document.status, document.status_reason) == ("skipped", "too-large")
    assert "the row's text is 2005 bytes; the limit is 1000" in document.error  # title, blank line, body


def test_an_immediate_task_backend_is_reported_by_a_check(settings) -> None:
    # django-tasks resets its backends when TASKS changes (its setting_changed receiver).
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
    messages = [m for m in run_checks() if m.id == "django_rag.W110"]
    assert messages and "ingested inside the request" in messages[0].msg
    assert "django_tasks_db.DatabaseBackend" in messages[0].hint
