"""The admin of the knowledge base: collections, documents with their chunks, ingest jobs, the query log.

Registered by ``django_rag/admin.py`` (which Django's admin autodiscovers). Staff who are not
superusers see only the documents and query log entries of their scope (``RAG["WEB"]["SCOPE"]``).
"""

from __future__ import annotations

from contextvars import ContextVar
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.contrib import admin
from django.core.checks import run_checks
from django.db import DatabaseError, connections
from django.db.models import Count, Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from ..conf import rag_settings
from ..exceptions import RagError
from ..ingest.switch import status as switch_status
from ..models import Chunk, Collection, Document, IngestJob
from ..stores import get_store
from .actions import reindex_collections, reindex_selected, remove_from_index, retry_failed
from .admin_views import query_report_view, retrieval_test_view
from .adminscope import ScopedAdminMixin, operator_scope
from .models import QueryLog
from .scope import Scope, scope_for, visible_collections

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

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[Any]
else:  # ModelAdmin is generic in django-stubs only, not at run time
    ModelAdmin = admin.ModelAdmin

_SETTINGS_FIELDS = ["embedder", "text_config", "text_search", "chunk_size", "chunk_overlap"]
_CHUNK_LIST_LIMIT = 200
# The request whose change page is being rendered: read-only fields get only the object, and the
# counts they show must stay within the viewer's scope.
_viewing: ContextVar[HttpRequest | None] = ContextVar("django_rag_admin_request", default=None)
_Row = TypeVar("_Row", bound=Model)


def _sees_everything(request: HttpRequest) -> bool:
    scope = operator_scope(request)
    return scope is None or scope == Scope()


def retrieval_test_allowed(request: HttpRequest, name: str) -> bool:
    """Superusers test any collection; other operators those the pages offer them."""
    return operator_scope(request) is None or name in visible_collections(request)


def _scoped(request: HttpRequest | None, documents: QuerySet[Document]) -> QuerySet[Document]:
    if request is None:
        return documents.none()
    if getattr(request.user, "is_superuser", False):
        return documents
    return scope_for(request).documents(documents)


def _scoped_rows(request: HttpRequest, rows: QuerySet[_Row], collection_names: str) -> QuerySet[_Row]:
    """Rows carrying a ``tenant`` and a collection (name lookup ``collection_names``), narrowed to
    the viewer's scope: log entries and ingest jobs, which have no tags to narrow by."""
    if getattr(request.user, "is_superuser", False):
        return rows
    scope = scope_for(request)
    if scope.tenant is not None:
        rows = rows.filter(tenant=scope.tenant)
    if scope.collections is not None:
        rows = rows.filter(**{f"{collection_names}__in": scope.collections})
    return rows.none() if scope.empty else rows


def _table(headers: list[Any], rows: list[tuple[Any, ...]]) -> SafeString:
    head = format_html_join("", "<th scope='col'>{}</th>", ((h,) for h in headers))
    body = format_html_join(
        "", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((c,) for c in row)),) for row in rows)
    )
    return format_html("<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>", head, body)


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
        if obj is not None and not _sees_everything(request):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _sees_everything(request) and super().has_delete_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return _sees_everything(request) and super().has_add_permission(request)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        token = _viewing.set(request)
        try:
            response = super().change_view(request, object_id, form_url, extra_context)
            render = getattr(response, "render", None)
            if render is not None:
                render()  # now, while the fields can see whose scope to count in
            return response
        finally:
            _viewing.reset(token)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        token = _viewing.set(request)
        try:
            response = super().changelist_view(request, extra_context)
            render = getattr(response, "render", None)
            if render is not None:
                render()  # the retrieval test column shows a link only where the viewer may test
            return response
        finally:
            _viewing.reset(token)

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
        request = _viewing.get()
        if obj.pk is None or (request is not None and not retrieval_test_allowed(request, obj.name)):
            return "-"
        url = reverse("admin:django_rag_collection_retrieval_test", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, _("Test retrieval"))

    @admin.display(description=_("settings from RAG['COLLECTIONS']"))
    def declared_settings(self, obj: Collection) -> str:
        options = rag_settings.collection_options(obj.name) if obj.pk else None
        if options is None:
            return str(_("Not declared in settings: the row's values apply."))
        return _table([_("setting"), _("value")], [(key, repr(value)) for key, value in options.items()])

    @admin.display(description=_("documents and chunks by status"))
    def status_summary(self, obj: Collection) -> str:
        if obj.pk is None:
            return "-"
        documents = _scoped(_viewing.get(), Document.objects.using(obj.using).filter(collection=obj))
        rows = (
            documents.values_list("status")
            .annotate(Count("id", distinct=True), Count("chunks"))
            .order_by("status")
        )
        labels = dict(Document.Status.choices)
        return _table(
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
        documents = _scoped(_viewing.get(), Document.objects.using(obj.using).filter(collection=obj))
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
        return _table([_("space (✓ current)"), _("chunks"), _("ANN index")], rows)

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
        return _table([_("switch"), _("value")], rows)

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
        return _table([_("check"), _("message"), _("hint")], [(m.id, m.msg, m.hint or "") for m in found])


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


class _ReadOnly(ModelAdmin):
    """Rows written by ingestion: viewable and deletable, never edited by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Document)
class DocumentAdmin(_ReadOnly):
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
        return _scoped(request, super().get_queryset(request))

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A document's page stays read-only (ingestion writes it); the change permission in general
        # is what the re-index and retry actions of the list require.
        return obj is None and super(_ReadOnly, self).has_change_permission(request)

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
            .values_list("index", "page", "token_count", "space", "content")[: _CHUNK_LIST_LIMIT + 1]
        )
        rows = [
            (index, page or "-", tokens, space, content[:120] + ("…" if len(content) > 120 else ""))
            for index, page, tokens, space, content in chunks
        ]
        more = len(rows) > _CHUNK_LIST_LIMIT
        table = _table([_("#"), _("page"), _("tokens"), _("space"), _("text")], rows[:_CHUNK_LIST_LIMIT])
        if more:
            note = _("Only the first %(count)d chunks are shown.") % {"count": _CHUNK_LIST_LIMIT}
            return format_html("{}<p>{}</p>", table, note)
        return table


@admin.register(Chunk)
class ChunkAdmin(_ReadOnly):
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
        return chunks.filter(document__in=_scoped(request, Document.objects.all()).values("pk"))


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
class QueryLogAdmin(_ReadOnly):
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
        return _scoped_rows(request, entries, "collection")

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
class IngestJobAdmin(_ReadOnly):
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
        return _scoped_rows(request, jobs, "collection__name")

    @admin.display(description=_("sources done"))
    def progress(self, obj: IngestJob) -> str:
        return f"{obj.done} / {obj.total}"

    @admin.display(description=_("batches done"))
    def batches_progress(self, obj: IngestJob) -> str:
        return f"{obj.batches_done} / {obj.batches}"
