"""``nearest()`` and ``text_search()`` compose with ``order_by``, ``distinct`` and ``values`` (issue 24).

Finding 9: each either works on the k best chunks or raises the library's ``QueryError`` naming what to do;
never Django's raw ``TypeError`` ("Cannot reorder a query once a slice has been taken").
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import django_rag as rag
from django_rag.exceptions import QueryError
from django_rag.models import Collection
from django_rag.querysets import ChunkQuerySet

pytestmark = pytest.mark.django_db

Search = Callable[[ChunkQuerySet], ChunkQuerySet]
SEARCHES = [
    pytest.param(lambda qs: qs.nearest("zebra stripes", k=5), id="nearest"),
    pytest.param(lambda qs: qs.text_search("zebra stripes", k=5), id="text_search"),
]
SCORE = {"nearest": "score", "text_search": "text_score"}


@pytest.fixture
def kb() -> Collection:
    collection = rag.collection("docs")
    # Every text a different mix, so no two chunks tie on distance or score (a tie at the cut
    # may fall either way between two plans).
    collection.index(
        [rag.RagDocument(f"a/{i}", "zebra stripes " + "zebra " * i) for i in range(12)], tenant="acme"
    )
    collection.index(
        [rag.RagDocument(f"g/{i}", "zebra stripes of globex " + "stripes " * i) for i in range(12)],
        tenant="globex",
    )
    return collection


def score_name(request: pytest.FixtureRequest) -> str:
    return SCORE[request.node.callspec.id]


@pytest.mark.parametrize("search", SEARCHES)
def test_order_by_reorders_the_same_k_chunks(kb: Collection, search: Search) -> None:
    best = list(search(kb.chunks()))

    by_id = list(search(kb.chunks()).order_by("id"))

    assert [c.pk for c in by_id] == sorted(c.pk for c in best)
    assert len(best) == 5


@pytest.mark.parametrize("search", SEARCHES)
def test_order_by_keeps_the_scores(kb: Collection, search: Search, request: pytest.FixtureRequest) -> None:
    name = score_name(request)
    best = {c.pk: getattr(c, name) for c in search(kb.chunks())}

    reordered = search(kb.chunks()).order_by(f"-{name}", "id")

    assert {c.pk: getattr(c, name) for c in reordered} == pytest.approx(best)
    assert [getattr(c, name) for c in reordered] == sorted(best.values(), reverse=True)


@pytest.mark.parametrize("search", SEARCHES)
def test_filter_then_distinct_keeps_the_cut_and_the_filter(kb: Collection, search: Search) -> None:
    best_of_acme = [c.pk for c in search(kb.chunks()).filter(tenant="acme")]

    distinct = search(kb.chunks()).filter(tenant="acme").distinct()

    assert [c.pk for c in distinct] == best_of_acme
    assert {c.tenant for c in distinct} == {"acme"} and len(best_of_acme) == 5


@pytest.mark.parametrize("search", SEARCHES)
def test_distinct_on_fields_names_the_ordering_it_needs(kb: Collection, search: Search) -> None:
    with pytest.raises(QueryError, match=r"call \.order_by\('tenant', \.\.\.\) first"):
        search(kb.chunks()).distinct("tenant")

    one_per_tenant = search(kb.chunks()).order_by("tenant", "id").distinct("tenant")
    assert sorted(c.tenant for c in one_per_tenant) == sorted({c.tenant for c in search(kb.chunks())})


@pytest.mark.parametrize("search", SEARCHES)
def test_values_give_the_k_rows_with_their_scores(
    kb: Collection, search: Search, request: pytest.FixtureRequest
) -> None:
    name = score_name(request)
    best = [(c.pk, getattr(c, name)) for c in search(kb.chunks())]

    rows = list(search(kb.chunks()).values("id", name))
    listed = list(search(kb.chunks()).filter(tenant="acme").values_list("id", flat=True))
    ordered = list(search(kb.chunks()).order_by("id").values("id", "tenant"))

    assert [(row["id"], row[name]) for row in rows] == best
    assert listed == [c.pk for c in search(kb.chunks()).filter(tenant="acme")]
    assert [row["id"] for row in ordered] == sorted(pk for pk, _ in best)


@pytest.mark.parametrize("search", SEARCHES)
def test_filters_after_order_by_narrow_the_k_chunks(kb: Collection, search: Search) -> None:
    best = list(search(kb.chunks()))

    narrowed = search(kb.chunks()).order_by("id").filter(tenant="globex")

    assert [c.pk for c in narrowed] == sorted(c.pk for c in best if c.tenant == "globex")
