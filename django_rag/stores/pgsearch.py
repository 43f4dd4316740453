"""Vector, BM25 and hybrid (RRF) search on PostgreSQL in one statement per query.

The vector leg is an HNSW scan of the space's partial expression index (``rag_migration``)
with iterative scan on, so filters never starve it of rows. The text leg ranks with BM25 over
PostgreSQL's own lexemes, read from the postings table that triggers keep (see migration
0002): document frequencies come from the postings of the query's terms, collection size and
average length from the per-collection statistics. Hybrid fuses both rankings with Reciprocal
Rank Fusion inside the same statement, and the final SELECT returns chunk and document
columns, so a search is one round trip (plus the per-transaction index settings, sent in the
same pipeline).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from django.db import connections
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from pgvector import Vector
from pgvector.psycopg.vector import register_vector_info

from ..ddl import IndexSpec, quote_literal
from ..models import Chunk, Document
from ..types import Hit
from .base import PREFIX_SEPARATORS, QueryScope
from .pgvector import _raw_connection, _vector_type, escape_like

__all__ = ["SearchRequest", "bm25_expression", "run_search"]

# BM25 parameters (Robertson/Sparck Jones, as Lucene and bm25s default them).
K1 = 1.2
B = 0.75

_CHUNK_FIELDS = [f for f in Chunk._meta.concrete_fields if f.attname not in ("embedding", "search_vector")]
_DOCUMENT_FIELDS = list(Document._meta.concrete_fields)
_MARK_START, _MARK_STOP = "\x02", "\x03"


@dataclass
class SearchRequest:
    """Everything one search needs, already validated by ``django_rag.retrieval``."""

    mode: str
    collection_id: int
    text_config: str
    space: str
    k: int
    text: str = ""
    vector: Sequence[float] | None = None
    scope: QueryScope = field(default_factory=QueryScope)
    candidates: int = 50
    rrf_k: int = 60
    weights: tuple[float, float] = (1.0, 1.0)
    syntax: str = "plain"
    ef_search: int = 40
    snippets: bool = True


def bm25_expression(tf: str, dl: str, df: str, n: str, avgdl: str) -> str:
    """The BM25 term weight as SQL over the given column expressions (shared by every text query)."""
    # float8 literals: bare decimals are numeric in PostgreSQL, and numeric math is ~10x slower.
    k1, b = f"{K1}::float8", f"{B}::float8"
    return (
        f"ln(1 + ({n} - {df} + 0.5::float8) / ({df} + 0.5::float8)) * {tf} * ({k1} + 1) "
        f"/ ({tf} + {k1} * (1 - {b} + {b} * {dl} / {avgdl}))"
    )


def _filters(scope: QueryScope, params: dict[str, Any]) -> str:
    sql = ""
    if scope.tenant is not None:
        params["tenant"] = scope.tenant
        sql += " AND c.tenant = %(tenant)s"
    if scope.tags:
        params["tags"] = list(scope.tags)
        sql += " AND c.tags && %(tags)s::varchar[]"
    if scope.filters:
        params["filters"] = psycopg.types.json.Jsonb(scope.filters)
        sql += " AND c.metadata @> %(filters)s"
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


def _vector_leg(request: SearchRequest, params: dict[str, Any], filters: str, space: str) -> str:
    spec = IndexSpec(request.space, len(request.vector or ()))
    typed = spec.column_type if spec.indexable else "vector"
    params["vector"] = Vector(list(request.vector or ()))
    distance = f"(c.embedding::{typed}) <=> (%(vector)s::vector::{typed})"
    floor = ""
    if request.scope.min_score is not None and request.mode != "text":
        params["max_distance"] = 1.0 - request.scope.min_score
        floor = f" AND {distance} <= %(max_distance)s"
    return f"""
