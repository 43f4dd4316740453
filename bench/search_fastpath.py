"""Prototype (bench only): ``django_rag.stores.pgsearch.run_search`` with two costs removed.

Not used by django-rag; ``search_latency.py`` measures it next to the real ``kb.search`` to size
the changes proposed for ``django_rag/stores/pgsearch.py``:

1. No ``ts_headline`` when the query has no text (a vector query): the statement asks for
   ``''`` and the snippet is the chunk's first ``SNIPPET_WORDS`` words, HTML-escaped, in
   Python. Today PostgreSQL parses every returned chunk with an empty tsquery, which only
   yields the leading words anyway.
2. Hits are built with converters resolved once per (model, database alias): today
   ``_model`` calls ``get_col`` and ``get_db_converters`` for ~30 fields x 2 models x k rows on
   every search.

``installed()`` swaps the prototype in for the duration of a ``with`` block.

``bm25_prototype_sql`` rewrites the text leg of a statement from ``pgsearch.build_sql``
(measured at SQL level): document frequencies from a per-term statistics table
(``create_term_stats`` builds it from the postings here; django-rag would keep it in the chunk
triggers like ``django_rag_textstats``) instead of a window ``count(*)`` over every posting of
the query's terms, the IDF and length constants computed once per term instead of per posting,
and hash aggregation (the planner misestimates the per-term posting counts and otherwise sorts
every posting by chunk).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connections
from django.utils.html import escape
from django.utils.safestring import mark_safe
from pgvector.psycopg.vector import register_vector_info

from django_rag.models import Chunk, Document
from django_rag.stores import pgsearch
from django_rag.stores.pgvector import _raw_connection, _vector_type
from django_rag.types import Hit

__all__ = ["installed", "run_search_fast"]

SNIPPET_WORDS = 40
Converters = list[tuple[list[Callable[..., Any]], Any]]
_converters: dict[tuple[type[Any], str], Converters] = {}
_CHUNK_FIELDS = pgsearch._CHUNK_FIELDS
_DOCUMENT_FIELDS = pgsearch._DOCUMENT_FIELDS
_CHUNK_NAMES = [f.attname for f in _CHUNK_FIELDS]
_DOCUMENT_NAMES = [f.attname for f in _DOCUMENT_FIELDS]
_SETTINGS = (
    "SELECT set_config('hnsw.ef_search', %(ef)s, true),"
    " set_config('hnsw.iterative_scan', 'relaxed_order', true),"
    " set_config('ivfflat.iterative_scan', 'relaxed_order', true)"
)


def run_search_fast(request: pgsearch.SearchRequest, using: str) -> list[Hit]:
    """``pgsearch.run_search`` with the two changes above; same statement and pipeline otherwise."""
    python_snippets = request.snippets and not request.text
    if python_snippets:
        request.snippets = False
    sql, params = pgsearch.build_sql(request)
    raw = _raw_connection(using)
    autocommit = connections[using].get_autocommit()
    with psycopg.Cursor(raw) as setup, psycopg.Cursor(raw) as cur:
        register_vector_info(cur, _vector_type(raw))
        try:
            with raw.pipeline():
                if autocommit:
                    setup.execute("BEGIN")
                ef = str(max(request.ef_search, params["candidates"]))
                setup.execute(_SETTINGS, {"ef": ef}, prepare=False)
                cur.execute(sql, params)
                if autocommit:
                    setup.execute("COMMIT")
            rows = cur.fetchall()
        except psycopg.Error:
            if autocommit and raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                raw.execute("ROLLBACK")
            raise
    return [_hit(row, using, python_snippets) for row in rows]


def _resolved(model: type[Any], fields: Sequence[Any], using: str) -> Converters:
    key = (model, using)
    found = _converters.get(key)
    if found is None:
        connection = connections[using]
        found = []
        for field in fields:
            col = field.get_col(model._meta.db_table)
            found.append((connection.ops.get_db_converters(col) + field.get_db_converters(connection), col))
        _converters[key] = found
    return found


def _model(
    model: type[Any], fields: Sequence[Any], names: list[str], values: Sequence[Any], using: str
) -> Any:
    connection = connections[using]
    converted = []
    for (converters, col), value in zip(_resolved(model, fields, using), values, strict=True):
        for converter in converters:
            value = converter(value, col, connection)
        converted.append(value)
    return model.from_db(using, names, converted)


def _hit(row: tuple[Any, ...], using: str, python_snippet: bool) -> Hit:
    score, vrank, trank, headline = row[:4]
    split = 4 + len(_CHUNK_FIELDS)
    chunk = _model(Chunk, _CHUNK_FIELDS, _CHUNK_NAMES, row[4:split], using)
    document = _model(Document, _DOCUMENT_FIELDS, _DOCUMENT_NAMES, row[split:], using)
    chunk._state.fields_cache["document"] = document
    if python_snippet:
        snippet = mark_safe(escape(" ".join(chunk.content.split()[:SNIPPET_WORDS])))
    else:
        snippet = pgsearch._snippet(headline)
    return Hit(
        chunk=chunk, document=document, score=float(score), vector_rank=vrank, text_rank=trank,
        snippet=snippet, page=chunk.page, source_id=document.source_id,
    )


@contextmanager
def installed() -> Iterator[None]:
    """Route ``kb.search`` through the prototype (the store imports ``run_search`` per call)."""
    original = pgsearch.run_search
    pgsearch.run_search = run_search_fast
    try:
        yield
    finally:
        pgsearch.run_search = original


TERM_STATS = "bench_termstats"
_BM25_LEG = """df AS (
    SELECT t.term, t.df::float8 AS df FROM {table} AS t
    WHERE t.collection_id = %(collection)s AND t.space = {space}
      AND t.term = ANY (ARRAY(SELECT term FROM terms))
),
idf AS (
    SELECT d.term, ln(1 + (s.n - d.df + 0.5::float8) / (d.df + 0.5::float8)) * ({k1}::float8 + 1) AS w,
           {k1}::float8 * (1 - {b}::float8) AS c1, {k1}::float8 * {b}::float8 / s.avgdl AS c2
    FROM df AS d CROSS JOIN stats AS s
),
bm25 AS (
    SELECT p.chunk_id AS id, sum(i.w * p.tf / (p.tf + i.c1 + i.c2 * p.dl)) AS score
    FROM idf AS i JOIN django_rag_posting AS p ON p.term = i.term
    WHERE p.collection_id = %(collection)s AND p.space = {space}
      AND p.term = ANY (ARRAY(SELECT term FROM df))
    GROUP BY p.chunk_id
),
"""


def create_term_stats(conn: psycopg.Connection[Any]) -> float:
    """The bench-only document-frequency table the prototype reads; returns seconds to build."""
    import time

    started = time.perf_counter()
    conn.execute(f"DROP TABLE IF EXISTS {TERM_STATS}")
    conn.execute(
        f"CREATE TABLE {TERM_STATS} AS SELECT collection_id, space, term, count(*)::int8 AS df "
        "FROM django_rag_posting GROUP BY collection_id, space, term"
    )
    conn.execute(f"CREATE UNIQUE INDEX ON {TERM_STATS} (collection_id, space, term) INCLUDE (df)")
    conn.execute(f"VACUUM ANALYZE {TERM_STATS}")
    return time.perf_counter() - started


def bm25_prototype_sql(sql: str, space: str) -> str:
    """``sql`` (a text or hybrid statement of ``pgsearch.build_sql``) with the prototype text leg."""
    from django_rag.ddl import quote_literal

    start, end = sql.index("post AS ("), sql.index("txt AS MATERIALIZED")
    leg = _BM25_LEG.format(table=TERM_STATS, space=quote_literal(space), k1=pgsearch.K1, b=pgsearch.B)
    return sql[:start] + leg + sql[end:]


# Sent with the other per-statement settings (SET LOCAL): hash aggregation over the postings.
BM25_PROTOTYPE_SETTINGS = {"enable_sort": "off"}
