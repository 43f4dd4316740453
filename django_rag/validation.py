"""Checks of search arguments shared by every entry point (API, ORM querysets, commands, views).

Each raises a ``QueryError`` that names the parameter, before anything reaches the database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .exceptions import QueryError

if TYPE_CHECKING:
    from .models import Collection

__all__ = [
    "FLOAT4_MAX",
    "MAX_K",
    "MAX_QUERY_CHARS",
    "check_k",
    "check_query_text",
    "check_query_vector",
    "check_text_search",
]

MAX_K = 1000
MAX_QUERY_CHARS = 20_000
FLOAT4_MAX = 3.4028234663852886e38


def check_k(k: Any, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise QueryError(f"{name} must be an integer between 1 and {MAX_K}, got {k!r}")
    return k


def check_query_text(query: Any, name: str = "the search query") -> str:
    if not isinstance(query, str):
        raise QueryError(f"{name} must be a string, got {type(query).__name__}")
    # PostgreSQL text cannot hold NUL; it carries no meaning in a query anyway.
    query = query.replace("\x00", "")
    if not query.strip():
        raise QueryError(f"{name} is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"{name} is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")
    return str(query)


def check_query_vector(query: Iterable[Any]) -> list[float]:
    """A caller's query vector as floats; a QueryError if cosine search cannot use it."""
    try:
        vector = list(map(float, query))
    except (TypeError, ValueError) as exc:
        raise QueryError(f"a query vector must be a sequence of numbers ({exc})") from None
    if not vector:
        raise QueryError("the query vector is empty")
    # One sum finds NaN and infinities (they make it non-finite), and any() stops at the first
    # non-zero component: pgvector refuses the former, and a zero vector has no cosine.
    if not math.isfinite(sum(vector)):
        raise QueryError("the query vector holds NaN or infinite values")
    if max(vector) > FLOAT4_MAX or min(vector) < -FLOAT4_MAX:
        raise QueryError("the query vector has components beyond float4, pgvector's component type")
    if not any(vector):
        raise QueryError("the query vector is all zeros: it has no direction to compare by cosine")
    return vector


def check_text_search(collection: Collection, mode: str = "text") -> None:
    """Text and hybrid search need the collection's text index (TEXT_SEARCH, on by default)."""
    if not collection.text_search:
        raise QueryError(
            f"collection {collection.name!r} has TEXT_SEARCH off, so {mode} search has no text index to use; "
            "search with mode='vector', or set RAG['COLLECTIONS'][...]['TEXT_SEARCH'] = True "
            "(the stored chunks are indexed when the collection is next used)"
        )
