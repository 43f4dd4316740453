"""The BM25 text leg of a search statement: PostgreSQL's own lexemes, scored from posting blocks.

Document frequencies, the collection's size and average length come from the statistics tables
that triggers keep (migration 0008), or, with ``RAG["BM25"]["TENANT_STATISTICS"]``, are counted
over the tenant's chunks. By default the leg reads only the rarest terms' postings and scores a
pool of chunks exactly (``django_rag.bm25``), so its cost stays flat as the collection grows;
``"exact"`` sums every posting of every query term.
"""

from __future__ import annotations

from typing import Any

from ..bm25 import Bm25Options, bm25_options
from ..sql import K1, bm25_expression, bm25_factors, cut_to_lexemes
from .base import SearchRequest

__all__ = ["text_leg"]


def text_leg(request: SearchRequest, params: dict[str, Any], filters: str, space: str) -> str:
    """The CTEs ``terms`` ... ``tranked`` (id, score, trank): the top ``candidates`` chunks by BM25."""
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
