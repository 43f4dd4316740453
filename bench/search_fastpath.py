"""Prototype (bench only): a faster BM25 leg for ``django_rag.stores.pgsearch``.

Not used by django-rag; ``search_latency.py`` measures it next to the real statements.
``bm25_prototype_sql`` rewrites the text leg of a statement from ``pgsearch.build_sql``
(measured at SQL level): document frequencies from a per-term statistics table
(``create_term_stats`` builds it from the postings here; django-rag would keep it in the chunk
triggers like ``django_rag_textstats``) instead of a window ``count(*)`` over every posting of
the query's terms, the IDF and length constants computed once per term instead of per posting,
and hash aggregation (the planner misestimates the per-term posting counts and otherwise sorts
every posting by chunk).
"""

from __future__ import annotations

from typing import Any

import psycopg

from django_rag.stores import pgsearch

__all__ = ["BM25_PROTOTYPE_SETTINGS", "TERM_STATS", "bm25_prototype_sql", "create_term_stats"]

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
