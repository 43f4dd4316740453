"""The calibrated relevance (issue 21): one scale in every mode, a default cutoff, "no good matches"."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import django_rag as rag
from django_rag.answer import NOT_ENOUGH_INFORMATION, ask
from django_rag.answer.chat import OpenAIChat
from django_rag.search.relevance import (
    DEFAULT_MIN_SCORE,
    background_for,
    chance_peak,
    default_min_score,
    text_relevance,
    vector_relevance,
)
from django_rag.testing import OpenAICompatibleServer
from django_rag.web.models import QueryLog
from tests.web_support import login

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.conftest_web"]

DOCS = [
    rag.RagDocument(
        "backups", "Nightly snapshots of every workspace are kept for 35 days.", {"title": "Backups"}
    ),
    rag.RagDocument("billing", "Invoices are issued on the first day of each month.", {"title": "Billing"}),
    rag.RagDocument(
        "export", "An owner can export the workspace as a ZIP of Markdown files.", {"title": "Export"}
    ),
]
MODES = ("vector", "text", "hybrid")


@pytest.fixture
def kb(settings) -> rag.Collection:
    # The cutoff as a site gets it (tests/settings.py turns it off for the tests of other features),
    # in a hashing space wide enough that unrelated words rarely share a dimension (in 64 dimensions
    # one collision in a three-word query is a cosine of 0.2: a space of mostly noise).
    settings.RAG = {
        **settings.RAG,
        "MIN_SCORE": DEFAULT_MIN_SCORE,
        "EMBEDDERS": {
            **settings.RAG["EMBEDDERS"],
            "default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 1024},
        },
    }
    collection = rag.collection("docs")
    collection.index(DOCS)
    return collection


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(dimensions=64) as running:
        yield running


@pytest.mark.parametrize("mode", MODES)
def test_every_hit_carries_a_relevance_between_0_and_1(kb: rag.Collection, mode: str) -> None:
    hits = kb.search("snapshots kept for 35 days", mode=mode, min_score=0, k=10)
    assert hits and all(0.0 <= hit.relevance <= 1.0 for hit in hits)
    assert hits[0].source_id == "backups" and hits[0].relevance >= DEFAULT_MIN_SCORE


@pytest.mark.parametrize("mode", MODES)
def test_a_query_with_no_good_match_returns_no_hits_under_the_default_cutoff(
    kb: rag.Collection, mode: str
) -> None:
    assert kb.search("xylophone quantum zeppelin", mode=mode) == []
    # min_score=0 turns the cutoff off: every chunk comes back, each with its (low) relevance.
    everything = kb.search("xylophone quantum zeppelin", mode="vector", min_score=0, k=10)
    assert len(everything) == 3 and all(hit.relevance < DEFAULT_MIN_SCORE for hit in everything)


@pytest.mark.parametrize("mode", MODES)
def test_a_good_match_survives_the_cutoff_and_the_others_do_not(kb: rag.Collection, mode: str) -> None:
    assert [hit.source_id for hit in kb.search("invoices issued each month", mode=mode)] == ["billing"]


@pytest.mark.parametrize("mode", MODES)
def test_min_score_is_a_relevance_between_0_and_1_in_every_mode(kb: rag.Collection, mode: str) -> None:
    with pytest.raises(rag.QueryError, match="min_score is a relevance between 0 and 1"):
        kb.search("snapshots", mode=mode, min_score=1.5)
    with pytest.raises(rag.QueryError, match="min_score is a relevance between 0 and 1"):
        kb.search("snapshots", mode=mode, min_score=-0.2)
    best = kb.search("snapshots kept for 35 days", mode=mode, min_score=0)[0].relevance
    assert kb.search("snapshots kept for 35 days", mode=mode, min_score=best)[0].relevance == best
    assert kb.search("snapshots kept for 35 days", mode=mode, min_score=min(1.0, best + 1e-6)) == []


def test_the_default_cutoff_is_a_setting(settings) -> None:
    settings.RAG = {**settings.RAG, "MIN_SCORE": 0.7}
    assert default_min_score() == 0.7
    settings.RAG = {**settings.RAG, "MIN_SCORE": None}
    assert default_min_score() == 0.0
    settings.RAG = {**settings.RAG, "MIN_SCORE": 2}
    with pytest.raises(rag.ConfigurationError, match=r"RAG\['MIN_SCORE'\] must be a number between 0 and 1"):
        default_min_score()


def test_the_best_chance_match_rises_with_the_collection_size() -> None:
    peaks = [chance_peak(n) for n in (1, 2, 12, 1_000, 1_000_000)]
    assert peaks[0] == 0.0 and peaks == sorted(peaks)
    assert chance_peak(12) == pytest.approx(1.63, abs=0.02)  # E[max of 12 normal draws] is 1.629
    # The same similarity means less in a larger collection: chance reaches further there.
    assert vector_relevance(0.5, 0.1, 0.1, 12) > vector_relevance(0.5, 0.1, 0.1, 1_000_000)
    assert vector_relevance(0.1 + 0.1 * chance_peak(500), 0.1, 0.1, 500) == pytest.approx(0.5)


def test_text_relevance_needs_most_of_the_query_words() -> None:
    assert text_relevance(0.0) == 0.0
    assert text_relevance(0.3) < 0.01
    assert text_relevance(0.8) == pytest.approx(0.5)
    assert text_relevance(1.0) > 0.95


def test_ask_with_no_good_match_answers_not_enough_information_without_the_model(
    kb: rag.Collection, server: OpenAICompatibleServer
) -> None:
    chat = OpenAIChat(base_url=server.base_url, api_key="test-key", backoff_base=0.001, backoff_max=0.05)
    answer = ask(kb, "xylophone quantum zeppelin", mode="hybrid", chat=chat)
    assert answer == rag.Answer(text=str(NOT_ENOUGH_INFORMATION), citations=[], usage={})
    assert server.requests == []


def test_the_page_and_the_json_endpoint_say_no_good_matches_and_the_log_counts_a_zero_hit(
    web, kb: rag.Collection
) -> None:
    kb.index(DOCS, tenant="acme")
    alice = login("alice")
    page = alice.get("/kb/", {"q": "xylophone quantum zeppelin", "mode": "hybrid"}).content.decode()
    assert "No good matches for “xylophone quantum zeppelin”" in page and 'class="rag-result"' not in page
    data = alice.get("/kb/api/search/", {"q": "xylophone quantum zeppelin", "mode": "vector"}).json()
    assert data["count"] == 0 and data["results"] == []
    logged = QueryLog.objects.filter(query="xylophone quantum zeppelin").values_list("hit_count", flat=True)
    assert list(logged) == [0, 0]
    found = alice.get("/kb/api/search/", {"q": "snapshots kept for 35 days", "mode": "hybrid"}).json()
    assert found["count"] == 1 and found["results"][0]["relevance"] >= DEFAULT_MIN_SCORE


def test_relevance_is_calibrated_per_embedding_space(kb: rag.Collection, settings) -> None:
    # A wider hashing space spreads unrelated texts differently: its background is its own.
    wide = background_for(kb.get_embedder())
    settings.RAG = {
        **settings.RAG,
        "EMBEDDERS": {
            "default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}
        },
    }
    narrow = background_for(rag.collection("notes").get_embedder())
    assert (wide.space, narrow.space) == ("hashing:1024", "hashing:64")
    assert narrow.spread > wide.spread


def test_a_hybrid_hit_combines_meaning_and_words_as_independent_evidence() -> None:
    """Each alone gives its own value; some of each beats either alone; nothing exceeds 1."""
    from django_rag.search.relevance import combined

    assert combined(0.4, 0.0) == pytest.approx(0.4)
    assert combined(0.0, 0.45) == pytest.approx(0.45)
    assert combined(0.3, 0.3) == pytest.approx(0.51)  # neither alone reaches the 0.5 cutoff
    assert combined(0.3, 0.3) > max(0.3, 0.3)
    assert combined(1.0, 0.2) == 1.0 and combined(0.0, 0.0) == 0.0
