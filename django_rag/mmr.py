"""Maximal Marginal Relevance: pick hits that are relevant *and* unlike the ones already picked.

Retrieval often returns near-duplicates (the same paragraph in two versions of a manual); MMR
trades a little relevance for coverage. Fetch more candidates than you need, then::

    candidates = store.query(collection, vector, fetch_k, space=space, scope=scope)
    hits = mmr_hits(vector, candidates, k, lambda_=0.5)

``lambda_=1`` is plain relevance ranking, ``0`` is maximal diversity. Vectors are compared by
cosine similarity in plain Python: a few hundred candidates take milliseconds.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from .exceptions import QueryError

if TYPE_CHECKING:
    from .types import Hit

__all__ = ["embeddings_for", "mmr", "mmr_hits"]

T = TypeVar("T")


def mmr(
    query_vector: Sequence[float],
    candidates: Sequence[tuple[T, Sequence[float]]],
    k: int,
    lambda_: float = 0.5,
) -> list[T]:
    """The ``k`` items of ``candidates`` (``(item, vector)`` pairs) in MMR order.

    Each step picks the candidate maximising
    ``lambda_ * cos(query, v) - (1 - lambda_) * max(cos(v, s) for s already picked)``.
    Ties keep the candidates' order, so ``lambda_=1`` sorts by similarity to the query, stably.
    """
    if not 0.0 <= lambda_ <= 1.0:
        raise QueryError(f"MMR lambda must be between 0 and 1, got {lambda_!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise QueryError(f"MMR k must be a positive integer, got {k!r}")
    query = _unit(query_vector)
    units = [_unit(vector) for _, vector in candidates]
    for unit in units:
        if len(unit) != len(query):
            raise QueryError(
                f"MMR got a {len(unit)}-dim candidate vector for a {len(query)}-dim query vector"
            )
    relevance = [_dot(query, unit) for unit in units]
    # The highest similarity of each candidate to anything picked so far (nothing yet: no penalty).
    redundancy = [0.0] * len(units)
    remaining = list(range(len(units)))
    picked: list[int] = []
    while remaining and len(picked) < k:
        # max() keeps the first of equals, so ties stay in the candidates' order.
        best = max(remaining, key=lambda i: lambda_ * relevance[i] - (1.0 - lambda_) * redundancy[i])
        picked.append(best)
        remaining.remove(best)
        if lambda_ < 1.0:
            for i in remaining:
                similarity = _dot(units[i], units[best])
                redundancy[i] = similarity if len(picked) == 1 else max(redundancy[i], similarity)
    return [candidates[i][0] for i in picked]


def embeddings_for(hits: Sequence[Hit], *, using: str | None = None) -> list[list[float]]:
    """Each hit's chunk embedding, in order.

    ``ChunkData`` hits (memory store) carry theirs; ``Chunk`` rows come from search with the
    embedding column deferred (it is the bulk of a row), so theirs are fetched in one query by id.
    """
    from .conf import rag_settings
    from .models import Chunk

    vectors: dict[int, list[float]] = {}
    missing: list[int] = []
    for position, hit in enumerate(hits):
        chunk = hit.chunk
        if isinstance(chunk, Chunk):
            if "embedding" in chunk.__dict__ and chunk.embedding is not None:
                vectors[position] = [float(x) for x in chunk.embedding]
            else:
                missing.append(position)
        elif getattr(chunk, "embedding", None) is not None:
            vectors[position] = [float(x) for x in chunk.embedding]  # type: ignore[union-attr]
        else:
            raise QueryError(f"MMR needs each hit's embedding; hit {position + 1} ({hit.source_id}) has none")
    if missing:
        ids = {hits[position].chunk.pk: position for position in missing}  # type: ignore[union-attr]
        rows = Chunk.objects.using(using or rag_settings.DATABASE).filter(pk__in=list(ids))
        for pk, embedding in rows.values_list("id", "embedding"):
            vectors[ids[pk]] = [float(x) for x in embedding]
        gone = [position for position in missing if position not in vectors]
        if gone:
            raise QueryError(
                f"MMR could not load the embeddings of {len(gone)} hit(s); "
                "their chunks were deleted or re-indexed since the search"
            )
    return [vectors[position] for position in range(len(hits))]


def mmr_hits(
    query_vector: Sequence[float],
    hits: Sequence[Hit],
    k: int,
    lambda_: float = 0.5,
    *,
    using: str | None = None,
) -> list[Hit]:
    """``mmr`` over search hits, loading their embeddings; scores are left as retrieval gave them."""
    if not hits:
        return []
    return mmr(query_vector, list(zip(hits, embeddings_for(hits, using=using), strict=True)), k, lambda_)


def _unit(vector: Sequence[float]) -> list[float]:
    values = [float(x) for x in vector]
    norm = math.sqrt(_dot(values, values))
    return [x / norm for x in values] if norm else values


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(map(operator.mul, a, b))
