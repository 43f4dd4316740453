"""Settings for the test suite: real PostgreSQL + pgvector (DATABASE_URL or the embedded server)."""

from django_rag.database import database_config

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
DATABASES = {"default": database_config()}
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
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
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
