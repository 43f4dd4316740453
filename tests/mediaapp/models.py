"""Models registered for automatic ingestion, as a site would declare them."""

from __future__ import annotations

from django.db import models

import django_rag as rag

from .storage import AliasStorage


@rag.register(
    collection="notes",
    text=["title", "body"],
    tenant="tenant",
    tags=lambda note: ["note", *(["pinned"] if note.pinned else [])],
    metadata=lambda note: {"kind": "note"},
)
class Note(models.Model):
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True, default="")
    tenant = models.CharField(max_length=100, blank=True, default="")
    pinned = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.title


class Upload(models.Model):
    file = models.FileField(upload_to="uploads/", blank=True)
    owner = models.CharField(max_length=100, blank=True, default="")
    tenant = models.CharField(max_length=100, blank=True, default="")


rag.register(
    Upload,
    collection="docs",
    file_field="file",
    tenant="tenant",
    tags=["upload"],
    metadata=lambda upload: {"owner": upload.owner},
    max_bytes=64 * 1024,
)


@rag.register(collection="docs", file_field="file", tenant="tenant", tags=["s3"], max_bytes=64 * 1024)
class S3Upload(models.Model):
    file = models.FileField(upload_to="s3/", storage=AliasStorage("s3"))
    tenant = models.CharField(max_length=100, blank=True, default="")
