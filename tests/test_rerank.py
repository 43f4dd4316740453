"""Rerankers (callable and Cohere-style HTTP, against a loopback server) and MMR diversity."""

from __future__ import annotations

import json
import math
import random
import re
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

import django_rag as rag
from django_rag.search.mmr import embeddings_for, mmr, mmr_hits
from django_rag.search.rerank import CallableReranker, HTTPReranker, Reranker, get_reranker
from django_rag.stores import get_store
from django_rag.stores.memory import MemoryStore
from django_rag.types import ChunkData, Hit

TEXTS = ["pasta recipes", "nightly backup to tape", "restore a database backup", "billing"]


def hits_for(texts: Sequence[str]) -> list[Hit]:
    return [
        Hit(
            chunk=ChunkData(index=0, content=text),
            document=None,
            score=1.0 - i / 10,
            vector_rank=i + 1,
            source_id=text,
        )
        for i, text in enumerate(texts)
    ]


def overlap(query: str, texts: list[str]) -> list[float]:
    """A toy cross-encoder: the share of query words found in each text."""
    words = set(re.findall(r"\w+", query.lower()))
    return [len(words & set(re.findall(r"\w+", text.lower()))) / len(words) for text in texts]


# callable adapter


def test_callable_reranker_reorders_hits_by_its_scores() -> None:
    hits = hits_for(TEXTS)

    ranked = CallableReranker(overlap).rerank("database backup", hits)

    assert [hit.source_id for hit in ranked] == [
        "restore a database backup",
        "nightly backup to tape",
        "pasta recipes",
        "billing",
    ]
    assert [hit.score for hit in ranked] == [1.0, 0.5, 0.0, 0.0]


def test_reranked_hits_are_new_objects_that_keep_their_retrieval_rank() -> None:
    hits = hits_for(TEXTS)

    best = CallableReranker(overlap).rerank("database backup", hits)[0]

    assert best.vector_rank == 3 and best.chunk is hits[2].chunk
    assert hits[2].score == pytest.approx(0.8)  # the input is untouched


def test_top_n_keeps_only_the_best() -> None:
    ranked = CallableReranker(overlap).rerank("database backup", hits_for(TEXTS), top_n=2)

    assert [hit.source_id for hit in ranked] == ["restore a database backup", "nightly backup to tape"]


def test_equal_scores_keep_retrieval_order() -> None:
    ranked = CallableReranker(lambda query, texts: [0.5] * len(texts)).rerank("q", hits_for(TEXTS))

    assert [hit.source_id for hit in ranked] == TEXTS


def test_a_function_returning_the_wrong_number_of_scores_is_a_reranker_error() -> None:
    with pytest.raises(rag.RerankerError, match="returned 1 scores for 4 texts"):
        CallableReranker(lambda query, texts: [1.0]).rerank("q", hits_for(TEXTS))


def test_a_bad_top_n_is_a_query_error() -> None:
    with pytest.raises(rag.QueryError, match="top_n must be a positive integer"):
        CallableReranker(overlap).rerank("q", hits_for(TEXTS), top_n=0)


def test_get_reranker_loads_a_settings_alias_with_a_dotted_function() -> None:
    rerankers = {
        "local": {
            "BACKEND": "django_rag.search.rerank.CallableReranker",
            "FUNCTION": "tests.test_rerank.overlap",
        }
    }
    with override_settings(RAG={**settings.RAG, "RERANKERS": rerankers}):
        reranker = get_reranker("local")

    assert isinstance(reranker, Reranker)
    assert reranker.rerank("database backup", hits_for(TEXTS))[0].source_id == "restore a database backup"


def test_get_reranker_wraps_a_plain_function_and_passes_instances_through() -> None:
    reranker = CallableReranker(overlap)

    assert get_reranker(reranker) is reranker
    assert isinstance(get_reranker(overlap), CallableReranker)


