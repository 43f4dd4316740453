"""What ``manage.py check`` says about a collection's chunker options.

- E160 ``CHUNKER`` is not a known chunker, or ``SEMANTIC_THRESHOLD`` is not a number in [-1, 1]
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error

from .semantic import CHUNKERS

__all__ = ["chunker_messages"]


def chunker_messages(name: str, options: dict[str, Any]) -> list[CheckMessage]:
    """E160 for collection ``name``'s ``RAG["COLLECTIONS"]`` entry ``options``."""
    errors: list[CheckMessage] = []
    chunker = options.get("CHUNKER", "default")
    if chunker not in CHUNKERS:
        errors.append(
            Error(
                f"collection {name!r}: unknown CHUNKER {chunker!r}",
                hint=f"Use one of {', '.join(repr(c) for c in CHUNKERS)}.",
                id="django_rag.E160",
            )
        )
    threshold = options.get("SEMANTIC_THRESHOLD", 0.5)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not -1 <= threshold <= 1:
        errors.append(
            Error(
                f"collection {name!r}: SEMANTIC_THRESHOLD must be a number from -1 to 1, got {threshold!r}",
                hint="A cosine similarity of adjacent sentences, e.g. 0.5 (the default).",
                id="django_rag.E160",
            )
        )
    return errors
