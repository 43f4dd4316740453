"""Uploads on S3 (django-storages S3Storage against moto's S3-compatible server on loopback).

The worker reads the file through the storage API, exactly as it reads a local one.
"""

from __future__ import annotations

import boto3
import pytest
from django.core.files.base import ContentFile

import django_rag as rag
from django_rag.ingest.rows import document_for
from django_rag.models import Chunk, Document
from tests.mediaapp.models import S3Upload
from tests.workers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = (
    "Backups run every night at two. Snapshots are kept for thirty days.\n\n"
    "Restores are requested from the support desk and take about an hour.\n\n"
    "Invoices are sent on the first day of each month by email."
)
LONG = "\n\n".join(f"Section {number}. {HANDBOOK}" for number in range(12))
BUCKET = "django-rag-tests"


@pytest.fixture
def s3(s3_server, settings):
    """This process's "s3" storage points at the moto server (the workers get its URL at start)."""
    options = {**settings.STORAGES["s3"]["OPTIONS"], "endpoint_url": s3_server}
    settings.STORAGES = {**settings.STORAGES, "s3": {**settings.STORAGES["s3"], "OPTIONS": options}}
    return boto3.client(
        "s3",
        endpoint_url=s3_server,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


def indexed(row: S3Upload, worker, **filters: object) -> Document:
    source_id = f"mediaapp.s3upload:{row.pk}"
    return wait_for(
        lambda: Document.objects.filter(source_id=source_id, status="indexed", **filters).first(),
        30,
        f"{source_id} to be indexed",
        worker,
    )


def test_an_upload_stored_on_s3_is_indexed_by_the_worker_and_found_by_search(s3, via_celery, worker) -> None:
    row = S3Upload.objects.create(file=ContentFile(HANDBOOK.encode(), name="handbook.txt"), tenant="acme")
    assert s3.head_object(Bucket=BUCKET, Key=row.file.name)["ContentLength"] == len(HANDBOOK.encode())
    indexed(row, worker)
    hits = rag.collection("docs").search("when are invoices sent", k=3, tenant="acme", tags=["s3"])
    assert hits[0].source_id == f"mediaapp.s3upload:{row.pk}"


def test_replacing_the_file_on_s3_resyncs_its_chunks(s3, via_celery, worker) -> None:
    row = S3Upload.objects.create(file=ContentFile(LONG.encode(), name="policy.txt"))
    document = indexed(row, worker)
    kept = set(Chunk.objects.filter(document=document).values_list("pk", flat=True))
    row.file = ContentFile(
        (LONG + "\n\nAppendix: the archive moved to cold storage.").encode(), name="policy.txt"
    )
    row.save()
    wait_for(
        lambda: Chunk.objects.filter(document=document, content__contains="cold storage").exists(),
        30,
        "the new appendix",
        worker,
    )
    now = set(Chunk.objects.filter(document=document).values_list("pk", flat=True))
    assert kept & now  # unchanged chunks kept their rows: synced by hash, not rewritten
    assert Document.objects.filter(source_id=f"mediaapp.s3upload:{row.pk}").count() == 1


def test_deleting_the_row_removes_its_document(s3, via_celery, worker) -> None:
    row = S3Upload.objects.create(file=ContentFile(HANDBOOK.encode(), name="gone.txt"))
    source_id = f"mediaapp.s3upload:{row.pk}"
    indexed(row, worker)
    row.delete()
    wait_for(lambda: not Document.objects.filter(source_id=source_id).exists(), 30, "removal", worker)
    assert not Chunk.objects.filter(document__source_id=source_id).exists()


def test_a_file_on_s3_over_max_bytes_is_skipped_as_too_large(s3, inline_ingestion) -> None:
    row = S3Upload.objects.create(file=ContentFile(b"word " * 20_000, name="huge.txt"))  # 100 kB > 64 kB
    document = document_for(row)
    assert (document.status, document.status_reason) == ("skipped", "too-large")
    assert "100000 bytes" in document.error
