"""Checks of background ingestion: the task queue, ``RAG["BULK"]`` and OCR."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register

from ..conf import rag_settings
from ..ingest.jobs import BULK_DEFAULTS
from ..ingest.loaders.ocr import OCR_DEFAULTS, ocr_problems
from ..ingest.registration import MEDIA_DEFAULTS, registrations
from ..tasks import task_backend, uses_celery
from .common import unknown_keys

__all__ = ["check_bulk", "check_ocr", "check_task_queue"]


@register()
def check_task_queue(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Where saves of registered models go without a Celery broker (django_rag.W110, E112)."""
    if not rag_settings.ASYNC or not any(r.auto for r in registrations()) or uses_celery():
        return []
    alias = {**MEDIA_DEFAULTS, **(rag_settings.MEDIA or {})}["TASK_BACKEND"]
    fix = (
        "Queue them in the database: add 'django_tasks_db' (and on Django 5.2 'django_tasks') to "
        "INSTALLED_APPS, set TASKS = {'default': {'BACKEND': 'django_tasks_db.DatabaseBackend'}}, migrate, "
        "and run `manage.py db_worker`; or configure a Celery broker."
    )
    try:
        backend = task_backend()
    except Exception as exc:  # an alias missing from TASKS, a backend that cannot be imported
        return [
            Error(
                f"RAG['MEDIA']['TASK_BACKEND'] = {alias!r}: the Tasks API backend for ingestion jobs is "
                f"unusable ({exc})",
                hint="Name a backend of settings.TASKS. " + fix,
                id="django_rag.E112",
            )
        ]
    if backend is None:
        return [
            Error(
                "no Celery broker and no Tasks API: saved rows of registered models cannot be queued",
                hint="pip install django-tasks django-tasks-db. " + fix,
                id="django_rag.E112",
            )
        ]
    if type(backend).__name__ in ("ImmediateBackend", "DummyBackend"):
        what = "inside the request" if type(backend).__name__ == "ImmediateBackend" else "never"
        return [
            Warning(
                f"no Celery broker, and the Tasks API backend {alias!r} is {type(backend).__name__}: saved "
                f"rows of registered models are ingested {what}",
                hint=fix + " Or set RAG['ASYNC'] = False to ingest inline after the commit on purpose.",
                id="django_rag.W110",
            )
        ]
    return []


@register()
def check_bulk(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``RAG["BULK"]`` (``rag_ingest --async``): known keys, a queue name and a root of the right type."""
    bulk = rag_settings.BULK or {}
    if not isinstance(bulk, dict):
        return [
            Error(
                "RAG['BULK'] must be a dict",
                hint='e.g. {"QUEUE": "django_rag.{collection}"}',
                id="django_rag.E131",
            )
        ]
    errors = unknown_keys(bulk, BULK_DEFAULTS, "RAG['BULK']", "django_rag.E130")
    queue = bulk.get("QUEUE", BULK_DEFAULTS["QUEUE"])
    if not isinstance(queue, str) or not queue.strip():
        errors.append(
            Error(
                f"RAG['BULK']['QUEUE'] is {queue!r}, not a queue name",
                hint='A string where "{collection}" stands for the name (default "django_rag.{collection}").',
                id="django_rag.E131",
            )
        )
    root = bulk.get("ROOT")
    if root is not None and (not isinstance(root, str) or not root):
        errors.append(
            Error(
                f"RAG['BULK']['ROOT'] is {root!r}, not a path",
                hint="The folder where this worker sees the command's --root, or None (the same path).",
                id="django_rag.E131",
            )
        )
    return errors


@register()
def check_ocr(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """RAG['OCR'] keys, and the engine when OCR is on (django_rag.E140, E141)."""
    errors = unknown_keys(rag_settings.OCR or {}, OCR_DEFAULTS, "RAG['OCR']", "django_rag.E140")
    if errors:
        return errors
    return [Error(message, hint=hint, id="django_rag.E141") for message, hint in ocr_problems()]
