"""``nearest()`` QuerySets keep their k rows on every evaluation path, with the HNSW index in the plan.

The iterative scan that keeps a filtered HNSW walk from returning fewer than k rows is a
session setting (``RAG["ITERATIVE_SCAN"]``, applied to every new connection), so it holds for
iteration, ``.iterator()``'s server-side cursor, ``count()``, ``exists()``, slicing, ``values()``,
``aggregate()`` and subqueries alike. The plans here are pinned to the HNSW index, as a large
table would plan them, so the filter really is applied during the walk.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection, transaction
from django.db.models import Count, Max

import django_rag as rag
from django_rag.models import Chunk, Collection, Document
from django_rag.querysets import ChunkQuerySet
from tests.plans import build_space_index

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def kb(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> Iterator[Collection]:
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        collection = rag.collection("docs")
        docs = [
            rag.RagDocument(
                f"n/{i}",
                f"note {i} about subject {i % 50}",
                tags=["rare"] if i % 100 == 33 else ["big"],  # 1%, none of them near the query
                metadata={"decile": i % 10},  # 10%
            )
            for i in range(3000)
        ]
        collection.index(docs)
        index = build_space_index(collection)
        yield collection
        with connection.cursor() as cursor:
            cursor.execute(f'DROP INDEX "{index}"')
        Document.objects.filter(collection=collection).delete()


def hnsw_only() -> None:
    """Plan as a big table would: walk the HNSW index, filter during the walk."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off"
        )


FILTERS = [
    pytest.param({"tags__overlap": ["rare"]}, id="1%"),
    pytest.param({"metadata__decile": 3}, id="10%"),
]


def filtered(kb: Collection, **filters: object) -> ChunkQuerySet:
    return kb.chunks().nearest("subject 7", k=10).filter(**filters)  # type: ignore[attr-defined]


@pytest.mark.parametrize("filters", FILTERS)
def test_every_evaluation_path_returns_the_same_k_rows(kb: Collection, filters: dict[str, object]) -> None:
    with transaction.atomic():
        hnsw_only()
        qs = filtered(kb, **filters)
        assert "Index Scan using rag_hnsw" in qs.explain()
        listed = [chunk.pk for chunk in qs]
        assert len(listed) == 10
        assert [chunk.pk for chunk in qs.iterator(chunk_size=3)] == listed
        assert list(qs.values_list("pk", flat=True)) == listed
        assert [row["pk"] for row in qs.values("pk")] == listed
        assert qs.count() == 10 and qs.exists()
        assert [chunk.pk for chunk in qs[:4]] == listed[:4]
        assert qs[9].pk == listed[9]
        assert qs.aggregate(n=Count("pk"), top=Max("pk")) == {"n": 10, "top": max(listed)}
        documents = Document.objects.filter(chunks__in=qs.values("pk")).values_list("chunks__pk", flat=True)
        assert sorted(documents) == sorted(listed)


@pytest.mark.parametrize("filters", FILTERS)
def test_rows_come_in_distance_order_on_every_path(kb: Collection, filters: dict[str, object]) -> None:
    with transaction.atomic():
        hnsw_only()
        qs = filtered(kb, **filters)
        distances = [chunk.distance for chunk in qs.iterator()]
        assert distances == sorted(distances)
        assert list(qs.values_list("distance", flat=True)) == distances


def test_without_iterative_scan_the_filtered_walk_starves(kb: Collection) -> None:
    # What the session setting prevents: pgvector's default stops after ef_search candidates.
    with transaction.atomic():
        hnsw_only()
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL hnsw.iterative_scan = off")
        assert filtered(kb, tags__overlap=["rare"]).count() < 10


def test_new_connections_get_the_session_settings() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('hnsw.iterative_scan'), current_setting('hnsw.ef_search')")
        assert cursor.fetchone() == ("strict_order", "40")


def test_filters_after_nearest_apply_before_the_top_k_cut(kb: Collection) -> None:
    qs = kb.chunks().nearest("subject 7", k=5).filter(tags__overlap=["rare"])
    assert qs.count() == 5
    assert all(chunk.tags == ["rare"] for chunk in qs)
    assert isinstance(qs, ChunkQuerySet) and Chunk.objects.all().model is Chunk
