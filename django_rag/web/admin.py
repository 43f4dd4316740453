"""The admin of the knowledge base: collections, documents with their chunks, ingest jobs, the query log.

Registered by ``django_rag/admin.py`` (which Django's admin autodiscovers). Staff who are not
superusers see only the documents and query log entries of their scope (``RAG["WEB"]["SCOPE"]``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.core.checks import run_checks
from django.db import DatabaseError, connections
from django.db.models import Count, Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..conf import rag_settings
from ..exceptions import RagError
from ..ingest.switch import status as switch_status
from ..models import Chunk, Collection, Document
from ..stores import get_store
from .actions import reindex_collections, reindex_selected
from .admin_base import (
    ModelAdmin,
    html_table,
    retrieval_test_allowed,
    scoped_documents,
    sees_everything,
    viewing,
)
from .admin_rows import ChunkAdmin, DocumentAdmin, IngestJobAdmin, QueryLogAdmin
from .admin_views import retrieval_test_view
from .adminscope import ScopedAdminMixin, operator_scope
from .scope import Scope

__all__ = [
    "ChunkAdmin",
    "CollectionAdmin",
    "DocumentAdmin",
    "IngestJobAdmin",
    "ModelAdmin",
    "QueryLogAdmin",
    "ScopedAdminMixin",
    "reindex_selected",
]


_SETTINGS_FIELDS = ["embedder", "text_config", "text_search", "chunk_size", "chunk_overlap"]


@admin.register(Collection)
class CollectionAdmin(ModelAdmin):
    list_display = ["name", "embedder", "text_config", "text_search", "document_count", "retrieval_test"]
    search_fields = ["name"]
    actions = [reindex_collections]
    readonly_fields = [
        "created_at",
        "updated_at",
        "declared_settings",
        "status_summary",
        "active_embedder",
        "active_space",
        "switch_progress",
        "spaces",
        "check_messages",
        "retrieval_test",
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Collection]:
        found: QuerySet[Collection] = super().get_queryset(request)
        scope = operator_scope(request)
        if scope is not None and scope.collections is not None:
            found = found.filter(name__in=scope.collections)
        if scope is None or scope == Scope():
            return found.annotate(document_count=Count("documents"))
        # The count column holds only the documents this operator may see.
        visible = scope.documents(Document.objects.all()).values("pk")
        return found.annotate(document_count=Count("documents", filter=Q(documents__in=visible)))

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A collection's settings and rows are shared by every tenant: an operator with a scope
        # may run the (scoped) actions of the list, never edit or delete the collection itself.
        if obj is not None and not sees_everything(request):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return sees_everything(request) and super().has_delete_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return sees_everything(request) and super().has_add_permission(request)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        token = viewing.set(request)
        try:
            response = super().change_view(request, object_id, form_url, extra_context)
            render = getattr(response, "render", None)
            if render is not None:
                render()  # now, while the fields can see whose scope to count in
            return response
        finally:
            viewing.reset(token)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        token = viewing.set(request)
        try:
            response = super().changelist_view(request, extra_context)
            render = getattr(response, "render", None)
            if render is not None:
                render()  # the retrieval test column shows a link only where the viewer may test
            return response
        finally:
            viewing.reset(token)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and rag_settings.collection_options(obj.name) is not None:
            # Declared in RAG["COLLECTIONS"]: settings are the source of truth, edits would be undone.
            fields = ["name", *_SETTINGS_FIELDS, *fields]
        return fields

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(retrieval_test_view(self))
        info = self.opts.app_label, self.opts.model_name
        return [
            path("<path:object_id>/retrieval-test/", view, name="{}_{}_retrieval_test".format(*info)),
            *super().get_urls(),
        ]

    def delete_model(self, request: HttpRequest, obj: Collection) -> None:
        # In committed batches of documents (stores/removal.py): Django's cascade would read every
        # document and chunk into memory and hold one lock per row until the end.
        get_store(obj.using).delete_collection(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Collection]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        # Counts, not Django's list of every related row (a million documents on one page).
        collections = list(objs)
        counts: list[tuple[type[Model], int]] = [
            (Collection, len(collections)),
            (Document, Document.objects.filter(collection__in=collections).count()),
            (Chunk, Chunk.objects.filter(collection__in=collections).count()),
        ]
        registry = self.admin_site._registry
        needed = {
            str(model._meta.verbose_name)
            for model, count in counts
            if count and model in registry and not registry[model].has_delete_permission(request)
        }
        summary = {str(model._meta.verbose_name_plural): count for model, count in counts if count}
        return [str(obj) for obj in collections], summary, needed, []

    @admin.display(description=_("documents"), ordering="document_count")
    def document_count(self, obj: Any) -> int:
        return int(getattr(obj, "document_count", 0))

    @admin.display(description=_("retrieval test"))
    def retrieval_test(self, obj: Collection) -> str:
        request = viewing.get()
        if obj.pk is None or (request is not None and not retrieval_test_allowed(request, obj.name)):
            return "-"
        url = reverse("admin:django_rag_collection_retrieval_test", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, _("Test retrieval"))

    @admin.display(description=_("settings from RAG['COLLECTIONS']"))
    def declared_settings(self, obj: Collection) -> str:
        options = rag_settings.collection_options(obj.name) if obj.pk else None
        if options is None:
            return str(_("Not declared in settings: the row's values apply."))
        return html_table([_("setting"), _("value")], [(key, repr(value)) for key, value in options.items()])

    @admin.display(description=_("documents and chunks by status"))
    def status_summary(self, obj: Collection) -> str:
        if obj.pk is None:
            return "-"
        documents = scoped_documents(viewing.get(), Document.objects.using(obj.using).filter(collection=obj))
        rows = (
            documents.values_list("status")
            .annotate(Count("id", distinct=True), Count("chunks"))
            .order_by("status")
        )
        labels = dict(Document.Status.choices)
        return html_table(
            [_("status"), _("documents"), _("chunks")],
            [(labels.get(status, status), docs, chunks) for status, docs, chunks in rows],
        )

    @admin.display(description=_("embedding spaces"))
    def spaces(self, obj: Collection) -> str:
        if obj.pk is None:
            return "-"
        try:
            current = obj.space
        except RagError as exc:
            current = f"({exc})"
        documents = scoped_documents(viewing.get(), Document.objects.using(obj.using).filter(collection=obj))
        counts = (
            Chunk.objects.using(obj.using)
            .filter(collection=obj, document__in=documents.values("pk"))
            .values("space")
            .annotate(n=Count("id"))
            .order_by()
        )
        indexed = _indexed_spaces(obj.using)
        rows = []
        for row in counts:
            space = row["space"]
            rows.append(
                (
                    space + (" ✓" if space == current else ""),
                    row["n"],
                    _("yes") if space in indexed else _("no: run manage.py rag_migration"),
                )
            )
        if not rows:
            rows.append(
                (current, 0, _("yes") if current in indexed else _("no: run manage.py rag_migration"))
            )
        return html_table([_("space (✓ current)"), _("chunks"), _("ANN index")], rows)

    @admin.display(description=_("embedder switch"))
    def switch_progress(self, obj: Collection) -> str:
        """What ``manage.py rag_status`` shows: a switch's documents done, rate and ETA."""
        if obj.pk is None:
            return "-"
        try:
            report = switch_status(obj, using=obj.using)
        except (RagError, DatabaseError) as exc:
            return f"({exc})"
        if not report.target_space:
            return str(_("None in progress."))
        rate = f"{report.rate:.1f}" if report.rate else "-"
        eta = str(timedelta(seconds=round(report.eta_seconds))) if report.eta_seconds is not None else "-"
        rows = [
            (_("from"), f"{report.active_space} ({report.active_embedder})"),
            (_("to"), f"{report.target_space} ({report.target_embedder})"),
            (
                _("progress"),
                _("%(done)d/%(total)d documents (%(percent).1f%%)")
                % {"done": report.documents_done, "total": report.documents_total, "percent": report.percent},
            ),
            (_("rate (documents/s)"), rate),
            (_("ETA"), eta),
            (_("started"), report.started_at),
            (_("last batch"), report.progress_at or "-"),
        ]
        if report.problem:
            rows.append((_("problem"), report.problem))
        return html_table([_("switch"), _("value")], rows)

    @admin.display(description=_("system check messages"))
    def check_messages(self, obj: Collection) -> str:
        if obj.pk is None:
            return "-"
        try:
            space = obj.space
        except RagError:
            space = ""
        needles = [repr(obj.name)] + ([repr(space)] if space else [])
        found = [
            message
            for message in run_checks(databases=[obj.using])
            if (message.id or "").startswith("django_rag.") and any(n in str(message.msg) for n in needles)
        ]
        if not found:
            return str(_("None."))
        return html_table([_("check"), _("message"), _("hint")], [(m.id, m.msg, m.hint or "") for m in found])


def _indexed_spaces(using: str) -> set[str]:
    """Spaces that have a partial ANN index on the chunk table (by definition, whatever its name)."""
    try:
        with connections[using].cursor() as cursor:
            cursor.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = 'django_rag_chunk' "
                "AND (indexdef ILIKE '%%USING hnsw%%' OR indexdef ILIKE '%%USING ivfflat%%')"
            )
            definitions = [row[0] for row in cursor.fetchall()]
    except DatabaseError:
        return set()
    spaces = set(Chunk.objects.using(using).values_list("space", flat=True).distinct())
    return {space for space in spaces if any(f"'{space}'" in d for d in definitions)}
