"""The Celery app of the test suite: ``celery -A tests.celeryapp worker`` (see tests/workers.py)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

app = Celery("django_rag_tests")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
def _forget_content_type_ids(**kwargs: Any) -> None:
    # Transactional tests flush the database, and content types come back with new ids; a
    # long-lived worker must not keep the old ones (a real site's ids never change).
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.clear_cache()


_pause_marker = os.environ.get("DJANGO_RAG_TEST_PAUSE_AFTER_INDEXED")
if _pause_marker:
    from django_rag.signals import document_indexed

    def _pause_after_write(**kwargs: Any) -> None:
        # The chunks are committed but the task has not returned (nor been acknowledged).
        Path(_pause_marker).touch()
        time.sleep(120)

    document_indexed.connect(_pause_after_write, weak=False)


_pause_after_write = os.environ.get("DJANGO_RAG_TEST_PAUSE_AFTER_WRITE")
if _pause_after_write:

    @task_prerun.connect
    def _pause_after_the_store_writes(**kwargs: Any) -> None:
        # Patched at the first task, once the app registry is ready (the store imports models).
        from django_rag.stores.pgvector import PgVectorStore

        locked = PgVectorStore.locked
        if getattr(locked, "pauses", False):
            return

        @contextlib.contextmanager
        def locked_then_pause(self: Any, *args: Any, **options: Any) -> Iterator[None]:
            # The pipeline writes a batch inside the store's locked transaction: once it has
            # committed, the task is not acknowledged yet.
            with locked(self, *args, **options):
                yield
            Path(_pause_after_write).touch()
            time.sleep(120)

        locked_then_pause.pauses = True  # type: ignore[attr-defined]
        PgVectorStore.locked = locked_then_pause  # type: ignore[method-assign,assignment]


_ready_marker = os.environ.get("DJANGO_RAG_TEST_READY")
if _ready_marker:
    from celery.signals import worker_ready

    @worker_ready.connect
    def _announce_ready(**kwargs: Any) -> None:
        Path(_ready_marker).touch()
