"""System checks of ``RAG["WEB"]`` (django_rag.E120...), registered when the app is ready.

- E120 an unknown RAG['WEB'] key; E121 SCOPE cannot be imported or is not callable;
  E122 ASK_RATE is malformed; E123 PERMISSIONS names an unknown view;
  E124 a COLLECTIONS entry is not declared in RAG['COLLECTIONS']; E125 a size setting is not a
  positive integer; E126 CSP is not a mapping of directives (Django 6's SECURE_CSP format) or None;
  E127 SEARCH_ANSWERS is not a bool;
  W126 DatabaseUnavailableMiddleware comes after the session or auth middleware in MIDDLEWARE
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.utils.module_loading import import_string

from ..conf import rag_settings
from ..exceptions import ConfigurationError
from .conf import WEB_DEFAULTS, parse_rate, web_settings

__all__ = ["check_middleware_order", "check_web_settings"]

_OUTAGE_MIDDLEWARE = "django_rag.web.middleware.DatabaseUnavailableMiddleware"
# Middleware that reads the database around the view: the outage middleware must wrap them.
_DATABASE_MIDDLEWARE = (
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
)

_SIZES = (
    "PAGE_SIZE",
    "MAX_RESULTS",
    "MAX_K",
    "MAX_QUERY_CHARS",
    "ASK_K",
    "LOG_RETENTION_DAYS",
    "CONVERSATION_RETENTION_DAYS",
)
_DAYS = ("LOG_RETENTION_DAYS", "CONVERSATION_RETENTION_DAYS")


@register()
def check_web_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    user = getattr(rag_settings, "WEB", None) or {}
    errors: list[CheckMessage] = []
    for key in sorted(set(user) - set(WEB_DEFAULTS)):
        close = difflib.get_close_matches(key, list(WEB_DEFAULTS), n=1)
        hint = f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(sorted(WEB_DEFAULTS))}."
        errors.append(Error(f"RAG['WEB'] has an unknown key {key!r}", hint=hint, id="django_rag.E120"))
    settings = web_settings()
    scope = settings["SCOPE"]
    if scope is not None and not callable(scope):
        try:
            hook = import_string(scope)
        except ImportError as exc:
            errors.append(
                Error(
                    f"RAG['WEB']['SCOPE'] {scope!r} cannot be imported: {exc}",
                    hint="Name a function scope(request) returning tenant, tags and collections.",
                    id="django_rag.E121",
                )
            )
        else:
            if not callable(hook):
                errors.append(
                    Error(
                        f"RAG['WEB']['SCOPE'] {scope!r} is not callable",
                        hint="Name a function.",
                        id="django_rag.E121",
                    )
                )
    try:
        parse_rate(settings["ASK_RATE"])
    except ConfigurationError as exc:
        errors.append(Error(str(exc), hint="e.g. '20/m', '100/h' or None.", id="django_rag.E122"))
    for view in sorted(set(settings["PERMISSIONS"]) - set(WEB_DEFAULTS["PERMISSIONS"])):
        errors.append(
            Error(
                f"RAG['WEB']['PERMISSIONS'] names an unknown view {view!r}",
                hint=f"Use {', '.join(sorted(WEB_DEFAULTS['PERMISSIONS']))}.",
                id="django_rag.E123",
            )
        )
    for name in settings["COLLECTIONS"] or ():
        if name not in rag_settings.COLLECTIONS:
            errors.append(
                Error(
                    f"RAG['WEB']['COLLECTIONS'] offers {name!r}, which RAG['COLLECTIONS'] does not declare",
                    hint=f"Declare it, or offer one of {sorted(rag_settings.COLLECTIONS)}.",
                    id="django_rag.E124",
                )
            )
    for key in _SIZES:
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key in _DAYS else 1):
            errors.append(
                Error(f"RAG['WEB'][{key!r}] must be a positive integer, got {value!r}", id="django_rag.E125")
            )
    policy = settings["CSP"]
    if policy is not None and not (
        isinstance(policy, Mapping)
        and all(
            isinstance(directive, str) and isinstance(value, str | bool | list | tuple | set)
            for directive, value in policy.items()
        )
    ):
        errors.append(
            Error(
                f"RAG['WEB']['CSP'] must map directives to lists of sources, got {policy!r}",
                hint='e.g. {"default-src": ["\'self\'"], "frame-ancestors": ["\'none\'"]}, or None to leave '
                "the header to the site's SECURE_CSP.",
                id="django_rag.E126",
            )
        )
    if not isinstance(settings["SEARCH_ANSWERS"], bool):
        errors.append(
            Error(
                f"RAG['WEB']['SEARCH_ANSWERS'] must be True or False, got {settings['SEARCH_ANSWERS']!r}",
                id="django_rag.E127",
            )
        )
    return errors


@register()
def check_middleware_order(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    middleware = list(getattr(django_settings, "MIDDLEWARE", None) or [])
    if _OUTAGE_MIDDLEWARE not in middleware:
        return []
    position = middleware.index(_OUTAGE_MIDDLEWARE)
    before = [name for name in _DATABASE_MIDDLEWARE if name in middleware[:position]]
    if not before:
        return []
    return [
        Warning(
            f"{_OUTAGE_MIDDLEWARE} comes after {', '.join(before)} in MIDDLEWARE, so a database outage "
            "they meet is still a 500",
            hint="Move it before them (right after SecurityMiddleware).",
            id="django_rag.W126",
        )
    ]
