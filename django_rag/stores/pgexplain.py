"""Why a chunk ranked where it did in the text leg: each query term's BM25 weight in it.

The one place that reads postings for explanations (the admin's retrieval test page). It scores
with the same statistics and the same formula as the text leg of ``pgsearch._text_leg`` (terms
from ``to_tsvector`` of the query, document frequencies from the block sizes, collection
totals from ``django_rag_textstats``, ``bm25_factors``/``bm25_expression``), so a chunk's weights
sum to its BM25 score there. A change to the postings layout changes both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections

from ..models import POSTING_BUCKET_BITS, Collection
from ..sql import bm25_expression, bm25_factors
from .base import TermWeights

__all__ = ["term_weights"]

_SQL = """
WITH terms AS (
    SELECT DISTINCT u.lexeme AS term FROM unnest(to_tsvector(%(config)s::regconfig, %(text)s)) AS u
),
stats AS (
    SELECT greatest(sum(chunks), 1)::float8 AS n,
           greatest(sum(length), 1)::float8 / greatest(sum(chunks), 1)::float8 AS avgdl
    FROM django_rag_textstats WHERE collection_id = %(collection)s AND space = %(space)s
),
df AS (
    SELECT p.term, sum(p.n)::float8 AS df FROM django_rag_postblock AS p
    WHERE p.collection_id = %(collection)s AND p.space = %(space)s
      AND p.term = ANY (ARRAY(SELECT term FROM terms))
    GROUP BY p.term
),
idf AS (SELECT d.term, {w} AS w, {c1} AS c1, {c2} AS c2 FROM df AS d CROSS JOIN stats AS s)
SELECT NULL::bigint, term, NULL::float8 FROM terms
UNION ALL
SELECT p.chunk_id, p.term, {weight}
FROM idf AS i JOIN django_rag_posting AS p ON p.term = i.term
WHERE p.collection_id = %(collection)s AND p.space = %(space)s AND p.bucket = ANY (%(buckets)s)
  AND p.chunk_id = ANY (%(chunks)s)
"""


def _statement() -> str:
    w, c1, c2 = bm25_factors("d.df", "s.n", "s.avgdl")
    weight = bm25_expression("p.tf", "p.dl", "i.w", "i.c1", "i.c2")
    return _SQL.format(w=w, c1=c1, c2=c2, weight=weight)


def term_weights(
    collection: Collection, space: str, text: str, chunk_ids: Sequence[int], using: str
) -> TermWeights:
    """The query's terms and, per chunk of ``chunk_ids``, the BM25 weight of each term it holds."""
    result = TermWeights()
    if not collection.text_search:
        return result
    params: dict[str, Any] = {
        "config": collection.text_config,
        "text": text,
        "collection": collection.pk,
        "space": space,
        "chunks": [int(pk) for pk in chunk_ids],
        # A chunk's postings are in the blocks of its bucket: read those, not the terms' every block.
        "buckets": sorted({int(pk) >> POSTING_BUCKET_BITS for pk in chunk_ids}),
    }
    with connections[using].cursor() as cursor:
        cursor.execute(_statement(), params)
        for chunk_id, term, weight in cursor.fetchall():
            if chunk_id is None:
                result.terms.append(term)
            else:
                result.weights.setdefault(int(chunk_id), {})[term] = float(weight)
    result.terms.sort()
    return result
