"""Checks of the ``RAG`` settings themselves: keys, databases, embedders, collections, answers."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import router

from ..answer.checks import chat_messages, extractive_info
from ..bm25 import bm25_options
from ..conf import DEFAULT_COLLECTION_OPTIONS, DEFAULTS, rag_settings
from ..exceptions import ConfigurationError
from ..ingest.checks import chunker_messages
from ..models import Chunk
from ..search.checks import parent_size_messages
from .common import embedder_missing_key, embedder_problems, unknown_keys

__all__ = ["check_answers", "check_settings"]


def _read_database_problems() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    replica = rag_settings.READ_DATABASE
    if replica is not None and replica not in settings.DATABASES:
        errors.append(
            Error(
                f"RAG['READ_DATABASE'] is {replica!r}, which is not in DATABASES",
                hint="Add the replica to DATABASES under that alias, or set RAG['READ_DATABASE'] to None "
                "to read from RAG['DATABASE'].",
                id="django_rag.E014",
            )
        )
    if not isinstance(rag_settings.READ_FALLBACK, bool):
        errors.append(
            Error(
                f"RAG['READ_FALLBACK'] must be True or False, got {rag_settings.READ_FALLBACK!r}",
                hint="True: read from RAG['DATABASE'] while the replica is down; False: fail.",
                id="django_rag.E015",
            )
        )
    return errors


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    user = getattr(settings, "RAG", None) or {}
    errors += unknown_keys(user, DEFAULTS, "RAG", "django_rag.E007")
    try:
        bm25_options()
    except ConfigurationError as exc:
        errors.append(
            Error(
                str(exc),
                hint='RAG["BM25"] takes MODE ("bounded" or "exact"), BUDGET and POOL (positive integers) '
                "and TENANT_STATISTICS (True or False).",
                id="django_rag.E016",
            )
        )
    if not apps.is_installed("django.contrib.contenttypes"):
        errors.append(
            Error(
                "django-rag needs django.contrib.contenttypes",
                hint="Add 'django.contrib.contenttypes' to INSTALLED_APPS.",
                id="django_rag.E001",
            )
        )
    alias = rag_settings.DATABASE
    engine = settings.DATABASES.get(alias, {}).get("ENGINE", "")
    if alias not in settings.DATABASES:
        errors.append(
            Error(
                f"RAG['DATABASE'] is {alias!r}, which is not in DATABASES",
                hint="Set RAG['DATABASE'] to a configured alias.",
                id="django_rag.E002",
            )
        )
    elif "postgresql" not in engine and "postgis" not in engine:
        errors.append(
            Error(
                f"database {alias!r} uses {engine or 'no engine'}; django-rag needs PostgreSQL + pgvector",
                hint="Use django.db.backends.postgresql (e.g. DATABASES = {'default': "
                "django_rag.database.database_config()}).",
                id="django_rag.E003",
            )
        )
    read_problems = _read_database_problems()
    errors += read_problems
    if alias in settings.DATABASES and ("postgresql" in engine or "postgis" in engine) and not read_problems:
        routed = router.db_for_read(Chunk)
        # With a replica, RagRouter reads from it.
        if routed not in {alias, rag_settings.READ_DATABASE}:
            errors.append(
                Warning(
                    f"RAG['DATABASE'] is {alias!r} but the site's routing reads django_rag's models from "
                    f"{routed!r}, so Chunk.objects... in views queries another database",
                    hint="Add 'django_rag.routers.RagRouter' to DATABASE_ROUTERS, or use kb.chunks().",
                    id="django_rag.W004",
                )
            )
    # Only embedders the site declares or uses: the built-in OpenAI "default" may be unused.
    declared = set(user.get("EMBEDDERS", {}))
    used = {(options or {}).get("EMBEDDER", "default") for options in rag_settings.COLLECTIONS.values()}
    for name in sorted((declared | used) & set(rag_settings.EMBEDDERS)):
        # The class checks the options; building the embedder could load a model or need a secret.
        if problems := embedder_problems(name):
            errors.append(
                Error(
                    f"embedder {name!r} cannot be built: {problems[0]}",
                    hint=f"Fix RAG['EMBEDDERS'][{name!r}].",
                    id="django_rag.E004",
                )
            )
            continue
        if message := embedder_missing_key(name):
            # A warning: `migrate` and `collectstatic` must run on machines that hold no secrets.
            errors.append(
                Warning(
                    message,
                    hint=f"Set API_KEY in RAG['EMBEDDERS'][{name!r}] or OPENAI_API_KEY.",
                    id="django_rag.W005",
                )
            )
    errors += chat_messages(user)
    for name, options in rag_settings.COLLECTIONS.items():
        options = options or {}
        errors += unknown_keys(
            options, DEFAULT_COLLECTION_OPTIONS, f"RAG['COLLECTIONS'][{name!r}]", "django_rag.E008"
        )
        if not isinstance(options.get("TEXT_SEARCH", True), bool):
            errors.append(
                Error(
                    f"collection {name!r}: TEXT_SEARCH must be True or False, got {options['TEXT_SEARCH']!r}",
                    hint="True (default) indexes text for text and hybrid search; False is vector-only.",
                    id="django_rag.E006",
                )
            )
        if not isinstance(options.get("CONTEXT_HEADERS", True), bool):
            errors.append(
                Error(
                    f"collection {name!r}: CONTEXT_HEADERS must be True or False, "
                    f"got {options['CONTEXT_HEADERS']!r}",
                    hint="True (default) embeds and matches each chunk with its title and heading path; "
                    "False embeds the chunk text alone.",
                    id="django_rag.E006",
                )
            )
        errors += chunker_messages(name, options) + parent_size_messages(name, options)
        embedder_alias = options.get("EMBEDDER", "default")
        if embedder_alias not in rag_settings.EMBEDDERS:
            errors.append(
                Error(
                    f"collection {name!r} uses embedder {embedder_alias!r}, "
                    "which RAG['EMBEDDERS'] does not define",
                    hint=f"Define it or use one of {sorted(rag_settings.EMBEDDERS)}.",
                    id="django_rag.E005",
                )
            )
    return errors


@register()
def check_answers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Which backend writes the answers, when the site has not chosen one (I006)."""
    return extractive_info(getattr(settings, "RAG", {}) or {})
