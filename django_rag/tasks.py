"""Work off the request path: the save/delete wiring of registered models and the Celery tasks.

Saving a registered row schedules ``(app_label, model_name, pk)`` once its transaction commits:
a Celery task when a broker is configured (``RAG["ASYNC"]``), otherwise the same library call
inline after the commit. The tasks are thin adapters over ``django_rag.ingest.rows``.

The tasks are ``acks_late`` and rejected back to the queue when their worker dies, so a
killed worker's ingestion runs again elsewhere; that is safe because ingestion is an
idempotent sync by chunk hash under a per-document lock. Transient failures (embedder
429/5xx, lost connections) are retried with exponential backoff and jitter
(``RAG["MEDIA"]["MAX_RETRIES"]``, ``RETRY_BACKOFF``, ``RETRY_BACKOFF_MAX``); the last attempt
records the failure on the Document and sends ``ingestion_failed``. Celery is optional (the
"celery" extra).
"""

from __future__ import annotations

import logging
import random
from functools import partial
from typing import Any

from django.db import models, transaction
from django.db.models.signals import post_delete, post_save

from .conf import rag_settings
from .exceptions import ConfigurationError
from .ingest.registration import get_registration, media_settings, registration_for
from .ingest.rows import ingest_instance, remove_instance
from .models import Collection
from .retry import is_transient
from .stores import get_store

__all__ = [
    "backoff",
    "connect_signals",
    "enqueue",
    "ingest",
    "ingest_task",
    "remove",
    "remove_task",
    "schedule_ingest",
    "schedule_removal",
    "uses_celery",
]

logger = logging.getLogger("django_rag.ingest")

_OPTIONS: dict[str, Any] = {
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
}


def connect_signals() -> None:
    """Watch saves and deletes of registered models (``AppConfig.ready()`` calls this).

    One receiver for every sender, looking the model up in the registry: models registered
    after ``ready()`` are watched at once, and unregistering needs no disconnect.
    """
    post_save.connect(_on_save, weak=False, dispatch_uid="django_rag.tasks.save")
    post_delete.connect(_on_delete, weak=False, dispatch_uid="django_rag.tasks.delete")


def _watched(sender: type[models.Model]) -> bool:
    registration = registration_for(sender)
    return registration is not None and registration.auto and bool(media_settings()["SIGNALS"])


def _on_save(
    sender: type[models.Model], instance: models.Model, using: str | None = None, **kwargs: Any
) -> None:
    if _watched(sender):
        # After commit: a worker must see the committed row, and a rolled-back save indexes nothing.
        transaction.on_commit(partial(schedule_ingest, sender, instance.pk, using), using=using, robust=True)


def _on_delete(
    sender: type[models.Model], instance: models.Model, using: str | None = None, **kwargs: Any
) -> None:
    if _watched(sender):
        transaction.on_commit(partial(schedule_removal, sender, instance.pk, using), using=using, robust=True)


def uses_celery() -> bool:
    """True when ``RAG["ASYNC"]`` is on, Celery is installed and its current app has a broker."""
    if not rag_settings.ASYNC or current_app is None:
        return False
    return bool(current_app.conf.broker_write_url or current_app.conf.broker_url)


def schedule_ingest(model: type[models.Model], pk: Any, row_using: str | None = None) -> None:
    """Ingest a row off the request path: a Celery task when possible, otherwise inline now."""
    _schedule("ingest", model, pk, row_using)


def schedule_removal(model: type[models.Model], pk: Any, row_using: str | None = None) -> None:
    """Remove a row's documents: a Celery task when possible, otherwise inline now."""
    _schedule("remove", model, pk, row_using)


