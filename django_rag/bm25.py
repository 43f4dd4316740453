"""How the text leg reads BM25 postings: ``RAG["BM25"]``, read when a text or hybrid search runs.

``"bounded"`` (the default) keeps a query's cost flat as the collection grows. It reads the
postings of the query's rarest terms in full, as many terms as fit in ``BUDGET`` postings
together (and more, however long, until they name at least ``POOL`` chunks), ranks the chunks
they name by that partial score, and scores the best ``POOL`` of them exactly from their stored text vectors,
every query term included (the common terms' long posting lists are never read). Scores are
bit-identical to the exhaustive leg's; the ranking can only differ for chunks that hold none
of the rare terms, or that rank below the pool on the rare terms alone. When every term fits
the budget (small collections), or filters leave fewer hits than asked for, the statement
answers with the exhaustive leg. ``"exact"`` reads every posting of every query term (for
evaluation).

``TENANT_STATISTICS`` (off by default): a search scoped to one tenant ranks with that tenant's
own statistics (document frequencies, chunk count, average length), counted from its chunks
when it runs, instead of the collection's. Scores then depend on the tenant's text only, so
no tenant can learn about another one's documents from how its own scores move. It costs
query time that grows with the tenant's size and the query terms' frequency (see
docs/security/isolation.md); ingestion is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .conf import rag_section
from .exceptions import ConfigurationError

__all__ = ["MODES", "Bm25Options", "bm25_options"]

MODES = ("bounded", "exact")


@dataclass(frozen=True)
class Bm25Options:
    """Each field is the ``RAG["BM25"]`` key of the same name in upper case."""

    mode: str = "bounded"
    # Postings read per query: the rarest terms that fit together (more when they name fewer than
    # POOL chunks: the rarest ones are always read, whole).
    budget: int = 20_000
    # Chunks scored exactly from their text vectors, best on the rare terms first (at least the
    # number of candidates a hybrid search asks for).
    pool: int = 200
    # A search scoped to a tenant ranks with the tenant's own statistics, not the collection's.
    tenant_statistics: bool = False


def bm25_options() -> Bm25Options:
    """``RAG["BM25"]`` over the defaults; the defaults alone where Django is not configured."""
    given = rag_section("BM25", {field.name for field in fields(Bm25Options)})
    if given.get("mode", "bounded") not in MODES:
        raise ConfigurationError(f"RAG['BM25']['MODE'] must be one of {list(MODES)}, got {given['mode']!r}")
    for key in ("budget", "pool"):
        value = given.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(
                f"RAG['BM25']['{key.upper()}'] must be a positive integer, got {value!r}"
            )
    if not isinstance(given.get("tenant_statistics", False), bool):
        raise ConfigurationError(
            f"RAG['BM25']['TENANT_STATISTICS'] must be True or False, got {given['tenant_statistics']!r}"
        )
    return Bm25Options(**given)
