"""Pruning what the pages record: query log entries and idle conversations past their retention.

Below both the web layer (which writes the rows) and the management commands (which prune them
daily from cron), so that a command never imports the web layer.
"""

from __future__ import annotations

import datetime

from django.utils import timezone

from .conf import rag_settings, web_settings
from .models import Conversation, QueryLog

__all__ = ["conversation_retention_days", "log_retention_days", "prune_conversations", "prune_query_log"]


def log_retention_days() -> int:
    """``RAG["WEB"]["LOG_RETENTION_DAYS"]`` (90 by default)."""
    days: int = web_settings()["LOG_RETENTION_DAYS"]
    return days


def conversation_retention_days() -> int:
    """``RAG["WEB"]["CONVERSATION_RETENTION_DAYS"]`` (30 by default)."""
    days: int = web_settings()["CONVERSATION_RETENTION_DAYS"]
    return days


def _cutoff(days: object) -> datetime.datetime:
    if isinstance(days, bool) or not isinstance(days, int) or days < 0:
        raise ValueError(f"the retention must be a whole number of days >= 0, got {days!r}")
    return timezone.now() - datetime.timedelta(days=days)


def prune_query_log(days: int | None = None, *, using: str | None = None) -> int:
    """Delete entries older than ``days`` (default ``RAG["WEB"]["LOG_RETENTION_DAYS"]``); returns how many."""
    cutoff = _cutoff(log_retention_days() if days is None else days)
    deleted, _ = QueryLog.objects.using(using or rag_settings.DATABASE).filter(created_at__lt=cutoff).delete()
    return deleted


def prune_conversations(days: int | None = None, *, using: str | None = None) -> int:
    """Delete conversations idle for more than ``days`` (default CONVERSATION_RETENTION_DAYS)."""
    cutoff = _cutoff(conversation_retention_days() if days is None else days)
    rows = Conversation.objects.using(using or rag_settings.DATABASE).filter(updated_at__lt=cutoff)
    count = rows.count()
    rows.delete()
    return count
