"""``ChunkQuerySet.nearest`` and ``.text_search``: vector and BM25 search as lazy, filterable QuerySets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.contrib.postgres.search import SearchQuery
from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast
from pgvector import Vector
from pgvector.django import CosineDistance, HalfVectorField, VectorField

from .conf import rag_settings
from .embedders import Embedder, get_embedder
from .exceptions import ConfigurationError, QueryError
from .sql import HALFVEC_MAX_DIMS, VECTOR_MAX_DIMS, bm25_expression, bm25_factors, cut_to_lexemes
from .validation import (
    check_choice,
    check_k,
    check_optional_text,
    check_query_text,
    check_query_vector,
    check_text,
    check_text_search,
    shown,
)

if TYPE_CHECKING:
    from .models import Chunk, Collection  # noqa: F401  (Chunk: named as a string, the QuerySet's model)

__all__ = ["ChunkQuerySet", "apply_session_settings", "vector_cast_field"]

SYNTAXES = ("plain", "phrase", "websearch")

_TERM_STATS = """
WITH terms AS (SELECT DISTINCT u.lexeme AS term FROM unnest(to_tsvector(%s::regconfig, %s)) AS u),
stats AS (
    SELECT greatest(sum(chunks), 1)::float8 AS n, greatest(sum(length), 1)::float8 / greatest(sum(chunks), 1)
    FROM django_rag_textstats WHERE collection_id = %s AND space = %s
)
SELECT t.term,
       (SELECT coalesce(sum(p.n), 0) FROM django_rag_postblock AS p
        WHERE p.collection_id = %s AND p.space = %s AND p.term = t.term),
       s.n, s.avgdl
