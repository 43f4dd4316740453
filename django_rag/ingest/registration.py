"""Which model rows become documents: ``register()`` and the registry it fills.

    import django_rag as rag

    @rag.register(file_field="file", collection="docs", tenant="org_slug", tags=["attachment"])
    class Attachment(models.Model): ...

Saving a registered row enqueues ``(app_label, model_name, pk)`` once its transaction commits
(``django_rag.tasks`` watches saves and deletes of registered models); a worker, or without a
broker the same code inline, calls ``ingest.rows.ingest_instance``, which reads the row as
committed and syncs it into the collection as the document ``"app_label.model_name:pk"``.
Deleting the row removes that document.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Required, TypedDict, TypeVar, Unpack, overload

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from ..conf import rag_settings
from ..exceptions import ConfigurationError
from .loaders import supported_content_types

__all__ = [
    "MEDIA_DEFAULTS",
    "RegisterOptions",
    "Registration",
    "get_registration",
    "media_settings",
    "register",
    "registration_for",
    "registrations",
    "unregister",
]

M = TypeVar("M", bound=type[models.Model])

MEDIA_DEFAULTS: dict[str, Any] = {
    # Global switch for the post_save/post_delete handlers (bulk imports, fixtures).
    "SIGNALS": True,
    # Content types a file may have; None means every type a loader handles.
    "CONTENT_TYPES": None,
    "MAX_BYTES": 20 * 1024 * 1024,
    # Queue of the ingestion tasks: Celery's (None routes them like any other task), and the Tasks
    # API's queue_name (None: "default", what `manage.py db_worker` runs by default).
    "QUEUE": None,
    # Tasks API backend alias (settings.TASKS) of the ingestion jobs when Celery has no broker.
    "TASK_BACKEND": "default",
    # Text registrations (text=...) longer than this many bytes (UTF-8) are skipped as too-large;
    # None: MAX_BYTES.
    "MAX_TEXT_BYTES": None,
    # Transient failures (embedder 429/5xx, connection errors) are retried this often, with
    # exponential backoff from RETRY_BACKOFF seconds up to RETRY_BACKOFF_MAX, plus jitter.
    "MAX_RETRIES": 5,
    "RETRY_BACKOFF": 2.0,
    "RETRY_BACKOFF_MAX": 600.0,
}


def media_settings() -> dict[str, Any]:
    """``RAG["MEDIA"]`` merged over ``MEDIA_DEFAULTS``."""
    return {**MEDIA_DEFAULTS, **(rag_settings.MEDIA or {})}


@dataclass(frozen=True)
class Registration:
    """How rows of one model become a document: a file field or text, plus scope and gates.

    ``tenant`` names an attribute of the row or is a callable of it; ``tags`` and ``metadata``
    are constants or callables of the row. ``content_types`` and ``max_bytes`` default to
    ``RAG["MEDIA"]``. With ``auto=False`` saves are not watched (``rag_reindex`` still works).
    """

    model: type[models.Model]
    collection: str
    file_field: str | None = None
    text: str | Sequence[str] | Callable[[Any], str] | None = None
    tenant: str | Callable[[Any], Any] | None = None
    tags: Sequence[str] | Callable[[Any], Iterable[str]] = ()
    metadata: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None = None
    content_types: Sequence[str] | None = None
    max_bytes: int | None = None
    auto: bool = True

    @property
    def label(self) -> str:
        return self.model._meta.label_lower

    def source_id(self, pk: Any) -> str:
        """The document's identity: the row's, never the file's name (which changes on re-upload)."""
        return f"{self.label}:{pk}"

    def tenant_for(self, instance: Any) -> str:
        if self.tenant is None:
            return ""
        value = self.tenant(instance) if callable(self.tenant) else getattr(instance, self.tenant)
        return "" if value is None else str(value)

    def tags_for(self, instance: Any) -> list[str]:
        tags = self.tags(instance) if callable(self.tags) else self.tags
        return sorted({str(tag) for tag in tags or ()})

    def metadata_for(self, instance: Any) -> dict[str, Any]:
        metadata = self.metadata(instance) if callable(self.metadata) else self.metadata
        return dict(metadata or {})

    def text_of(self, instance: Any) -> str:
        if callable(self.text):
            return str(self.text(instance) or "")
        names = [self.text] if isinstance(self.text, str) else list(self.text or ())
        values = (getattr(instance, name) for name in names)
        return "\n\n".join(str(value) for value in values if value not in (None, ""))

    def allowed_content_types(self) -> list[str]:
        allowed = self.content_types or media_settings()["CONTENT_TYPES"] or supported_content_types()
        return [content_type.lower() for content_type in allowed]

    def size_limit(self) -> int:
        return int(self.max_bytes if self.max_bytes is not None else media_settings()["MAX_BYTES"])

    def text_limit(self) -> int:
        """Largest ``text=`` row, in UTF-8 bytes: ``max_bytes``, else MAX_TEXT_BYTES or MAX_BYTES of MEDIA."""
        if self.max_bytes is not None:
            return int(self.max_bytes)
        media = media_settings()
        return int(media["MAX_TEXT_BYTES"] if media["MAX_TEXT_BYTES"] is not None else media["MAX_BYTES"])

    def fingerprint(self, instance: Any) -> str:
        """What the row's document depends on, short of the file's bytes: compared after each write."""
        source = (
            self.text_of(instance) if self.file_field is None else getattr(instance, self.file_field).name
        )
        parts = [source, self.tenant_for(instance), self.tags_for(instance), self.metadata_for(instance)]
        return json.dumps(parts, cls=DjangoJSONEncoder, sort_keys=True, default=str)


