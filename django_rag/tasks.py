"""Work off the request path: the save/delete wiring of registered models, Celery and Tasks API jobs.

Saving a registered row schedules ``(app_label, model_name, pk)`` once its transaction commits,
never running the ingestion inside the request:

- a Celery task when Celery has a broker (``RAG["ASYNC"]``, the default);
- otherwise a job of Django's Tasks API (``django.tasks`` on Django 6, the ``django-tasks``
  backport on 5.2) on the backend ``RAG["MEDIA"]["TASK_BACKEND"]``: with ``django-tasks-db``'s
  ``DatabaseBackend`` the job is a row in the site's own database, run by ``manage.py db_worker``
  and kept across restarts (``checks.py`` warns when the backend would run it immediately);
- inline after the commit only when a site asks for it with ``RAG["ASYNC"] = False`` (scripts,
  tests). The jobs and tasks are thin adapters over ``django_rag.ingest.rows``.

The tasks are ``acks_late`` and rejected back to the queue when their worker dies, so a
killed worker's ingestion runs again elsewhere; that is safe because ingestion is an
idempotent sync by chunk hash under a per-document lock. Transient failures (embedder
429/5xx, lost connections) are retried with exponential backoff and jitter
(``RAG["MEDIA"]["MAX_RETRIES"]``, ``RETRY_BACKOFF``, ``RETRY_BACKOFF_MAX``); the last attempt
records the failure on the Document and sends ``ingestion_failed``. Celery is optional (the
"celery" extra).

``rag_ingest ... --async`` sends batches of files to ``django_rag.ingest_batch`` on the
collection's queue (``django_rag.ingest.jobs``), with the same options and the same retries.

This module holds the save/delete wiring and the Tasks API jobs (whose dotted paths,
``django_rag.tasks.ingest_job``, are stored in queued rows and so never move); the Celery tasks
live in ``django_rag.celery_tasks`` and are re-exported here.
"""

from __future__ import annotations

import datetime
import logging
from functools import partial
from typing import Any

from django.apps import apps
from django.db import models, transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from .celery_tasks import (
    as_task,
    backoff,
    check_broker,
    enqueue,
    enqueue_batches,
    enqueue_switch,
    ingest,
    ingest_batch,
    ingest_batch_task,
    ingest_task,
    remove,
    remove_task,
    switch_fill,
    switch_flip,
    task_arguments,
    task_backend,
    uses_celery,
)
from .conf import rag_settings
from .exceptions import ConfigurationError
from .ingest.registration import get_registration, media_settings, registration_for
from .ingest.rows import ingest_instance, remove_instance, rescope_row
from .models import Collection
from .retry import is_transient
from .stores import get_store

__all__ = [
    "backoff",
    "check_broker",
    "connect_signals",
    "enqueue",
    "enqueue_batches",
    "enqueue_switch",
    "ingest",
    "ingest_batch",
    "ingest_batch_task",
    "ingest_task",
    "remove",
    "remove_task",
    "schedule_ingest",
    "schedule_removal",
    "switch_fill",
    "switch_flip",
    "task_backend",
    "uses_celery",
]


logger = logging.getLogger("django_rag.ingest")


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


def schedule_ingest(model: type[models.Model], pk: Any, row_using: str | None = None) -> None:
    """Ingest a row off the request path: a Celery task, or a job of the Tasks API (see the module)."""
    _schedule("ingest", model, pk, row_using)


def schedule_removal(model: type[models.Model], pk: Any, row_using: str | None = None) -> None:
    """Remove a row's documents off the request path: a Celery task, or a job of the Tasks API."""
    _schedule("remove", model, pk, row_using)


