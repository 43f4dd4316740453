"""Celery tasks: thin wrappers over ``django_rag.media``. Celery is optional (the "celery" extra).

The tasks are ``acks_late`` and rejected back to the queue when their worker dies, so a
killed worker's ingestion runs again elsewhere; that is safe because ingestion is an
idempotent sync by chunk hash under a per-document lock. Transient failures (embedder
429/5xx, lost connections) are retried with exponential backoff and jitter
(``RAG["MEDIA"]["MAX_RETRIES"]``, ``RETRY_BACKOFF``, ``RETRY_BACKOFF_MAX``); the last attempt
records the failure on the Document and sends ``ingestion_failed``.
"""

from __future__ import annotations

import random
from typing import Any

from . import media
from .ingestion import is_transient

__all__ = ["backoff", "ingest", "ingest_task", "remove", "remove_task"]

_OPTIONS: dict[str, Any] = {
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
}


def backoff(retries: int, settings: dict[str, Any]) -> float:
    """Seconds before retry number ``retries + 1``: exponential, capped, with equal jitter."""
    delay = min(float(settings["RETRY_BACKOFF"]) * 2**retries, float(settings["RETRY_BACKOFF_MAX"]))
    # Equal jitter: rows that failed together (one rate limit) come back spread out.
    return delay / 2 + random.uniform(0, delay / 2)


def ingest(task: Any, app_label: str, model_name: str, pk: Any) -> str:
    """Ingest one row; a transient failure is retried until MAX_RETRIES, then recorded as failed."""
    settings = media.media_settings()
    final = task.request.retries >= settings["MAX_RETRIES"]
    try:
        result = media.ingest_instance(app_label, model_name, pk, raise_transient=not final)
    except Exception as exc:
        # Transient errors come back here to be retried; anything else (an unregistered model
        # on a worker running older code) fails the task, logged by Celery.
        if not is_transient(exc):
            raise
        raise task.retry(
            exc=exc, countdown=backoff(task.request.retries, settings), max_retries=settings["MAX_RETRIES"]
        ) from exc
    return result.status


def remove(task: Any, app_label: str, model_name: str, pk: Any) -> int:
    """Remove the documents of a deleted row; a lost database connection is retried."""
    settings = media.media_settings()
    try:
        return media.remove_instance(app_label, model_name, pk)
    except Exception as exc:
        if not is_transient(exc) or task.request.retries >= settings["MAX_RETRIES"]:
            raise
        raise task.retry(
            exc=exc, countdown=backoff(task.request.retries, settings), max_retries=settings["MAX_RETRIES"]
        ) from exc


ingest_task: Any = None
remove_task: Any = None
try:
    from celery import shared_task
except ImportError:  # pragma: no cover - without Celery, media.py runs ingestion inline
    pass
else:
    ingest_task = shared_task(name="django_rag.ingest", **_OPTIONS)(ingest)
    remove_task = shared_task(name="django_rag.remove", **_OPTIONS)(remove)
