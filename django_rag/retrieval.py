"""Search a collection: validate the request, embed the query, ask the store.

Modes: ``"vector"`` (cosine similarity on the collection's embedding space), ``"text"``
(BM25 over PostgreSQL full-text lexemes with the collection's text config) and ``"hybrid"``
(both legs fused by Reciprocal Rank Fusion in one SQL statement).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .exceptions import QueryError
from .querysets import MAX_K, check_k, check_query_text, check_query_vector, check_text_search
from .stores import get_store
from .stores.base import QueryScope

if TYPE_CHECKING:
    from .models import Collection
    from .types import Hit

__all__ = ["MODES", "SYNTAXES", "search"]

MODES = ("vector", "text", "hybrid")
SYNTAXES = ("plain", "phrase", "websearch")


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
    syntax: str = "plain",
    candidates: int | None = None,
    rrf_k: int = 60,
    weights: tuple[float, float] = (1.0, 1.0),
    rerank: Any = None,
    mmr: bool = False,
    mmr_lambda: float = 0.5,
    snippets: bool = True,
) -> list[Hit]:
    """The ``k`` best chunks of ``collection`` for ``query``, best first.

    ``tenant`` is an exact scope (search never crosses it), ``tags`` match on overlap,
    ``filters`` on metadata equality, ``source_prefix`` on whole source-id segments.
    ``min_score`` is a floor on cosine similarity in vector and hybrid mode (applied to the
    vector leg) and on the BM25 score in text mode. ``syntax`` (text and hybrid): ``"plain"``
    ranks any query word, ``"phrase"`` requires the words in order, ``"websearch"`` reads
    quotes, ``or`` and ``-word`` like a web search engine. Hybrid fuses the top
    ``candidates`` of each leg (default ``max(4k, 50)``, at most 1000) with RRF: ``w / (rrf_k + rank)``
    summed over the legs, ``weights`` = (vector, text).

    ``rerank`` (an alias of ``RAG["RERANKERS"]``, a config dict, a Reranker or a
    ``func(query, texts) -> scores``) re-scores the top ``candidates`` and keeps the best
    ``k``; ``mmr=True`` then picks ``k`` of them trading relevance for diversity
    (``mmr_lambda`` 1.0 = pure relevance). Both widen the retrieval to ``candidates``.
    ``snippets=False`` skips the highlighted snippets (``ts_headline`` is the costliest part
    of a deep search).
    """
    if mode not in MODES:
        raise QueryError(f"unknown search mode {mode!r}; use one of {', '.join(MODES)}")
    if syntax not in SYNTAXES:
        raise QueryError(f"unknown query syntax {syntax!r}; use one of {', '.join(SYNTAXES)}")
    check_k(k)
    if mode != "vector":
        check_text_search(collection, mode)
    if isinstance(tags, str):
        raise QueryError("tags must be a list of strings, not a string")
    if filters is not None and not isinstance(filters, dict):
        raise QueryError("filters must be a dict of metadata key -> value")
    if min_score is not None and mode != "text" and not -1.0 <= min_score <= 1.0:
        raise QueryError(
            f"min_score is a cosine similarity between -1 and 1 in {mode} mode, got {min_score!r}"
        )
    candidates = min(max(4 * k, 50), MAX_K) if candidates is None else candidates
    if not k <= candidates <= MAX_K:
        raise QueryError(f"candidates must be between k ({k}) and {MAX_K}, got {candidates}")
    if rrf_k < 1 or len(weights) != 2 or min(weights) < 0:
        raise QueryError("rrf_k must be >= 1 and weights a pair of non-negative numbers (vector, text)")
    embedder = collection.get_embedder()
    text = ""
    vector: list[float] | None = None
    if isinstance(query, str):
        text = check_query_text(query)
        if mode != "text":
            vector = embedder.embed_query(text)
    else:
        if mode != "vector":
            raise QueryError(f"{mode} search needs the query text, not a vector")
        vector = check_query_vector(query)
        if len(vector) != embedder.dimensions:
            raise QueryError(
                f"the query vector has {len(vector)} dimensions; collection {collection.name!r} uses "
                f"{embedder.dimensions}-dim vectors ({embedder.space})"
            )
    scope = QueryScope(
        tenant=tenant, tags=tags, filters=filters, source_prefix=source_prefix, min_score=min_score
    )
    if not 0.0 <= mmr_lambda <= 1.0:
        raise QueryError(f"mmr_lambda must be between 0 and 1, got {mmr_lambda!r}")
    if (rerank is not None or mmr) and not text:
        raise QueryError("rerank and mmr need the query text")
    options: dict[str, Any] = {} if snippets else {"snippets": False}
    if mode == "hybrid":
        options.update(candidates=candidates, rrf_k=rrf_k, weights=tuple(weights))
    if mode != "vector":
        options["syntax"] = syntax
    widened = candidates if rerank is not None or mmr else k
    hits = get_store().search(
        collection,
        mode=mode,
        k=widened,
        space=embedder.space,
        text=text,
        vector=vector,
        scope=scope,
        **options,
    )
    if rerank is not None:
        from .rerank import get_reranker

        hits = get_reranker(rerank).rerank(text, hits, top_n=None if mmr else k)
    if mmr:
        from .conf import rag_settings
        from .mmr import mmr_hits

        query_vector = vector if vector is not None else embedder.embed_query(text)
        hits = mmr_hits(query_vector, hits, k, mmr_lambda, using=rag_settings.DATABASE)
    return hits[:k]
