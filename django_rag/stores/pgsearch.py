"""Vector, BM25 and hybrid (RRF) search on PostgreSQL in one statement per query.

The vector leg is an HNSW scan of the space's partial expression index (``rag_migration``)
with iterative scan on, so filters never starve it of rows. The text leg ranks with BM25 over
PostgreSQL's own lexemes, read from the posting blocks that triggers keep (migration 0008):
document frequencies, collection size and average length come from the statistics tables the
same triggers keep. By default it reads only the rarest terms' postings and scores a pool of
chunks exactly (``django_rag.bm25``), so its cost stays flat as the collection grows. Hybrid
fuses both rankings with Reciprocal Rank Fusion inside the same statement, and the final
SELECT returns chunk and document columns, so a search is one round trip (the per-transaction
index settings travel in the same pipeline). A vector-only search is one flat SELECT, as one
would write it by hand.

Prepared statements: Django connects with psycopg's ``prepare_threshold=None``, which turns
them off. With ``DATABASES[...]["OPTIONS"] = {"prepare_threshold": 5}`` (and a server or
pooler that keeps prepared statements) the unfiltered vector statement is server-prepared on
first use and skips parsing and planning afterwards.
"""

from __future__ import annotations

import functools
import html
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import psycopg
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DEFERRED, Field, Model
from django.utils.safestring import SafeString
from psycopg.types.json import Jsonb

from ..bm25 import Bm25Options, bm25_options
from ..models import Chunk, Collection, Document
from ..sql import (
    K1,
    PREFIX_SEPARATORS,
    bm25_expression,
    bm25_factors,
    cut_to_lexemes,
    escape_like,
    quote_literal,
    vector_cast_type,
)
from ..types import Hit
from .adapters import PackedVector, pack, packed_dumper, raw_connection, vector_type
from .base import QueryScope, SearchRequest

__all__ = ["build_sql", "fetch_rows", "run_search"]

_CHUNK_FIELDS = [f for f in Chunk._meta.concrete_fields if f.attname not in ("embedding", "search_vector")]
_DOCUMENT_FIELDS = list(Document._meta.concrete_fields)
_CHUNK_COLUMNS = ", ".join(f'c."{f.column}"' for f in _CHUNK_FIELDS)
_DOCUMENT_COLUMNS = ", ".join(f'd."{f.column}"' for f in _DOCUMENT_FIELDS)
_COLUMNS = f"{_CHUNK_COLUMNS}, {_DOCUMENT_COLUMNS}"
# Row layouts: (distance, chunk..., document...) in vector mode, else (score, vector rank,
# text rank, headline, BM25 score, cosine distance, query idf, chunk..., document...).
_VECTOR_PREFIX, _PREFIX = 1, 7
_MARK_START, _MARK_STOP = "\x02", "\x03"


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


def _text_leg(request: SearchRequest, params: dict[str, Any], filters: str, space: str) -> str:
    params["text"] = request.text
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
    # Postings already carry the space: the chunk table is joined only when something filters on it.
    join = " JOIN django_rag_chunk AS c ON c.id = b.id" if filters or matcher else ""
    options = bm25_options()
    own = options.tenant_statistics and request.scope.tenant is not None
    head = f"""
terms AS (
    SELECT DISTINCT u.lexeme AS term FROM unnest(to_tsvector(%(config)s::regconfig, {terms_from})) AS u
),
{_tenant_statistics(space) if own else _statistics(space)},"""
    return _bounded_leg(request, params, options, head, join, filters, matcher, floor, space)


def _statistics(space: str) -> str:
    """The collection's chunk count, average length and term frequencies, as the triggers keep them."""
    return f"""stats AS (
    SELECT greatest(sum(chunks), 1)::float8 AS n,
           greatest(sum(length), 1)::float8 / greatest(sum(chunks), 1)::float8 AS avgdl
    FROM django_rag_textstats WHERE collection_id = %(collection)s AND space = {space}
),
df AS (
    -- Index-only: the sizes of the term's blocks are in the key index.
    SELECT p.term, sum(p.n)::float8 AS df FROM django_rag_postblock AS p
    WHERE p.collection_id = %(collection)s AND p.space = {space}
      AND p.term = ANY (ARRAY(SELECT term FROM terms))
    GROUP BY p.term
)"""