def enqueue(
    action: str, model: type[models.Model], pk: Any, row_using: str | None = None, using: str | None = None
) -> None:
    """Send the Celery task for ``action`` ("ingest" or "remove") of a row; raises if it cannot.

    ``row_using`` is the row's database, ``using`` the knowledge base's (default ``RAG["DATABASE"]``).
    """
    task = ingest_task if action == "ingest" else remove_task
    if task is None:
        raise ConfigurationError('Celery is not installed: pip install "django-rag[celery]"')
    # Task arguments travel as JSON: integer keys stay integers, anything else (UUID...) a string.
    key = pk if isinstance(pk, int) else str(pk)
    args = (model._meta.app_label, model._meta.model_name, key, row_using, using)
    task.apply_async(args=args, queue=media_settings()["QUEUE"])


def _schedule(action: str, model: type[models.Model], pk: Any, row_using: str | None) -> None:
    meta = model._meta
    if uses_celery():
        try:
            if action == "ingest":
                _mark_pending(model, pk)
            enqueue(action, model, pk, row_using)
            return
        except Exception:
            # A broker outage must not lose the change, nor fail a save that has already committed.
            logger.exception(
                "django-rag: cannot enqueue %s of %s:%s; running it inline", action, meta.label_lower, pk
            )
    try:
        if action == "ingest":
            ingest_instance(meta.app_label, meta.model_name or "", pk, row_using=row_using)
        else:
            remove_instance(meta.app_label, meta.model_name or "", pk)
    except Exception:
        logger.exception("django-rag: %s of %s:%s failed", action, meta.label_lower, pk)


def _mark_pending(model: type[models.Model], pk: Any) -> None:
    """Flag an existing document as waiting for a worker (``rag_reindex --changed-only`` retries it)."""
    registration = get_registration(model)
    kb = Collection.objects.db_manager(rag_settings.DATABASE).resolve(registration.collection)
    get_store(kb.using).mark_pending(kb, [registration.source_id(pk)])


def backoff(retries: int, settings: dict[str, Any]) -> float:
    """Seconds before retry number ``retries + 1``: exponential, capped, with equal jitter."""
    delay = min(float(settings["RETRY_BACKOFF"]) * 2**retries, float(settings["RETRY_BACKOFF_MAX"]))
    # Equal jitter: rows that failed together (one rate limit) come back spread out.
    return float(delay / 2 + random.uniform(0, delay / 2))


def ingest(
    task: Any,
    app_label: str,
    model_name: str,
    pk: Any,
    row_using: str | None = None,
    using: str | None = None,
) -> str:
    """Ingest one row; a transient failure is retried until MAX_RETRIES, then recorded as failed."""
    settings = media_settings()
    final = task.request.retries >= settings["MAX_RETRIES"]
    try:
        result = ingest_instance(
            app_label, model_name, pk, raise_transient=not final, row_using=row_using, using=using
        )
    except Exception as exc:
        # Transient errors come back here to be retried; anything else (an unregistered model
        # on a worker running older code) fails the task, logged by Celery.
        if not is_transient(exc):
            raise
        raise task.retry(
            exc=exc, countdown=backoff(task.request.retries, settings), max_retries=settings["MAX_RETRIES"]
        ) from exc
    return result.status


def remove(
    task: Any,
    app_label: str,
    model_name: str,
    pk: Any,
    row_using: str | None = None,
    using: str | None = None,
) -> int:
    """Remove the documents of a deleted row; a lost database connection is retried."""
    settings = media_settings()
    try:
        return remove_instance(app_label, model_name, pk, using=using)
    except Exception as exc:
        if not is_transient(exc) or task.request.retries >= settings["MAX_RETRIES"]:
            raise
        raise task.retry(
            exc=exc, countdown=backoff(task.request.retries, settings), max_retries=settings["MAX_RETRIES"]
        ) from exc


current_app: Any = None
ingest_task: Any = None
remove_task: Any = None
try:
    from celery import current_app, shared_task
except ImportError:  # pragma: no cover - without Celery, saves are ingested inline after commit
    pass
else:
    ingest_task = shared_task(name="django_rag.ingest", **_OPTIONS)(ingest)  # type: ignore[no-untyped-call]
    remove_task = shared_task(name="django_rag.remove", **_OPTIONS)(remove)  # type: ignore[no-untyped-call]
