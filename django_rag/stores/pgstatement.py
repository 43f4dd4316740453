"""The SQL of one search: a flat vector SELECT, or text / hybrid ranking in CTEs, and its parameters.

The vector leg is an HNSW scan of the space's partial expression index (``rag_migration``) with
iterative scan on, so filters never starve it of rows; its index settings travel inside the
statement (``scan_settings``). The text leg is in ``pgtext``. Hybrid fuses both rankings with
Reciprocal Rank Fusion, and the final SELECT returns chunk and document columns, so a search is
one statement whose rows are the hits.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg.types.json import Jsonb

from ..models import Chunk, Collection, Document
from ..sql import PREFIX_SEPARATORS, escape_like, quote_literal, vector_cast_type
from .adapters import pack
from .base import QueryScope, SearchRequest
from .pgtext import text_leg

__all__ = [
    "CHUNK_FIELDS",
    "DOCUMENT_FIELDS",
    "PREFIX",
    "VECTOR_PREFIX",
    "build_sql",
    "ef_search",
    "scan_settings",
]

CHUNK_FIELDS = [f for f in Chunk._meta.concrete_fields if f.attname not in ("embedding", "search_vector")]
DOCUMENT_FIELDS = list(Document._meta.concrete_fields)
_CHUNK_COLUMNS = ", ".join(f'c."{f.column}"' for f in CHUNK_FIELDS)
_DOCUMENT_COLUMNS = ", ".join(f'd."{f.column}"' for f in DOCUMENT_FIELDS)
_COLUMNS = f"{_CHUNK_COLUMNS}, {_DOCUMENT_COLUMNS}"
# Row layouts: (distance, chunk..., document...) in vector mode, else (score, vector rank,
# text rank, headline, BM25 score, cosine distance, query idf, chunk..., document...).
VECTOR_PREFIX, PREFIX = 1, 7


def _filters(scope: QueryScope, params: dict[str, Any]) -> str:
    sql = ""
    if scope.tenant is not None:
        params["tenant"] = scope.tenant
        sql += " AND c.tenant = %(tenant)s"
    # An empty list overlaps no tag: it matches nothing (a user allowed no tag sees nothing).
    if scope.tags is not None:
        params["tags"] = list(scope.tags)
        sql += " AND c.tags && %(tags)s::varchar[]"
    if scope.filters:
        params["filters"] = Jsonb(scope.filters)
        sql += " AND c.metadata @> %(filters)s"
        nested = {
            key: value for key, value in scope.filters.items() if isinstance(value, dict | list | tuple)
        }
        if nested:
            # @> (which the GIN index serves) reads a nested value as "contains": [1] would match
            # [1, 2]. Filters mean equality, for nested values too, as in every store.
            params["nested"] = Jsonb(nested)
            sql += (
                " AND NOT EXISTS (SELECT 1 FROM jsonb_each(%(nested)s) AS f"
                " WHERE c.metadata -> f.key IS DISTINCT FROM f.value)"
            )
    if scope.source_prefix:
        prefix = scope.source_prefix
        escaped = escape_like(prefix)
        params["prefix"] = prefix
        ends = prefix.endswith(PREFIX_SEPARATORS)
        params["prefix_like"] = (
            [escaped + "%"] if ends else [escaped + sep + "%" for sep in PREFIX_SEPARATORS]
        )
        sql += (
            " AND EXISTS (SELECT 1 FROM django_rag_document AS d WHERE d.id = c.document_id"
            " AND (d.source_id = %(prefix)s OR d.source_id LIKE ANY (%(prefix_like)s)))"
        )
    return sql


def _distance(request: SearchRequest, params: dict[str, Any]) -> tuple[str, str]:
    """The cosine distance expression over the space's index cast, and the ``min_score`` floor."""
    vector = request.vector or []
    typed = vector_cast_type(len(vector))
    params["vector"] = pack(vector)
    distance = f"(c.embedding::{typed}) <=> (%(vector)s::vector::{typed})"
    floor = ""
    if request.scope.min_score is not None and request.mode != "text":
        params["max_distance"] = 1.0 - request.scope.min_score
        floor = f" AND {distance} <= %(max_distance)s"
    return distance, floor


def _vector_leg(request: SearchRequest, params: dict[str, Any], filters: str, space: str) -> str:
    distance, floor = _distance(request, params)
    return f"""
vec AS MATERIALIZED (
    SELECT c.id, {distance} AS distance FROM django_rag_chunk AS c
    WHERE c.collection_id = %(collection)s AND c.space = {space}{filters}{floor}{scan_settings(request)}
    ORDER BY distance LIMIT %(candidates)s
),
vranked AS (SELECT id, distance, row_number() OVER (ORDER BY distance, id) AS vrank FROM vec)"""


