"""Bulk ingestion on workers: ``rag_ingest ... --async`` as a job of batches, the layer under the task.

The command walks the sources where it runs (source ids relative to ``--root``, computed exactly
as the synchronous run computes them), records an ``IngestJob`` and sends one Celery message per
batch of sources to the collection's queue (``queue_for``). A worker turns its batch back into
targets and ingests them with ``ingest_targets``: the same loaders, the same skip and failure
records, the one pipeline. Then it adds the batch's counts to the job in one guarded UPDATE.

Why a batch can run twice and nothing is embedded twice: the tasks are ``acks_late``, so a
worker that dies mid-batch leaves the message to be delivered again, to another worker. The
pipeline embeds only chunk texts whose vectors the store does not hold yet (by content hash)
and writes each document under its advisory lock, so the second run embeds only what the first
did not commit, and two workers never write one document at once. The job counts a batch
number once (an ``IngestBatch`` row), so a redelivered batch is not counted twice either.

Messages carry paths, not file bytes: a worker reads ``<root>/<source id>``, so every worker must
see the files at the same path as the command (shared storage: NFS, a mounted bucket, one
volume), or set ``RAG["BULK"]["ROOT"]`` to where it mounts that root. Bytes in the message would
free the workers from shared storage but push every file through the broker (Redis holds it in
memory until a worker takes it); paths keep messages a few kilobytes whatever the files weigh.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ..conf import rag_settings
from ..exceptions import ConfigurationError
from ..models import Collection, IngestBatch, IngestJob
from ..types import UNREADABLE
from .sources import IngestOptions, IngestReport, ingest_targets, is_url
from .walk import Found, source_id_for

__all__ = [
    "BULK_DEFAULTS",
    "Batch",
    "bulk_settings",
    "count_batch",
    "create_job",
    "fail_batch",
    "plan_batches",
    "queue_for",
    "run_batch",
]

BULK_DEFAULTS: dict[str, Any] = {
    # The Celery queue of a collection's batches; "{collection}" is replaced by its name, so
    # workers can be given (and scaled per) collection: celery worker -Q django_rag.docs
    "QUEUE": "django_rag.{collection}",
    # Where this worker sees the command's --root (None: at the same path as the command).
    "ROOT": None,
}

# IngestOptions fields a job keeps for its workers (passwords never travel through the broker).
_OPTION_FIELDS = ("root", "tags", "tenant", "per_page", "batch_size", "max_bytes", "follow_links")


def bulk_settings() -> dict[str, Any]:
    """``RAG["BULK"]`` merged over ``BULK_DEFAULTS``."""
    return {**BULK_DEFAULTS, **(rag_settings.BULK or {})}


def queue_for(collection_name: str) -> str:
    """The Celery queue that ``collection_name``'s batches go to (``RAG["BULK"]["QUEUE"]``)."""
    template = bulk_settings()["QUEUE"]
    if not isinstance(template, str) or not template:
        raise ConfigurationError(
            'RAG["BULK"]["QUEUE"] must be a queue name, "{collection}" standing for the collection\'s '
            'name (default "django_rag.{collection}")'
        )
    return template.replace("{collection}", collection_name)


@dataclass(frozen=True)
class Batch:
    """Sources one task ingests: ``[source_id, reason, error]`` each (reason empty: load it)."""

    number: int
    items: list[list[str]]


def plan_batches(found: Iterable[Found], size: int) -> list[Batch]:
    """``found`` in batches of ``size`` sources, numbered from 0, in walk order."""
    if size < 1:
        raise ConfigurationError("the batch size must be at least 1")
    batches: list[Batch] = []
    items: list[list[str]] = []
    for target in found:
        items.append([target.source_id, target.reason, target.error])
        if len(items) == size:
            batches.append(Batch(len(batches), items))
            items = []
    if items:
        batches.append(Batch(len(batches), items))
    return batches


