"""``manage.py rag_reindex APP.MODEL``: ingest a registered model's rows again, here or on workers."""

from __future__ import annotations

import os
import time
from io import StringIO
from pathlib import Path

import pytest
from django.contrib import admin
from django.contrib.messages.storage.fallback import FallbackStorage
from django.core.files.base import ContentFile
from django.core.management import CommandError, call_command
from django.test import RequestFactory

from django_rag.admin import reindex_selected
from django_rag.ingest.rows import document_for
from django_rag.models import Chunk, Document
from tests.mediaapp.models import Note, Upload

pytestmark = pytest.mark.django_db

PDF = Path(__file__).parent / "fixtures" / "pdf"


@pytest.fixture
def signals_off(settings, inline_ingestion):
    """Rows saved in the test are not ingested on save, as after a bulk import."""
    settings.RAG = {**settings.RAG, "MEDIA": {**settings.RAG["MEDIA"], "SIGNALS": False}}


def reindex(*args: str) -> str:
    out = StringIO()
    call_command("rag_reindex", *args, stdout=out, stderr=out)
    return out.getvalue()


def test_rag_reindex_ingests_the_rows_of_a_registered_model(signals_off) -> None:
    notes = [Note.objects.create(title=f"Imported {n}", body="Loaded in bulk.") for n in range(3)]
    assert "3 indexed" in reindex("mediaapp.Note")
    assert [document_for(note).status for note in notes] == ["indexed"] * 3


def test_rag_reindex_changed_only_skips_rows_that_are_up_to_date(signals_off) -> None:
    notes = [Note.objects.create(title=f"Note {n}", body="Unchanged text.") for n in range(3)]
    reindex("mediaapp.Note")
    Note.objects.filter(pk=notes[0].pk).update(body="Edited without signals.")
    output = reindex("mediaapp.Note", "--changed-only")
    assert ("1 indexed" in output, "2 up to date" in output) == (True, True)
    assert "Edited" in Chunk.objects.get(document=document_for(notes[0])).content


def test_rag_reindex_changed_only_reads_a_file_modified_since_it_was_indexed(signals_off) -> None:
    row = Upload.objects.create(file=ContentFile(b"The first text.", name="changing.txt"))
    reindex("mediaapp.Upload")
    Path(row.file.path).write_bytes(b"The file was rewritten in place.")
    later = time.time() + 5  # the storage's clock, past the document's update
    os.utime(row.file.path, (later, later))
    assert "1 indexed" in reindex("mediaapp.Upload", "--changed-only")
    assert "rewritten" in Chunk.objects.get(document=document_for(row)).content


def test_rag_reindex_removes_documents_of_rows_deleted_while_signals_were_off(signals_off) -> None:
    kept, gone = (Note.objects.create(title=t, body="Some text.") for t in ("kept", "gone"))
    reindex("mediaapp.Note")
    gone_id = f"mediaapp.note:{gone.pk}"
    gone.delete()
    assert "1 orphans removed" in reindex("mediaapp.Note")
    assert not Document.objects.filter(source_id=gone_id).exists()
    assert document_for(kept).status == "indexed"


def test_rag_reindex_fails_when_a_row_fails_and_names_it(signals_off) -> None:
    row = Upload.objects.create(file=ContentFile((PDF / "invalid.pdf").read_bytes(), name="bad.pdf"))
    with pytest.raises(CommandError, match=r"mediaapp\.Upload"):
        reindex("mediaapp.Upload")
    assert document_for(row).status == "failed"


def test_rag_reindex_refuses_a_model_that_is_not_registered() -> None:
    with pytest.raises(CommandError, match=r"auth\.User is not registered"):
        reindex("auth.User")


def test_rag_reindex_async_without_a_broker_is_an_error(settings) -> None:
    settings.RAG = {**settings.RAG, "ASYNC": False}
    with pytest.raises(CommandError, match="--async needs Celery with a broker"):
        reindex("mediaapp.Note", "--async")


def test_the_admin_action_reindexes_the_rows_behind_selected_documents(signals_off) -> None:
    note = Note.objects.create(title="Admin", body="First words.")
    reindex("mediaapp.Note")
    Note.objects.filter(pk=note.pk).update(body="Words edited outside the admin.")
    request = RequestFactory().post("/admin/django_rag/document/")
    request.session = {}
    request._messages = FallbackStorage(request)
    reindex_selected(admin.site._registry[Document], request, Document.objects.all())
    assert "edited" in Chunk.objects.get(document=document_for(note)).content
    assert [str(m) for m in request._messages] == ["1 item scheduled for re-indexing."]
