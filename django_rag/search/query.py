"""Search a collection: validate the request, embed the query, ask the store, rerank, diversify.

Modes: ``"vector"`` (cosine similarity on the collection's embedding space), ``"text"``
(BM25 over PostgreSQL full-text lexemes with the collection's text config) and ``"hybrid"``
(both legs fused by Reciprocal Rank Fusion in one SQL statement).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypedDict

from ..conf import rag_settings
from ..exceptions import QueryError
from ..models import Collection
from ..replicas import with_read_fallback
from ..stores import QueryScope, SearchRequest, get_store
from ..types import Hit
from ..validation import MAX_K, check_k, check_query_text, check_query_vector, check_text_search
from .mmr import mmr_hits
from .rerank import Reranker, ScoreFunction, get_reranker

__all__ = ["MODES", "SYNTAXES", "RerankOption", "SearchOptions", "search"]

MODES = ("vector", "text", "hybrid")
SYNTAXES = ("plain", "phrase", "websearch")

RerankOption = str | dict[str, Any] | Reranker | ScoreFunction


class SearchOptions(TypedDict, total=False):
    """The keyword options of ``search`` besides ``k`` and ``mode`` (``ask`` passes them on)."""

    filters: dict[str, Any] | None
    tags: Sequence[str] | None
    tenant: str | None
    source_prefix: str | None
    min_score: float | None
    syntax: str
    candidates: int | None
    rrf_k: int
    weights: tuple[float, float]
    rerank: RerankOption | None
    mmr: bool
    mmr_lambda: float
    snippets: bool


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
    rerank: RerankOption | None = None,
    mmr: bool = False,
    mmr_lambda: float = 0.5,
    snippets: bool = True,
    using: str | None = None,
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
    of a deep search). ``using`` is the database alias (default: the collection's own, read
    from its replica ``RAG["READ_DATABASE"]`` when set; see ``django_rag.replicas``).
    """
    if mode not in MODES:
        raise QueryError(f"unknown search mode {mode!r}; use one of {', '.join(MODES)}")
    if syntax not in SYNTAXES:
        raise QueryError(f"unknown query syntax {syntax!r}; use one of {', '.join(SYNTAXES)}")
    check_k(k)
    if mode != "vector":
        check_text_search(collection, mode)
    scope = QueryScope(
        tenant=_optional_str(tenant, "tenant"),
        tags=_tags(tags),
        filters=_filters(filters),
        source_prefix=_optional_str(source_prefix, "source_prefix"),
        min_score=_min_score(min_score, mode),
    )
    candidates = min(max(4 * k, 50), MAX_K) if candidates is None else check_k(candidates, "candidates")
    if candidates < k:
        raise QueryError(f"candidates must be between k ({k}) and {MAX_K}, got {candidates}")
    if isinstance(rrf_k, bool) or not isinstance(rrf_k, int) or rrf_k < 1:
        raise QueryError(f"rrf_k must be an integer >= 1, got {rrf_k!r}")
    weights = _weights(weights)
    if (
        isinstance(mmr_lambda, bool)
        or not isinstance(mmr_lambda, int | float)
        or not 0.0 <= mmr_lambda <= 1.0
    ):
        raise QueryError(f"mmr_lambda must be a number between 0 and 1, got {mmr_lambda!r}")
    embedder = collection.get_embedder()
    text = ""
    vector: list[float] | None = None
    if isinstance(query, str):
        text = check_query_text(query)
        if mode != "text":
            vector = embedder.embed_query(text)
    elif isinstance(query, Sequence) and not isinstance(query, bytes):
        if mode != "vector":
            raise QueryError(f"{mode} search needs the query text, not a vector")
        vector = check_query_vector(query)
        if len(vector) != embedder.dimensions:
            raise QueryError(
                f"the query vector has {len(vector)} dimensions; collection {collection.name!r} uses "
                f"{embedder.dimensions}-dim vectors ({embedder.space})"
            )
    else:
        raise QueryError(f"the search query must be a string or a vector, got {type(query).__name__}")
    if (rerank is not None or mmr) and not text:
        raise QueryError("rerank and mmr need the query text")
    widened = candidates if rerank is not None or mmr else k
    request = SearchRequest(
        mode=mode,
        k=widened,
        space=embedder.space,
        text=text,
        vector=vector,
        scope=scope,
        candidates=candidates,
        rrf_k=rrf_k,
        weights=weights,
        syntax=syntax,
        ef_search=rag_settings.EF_SEARCH,
        snippets=snippets,
    )

    def read(alias: str) -> list[Hit]:
        store = get_store(alias)
        hits = store.search(collection, request)
        if rerank is not None:
            hits = get_reranker(rerank).rerank(text, hits, top_n=None if mmr else k)
        if mmr:
            query_vector = vector if vector is not None else embedder.embed_query(text)
            hits = mmr_hits(query_vector, hits, k, mmr_lambda, store=store)
        return hits

    # An explicit ``using`` is read as asked; otherwise the read replica, if the site has one (a
    # replica that goes down midway reruns the whole read, reranking included, on the primary).
    hits = read(using) if using else with_read_fallback(collection.using, read)
    return hits[:k]


def _optional_str(value: Any, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise QueryError(f"{name} must be a string, got {type(value).__name__}")
    return value


def _tags(tags: Any) -> list[str] | None:
    if tags is None:
        return None
    if isinstance(tags, str) or not isinstance(tags, Sequence | set | frozenset):
        raise QueryError(f"tags must be a list of strings, got {type(tags).__name__}")
    if not all(isinstance(tag, str) for tag in tags):
        raise QueryError("tags must be a list of strings")
    return list(tags)


def _filters(filters: Any) -> dict[str, Any] | None:
    if filters is None:
        return None
    if not isinstance(filters, dict):
        raise QueryError(f"filters must be a dict of metadata key -> value, got {type(filters).__name__}")
    _check_json(filters, "filters")
    return filters


def _check_json(value: Any, where: str) -> None:
    """A metadata filter must be plain JSON: string keys, finite numbers, no other types."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise QueryError(f"{where} keys must be strings, got {key!r}")
            _check_json(item, f"{where}[{key!r}]")
    elif isinstance(value, list | tuple):
        for item in value:
            _check_json(item, where)
    elif isinstance(value, float) and not math.isfinite(value):
        raise QueryError(f"{where} holds {value!r}, which JSON cannot represent")
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise QueryError(f"{where} holds a {type(value).__name__}; use JSON values (str, number, bool, null)")


def _min_score(min_score: Any, mode: str) -> float | None:
    if min_score is None:
        return None
    if isinstance(min_score, bool) or not isinstance(min_score, int | float) or not math.isfinite(min_score):
        raise QueryError(f"min_score must be a finite number, got {min_score!r}")
    if mode != "text" and not -1.0 <= min_score <= 1.0:
        raise QueryError(
            f"min_score is a cosine similarity between -1 and 1 in {mode} mode, got {min_score!r}"
        )
    return float(min_score)


def _weights(weights: Any) -> tuple[float, float]:
    try:
        vector_weight, text_weight = weights
    except (TypeError, ValueError):
        raise QueryError(
            f"weights must be a pair of non-negative numbers (vector, text), got {weights!r}"
        ) from None
    for weight in (vector_weight, text_weight):
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise QueryError(
                f"weights must be a pair of non-negative numbers (vector, text), got {weights!r}"
            )
    return float(vector_weight), float(text_weight)
