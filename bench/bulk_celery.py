"""The Celery app of bench/bulk_ingest.py's workers: ``celery -A bench.bulk_celery worker``.

Django is configured from the environment the benchmark passes (``BENCH_BULK_DB``: the scratch
database URL; ``BENCH_BULK_PREFIX``: the run's Redis key prefix; ``BENCH_BULK_READY``: a file
touched once the worker consumes), with the same ``RAG`` settings as the benchmark process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from celery import Celery  # noqa: E402
from celery.signals import worker_ready  # noqa: E402

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
COLLECTIONS = ["bulk-warm", "bulk-sync", "bulk-sync-end", "bulk-w1", "bulk-w2", "bulk-w4"]
RAG: dict[str, Any] = {
    "EMBEDDERS": {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 384}},
    "COLLECTIONS": {name: {"TEXT_CONFIG": "english"} for name in COLLECTIONS},
}


def celery_settings(prefix: str) -> dict[str, Any]:
    """Celery settings of both sides: a key prefix of the run's own, one task at a time per worker."""
    return {
        "broker_url": REDIS_URL,
        "broker_transport_options": {"global_keyprefix": prefix},
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
    }


def make_app(prefix: str) -> Celery:
    app = Celery("django_rag_bench", set_as_current=True)
    app.conf.update(celery_settings(prefix))
    return app


if os.environ.get("BENCH_BULK_DB"):
    # The worker side only (the benchmark's own process imports this module as ``bulk_celery``).
    from bench.common import configure_django

    configure_django(os.environ["BENCH_BULK_DB"], RAG)
    app = make_app(os.environ["BENCH_BULK_PREFIX"])
    app.autodiscover_tasks(["django_rag"])
    import django_rag.tasks  # noqa: F401  (registers django_rag.ingest_batch)

    @worker_ready.connect
    def _announce_ready(**kwargs: Any) -> None:
        Path(os.environ["BENCH_BULK_READY"]).touch()
