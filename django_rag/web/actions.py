"""Admin actions: re-index, remove from the index, retry failed ingestion, re-index a collection.

``reindex_selected`` also works on a site's registered models: ``actions = [reindex_selected]``
in the site's ModelAdmin. Every action that changes data needs the change (or delete) permission,
acts on the rows of the operator's scope only (``adminscope.operator_scope``) and counts only them.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from ..api import collection as get_collection
from ..exceptions import RagError
from ..ingest.registration import registrations
from ..ingest.switch import reembed
from ..models import Collection, Document
from ..stores import get_store
from ..tasks import schedule_ingest
from .adminscope import operator_scope
from .scope import Scope

__all__ = ["reindex_collections", "reindex_selected", "remove_from_index", "retry_failed"]


def _registered() -> set[type[Any]]:
    return {registration.model for registration in registrations()}


def _schedule_documents(documents: QuerySet[Document]) -> tuple[int, int]:
    """Ingest again the rows these documents came from; (scheduled, not from a registered model)."""
    registered = _registered()
    scheduled = skipped = 0
    for document in documents.select_related("owner_type"):
        model = document.owner_type.model_class() if document.owner_type else None
        if model in registered and document.owner_id is not None:
            schedule_ingest(model, document.owner_id)
            scheduled += 1
        else:
            skipped += 1
    return scheduled, skipped


def _report(modeladmin: admin.ModelAdmin[Any], request: HttpRequest, scheduled: int, skipped: int) -> None:
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


@admin.action(description=_("Re-index selected in the knowledge base"), permissions=["change"])
def reindex_selected(
    modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Any]
) -> None:
    """Ingest the selected rows again (for Documents: the rows they came from), off the request path."""
    scheduled = skipped = 0
    if queryset.model is Document:
        scheduled, skipped = _schedule_documents(queryset)
    elif queryset.model in _registered():
        for pk in queryset.values_list("pk", flat=True):
            schedule_ingest(queryset.model, pk)
            scheduled += 1
    _report(modeladmin, request, scheduled, skipped)


@admin.action(description=_("Retry the failed ones among the selected"), permissions=["change"])
def retry_failed(
    modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Document]
) -> None:
    scheduled, skipped = _schedule_documents(queryset.filter(status=Document.Status.FAILED))
    _report(modeladmin, request, scheduled, skipped)


@admin.action(description=_("Remove selected from the index"), permissions=["delete"])
def remove_from_index(
    modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Document]
) -> None:
    """Delete the documents and their chunks through the store (the row they came from stays)."""
    removed = 0
    for document in queryset.select_related("collection"):
        removed += get_store(document.collection.using).delete(
            document.collection, source_id=document.source_id, tenant=document.tenant
        )
    modeladmin.message_user(
        request,
        ngettext(
            "%(count)d document removed from the index.",
            "%(count)d documents removed from the index.",
            removed,
        )
        % {"count": removed},
        messages.SUCCESS,
    )


@admin.action(description=_("Re-index selected collections"), permissions=["change"])
def reindex_collections(
    modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Collection]
) -> None:
    """Rows from registered models are ingested again (on the workers when Celery has a broker);
    documents left in an older embedding space are moved to the current one here.

    An operator with a scope re-queues the rows of that scope only; moving a collection to its
    current embedding space touches every tenant's documents, so it is left to operators who see
    them all (superusers, or a scope that restricts nothing)."""
    scope = operator_scope(request)
    whole = scope is None or scope == Scope()
    for row in queryset:
        if scope is not None and not scope.allows_collection(row.name):
            continue
        try:
            kb = get_collection(row)
            moved = reembed(kb) if whole else None
        except RagError as exc:
            modeladmin.message_user(request, f"{row.name}: {exc}", messages.ERROR)
            continue
        documents = Document.objects.using(kb.using).filter(collection=kb)
        if scope is not None:
            documents = scope.documents(documents)
        scheduled, skipped = _schedule_documents(documents)
        if moved is None:
            message = _(
                "%(name)s: %(scheduled)d documents scheduled from their rows, %(other)d from other "
                "sources left as they are."
            )
        else:
            message = _(
                "%(name)s: %(scheduled)d documents scheduled from their rows, %(moved)d moved to the "
                "current embedding space, %(other)d from other sources left as they are."
            )
        counts = {"name": kb.name, "scheduled": scheduled, "other": skipped}
        modeladmin.message_user(
            request, message % {**counts, "moved": moved.documents if moved else 0}, messages.SUCCESS
        )
