"""``ChunkQuerySet.nearest``: vector search as a lazy, filterable Django QuerySet."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django.contrib.postgres.search import SearchQuery
from django.db import connections, models, transaction
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast
from pgvector import Vector
from pgvector.django import CosineDistance, HalfVectorField, VectorField

from .conf import rag_settings
from .exceptions import ConfigurationError, QueryError

if TYPE_CHECKING:
    from .embedders.base import Embedder
    from .models import Collection

__all__ = ["MAX_K", "MAX_QUERY_CHARS", "ChunkQuerySet", "vector_cast_field"]

MAX_K = 1000
MAX_QUERY_CHARS = 20_000
VECTOR_MAX_DIMS = 2000  # pgvector's HNSW/IVFFlat limit for vector
HALFVEC_MAX_DIMS = 4000  # ... and for halfvec


_TERM_STATS = """
WITH terms AS (SELECT DISTINCT u.lexeme AS term FROM unnest(to_tsvector(%s::regconfig, %s)) AS u),
stats AS (
    SELECT greatest(sum(chunks), 1)::float8 AS n, greatest(sum(length), 1)::float8 / greatest(sum(chunks), 1)
    FROM django_rag_textstats WHERE collection_id = %s AND space = %s
)
SELECT t.term,
       (SELECT coalesce(sum(d.df), 0) FROM django_rag_termstats AS d
        WHERE d.collection_id = %s AND d.space = %s AND d.term = t.term),
       s.n, s.avgdl
FROM terms AS t CROSS JOIN stats AS s(n, avgdl)
"""


def vector_cast_field(dimensions: int) -> models.Field:
    """The typed column an ANN index for this width uses (see ``rag_migration``)."""
    if dimensions <= VECTOR_MAX_DIMS:
        return VectorField(dimensions=dimensions)
    return HalfVectorField(dimensions=dimensions) if dimensions <= HALFVEC_MAX_DIMS else VectorField()


def check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise QueryError(f"k must be an integer between 1 and {MAX_K}, got {k!r}")
    return k


def check_query_text(query: str) -> str:
    if not isinstance(query, str):
        raise QueryError(f"the search query must be a string, got {type(query).__name__}")
    # PostgreSQL text cannot hold NUL; it carries no meaning in a query anyway.
    query = query.replace("\x00", "")
    if not query.strip():
        raise QueryError("the search query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"the search query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")
    return query


FLOAT4_MAX = 3.4028234663852886e38


def check_query_vector(query: Iterable[Any]) -> list[float]:
    """A caller's query vector as floats; a QueryError if cosine search cannot use it."""
    try:
        vector = list(map(float, query))
    except (TypeError, ValueError) as exc:
        raise QueryError(f"a query vector must be a sequence of numbers ({exc})") from None
    if not vector:
        raise QueryError("the query vector is empty")
    # One sum finds NaN and infinities (they make it non-finite), and any() stops at the first
    # non-zero component: pgvector refuses the former, and a zero vector has no cosine.
    if not math.isfinite(sum(vector)):
        raise QueryError("the query vector holds NaN or infinite values")
    if max(vector) > FLOAT4_MAX or min(vector) < -FLOAT4_MAX:
        raise QueryError("the query vector has components beyond float4, pgvector's component type")
    if not any(vector):
        raise QueryError("the query vector is all zeros: it has no direction to compare by cosine")
    return vector


def check_text_search(collection: Collection, mode: str = "text") -> None:
    """Text and hybrid search need the collection's text index (TEXT_SEARCH, on by default)."""
    if not collection.text_search:
        raise QueryError(
            f"collection {collection.name!r} has TEXT_SEARCH off, so {mode} search has no text index to use; "
            "search with mode='vector', or set RAG['COLLECTIONS'][...]['TEXT_SEARCH'] = True "
            "(the stored chunks are indexed when the collection is next used)"
        )


