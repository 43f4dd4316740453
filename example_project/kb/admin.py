from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.widgets import AdminFileWidget
from django.db import models
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from django_rag.admin import ModelAdmin, ScopedAdminMixin, reindex_selected
from django_rag.ingest.rows import document_for

from .models import Attachment


class LabelledFileWidget(AdminFileWidget):
    """The file input with its own <label for>: Django 6.1's admin wraps it in a fieldset whose
    legend names the group but leaves the input itself unlabelled (axe: label, critical)."""

    use_fieldset = False


@admin.register(Attachment)
class AttachmentAdmin(ScopedAdminMixin, ModelAdmin):
    """Upload a file here and it becomes searchable; the list shows how its ingestion went.

    Staff see and upload the attachments of their own tenant only: ScopedAdminMixin fills the
    tenant (from the scope hook, example_project/kb/scope.py) and the owner (the operator), and
    refuses a form that names any other. Superusers see and choose every tenant.
    """

    list_display = ["__str__", "tenant", "owner", "uploaded_at", "indexing"]
    list_filter = ["tenant"]
    search_fields = ["title", "file"]
    fields = ["title", "file", "tenant", "owner"]
    actions = [reindex_selected]
    tenant_field = "tenant"
    owner_field = "owner"
    formfield_overrides = {models.FileField: {"widget": LabelledFileWidget}}

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if obj.owner_id is None and request.user.is_authenticated:
            obj.owner = request.user  # a superuser's upload without an owner is theirs
        super().save_model(request, obj, form, change)

    @admin.display(description=_("indexing"))
    def indexing(self, obj: Attachment) -> str:
        document = document_for(obj)
        if document is None:
            return str(_("queued"))
        if document.status_reason:
            return f"{document.get_status_display()} ({document.status_reason})"
        return str(document.get_status_display())