vec AS MATERIALIZED (
    SELECT c.id, {distance} AS distance FROM django_rag_chunk AS c
    WHERE c.collection_id = %(collection)s AND c.space = {space}{filters}{floor}
    ORDER BY distance LIMIT %(candidates)s
),
vranked AS (SELECT id, distance, row_number() OVER (ORDER BY distance, id) AS vrank FROM vec)"""


def _text_leg(request: SearchRequest, params: dict[str, Any], filters: str, space: str) -> str:
    params["text"] = request.text
    params["config"] = request.text_config
    matcher = ""
    if request.syntax == "websearch":
        matcher = " AND c.search_vector @@ websearch_to_tsquery(%(config)s::regconfig, %(text)s)"
        # Excluded words (-word) must not earn BM25 credit either.
        params["positive"] = " ".join(w for w in request.text.split() if not w.startswith("-"))
    elif request.syntax == "phrase":
        matcher = " AND c.search_vector @@ phraseto_tsquery(%(config)s::regconfig, %(text)s)"
    terms_from = "%(positive)s" if request.syntax == "websearch" else "%(text)s"
    floor = ""
    if request.scope.min_score is not None and request.mode == "text":
        params["min_bm25"] = request.scope.min_score
        floor = " AND b.score >= %(min_bm25)s"
    weight = bm25_expression("p.tf", "p.dl", "p.df", "s.n", "s.avgdl")
    # Postings already carry the space: the chunk table is joined only when something filters on it.
    join = " JOIN django_rag_chunk AS c ON c.id = b.id" if filters or matcher else ""
    return f"""
terms AS (
    SELECT DISTINCT u.lexeme AS term FROM unnest(to_tsvector(%(config)s::regconfig, {terms_from})) AS u
),
stats AS (
    SELECT greatest(sum(chunks), 1)::float8 AS n,
           greatest(sum(length), 1)::float8 / greatest(sum(chunks), 1)::float8 AS avgdl
    FROM django_rag_textstats WHERE collection_id = %(collection)s AND space = {space}
),
post AS (
    SELECT p.chunk_id, p.tf::float8 AS tf, p.dl::float8 AS dl,
           count(*) OVER (PARTITION BY p.term)::float8 AS df
    FROM django_rag_posting AS p
    WHERE p.collection_id = %(collection)s AND p.space = {space}
      AND p.term = ANY (ARRAY(SELECT term FROM terms))
),
bm25 AS (
    SELECT p.chunk_id AS id, sum({weight}) AS score FROM post AS p CROSS JOIN stats AS s GROUP BY p.chunk_id
),
txt AS MATERIALIZED (
    SELECT b.id, b.score FROM bm25 AS b{join}
    WHERE true{filters}{matcher}{floor}
    ORDER BY b.score DESC, b.id LIMIT %(candidates)s
),
tranked AS (SELECT id, score, row_number() OVER (ORDER BY score DESC, id) AS trank FROM txt)"""


def build_sql(request: SearchRequest) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {
        "collection": request.collection_id,
        "candidates": request.candidates if request.mode == "hybrid" else request.k,
        "k": request.k,
        "config": request.text_config,
        # Highlighting matches any query word, whatever the search syntax.
        "highlight": " or ".join(re.findall(r"\w+", request.text)) or "",
    }
    filters = _filters(request.scope, params)
    # The space is inlined, not bound: it comes from settings, never from users, and a cached
    # generic plan can only use the space's partial index if it sees the literal.
    space = quote_literal(request.space)
    legs = []
    if request.mode in ("vector", "hybrid"):
        legs.append(_vector_leg(request, params, filters, space))
    if request.mode in ("text", "hybrid"):
        legs.append(_text_leg(request, params, filters, space))
    if request.mode == "vector":
        fused = "SELECT id, 1 - distance AS score, vrank, NULL::bigint AS trank FROM vranked"
    elif request.mode == "text":
        fused = "SELECT id, score, NULL::bigint AS vrank, trank FROM tranked"
    else:
        params["wv"], params["wt"] = (float(w) for w in request.weights)
        params["rrf_k"] = request.rrf_k
        fused = (
            "SELECT coalesce(v.id, t.id) AS id, coalesce(%(wv)s / (%(rrf_k)s + v.vrank), 0)"
            " + coalesce(%(wt)s / (%(rrf_k)s + t.trank), 0) AS score, v.vrank, t.trank"
            " FROM vranked AS v FULL OUTER JOIN tranked AS t ON v.id = t.id"
        )
    columns = ", ".join(
        [f'c."{f.column}"' for f in _CHUNK_FIELDS] + [f'd."{f.column}"' for f in _DOCUMENT_FIELDS]
    )
    headline = (
        "ts_headline(%(config)s::regconfig, c.content,"
        " websearch_to_tsquery(%(config)s::regconfig, %(highlight)s),"
        " 'StartSel=\x02, StopSel=\x03, MaxWords=40, MinWords=15, MaxFragments=2,"
        ' FragmentDelimiter=" … "\')'
    )
    if not request.snippets:
        headline = "''"
    elif request.mode == "vector":
        # Nothing lexical to highlight: the snippet is the chunk's opening, cut in Python (cheaper
        # than parsing every returned chunk with ts_headline).
        headline = "NULL::text"
    sql = f"""WITH {",".join(legs)},
