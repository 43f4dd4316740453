"""Admin for collections, documents (with their ingestion status) and chunks, read-mostly.

``reindex_selected`` is an admin action that also works on a site's registered models:
``actions = [reindex_selected]`` in the site's ModelAdmin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .ingest.registration import registrations
from .models import Chunk, Collection, Document
from .tasks import schedule_ingest

__all__ = ["ChunkAdmin", "CollectionAdmin", "DocumentAdmin", "reindex_selected"]

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[Any]
else:  # ModelAdmin is generic in django-stubs only, not at run time
    ModelAdmin = admin.ModelAdmin


@admin.action(description=_("Re-index selected in the knowledge base"))
def reindex_selected(
    modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Any]
) -> None:
    """Ingest the selected rows again (for Documents: the rows they came from), off the request path."""
    registered = {registration.model for registration in registrations()}
    scheduled = skipped = 0
    if queryset.model is Document:
        for document in queryset.select_related("owner_type"):
            model = document.owner_type.model_class() if document.owner_type else None
            if model in registered:
                schedule_ingest(model, document.owner_id)
                scheduled += 1
            else:
                skipped += 1
    elif queryset.model in registered:
        for pk in queryset.values_list("pk", flat=True):
            schedule_ingest(queryset.model, pk)
            scheduled += 1
    modeladmin.message_user(
        request,
        ngettext(
            "%(count)d item scheduled for re-indexing.",
            "%(count)d items scheduled for re-indexing.",
            scheduled,
        )
        % {"count": scheduled},
        messages.SUCCESS,
    )
    if skipped:
        modeladmin.message_user(
            request,
            ngettext(
                "%(count)d document did not come from a registered model; re-index it from its source.",
                "%(count)d documents did not come from a registered model; re-index them from their source.",
                skipped,
            )
            % {"count": skipped},
            messages.WARNING,
        )


@admin.register(Collection)
class CollectionAdmin(ModelAdmin):
    list_display = [
        "name",
        "embedder",
        "text_config",
        "text_search",
        "chunk_size",
        "chunk_overlap",
        "document_count",
    ]
    search_fields = ["name"]
    readonly_fields = ["created_at", "updated_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Collection]:
        found: QuerySet[Collection] = (
            super().get_queryset(request).annotate(document_count=Count("documents"))
        )
        return found

    @admin.display(description=_("documents"), ordering="document_count")
    def document_count(self, obj: Any) -> int:
        return int(obj.document_count)


class _ReadOnly(ModelAdmin):
    """Rows written by ingestion: viewable and deletable, never edited by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Document)
class DocumentAdmin(_ReadOnly):
    list_display = ["__str__", "collection", "status", "status_reason", "tenant", "updated_at"]
    list_filter = ["status", "status_reason", "collection"]
    search_fields = ["source_id", "title"]
    list_select_related = ["collection"]
    actions = [reindex_selected]
    exclude = ["owner_type", "owner_id"]


@admin.register(Chunk)
class ChunkAdmin(_ReadOnly):
    list_display = ["__str__", "document", "index", "token_count", "page", "space"]
    list_filter = ["collection", "space"]
    search_fields = ["document__source_id"]
    list_select_related = ["document"]
    # Vectors and tsvectors are large and unreadable; counting a big chunk table is slow.
    exclude = ["embedding", "search_vector"]
    show_full_result_count = False
