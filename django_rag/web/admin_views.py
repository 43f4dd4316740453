"""Admin pages beyond the model lists: the retrieval test of a collection and the query report."""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext as _

from ..api import collection as get_collection
from ..exceptions import QueryError, RagError
from ..models import Collection
from .explain import explain
from .forms import RetrievalTestForm
from .querylog import frequent_queries, zero_hit_queries
from .scope import scope_for, visible_collections

__all__ = ["query_report_view", "retrieval_test_view"]

View = Callable[..., HttpResponse]

logger = logging.getLogger("django_rag.web")


def retrieval_test_view(model_admin: Any) -> View:
    """``admin/django_rag/collection/<id>/retrieval-test/``: one search with every figure behind it."""

    def view(request: HttpRequest, object_id: str) -> HttpResponse:
        row = model_admin.get_object(request, object_id)
        if row is None:
            raise Http404(_("No collection with id %(id)s.") % {"id": object_id})
        if not model_admin.has_view_permission(request, row):
            raise PermissionDenied
        scope = scope_for(request) if not request.user.is_superuser else None
        if scope is not None and row.name not in visible_collections(request):
            # Staff test only the collections the pages offer them (RAG["WEB"]["COLLECTIONS"] and
            # their scope); the same answer as for a missing one.
            raise Http404(_("No collection with id %(id)s.") % {"id": object_id})
        form = RetrievalTestForm(request.GET if "q" in request.GET else None)
        context: dict[str, Any] = {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "original": row,
            "title": _("Retrieval test: %(name)s") % {"name": row.name},
            "form": form,
            "scope": scope,
        }
        status = 200
        if form.is_bound:
            status = _run(row, form.cleaned_data, scope, context) if form.is_valid() else 400
        return TemplateResponse(
            request, "admin/django_rag/collection/retrieval_test.html", context, status=status
        )

    return view


def _run(row: Collection, data: dict[str, Any], scope: Any, context: dict[str, Any]) -> int:
    options: dict[str, Any] = scope.search_options() if scope is not None else {}
    if data["tenant"] and scope is None:
        options["tenant"] = data["tenant"]  # superusers may test as any tenant; staff keep their own
    candidates = data["candidates"]
    weights = (data["vector_weight"], data["text_weight"])
    try:
        kb = get_collection(row)
        started = time.perf_counter()
        hits = kb.search(
            data["q"],
            k=data["k"],
            mode=data["mode"],
            candidates=candidates,
            weights=weights,
            rrf_k=data["rrf_k"],
            **options,
        )
        elapsed = (time.perf_counter() - started) * 1000
        explanation = explain(kb, data["q"], hits, mode=data["mode"], weights=weights, rrf_k=data["rrf_k"])
    except QueryError as exc:
        context["error"] = str(exc)
        return 400
    except RagError as exc:
        context["error"] = _("The search failed: %(reason)s") % {"reason": exc}
        return 503
    except DatabaseError as exc:
        # The database's own text (SQL, a LINE 1 pointer) goes to the log, never to the page.
        logger.error("django-rag admin: retrieval test failed", exc_info=exc)
        context["error"] = _("The search failed in the database; the server log has the details.")
        return 503
    context.update(explanation=explanation, elapsed_ms=elapsed, mode=data["mode"], searched_as=options)
    return 200


def query_report_view(model_admin: Any) -> View:
    """``admin/django_rag/querylog/report/``: the most frequent queries and the ones that found nothing."""

    def view(request: HttpRequest) -> HttpResponse:
        if not model_admin.has_view_permission(request):
            raise PermissionDenied
        try:
            days = max(1, min(int(request.GET.get("days", 30)), 3650))
        except ValueError:
            days = 30
        entries = model_admin.get_queryset(request).filter(
            created_at__gte=timezone.now() - datetime.timedelta(days=days)
        )
        kind = request.GET.get("kind", "")
        if kind in ("search", "ask"):
            entries = entries.filter(kind=kind)
        context = {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "title": _("Queries of the last %(days)d days") % {"days": days},
            "days": days,
            "kind": kind,
            "frequent": frequent_queries(entries),
            "zero_hits": zero_hit_queries(entries),
            "total": entries.count(),
        }
        return TemplateResponse(request, "admin/django_rag/querylog/report.html", context)

    return view
