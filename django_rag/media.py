"""Automatic ingestion of model rows and uploaded files: ``register()`` and the save/delete wiring.

    import django_rag as rag

    @rag.register(file_field="file", collection="docs", tenant="org_slug", tags=["attachment"])
    class Attachment(models.Model): ...

Saving a registered row enqueues ``(app_label, model_name, pk)`` once its transaction commits;
a Celery task, or without a broker the same code inline, calls ``ingest_instance``, which reads
the row as committed and syncs it into the collection as the document ``"app_label.model_name:pk"``.
Deleting the row removes that document. The per-file pipeline lives in ``django_rag.ingestion``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Required, TypedDict, TypeVar, Unpack, overload

from django.apps import apps
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.db.models.signals import post_delete, post_save

from .conf import rag_settings
from .exceptions import ConfigurationError

if TYPE_CHECKING:
    from .models import Document
    from .types import IngestResult

__all__ = [
    "MEDIA_DEFAULTS",
    "RegisterOptions",
    "Registration",
    "connect_signals",
    "document_for",
    "enqueue",
    "get_registration",
    "ingest_instance",
    "media_settings",
    "register",
    "registrations",
    "remove_instance",
    "schedule_ingest",
    "schedule_removal",
    "unregister",
    "uses_celery",
]

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=type[models.Model])

MEDIA_DEFAULTS: dict[str, Any] = {
    # Global switch for the post_save/post_delete handlers (bulk imports, fixtures).
    "SIGNALS": True,
    # Content types a file may have; None means every type a loader handles.
    "CONTENT_TYPES": None,
    "MAX_BYTES": 20 * 1024 * 1024,
    # Celery queue of the ingestion tasks; None routes them like any other task.
    "QUEUE": None,
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
        from .loaders import supported_content_types

        allowed = self.content_types or media_settings()["CONTENT_TYPES"] or supported_content_types()
        return [content_type.lower() for content_type in allowed]

    def size_limit(self) -> int:
        return int(self.max_bytes if self.max_bytes is not None else media_settings()["MAX_BYTES"])

    def fingerprint(self, instance: Any) -> str:
        """What the row's document depends on, short of the file's bytes: compared after each write."""
        source = (
            self.text_of(instance) if self.file_field is None else getattr(instance, self.file_field).name
        )
        parts = [source, self.tenant_for(instance), self.tags_for(instance), self.metadata_for(instance)]
        return json.dumps(parts, cls=DjangoJSONEncoder, sort_keys=True, default=str)


_registry: dict[type[models.Model], Registration] = {}
_ready = False  # set by connect_signals(): later registrations connect at once


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
    unregister(model)
    _registry[model] = Registration(model=model, **options)
    if _ready:
        _connect(_registry[model])
    return model


def unregister(model: type[models.Model]) -> None:
    """Stop indexing ``model``; its stored documents stay (remove them with ``collection().remove``)."""
    registration = _registry.pop(model, None)
    if registration is not None:
        post_save.disconnect(sender=model, dispatch_uid=_uid("save", registration))
        post_delete.disconnect(sender=model, dispatch_uid=_uid("delete", registration))


def registrations() -> list[Registration]:
    return list(_registry.values())


def get_registration(model: type[models.Model]) -> Registration:
    try:
        return _registry[model]
    except KeyError:
        raise ConfigurationError(
            f"{model._meta.label} is not registered for ingestion; call "
            f"django_rag.register({model.__name__}, collection=..., file_field=... or text=...)"
        ) from None


def connect_signals() -> None:
    """Connect post_save/post_delete for every registered model (``AppConfig.ready()`` calls this)."""
    global _ready
    _ready = True
    for registration in _registry.values():
        _connect(registration)


def _uid(kind: str, registration: Registration) -> str:
    return f"django_rag.media.{kind}.{registration.label}"


def _connect(registration: Registration) -> None:
    if not registration.auto:
        return
    model = registration.model
    post_save.connect(_on_save, sender=model, weak=False, dispatch_uid=_uid("save", registration))
    post_delete.connect(_on_delete, sender=model, weak=False, dispatch_uid=_uid("delete", registration))


def _on_save(
    sender: type[models.Model], instance: models.Model, using: str | None = None, **kwargs: Any
) -> None:
    if media_settings()["SIGNALS"]:
        # After commit: a worker must see the committed row, and a rolled-back save indexes nothing.
        transaction.on_commit(partial(schedule_ingest, sender, instance.pk), using=using, robust=True)


def _on_delete(
    sender: type[models.Model], instance: models.Model, using: str | None = None, **kwargs: Any
) -> None:
    if media_settings()["SIGNALS"]:
        transaction.on_commit(partial(schedule_removal, sender, instance.pk), using=using, robust=True)


def uses_celery() -> bool:
    """True when ``RAG["ASYNC"]`` is on, Celery is installed and its current app has a broker."""
    if not rag_settings.ASYNC:
        return False
    try:
        from celery import current_app
    except ImportError:
        return False
    return bool(current_app.conf.broker_write_url or current_app.conf.broker_url)


def schedule_ingest(model: type[models.Model], pk: Any) -> None:
    """Ingest a row off the request path: a Celery task when possible, otherwise inline now."""
    _schedule("ingest", model, pk)


def schedule_removal(model: type[models.Model], pk: Any) -> None:
    """Remove a row's documents: a Celery task when possible, otherwise inline now."""
    _schedule("remove", model, pk)