def test_an_unknown_reranker_alias_is_a_configuration_error() -> None:
    with pytest.raises(
        rag.ConfigurationError, match=r"no reranker named 'nope'; RAG\['RERANKERS'\] defines none"
    ):
        get_reranker("nope")


def test_an_unimportable_reranker_backend_is_a_configuration_error() -> None:
    with pytest.raises(rag.ConfigurationError, match=r"cannot import reranker backend 'nowhere\.Reranker'"):
        get_reranker({"BACKEND": "nowhere.Reranker"})


# HTTP adapter against a Cohere-style loopback server


class RerankServer:
    """``POST /v1/rerank`` in Cohere's shape, scoring by word overlap; failures can be injected."""

    def __init__(self, api_key: str = "secret") -> None:
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self.failures: deque[tuple[int, dict[str, str]]] = deque()
        self.body_override: bytes | None = None
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                if self.headers.get("Authorization") != f"Bearer {owner.api_key}":
                    return self.reply(401, {"message": "invalid api token"})
                if owner.failures:
                    status, headers = owner.failures.popleft()
                    return self.reply(status, {"message": "slow down"}, headers)
                if owner.body_override is not None:
                    return self.reply(200, None, raw=owner.body_override)
                scores = overlap(body["query"], body["documents"])
                results = sorted(
                    ({"index": i, "relevance_score": s} for i, s in enumerate(scores)),
                    key=lambda item: -item["relevance_score"],
                )
                return self.reply(200, {"id": "r1", "results": results[: body.get("top_n")]})

            def reply(
                self,
                status: int,
                payload: Any,
                headers: dict[str, str] | None = None,
                raw: bytes | None = None,
            ) -> None:
                data = raw if raw is not None else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/rerank"

    def __enter__(self) -> RerankServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[RerankServer]:
    with RerankServer() as running:
        yield running


def http_reranker(server: RerankServer, **options: Any) -> HTTPReranker:
    defaults: dict[str, Any] = {
        "url": server.url,
        "api_key": "secret",
        "backoff_base": 0.001,
        "backoff_max": 0.05,
    }
    return HTTPReranker(**{**defaults, **options})


def test_http_reranker_sends_the_cohere_shape_and_reorders(server: RerankServer) -> None:
    ranked = http_reranker(server, model="rerank-test").rerank("database backup", hits_for(TEXTS))

    assert [hit.source_id for hit in ranked][:2] == [
        "restore a database backup",
        "nightly backup to tape",
    ]
    assert ranked[0].score == 1.0
    [request] = server.requests
    assert request == {
        "path": "/v1/rerank",
        "auth": "Bearer secret",
        "model": "rerank-test",
        "query": "database backup",
        "documents": TEXTS,
    }


def test_http_reranker_sends_top_n_and_keeps_only_what_comes_back(server: RerankServer) -> None:
    ranked = http_reranker(server).rerank("database backup", hits_for(TEXTS), top_n=1)

    assert [hit.source_id for hit in ranked] == ["restore a database backup"]
    assert server.requests[0]["top_n"] == 1


def test_http_reranker_retries_a_rate_limit_then_succeeds(server: RerankServer) -> None:
    server.failures.append((429, {"Retry-After": "0.01"}))

    ranked = http_reranker(server).rerank("database backup", hits_for(TEXTS))

    assert len(server.requests) == 2
    assert ranked[0].source_id == "restore a database backup"


def test_http_reranker_gives_up_after_its_retries(server: RerankServer) -> None:
    server.failures.extend([(503, {})] * 5)

    with pytest.raises(rag.RerankerError, match=r"failed after 3 attempts \(last: HTTP 503: slow down\)"):
        http_reranker(server, max_retries=2).rerank("q", hits_for(TEXTS))

    assert len(server.requests) == 3


def test_http_reranker_auth_failure_fails_at_once_naming_the_setting(server: RerankServer) -> None:
    with pytest.raises(rag.RerankerError, match=r"refused the API key \(401: invalid api token\).*API_KEY"):
        http_reranker(server, api_key="wrong").rerank("q", hits_for(TEXTS))

    assert len(server.requests) == 1


