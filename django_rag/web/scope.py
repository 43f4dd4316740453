"""What a request may search: the site's ``RAG["WEB"]["SCOPE"]`` hook, applied on the server.

``scope(request)`` returns a mapping with any of ``tenant`` (one tenant's documents only),
``tags`` (documents carrying at least one of them) and ``collections`` (names the request may
search). A missing key restricts nothing of that kind; an empty list allows nothing. The hook
may raise ``PermissionDenied``. Views never read a tenant, tag or collection that widens this
from the query string: the request's own choices are only ever intersected with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.module_loading import import_string

from ..conf import rag_settings
from ..exceptions import ConfigurationError
from ..models import Document
from .conf import web_settings

__all__ = ["Scope", "scope_for", "visible_collections"]

_KEYS = {"tenant", "tags", "collections"}
_CACHE_ATTRIBUTE = "_django_rag_scope"


@dataclass(frozen=True)
class Scope:
    """The reach of one request. ``None`` in a field: no restriction of that kind."""

    tenant: str | None = None
    tags: tuple[str, ...] | None = None
    collections: tuple[str, ...] | None = None

    @property
    def empty(self) -> bool:
        """True when no document can match (an empty tag or collection list)."""
        return self.tags == () or self.collections == ()

    def allows_collection(self, name: str) -> bool:
        return self.collections is None or name in self.collections

    def allows(self, document: Document) -> bool:
        """Whether ``document`` (its row as stored now) is within this scope."""
        if self.empty or not self.allows_collection(document.collection.name):
            return False
        if self.tenant is not None and document.tenant != self.tenant:
            return False
        return self.tags is None or bool(set(self.tags) & set(document.tags))

    def search_options(self) -> dict[str, Any]:
        """The ``tenant`` and ``tags`` arguments that confine ``kb.search``/``kb.ask`` to this scope."""
        options: dict[str, Any] = {}
        if self.tenant is not None:
            options["tenant"] = self.tenant
        if self.tags is not None:
            options["tags"] = list(self.tags)
        return options

    def documents(self, queryset: QuerySet[Document]) -> QuerySet[Document]:
        """``queryset`` narrowed to this scope (admin lists, the source view)."""
        if self.empty:
            return queryset.none()
        if self.collections is not None:
            queryset = queryset.filter(collection__name__in=self.collections)
        if self.tenant is not None:
            queryset = queryset.filter(tenant=self.tenant)
        if self.tags is not None:
            queryset = queryset.filter(Q(tags__overlap=list(self.tags)))
        return queryset

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the query log: only the keys that restrict."""
        found: dict[str, Any] = {}
        if self.tenant is not None:
            found["tenant"] = self.tenant
        if self.tags is not None:
            found["tags"] = list(self.tags)
        if self.collections is not None:
            found["collections"] = list(self.collections)
        return found


def scope_for(request: HttpRequest) -> Scope:
    """The scope of ``request`` from ``RAG["WEB"]["SCOPE"]`` (no hook: unrestricted), computed once."""
    cached = getattr(request, _CACHE_ATTRIBUTE, None)
    if isinstance(cached, Scope):
        return cached
    path = web_settings()["SCOPE"]
    if not path:
        scope = Scope()
    else:
        hook = _hook(path)
        scope = _validate(hook(request), path)
    setattr(request, _CACHE_ATTRIBUTE, scope)
    return scope


def visible_collections(request: HttpRequest) -> list[str]:
    """Collection names the pages offer to ``request``, in settings order."""
    offered = web_settings()["COLLECTIONS"]
    names = list(rag_settings.COLLECTIONS) if offered is None else list(offered)
    scope = scope_for(request)
    return [name for name in names if scope.allows_collection(name)]


def _hook(path: Any) -> Any:
    if callable(path):
        return path
    try:
        return import_string(path)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import RAG['WEB']['SCOPE'] {path!r}: {exc}") from exc


def _validate(value: Any, path: Any) -> Scope:
    where = f"RAG['WEB']['SCOPE'] ({path!r})"
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must return a mapping, got {type(value).__name__}")
    unknown = set(value) - _KEYS
    if unknown:
        raise ConfigurationError(f"{where} returned unknown keys {sorted(unknown)}; use {sorted(_KEYS)}")
    tenant = value.get("tenant")
    if tenant is not None and not isinstance(tenant, str):
        raise ConfigurationError(f"{where}: tenant must be a string, got {type(tenant).__name__}")
    return Scope(
        tenant=tenant,
        tags=_names(value, "tags", where),
        collections=_names(value, "collections", where),
    )


def _names(value: Mapping[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    names = value.get(key)
    if names is None:
        return None
    if isinstance(names, str) or not isinstance(names, Sequence | set | frozenset):
        raise ConfigurationError(f"{where}: {key} must be a list of strings, got {type(names).__name__}")
    if not all(isinstance(name, str) for name in names):
        raise ConfigurationError(f"{where}: {key} must be a list of strings")
    return tuple(names)