fused AS ({fused} ORDER BY score DESC, id LIMIT %(k)s)
SELECT f.score, f.vrank, f.trank, {headline}, {columns}
FROM fused AS f JOIN django_rag_chunk AS c ON c.id = f.id
JOIN django_rag_document AS d ON d.id = c.document_id
ORDER BY f.score DESC, f.id"""
    return sql, params


def run_search(request: SearchRequest, using: str) -> list[Hit]:
    """Run one search; SET LOCAL-scoped index settings and the query travel in one pipeline."""
    sql, params = build_sql(request)
    raw = _raw_connection(using)
    autocommit = connections[using].get_autocommit()
    settings = (
        "SELECT set_config('hnsw.ef_search', %(ef)s, true),"
        " set_config('hnsw.iterative_scan', 'relaxed_order', true),"
        " set_config('ivfflat.iterative_scan', 'relaxed_order', true)"
    )
    with psycopg.Cursor(raw) as setup, psycopg.Cursor(raw) as cur:
        register_vector_info(cur, _vector_type(raw))
        try:
            with raw.pipeline():
                if autocommit:
                    setup.execute("BEGIN")
                setup.execute(
                    settings, {"ef": str(max(request.ef_search, params["candidates"]))}, prepare=False
                )
                # Prepared after a few runs (psycopg's prepare_threshold, settable in DATABASES
                # OPTIONS): planning this statement costs more than running it on small collections.
                cur.execute(sql, params)
                if autocommit:
                    setup.execute("COMMIT")
            rows = cur.fetchall()
        except psycopg.Error:
            if autocommit and raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                raw.execute("ROLLBACK")  # our own BEGIN; inside the caller's atomic block Django rolls back
            raise
    return [_hit(row, using) for row in rows]


_converters: dict[tuple[str, str], list[tuple[Any, list[Any]]]] = {}


def _field_converters(model: type[Any], fields: list[Any], using: str) -> list[tuple[Any, list[Any]]]:
    """Each field's column and DB converters, looked up once per model and database alias."""
    key = (model._meta.label, using)
    if key not in _converters:
        connection = connections[using]
        pairs = []
        for field_ in fields:
            col = field_.get_col(model._meta.db_table)
            pairs.append((col, connection.ops.get_db_converters(col) + field_.get_db_converters(connection)))
        _converters[key] = pairs
    return _converters[key]


def _model(model: type[Any], fields: list[Any], values: Sequence[Any], using: str) -> Any:
    """Build an instance from raw column values, through each field's DB converters as the ORM does."""
    connection = connections[using]
    converted = []
    for (col, converters), value in zip(_field_converters(model, fields, using), values, strict=True):
        for converter in converters:
            value = converter(value, col, connection)
        converted.append(value)
    return model.from_db(using, [f.attname for f in fields], converted)


def _hit(row: tuple[Any, ...], using: str) -> Hit:
    score, vrank, trank, headline = row[:4]
    split = 4 + len(_CHUNK_FIELDS)
    chunk = _model(Chunk, _CHUNK_FIELDS, row[4:split], using)
    document = _model(Document, _DOCUMENT_FIELDS, row[split:], using)
    chunk._state.fields_cache["document"] = document
    return Hit(
        chunk=chunk,
        document=document,
        score=float(score),
        vector_rank=vrank,
        text_rank=trank,
        snippet=_opening(chunk.content) if headline is None else _snippet(headline),
        page=chunk.page,
        source_id=document.source_id,
    )


def _snippet(headline: str) -> SafeString:
    """HTML-escape the chunk text, then turn ts_headline's markers into <mark>: safe to render."""
    text = escape(headline.replace("\n", " "))
    return mark_safe(text.replace(_MARK_START, "<mark>").replace(_MARK_STOP, "</mark>"))


def _opening(content: str, words: int = 40) -> SafeString:
    """The first ``words`` words of a chunk, HTML-escaped: the snippet of a vector hit."""
    parts = content.split()
    text = " ".join(parts[:words]) + (" …" if len(parts) > words else "")
    return mark_safe(escape(text))
