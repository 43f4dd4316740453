"""SQL text shared by the ORM querysets and the PostgreSQL store: literals, prefixes, BM25, casts.

Nothing here runs a query; user input never reaches these strings except through parameters.
"""

from __future__ import annotations

from django.db.models import Q

from .exceptions import QueryError

__all__ = [
    "HALFVEC_MAX_DIMS",
    "K1",
    "PREFIX_SEPARATORS",
    "VECTOR_MAX_DIMS",
    "B",
    "bm25_expression",
    "bm25_factors",
    "check_prefix",
    "cut_to_lexemes",
    "escape_like",
    "prefix_matches",
    "prefix_q",
    "quote_literal",
    "vector_cast_type",
]

# A prefix matches whole path segments: "docs" covers "docs", "docs/a" and "docs#p2", never "docs2".
PREFIX_SEPARATORS = ("/", "#", ":", "?")

VECTOR_MAX_DIMS = 2000  # pgvector's HNSW/IVFFlat limit for vector
HALFVEC_MAX_DIMS = 4000  # ... and for halfvec

# BM25 parameters (Robertson/Sparck Jones, as Lucene and bm25s default them).
K1 = 1.2
B = 0.75


def quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str):
        raise QueryError(f"a source id prefix must be a string, got {type(prefix).__name__}")
    if not prefix:
        raise QueryError("an empty prefix would match every document; pass a non-empty prefix")
    return prefix


def prefix_matches(source_id: str, prefix: str) -> bool:
    check_prefix(prefix)
    if source_id == prefix:
        return True
    if prefix.endswith(PREFIX_SEPARATORS):
        return source_id.startswith(prefix)
    return any(source_id.startswith(prefix + sep) for sep in PREFIX_SEPARATORS)


def prefix_q(field: str, prefix: str) -> Q:
    """A Q object matching ``prefix`` by whole segments (see ``prefix_matches``); wildcards are literal."""
    check_prefix(prefix)
    # Django's startswith escapes %, _ and \ itself; the separators keep "docs" from matching "docs2".
    if prefix.endswith(PREFIX_SEPARATORS):
        return Q(**{f"{field}__startswith": prefix})
    q = Q(**{field: prefix})
    for sep in PREFIX_SEPARATORS:
        q |= Q(**{f"{field}__startswith": prefix + sep})
    return q


def vector_cast_type(dimensions: int) -> str:
    """The type a space's ANN index casts its vectors to (``rag_migration``); plain vector if none."""
    if dimensions <= VECTOR_MAX_DIMS:
        return f"vector({dimensions})"
    if dimensions <= HALFVEC_MAX_DIMS:
        return f"halfvec({dimensions})"
    return "vector"


def bm25_factors(df: str, n: str, avgdl: str) -> tuple[str, str, str]:
    """A term's BM25 factors ``(w, c1, c2)`` as SQL: ``w`` = idf * (k1 + 1), ``c1`` = k1 * (1 - b),
    ``c2`` = k1 * b / avgdl, so that a posting weighs ``bm25_expression(tf, dl, w, c1, c2)``."""
    # float8 literals: bare decimals are numeric in PostgreSQL, and numeric math is ~10x slower.
    k1, b = f"{K1}::float8", f"{B}::float8"
    return (
        f"ln(1 + ({n} - {df} + 0.5::float8) / ({df} + 0.5::float8)) * ({k1} + 1)",
        f"{k1} * (1 - {b})",
        f"{k1} * {b} / {avgdl}",
    )


def bm25_expression(tf: str, dl: str, w: str, c1: str, c2: str) -> str:
    """The BM25 weight of one posting as SQL, from its term's ``bm25_factors`` (every text query)."""
    return f"{w} * {tf} / ({tf} + {c1} + {c2} * {dl})"


def cut_to_lexemes(vector: str, lexemes: str) -> str:
    """SQL: the tsvector ``vector`` with only ``lexemes`` (a text[] expression), positions kept.

    Weighted A, then filtered: about four times cheaper than unnesting the whole vector to find
    a query's few lexemes. A lexeme stored without positions (``strip()``) is dropped; the store
    writes ``to_tsvector``, which always keeps them.
    """
    return f"ts_filter(setweight(setweight({vector}, 'D'), 'A', {lexemes}), '{{a}}')"
