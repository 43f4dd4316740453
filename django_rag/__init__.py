"""django-rag: documents, uploads and model rows as a searchable, citable knowledge base.

    import django_rag as rag
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("faq", "How to back up ...")])
    hits = kb.search("backups", k=5)

Importing this package has no side effects: names that need Django's app registry load on
first access.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .exceptions import (
    ChatError,
    ConfigurationError,
    EmbedderError,
    LoaderError,
    OutboundPolicyError,
    QueryError,
    RagError,
    RerankerError,
)
from .types import Answer, ChunkData, Hit, IngestResult, RagDocument, SyncResult

__all__ = [
    "Answer",
    "ChatError",
    "Chunk",
    "ChunkData",
    "Collection",
    "ConfigurationError",
    "Document",
    "EmbedderError",
    "Hit",
    "IngestResult",
    "LoaderError",
    "OutboundPolicy",
    "OutboundPolicyError",
    "QueryError",
    "RagDocument",
    "RagError",
    "RerankerError",
    "SyncResult",
    "collection",
    "get_embedder",
    "guarded_fetch",
    "load_bytes",
    "load_html",
    "load_pdf",
    "load_text",
    "load_web",
    "register",
    "unregister",
]

_LAZY = {
    "collection": "django_rag.api",
    "Collection": "django_rag.models",
    "Document": "django_rag.models",
    "Chunk": "django_rag.models",
    "get_embedder": "django_rag.embedders",
    "load_bytes": "django_rag.loaders",
    "load_html": "django_rag.loaders",
    "load_pdf": "django_rag.loaders",
    "load_text": "django_rag.loaders",
    "load_web": "django_rag.loaders",
    "OutboundPolicy": "django_rag.outbound",
    "guarded_fetch": "django_rag.outbound",
    "register": "django_rag.media",
    "unregister": "django_rag.media",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_rag' has no attribute {name!r}")
    return getattr(import_module(module), name)
