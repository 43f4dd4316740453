"""``RAG["BM25"]["TENANT_STATISTICS"]``: a tenant's BM25 scores depend on its own text only (issue 24).

Finding 10: with statistics shared by the collection, tenant A's score for "zebra" fell from
0.663 to 0.079 once tenant B indexed documents, so a tenant could learn about another tenant's
text from its own scores.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import override_settings

import django_rag as rag
from django_rag.exceptions import ConfigurationError

pytestmark = pytest.mark.django_db

ACME = [
    rag.RagDocument("a/1", "The zebra crossing outside the office is repainted every spring."),
    rag.RagDocument("a/2", "Our office dog likes the zebra toy and the striped blanket."),
    rag.RagDocument("a/3", "Quarterly invoices are emailed to the finance team on Mondays."),
    rag.RagDocument("a/4", "Backups of the office file server run nightly at two."),
]
GLOBEX = [
    rag.RagDocument(f"g/{i}", f"zebra zebra herd report {i}: zebra migration across the plains " * 3)
    for i in range(40)
]


def bm25(**options: object) -> Iterator[None]:
    return override_settings(RAG={**settings.RAG, "BM25": options})  # type: ignore[return-value]


def scores(kb: rag.KnowledgeBase, query: str, tenant: str) -> list[tuple[str, float]]:
    return [(hit.source_id, hit.score) for hit in kb.search(query, mode="text", tenant=tenant, k=10)]


@pytest.mark.parametrize("mode", ["bounded", "exact"])
def test_with_tenant_statistics_a_tenants_scores_do_not_move_when_another_tenant_indexes(mode: str) -> None:
    kb = rag.collection("docs")
    kb.index(ACME, tenant="acme")
    with bm25(MODE=mode, TENANT_STATISTICS=True):
        before = scores(kb, "zebra office", "acme")
        kb.index(GLOBEX, tenant="globex")
        after = scores(kb, "zebra office", "acme")

    assert before == after
    assert {source_id for source_id, _ in before[:2]} == {"a/1", "a/2"}


@pytest.mark.parametrize("mode", ["bounded", "exact"])
def test_with_tenant_statistics_a_tenant_scores_as_if_alone_in_its_collection(mode: str) -> None:
    shared = rag.collection("docs")
    shared.index(GLOBEX, tenant="globex")
    shared.index(ACME, tenant="acme")
    alone = rag.collection("alone", create=True)
    alone.index(ACME, tenant="acme")

    with bm25(MODE=mode, TENANT_STATISTICS=True):
        for query in ("zebra office", "office invoices", "zebra"):
            together, by_itself = scores(shared, query, "acme"), scores(alone, query, "acme")
            assert [sid for sid, _ in together] == [sid for sid, _ in by_itself]
            assert dict(together) == pytest.approx(dict(by_itself), rel=1e-12)


def test_shared_statistics_leak_another_tenants_text_into_scores() -> None:
    """The side channel the option closes: by default the collection's statistics move a tenant's scores."""
    kb = rag.collection("docs")
    kb.index(ACME, tenant="acme")
    before = dict(scores(kb, "zebra", "acme"))
    kb.index(GLOBEX, tenant="globex")
    after = dict(scores(kb, "zebra", "acme"))

    assert after["a/1"] < before["a/1"] / 2


def test_searches_across_tenants_keep_the_collection_statistics() -> None:
    kb = rag.collection("docs")
    kb.index(ACME, tenant="acme")
    kb.index(GLOBEX, tenant="globex")
    shared = [(h.source_id, h.score) for h in kb.search("zebra office", mode="text", k=10)]
    with bm25(TENANT_STATISTICS=True):
        assert [(h.source_id, h.score) for h in kb.search("zebra office", mode="text", k=10)] == shared


def test_the_option_takes_booleans_only() -> None:
    with bm25(TENANT_STATISTICS="yes"), pytest.raises(ConfigurationError, match="TENANT_STATISTICS"):
        rag.collection("docs").search("zebra", mode="text", tenant="acme")
