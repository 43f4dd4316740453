"""The Celery side of ``django_rag.tasks``: whether Celery (or the Tasks API) is there, and the
Celery tasks, thin adapters over ``django_rag.ingest`` that retry transient failures with backoff.

Task names are explicit (``django_rag.ingest``, ``django_rag.switch_fill``...), so workers find them
whatever module defines them; ``django_rag.tasks`` re-exports the names it exported before.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import random
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.db import models

from .conf import rag_settings
from .exceptions import ConfigurationError
from .ingest.jobs import Batch, fail_batch, run_batch
from .ingest.registration import media_settings
from .ingest.rows import ingest_instance, remove_instance
from .ingest.switch import (
    SwitchAborted,
    drop_old,
    fill,
    flip,
    get_switch,
    index_problem,
    start_run,
    target_embedder,
)
from .models import Collection, Document
from .retry import is_transient

__all__ = [
    "FLIP_MAX_POLLS",
    "FLIP_POLL_SECONDS",
    "as_task",
    "backoff",
    "check_broker",
    "enqueue",
    "enqueue_batches",
    "enqueue_switch",
    "ingest",
    "ingest_batch",
    "ingest_batch_task",
    "ingest_task",
    "remove",
    "remove_task",
    "switch_fill",
    "switch_fill_task",
    "switch_flip",
    "switch_flip_task",
    "task_arguments",
    "task_backend",
    "uses_celery",
]


def _optional(name: str) -> Any:
    return importlib.import_module(name) if importlib.util.find_spec(name.split(".")[0]) else None


# Celery is optional (the "celery" extra); the Tasks API is django.tasks on Django 6 and the
# django-tasks backport before it.
celery: Any = _optional("celery")


current_app: Any = celery.current_app if celery else None


tasks_api: Any = (
    importlib.import_module("django.tasks")
    if importlib.util.find_spec("django.tasks")
    else _optional("django_tasks")
)


def as_task(function: Any) -> Any:
    """``function`` as a module-level Task of the Tasks API (a worker finds a job's task by its
    dotted path), or None without the API or a usable default backend (check E112 says which)."""
    if tasks_api is None:
        return None
    try:
        return tasks_api.task(function)
    except Exception:
        logger.exception("django-rag: cannot declare %s as a task of the Tasks API", function.__name__)
        return None


_OPTIONS: dict[str, Any] = {
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
}


def uses_celery() -> bool:
    """True when ``RAG["ASYNC"]`` is on, Celery is installed and its current app has a broker."""
    if not rag_settings.ASYNC or current_app is None:
        return False
    return bool(current_app.conf.broker_write_url or current_app.conf.broker_url)


def enqueue(
    action: str, model: type[models.Model], pk: Any, row_using: str | None = None, using: str | None = None
) -> None:
    """Send the Celery task for ``action`` ("ingest" or "remove") of a row; raises if it cannot.

    ``row_using`` is the row's database, ``using`` the knowledge base's (default ``RAG["DATABASE"]``).
    """
    task = ingest_task if action == "ingest" else remove_task
    if task is None:
        raise ConfigurationError('Celery is not installed: pip install "django-rag[celery]"')
    task.apply_async(args=task_arguments(model, pk, row_using, using), queue=media_settings()["QUEUE"])


def task_backend() -> Any:
    """The Tasks API backend jobs go to (``RAG["MEDIA"]["TASK_BACKEND"]``), or None without the API."""
    if tasks_api is None:
        return None
    return tasks_api.task_backends[media_settings()["TASK_BACKEND"]]


logger = logging.getLogger("django_rag.ingest")


def task_arguments(
    model: type[models.Model], pk: Any, row_using: str | None, using: str | None
) -> tuple[Any, ...]:
    # Arguments travel as JSON: integer keys stay integers, anything else (UUID...) a string.
    key = pk if isinstance(pk, int) else str(pk)
    return (model._meta.app_label, model._meta.model_name, key, row_using, using)


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


def enqueue_switch(
    collection: Collection,
    space: str,
    *,
    batch_size: int,
    queue: str,
    flip: bool = True,
    drop_old: bool = False,
) -> int:
    """Send an embedder switch's work to Celery: one task per ``batch_size`` documents, then the flip.

    Batches are ranges of document ids; each fills what its range still misses in ``space``
    (idempotent: a redelivered or repeated batch writes nothing twice). The flip task waits,
    retrying, until no document is missing, then flips (see ``django_rag.ingest.switch``).
    Returns the number of batches.
    """
    if switch_fill_task is None or switch_flip_task is None:
        raise ConfigurationError('Celery is not installed: pip install "django-rag[celery]"')
    using = collection.using
    start_run(collection, using=using)
    ids = (
        Document.objects.using(using)
        .filter(collection=collection)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    batches = 0
    after: int | None = None
    batch: list[int] = []
    for pk in ids.iterator(chunk_size=10_000):
        batch.append(pk)
        if len(batch) >= batch_size:
            switch_fill_task.apply_async(
                args=(collection.pk, space, after, batch[-1], batch_size, using), queue=queue
            )
            after, batch, batches = batch[-1], [], batches + 1
    if batch or after is None:
        switch_fill_task.apply_async(args=(collection.pk, space, after, None, batch_size, using), queue=queue)
        batches += 1
    if flip:
        switch_flip_task.apply_async(args=(collection.pk, space, drop_old, using), queue=queue, countdown=1)
    return batches


def switch_fill(
    task: Any,
    collection_id: int,
    space: str,
    after: int | None,
    until: int | None,
    batch_size: int,
    using: str | None = None,
) -> int:
    """One batch of an embedder switch: documents ``after < id <= until`` missing from ``space``."""
    using = using or rag_settings.DATABASE
    kb = Collection.objects.using(using).filter(pk=collection_id).first()
    pending = get_switch(kb, using=using) if kb is not None else None
    if kb is None or pending is None or pending.space != space:
        return 0  # flipped, aborted or replaced since it was enqueued: nothing left for this task
    try:
        result = fill(
            kb,
            space,
            target_embedder(pending, kb),
            batch_size=batch_size,
            using=using,
            after=after,
            until=until,
        )
    except SwitchAborted:
        return 0
    except Exception as exc:
        if not is_transient(exc):
            raise
        settings = media_settings()
        raise task.retry(
            exc=exc, countdown=backoff(task.request.retries, settings), max_retries=settings["MAX_RETRIES"]
        ) from exc
    return result.documents


# The flip task polls for completeness this often, for at most a day of batches.
FLIP_POLL_SECONDS = 5


FLIP_MAX_POLLS = 17_280


def switch_flip(
    task: Any, collection_id: int, space: str, drop: bool = False, using: str | None = None
) -> str:
    """Flip a switch once its batches are done (retried until then); ``drop``: delete the old space."""
    using = using or rag_settings.DATABASE
    kb = Collection.objects.using(using).filter(pk=collection_id).first()
    pending = get_switch(kb, using=using) if kb is not None else None
    if kb is None or pending is None or pending.space != space:
        return "gone"
    problem = index_problem(kb, space, using=using)
    if problem:
        logger.error("django-rag: collection %r not flipped: %s", kb.name, problem)
        return "needs index"
    if not flip(kb, using=using):
        raise task.retry(countdown=FLIP_POLL_SECONDS, max_retries=FLIP_MAX_POLLS)
    if drop:
        drop_old(kb, using=using)
    return "flipped"


def ingest_batch(
    task: Any, job_id: str, number: int, items: list[list[str]], using: str | None = None
) -> int:
    """Ingest one batch of ``rag_ingest --async`` (``django_rag.ingest.jobs.run_batch``).

    Transient failures are retried like a row's; the last attempt counts the batch's sources
    as failed on the job (with the error) and raises. Returns the sources ingested (0 when the
    batch had already been counted: a redelivery after the worker that ran it died).
    """
    settings = media_settings()
    try:
        report = run_batch(job_id, number, items, using=using)
    except Exception as exc:
        if is_transient(exc) and task.request.retries < settings["MAX_RETRIES"]:
            raise task.retry(
                exc=exc,
                countdown=backoff(task.request.retries, settings),
                max_retries=settings["MAX_RETRIES"],
            ) from exc
        fail_batch(job_id, number, len(items), f"batch {number}: {type(exc).__name__}: {exc}", using=using)
        raise
    return 0 if report is None else sum(report.counts.values())


def check_broker(timeout: float = 5.0) -> None:
    """Raise ConfigurationError, naming the setting, unless Celery's broker answers now."""
    if current_app is None:
        raise ConfigurationError('--async needs Celery: pip install "django-rag[celery]"')
    url = current_app.conf.broker_write_url or current_app.conf.broker_url
    if not url:
        raise ConfigurationError(
            "--async needs a Celery broker: set CELERY_BROKER_URL (the broker_url of your Celery app) "
            "and load the app in your project's __init__.py"
        )
    connection = current_app.connection_for_write()
    try:
        connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout)
    except Exception as exc:
        raise ConfigurationError(
            f"cannot reach the Celery broker at {_masked(str(url))} ({type(exc).__name__}: {exc}); "
            "check CELERY_BROKER_URL (the broker_url of your Celery app) and that the broker is "
            "running. Nothing was enqueued"
        ) from exc
    finally:
        connection.release()


def _masked(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (error messages end up in logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def enqueue_batches(job_id: str, queue: str, batches: list[Batch], using: str | None = None) -> None:
    """Send one ``django_rag.ingest_batch`` task per batch to ``queue``."""
    if ingest_batch_task is None:
        raise ConfigurationError('Celery is not installed: pip install "django-rag[celery]"')
    for batch in batches:
        ingest_batch_task.apply_async(args=(job_id, batch.number, batch.items, using), queue=queue)


ingest_task: Any = None


remove_task: Any = None


switch_fill_task: Any = None


switch_flip_task: Any = None


ingest_batch_task: Any = None


if celery is not None:
    ingest_task = celery.shared_task(name="django_rag.ingest", **_OPTIONS)(ingest)
    remove_task = celery.shared_task(name="django_rag.remove", **_OPTIONS)(remove)
    switch_fill_task = celery.shared_task(name="django_rag.switch_fill", **_OPTIONS)(switch_fill)
    switch_flip_task = celery.shared_task(name="django_rag.switch_flip", **_OPTIONS)(switch_flip)
    ingest_batch_task = celery.shared_task(name="django_rag.ingest_batch", **_OPTIONS)(ingest_batch)