def _tenant_statistics(space: str) -> str:
    """``RAG["BM25"]["TENANT_STATISTICS"]``: the same figures counted over the tenant's chunks alone,
    as the triggers count them (a chunk's length is its lexemes' positions, ``tf`` at least 1)."""
    return f"""stats AS (
    SELECT greatest(count(*), 1)::float8 AS n,
           greatest(sum(django_rag_lexeme_count(c.search_vector)), 1)::float8
               / greatest(count(*), 1)::float8 AS avgdl
    FROM django_rag_chunk AS c
    WHERE c.collection_id = %(collection)s AND c.space = {space} AND c.tenant = %(tenant)s
      AND c.search_vector IS NOT NULL
),
df AS (
    -- The term's postings whose chunk is the tenant's: every posting of the term is read.
    SELECT p.term, count(*)::float8 AS df FROM django_rag_postblock AS p
    CROSS JOIN LATERAL unnest(p.chunks) AS e(id)
    JOIN django_rag_chunk AS c ON c.id = e.id AND c.tenant = %(tenant)s
    WHERE p.collection_id = %(collection)s AND p.space = {space}
      AND p.term = ANY (ARRAY(SELECT term FROM terms))
    GROUP BY p.term
)"""


def _bounded_leg(
    request: SearchRequest,
    params: dict[str, Any],
    options: Bm25Options,
    head: str,
    join: str,
    filters: str,
    matcher: str,
    floor: str,
    space: str,
) -> str:
    """The rest of the text leg after its statistics: per-term factors, then the exact or the
    bounded ranking (see ``django_rag.bm25``)."""
    w, c1, c2 = bm25_factors("d.df", "s.n", "s.avgdl")
    query_w = bm25_factors("coalesce(d.df, 0::float8)", "s.n", "s.avgdl")[0]
    head += f"""
idf AS MATERIALIZED (
    -- The per-term factors once per term, not once per posting.
    SELECT d.term, d.df, {w} AS w, {c1} AS c1, {c2} AS c2 FROM df AS d CROSS JOIN stats AS s
),
qidf AS (
    -- What a chunk holding every query term once would score (at average length): the scale of
    -- the text leg's relevance (search.relevance). Terms no chunk holds count too, so a chunk
    -- that matches one word of a five-word query never looks like a full match.
    SELECT sum({query_w}) / ({K1}::float8 + 1) AS total
    FROM terms AS t LEFT JOIN df AS d ON d.term = t.term CROSS JOIN stats AS s
),"""
    exhaustive = f"""(
    SELECT b.id, b.score FROM ({_postings_sum("idf", space)}) AS b{join}
    WHERE true{filters}{matcher}{floor}
    ORDER BY b.score DESC, b.id LIMIT %(candidates)s
)"""
    tail = "tranked AS (SELECT id, score, row_number() OVER (ORDER BY score DESC, id) AS trank FROM txt)"
    if options.mode == "exact":
        return f"{head}\ntxt AS MATERIALIZED {exhaustive},\n{tail}"
    params["budget"] = options.budget
    params["pool"] = max(options.pool, params["candidates"])
    weight = bm25_expression("coalesce(array_length(u.positions, 1), 1)", "p.dl", "i.w", "i.c1", "i.c2")
    bounded = f"""
essential AS MATERIALIZED (
    -- The rarest terms whose postings fit the budget together, and as many more as it takes for
    -- the pool to fill (rare terms in only a few chunks): read in full.
    SELECT x.term, x.w, x.c1, x.c2 FROM (
        SELECT i.*, sum(i.df) OVER (ORDER BY i.df, i.term ROWS UNBOUNDED PRECEDING) AS upto
        FROM idf AS i
    ) AS x WHERE x.upto <= %(budget)s OR x.upto - x.df < %(pool)s
),
whole AS MATERIALIZED (
    -- Every term is read anyway (a small collection, a query of rare terms): the exhaustive sum
    -- is the same work without the pool's rescoring.
    SELECT (SELECT count(*) FROM essential) = (SELECT count(*) FROM idf) AS yes
),
pool AS MATERIALIZED (
    -- The best chunks on the rare terms alone, with their lengths (every posting carries it).
    SELECT b.id, b.dl FROM ({_postings_sum("essential", space, with_length=True)}) AS b
    WHERE NOT (SELECT yes FROM whole)
    ORDER BY b.score DESC, b.id LIMIT %(pool)s
),
rescored AS (
    -- Every query term, from the chunk's own text vector, in the exhaustive leg's term order:
    -- the same bits as the exhaustive sum for the same chunk. The vector is first cut to the
    -- query's lexemes, and one join serves the whole pool (the terms are hashed once).
    SELECT p.id, sum({weight} ORDER BY i.term COLLATE "C") AS score
    FROM pool AS p JOIN django_rag_chunk AS c ON c.id = p.id
    CROSS JOIN LATERAL unnest({cut_to_lexemes("c.search_vector", "(SELECT array_agg(term) FROM idf)")}) AS u
    JOIN idf AS i ON i.term = u.lexeme
    WHERE true{filters}{matcher}
    GROUP BY p.id
),
found AS MATERIALIZED (
    SELECT b.id, b.score FROM rescored AS b WHERE true{floor}
    ORDER BY b.score DESC, b.id LIMIT %(candidates)s
),
short AS MATERIALIZED (
    -- Every term read anyway, or too few hits while some terms were not read (filters, or rare
    -- terms in fewer chunks than asked for): the exhaustive leg answers instead.
    SELECT (SELECT yes FROM whole) OR (SELECT count(*) FROM found) < %(candidates)s AS fallback
),
txt AS MATERIALIZED (
    SELECT id, score FROM found WHERE NOT (SELECT fallback FROM short)
    UNION ALL
    SELECT id, score FROM {exhaustive} AS e WHERE (SELECT fallback FROM short)
),"""
    return f"{head}{bounded}\n{tail}"


