"""A database router for sites that keep the knowledge base in another database than ``default``.

    DATABASE_ROUTERS = ["django_rag.routers.RagRouter"]
    RAG = {"DATABASE": "kb", ...}

django-rag's own reads and writes always name their alias (``RAG["DATABASE"]`` or the
``using=`` they were given); this router makes the ORM do the same for a site's own queries
(``Chunk.objects.nearest(...)`` in a view, the admin) and keeps ``migrate`` of django_rag on that
alias. With ``RAG["READ_DATABASE"]`` set, reads go to that replica (see django_rag.replicas).
Check ``django_rag.W004`` reports a site whose routing disagrees with ``RAG["DATABASE"]``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model

from .conf import rag_settings
from .replicas import read_alias

__all__ = ["RagRouter"]

APP_LABEL = "django_rag"
READ_MODEL = "chunk"  # the model whose reads go to RAG["READ_DATABASE"]


class RagRouter:
    """Routes django_rag's models to ``RAG["DATABASE"]`` (chunk reads: ``RAG["READ_DATABASE"]``).

    No opinion on any other model.
    """

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        if model._meta.app_label != APP_LABEL:
            return None
        instance = hints.get("instance")
        if instance is not None and instance._state.db:
            # Related rows of an instance come from the database the instance was read from.
            return str(instance._state.db)
        if model._meta.model_name != READ_MODEL:
            # Collections and documents are read where they are written: django-rag writes
            # through the alias a row was read from (``kb.using``), so the admin's actions on
            # a row must never find it on a read-only replica.
            return str(rag_settings.DATABASE)
        # No connection is made here (a router only names the alias): a replica that is down fails
        # the query. kb.chunks() and searches check it and apply RAG["READ_FALLBACK"].
        return read_alias(rag_settings.DATABASE)

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return rag_settings.DATABASE if model._meta.app_label == APP_LABEL else None

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        labels = {obj1._meta.app_label, obj2._meta.app_label}
        if APP_LABEL in labels:
            # Documents point at their owner rows through content types, never by foreign key
            # across databases, so a relation is fine only within one database.
            return bool(obj1._state.db == obj2._state.db)
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if app_label == APP_LABEL:
            return bool(db == rag_settings.DATABASE)
        return None
