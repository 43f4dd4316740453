"""Search a collection: validate the request, embed the query, ask the store, rerank, diversify.

Modes: ``"vector"`` (cosine similarity on the collection's embedding space), ``"text"``
(BM25 over PostgreSQL full-text lexemes with the collection's text config) and ``"hybrid"``
(both legs fused by Reciprocal Rank Fusion in one SQL statement).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from ..conf import rag_settings
from ..exceptions import QueryError
from ..models import Collection
from ..replicas import with_read_fallback
from ..stores import QueryScope, SearchRequest, get_store
from ..types import Hit
from ..validation import (
    MAX_K,
    check_bool,
    check_choice,
    check_filters,
    check_k,
    check_min_score,
    check_mmr_lambda,
    check_optional_text,
    check_query_text,
    check_query_vector,
    check_rrf_k,
    check_tags,
    check_text_search,
    check_using,
    check_weights,
)
from .mmr import mmr_hits
from .relevance import apply_relevance, collection_size
from .rerank import Reranker, ScoreFunction, resolve_reranker
from .strategies import (
    DEFAULT_N_QUERIES,
    TextModel,
    check_n_queries,
    check_strategy,
    compress_hits,
    fuse_rankings,
    query_variants,
    to_parents,
)
from .strategies import (
    parent_chunk_size as resolve_parent_size,
)

__all__ = ["MODES", "SYNTAXES", "RerankOption", "SearchOptions", "search"]

MODES = ("vector", "text", "hybrid")
SYNTAXES = ("plain", "phrase", "websearch")

RerankOption = str | dict[str, Any] | Reranker | ScoreFunction | bool


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
    strategy: str | None
    n_queries: int
    compress: bool
    parent_chunk_size: int | None
    rewriter: TextModel | None


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
    strategy: str | None = None,
    n_queries: int = DEFAULT_N_QUERIES,
    compress: bool = False,
    parent_chunk_size: int | None = None,
    rewriter: TextModel | None = None,
    using: str | None = None,
) -> list[Hit]:
    """The ``k`` best chunks of ``collection`` for ``query``, best first.

    ``tenant`` is an exact scope (search never crosses it), ``tags`` match on overlap (an
    empty list matches nothing, as ``tags__overlap=[]`` does in the ORM),
    ``filters`` on metadata equality, ``source_prefix`` on whole source-id segments.
    ``min_score`` (0 to 1) is a floor on each hit's calibrated ``relevance``, the same scale in
    every mode (``django_rag.search.relevance``); it defaults to ``RAG["MIN_SCORE"]`` (0.5), and
    0 keeps every hit. A query with no good match returns no hits. ``syntax`` (text and hybrid): ``"plain"``
    ranks any query word, ``"phrase"`` requires the words in order, ``"websearch"`` reads
    quotes, ``or`` and ``-word`` like a web search engine. Hybrid fuses the top
    ``candidates`` of each leg (default ``max(4k, 50)``, at most 1000) with RRF: ``w / (rrf_k + rank)``
    summed over the legs, ``weights`` = (vector, text).

    ``rerank`` (an alias of ``RAG["RERANKERS"]``, a config dict, a Reranker or a
    ``func(query, texts) -> scores``) re-scores the top ``candidates`` and keeps the best
    ``k``; left out, the collection's ``RERANKER`` setting applies, ``False`` turns it off and
    ``True`` asks for it (or ``"default"``); ``mmr=True`` then picks ``k`` of them trading
    relevance for diversity (``mmr_lambda`` 1.0 = pure relevance). Both widen the retrieval to ``candidates``.
    ``snippets=False`` skips the highlighted snippets (``ts_headline`` is the costliest part
    of a deep search). ``using`` is the database alias (default: the collection's own, read
    from its replica ``RAG["READ_DATABASE"]`` when set; see ``django_rag.replicas``).

    ``strategy`` (``django_rag.search.strategies``): ``"multi_query"`` has ``rewriter`` (a chat model) write
    ``n_queries`` (1 to 10) variants of the query and fuses the searches of all of them by RRF
    (rerank and MMR then apply to the fused ranking, with the original query);
    ``"parent_document"`` returns each hit's parent, its neighbouring chunks of the same section
    up to ``parent_chunk_size`` tokens (default: the collection's ``PARENT_CHUNK_SIZE``).
    ``compress=True`` cuts each passage to the sentences that answer the query (chosen by
    ``rewriter``, or without one by embedding similarity). A failing chat model falls back to what
    needs none (the original query; the embedding filter), with a logged warning.
    """
    mode = check_choice(mode, "mode", MODES, "search mode")
    syntax = check_choice(syntax, "syntax", SYNTAXES, "query syntax")
    check_k(k)
    if mode != "vector":
        check_text_search(collection, mode)
    scope = QueryScope(
        tenant=check_optional_text(tenant, "tenant"),
        tags=check_tags(tags),
        filters=check_filters(filters),
        source_prefix=check_optional_text(source_prefix, "source_prefix"),
    )
    min_score = check_min_score(min_score, mode)
    candidates = min(max(4 * k, 50), MAX_K) if candidates is None else check_k(candidates, "candidates")
    if candidates < k:
        raise QueryError(f"candidates must be between k ({k}) and {MAX_K}, got {candidates}")
    rrf_k = check_rrf_k(rrf_k)
    weights = check_weights(weights)
    mmr = check_bool(mmr, "mmr")
    mmr_lambda = check_mmr_lambda(mmr_lambda)
    snippets = check_bool(snippets, "snippets")
    strategy = check_strategy(strategy)
    n_queries = check_n_queries(n_queries)
    compress = check_bool(compress, "compress")
    parent_size = resolve_parent_size(collection, parent_chunk_size) if strategy == "parent_document" else 0
    if strategy == "multi_query" and rewriter is None:
        raise QueryError(
            "strategy='multi_query' needs a chat model to write the query variants: pass chat= to kb.search "
            "or set RAG['CHAT'] to a language model (the default extractive backend writes no new words)"
        )
    using = check_using(using)
    # Resolved before any work: a rerank option of the wrong kind fails as fast as a bad k.
    reranker = resolve_reranker(rerank, collection.name)
    embedder = collection.get_embedder()
    text = ""
    vector: list[float] | None = None
    if isinstance(query, str):
        text = check_query_text(query)
        if mode != "text":
            vector = embedder.embed_query(text)
    elif isinstance(query, Sequence) and not isinstance(query, bytes | bytearray | memoryview):
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
    if (reranker is not None or mmr) and not text:
        raise QueryError("rerank and mmr need the query text")
    if (strategy is not None or compress) and not text:
        raise QueryError("retrieval strategies and compress need the query text, not a vector")
    # Children to find before folding them into parents: a parent holds several of them.
    wanted = min(k * max(1, -(-parent_size // collection.chunk_size)), MAX_K) if parent_size else k
    widened = max(candidates, wanted) if reranker is not None or mmr else wanted
    # Each query of a multi-query search is searched as deep as hybrid's legs, then fused.
    depth = max(widened, candidates) if strategy == "multi_query" else widened
    queries: list[tuple[str, list[float] | None]] = [(text, vector)]
    if strategy == "multi_query" and rewriter is not None:
        for variant in query_variants(rewriter, text, n_queries):
            queries.append((variant, embedder.embed_query(variant) if mode != "text" else None))

    def request(query_text: str, query_vector: list[float] | None) -> SearchRequest:
        return SearchRequest(
            mode=mode,
            k=depth,
            space=embedder.space,
            text=query_text,
            vector=query_vector,
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
        rankings = []
        for query_text, query_vector in queries:
            found = store.search(collection, request(query_text, query_vector))
            size = (
                collection_size(store, collection, embedder.space)
                if query_vector is not None and found
                else 0
            )
            rankings.append(apply_relevance(found, query_vector, embedder, min_score, chunks=size))
        hits = rankings[0] if len(rankings) == 1 else fuse_rankings(rankings, rrf_k)[:widened]
        if reranker is not None:
            hits = reranker.rerank(text, hits, top_n=None if mmr else wanted)
        if mmr:
            query_vector = vector if vector is not None else embedder.embed_query(text)
            hits = mmr_hits(query_vector, hits, wanted, mmr_lambda, store=store)
        hits = hits[:wanted]
        if parent_size:
            hits = to_parents(store, collection, hits, space=embedder.space, size=parent_size)[:k]
        if compress:
            hits = compress_hits(hits[:k], text, chat=rewriter, embedder=embedder, query_vector=vector)
        return hits

    # An explicit ``using`` is read as asked; otherwise the read replica, if the site has one (a
    # replica that goes down midway reruns the whole read, reranking included, on the primary).
    hits = read(using) if using else with_read_fallback(collection.using, read)
    return hits[:k]
