"""A site's admin of a registered model, scoped like the library's own (tests/test_web_admin_scope.py)."""

from __future__ import annotations

from django.contrib import admin

from django_rag.admin import ModelAdmin, ScopedAdminMixin, reindex_selected

from .models import Upload


@admin.register(Upload)
class UploadAdmin(ScopedAdminMixin, ModelAdmin):
    fields = ["file", "tenant", "owner"]
    list_display = ["pk", "file", "tenant", "owner"]
    actions = [reindex_selected]