def test_http_reranker_rejects_an_unusable_response(server: RerankServer) -> None:
    server.body_override = b'{"results": [{"index": 7, "relevance_score": 1.0}]}'

    with pytest.raises(rag.RerankerError, match="unexpected result index 7"):
        http_reranker(server).rerank("q", hits_for(TEXTS))


def test_http_reranker_sends_nothing_for_no_hits(server: RerankServer) -> None:
    assert http_reranker(server).rerank("q", []) == []
    assert server.requests == []


def test_http_reranker_from_settings(server: RerankServer) -> None:
    config = {
        "BACKEND": "django_rag.search.rerank.HTTPReranker",
        "URL": server.url,
        "API_KEY": "secret",
        "MODEL": "m",
    }
    with override_settings(RAG={**settings.RAG, "RERANKERS": {"default": config}}):
        reranker = get_reranker()

    assert isinstance(reranker, HTTPReranker) and (reranker.url, reranker.model) == (server.url, "m")


# MMR

QUERY = [1.0, 0.0, 0.0]
BEST = [0.9, 0.1, 0.0]
NEAR_DUPLICATE = [0.89, 0.11, 0.0]
DIFFERENT = [0.6, -0.8, 0.0]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.hypot(*a) / math.hypot(*b)


def test_mmr_picks_a_dissimilar_second_item_over_a_near_duplicate() -> None:
    candidates = [("best", BEST), ("near-duplicate", NEAR_DUPLICATE), ("different", DIFFERENT)]

    assert mmr(QUERY, candidates, k=2, lambda_=0.5) == ["best", "different"]


def test_mmr_with_lambda_one_is_plain_ranking_by_similarity() -> None:
    rng = random.Random(7)
    vectors = [[rng.uniform(-1, 1) for _ in range(16)] for _ in range(30)]
    query = [rng.uniform(-1, 1) for _ in range(16)]
    by_similarity = sorted(range(30), key=lambda i: -cosine(query, vectors[i]))

    assert mmr(query, list(enumerate(vectors)), k=10, lambda_=1.0) == by_similarity[:10]


def test_mmr_rejects_a_lambda_outside_zero_to_one() -> None:
    with pytest.raises(rag.QueryError, match="lambda must be between 0 and 1"):
        mmr(QUERY, [("a", BEST)], k=1, lambda_=1.5)


def test_mmr_uses_the_vectors_chunkdata_hits_carry() -> None:
    hits = hits_for(["best", "near-duplicate", "different"])
    for hit, vector in zip(hits, [BEST, NEAR_DUPLICATE, DIFFERENT], strict=True):
        hit.chunk.embedding = vector  # type: ignore[union-attr]

    assert [hit.source_id for hit in mmr_hits(QUERY, hits, k=2, store=MemoryStore())] == ["best", "different"]


@pytest.mark.django_db
def test_mmr_hits_fetch_chunk_embeddings_in_one_query(django_assert_num_queries: Any) -> None:
    kb = rag.collection("docs")
    kb.index(
        [
            rag.RagDocument("a", "nightly database backup to tape"),
            rag.RagDocument("a-copy", "nightly database backup to tape."),
            rag.RagDocument("b", "database restore drills every quarter"),
        ]
    )
    query = kb.get_embedder().embed_query("nightly database backup")
    hits = kb.search(query, k=3)
    assert [hit.source_id for hit in hits][:2] in (["a", "a-copy"], ["a-copy", "a"])

    with django_assert_num_queries(1):
        vectors = embeddings_for(hits, get_store())
    diverse = mmr_hits(query, hits, k=2, lambda_=0.3, store=get_store())

    assert len(vectors) == 3 and len(vectors[0]) == 64
    assert [hit.source_id for hit in diverse][1] == "b"
