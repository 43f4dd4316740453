"""What ``manage.py check`` says about a collection's search options.

- E151 ``PARENT_CHUNK_SIZE`` is not a positive number of tokens
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error

__all__ = ["parent_size_messages"]


def parent_size_messages(name: str, options: dict[str, Any]) -> list[CheckMessage]:
    """E151 for collection ``name``'s ``RAG["COLLECTIONS"]`` entry ``options``."""
    size = options.get("PARENT_CHUNK_SIZE", 1024)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        return [
            Error(
                f"collection {name!r}: PARENT_CHUNK_SIZE must be a positive number of tokens, got {size!r}",
                hint="The size of the parent strategy='parent_document' returns, e.g. 1024 (the default).",
                id="django_rag.E151",
            )
        ]
    return []
