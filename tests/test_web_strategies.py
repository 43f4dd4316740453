"""The JSON endpoints take ``strategy``, ``n_queries`` and ``compress``, with the same scope and errors."""

from __future__ import annotations

import json

import pytest

from django_rag.testing import RerankServer

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.conftest_web"]

SEARCH_JSON = "/kb/api/search/"
ASK_JSON = "/kb/api/ask/"


def test_search_json_runs_a_multi_query_search(web, docs, alice, chat_server) -> None:
    assert alice.get(SEARCH_JSON, {"q": "invoice email", "mode": "text"}).json()["count"] == 1
    chat_server.reply_next("snapshots kept")

    data = alice.get(
        SEARCH_JSON, {"q": "invoice email", "mode": "text", "strategy": "multi_query", "n_queries": "1"}
    ).json()

    # The variant finds the backups document too; Globex's stays out of Acme's scope.
    assert [result["title"] for result in data["results"]] == ["Acme billing", "Acme backups"]


def test_search_json_compresses_passages(web, docs, alice, chat_server) -> None:
    chat_server.reply_next("2")  # of the two sentences of the first paragraph, the second

    data = alice.get(SEARCH_JSON, {"q": "snapshots kept", "mode": "text", "compress": "true"}).json()

    assert data["results"][0]["snippet"] == "Snapshots are kept for thirty days."


def test_ask_json_takes_strategy_options_in_a_json_body(web, docs, alice, chat_server) -> None:
    body = json.dumps({"q": "how long are snapshots kept?", "mode": "text", "strategy": "parent_document",
                       "n_queries": 2, "compress": False})  # fmt: skip

    data = alice.post(ASK_JSON, body, content_type="application/json").json()

    # The options reach the search (a bad one is a 400, below); the backups passage is cited.
    assert data["citations"] == [1] and "support desk" in data["sources"][0]["snippet"]


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"strategy": "hyde"}, "strategy", "Unknown strategy"),
        ({"strategy": "multi_query", "n_queries": "11"}, "n_queries", "between 1 and 10"),
        ({"strategy": "multi_query", "n_queries": "two"}, "n_queries", "between 1 and 10"),
    ],
)
def test_bad_strategy_options_are_a_400(web, docs, alice, params, field, message) -> None:
    response = alice.get(SEARCH_JSON, {"q": "snapshots", **params})

    assert response.status_code == 400
    assert response.json()["field"] == field and message in response.json()["error"]


def test_a_failing_chat_model_falls_back_to_the_original_query(web, docs, alice, chat_server) -> None:
    chat_server.fail_next(1, status=500)

    data = alice.get(SEARCH_JSON, {"q": "invoice email", "mode": "text", "strategy": "multi_query"}).json()

    assert [result["title"] for result in data["results"]] == ["Acme billing"]


def test_search_json_rerank_false_turns_the_collections_reranker_off(web, docs, alice, settings) -> None:
    """A collection's RERANKER reranks the JSON search; ``rerank=false`` skips it for one request,
    and ``rerank=true`` means the collection's own (a request never picks another reranker)."""
    with RerankServer("tei") as server:
        tei = {"BACKEND": "django_rag.search.rerankers.TEIReranker", "URL": server.url, "MAX_RETRIES": 0}
        collections = {**settings.RAG["COLLECTIONS"], "docs": {"RERANKER": "tei"}}
        settings.RAG = {**settings.RAG, "RERANKERS": {"tei": tei}, "COLLECTIONS": collections}

        reranked = alice.get(SEARCH_JSON, {"q": "snapshots kept", "mode": "text"})
        assert reranked.status_code == 200 and len(server.requests) == 1
        plain = alice.get(SEARCH_JSON, {"q": "snapshots kept", "mode": "text", "rerank": "false"})
        assert plain.status_code == 200 and len(server.requests) == 1  # nothing sent
        again = alice.get(SEARCH_JSON, {"q": "snapshots kept", "mode": "text", "rerank": "true"})
        assert again.status_code == 200 and len(server.requests) == 2

    assert plain.json()["count"] == reranked.json()["count"] >= 1
    bad = alice.get(SEARCH_JSON, {"q": "snapshots", "rerank": "cohere"})
    assert bad.status_code == 400 and bad.json()["field"] == "rerank"
    assert "rerank must be true or false" in bad.json()["error"]
