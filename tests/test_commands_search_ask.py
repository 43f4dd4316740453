"""``rag_search`` and ``rag_ask``: thin commands over search() and ask(), with clear errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

import django_rag as rag
from django_rag.answer import NOT_ENOUGH_INFORMATION
from django_rag.search import MODES
from django_rag.testing import OpenAICompatibleServer

pytestmark = pytest.mark.django_db

DOCS = [
    rag.RagDocument(
        "manual/backup",
        "Backups run every night at 02:00 and backups are kept for 30 days.",
        {"title": "Backup guide", "page": 3, "source": "https://docs.example.com/backup.pdf", "year": 2024},
        tags=["manual"],
    ),
    rag.RagDocument(
        "faq/restore",
        "To restore one of the backups, open Settings and pick a date.",
        {"title": "Restore FAQ"},
    ),
    rag.RagDocument(
        "faq/billing", "Invoices are emailed on the first day of each month.", {"title": "Billing"}
    ),
]


@pytest.fixture
def kb() -> rag.Collection:
    collection = rag.collection("docs")
    collection.index(DOCS)
    return collection


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(dimensions=64) as running:
        chat = {
            "BACKEND": "django_rag.answer.chat.OpenAIChat",
            "BASE_URL": running.base_url,
            "API_KEY": "test",
        }
        with override_settings(RAG={**settings.RAG, "CHAT": {**chat, "MAX_RETRIES": 0}}):
            yield running


def run(command: str, *args: str, **options: Any) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out, stderr=StringIO(), **options)
    return out.getvalue()


# rag_search


def test_rag_search_prints_rank_score_source_page_and_snippet(kb: rag.Collection) -> None:
    lines = run("rag_search", "when do backups run", "--collection", "docs", "-k", "2").splitlines()

    assert len(lines) == 2
    rank, score, source_id, page, *snippet = lines[0].split()
    assert (rank, source_id, page) == ("1", "manual/backup", "p.3")
    assert 0 < float(score) <= 1
    assert " ".join(snippet).startswith("Backups run every night at 02:00")


def test_rag_search_json_prints_one_object_per_hit(kb: rag.Collection) -> None:
    output = run("rag_search", "when do backups run", "--collection", "docs", "--json")

    rows = [json.loads(line) for line in output.splitlines()]
    assert [row["rank"] for row in rows] == [1, 2, 3]
    assert rows[0]["source_id"] == "manual/backup"
    assert (rows[0]["title"], rows[0]["page"], rows[0]["source"]) == (
        "Backup guide",
        3,
        "https://docs.example.com/backup.pdf",
    )


def test_rag_search_tags_and_filters_narrow_the_search(kb: rag.Collection) -> None:
    by_tag = run("rag_search", "invoices", "-c", "docs", "--tags", "manual,other", "--json")
    by_filter = run("rag_search", "invoices", "-c", "docs", "--filter", "year=2024", "--json")

    assert [json.loads(line)["source_id"] for line in by_tag.splitlines()] == ["manual/backup"]
    assert [json.loads(line)["source_id"] for line in by_filter.splitlines()] == ["manual/backup"]


def test_rag_search_says_so_when_nothing_matches(kb: rag.Collection) -> None:
    assert run("rag_search", "backups", "-c", "docs", "--tenant", "nobody") == "No results.\n"


def test_rag_search_at_verbosity_zero_prints_rank_score_and_source_only(kb: rag.Collection) -> None:
    first = run("rag_search", "when do backups run", "-c", "docs", verbosity=0).splitlines()[0]

    assert first.split()[::2] == ["1", "manual/backup"]


def test_rag_search_uses_the_only_declared_collection_when_none_is_given(kb: rag.Collection) -> None:
    with override_settings(RAG={**settings.RAG, "COLLECTIONS": {"docs": {}}}):
        assert "manual/backup" in run("rag_search", "when do backups run")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["   ", "-c", "docs"], "the search query is empty"),
        (["x" * 20_001, "-c", "docs"], "the limit is 20000"),
        (["backups", "-c", "nope"], "unknown collection 'nope'"),
        (["backups"], r"pass --collection NAME \(declared collections: docs, notes\)"),
        (["backups", "-c", "docs", "-k", "0"], "k must be an integer between 1 and 1000, got 0"),
        (["backups", "-c", "docs", "-k", "5000"], "k must be an integer between 1 and 1000, got 5000"),
        (["backups", "-c", "docs", "-k", "many"], "argument -k: invalid int value: 'many'"),
        (["backups", "-c", "docs", "--mode", "fuzzy"], "unknown search mode 'fuzzy'"),
        (["backups", "-c", "docs", "--filter", "year"], "--filter takes KEY=VALUE, got 'year'"),
        (["backups", "-c", "docs", "--tags", " , "], "--tags needs at least one tag"),
        (["backups", "-c", "docs", "--min-score", "7"], "min_score"),
        (["backups", "-c", "docs", "--mode", "text", "--syntax", "regex"], "unknown query syntax 'regex'"),
    ],
)
def test_rag_search_bad_input_is_a_command_error(kb: rag.Collection, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("rag_search", *args)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", ["backup & | ! (restore", "'; DROP TABLE django_rag_chunk; --", "<->:*\\"])
def test_rag_search_takes_query_syntax_characters_as_text(kb: rag.Collection, mode: str, query: str) -> None:
    run("rag_search", query, "-c", "docs", "--mode", mode, "--json")

    assert rag.collection("docs").chunks().count() == 3


def test_rag_search_passes_the_query_syntax_through(kb: rag.Collection) -> None:
    output = run(
        "rag_search", '"open settings" -invoices', "-c", "docs", "--mode", "text", "--syntax", "websearch"
    )

    assert [line.split()[2] for line in output.splitlines()] == ["faq/restore"]


# rag_ask


def test_rag_ask_prints_the_answer_and_numbered_sources(
    kb: rag.Collection, server: OpenAICompatibleServer
) -> None:
    server.chat_reply = "Nightly at 02:00 [1]; restore from Settings [2]."

    output = run("rag_ask", "when do backups run?", "-c", "docs", "-k", "2")

    answer, sources = output.split("\n\nSources:\n")
    assert answer == "Nightly at 02:00 [1]; restore from Settings [2]."
    assert sources.splitlines() == [
        "[1] Backup guide, page 3 — https://docs.example.com/backup.pdf",
        "[2] Restore FAQ",
    ]


def test_rag_ask_stream_prints_the_same_answer(kb: rag.Collection, server: OpenAICompatibleServer) -> None:
    plain = run("rag_ask", "when do backups run?", "-c", "docs")

    streamed = run("rag_ask", "when do backups run?", "-c", "docs", "--stream")

    assert streamed == plain
    assert server.requests[-1].body["stream"] is True


def test_rag_ask_json_prints_answer_citations_and_usage(
    kb: rag.Collection, server: OpenAICompatibleServer
) -> None:
    server.chat_reply = "Kept 30 days [1]."

    result = json.loads(run("rag_ask", "how long are backups kept?", "-c", "docs", "--json"))

    assert result["answer"] == "Kept 30 days [1]."
    assert [(c["n"], c["source_id"], c["page"]) for c in result["citations"]] == [(1, "manual/backup", 3)]
    assert result["usage"]["total_tokens"] > 0


def test_rag_ask_without_matching_passages_answers_without_the_model(
    kb: rag.Collection, server: OpenAICompatibleServer
) -> None:
    output = run("rag_ask", "when do backups run?", "-c", "docs", "--min-score", "0.99")

    assert output == f"{NOT_ENOUGH_INFORMATION}\n"
    assert server.requests == []


def test_rag_ask_verbosity_two_lists_every_passage_and_the_usage(
    kb: rag.Collection, server: OpenAICompatibleServer
) -> None:
    output = run("rag_ask", "when do backups run?", "-c", "docs", verbosity=2)

    assert "Passages:\n[1] Backup guide, page 3" in output and "cited)" in output
    assert "[3] " in output
    assert "Usage: prompt_tokens" in output


def test_rag_ask_chat_failure_is_a_command_error(kb: rag.Collection, server: OpenAICompatibleServer) -> None:
    server.fail_next(1, status=401)

    with pytest.raises(CommandError, match=r"rejected the API key.*RAG\['CHAT'\]\['API_KEY'\]"):
        run("rag_ask", "when do backups run?", "-c", "docs")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["", "-c", "docs"], "the question is empty"),
        (["backups?", "-c", "nope"], "unknown collection 'nope'"),
        (["backups?", "-c", "docs", "-k", "0"], "k must be an integer between 1 and 1000"),
        (["backups?", "-c", "docs", "--mode", "fuzzy"], "unknown search mode 'fuzzy'"),
        (["backups?", "-c", "docs", "--stream", "--json"], "--stream and --json cannot be combined"),
    ],
)
def test_rag_ask_bad_input_is_a_command_error(
    kb: rag.Collection, server: OpenAICompatibleServer, args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        run("rag_ask", *args)

    assert server.requests == []
