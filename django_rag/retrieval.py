"""Search a collection: validate the request, embed the query, ask the store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .exceptions import QueryError
from .querysets import check_k, check_query_text
from .stores import get_store
from .stores.base import QueryScope

if TYPE_CHECKING:
    from .models import Collection
    from .types import Hit

__all__ = ["MODES", "search"]

MODES = ("vector",)


def search(
    collection: Collection,
    query: str | Sequence[float],
    *,
    k: int = 8,
    mode: str = "vector",
    filters: dict[str, Any] | None = None,
    tags: Sequence[str] | None = None,
    tenant: str | None = None,
    source_prefix: str | None = None,
    min_score: float | None = None,
) -> list[Hit]:
    """The ``k`` best chunks of ``collection`` for ``query``, best first.

    ``tenant`` is an exact scope (search never crosses it), ``tags`` match on overlap,
    ``filters`` on metadata equality, ``source_prefix`` on whole source-id segments, and
    ``min_score`` drops hits below a cosine similarity.
    """
    if mode not in MODES:
        raise QueryError(f"unknown search mode {mode!r}; use one of {', '.join(MODES)}")
    check_k(k)
    if isinstance(tags, str):
        raise QueryError("tags must be a list of strings, not a string")
    if filters is not None and not isinstance(filters, dict):
        raise QueryError("filters must be a dict of metadata key -> value")
    if min_score is not None and not -1.0 <= min_score <= 1.0:
        raise QueryError(f"min_score is a cosine similarity between -1 and 1, got {min_score!r}")
    embedder = collection.get_embedder()
    if isinstance(query, str):
        vector = embedder.embed_query(check_query_text(query))
    else:
        vector = [float(x) for x in query]
        if len(vector) != embedder.dimensions:
            raise QueryError(
                f"the query vector has {len(vector)} dimensions; collection {collection.name!r} uses "
                f"{embedder.dimensions}-dim vectors ({embedder.space})"
            )
    scope = QueryScope(
        tenant=tenant, tags=tags, filters=filters, source_prefix=source_prefix, min_score=min_score
    )
    return get_store().query(collection.name, vector, k, space=embedder.space, scope=scope)
