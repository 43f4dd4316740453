"""System checks of ``RAG["WEB"]`` (django_rag.E120...), registered when the app is ready.

- E120 an unknown RAG['WEB'] key; E121 SCOPE cannot be imported or is not callable;
  E122 ASK_RATE is malformed; E123 PERMISSIONS names an unknown view;
  E124 a COLLECTIONS entry is not declared in RAG['COLLECTIONS']; E125 a size setting is not a
  positive integer; E126 SEARCH_ANSWERS is not a bool
"""

from __future__ import annotations

import difflib
from typing import Any

from django.core.checks import CheckMessage, Error, register
from django.utils.module_loading import import_string

from ..conf import rag_settings
from ..exceptions import ConfigurationError
from .conf import WEB_DEFAULTS, parse_rate, web_settings

__all__ = ["check_web_settings"]

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
    if not isinstance(settings["SEARCH_ANSWERS"], bool):
        errors.append(
            Error(
                f"RAG['WEB']['SEARCH_ANSWERS'] must be True or False, got {settings['SEARCH_ANSWERS']!r}",
                id="django_rag.E126",
            )
        )
    return errors
