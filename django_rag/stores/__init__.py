"""Vector stores: the ORM store on PostgreSQL + pgvector, and a memory store for code without a database."""

from .base import VectorStore, get_store, prefix_matches

__all__ = ["VectorStore", "get_store", "prefix_matches"]
