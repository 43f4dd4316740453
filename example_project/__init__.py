"""The example site. Its Celery app is loaded with Django, so saves can enqueue ingestion tasks."""

from typing import Any

celery_app: Any
try:
    from .celery import app as celery_app
except ImportError:  # Celery is optional: without it, uploads are ingested inline
    celery_app = None

__all__ = ["celery_app"]
