"""Settings for the test suite: real PostgreSQL + pgvector (DATABASE_URL or the embedded server)."""

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
DATABASES = {
    "default": {**database_config(), "TEST": {"NAME": os.environ["DJANGO_RAG_TEST_DB"]}},
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
}
