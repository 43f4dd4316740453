from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.widgets import AdminFileWidget
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from django_rag.admin import ModelAdmin, reindex_selected
from django_rag.ingest.rows import document_for

from .models import Attachment
from .scope import tenant_of


class LabelledFileWidget(AdminFileWidget):
    """The file input with its own <label for>: Django 6.1's admin wraps it in a fieldset whose
    legend names the group but leaves the input itself unlabelled (axe: label, critical)."""

    use_fieldset = False


@admin.register(Attachment)
class AttachmentAdmin(ModelAdmin):
    """Upload a file here and it becomes searchable; the list shows how its ingestion went.

    Staff see and upload the attachments of their own tenant; superusers see every tenant's.
    """

    list_display = ["__str__", "tenant", "owner", "uploaded_at", "indexing"]
    list_filter = ["tenant"]
    search_fields = ["title", "file"]
    fields = ["title", "file", "tenant", "owner"]
    actions = [reindex_selected]
    formfield_overrides = {models.FileField: {"widget": LabelledFileWidget}}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Attachment]:
        attachments: QuerySet[Attachment] = super().get_queryset(request)
        if request.user.is_superuser:
            return attachments
        return attachments.filter(tenant=tenant_of(request.user) or "\x00")

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {**super().get_changeform_initial_data(request), "tenant": tenant_of(request.user) or ""}

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if obj.owner_id is None and request.user.is_authenticated:
            obj.owner = request.user
        super().save_model(request, obj, form, change)

    @admin.display(description=_("indexing"))
    def indexing(self, obj: Attachment) -> str:
        document = document_for(obj)
        if document is None:
            return str(_("queued"))
        if document.status_reason:
            return f"{document.get_status_display()} ({document.status_reason})"
        return str(document.get_status_display())
