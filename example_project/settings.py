"""A small site using django-rag: embedded PostgreSQL (or DATABASE_URL) and a local embedder."""

import os
from pathlib import Path

from django_rag.database import database_config

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "example-project-not-for-production"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True

DATABASES = {"default": database_config()}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django_rag",
    "example_project.kb",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The pages follow the browser's language (English or Brazilian Portuguese).
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "example_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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
STATIC_URL = "static/"
# The browser test points uploads at a directory of its own.
MEDIA_ROOT = Path(os.environ.get("EXAMPLE_MEDIA_ROOT") or BASE_DIR / "media")
MEDIA_URL = "media/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("pt-br", "Português (Brasil)")]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "django_rag:search"

RAG = {
    "EMBEDDERS": {
        # all-MiniLM-L6-v2 (int8 ONNX) from an installed wheel: offline, no torch.
        "default": {"BACKEND": "django_rag.embedders.local.LocalEmbedder"},
    },
    "COLLECTIONS": {
        "docs": {"TEXT_CONFIG": "english", "CHUNK_SIZE": 128, "CHUNK_OVERLAP": 16},
        # Portuguese articles: stemmed with PostgreSQL's portuguese text search configuration.
        "artigos": {"TEXT_CONFIG": "portuguese", "CHUNK_SIZE": 128, "CHUNK_OVERLAP": 16},
    },
    # No RAG["CHAT"] here: answers quote the documents' sentences (no language model, no key).
    # With OPENAI_API_KEY set (and OPENAI_BASE_URL for a local server such as Ollama or vLLM), a
    # model writes them instead: see below.
    # /kb/: every user belongs to one tenant (a "tenant:acme" group) and searches only its documents.
    "WEB": {"SCOPE": "example_project.kb.scope.scope", "ASK_RATE": "30/m"},
}

if os.environ.get("OPENAI_API_KEY"):
    RAG["CHAT"] = {
        "BACKEND": "django_rag.answer.chat.OpenAIChat",
        "MODEL": os.environ.get("OPENAI_CHAT_MODEL", "gpt-4o-mini"),
        "DEADLINE": 30,  # seconds for a whole answer, retries included
    }

# Celery (example_project/celery.py). With no broker, uploads are queued in the database (the
# Tasks API below) and `manage.py db_worker` ingests them; with one
# (CELERY_BROKER_URL=redis://127.0.0.1:6379/0), a Celery worker does.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
CELERY_TASK_IGNORE_RESULT = True

# No broker: ingestion jobs are rows in this database (Django's Tasks API, django-tasks-db).
INSTALLED_APPS += ["django_tasks", "django_tasks_db"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
