"""The OpenAI embedder, run with the real ``openai`` client against the loopback double."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from django_rag.embedders.base import load_embedder
from django_rag.embedders.openai import OpenAIEmbedder
from django_rag.exceptions import ConfigurationError, EmbedderError
from django_rag.testing import HashingEmbedder, OpenAICompatibleServer

TEXTS = [f"document number {i} about backups and restores" for i in range(10)]


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(dimensions=32) as running:
        yield running


def make_embedder(server: OpenAICompatibleServer, **options: Any) -> OpenAIEmbedder:
    defaults: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "test-key",
        "model": "text-embedding-3-small",
        "dimensions": 64,
        "backoff_base": 0.001,
        "backoff_max": 0.05,
    }
    return OpenAIEmbedder(**{**defaults, **options})


def expected(texts: list[str], dimensions: int = 64) -> list[list[float]]:
    return HashingEmbedder(dimensions=dimensions).embed_documents(texts)


def assert_vectors_equal(actual: list[list[float]], wanted: list[list[float]]) -> None:
    # The client fetches base64 float32 by default, so values are float32-rounded.
    assert len(actual) == len(wanted)
    for got, want in zip(actual, wanted, strict=True):
        assert got == pytest.approx(want, abs=1e-6)


def embedding_requests(server: OpenAICompatibleServer) -> list[Any]:
    return [request.body for request in server.requests if request.path == "/v1/embeddings"]


def test_vectors_match_the_hashing_embedder(server: OpenAICompatibleServer) -> None:
    vectors = make_embedder(server).embed_documents(TEXTS[:3])

    assert_vectors_equal(vectors, expected(TEXTS[:3]))


def test_client_asks_for_base64_and_decodes_it(server: OpenAICompatibleServer) -> None:
    make_embedder(server).embed_documents(["hello"])

    assert embedding_requests(server)[0]["encoding_format"] == "base64"


def test_documents_are_sent_in_batches_of_batch_size(server: OpenAICompatibleServer) -> None:
    vectors = make_embedder(server, batch_size=4).embed_documents(TEXTS)

    assert [len(body["input"]) for body in embedding_requests(server)] == [4, 4, 2]
    assert_vectors_equal(vectors, expected(TEXTS))


@pytest.mark.parametrize(
    ("model", "send_dimensions", "sent"),
    [
        ("text-embedding-3-small", None, True),
        ("text-embedding-3-large", None, True),
        ("text-embedding-ada-002", None, False),
        ("nomic-embed-text", None, False),
        ("nomic-embed-text", True, True),
        ("text-embedding-3-small", False, False),
    ],
)
def test_dimensions_parameter_is_sent_only_where_supported(
    server: OpenAICompatibleServer, model: str, send_dimensions: bool | None, sent: bool
) -> None:
    # Without `dimensions` the server answers with its default width (32).
    dimensions = 64 if sent else 32
    embedder = make_embedder(server, model=model, dimensions=dimensions, send_dimensions=send_dimensions)

    vectors = embedder.embed_documents(["one text"])

    body = embedding_requests(server)[0]
    assert body["model"] == model
    assert body.get("dimensions") == (64 if sent else None)
    assert len(vectors[0]) == dimensions


def test_results_follow_input_order_when_the_server_reorders_them(server: OpenAICompatibleServer) -> None:
    server.out_of_order = True
    raw = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    assert [item.index for item in raw.embeddings.create(model="m", input=["a", "b", "c"]).data] == [2, 1, 0]

    vectors = make_embedder(server).embed_documents(TEXTS[:5])

    assert_vectors_equal(vectors, expected(TEXTS[:5]))


def test_empty_strings_are_sent_as_a_space(server: OpenAICompatibleServer) -> None:
    vectors = make_embedder(server).embed_documents(["", "hello"])

    assert embedding_requests(server)[0]["input"] == [" ", "hello"]
    assert_vectors_equal(vectors, expected([" ", "hello"]))


def test_server_rejects_empty_strings_like_openai(server: OpenAICompatibleServer) -> None:
    raw = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)

    with pytest.raises(openai.BadRequestError):
        raw.embeddings.create(model="m", input=["", "x"])


def test_rate_limit_is_retried_honouring_retry_after(server: OpenAICompatibleServer) -> None:
    server.fail_next(2, status=429, retry_after=0.2)
    embedder = make_embedder(server, backoff_max=1.0)

    started = time.monotonic()
    vectors = embedder.embed_documents(["hello"])
    elapsed = time.monotonic() - started

    assert len(server.requests) == 3
    assert elapsed >= 0.4  # two waits of Retry-After, not the 1 ms backoff
    assert_vectors_equal(vectors, expected(["hello"]))


def test_retry_after_is_capped_at_backoff_max(server: OpenAICompatibleServer) -> None:
    server.fail_next(1, status=429, retry_after=30)

    started = time.monotonic()
    make_embedder(server, backoff_max=0.05).embed_documents(["hello"])

    assert time.monotonic() - started < 2
    assert len(server.requests) == 2


@pytest.mark.parametrize("status", [500, 502, 503, 408, 409])
def test_transient_server_errors_are_retried(server: OpenAICompatibleServer, status: int) -> None:
    server.fail_next(1, status=status)

    vectors = make_embedder(server).embed_documents(["hello"])

    assert len(server.requests) == 2
    assert_vectors_equal(vectors, expected(["hello"]))


def test_a_timeout_is_retried(server: OpenAICompatibleServer) -> None:
    server.delay_next(1, seconds=3.0)

    started = time.monotonic()
    vectors = make_embedder(server, timeout=0.3).embed_documents(["hello"])

    assert time.monotonic() - started < 2.5
    assert len(server.requests) == 2
    assert_vectors_equal(vectors, expected(["hello"]))


def test_connection_errors_are_retried_then_reported() -> None:
    with OpenAICompatibleServer() as stopped:
        base_url = stopped.base_url
    embedder = OpenAIEmbedder(base_url=base_url, api_key="k", dimensions=8, max_retries=2, backoff_base=0.001)

    with pytest.raises(EmbedderError, match=r"after 3 attempts \(last: connection error"):
        embedder.embed_documents(["hello"])


def test_rejected_api_key_fails_at_once() -> None:
    with OpenAICompatibleServer(api_key="right-key") as server:
        embedder = make_embedder(server, api_key="wrong-key")

        with pytest.raises(EmbedderError, match="OpenAI rejected the API key") as excinfo:
            embedder.embed_documents(["hello"])

        assert len(server.requests) == 1
        assert server.requests[0].headers["authorization"] == "Bearer wrong-key"
    assert "OPENAI_API_KEY" in str(excinfo.value)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "rejected the request"),
        (401, "OpenAI rejected the API key"),
        (403, "refused access"),
        (404, "model 'text-embedding-3-small' was not found at http://127.0.0.1"),
        (422, "rejected the request"),
    ],
)
def test_client_errors_are_not_retried(server: OpenAICompatibleServer, status: int, message: str) -> None:
    server.fail_next(5, status=status)

    with pytest.raises(EmbedderError, match=message):
        make_embedder(server).embed_documents(["hello"])

    assert len(server.requests) == 1


def test_exhausted_retries_raise_embedder_error_naming_status_attempts_and_url(
    server: OpenAICompatibleServer,
) -> None:
    server.fail_next(10, status=503)

    with pytest.raises(EmbedderError) as excinfo:
        make_embedder(server, max_retries=2).embed_documents(["hello"])

    message = str(excinfo.value)
    assert "3 attempts" in message
    assert "HTTP 503" in message
    assert server.base_url in message
    assert len(server.requests) == 3


def test_embed_query(server: OpenAICompatibleServer) -> None:
    vector = make_embedder(server).embed_query("how do I restore a backup?")

    assert vector == pytest.approx(expected(["how do I restore a backup?"])[0], abs=1e-6)
    assert embedding_requests(server) == [
        {
            "model": "text-embedding-3-small",
            "input": ["how do I restore a backup?"],
            "dimensions": 64,
            "encoding_format": "base64",
        }
    ]


def test_a_missing_api_key_is_reported_when_the_embedder_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    embedder = OpenAIEmbedder(model="text-embedding-3-small", dimensions=64)  # building needs no secret
    with pytest.raises(
        ConfigurationError, match=r"RAG\['EMBEDDERS'\]\[<alias>\]\['API_KEY'\].*OPENAI_API_KEY"
    ):
        embedder.embed_query("hello")


def test_api_key_defaults_to_the_environment(
    server: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")

    make_embedder(server, api_key=None).embed_query("hello")

    assert server.requests[0].headers["authorization"] == "Bearer env-key"


def test_missing_openai_package_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # makes `import openai` raise ImportError

    with pytest.raises(ConfigurationError, match=r'pip install "django-rag\[openai\]"'):
        OpenAIEmbedder(api_key="k", dimensions=64)


def test_unknown_option_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="unknown options"):
        OpenAIEmbedder(api_key="k", dimensions=64, temperature=0.5)


def test_loads_from_a_settings_dict(server: OpenAICompatibleServer) -> None:
    embedder = load_embedder(
        {
            "BACKEND": "django_rag.embedders.openai.OpenAIEmbedder",
            "BASE_URL": server.base_url,
            "API_KEY": "x",
            "MODEL": "text-embedding-3-large",
            "DIMENSIONS": 64,
        }
    )

    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.space == "text-embedding-3-large:64"
    assert_vectors_equal(embedder.embed_documents(["hello"]), expected(["hello"]))


def test_chat_completion_cites_numbered_context(server: OpenAICompatibleServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    prompt = "Context:\n[1] Backups run nightly at 02:00.\n[2] Restores need an admin.\n\nQ: when?"

    completion = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
    )

    content = completion.choices[0].message.content or ""
    assert "[1]" in content
    assert "Backups run nightly" in content
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (
        completion.usage.total_tokens
        == completion.usage.prompt_tokens + completion.usage.completion_tokens
        > 0
    )


def test_chat_completion_without_context_cites_nothing(server: OpenAICompatibleServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)

    completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    assert "[" not in (completion.choices[0].message.content or "")


def test_chat_completion_streams_the_same_answer(server: OpenAICompatibleServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    messages: Any = [
        {"role": "system", "content": "[1] Backups run nightly."},
        {"role": "user", "content": "?"},
    ]
    whole = client.chat.completions.create(model="m", messages=messages).choices[0].message.content

    chunks = list(
        client.chat.completions.create(
            model="m", messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )

    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert len(chunks) > 3
    assert text == whole
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_models_are_listed(server: OpenAICompatibleServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)

    assert "text-embedding-3-small" in [model.id for model in client.models.list()]


def test_server_requires_a_bearer_token(server: OpenAICompatibleServer) -> None:
    request = urllib.request.Request(
        f"{server.base_url}/embeddings",
        data=json.dumps({"model": "m", "input": ["x"]}).encode(),
        headers={"Content-Type": "application/json"},
    )

    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.urlopen(request, timeout=5)

    assert excinfo.value.code == 401
    assert json.loads(excinfo.value.read())["error"]["code"] == "missing_api_key"
