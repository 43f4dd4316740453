"""The example site's uploads: every Attachment becomes searchable in the "docs" collection."""

from __future__ import annotations

import posixpath

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

import django_rag as rag


class Attachment(models.Model):
    """A file uploaded in the admin, owned by a user, scoped to a tenant."""

    title = models.CharField(_("title"), max_length=200, blank=True, default="")
    file = models.FileField(_("file"), upload_to="attachments/%Y/%m/")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    tenant = models.CharField(_("tenant"), max_length=100, blank=True, default="", db_index=True)
    uploaded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("attachment")
        verbose_name_plural = _("attachments")
        ordering = ["-uploaded_at"]

    def __str__(self) -> str:
        return self.title or posixpath.basename(self.file.name or "")


# Saving an Attachment ingests its file after the commit (on a Celery worker when a broker is
# configured, inline otherwise); deleting it removes its chunks.
rag.register(
    Attachment,
    collection="docs",
    file_field="file",
    tenant="tenant",
    tags=["attachment"],
    metadata=lambda attachment: {"title": str(attachment), "uploaded_by": attachment.owner_id},
)