_registry: dict[type[models.Model], Registration] = {}


class RegisterOptions(TypedDict, total=False):
    """The keyword arguments of ``register()``: the fields of ``Registration`` but ``model``."""

    collection: Required[str]
    file_field: str | None
    text: str | Sequence[str] | Callable[[Any], str] | None
    tenant: str | Callable[[Any], Any] | None
    tags: Sequence[str] | Callable[[Any], Iterable[str]]
    metadata: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None
    content_types: Sequence[str] | None
    max_bytes: int | None
    auto: bool


@overload
def register(model: M, **options: Unpack[RegisterOptions]) -> M: ...
@overload
def register(model: None = None, **options: Unpack[RegisterOptions]) -> Callable[[M], M]: ...
def register(model: M | None = None, **options: Unpack[RegisterOptions]) -> M | Callable[[M], M]:
    """Index rows of ``model`` automatically; usable as ``@register(collection=..., ...)``.

    Options: ``collection`` (required), exactly one of ``file_field`` (a FileField's name) or
    ``text`` (a field name, several, or a callable of the row), and ``tenant``, ``tags``,
    ``metadata``, ``content_types``, ``max_bytes``, ``auto`` (see ``Registration``).
    Mistakes are reported by ``manage.py check`` (django_rag.E101...). Registering a model
    again replaces its registration.
    """
    if model is None:
        return lambda cls: register(cls, **options)
    _registry[model] = Registration(model=model, **options)
    return model


def unregister(model: type[models.Model]) -> None:
    """Stop indexing ``model``; its stored documents stay (remove them with ``collection().remove``)."""
    _registry.pop(model, None)


def registrations() -> list[Registration]:
    return list(_registry.values())


def registration_for(model: type[models.Model]) -> Registration | None:
    """The registration of ``model`` (or of the concrete model of a proxy), None if it has none."""
    return _registry.get(model) or _registry.get(model._meta.concrete_model)  # type: ignore[arg-type]


def get_registration(model: type[models.Model]) -> Registration:
    found = registration_for(model)
    if found is None:
        raise ConfigurationError(
            f"{model._meta.label} is not registered for ingestion; call "
            f"django_rag.register({model.__name__}, collection=..., file_field=... or text=...)"
        )
    return found
