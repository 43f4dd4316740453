"""Per-hit explanations for the retrieval test page: ranks, similarity, BM25 and its terms, fusion.

Ranks and the fused score are the store's own (``Hit.vector_rank``, ``text_rank``, ``score``).
The similarity is the cosine of the hit's stored embedding and the query's; the BM25 score is the
sum of its terms' weights from the store (``VectorStore.term_weights``, the one place that reads
postings for this), which is what the text leg ranked by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..models import Collection
from ..stores import get_store
from ..types import Hit

__all__ = ["Explained", "Explanation", "explain"]


@dataclass
class Explained:
    """One hit with the figures behind its rank."""

    hit: Hit
    rank: int
    vector_rank: int | None
    similarity: float | None
    text_rank: int | None
    bm25: float | None
    fused: float | None
    vector_part: float | None = None  # w_vector / (rrf_k + vector rank)
    text_part: float | None = None
    terms: list[tuple[str, float]] = field(default_factory=list)  # matched terms, heaviest first
    missing: list[str] = field(default_factory=list)  # query terms the chunk does not hold


@dataclass
class Explanation:
    terms: list[str]
    hits: list[Explained]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float | None:
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    if not norm or len(a) != len(b):
        return None
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm


def explain(
    collection: Collection,
    query: str,
    hits: Sequence[Hit],
    *,
    mode: str,
    weights: tuple[float, float] = (1.0, 1.0),
    rrf_k: int = 60,
) -> Explanation:
    """The figures behind each of ``hits`` (a search of ``collection`` for ``query`` in ``mode``)."""
    store = get_store(collection.using)
    embedder = collection.get_embedder()
    query_vector = embedder.embed_query(query)
    vectors = store.embeddings(hits)
    ids = [int(getattr(hit.chunk, "pk", 0) or 0) for hit in hits]
    weighted = store.term_weights(collection, embedder.space, query, [pk for pk in ids if pk])
    explained = []
    for rank, (hit, vector, pk) in enumerate(zip(hits, vectors, ids, strict=True), 1):
        terms = weighted.weights.get(pk, {})
        bm25 = sum(terms.values()) if collection.text_search else None
        item = Explained(
            hit=hit,
            rank=rank,
            vector_rank=hit.vector_rank,
            similarity=_cosine(query_vector, vector) if vector is not None else None,
            text_rank=hit.text_rank,
            bm25=bm25,
            fused=hit.score if mode == "hybrid" else None,
            terms=sorted(terms.items(), key=lambda item: (-item[1], item[0])),
            missing=[term for term in weighted.terms if term not in terms],
        )
        if mode == "hybrid":
            if hit.vector_rank is not None:
                item.vector_part = weights[0] / (rrf_k + hit.vector_rank)
            if hit.text_rank is not None:
                item.text_part = weights[1] / (rrf_k + hit.text_rank)
        explained.append(item)
    return Explanation(terms=weighted.terms, hits=explained)
