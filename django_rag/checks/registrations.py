"""Checks of ``django_rag.register()`` declarations and ``RAG["MEDIA"]`` (E100-E111)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register
from django.core.exceptions import FieldDoesNotExist

from ..conf import rag_settings
from ..ingest.loaders import get_loader
from ..ingest.registration import MEDIA_DEFAULTS, Registration, registrations
from .common import unknown_keys

__all__ = ["check_registrations"]


@register()
def check_registrations(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Bad ``django_rag.register()`` declarations and ``RAG["MEDIA"]`` keys (django_rag.E100...)."""
    media = rag_settings.MEDIA or {}
    errors = unknown_keys(media, MEDIA_DEFAULTS, "RAG['MEDIA']", "django_rag.E100")
    for content_type in media.get("CONTENT_TYPES") or ():
        if get_loader(content_type) is None:
            errors.append(
                Error(
                    f"RAG['MEDIA']['CONTENT_TYPES'] has {content_type!r}, which no loader handles",
                    hint="Remove it, or add one with django_rag.ingest.loaders.register_loader().",
                    id="django_rag.E111",
                )
            )
    for registration in registrations():
        errors += [
            Error(
                f"register({registration.model._meta.label}): {message}",
                hint=hint,
                obj=registration.model,
                id=f"django_rag.E{number}",
            )
            for number, message, hint in _registration_problems(registration)
        ]
    return errors


def _registration_problems(registration: Registration) -> list[tuple[int, str, str]]:
    """(check number, message, hint) for each mistake in one ``register()`` declaration."""
    model, name = registration.model, registration.model.__name__
    problems: list[tuple[int, str, str]] = []
    if (registration.file_field is None) == (registration.text is None):
        problems.append(
            (
                101,
                "needs exactly one of file_field= or text=",
                "Pass file_field='<FileField name>' to index uploads, or text='<field>' (or a "
                "callable) to index the row's text.",
            )
        )
    if registration.file_field is not None:
        field = _model_field(model, registration.file_field)
        if field is None or field.get_internal_type() not in ("FileField", "ImageField"):
            problems.append(
                (
                    102,
                    f"file_field {registration.file_field!r} is not a FileField of {name}",
                    "Name a models.FileField of the model.",
                )
            )
    if registration.text is not None and not callable(registration.text):
        names = [registration.text] if isinstance(registration.text, str) else list(registration.text)
        problems += [
            (
                103,
                f"text names {field!r}, which {name} does not have",
                "Name fields or attributes of the model, or pass a callable of the row.",
            )
            for field in names
            if not isinstance(field, str) or not hasattr(model, field)
        ]
    if registration.collection not in rag_settings.COLLECTIONS:
        problems.append(
            (
                104,
                f"collection {registration.collection!r} is not declared in RAG['COLLECTIONS']",
                f"Declare it (declared: {sorted(rag_settings.COLLECTIONS)}).",
            )
        )
    problems += [
        (
            105,
            f"no loader handles content type {content_type!r}",
            "Remove it, or add one with django_rag.ingest.loaders.register_loader().",
        )
        for content_type in registration.content_types or ()
        if get_loader(content_type) is None
    ]
    limit = registration.max_bytes
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0):
        problems.append(
            (106, f"max_bytes must be a positive integer, not {limit!r}", "Pass a size in bytes.")
        )
    tenant = registration.tenant
    if tenant is not None and not (callable(tenant) or (isinstance(tenant, str) and hasattr(model, tenant))):
        problems.append(
            (
                107,
                f"tenant {tenant!r} is neither a callable nor an attribute of {name}",
                "Name a field (e.g. tenant='org_id') or pass a callable of the row.",
            )
        )
    tags = registration.tags
    if isinstance(tags, str) or not (callable(tags) or all(isinstance(tag, str) for tag in tags)):
        problems.append(
            (108, "tags must be a list of strings or a callable of the row", "e.g. tags=['manual'].")
        )
    metadata = registration.metadata
    if metadata is not None and not (callable(metadata) or isinstance(metadata, dict)):
        problems.append(
            (109, "metadata must be a dict or a callable of the row", "e.g. metadata={'kind': 'a'}.")
        )
    return problems


def _model_field(model: Any, name: str) -> Any:
    try:
        return model._meta.get_field(name)
    except FieldDoesNotExist:
        return None
