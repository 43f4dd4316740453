"""A collection's reranker in kb.search and kb.ask, and ``rerank=False`` turning it off per call.

The reranker is TEIReranker against the loopback TEI server, over real PostgreSQL.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

import django_rag as rag
from django_rag.testing import RerankServer

pytestmark = pytest.mark.django_db

CORPUS = [
    rag.RagDocument("a", "The cat sat on the mat. The cat is orange."),
    rag.RagDocument("b", "A dog chased the cat across the garden."),
    rag.RagDocument("c", "Quantum chromodynamics describes the strong interaction."),
    rag.RagDocument("d", "Gardening tips: water the garden early in the morning."),
    rag.RagDocument("e", "The orange cat and the grey cat share one mat."),
]
QUERY = "garden dog"


@pytest.fixture
def server() -> Iterator[RerankServer]:
    with RerankServer("tei") as running:
        yield running


def rag_with(server: RerankServer, *, collection_reranker: str | None = "tei", **tei: Any) -> dict[str, Any]:
    config = {
        "BACKEND": "django_rag.search.rerankers.TEIReranker",
        "URL": server.url,
        "MAX_RETRIES": 0,
        **tei,
    }
    collections = {
        **settings.RAG["COLLECTIONS"],
        "docs": {"TEXT_CONFIG": "english", "RERANKER": collection_reranker},
    }
    return {**settings.RAG, "RERANKERS": {"tei": config, "default": config}, "COLLECTIONS": collections}


@pytest.fixture
def kb() -> rag.Collection:
    collection = rag.collection("docs")
    collection.index(CORPUS)
    return collection


def ids(hits: list[rag.Hit]) -> list[str]:
    return [hit.source_id for hit in hits]


def test_the_collections_reranker_reranks_every_search(kb: rag.Collection, server: RerankServer) -> None:
    with override_settings(RAG=rag_with(server)):
        hits = kb.search(QUERY, mode="hybrid", k=2)

    assert len(server.requests) == 1
    assert ids(hits) == ["b", "d"]  # "b" holds both query words: the server scores it 1.0
    assert [hit.score for hit in hits] == [1.0, 0.5]


def test_rerank_false_skips_the_collections_reranker(kb: rag.Collection, server: RerankServer) -> None:
    plain = kb.search(QUERY, mode="hybrid", k=3)
    with override_settings(RAG=rag_with(server)):
        unreranked = kb.search(QUERY, mode="hybrid", k=3, rerank=False)

    assert server.requests == []
    assert [(h.source_id, h.score) for h in unreranked] == [(h.source_id, h.score) for h in plain]


def test_rerank_false_needs_no_reachable_reranker(kb: rag.Collection, server: RerankServer) -> None:
    server.fail_next(5, status=503)
    with override_settings(RAG=rag_with(server)):
        with pytest.raises(rag.RerankerError, match="HTTP 503"):
            kb.search(QUERY, mode="hybrid", k=2)
        assert ids(kb.search(QUERY, mode="hybrid", k=2, rerank=False))


def test_fallback_serves_the_retrieval_order_when_the_reranker_fails(
    kb: rag.Collection, server: RerankServer
) -> None:
    server.corrupt_next("missing_result")
    with override_settings(RAG=rag_with(server, ON_ERROR="fallback")):
        served = kb.search(QUERY, mode="hybrid", k=3)
        plain = kb.search(QUERY, mode="hybrid", k=3, rerank=False)

    assert len(server.requests) == 1
    assert [(h.source_id, h.score) for h in served] == [(h.source_id, h.score) for h in plain]


def test_rerank_true_uses_the_default_alias_when_the_collection_names_none(
    kb: rag.Collection, server: RerankServer
) -> None:
    with override_settings(RAG=rag_with(server, collection_reranker=None)):
        assert kb.search(QUERY, mode="hybrid", k=2) and server.requests == []
        hits = kb.search(QUERY, mode="hybrid", k=2, rerank=True)

    assert len(server.requests) == 1 and ids(hits) == ["b", "d"]


def test_an_explicit_reranker_wins_over_the_collections(kb: rag.Collection, server: RerankServer) -> None:
    def prefer_quantum(query: str, texts: list[str]) -> list[float]:
        return [1.0 if "Quantum" in text else 0.0 for text in texts]

    with override_settings(RAG=rag_with(server)):
        hits = kb.search(QUERY, mode="hybrid", k=1, candidates=5, rerank=prefer_quantum)

    assert server.requests == [] and ids(hits) == ["c"]


def test_ask_takes_rerank_false_too(kb: rag.Collection, server: RerankServer) -> None:
    with override_settings(RAG=rag_with(server)):
        reranked = kb.ask(QUERY, k=2, mode="hybrid")
        assert len(server.requests) == 1
        plain = kb.ask(QUERY, k=2, mode="hybrid", rerank=False)

    assert len(server.requests) == 1
    assert [c.source_id for c in reranked.citations] and plain.text


def test_an_unknown_collection_reranker_is_a_configuration_error(
    kb: rag.Collection, server: RerankServer
) -> None:
    with override_settings(RAG=rag_with(server, collection_reranker="missing")):
        with pytest.raises(rag.ConfigurationError, match="no reranker named 'missing'"):
            kb.search(QUERY)
        assert kb.search(QUERY, rerank=False)


def test_rag_search_reranks_with_the_collections_reranker_unless_told_not_to(
    kb: rag.Collection, server: RerankServer
) -> None:
    from django.core.management import call_command

    def rag_search(**options: Any) -> list[Any]:
        out = io.StringIO()
        arguments = {"collection": "docs", "mode": "hybrid", "k": 2, "json": True, **options}
        call_command("rag_search", QUERY, stdout=out, **arguments)
        return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]

    with override_settings(RAG=rag_with(server)):
        rag_search()
        assert len(server.requests) == 1
        rag_search(no_rerank=True)
        assert len(server.requests) == 1  # --no-rerank sent nothing
    with override_settings(RAG=rag_with(server, collection_reranker=None)):
        hits = rag_search(rerank="tei")
        assert len(server.requests) == 2  # --rerank ALIAS where the collection names none
    assert [hit["source_id"] for hit in hits] == ["b", "d"]
