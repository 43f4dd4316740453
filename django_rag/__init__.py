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
    FileRefusedError,
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
    "FileRefusedError",
    "Hit",
    "IngestResult",
    "KnowledgeBase",
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
    "read_from_primary",
    "register",
    "unregister",
]

# Names that need Django's app registry (models) or pull in optional packages load on first
# access (the app-registry boundary), so that settings can import django_rag.database.
_LAZY = {
    "collection": "django_rag.api",
    "KnowledgeBase": "django_rag.api",
    "Collection": "django_rag.models",
    "Document": "django_rag.models",
    "Chunk": "django_rag.models",
    "get_embedder": "django_rag.embedders",
    "load_bytes": "django_rag.ingest.loaders",
    "load_html": "django_rag.ingest.loaders",
    "load_pdf": "django_rag.ingest.loaders",
    "load_text": "django_rag.ingest.loaders",
    "load_web": "django_rag.ingest.loaders",
    "OutboundPolicy": "django_rag.ingest.outbound",
    "guarded_fetch": "django_rag.ingest.outbound",
    "read_from_primary": "django_rag.replicas",
    "register": "django_rag.ingest.registration",
    "unregister": "django_rag.ingest.registration",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_rag' has no attribute {name!r}")
    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
