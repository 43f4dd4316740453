"""Maximal Marginal Relevance: pick hits that are relevant *and* unlike the ones already picked.

Retrieval often returns near-duplicates (the same paragraph in two versions of a manual); MMR
trades a little relevance for coverage. Fetch more candidates than you need, then::

    candidates = kb.search(question, k=fetch_k)
    hits = mmr_hits(vector, candidates, k, lambda_=0.5, store=get_store())

``lambda_=1`` is plain relevance ranking, ``0`` is maximal diversity. Vectors are compared by
cosine similarity in plain Python: a few hundred candidates take milliseconds.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import TypeVar

from ..exceptions import QueryError
from ..stores import VectorStore
from ..types import Hit

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


def embeddings_for(hits: Sequence[Hit], store: VectorStore) -> list[list[float]]:
    """Each hit's chunk embedding, in order (search leaves them out of hits: ``store.embeddings``)."""
    vectors = store.embeddings(hits)
    gone = [position for position, vector in enumerate(vectors) if vector is None]
    if gone:
        raise QueryError(
            f"MMR could not load the embeddings of {len(gone)} hit(s) (first: {hits[gone[0]].source_id}); "
            "their chunks were deleted or re-indexed since the search"
        )
    return [vector for vector in vectors if vector is not None]


def mmr_hits(
    query_vector: Sequence[float],
    hits: Sequence[Hit],
    k: int,
    lambda_: float = 0.5,
    *,
    store: VectorStore,
) -> list[Hit]:
    """``mmr`` over search hits, loading their embeddings; scores are left as retrieval gave them."""
    if not hits:
        return []
    return mmr(query_vector, list(zip(hits, embeddings_for(hits, store), strict=True)), k, lambda_)


def _unit(vector: Sequence[float]) -> list[float]:
    values = [float(x) for x in vector]
    norm = math.sqrt(_dot(values, values))
    return [x / norm for x in values] if norm else values


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return float(sum(map(operator.mul, a, b)))