class ChunkQuerySet(models.QuerySet):
    """Chunks, with ``nearest()`` for vector search.

    ``nearest`` returns the k closest chunks as a lazy QuerySet annotated with ``distance``
    (cosine) and ``score`` (1 - distance). Filters added afterwards are applied *before* the
    top-k cut, so a view can narrow the search the same way it narrows any QuerySet::

        Chunk.objects.filter(tenant="acme").nearest("backups", k=5).filter(tags__overlap=["faq"])
    """

    _rag_collection: Collection | None = None
    _rag_limit: tuple[int, int | None] | None = None
    _rag_ef_search: int | None = None

    def _clone(self) -> ChunkQuerySet:
        clone = super()._clone()
        clone._rag_collection = self._rag_collection
        clone._rag_limit = self._rag_limit
        clone._rag_ef_search = self._rag_ef_search
        return clone

    def _fetch_all(self) -> None:
        if self._result_cache is not None or self._rag_ef_search is None:
            return super()._fetch_all()
        # An HNSW scan with a filter returns fewer than k rows unless iterative scan is on, and
        # ef_search must reach k. SET LOCAL needs a transaction: ours, or the caller's.
        with transaction.atomic(using=self.db), connections[self.db].cursor() as cursor:
            cursor.execute(
                "SELECT set_config('hnsw.ef_search', %s, true), "
                "set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                "set_config('ivfflat.iterative_scan', 'relaxed_order', true)",
                [str(self._rag_ef_search)],
            )
            super()._fetch_all()
        if self._result_cache and all(hasattr(row, "distance") for row in self._result_cache):
            # relaxed_order may return neighbours slightly out of order.
            self._result_cache.sort(key=lambda row: row.distance)

    def for_collection(self, collection: Collection) -> ChunkQuerySet:
        """Remember which collection's embedder ``nearest("text")`` should use."""
        clone = self._chain()
        clone._rag_collection = collection
        return clone

    def nearest(
        self,
        query: str | Sequence[float],
        k: int = 10,
        *,
        collection: Collection | str | None = None,
        embedder: Embedder | str | None = None,
        space: str | None = None,
    ) -> ChunkQuerySet:
        """The ``k`` chunks closest to ``query``: text (embedded with the collection's embedder) or a vector.

        A vector needs its ``space`` (``"model:dims"``) unless a collection or embedder says it.
        """
        check_k(k)
        if isinstance(query, str):
            resolved = self._resolve_embedder(collection, embedder)
            vector = resolved.embed_query(check_query_text(query))
            space = resolved.space
        else:
            vector = check_query_vector(query)
            if space is None:
                space = self._resolve_embedder(collection, embedder).space
            dims = space.rpartition(":")[2]
            if dims.isdigit() and int(dims) != len(vector):
                raise QueryError(
                    f"the query vector has {len(vector)} dimensions "
                    f"but space '{space}' holds {dims}-dim vectors"
                )
        typed = vector_cast_field(len(vector))
        distance = CosineDistance(
            Cast("embedding", typed), Cast(models.Value(Vector(vector).to_text()), typed)
        )
        qs = (
            self.filter(space=space)
            .defer("embedding")
            .annotate(distance=distance)
            .annotate(score=1.0 - models.F("distance"))
            .order_by("distance")
        )[:k]
        qs._rag_limit = (qs.query.low_mark, qs.query.high_mark)
        qs._rag_ef_search = max(rag_settings.EF_SEARCH, k)
        return qs

    def text_search(
        self, query: str, k: int = 10, *, collection: Collection | str | None = None, syntax: str = "plain"
    ) -> ChunkQuerySet:
        """The ``k`` chunks that best match ``query`` by BM25, annotated with ``text_score``.

        Lazy and composable like ``nearest``: filters added afterwards apply before the top-k
        cut. Scores equal ``kb.search(mode="text")``'s; that path is faster on large
        collections (it reads postings by term instead of per candidate chunk).
        """
        from .stores.pgsearch import bm25_expression, bm25_factors

        check_k(k)
        coll = self._resolve_collection(collection)
        check_text_search(coll)
        text = check_query_text(query)
        with connections[self.db].cursor() as cursor:
            space = coll.space
            cursor.execute(_TERM_STATS, [coll.text_config, text, coll.pk, space, coll.pk, space])
            rows = cursor.fetchall()
        terms = [term for term, *_ in rows]
        dfs = [df for _, df, _, _ in rows]
        n, avgdl = (rows[0][2], rows[0][3]) if rows else (1.0, 1.0)
        weight = bm25_expression("p.tf", "p.dl", *bm25_factors("w.df", "%s", "%s"))
        score = RawSQL(
            # Term order, as the store's leg sums: the same bits for the same postings.
            f'SELECT coalesce(sum({weight} ORDER BY p.term COLLATE "C"), 0) FROM django_rag_posting AS p '
            "JOIN unnest(%s::text[], %s::float8[]) AS w(term, df) ON p.term = w.term "
            'WHERE p.chunk_id = "django_rag_chunk"."id"',
            [float(n), float(avgdl), terms, [float(df) for df in dfs]],
            output_field=models.FloatField(),
        )
        matching = RawSQL(
            "SELECT chunk_id FROM django_rag_posting WHERE collection_id = %s AND space = %s "
            "AND term = ANY(%s::text[])",
            [coll.pk, space, terms],
        )
        qs = self.filter(collection=coll, space=space, id__in=matching)
        if syntax in ("phrase", "websearch"):
            qs = qs.filter(search_vector=SearchQuery(text, config=coll.text_config, search_type=syntax))
        elif syntax != "plain":
            raise QueryError(f"unknown query syntax {syntax!r}; use plain, phrase or websearch")
        qs = (
            qs.defer("embedding", "search_vector")
            .annotate(text_score=score)
            .order_by("-text_score", "pk")[:k]
        )
        qs._rag_limit = (qs.query.low_mark, qs.query.high_mark)
        return qs

    def _filter_or_exclude(self, negate: bool, args: Any, kwargs: Any) -> ChunkQuerySet:
        if (
            (args or kwargs)
            and self._rag_limit is not None
            and self._rag_limit == (self.query.low_mark, self.query.high_mark)
        ):
            # The top-k cut is ours, not the caller's: filter inside it, then cut again.
            clone = self._chain()
            clone.query.clear_limits()
            clone = super(ChunkQuerySet, clone)._filter_or_exclude(negate, args, kwargs)
            clone.query.set_limits(*self._rag_limit)
            return clone
        return super()._filter_or_exclude(negate, args, kwargs)

    def _resolve_collection(self, collection: Collection | str | None) -> Collection:
        if isinstance(collection, str):
            return _get_collection(collection)
        if collection is not None:
            return collection
        if self._rag_collection is not None:
            return self._rag_collection
        raise ConfigurationError(
            "text search needs a collection: kb.chunks().text_search(...) or collection='name'"
        )

    def _resolve_embedder(
        self, collection: Collection | str | None, embedder: Embedder | str | None
    ) -> Embedder:
        from .embedders import get_embedder

        if embedder is not None:
            return get_embedder(embedder) if isinstance(embedder, str) else embedder
        if isinstance(collection, str):
            collection = _get_collection(collection)
        collection = collection or self._rag_collection
        if collection is not None:
            return collection.get_embedder()
        from .conf import rag_settings

        aliases = {opts.get("EMBEDDER", "default") for opts in rag_settings.COLLECTIONS.values()} or {
            "default"
        }
        if len(aliases) == 1:
            return get_embedder(aliases.pop())
        raise ConfigurationError(
            "collections use different embedders; call nearest(..., collection='name') or "
            "kb.chunks().nearest(...) so the query is embedded in the right space"
        )


def _get_collection(name: str) -> Collection:
    from .api import collection

    return collection(name)