def _postings_sum(terms: str, space: str, *, with_length: bool = False) -> str:
    """Per chunk, the BM25 sum over the postings of the terms in CTE ``terms`` (term, w, c1, c2)."""
    weight = bm25_expression("e.tf", "e.dl", "i.w", "i.c1", "i.c2")
    if with_length:
        # The pool's order only: no need for the bit-exact term order of the final scores.
        columns = f"sum({weight}) AS score, min(e.dl) AS dl"
    else:
        # In term order (bytewise: the cheapest total order): identical chunks get bit-identical
        # sums, so ties break by id whatever order the plan meets their postings in.
        columns = f'sum({weight} ORDER BY i.term COLLATE "C") AS score'
    return f"""
        SELECT e.id, {columns}
        FROM {terms} AS i JOIN django_rag_postblock AS p
          ON p.collection_id = %(collection)s AND p.space = {space} AND p.term = i.term
        CROSS JOIN LATERAL unnest(p.chunks, p.tfs, p.dls) AS e(id, tf, dl)
        GROUP BY e.id"""


def build_sql(collection: Collection, request: SearchRequest) -> tuple[str, dict[str, Any]]:
    """The statement of one search and its parameters.

    Vector mode is one flat SELECT over the space's index (see ``_vector_sql``); text and
    hybrid rank in CTEs. Rows start with ``_VECTOR_PREFIX`` (vector) or ``_PREFIX`` (text,
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
    legs.append(_text_leg(request, params, filters, space))
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
        # v.* is the distance, then the chunk's columns in _CHUNK_FIELDS order.
        f"SELECT v.*, {_DOCUMENT_COLUMNS} FROM ("
        f"SELECT {distance} AS distance, {_CHUNK_COLUMNS} FROM django_rag_chunk AS c"
        f" WHERE c.collection_id = {int(collection.pk)} AND c.space = {space}{filters}{floor}"
        f"{scan_settings(request)}"
        f" ORDER BY distance LIMIT {int(request.k)}) AS v"
        " JOIN django_rag_document AS d ON d.id = v.document_id"
    )


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
_PLANNER_EF = "SELECT set_config('hnsw.ef_search', %(ef)s, true)"


_packing: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()


def fetch_rows(collection: Collection, request: SearchRequest, using: str) -> list[tuple[Any, ...]]:
    """The result rows of one search: one statement, sent in one write, its rows read in one trip.

    The index settings travel inside the statement (``scan_settings``). A search whose
    ``ef_search`` is above ``RAG["EF_SEARCH"]`` (k or hybrid candidates above it) sends a
    ``set_config(..., true)`` ahead of it in the same pipeline, so the planner costs the walk
    with the ef it will run; no BEGIN/COMMIT around them: the statements of a pipeline share one
    transaction up to its Sync (an implicit one in autocommit mode, else the caller's).
    """
    sql, params = build_sql(collection, request)
    raw = raw_connection(using)
    if raw not in _packing:
        # On the connection, once: PackedVector is django-rag's own type, so no one else's
        # adaptation changes, and no cursor pays for a copy of the adapters map.
        raw.adapters.register_dumper(PackedVector, packed_dumper(vector_type(raw).oid))
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
    if request.mode == "vector":
        # relaxed_order may return neighbours slightly out of order; ties go to the lower id.
        rows.sort(key=_DISTANCE_ID)
        prefix = _VECTOR_PREFIX
    else:
        prefix = _PREFIX
    chunks, documents = _builders(using, prefix)
    connection = connections[using]
    document_at = prefix + _CHUNK_DOCUMENT_ID
    # Hits of one document share its instance (as prefetch_related would): built once per search.
    by_document: dict[Any, Document] = {}
    hits = []
    for rank, row in enumerate(rows, 1):
        chunk = chunks(row, connection)
        document = by_document.get(row[document_at])
        if document is None:
            document = by_document[row[document_at]] = documents(row, connection)
        chunk.document = document  # the foreign key's own cache: no query when it is read
        if prefix == _VECTOR_PREFIX:
            score, vrank, trank = 1.0 - row[0], rank, None
            similarity, text_match = score, None
            # None: the chunk's opening, made if the snippet is read (see types.Hit).
            snippet: str | None = None if request.snippets else SafeString("")
        else:
            score, vrank, trank = float(row[0]), row[1], row[2]
            snippet = _snippet(row[3])
            similarity = None if row[5] is None else 1.0 - row[5]
            text_match = _text_match(row[4], row[6])
        hits.append(
            Hit(
                chunk=chunk,
                document=document,
                score=score,
                vector_rank=vrank,
                text_rank=trank,
                snippet=snippet,  # type: ignore[arg-type]  # None: made on first read (types.Hit)
                page=chunk.page,
                source_id=document.source_id,
                similarity=similarity,
                text_match=text_match,
            )
        )
    return hits


def _text_match(bm25: float | None, total: float | None) -> float:
    """A chunk's BM25 score as a share of the query's ``qidf`` total, at most 1 (0: no term)."""
    if not bm25 or not total:
        return 0.0
    return min(1.0, float(bm25) / float(total))


_CHUNK_DOCUMENT_ID = [f.attname for f in _CHUNK_FIELDS].index("document_id")
_DISTANCE_ID = itemgetter(0, _VECTOR_PREFIX + [f.attname for f in _CHUNK_FIELDS].index("id"))


@dataclass(frozen=True)
class _Builder:
    """Builds one model's instances from its columns of a result row, as a QuerySet would:
    each value through its field's database converters, then ``Model.from_db``."""

    model: type[Model]
    using: str
    names: tuple[str, ...]  # every concrete field, in order: from_db then needs no lookup of its own
    # Row positions of the concrete fields, -1 for a field the statement leaves out (DEFERRED).
    values: Callable[[tuple[Any, ...]], tuple[Any, ...]]
    # (position among the concrete fields, converters, column) of the fields that have any (JSON...).
    converters: tuple[tuple[int, tuple[Callable[..., Any], ...], Any], ...]

    def __call__(self, row: tuple[Any, ...], connection: BaseDatabaseWrapper) -> Any:
        values = list(self.values((*row, DEFERRED)))
        for position, converters, expression in self.converters:
            value = values[position]
            for converter in converters:
                value = converter(value, expression, connection)
            values[position] = value
        return self.model.from_db(self.using, self.names, values)


def _builder(model: type[Model], fields: list[Field[Any, Any]], start: int, using: str) -> _Builder:
    connection = connections[using]
    at = {field.attname: start + offset for offset, field in enumerate(fields)}
    concrete = list(model._meta.concrete_fields)
    converters = []
    for position, field in enumerate(concrete):
        if field.attname not in at:
            continue
        expression = field.get_col(model._meta.db_table)
        found = tuple(connection.ops.get_db_converters(expression) + field.get_db_converters(connection))
        if found:
            converters.append((position, found, expression))
    return _Builder(
        model,
        using,
        tuple(f.attname for f in concrete),
        itemgetter(*[at.get(f.attname, -1) for f in concrete]),
        tuple(converters),
    )


@functools.cache
def _builders(using: str, prefix: int) -> tuple[_Builder, _Builder]:
    """The chunk and document builders of a row layout, resolved once per database alias."""
    split = prefix + len(_CHUNK_FIELDS)
    return _builder(Chunk, _CHUNK_FIELDS, prefix, using), _builder(Document, _DOCUMENT_FIELDS, split, using)


def _snippet(headline: str) -> SafeString:
    """HTML-escape the chunk text, then turn ts_headline's markers into <mark>: safe to render."""
    # html.escape is what django.utils.html.escape runs, without its lazy-string wrapper.
    text = html.escape(headline.replace("\n", " "))
    return SafeString(text.replace(_MARK_START, "<mark>").replace(_MARK_STOP, "</mark>"))