def enqueue_job(
    action: str,
    model: type[models.Model],
    pk: Any,
    row_using: str | None = None,
    using: str | None = None,
    *,
    attempt: int = 0,
    delay: float = 0.0,
) -> Any:
    """Queue ``action`` of a row as a job of Django's Tasks API; returns its ``TaskResult``."""
    job = ingest_job if action == "ingest" else remove_job
    if job is None:
        raise ConfigurationError(
            "Django's Tasks API is missing: pip install django-tasks django-tasks-db (Django 5.2), "
            "or set RAG['ASYNC'] = False to ingest inline after the commit"
        )
    settings = media_settings()
    options: dict[str, Any] = {
        "backend": settings["TASK_BACKEND"],
        "queue_name": settings["QUEUE"] or "default",
    }
    if delay:
        options["run_after"] = timezone.now() + datetime.timedelta(seconds=delay)
    return job.using(**options).enqueue(*task_arguments(model, pk, row_using, using), attempt)


def _schedule(action: str, model: type[models.Model], pk: Any, row_using: str | None) -> None:
    meta = model._meta
    if not rag_settings.ASYNC:
        _inline(action, model, pk, row_using)
        return
    if action == "ingest":
        _rescope(model, pk, row_using)
    if uses_celery():
        try:
            if action == "ingest":
                _mark_pending(model, pk)
            enqueue(action, model, pk, row_using)
            return
        except Exception:
            # A broker outage must not lose the change, nor fail a save that has already committed.
            logger.exception(
                "django-rag: cannot send %s of %s:%s to Celery; queueing it with the Tasks API",
                action,
                meta.label_lower,
                pk,
            )
    try:
        if action == "ingest":
            _mark_pending(model, pk)
        enqueue_job(action, model, pk, row_using)
    except Exception:
        logger.exception(
            "django-rag: cannot queue %s of %s:%s; `manage.py rag_reindex %s --changed-only` will pick it up",
            action,
            meta.label_lower,
            pk,
            meta.label,
        )


def _inline(action: str, model: type[models.Model], pk: Any, row_using: str | None) -> None:
    meta = model._meta
    try:
        if action == "ingest":
            ingest_instance(meta.app_label, meta.model_name or "", pk, row_using=row_using)
        else:
            remove_instance(meta.app_label, meta.model_name or "", pk)
    except Exception:
        logger.exception("django-rag: %s of %s:%s failed", action, meta.label_lower, pk)


def _rescope(model: type[models.Model], pk: Any, row_using: str | None) -> None:
    """The row's new tenant and tags apply before the job is queued (see ``rescope_row``)."""
    try:
        rescope_row(get_registration(model), pk, row_using=row_using)
    except Exception:
        # The queued ingestion applies the scope too; a failure here only delays it.
        logger.exception(
            "django-rag: cannot apply the new scope of %s:%s at once", model._meta.label_lower, pk
        )


def _mark_pending(model: type[models.Model], pk: Any) -> None:
    """Flag an existing document as waiting for a worker (``rag_reindex --changed-only`` retries it)."""
    registration = get_registration(model)
    kb = Collection.objects.db_manager(rag_settings.DATABASE).resolve(registration.collection)
    get_store(kb.using).mark_pending(kb, [registration.source_id(pk)])


@as_task
def ingest_job(
    app_label: str,
    model_name: str,
    pk: Any,
    row_using: str | None = None,
    using: str | None = None,
    attempt: int = 0,
) -> str:
    """The Tasks API job: ingest one row; a transient failure is queued again with backoff."""
    settings = media_settings()
    final = attempt >= settings["MAX_RETRIES"]
    try:
        result = ingest_instance(
            app_label, model_name, pk, raise_transient=not final, row_using=row_using, using=using
        )
    except Exception as exc:
        if not is_transient(exc):
            raise
        # The Tasks API has no retries of its own: the next attempt is a new job, deferred.
        model = apps.get_model(app_label, model_name)
        enqueue_job(
            "ingest", model, pk, row_using, using, attempt=attempt + 1, delay=backoff(attempt, settings)
        )
        return "retrying"
    return result.status


@as_task
def remove_job(
    app_label: str,
    model_name: str,
    pk: Any,
    row_using: str | None = None,
    using: str | None = None,
    attempt: int = 0,
) -> int:
    """The Tasks API job: remove the documents of a deleted row."""
    return remove_instance(app_label, model_name, pk, using=using)
