"""The read-only admins: documents with their chunks, the query log and bulk ingest jobs.

Registered when ``django_rag.web.admin`` (which re-exports them) is imported.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..models import Chunk, Document, IngestJob, QueryLog
from .actions import reindex_selected, remove_from_index, retry_failed
from .admin_base import CHUNK_LIST_LIMIT, ReadOnlyAdmin, html_table, scoped_documents, scoped_rows
from .admin_views import query_report_view

__all__ = ["ChunkAdmin", "DocumentAdmin", "IngestJobAdmin", "QueryLogAdmin"]


class _ReasonFilter(admin.SimpleListFilter):
    """Skip and failure reasons; documents without one are "no reason", not a link without text."""

    title = _("status reason")
    parameter_name = "reason"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        reasons = (
            model_admin.get_queryset(request)
            .exclude(status_reason="")
            .values_list("status_reason", flat=True)
        )
        return [("-", _("no reason")), *((reason, reason) for reason in sorted(set(reasons)))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(status_reason="" if value == "-" else value)


@admin.register(Document)
class DocumentAdmin(ReadOnlyAdmin):
    list_display = [
        "__str__",
        "collection",
        "status",
        "status_reason",
        "content_type",
        "tenant",
        "updated_at",
    ]
    list_filter = ["status", _ReasonFilter, "collection", "content_type", "tenant"]
    search_fields = ["title", "source", "source_id"]
    list_select_related = ["collection"]
    actions = [reindex_selected, retry_failed, remove_from_index]
    fields = [
        "collection",
        "title",
        "source_id",
        "source",
        "content_type",
        "loader",
        "tenant",
        "tags",
        "status",
        "status_reason",
        "error",
        "page_count",
        "owner_link",
        "metadata",
        "created_at",
        "updated_at",
        "chunk_list",
    ]
    readonly_fields = ["owner_link", "chunk_list", "created_at", "updated_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        return scoped_documents(request, super().get_queryset(request))

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A document's page stays read-only (ingestion writes it); the change permission in general
        # is what the re-index and retry actions of the list require.
        return obj is None and super(ReadOnlyAdmin, self).has_change_permission(request)

    @admin.display(description=_("came from"))
    def owner_link(self, obj: Document) -> str:
        if not obj.owner_type_id or obj.owner_id is None:
            return "-"
        owner = obj.owner
        if owner is None:
            return str(_("a row that no longer exists (%(id)s)") % {"id": obj.owner_id})
        meta = owner._meta
        try:
            url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[owner.pk])
        except NoReverseMatch:
            return f"{meta.verbose_name}: {owner}"
        return format_html('<a href="{}">{}: {}</a>', url, meta.verbose_name, owner)

    @admin.display(description=_("chunks"))
    def chunk_list(self, obj: Document) -> str:
        chunks = (
            Chunk.objects.using(obj.collection.using)
            .filter(document=obj)
            .order_by("space", "index")
            .values_list("index", "page", "token_count", "space", "content")[: CHUNK_LIST_LIMIT + 1]
        )
        rows = [
            (index, page or "-", tokens, space, content[:120] + ("…" if len(content) > 120 else ""))
            for index, page, tokens, space, content in chunks
        ]
        more = len(rows) > CHUNK_LIST_LIMIT
        table = html_table([_("#"), _("page"), _("tokens"), _("space"), _("text")], rows[:CHUNK_LIST_LIMIT])
        if more:
            note = _("Only the first %(count)d chunks are shown.") % {"count": CHUNK_LIST_LIMIT}
            return format_html("{}<p>{}</p>", table, note)
        return table


@admin.register(Chunk)
class ChunkAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "document", "index", "token_count", "page", "space"]
    list_filter = ["collection", "space"]
    search_fields = ["document__source_id"]
    list_select_related = ["document"]
    # Vectors and tsvectors are large and unreadable; counting a big chunk table is slow.
    exclude = ["embedding", "search_vector"]
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Chunk]:
        chunks: QuerySet[Chunk] = super().get_queryset(request)
        if getattr(request.user, "is_superuser", False):
            return chunks
        return chunks.filter(document__in=scoped_documents(request, Document.objects.all()).values("pk"))


class _FeedbackFilter(admin.SimpleListFilter):
    title = _("feedback")
    parameter_name = "rated"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("up", _("helpful")), ("down", _("not helpful")), ("none", _("not rated"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "up":
            return queryset.filter(feedback=QueryLog.Feedback.UP)
        if value == "down":
            return queryset.filter(feedback=QueryLog.Feedback.DOWN)
        if value == "none":
            return queryset.filter(feedback__isnull=True)
        return queryset


@admin.register(QueryLog)
class QueryLogAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "kind",
        "query",
        "collection",
        "user",
        "hit_count",
        "latency",
        "rating",
        "conversation",
    ]
    list_filter = ["kind", "collection", _FeedbackFilter, "created_at"]
    search_fields = ["query", "feedback_comment"]
    date_hierarchy = "created_at"
    change_list_template = "admin/django_rag/querylog/change_list.html"
    readonly_fields = [f.name for f in QueryLog._meta.fields]

    def get_queryset(self, request: HttpRequest) -> QuerySet[QueryLog]:
        entries: QuerySet[QueryLog] = super().get_queryset(request)
        return scoped_rows(request, entries, "collection")

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(query_report_view(self))
        return [path("report/", view, name="django_rag_querylog_report"), *super().get_urls()]

    @admin.display(description=_("latency"), ordering="latency_ms")
    def latency(self, obj: QueryLog) -> str:
        return f"{obj.latency_ms:.0f} ms"

    @admin.display(description=_("feedback"), ordering="feedback")
    def rating(self, obj: QueryLog) -> str:
        if obj.feedback is None:
            return "-"
        label = obj.get_feedback_display()
        mark = "👍" if obj.feedback > 0 else "👎"
        if obj.feedback_comment:
            return format_html('<span title="{}">{} {}</span>: {}', label, mark, label, obj.feedback_comment)
        return format_html('<span title="{}">{} {}</span>', label, mark, label)


@admin.register(IngestJob)
class IngestJobAdmin(ReadOnlyAdmin):
    """``rag_ingest --async`` runs: counts written by the workers as batches finish."""

    list_display = [
        "created_at",
        "collection",
        "tenant",
        "progress",
        "failed",
        "embedded",
        "queue",
        "finished_at",
    ]
    list_filter = ["collection", "created_at"]
    list_select_related = ["collection"]
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in IngestJob._meta.fields] + ["batches_progress"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[IngestJob]:
        jobs: QuerySet[IngestJob] = super().get_queryset(request)
        return scoped_rows(request, jobs, "collection__name")

    @admin.display(description=_("sources done"))
    def progress(self, obj: IngestJob) -> str:
        return f"{obj.done} / {obj.total}"

    @admin.display(description=_("batches done"))
    def batches_progress(self, obj: IngestJob) -> str:
        return f"{obj.batches_done} / {obj.batches}"