def build_sql(collection: Collection, request: SearchRequest) -> tuple[str, dict[str, Any]]:
    """The statement of one search and its parameters.

    Vector mode is one flat SELECT over the space's index (see ``_vector_sql``); text and
    hybrid rank in CTEs. Rows start with ``VECTOR_PREFIX`` (vector) or ``PREFIX`` (text,
    hybrid) columns, then the chunk's and the document's columns.
    """
    params: dict[str, Any] = {}
    filters = _filters(request.scope, params)
    # The space is inlined, not bound: it comes from settings, never from users, and a cached
    # generic plan can only use the space's partial index if it sees the literal.
    space = quote_literal(request.space)
    if request.mode == "vector":
        return _vector_sql(collection, request, params, filters, space), params
    params.update(
        collection=collection.pk,
        candidates=request.candidates if request.mode == "hybrid" else request.k,
        k=request.k,
        config=collection.text_config,
        # Highlighting matches any query word, whatever the search syntax.
        highlight=" or ".join(re.findall(r"\w+", request.text)) or "",
    )
    legs = []
    if request.mode == "hybrid":
        legs.append(_vector_leg(request, params, filters, space))
    legs.append(text_leg(request, params, filters, space))
    if request.mode == "text":
        fused = "SELECT id, score, NULL::bigint AS vrank, trank, score AS tscore FROM tranked"
        similarity = "NULL::float8"
    else:
        # Every fused hit's cosine distance, those of the text leg's alone too (search.relevance).
        similarity, _ = _distance(request, params)
        params["wv"], params["wt"] = (float(w) for w in request.weights)
        params["rrf_k"] = request.rrf_k
        fused = (
            "SELECT coalesce(v.id, t.id) AS id, coalesce(%(wv)s / (%(rrf_k)s + v.vrank), 0)"
            " + coalesce(%(wt)s / (%(rrf_k)s + t.trank), 0) AS score, v.vrank, t.trank, t.score AS tscore"
            " FROM vranked AS v FULL OUTER JOIN tranked AS t ON v.id = t.id"
        )
    headline = (
        "ts_headline(%(config)s::regconfig, c.content,"
        " websearch_to_tsquery(%(config)s::regconfig, %(highlight)s),"
        " 'StartSel=\x02, StopSel=\x03, MaxWords=40, MinWords=15, MaxFragments=2,"
        ' FragmentDelimiter=" … "\')'
    )
    if not request.snippets:
        headline = "''"
    sql = f"""WITH {",".join(legs)},
fused AS ({fused} ORDER BY score DESC, id LIMIT %(k)s)
SELECT f.score, f.vrank, f.trank, {headline}, f.tscore, {similarity}, (SELECT total FROM qidf), {_COLUMNS}
FROM fused AS f JOIN django_rag_chunk AS c ON c.id = f.id
JOIN django_rag_document AS d ON d.id = c.document_id
ORDER BY f.score DESC, f.id"""
    return sql, params


def _vector_sql(
    collection: Collection, request: SearchRequest, params: dict[str, Any], filters: str, space: str
) -> str:
    """Vector mode: the k nearest chunks over the space's index, joined to their documents.

    No CTE and no window (ranks come from the row order, see ``run_search``), so it is cheap to
    plan. The subquery picks the top k chunk rows alone; their documents are joined after, by
    primary key. Over the chunk-document join, PostgreSQL would hash the whole document table
    for a collection or tenant that holds a small share of the space (measured: 0.59 ms against
    0.06 ms for a 1% collection), and an exact sort of the join looks costlier than walking
    the HNSW graph. The collection id and k are inlined (integers, never text): an unfiltered
    search then binds only the query vector, and a server-prepared statement keeps one generic
    plan, the same as the custom one. A bound LIMIT would make PostgreSQL re-plan every call (a
    generic plan must assume 10% of the rows).
    """
    distance, floor = _distance(request, params)
    return (
        # v.* is the distance, then the chunk's columns in CHUNK_FIELDS order.
        f"SELECT v.*, {_DOCUMENT_COLUMNS} FROM ("
        f"SELECT {distance} AS distance, {_CHUNK_COLUMNS} FROM django_rag_chunk AS c"
        f" WHERE c.collection_id = {int(collection.pk)} AND c.space = {space}{filters}{floor}"
        f"{scan_settings(request)}"
        f" ORDER BY distance LIMIT {int(request.k)}) AS v"
        " JOIN django_rag_document AS d ON d.id = v.document_id"
    )


def ef_search(request: SearchRequest) -> int:
    """The HNSW candidate list of a search: ``RAG["EF_SEARCH"]``, raised to the rows its walk must yield."""
    return max(request.ef_search, request.candidates if request.mode == "hybrid" else request.k)


def scan_settings(request: SearchRequest) -> str:
    """The index settings of a search, carried by its own statement (no statement of their own).

    A condition on no column is a one-time filter: PostgreSQL evaluates it, and so its
    ``set_config(..., true)`` calls (SET LOCAL), once, before the scan under it reads its first
    row. pgvector reads ``hnsw.ef_search`` and the iterative scan modes when its walk starts, so
    the walk runs with these values; they last until the statement's transaction ends (the
    implicit one in autocommit mode), as SET LOCAL does. The values are inlined (integers and
    constants, never user input): a prepared statement keeps binding only the query vector.
    """
    return (
        f" AND (SELECT set_config('hnsw.ef_search', '{int(ef_search(request))}', true)"
        " || set_config('hnsw.iterative_scan', 'relaxed_order', true)"
        " || set_config('ivfflat.iterative_scan', 'relaxed_order', true)) IS NOT NULL"
    )


# Only for a search whose ef_search is above RAG["EF_SEARCH"] (the session's, set on connect): the
# planner costs an HNSW walk by ef_search, so it must see the larger value before planning.
