"""Shared fixtures. The database is real PostgreSQL + pgvector (see tests/settings.py)."""

from __future__ import annotations

import pytest

from django_rag.stores.base import _cached_store


@pytest.fixture(autouse=True)
def _fresh_store_cache():
    # The store is cached per backend path; tests that swap RAG["STORE"] must not leak it.
    yield
    _cached_store.cache_clear()
