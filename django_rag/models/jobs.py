"""Bulk ingestion runs: ``IngestJob`` and the batches counted for it."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _

from .collection import Collection

__all__ = ["IngestBatch", "IngestJob"]


class IngestJob(models.Model):
    """One ``rag_ingest --async`` run: its sources, split in batches that Celery workers ingest.

    Workers add each finished batch's counts in the transaction that records the batch as an
    ``IngestBatch`` row (unique per job and number), so a batch redelivered after a worker died
    is counted once. ``manage.py rag_ingest`` waits on this row; the admin lists it read-only.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="ingest_jobs")
    tenant = models.CharField(_("tenant"), max_length=200, blank=True, default="")
    queue = models.CharField(_("queue"), max_length=200)
    # How the workers read the sources: root, tags, per_page, max_bytes, batch_size (see ingest.jobs).
    options = models.JSONField(_("options"), default=dict)
    total = models.PositiveIntegerField(_("sources"), default=0)
    batches = models.PositiveIntegerField(_("batches"), default=0)
    batches_done = models.PositiveIntegerField(_("batches done"), default=0)
    loaded = models.PositiveIntegerField(_("loaded"), default=0)
    skipped = models.PositiveIntegerField(_("skipped"), default=0)
    failed = models.PositiveIntegerField(_("failed"), default=0)
    failed_batches = models.PositiveIntegerField(_("failed batches"), default=0)
    chunks_added = models.PositiveIntegerField(_("chunks added"), default=0)
    chunks_removed = models.PositiveIntegerField(_("chunks removed"), default=0)
    chunks_unchanged = models.PositiveIntegerField(_("chunks unchanged"), default=0)
    embedded = models.PositiveIntegerField(_("texts embedded"), default=0)
    error = models.TextField(_("last batch error"), blank=True, default="")
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)

    class Meta:
        verbose_name = _("ingest job")
        verbose_name_plural = _("ingest jobs")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return str(self.id)

    @property
    def done(self) -> int:
        """Sources whose batch has finished, whatever their outcome."""
        return self.loaded + self.skipped + self.failed

    @property
    def complete(self) -> bool:
        return self.batches_done >= self.batches


class IngestBatch(models.Model):
    """A batch of an ``IngestJob`` that has been counted (its number, once per job)."""

    job = models.ForeignKey(IngestJob, on_delete=models.CASCADE, related_name="counted_batches")
    number = models.PositiveIntegerField()
    failed = models.BooleanField(default=False)
    finished_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="django_rag_ingestbatch_unique"),
        ]
