"""Automatic ingestion of registered models, run inline after commit (no broker).

The Celery path with a real worker is in test_celery_worker.py; S3 storage in test_s3.py.
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

import pytest
from celery import Celery
from django.core.files.base import ContentFile
from django.db import transaction

import django_rag as rag
from django_rag.exceptions import EmbedderError
from django_rag.ingest.registration import get_registration
from django_rag.ingest.rows import document_for, ingest_instance
from django_rag.models import Chunk, Document
from django_rag.tasks import uses_celery
from django_rag.testing import OpenAICompatibleServer
from tests.doubles import EditingEmbedder
from tests.mediaapp.models import Note, Upload

pytestmark = pytest.mark.django_db

PDF = Path(__file__).parent / "fixtures" / "pdf"
HANDBOOK = (
    "Backups run every night at two. Snapshots are kept for thirty days.\n\n"
    "Restores are requested from the support desk and take about an hour.\n\n"
    "Invoices are sent on the first day of each month by email."
)
LONG = "\n\n".join(f"Section {number}. {HANDBOOK}" for number in range(12))  # several chunks


def upload(name: str, data: bytes, **fields: str) -> Upload:
    return Upload.objects.create(file=ContentFile(data, name=name), **fields)


def chunks_of(document: Document | None) -> list[str]:
    return list(Chunk.objects.filter(document=document).order_by("index").values_list("content", flat=True))


# Registration and wiring


def test_register_works_as_a_decorator_and_returns_the_model() -> None:
    registration = get_registration(Note)
    assert registration.model is Note
    assert (registration.collection, registration.text) == ("notes", ["title", "body"])


def test_a_saved_row_is_indexed_after_commit_and_found_by_search(committed) -> None:
    with committed():
        note = Note.objects.create(title="Backups", body=HANDBOOK, tenant="acme")
    assert document_for(note).status == "indexed"
    hits = rag.collection("notes").search("how long are snapshots kept", k=3, tenant="acme")
    assert hits[0].source_id == f"mediaapp.note:{note.pk}"


def test_nothing_is_ingested_before_the_transaction_commits(django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        note = Note.objects.create(title="Pending", body="Not yet committed.")
    assert len(callbacks) == 1
    assert document_for(note) is None


def test_a_rolled_back_save_enqueues_nothing(committed) -> None:
    with committed() as callbacks, suppress(RuntimeError), transaction.atomic():
        Note.objects.create(title="Doomed", body="This row never commits.")
        raise RuntimeError
    assert callbacks == []
    assert not Document.objects.exists()


def test_the_document_carries_the_rows_tenant_tags_metadata_and_owner(committed) -> None:
    with committed():
        note = Note.objects.create(
            title="Pinned", body="Quarterly planning notes.", tenant="acme", pinned=True
        )
    document = document_for(note)
    assert (document.tenant, document.tags, document.owner) == ("acme", ["note", "pinned"], note)
    assert document.metadata["kind"] == "note"
    assert set(Chunk.objects.filter(document=document).values_list("tenant", flat=True)) == {"acme"}


def test_updating_a_row_resyncs_only_its_changed_chunks(committed, sent) -> None:
    with committed():
        note = Note.objects.create(title="Handbook", body=LONG)
    note.body = LONG + "\n\nA new closing paragraph about the holiday schedule."
    with committed():
        note.save()
    sync = sent["document_indexed"][-1]["result"].sync
    assert sync.unchanged > 0
    assert sync.added > 0
    assert "holiday schedule" in " ".join(chunks_of(document_for(note)))


def test_deleting_a_row_removes_its_document(committed, sent) -> None:
    with committed():
        note = Note.objects.create(title="Temporary", body="Soon gone.")
    source_id = f"mediaapp.note:{note.pk}"
    with committed():
        note.delete()
    assert not Document.objects.filter(source_id=source_id).exists()
    assert sent["document_removed"][0]["source_id"] == source_id


def test_a_model_registered_with_auto_false_is_not_indexed_on_save(committed, registry) -> None:
    registry.register(Note, collection="notes", text="body", auto=False)
    with committed():
        note = Note.objects.create(title="Manual", body="Indexed only by rag_reindex.")
    assert document_for(note) is None


def test_the_media_signals_setting_turns_automatic_ingestion_off(committed, settings) -> None:
    settings.RAG = {**settings.RAG, "MEDIA": {**settings.RAG["MEDIA"], "SIGNALS": False}}
    with committed():
        note = Note.objects.create(title="Bulk import", body="Loaded with signals off.")
    assert document_for(note) is None


def test_the_document_indexed_signal_names_the_row_and_its_document(committed, sent) -> None:
    with committed():
        note = Note.objects.create(title="Signals", body="Receivers learn what was indexed.")
    (event,) = sent["document_indexed"]
    assert (event["sender"], event["instance"], event["document"]) == (Note, note, document_for(note))


# The plain function a task calls


def test_ingest_instance_is_idempotent() -> None:
    (note,) = Note.objects.bulk_create([Note(title="Direct", body=HANDBOOK)])  # no signals
    first = ingest_instance("mediaapp", "note", note.pk)
    second = ingest_instance("mediaapp", "note", note.pk)
    assert (first.status, second.status) == ("indexed", "indexed")
    assert (second.sync.added, second.sync.removed, second.sync.embedded) == (0, 0, 0)
    assert Chunk.objects.filter(document=document_for(note)).count() == first.sync.added


def test_ingest_instance_of_a_deleted_row_removes_its_document() -> None:
    (note,) = Note.objects.bulk_create([Note(title="Gone", body="Deleted before its task ran.")])
    ingest_instance("mediaapp", "note", note.pk)
    pk = note.pk
    Note.objects.filter(pk=pk).delete()  # a queryset delete without signals, as a race would look
    assert ingest_instance("mediaapp", "note", pk).status == "removed"
    assert not Document.objects.filter(source_id=f"mediaapp.note:{pk}").exists()


def test_a_row_saved_again_during_ingestion_ends_with_its_latest_values(settings) -> None:
    settings.RAG = {
        **settings.RAG,
        "EMBEDDERS": {"default": {"BACKEND": "tests.doubles.EditingEmbedder", "DIMENSIONS": 64}},
    }
    (note,) = Note.objects.bulk_create([Note(title="Racy", body="The first version of the text.")])
    EditingEmbedder.edit = lambda: Note.objects.filter(pk=note.pk).update(body="The second version wins.")
    ingest_instance("mediaapp", "note", note.pk)
    assert chunks_of(document_for(note)) == ["Racy\n\nThe second version wins."]


# Files


def test_an_uploaded_text_file_is_indexed_and_found_by_search(committed) -> None:
    with committed():
        row = upload("handbook.txt", HANDBOOK.encode(), tenant="acme", owner="ana")
    document = document_for(row)
    assert (document.status, document.title, document.content_type) == (
        "indexed",
        "handbook.txt",
        "text/plain",
    )
    assert document.metadata["owner"] == "ana"
    hits = rag.collection("docs").search("invoices by email", k=3, tenant="acme", tags=["upload"])
    assert hits[0].source_id == f"mediaapp.upload:{row.pk}"


def test_an_uploaded_pdf_is_extracted_by_its_content_type(committed) -> None:
    with committed():
        row = upload("outline.pdf", (PDF / "pdflatex-outline.pdf").read_bytes())
    document = document_for(row)
    assert (document.status, document.content_type, document.loader) == ("indexed", "application/pdf", "pdf")
    assert document.page_count == 4


def test_a_file_of_an_unsupported_type_is_skipped_with_a_reason(committed, sent) -> None:
    with committed():
        row = upload("photo.zip", b"PK\x03\x04 not text")
    document = document_for(row)
    assert (document.status, document.status_reason) == ("skipped", "unsupported-type")
    assert "application/zip" in document.error
    assert sent["ingestion_skipped"][0]["reason"] == "unsupported-type"


def test_a_file_over_max_bytes_is_skipped_as_too_large(committed) -> None:
    with committed():
        row = upload("huge.txt", b"word " * 20_000)  # 100 kB; Upload allows 64 kB
    document = document_for(row)
    assert (document.status, document.status_reason) == ("skipped", "too-large")
    assert not Chunk.objects.filter(document=document).exists()


def test_an_empty_file_is_skipped_as_empty_text(committed) -> None:
    with committed():
        row = upload("blank.txt", b"  \n\n  ")
    assert (document_for(row).status, document_for(row).status_reason) == ("skipped", "empty-text")


def test_a_file_replaced_by_an_unsupported_one_loses_its_old_chunks(committed) -> None:
    with committed():
        row = upload("notes.txt", HANDBOOK.encode())
    assert chunks_of(document_for(row))
    row.file = ContentFile(b"\x00\x01binary", name="notes.bin")
    with committed():
        row.save()
    document = document_for(row)
    assert (document.status, document.status_reason) == ("skipped", "unsupported-type")
    assert chunks_of(document) == []


def test_a_re_uploaded_file_syncs_by_chunk_hash(committed, sent) -> None:
    with committed():
        row = upload("v1.md", LONG.encode())
    row.file = ContentFile((LONG + "\n\nVersion two adds this line.").encode(), name="v2.md")
    with committed():
        row.save()
    sync = sent["document_indexed"][-1]["result"].sync
    assert sync.unchanged > 0
    assert document_for(row).source.endswith(".md")
    assert Document.objects.filter(source_id=f"mediaapp.upload:{row.pk}").count() == 1


def test_a_broken_pdf_fails_with_the_error_and_the_save_still_succeeds(committed, sent) -> None:
    with committed():
        row = upload("broken.pdf", (PDF / "invalid.pdf").read_bytes())
    assert Upload.objects.filter(pk=row.pk).exists()
    document = document_for(row)
    assert document.status == "failed"
    assert "LoaderError" in document.error
    assert sent["ingestion_failed"][0]["instance"] == row


def test_a_file_missing_from_storage_fails_with_the_error(committed) -> None:
    (row,) = Upload.objects.bulk_create([Upload(file="uploads/never-written.txt")])
    assert ingest_instance("mediaapp", "upload", row.pk).status == "failed"
    assert "FileNotFoundError" in document_for(row).error


@pytest.fixture
def remote_embedder(settings):
    """The OpenAI embedder against a loopback server, in the hashing space, without its own retries."""
    with OpenAICompatibleServer(dimensions=64) as server:
        settings.RAG = {
            **settings.RAG,
            "EMBEDDERS": {
                "default": {
                    "BACKEND": "django_rag.embedders.openai.OpenAIEmbedder",
                    "MODEL": "hashing",
                    "DIMENSIONS": 64,
                    "BASE_URL": server.base_url,
                    "API_KEY": "test",
                    "MAX_RETRIES": 0,
                }
            },
        }
        yield server


def test_a_failing_embedder_keeps_the_old_chunks_and_records_the_error(remote_embedder, committed) -> None:
    with committed():
        row = upload("kept.txt", HANDBOOK.encode())
    before = chunks_of(document_for(row))
    remote_embedder.fail_next(1, status=400)
    row.file = ContentFile(b"An entirely new text that needs embedding.", name="kept.txt")
    with committed():
        row.save()
    document = document_for(row)
    assert (document.status, chunks_of(document)) == ("failed", before)
    assert "HTTP 400" in document.error


def test_a_transient_embedder_error_is_recorded_then_raised_for_a_retry(remote_embedder, sent) -> None:
    (row,) = Upload.objects.bulk_create([Upload(file=ContentFile(b"Rate limited text.", name="r.txt"))])
    remote_embedder.fail_next(1, status=429)
    with pytest.raises(EmbedderError, match="429"):
        ingest_instance("mediaapp", "upload", row.pk, raise_transient=True)
    assert document_for(row).status == "failed"
    assert sent["ingestion_failed"] == []  # sent once, when the retries are exhausted


# Choosing Celery or inline


@pytest.fixture
def current_celery_app():
    """Make a Celery app current for the test, then restore the previous one."""
    from celery import current_app

    previous = current_app._get_current_object()

    def make(**conf: object) -> Celery:
        app = Celery("django_rag_test_choice", set_as_current=True)
        app.conf.update(conf)
        return app

    yield make
    previous.set_current()


def test_ingestion_runs_inline_when_the_celery_app_has_no_broker(current_celery_app, settings) -> None:
    current_celery_app(broker_url=None)
    settings.RAG = {**settings.RAG, "ASYNC": True}
    assert not uses_celery()


def test_ingestion_uses_celery_when_a_broker_is_configured(current_celery_app, settings) -> None:
    current_celery_app(broker_url="redis://127.0.0.1:6379/15")
    settings.RAG = {**settings.RAG, "ASYNC": True}
    assert uses_celery()


def test_async_false_runs_inline_even_with_a_broker(current_celery_app, settings) -> None:
    current_celery_app(broker_url="redis://127.0.0.1:6379/15")
    settings.RAG = {**settings.RAG, "ASYNC": False}
    assert not uses_celery()
