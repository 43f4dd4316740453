"""Helpers for tests that look at query plans: the space's ANN index, EXPLAIN of a search."""

from __future__ import annotations

import psycopg
from django.db import connection

import django_rag as rag
from django_rag.ddl import IndexSpec
from django_rag.stores.adapters import raw_connection, register_packed_vectors, vector_type
from django_rag.stores.base import QueryScope, SearchRequest
from django_rag.stores.pgsearch import build_sql


def build_space_index(kb: rag.Collection, *, analyze: str = "") -> str:
    """Create the HNSW index of ``kb``'s space (after the bulk load: faster), ANALYZE, return its name.

    ``analyze`` names one table to analyze; by default the whole database is.
    """
    spec = IndexSpec(kb.space, 64)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # deferred FK checks would block CREATE INDEX
        cursor.execute(spec.create_sql())
        cursor.execute(f"ANALYZE {analyze}")
    return spec.name


def explain(kb: rag.Collection, mode: str = "hybrid", generic: bool = False, **scope: object) -> str:
    """The plan of ``kb``'s search statement for "subject 7"; ``generic``: the plan a prepared one runs."""
    sql, params = build_sql(
        kb,
        SearchRequest(
            mode=mode,
            space=kb.space,
            k=10,
            text="subject 7",
            vector=kb.get_embedder().embed_query("subject 7"),
            scope=QueryScope(**scope),
        ),
    )
    raw = raw_connection("default")
    with psycopg.Cursor(raw) as cur:
        register_packed_vectors(cur, vector_type(raw))
        if generic:
            # What a prepared statement runs after psycopg's prepare_threshold: a generic plan.
            cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cur.execute("EXPLAIN " + sql, params, prepare=generic)
        return "\n".join(row[0] for row in cur.fetchall())
