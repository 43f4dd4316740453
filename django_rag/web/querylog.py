"""Writing and reading the query log: record a search or an ask, rate an answer, report.

``prune`` is ``django_rag.retention.prune_query_log``, re-exported here where it used to live.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Avg, Count, Max, QuerySet
from django.db.models.functions import Lower, Trim
from django.http import HttpRequest
from django.utils import timezone

from ..conf import rag_settings
from ..models import QueryLog
from ..retention import prune_query_log as prune
from .conf import web_settings
from .scope import Scope

__all__ = [
    "finish_ask",
    "frequent_queries",
    "log_query",
    "owned_entry",
    "prune",
    "rate_answer",
    "zero_hit_queries",
]

logger = logging.getLogger(__name__)


def log_query(
    request: HttpRequest,
    *,
    kind: str,
    query: str,
    mode: str,
    collection: str,
    scope: Scope,
    hit_count: int,
    latency_ms: float,
    answer: str = "",
) -> QueryLog | None:
    """Record one search or ask, unless ``RAG["WEB"]["LOG_QUERIES"]`` is off (then None)."""
    if not web_settings()["LOG_QUERIES"]:
        return None
    user = request.user if request.user.is_authenticated else None
    session = getattr(request, "session", None)
    try:
        # A savepoint, so a refused write (a read-only replica, a full disk) leaves the request's
        # transaction usable: the answer matters more than its log entry.
        with transaction.atomic(using=rag_settings.DATABASE):
            if user is None and session is not None and session.session_key is None:
                session.save()  # an anonymous asker needs a key to rate the answer with
            return QueryLog.objects.using(rag_settings.DATABASE).create(
                kind=kind,
                query=query,
                mode=mode,
                collection=collection,
                user=user,
                session_key=(session.session_key or "") if session is not None and user is None else "",
                tenant=scope.tenant,
                scope=scope.as_dict(),
                hit_count=hit_count,
                latency_ms=latency_ms,
                answer=answer,
            )
    except DatabaseError as exc:
        logger.warning("django-rag web: the query log entry was not written (%s)", exc)
        return None


def finish_ask(entry: QueryLog | None, *, answer: str, latency_ms: float) -> None:
    """Store the answer text and the total time once a streamed answer has ended."""
    if entry is None:
        return
    entry.answer = answer
    entry.latency_ms = latency_ms
    entry.save(update_fields=["answer", "latency_ms"])


def owned_entry(request: HttpRequest, pk: Any) -> QueryLog | None:
    """The ask entry ``pk`` if ``request``'s user (or anonymous session) wrote it, else None."""
    entries = QueryLog.objects.using(rag_settings.DATABASE).filter(pk=pk, kind=QueryLog.Kind.ASK)
    if request.user.is_authenticated:
        entries = entries.filter(user=request.user)
    else:
        session = getattr(request, "session", None)
        key = session.session_key if session is not None else None
        if not key:
            return None
        entries = entries.filter(user=None, session_key=key)
    return entries.first()


def rate_answer(entry: QueryLog, *, helpful: bool, comment: str) -> None:
    entry.feedback = QueryLog.Feedback.UP if helpful else QueryLog.Feedback.DOWN
    entry.feedback_comment = comment
    entry.feedback_at = timezone.now()
    entry.save(update_fields=["feedback", "feedback_comment", "feedback_at"])


def _grouped(entries: QuerySet[QueryLog], limit: int) -> list[dict[str, Any]]:
    # The same question typed with other capitals or spaces counts once.
    rows = (
        entries.annotate(normalized=Lower(Trim("query")))
        .values("normalized")
        .annotate(
            count=Count("id"),
            avg_hits=Avg("hit_count"),
            last=Max("created_at"),
            collections=Count("collection", distinct=True),
        )
        .order_by("-count", "-last")[:limit]
    )
    return [dict(row) for row in rows]


def frequent_queries(entries: QuerySet[QueryLog], *, limit: int = 50) -> list[dict[str, Any]]:
    """The most frequent queries: ``normalized``, ``count``, ``avg_hits``, ``last``."""
    return _grouped(entries, limit)


def zero_hit_queries(entries: QuerySet[QueryLog], *, limit: int = 50) -> list[dict[str, Any]]:
    """The queries that found nothing, most frequent first."""
    return _grouped(entries.filter(hit_count=0), limit)