FROM terms AS t CROSS JOIN stats AS s(n, avgdl)
"""


def vector_cast_field(dimensions: int) -> models.Field[Any, Any]:
    """The typed column an ANN index for this width uses (see ``rag_migration``)."""
    if dimensions <= VECTOR_MAX_DIMS:
        return VectorField(dimensions=dimensions)
    return HalfVectorField(dimensions=dimensions) if dimensions <= HALFVEC_MAX_DIMS else VectorField()


def apply_session_settings(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """``connection_created`` receiver: pgvector's iterative scan and ef_search for the session.

    An HNSW scan under a filter returns fewer than k rows unless iterative scan is on. Set per
    session, it holds for every way a ``nearest()`` QuerySet is evaluated (iteration,
    ``.iterator()``'s server-side cursor, ``count()``, ``exists()``, ``values()``, ``aggregate()``,
    a subquery of another QuerySet), which no per-query hook reaches. ``strict_order`` keeps the
    rows in distance order, so no path needs to re-sort them. The store's own statements set
    their values per transaction (``SET LOCAL``), which wins over these.
    """
    scan = rag_settings.ITERATIVE_SCAN
    if connection.vendor != "postgresql" or not scan:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('hnsw.iterative_scan', %s, false), "
            "set_config('ivfflat.iterative_scan', %s, false), set_config('hnsw.ef_search', %s, false)",
            [scan, scan, str(rag_settings.EF_SEARCH)],
        )


class ChunkQuerySet(models.QuerySet["Chunk"]):
    """Chunks, with ``nearest()`` for vector search and ``text_search()`` for BM25.

    Both return the k best chunks as a lazy QuerySet annotated with ``distance`` and ``score``
    (cosine) or ``text_score`` (BM25). Filters added afterwards are applied *before* the top-k
    cut, so a view can narrow the search the same way it narrows any QuerySet::

        Chunk.objects.filter(tenant="acme").nearest("backups", k=5).filter(tags__overlap=["faq"])
    """

    _rag_collection: Collection | None = None
    _rag_limit: tuple[int, int | None] | None = None
    # nearest()/text_search()'s annotations, unresolved: order_by() puts them on a new query.
    _rag_annotations: dict[str, Any] | None = None

    def _clone(self) -> ChunkQuerySet:
        # The QuerySet subclass hook for state of its own: Django clones on every chained call.
        clone: ChunkQuerySet = super()._clone()  # type: ignore[misc]
        clone._rag_collection = self._rag_collection
        clone._rag_limit = self._rag_limit
        clone._rag_annotations = self._rag_annotations
        return clone

    def filter(self, *args: Any, **kwargs: Any) -> ChunkQuerySet:
        return self._inside_cut("filter", args, kwargs)

    def exclude(self, *args: Any, **kwargs: Any) -> ChunkQuerySet:
        return self._inside_cut("exclude", args, kwargs)

    def distinct(self, *field_names: str) -> ChunkQuerySet:
        """Inside the top-k cut, like a filter; ``distinct(fields)`` goes after ``order_by(fields, ...)``."""
        if not self._cut_is_ours():
            return super().distinct(*field_names)
        if field_names:
            raise QueryError(
                f"distinct({', '.join(map(repr, field_names))}) after nearest() or text_search() needs "
                "an ordering that starts with those fields: call .order_by("
                f"{', '.join(map(repr, field_names))}, ...) first, then .distinct(...) keeps one row "
                "per value among the k chunks"
            )
        return self._inside_cut("distinct", (), {}, always=True)

    def order_by(self, *field_names: Any) -> ChunkQuerySet:
        """After ``nearest()`` or ``text_search()``: the same k chunks, in this order.

        The cut is taken first (a subquery of the k ids) and the k rows re-read with the same
        annotations, so ``order_by("id")`` or ``order_by("-score")`` reorder the k best, never
        pick other chunks. Filters chained after it narrow those k chunks.
        """
        if not self._cut_is_ours() or self._rag_annotations is None:
            return super().order_by(*field_names)
        chunks: ChunkQuerySet = self.model._default_manager.db_manager(self.db).all()
        chunks._rag_collection = self._rag_collection
        deferred, defer = self.query.deferred_loading
        kept = chunks.filter(pk__in=self.values("pk"))
        kept = kept.defer(*deferred) if defer else kept.only(*deferred)
        ordered: ChunkQuerySet = super(ChunkQuerySet, kept.annotate(**self._rag_annotations)).order_by(
            *field_names
        )
        return ordered

    def _cut_is_ours(self) -> bool:
        limits = (self.query.low_mark, self.query.high_mark)
        return self._rag_limit is not None and self._rag_limit == limits

    def _inside_cut(self, method: str, args: Any, kwargs: Any, *, always: bool = False) -> ChunkQuerySet:
        limits = (self.query.low_mark, self.query.high_mark)
        if (always or args or kwargs) and self._cut_is_ours():
            # The top-k cut is ours, not the caller's: filter inside it, then cut again.
            clone = self.all()
            clone.query.clear_limits()
            narrowed: ChunkQuerySet = getattr(super(ChunkQuerySet, clone), method)(*args, **kwargs)
            narrowed.query.set_limits(*limits)
            return narrowed
        result: ChunkQuerySet = getattr(super(), method)(*args, **kwargs)
        return result

    def for_collection(self, collection: Collection) -> ChunkQuerySet:
        """Remember which collection's embedder ``nearest("text")`` should use."""
        clone = self.all()
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
        space = check_optional_text(space, "space")
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
        qs: ChunkQuerySet = (
            self.filter(space=space)
            .defer("embedding")
            .annotate(distance=distance)
            .annotate(score=1.0 - models.F("distance"))
            .order_by("distance")
        )[:k]
        qs._rag_limit = (qs.query.low_mark, qs.query.high_mark)
        qs._rag_annotations = {"distance": distance, "score": 1.0 - models.F("distance")}
        return qs

    def text_search(
        self, query: str, k: int = 10, *, collection: Collection | str | None = None, syntax: str = "plain"
    ) -> ChunkQuerySet:
        """The ``k`` chunks that best match ``query`` by BM25, annotated with ``text_score``.

        Lazy and composable like ``nearest``: filters added afterwards apply before the top-k
        cut. Scores equal ``kb.search(mode="text")``'s; that path is faster on large
        collections (it reads the rarest terms' postings, not every matching chunk's text).
        """
        check_k(k)
        check_choice(syntax, "syntax", SYNTAXES, "query syntax")
        coll = self._resolve_collection(collection)
        check_text_search(coll)
        text = check_query_text(query)
        space = coll.space
        with connections[self.db].cursor() as cursor:
            cursor.execute(_TERM_STATS, [coll.text_config, text, coll.pk, space, coll.pk, space])
            rows = cursor.fetchall()
        terms = [term for term, *_ in rows]
        dfs = [df for _, df, _, _ in rows]
        n, avgdl = (rows[0][2], rows[0][3]) if rows else (1.0, 1.0)
        tf = "coalesce(array_length(u.positions, 1), 1)"
        weight = bm25_expression(tf, "x.dl", *bm25_factors("w.df", "%s", "%s"))
        score = _ChunkSQL(
            # From the chunk's own text vector, in term order, as the store's leg sums: the same
            # bits for the same chunk.
            f'(SELECT coalesce(sum({weight} ORDER BY w.term COLLATE "C"), 0) '
            # The chunk's length once per chunk, not once per matching term.
            "FROM (SELECT {vector}, django_rag_lexeme_count({vector})) AS x(v, dl) "
            # The vector cut to the query's lexemes first, as the store's bounded leg does.
            f"CROSS JOIN LATERAL unnest({cut_to_lexemes('x.v', '%s::text[]')}) AS u "
            "JOIN unnest(%s::text[], %s::float8[]) AS w(term, df) ON u.lexeme = w.term)",
            [float(n), float(avgdl), terms, terms, [float(df) for df in dfs]],
        )
        matching = RawSQL(
            "SELECT chunk_id FROM django_rag_posting WHERE collection_id = %s AND space = %s "
            "AND term = ANY(%s::text[])",
            [coll.pk, space, terms],
        )
        qs = self.filter(collection=coll, space=space, id__in=matching)
        if syntax != "plain":
            qs = qs.filter(search_vector=SearchQuery(text, config=coll.text_config, search_type=syntax))
        ranked: ChunkQuerySet = (
            qs.defer("embedding", "search_vector")
            .annotate(text_score=score)
            .order_by("-text_score", "pk")[:k]
        )
        ranked._rag_limit = (ranked.query.low_mark, ranked.query.high_mark)
        ranked._rag_annotations = {"text_score": score}
        return ranked

    def _resolve_collection(self, collection: Collection | str | None) -> Collection:
        self._check_collection(collection)
        if isinstance(collection, str):
            return self._named_collection(collection)
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
        if embedder is not None:
            if isinstance(embedder, str):
                return get_embedder(embedder)
            if not isinstance(embedder, Embedder):
                raise QueryError(
                    f"embedder must be an alias of RAG['EMBEDDERS'] or an Embedder, got {shown(embedder)}"
                )
            return embedder
        self._check_collection(collection)
        if isinstance(collection, str):
            collection = self._named_collection(collection)
        collection = collection or self._rag_collection
        if collection is not None:
            return collection.get_embedder()
        aliases = {opts.get("EMBEDDER", "default") for opts in rag_settings.COLLECTIONS.values()} or {
            "default"
        }
        if len(aliases) == 1:
            return get_embedder(aliases.pop())
        raise ConfigurationError(
            "collections use different embedders; call nearest(..., collection='name') or "
            "kb.chunks().nearest(...) so the query is embedded in the right space"
        )

    def _check_collection(self, collection: Any) -> None:
        model: Any = self.model._meta.get_field("collection").related_model
        if collection is not None and not isinstance(collection, str | model):
            raise QueryError(f"collection must be a collection name or a Collection, got {shown(collection)}")
        if isinstance(collection, str):
            check_text(collection, "collection")

    def _named_collection(self, name: str) -> Collection:
        # The collection of this QuerySet's own database, as Chunk's foreign key describes it.
        collection_model: Any = self.model._meta.get_field("collection").related_model
        found: Collection = collection_model.objects.db_manager(self.db).resolve(name)
        return found


class _ChunkSQL(models.Func):
    """Raw SQL about the chunk row, its search vector written ``{vector}``: a column reference the
    ORM relabels, so the expression stays right inside a subquery (``order_by`` after the cut),
    where a hard-coded ``"django_rag_chunk"."search_vector"`` would name the outer query's row."""

    output_field = models.FloatField()

    def __init__(self, sql: str, params: Sequence[Any]) -> None:
        super().__init__(models.F("search_vector"))
        self.sql, self.params = sql, list(params)

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:  # type: ignore[override]
        vector_sql, vector_params = compiler.compile(self.get_source_expressions()[0])
        pieces = self.sql.split("{vector}")
        given = iter(self.params)
        params: list[Any] = []
        for number, piece in enumerate(pieces):
            # The placeholders in order: each piece's own, then the vector's where it stands.
            params.extend(next(given) for _ in range(piece.count("%s")))
            if number < len(pieces) - 1:
                params.extend(vector_params)
        return vector_sql.join(pieces), params
