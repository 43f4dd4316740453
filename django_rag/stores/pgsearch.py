"""Vector, BM25 and hybrid (RRF) search on PostgreSQL: one statement per query, one round trip.

A search is one statement (``pgstatement.build_sql``; its text leg in ``pgtext``) whose rows are
the hits, chunk and document columns together (``pghits`` builds the instances). Its index
settings (``hnsw.ef_search``, iterative scan) travel inside the statement, so the common search
is what raw psycopg's one ``execute`` is on the wire: one write, one wait for the rows. Only a
search whose ef_search is above ``RAG["EF_SEARCH"]`` sends a ``set_config`` ahead of it, in the
same pipeline, for the planner.

Prepared statements: Django connects with psycopg's ``prepare_threshold=None``, which turns
them off. With ``DATABASES[...]["OPTIONS"] = {"prepare_threshold": 5}`` (and a server or
pooler that keeps prepared statements) the unfiltered vector statement is server-prepared on
first use and skips parsing and planning afterwards.
"""

from __future__ import annotations

import weakref
from typing import Any

import psycopg

from ..models import Collection
from ..types import Hit
from .adapters import PackedVector, packed_dumper, raw_connection
from .base import SearchRequest
from .pghits import hits_from_rows
from .pgstatement import build_sql, ef_search, scan_settings

__all__ = ["build_sql", "ef_search", "fetch_rows", "run_search", "scan_settings"]


def _prepare(request: SearchRequest) -> bool | None:
    """Whether to server-prepare the statement (when the connection allows it, see ``fetch_rows``).

    The unfiltered vector statement is prepared on first use: its one plan fits every query
    vector. A filtered one is planned for its values on every call: a 1% tenant is best served
    exactly from the scope btree, a large one by the HNSW walk, and a generic plan cannot tell
    them apart. Text and hybrid statements follow the connection's ``prepare_threshold``; their
    bound LIMITs keep them on custom plans.
    """
    if request.mode != "vector":
        return None
    scope = request.scope
    return (
        scope.tenant is None
        and scope.tags is None
        and not scope.filters
        and not scope.source_prefix
        and scope.min_score is None
    )


_PLANNER_EF = "SELECT set_config('hnsw.ef_search', %(ef)s, true)"


_packing: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()


def fetch_rows(collection: Collection, request: SearchRequest, using: str) -> list[tuple[Any, ...]]:
    """The result rows of one search: one statement, sent in one write, its rows read in one trip.

    The index settings travel inside the statement (``scan_settings``). A search whose
    ``ef_search`` is above ``RAG["EF_SEARCH"]`` (k or hybrid candidates above it) sends a
    ``set_config(..., true)`` ahead of it in the same pipeline, so the planner costs the walk
    with the ef it will run; no BEGIN/COMMIT around them: the statements of a pipeline share one
    transaction up to its Sync (an implicit one in autocommit mode, else the caller's). Both
    leave in the first flight; psycopg sends the pipeline's Sync when the block ends, which can
    be after it has read a first buffer of a large result (a second, short wait).
    """
    sql, params = build_sql(collection, request)
    raw = raw_connection(using)
    if raw not in _packing:
        # On the connection, once: PackedVector is django-rag's own type, so no one else's
        # adaptation changes, and no cursor pays for a copy of the adapters map. Its type is left
        # unknown (oid 0): the statement casts it (``$1::vector``), so the server reads it as a
        # vector, and a new connection needs no catalog lookup (a round trip) before its first search.
        raw.adapters.register_dumper(PackedVector, packed_dumper(0))
        _packing.add(raw)
    # psycopg ignores prepare=True on connections with prepare_threshold=None (Django's default;
    # set it in DATABASES OPTIONS to use server-prepared statements).
    prepare = _prepare(request)
    with psycopg.Cursor(raw) as cur:
        if request.mode != "text" and ef_search(request) > request.ef_search:
            with psycopg.Cursor(raw) as setup, raw.pipeline():
                setup.execute(_PLANNER_EF, {"ef": str(ef_search(request))}, prepare=True)
                cur.execute(sql, params, prepare=prepare)
        else:
            cur.execute(sql, params, prepare=prepare)
        return cur.fetchall()


def run_search(collection: Collection, request: SearchRequest, using: str) -> list[Hit]:
    """Run one search; its hits carry Chunk and Document instances built by ``Model.from_db``."""
    rows = fetch_rows(collection, request, using)
    return hits_from_rows(rows, request, using)
