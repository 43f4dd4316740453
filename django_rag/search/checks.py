"""What ``manage.py check`` says about rerankers, without building one (no model loads, no request).

- E150 a ``RAG["RERANKERS"]`` entry is not a dict with an importable ``BACKEND``
- E151 the backend's ``check_options`` reports a bad option
- W151 the backend's ``check_options`` warns (a hosted reranker with no API key)
- E152 a collection's ``RERANKER`` names an alias ``RAG["RERANKERS"]`` does not define
- E161 a collection's ``PARENT_CHUNK_SIZE`` is not a positive number of tokens
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register
from django.utils.module_loading import import_string

from ..conf import rag_settings

__all__ = ["check_rerankers", "parent_size_messages"]


@register()
def check_rerankers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    rerankers = rag_settings.RERANKERS or {}
    for alias, config in sorted(rerankers.items(), key=lambda item: str(item[0])):
        where = f"RAG['RERANKERS'][{alias!r}]"
        if not isinstance(config, dict) or not config.get("BACKEND"):
            messages.append(
                Error(
                    f"{where} must be a dict with a 'BACKEND' dotted path, got {config!r}",
                    hint="e.g. {'BACKEND': 'django_rag.search.rerankers.CohereReranker'}",
                    id="django_rag.E150",
                )
            )
            continue
        try:
            backend = import_string(config["BACKEND"])
        except ImportError as exc:
            messages.append(
                Error(
                    f"{where}: cannot import reranker backend {config['BACKEND']!r}: {exc}",
                    hint="Correct BACKEND, or install the package that provides it.",
                    id="django_rag.E150",
                )
            )
            continue
        check = getattr(backend, "check_options", None)
        if check is None:  # a site's own backend with nothing to say about its options
            continue
        options = {key: value for key, value in config.items() if key != "BACKEND"}
        for problem in check(options):
            kind = Warning if problem.warning else Error
            messages.append(
                kind(
                    f"{where}: {problem.message}",
                    hint=problem.hint or f"Fix {where}.",
                    id="django_rag.W151" if problem.warning else "django_rag.E151",
                )
            )
    for name, options in sorted(rag_settings.COLLECTIONS.items()):
        alias = (options or {}).get("RERANKER")
        if alias is not None and alias not in rerankers:
            messages.append(
                Error(
                    f"collection {name!r} reranks with {alias!r}, which RAG['RERANKERS'] does not define",
                    hint=f"Define it, or use one of {sorted(rerankers) or 'none'} (or None for no reranker).",
                    id="django_rag.E152",
                )
            )
    return messages


def parent_size_messages(name: str, options: dict[str, Any]) -> list[CheckMessage]:
    """E161 for collection ``name``'s ``RAG["COLLECTIONS"]`` entry ``options`` (called by
    ``django_rag.checks.settings`` for each collection): ``PARENT_CHUNK_SIZE`` is not a positive
    number of tokens."""
    size = options.get("PARENT_CHUNK_SIZE", 1024)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        return [
            Error(
                f"collection {name!r}: PARENT_CHUNK_SIZE must be a positive number of tokens, got {size!r}",
                hint="The size of the parent strategy='parent_document' returns, e.g. 1024 (the default).",
                id="django_rag.E161",
            )
        ]
    return []