def enqueue(action: str, model: type[models.Model], pk: Any) -> None:
    """Send the Celery task for ``action`` ("ingest" or "remove") of a row; raises if it cannot."""
    from . import tasks

    task = tasks.ingest_task if action == "ingest" else tasks.remove_task
    if task is None:
        raise ConfigurationError('Celery is not installed: pip install "django-rag[celery]"')
    # Task arguments travel as JSON: integer keys stay integers, anything else (UUID...) a string.
    args = (model._meta.app_label, model._meta.model_name, pk if isinstance(pk, int) else str(pk))
    task.apply_async(args=args, queue=media_settings()["QUEUE"])


def _schedule(action: str, model: type[models.Model], pk: Any) -> None:
    if uses_celery():
        try:
            if action == "ingest":
                _mark_pending(model, pk)
            enqueue(action, model, pk)
            return
        except Exception:
            # A broker outage must not lose the change, nor fail a save that has already committed.
            logger.exception(
                "django-rag: cannot enqueue %s of %s:%s; running it inline",
                action,
                model._meta.label_lower,
                pk,
            )
    try:
        if action == "ingest":
            ingest_instance(model._meta.app_label, model._meta.model_name, pk)
        else:
            remove_instance(model._meta.app_label, model._meta.model_name, pk)
    except Exception:
        logger.exception("django-rag: %s of %s:%s failed", action, model._meta.label_lower, pk)


def _mark_pending(model: type[models.Model], pk: Any) -> None:
    """Flag an existing document as waiting for a worker (``rag_reindex --changed-only`` retries it)."""
    from .models import Document

    registration = get_registration(model)
    Document.objects.using(rag_settings.DATABASE).filter(
        collection__name=registration.collection, source_id=registration.source_id(pk)
    ).exclude(status="pending").update(status="pending")


def ingest_instance(
    app_label: str, model_name: str, pk: Any, *, raise_transient: bool = False
) -> IngestResult:
    """Sync one registered row into its collection and record the outcome on its Document.

    Returns an ``IngestResult`` (indexed, skipped with a reason, failed with the error, or
    removed when the row no longer exists); never raises for a bad file or a failing
    embedder. With ``raise_transient`` a transient error (embedder 429/5xx, a dropped
    connection) is recorded and then re-raised, so a task can retry it.
    """
    from .ingestion import ingest

    model = apps.get_model(app_label, model_name)
    return ingest(get_registration(model), pk, raise_transient=raise_transient)


def remove_instance(app_label: str, model_name: str, pk: Any) -> int:
    """Remove the documents of a (deleted) registered row; returns how many were removed."""
    from .ingestion import remove

    model = apps.get_model(app_label, model_name)
    return remove(get_registration(model), pk)


def document_for(instance: models.Model) -> Document | None:
    """The Document a registered row was ingested into (with its status), or None."""
    from .api import collection
    from .models import Document

    registration = get_registration(type(instance))
    return (
        Document.objects.using(rag_settings.DATABASE)
        .filter(collection=collection(registration.collection), source_id=registration.source_id(instance.pk))
        .first()
    )
