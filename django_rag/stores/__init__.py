"""Stores: the ORM store on PostgreSQL + pgvector, and a memory store for code without a database.

Ingestion and search reach documents and chunks only through the ``VectorStore`` protocol.
"""

from .base import (
    ALL_TENANTS,
    DocumentInfo,
    QueryScope,
    Record,
    SearchRequest,
    SourceState,
    StoredDocument,
    TermWeights,
    VectorStore,
    get_store,
)

__all__ = [
    "ALL_TENANTS",
    "DocumentInfo",
    "QueryScope",
    "Record",
    "SearchRequest",
    "SourceState",
    "StoredDocument",
    "TermWeights",
    "VectorStore",
    "get_store",
]
