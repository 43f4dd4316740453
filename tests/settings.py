"""Settings for the test suite: real PostgreSQL + pgvector (DATABASE_URL or the embedded server)."""

import json
import os

from django_rag.database import database_config

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
# A server (and data directory) of its own, so tests never touch the demo's data; a test
# database name per run, so concurrent runs (and the Celery workers they start) do not collide.
os.environ.setdefault("DJANGO_RAG_PGDATA", "/var/tmp/django-rag/test-pgdata")
os.environ.setdefault("DJANGO_RAG_TEST_DB", f"test_django_rag_{os.getpid()}")
_SERVER = database_config()
DATABASES = {
    "default": {**_SERVER, "TEST": {"NAME": os.environ["DJANGO_RAG_TEST_DB"]}},
    # Second and third databases on the same server: every path must read and write only the
    # alias it was asked for (tests/test_databases.py); "scratch" is migrated back and forth.
    "other": {**_SERVER, "TEST": {"NAME": os.environ["DJANGO_RAG_TEST_DB"] + "_other", "DEPENDENCIES": []}},
    "scratch": {
        **_SERVER,
        "TEST": {"NAME": os.environ["DJANGO_RAG_TEST_DB"] + "_scratch", "DEPENDENCIES": []},
    },
    # Nothing listens on port 1: tests of the "database unreachable" errors use this alias.
    "unreachable": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "rag",
        "HOST": "127.0.0.1",
        "PORT": "1",
        "USER": "rag",
        "OPTIONS": {"connect_timeout": 2},
    },
}
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.postgres",
    "django_rag",
    "tests.siteapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
RAG = {
    "EMBEDDERS": {
        "default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64},
    },
    "COLLECTIONS": {
        "docs": {"TEXT_CONFIG": "english"},
        "notes": {"TEXT_CONFIG": "simple", "CHUNK_SIZE": 64, "CHUNK_OVERLAP": 8},
    },
    # Most tests check ranking, filters and scopes over a few made-up chunks with the hashing
    # embedder: every hit is returned. The relevance cutoff has tests of its own
    # (tests/test_relevance.py, the web tests), which set RAG["MIN_SCORE"] to the default.
    "MIN_SCORE": None,
}

# --- Automatic ingestion: tests/test_media*.py, test_celery_worker.py, test_s3.py ---------------
INSTALLED_APPS += ["tests.mediaapp"]
# Shared by pytest and the Celery workers it starts (they inherit DJANGO_RAG_TEST_DB).
MEDIA_ROOT = f"/var/tmp/django-rag/test-media/{os.environ['DJANGO_RAG_TEST_DB']}"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    # The S3 tests point this at moto's server on loopback (tests/mediaapp/storage.py).
    "s3": {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": "django-rag-tests",
            "endpoint_url": os.environ.get("DJANGO_RAG_TEST_S3_URL", "http://127.0.0.1:1"),
            "access_key": "testing",
            "secret_key": "testing",
            "region_name": "us-east-1",
            "addressing_style": "path",
            "querystring_auth": False,
        },
    },
}
# Celery (tests/celeryapp.py): a key prefix and a queue of this run's own, so concurrent runs
# sharing the Redis on 127.0.0.1:6379 never see each other's tasks.
CELERY_BROKER_URL = os.environ.get("DJANGO_RAG_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
CELERY_TASK_DEFAULT_QUEUE = f"django-rag-{os.environ['DJANGO_RAG_TEST_DB']}"
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "global_keyprefix": f"{os.environ['DJANGO_RAG_TEST_DB']}:",
    # A killed worker's task is redelivered after this many seconds, checked every second.
    "visibility_timeout": 4,
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
RAG["MEDIA"] = {"MAX_RETRIES": 3, "RETRY_BACKOFF": 0.2, "RETRY_BACKOFF_MAX": 1.0}
if os.environ.get("DJANGO_RAG_TEST_WORKER"):
    # A Celery worker started by the tests works in the test database pytest created.
    DATABASES["default"]["NAME"] = os.environ["DJANGO_RAG_TEST_DB"]
    # Per-worker RAG keys (e.g. a slow or remote embedder), as JSON.
    RAG.update(json.loads(os.environ.get("DJANGO_RAG_TEST_RAG", "{}")))

# --- No broker: ingestion jobs queued in the database (Django's Tasks API), tests/test_task_queue.py --
import django  # noqa: E402

INSTALLED_APPS += ["django_tasks_db"] if django.VERSION >= (6, 0) else ["django_tasks", "django_tasks_db"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
