"""``rag_search``/``rag_ask --strategy --n-queries --compress`` and the JSON endpoints' strategy fields."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

import django_rag as rag
from django_rag.testing import OpenAICompatibleServer

pytestmark = pytest.mark.django_db

DOCS = [
    rag.RagDocument("pets/cats", "Feline companions purr when content and sleep most of the day."),
    rag.RagDocument("pets/dogs", "Canine companions need a walk twice a day and bark at strangers."),
]


@pytest.fixture
def kb() -> rag.Collection:
    collection = rag.collection("docs")
    collection.index(DOCS)
    return collection


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(dimensions=64) as running:
        chat = {"BACKEND": "django_rag.answer.chat.OpenAIChat", "BASE_URL": running.base_url, "API_KEY": "t"}
        with override_settings(RAG={**settings.RAG, "CHAT": {**chat, "MAX_RETRIES": 0}}):
            yield running


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


def test_rag_search_runs_a_multi_query_search(kb: rag.Collection, server: OpenAICompatibleServer) -> None:
    server.reply_next("canine walk")

    lines = run("rag_search", "feline purr", "-c", "docs", "--mode", "text", "--strategy", "multi_query",
                "--n-queries", "1", "--json").splitlines()  # fmt: skip

    assert [json.loads(line)["source_id"] for line in lines] == ["pets/cats", "pets/dogs"]


def test_rag_search_compresses_without_a_chat_model(kb: rag.Collection) -> None:
    lines = run(
        "rag_search", "feline purr", "-c", "docs", "--mode", "text", "--compress", "--json"
    ).splitlines()

    assert json.loads(lines[0])["content"] == DOCS[0].text  # one sentence: nothing to cut


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "hyde"], "unknown retrieval strategy 'hyde'"),
        (["--strategy", "multi_query", "--n-queries", "0"], "n_queries must be an integer between 1 and 10"),
        (["--strategy", "multi_query"], "needs a chat model"),
    ],
)
def test_rag_search_reports_bad_strategy_options(kb: rag.Collection, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("rag_search", "feline", "-c", "docs", *args)


def test_rag_ask_answers_from_a_multi_query_search(
    kb: rag.Collection, server: OpenAICompatibleServer
) -> None:
    server.reply_next("canine walk")  # the variant; the answer is the server's own

    out = run("rag_ask", "feline purr", "-c", "docs", "--mode", "text", "--strategy", "multi_query",
              "--n-queries", "1", "--json")  # fmt: skip

    answer = json.loads(out)
    assert [citation["source_id"] for citation in answer["citations"]] == ["pets/cats"]
    variants, answering = [r for r in server.requests if r.path == "/v1/chat/completions"]
    assert (
        "Write 1 alternative versions of this query:\nfeline purr" in variants.body["messages"][1]["content"]
    )
    assert "Canine companions" in answering.body["messages"][-1]["content"]  # found by the variant
