"""Documents and their chunks: the rows that searches read."""

from __future__ import annotations

from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.utils.translation import gettext_lazy as _
from pgvector.django import VectorField

from ..querysets import ChunkQuerySet

__all__ = ["Chunk", "Document"]


class Document(models.Model):
    """One logical source (a file, a page, a model row), identified by ``source_id``."""

    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        INDEXED = "indexed", _("indexed")
        SKIPPED = "skipped", _("skipped")
        FAILED = "failed", _("failed")

    collection = models.ForeignKey("Collection", on_delete=models.CASCADE, related_name="documents")
    source_id = models.CharField(_("source id"), max_length=1024)
    title = models.CharField(_("title"), max_length=1024, blank=True, default="")
    source = models.TextField(_("source"), blank=True, default="", help_text=_("URL or path."))
    content_type = models.CharField(_("content type"), max_length=255, blank=True, default="")
    loader = models.CharField(_("loader"), max_length=100, blank=True, default="")
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)
    tags = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    tenant = models.CharField(_("tenant"), max_length=200, blank=True, default="", db_index=True)
    owner_type = models.ForeignKey(ContentType, null=True, blank=True, on_delete=models.CASCADE)
    owner_id = models.CharField(max_length=255, null=True, blank=True)
    owner = GenericForeignKey("owner_type", "owner_id")
    status = models.CharField(_("status"), max_length=16, choices=Status.choices, default=Status.PENDING)
    status_reason = models.CharField(_("status reason"), max_length=100, blank=True, default="")
    error = models.TextField(_("error"), blank=True, default="")
    content_hash = models.CharField(max_length=40, blank=True, default="")
    page_count = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("document")
        verbose_name_plural = _("documents")
        constraints = [
            # A tenant's documents are its own: another tenant may load the same source (a URL).
            models.UniqueConstraint(
                fields=["collection", "tenant", "source_id"], name="django_rag_document_unique_source"
            ),
        ]
        indexes = [
            # Prefix removal (source_id LIKE 'docs/%') needs a pattern-ops index under any collation.
            models.Index(
                fields=["source_id"], name="django_rag_doc_source_like", opclasses=["varchar_pattern_ops"]
            ),
            models.Index(fields=["owner_type", "owner_id"], name="django_rag_doc_owner"),
            GinIndex(fields=["tags"], name="django_rag_doc_tags"),
        ]

    def __str__(self) -> str:
        return self.title or self.source_id


class Chunk(models.Model):
    """A piece of a document with its text search vector and its embedding in one space."""

    id = models.BigAutoField(primary_key=True)
    # No single-column FK indexes: django_rag_chunk_doc and django_rag_chunk_scope lead with these
    # columns, and every index costs each inserted chunk.
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks", db_index=False)
    # Denormalised from the document so search filters never need a join.
    collection = models.ForeignKey("Collection", on_delete=models.CASCADE, related_name="+", db_index=False)
    tenant = models.CharField(max_length=200, blank=True, default="")
    tags = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    index = models.PositiveIntegerField()
    content = models.TextField()
    # The contextual header (title and heading path): embedded and matched with the content, not shown.
    header = models.TextField(blank=True, default="", db_default="")
    content_hash = models.CharField(max_length=40)
    token_count = models.PositiveIntegerField(default=0)
    page = models.PositiveIntegerField(null=True, blank=True)
    char_start = models.PositiveIntegerField(default=0)
    char_end = models.PositiveIntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True)
    search_vector = SearchVectorField(null=True)
    space = models.CharField(max_length=200)
    # No fixed width: each space's ANN index casts to its own vector(N) (see rag_migration).
    embedding = VectorField()

    objects = ChunkQuerySet.as_manager()

    class Meta:
        verbose_name = _("chunk")
        verbose_name_plural = _("chunks")
        ordering = ["document_id", "index"]
        indexes = [
            models.Index(fields=["document", "space", "index"], name="django_rag_chunk_doc"),
            models.Index(fields=["collection", "space", "tenant"], name="django_rag_chunk_scope"),
            models.Index(fields=["space", "content_hash"], name="django_rag_chunk_hash"),
            GinIndex(fields=["search_vector"], name="django_rag_chunk_fts"),
            GinIndex(fields=["tags"], name="django_rag_chunk_tags"),
            GinIndex(fields=["metadata"], name="django_rag_chunk_meta", opclasses=["jsonb_path_ops"]),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.index}"