def create_job(
    collection: Collection, options: IngestOptions, batches: list[Batch], *, using: str | None = None
) -> IngestJob:
    """Record a job of ``batches`` (before any is sent, so a fast worker always finds its row)."""
    alias = using or collection.using
    kept = {name: value for name, value in asdict(options).items() if name in _OPTION_FIELDS}
    kept["root"] = os.path.abspath(options.root)
    kept["tags"] = list(options.tags)
    return IngestJob.objects.using(alias).create(
        collection=collection,
        tenant=options.tenant,
        queue=queue_for(collection.name),
        options=kept,
        total=sum(len(batch.items) for batch in batches),
        batches=len(batches),
        finished_at=None if batches else timezone.now(),
    )


def run_batch(
    job_id: str, number: int, items: list[list[str]], *, using: str | None = None
) -> IngestReport | None:
    """Ingest one batch of a job and count it; None when the job is gone or the batch already counted."""
    alias = using or rag_settings.DATABASE
    job = IngestJob.objects.using(alias).select_related("collection").filter(pk=job_id).first()
    if job is None or IngestBatch.objects.using(alias).filter(job=job, number=number).exists():
        return None
    saved = job.options
    root = bulk_settings()["ROOT"] or saved["root"]
    options = IngestOptions(
        root=root,  # where this worker reads: links are judged against it
        tags=tuple(saved.get("tags", ())),
        tenant=job.tenant,
        per_page=bool(saved.get("per_page", False)),
        batch_size=int(saved["batch_size"]),
        max_bytes=int(saved["max_bytes"]),
        follow_links=bool(saved.get("follow_links", False)),
    )
    collection = Collection.objects.db_manager(alias).resolve(job.collection.name)
    report = ingest_targets(collection, [_target(item, root) for item in items], options, using=alias)
    count_batch(job_id, number, report, using=alias)
    return report


def _target(item: list[str], root: str) -> Found:
    source_id, reason, error = item
    if is_url(source_id):
        return Found(source_id, source_id, reason, error)
    path = os.path.abspath(os.path.join(root, *source_id.split("/")))
    try:
        inside = source_id_for(path, root) == source_id
    except ConfigurationError:
        inside = False
    if not inside:
        # Only the command writes messages, but a worker still reads nothing outside its root.
        return Found(path, source_id, UNREADABLE, f"not a path under the job's root {root}")
    return Found(path, source_id, reason, error)


def count_batch(job_id: str, number: int, report: IngestReport, *, using: str | None = None) -> bool:
    """Add a finished batch's counts to its job, once per batch number; False if already counted."""
    sync = report.sync
    return _count(
        job_id,
        number,
        using,
        loaded=F("loaded") + report.count("loaded"),
        skipped=F("skipped") + report.count("skipped"),
        failed=F("failed") + report.count("failed"),
        chunks_added=F("chunks_added") + sync.added,
        chunks_removed=F("chunks_removed") + sync.removed,
        chunks_unchanged=F("chunks_unchanged") + sync.unchanged,
        embedded=F("embedded") + sync.embedded,
    )


def fail_batch(job_id: str, number: int, sources: int, error: str, *, using: str | None = None) -> bool:
    """Count a batch that could not be ingested (its last attempt raised): its sources as failed."""
    return _count(
        job_id,
        number,
        using,
        broken=True,
        failed=F("failed") + sources,
        failed_batches=F("failed_batches") + 1,
        error=error[:2000],
    )


def _count(job_id: str, number: int, using: str | None, *, broken: bool = False, **changes: Any) -> bool:
    alias = using or rag_settings.DATABASE
    with transaction.atomic(using=alias):
        # The batch row and the counts commit together; a second count of one number finds the row.
        _, created = IngestBatch.objects.using(alias).get_or_create(
            job_id=uuid.UUID(job_id), number=number, defaults={"failed": broken}
        )
        if not created:
            return False
        jobs = IngestJob.objects.using(alias).filter(pk=job_id)
        jobs.update(batches_done=F("batches_done") + 1, updated_at=timezone.now(), **changes)
        jobs.filter(finished_at__isnull=True, batches__lte=F("batches_done")).update(
            finished_at=timezone.now()
        )
    return True
