"""The ready rerankers (Cohere, Voyage, Jina, TEI), each against a loopback server speaking its API.

Every bad answer a server can give (a 5xx, a timeout, a NaN or a string for a score, an index
that is out of range, repeated or a float, a missing result, a body that is not JSON or not the
right shape) is a RerankerError, or with ON_ERROR "fallback" the hits in retrieval order: never
a ranking built on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

import django_rag as rag
from django_rag.search.rerank import HTTPReranker, get_reranker
from django_rag.search.rerankers import CohereReranker, JinaReranker, TEIReranker, VoyageReranker
from django_rag.testing import RerankServer, overlap_scores
from django_rag.testing.rerank_server import CORRUPTIONS
from django_rag.types import ChunkData, Hit

TEXTS = ["pasta recipes", "nightly backup to tape", "restore a database backup", "billing"]
BACKENDS: dict[str, type[HTTPReranker]] = {
    "cohere": CohereReranker,
    "voyage": VoyageReranker,
    "jina": JinaReranker,
    "tei": TEIReranker,
}
FAST = {"backoff_base": 0.001, "backoff_max": 0.01}


def hits_for(texts: Sequence[str]) -> list[Hit]:
    return [
        Hit(
            chunk=ChunkData(index=0, content=t),
            document=None,
            score=1.0 - i / 10,
            vector_rank=i + 1,
            source_id=t,
        )
        for i, t in enumerate(texts)
    ]


@pytest.fixture(params=sorted(BACKENDS))
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(provider: str) -> Iterator[RerankServer]:
    with RerankServer(provider, api_key="secret") as running:
        yield running


def reranker_for(server: RerankServer, **options: Any) -> HTTPReranker:
    return BACKENDS[server.provider](**{"url": server.url, "api_key": "secret", **FAST, **options})


# the wire formats


def test_each_backend_reorders_hits_by_the_services_scores(server: RerankServer) -> None:
    ranked = reranker_for(server).rerank("database backup", hits_for(TEXTS))

    assert [hit.source_id for hit in ranked] == [
        "restore a database backup",
        "nightly backup to tape",
        "pasta recipes",
        "billing",
    ]
    assert [hit.score for hit in ranked] == [1.0, 0.5, 0.0, 0.0]
    assert server.requests[0].headers["authorization"] == "Bearer secret"


def test_cohere_sends_its_v2_body() -> None:
    with RerankServer("cohere", api_key="k") as server:
        CohereReranker(url=server.url, api_key="k", max_tokens_per_doc=512).rerank(
            "backup", hits_for(TEXTS), top_n=2
        )
    [request] = server.requests
    assert request.path == "/v2/rerank"
    assert request.body == {
        "model": "rerank-v3.5",
        "query": "backup",
        "documents": TEXTS,
        "top_n": 2,
        "max_tokens_per_doc": 512,
    }


def test_voyage_sends_top_k_and_truncation_and_reads_data() -> None:
    with RerankServer("voyage", api_key="k") as server:
        ranked = VoyageReranker(url=server.url, api_key="k").rerank(
            "database backup", hits_for(TEXTS), top_n=1
        )
    assert [hit.source_id for hit in ranked] == ["restore a database backup"]
    assert server.requests[0].path == "/v1/rerank"
    assert server.requests[0].body == {
        "model": "rerank-2.5",
        "query": "database backup",
        "documents": TEXTS,
        "truncation": True,
        "top_k": 1,
    }


def test_jina_asks_for_no_documents_back() -> None:
    with RerankServer("jina", api_key="k") as server:
        JinaReranker(url=server.url, api_key="k").rerank("backup", hits_for(TEXTS), top_n=3)
    assert server.requests[0].body == {
        "model": "jina-reranker-v2-base-multilingual",
        "query": "backup",
        "documents": TEXTS,
        "top_n": 3,
        "return_documents": False,
    }


def test_tei_sends_texts_without_a_model_or_top_n_and_keeps_the_best_itself() -> None:
    with RerankServer("tei") as server:
        ranked = TEIReranker(url=server.url).rerank("database backup", hits_for(TEXTS), top_n=2)
    assert [hit.source_id for hit in ranked] == ["restore a database backup", "nightly backup to tape"]
    [request] = server.requests
    assert request.path == "/rerank" and "authorization" not in request.headers
    assert request.body == {
        "query": "database backup",
        "texts": TEXTS,
        "truncate": True,
        "raw_scores": False,
        "return_text": False,
    }


def test_tei_splits_a_list_longer_than_its_batch_limit() -> None:
    texts = [f"passage {i} about {'backup' if i % 7 == 0 else 'pasta'}" for i in range(70)]
    with RerankServer("tei", max_batch=32) as server:
        ranked = TEIReranker(url=server.url, batch_size=32).rerank("backup", hits_for(texts))
    assert [len(r.body["texts"]) for r in server.requests] == [32, 32, 6]
    scores = overlap_scores("backup", texts)
    assert [hit.source_id for hit in ranked] == sorted(texts, key=lambda t: -scores[texts.index(t)])


def test_tei_over_its_batch_limit_is_a_clear_error() -> None:
    with (
        RerankServer("tei", max_batch=2) as server,
        pytest.raises(rag.RerankerError, match=r"HTTP 422: batch size 4 > maximum allowed batch size 2"),
    ):
        TEIReranker(url=server.url, batch_size=8).rerank("backup", hits_for(TEXTS))


def test_tei_raw_scores_keep_the_order() -> None:
    with RerankServer("tei") as server:
        ranked = TEIReranker(url=server.url, raw_scores=True).rerank("database backup", hits_for(TEXTS))
    assert ranked[0].source_id == "restore a database backup" and ranked[0].score > 10
    assert ranked[-1].score < -10


# failures


def test_a_server_error_is_retried_then_succeeds(server: RerankServer) -> None:
    server.fail_next(2, status=503)

    ranked = reranker_for(server).rerank("database backup", hits_for(TEXTS))

    assert len(server.requests) == 3 and ranked[0].source_id == "restore a database backup"


def test_a_server_that_keeps_failing_is_a_reranker_error(server: RerankServer) -> None:
    server.fail_next(3, status=500)

    with pytest.raises(
        rag.RerankerError, match=r"failed after 3 attempts \(last: HTTP 500: injected failure"
    ):
        reranker_for(server, max_retries=2).rerank("backup", hits_for(TEXTS))


def test_a_timeout_is_retried_then_reported(server: RerankServer) -> None:
    server.delay_next(2, seconds=1.0)

    with pytest.raises(rag.RerankerError, match=r"failed after 2 attempts \(last: timed out after 0.2s\)"):
        reranker_for(server, timeout=0.2, max_retries=1).rerank("backup", hits_for(TEXTS))


def test_a_wrong_key_fails_at_once(server: RerankServer) -> None:
    with pytest.raises(rag.RerankerError, match=r"refused the API key \(401: invalid api token\)"):
        reranker_for(server, api_key="wrong").rerank("backup", hits_for(TEXTS))
    assert len(server.requests) == 1


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_a_malformed_answer_is_a_reranker_error(server: RerankServer, corruption: str) -> None:
    server.corrupt_next(corruption)

    with pytest.raises(rag.RerankerError) as caught:
        reranker_for(server).rerank("database backup", hits_for(TEXTS))

    expected = {
        "nan": "not a finite number: nan",
        "string_score": "not a finite number: '1.0'",
        "index_out_of_range": "unexpected result index 4 for 4 texts",
        "duplicate_index": "returned result index 2 twice",
        "missing_result": "returned 3 results; expected 4",
        "float_index": "unexpected result index 2.0",
        "not_json": "not JSON",
        "wrong_shape": "unusable response",
    }[corruption]
    assert expected in str(caught.value)
    assert len(server.requests) == 1  # a malformed answer is not retried: it would come back the same


@pytest.mark.parametrize("corruption", ["nan", "missing_result", "index_out_of_range"])
def test_fallback_returns_the_retrieval_order_unchanged(
    server: RerankServer, corruption: str, caplog: pytest.LogCaptureFixture
) -> None:
    server.corrupt_next(corruption)
    hits = hits_for(TEXTS)

    ranked = reranker_for(server, on_error="fallback").rerank("database backup", hits, top_n=3)

    assert ranked == hits[:3]  # retrieval order and scores, nothing from the bad answer
    assert "returning the hits in retrieval order" in caplog.text


def test_fallback_after_a_timeout(server: RerankServer) -> None:
    server.delay_next(1, seconds=1.0)
    hits = hits_for(TEXTS)

    assert reranker_for(server, timeout=0.2, max_retries=0, on_error="fallback").rerank("q", hits) == hits


def test_hosted_backends_without_a_key_fail_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("COHERE_API_KEY", "CO_API_KEY", "VOYAGE_API_KEY", "JINA_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    with (
        RerankServer("cohere") as server,
        pytest.raises(
            rag.RerankerError, match=r"has no API key; set API_KEY .* or COHERE_API_KEY or CO_API_KEY"
        ),
    ):
        CohereReranker(url=server.url).rerank("q", hits_for(TEXTS))
    assert server.requests == []


def test_the_key_comes_from_the_providers_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOYAGE_API_KEY", "from-env")
    with RerankServer("voyage", api_key="from-env") as server:
        ranked = VoyageReranker(url=server.url).rerank("database backup", hits_for(TEXTS))
    assert ranked[0].source_id == "restore a database backup"


# options and settings


@pytest.mark.parametrize(
    ("backend", "options", "message"),
    [
        (CohereReranker, {"URL": "ftp://x"}, "URL must be an http(s) URL"),
        (CohereReranker, {"TIMEOUT": 0}, "needs TIMEOUT > 0"),
        (CohereReranker, {"MAX_TOKENS_PER_DOC": -1}, "MAX_TOKENS_PER_DOC must be a positive integer"),
        (CohereReranker, {"TOP_K": 3}, "has no option 'TOP_K'"),
        (VoyageReranker, {"TRUNCATION": "yes"}, "TRUNCATION must be True or False"),
        (JinaReranker, {"ON_ERROR": "ignore"}, "ON_ERROR must be 'raise' or 'fallback'"),
        (TEIReranker, {"BATCH_SIZE": 0}, "BATCH_SIZE must be a positive integer"),
        (TEIReranker, {"MAX_RETRIES": -1}, "MAX_RETRIES must be a number >= 0"),
    ],
)
def test_check_options_reports_a_bad_option_and_construction_refuses_it(
    backend: type[HTTPReranker], options: dict[str, Any], message: str
) -> None:
    problems = backend.check_options({**options, "API_KEY": "k"})

    assert [p.message for p in problems if message in p.message] and not any(p.warning for p in problems)
    # An unknown option is refused by the generic loader, in its own words.
    refusal = "unexpected keyword argument 'top_k'" if "TOP_K" in options else re.escape(message)
    with pytest.raises(rag.ConfigurationError, match=refusal):
        get_reranker({"BACKEND": f"{backend.__module__}.{backend.__name__}", "API_KEY": "k", **options})


def test_check_options_warns_of_a_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JINA_API_KEY", raising=False)

    [problem] = JinaReranker.check_options({})

    assert problem.warning and "JINA_API_KEY" in problem.message
    assert TEIReranker.check_options({}) == []  # a self-hosted server needs no key


def test_backends_load_from_settings(provider: str) -> None:
    backend = BACKENDS[provider]
    config = {"BACKEND": f"django_rag.search.rerankers.{backend.__name__}", "API_KEY": "k", "TIMEOUT": 5}
    with override_settings(RAG={**settings.RAG, "RERANKERS": {"default": config}}):
        reranker = get_reranker()
    assert type(reranker) is backend and reranker.timeout == 5.0 and reranker.url == backend.default_url
