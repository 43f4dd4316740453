"""A small site using django-rag: embedded PostgreSQL (or DATABASE_URL) and a local embedder.

It runs with DEBUG off (no traceback or URL list for a visitor) unless EXAMPLE_DEBUG=1; `make demo`
serves the static files either way. `manage.py check --deploy` warns only about HTTPS, which a demo
on http://127.0.0.1 cannot turn on.
"""

import os
import secrets
from pathlib import Path

from django_rag.database import database_config, embedded_data_dir
from django_rag.web.headers import DEFAULT_CSP

BASE_DIR = Path(__file__).resolve().parent


def _secret_key() -> str:
    """DJANGO_SECRET_KEY, else a random key made once and kept beside the demo's database."""
    if os.environ.get("DJANGO_SECRET_KEY"):
        return os.environ["DJANGO_SECRET_KEY"]
    data = embedded_data_dir(BASE_DIR)
    path = data.parent / f"{data.name}-secret-key"  # example_project/pgdata-secret-key, git-ignored
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(secrets.token_urlsafe(50))
    except FileExistsError:
        pass  # made by an earlier run (or the worker starting beside this process)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = os.environ.get("EXAMPLE_DEBUG", "") not in ("", "0")
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True

DATABASES = {"default": database_config(base_dir=BASE_DIR)}  # data in example_project/pgdata

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
    # Before sessions and auth, which raise before any view when the database is down: a 503.
    "django_rag.web.middleware.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The pages follow the browser's language (English or Brazilian Portuguese).
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # SECURE_CSP on every page (the admin, the login page); Django 6's own middleware on Django 6.
    "django_rag.web.middleware.ContentSecurityPolicyMiddleware",
]
# No inline script or style anywhere: the library's pages, the admin and the login page run under it.
SECURE_CSP = DEFAULT_CSP
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
    # Answers quote the documents' sentences (no language model, no key). Named rather than left
    # to the default, so `check` stays silent (I006 reports an absent RAG["CHAT"]). With
    # OPENAI_API_KEY set (and OPENAI_BASE_URL for a local server such as Ollama or vLLM), a model
    # writes them instead: see below.
    "CHAT": {"BACKEND": "django_rag.answer.extractive.ExtractiveChat"},
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
