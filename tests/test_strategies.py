"""Retrieval strategies (multi_query, parent_document) and compress, against real Postgres and the
loopback OpenAI-compatible server; each with its bad input."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from django.test import override_settings

import django_rag as rag
from django_rag.answer.chat import OpenAIChat
from django_rag.exceptions import ConfigurationError, QueryError
from django_rag.ingest.chunking import split_text
from django_rag.search.strategies import MAX_N_QUERIES, fuse_rankings, to_parents
from django_rag.stores import DocumentInfo, QueryScope, SearchRequest
from django_rag.stores.memory import MemoryStore
from django_rag.testing import OpenAICompatibleServer
from django_rag.types import ChunkData, Hit

pytestmark = pytest.mark.django_db

PETS = [
    rag.RagDocument("pets/cats", "Feline companions purr when content and sleep most of the day."),
    rag.RagDocument("pets/dogs", "Canine companions need a walk twice a day and bark at strangers."),
    rag.RagDocument("garden/roses", "Roses want full sun, rich soil and pruning in late winter."),
]
# Three sections of one document; with CHUNK_SIZE 64 each paragraph is a chunk of its own.
FILLER = " The operations team reviews this procedure every quarter and writes down any change in the log."
SECTIONS = "\n\n".join(
    [
        "# Backups",
        "Backups run every night at two in the morning, on every server of the cluster." + FILLER,
        "Each backup is kept for thirty days and then deleted by the retention job." + FILLER,
        "Restoring a backup takes about ten minutes for a typical database of the service." + FILLER,
        "# Billing",
        "Invoices are emailed on the first day of each month to the account owner." + FILLER,
    ]
)
RETENTION = "Each backup is kept for thirty days and then deleted by the retention job." + FILLER


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(dimensions=64) as running:
        yield running


@pytest.fixture
def chat(server: OpenAICompatibleServer) -> OpenAIChat:
    return OpenAIChat(
        base_url=server.base_url,
        api_key="test",
        max_retries=1,
        backoff_base=0.001,
        backoff_max=0.01,
        deadline=2,
    )


@pytest.fixture
def pets() -> rag.Collection:
    kb = rag.collection("docs")
    kb.index(PETS)
    return kb


@pytest.fixture
def manual() -> rag.Collection:
    kb = rag.collection("notes")  # CHUNK_SIZE 64: small chunks, the children
    kb.index([rag.RagDocument("manual", SECTIONS, {"title": "Ops manual"})])
    return kb


def ids(hits: list[Hit]) -> list[str]:
    return [hit.source_id for hit in hits]


# multi_query


def test_multi_query_finds_what_only_a_variant_matches(
    pets: rag.Collection, server: OpenAICompatibleServer, chat: OpenAIChat
) -> None:
    assert ids(pets.search("kitty naps", mode="text")) == []  # no word of the query is in the corpus
    server.reply_next("1. feline sleep\n2. cats resting\n3. purr")

    hits = pets.search("kitty naps", mode="text", strategy="multi_query", n_queries=3, chat=chat)

    assert ids(hits) == ["pets/cats"]
    [request] = [r for r in server.requests if r.path == "/v1/chat/completions"]
    assert "Write 3 alternative versions of this query:\nkitty naps" in request.body["messages"][1]["content"]


def test_multi_query_fuses_the_rankings_by_rrf(
    pets: rag.Collection, server: OpenAICompatibleServer, chat: OpenAIChat
) -> None:
    server.reply_next("canine walk\nrose pruning")

    hits = pets.search("feline purr", mode="text", strategy="multi_query", n_queries=2, chat=chat)

    # Each query matches one document at rank 1: three rankings, three hits with equal RRF scores,
    # in the order the queries were asked (the original first).
    assert ids(hits) == ["pets/cats", "pets/dogs", "garden/roses"]
    assert [round(hit.score, 6) for hit in hits] == [round(1 / 61, 6)] * 3


def test_multi_query_uses_at_most_n_variants(
    pets: rag.Collection, server: OpenAICompatibleServer, chat: OpenAIChat
) -> None:
    server.reply_next("canine walk\nrose pruning")

    hits = pets.search("feline purr", mode="text", strategy="multi_query", n_queries=1, chat=chat)

    assert ids(hits) == ["pets/cats", "pets/dogs"]


def test_fusion_counts_a_chunk_found_by_several_queries_once() -> None:
    a, b = ChunkData(0, "a"), ChunkData(0, "b")
    first = [Hit(a, None, 1.0, source_id="a"), Hit(b, None, 0.5, source_id="b")]
    second = [Hit(b, None, 0.9, source_id="b")]

    fused = fuse_rankings([first, second], rrf_k=60)

    assert [hit.source_id for hit in fused] == ["b", "a"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)


@pytest.mark.parametrize("n", [0, MAX_N_QUERIES + 1, -1, 2.5, "3", True, None])
def test_n_queries_out_of_range_is_refused_before_any_call(
    pets: rag.Collection, server: OpenAICompatibleServer, chat: OpenAIChat, n: object
) -> None:
    with pytest.raises(QueryError, match="n_queries must be an integer between 1 and 10"):
        pets.search("feline", strategy="multi_query", n_queries=n, chat=chat)  # type: ignore[arg-type]
    assert server.requests == []


@pytest.mark.parametrize("strategy", ["multiquery", "parent", "", 3, ["multi_query"]])
def test_an_unknown_strategy_is_refused(pets: rag.Collection, strategy: object) -> None:
    with pytest.raises(QueryError, match="unknown retrieval strategy"):
        pets.search("feline", strategy=strategy)  # type: ignore[arg-type]


def test_multi_query_without_a_language_model_says_what_to_configure(pets: rag.Collection) -> None:
    # The default RAG["CHAT"] is the extractive backend: it cannot reword a query.
    with pytest.raises(QueryError, match=r"needs a chat model.*RAG\['CHAT'\]"):
        pets.search("feline", strategy="multi_query")


def test_multi_query_uses_rag_chat_when_it_is_a_language_model(
    pets: rag.Collection, server: OpenAICompatibleServer
) -> None:
    server.reply_next("canine walk")
    backend = {"BACKEND": "django_rag.answer.chat.OpenAIChat", "BASE_URL": server.base_url, "API_KEY": "t"}
    with override_settings(RAG={**rag.conf.rag_settings._load(), "CHAT": backend}):
        hits = pets.search("feline purr", mode="text", strategy="multi_query", n_queries=1)

    assert ids(hits) == ["pets/cats", "pets/dogs"]


@pytest.mark.parametrize(
    "failure", ["error", "timeout", "garbage", "empty", "echo"], ids=lambda failure: failure
)
def test_a_failing_chat_model_falls_back_to_the_original_query(
    pets: rag.Collection,
    server: OpenAICompatibleServer,
    chat: OpenAIChat,
    caplog: pytest.LogCaptureFixture,
    failure: str,
) -> None:
    if failure == "error":
        server.fail_next(5, status=500)
    elif failure == "timeout":
        server.hang_next(5)
    elif failure == "garbage":
        server.reply_next("x" * 2000)  # one 2,000-character "query": a model rambling, not a variant
    elif failure == "empty":
        server.reply_next("   \n\n")
    else:
        server.reply_next("feline purr\n- Feline  PURR")  # only the query itself, reworded by case

    with caplog.at_level(logging.WARNING, logger="django_rag.search"):
        hits = pets.search("feline purr", mode="text", strategy="multi_query", chat=chat)

    assert ids(hits) == ids(pets.search("feline purr", mode="text")) == ["pets/cats"]
    assert "searching the original query only" in caplog.text


def test_multi_query_needs_the_query_text(pets: rag.Collection, chat: OpenAIChat) -> None:
    with pytest.raises(QueryError, match="need the query text"):
        pets.search([0.1] * 64, strategy="multi_query", chat=chat)


# parent_document


def test_parent_document_returns_the_section_around_the_small_chunk(manual: rag.Collection) -> None:
    [child] = manual.search("retention job thirty days", mode="text", k=1)
    assert child.content == RETENTION

    [parent] = manual.search("retention job thirty days", mode="text", k=1, strategy="parent_document")

    assert parent.content.startswith("# Backups")
    assert "Backups run every night" in parent.content and "Restoring a backup takes" in parent.content
    assert "Invoices" not in parent.content  # another section: never in this parent
    assert parent.chunk.pk == child.chunk.pk  # the child's row: its links and citations still work
    text = SECTIONS
    assert parent.content == text[parent.chunk.char_start : parent.chunk.char_end]
    assert parent.chunk.metadata["parent"]["child"] == child.chunk.index


def test_children_of_one_parent_come_back_once(manual: rag.Collection) -> None:
    children = manual.search("backup", mode="text", k=5)
    assert len({hit.chunk.pk for hit in children}) >= 2

    parents = manual.search("backup", mode="text", k=5, strategy="parent_document")

    assert [p.content.splitlines()[0] for p in parents] == ["# Backups"]


def test_the_parent_size_bounds_the_parent(manual: rag.Collection) -> None:
    [small] = manual.search(
        "retention job", mode="text", k=1, strategy="parent_document", parent_chunk_size=1
    )
    [child] = manual.search("retention job", mode="text", k=1)

    # Nothing fits beside the child: the parent is the child (never less than CHUNK_SIZE).
    assert small.content == child.content


def test_parent_chunk_size_is_a_collection_option(manual: rag.Collection) -> None:
    options = rag.conf.rag_settings._load()
    notes = {**options["COLLECTIONS"]["notes"], "PARENT_CHUNK_SIZE": 64}
    with override_settings(RAG={**options, "COLLECTIONS": {**options["COLLECTIONS"], "notes": notes}}):
        [hit] = manual.search("retention job", mode="text", k=1, strategy="parent_document")
    [child] = manual.search("retention job", mode="text", k=1)
    assert hit.content == child.content


@pytest.mark.parametrize("size", [0, -5, "big", 1.5])
def test_a_bad_parent_chunk_size_is_a_configuration_error(manual: rag.Collection, size: object) -> None:
    options = rag.conf.rag_settings._load()
    notes = {**options["COLLECTIONS"]["notes"], "PARENT_CHUNK_SIZE": size}
    with (
        override_settings(RAG={**options, "COLLECTIONS": {**options["COLLECTIONS"], "notes": notes}}),
        pytest.raises(ConfigurationError, match="PARENT_CHUNK_SIZE"),
    ):
        manual.search("retention job", mode="text", strategy="parent_document")


def test_the_memory_store_folds_children_into_parents_too() -> None:
    store = MemoryStore()
    kb = rag.collection("notes")
    chunks = split_text(SECTIONS, chunk_size=64, chunk_overlap=8)
    for chunk in chunks:
        chunk.embedding = [1.0] + [0.0] * 63
    store.upsert_many(kb, [(DocumentInfo(source_id="manual"), chunks)], space="s")
    # A memory hit holds the stored chunk itself (the store copies chunks on write).
    request = SearchRequest(mode="vector", k=10, space="s", vector=[1.0] + [0.0] * 63, scope=QueryScope())
    [child] = [hit for hit in store.search(kb, request) if "retention" in hit.content]

    [parent] = to_parents(store, kb, [child], space="s", size=1024)

    assert parent.content.startswith("# Backups") and "Invoices" not in parent.content
    assert parent.content == SECTIONS[parent.chunk.char_start : parent.chunk.char_end]


# compress


def test_compress_without_a_chat_model_keeps_the_sentences_closest_to_the_query(
    manual: rag.Collection,
) -> None:
    [plain] = manual.search("retention job thirty days", mode="text", k=1, strategy="parent_document")
    [cut] = manual.search(
        "retention job thirty days", mode="text", k=1, strategy="parent_document", compress=True
    )

    assert "kept for thirty days" in cut.content
    assert len(cut.content) < len(plain.content)
    # Only the passage's own sentences, in order: nothing the collection does not hold.
    for piece in cut.content.split(" … "):
        assert piece in plain.content
    assert cut.chunk.metadata["compressed"] is True


def test_compress_with_a_chat_model_keeps_the_sentences_it_names(
    manual: rag.Collection, server: OpenAICompatibleServer, chat: OpenAIChat
) -> None:
    # The parent's sentences: 1 the heading and first sentence, 2 filler, 3 retention, 4 filler, 5 restore.
    server.reply_next("5")

    [cut] = manual.search("restoring", mode="text", k=1, strategy="parent_document", compress=True, chat=chat)

    assert cut.content == "Restoring a backup takes about ten minutes for a typical database of the service."
    [request] = [r for r in server.requests if r.path == "/v1/chat/completions"]
    assert "Question: restoring" in request.body["messages"][1]["content"]


def test_compress_drops_a_passage_the_chat_model_keeps_nothing_of(
    manual: rag.Collection, server: OpenAICompatibleServer, chat: OpenAIChat
) -> None:
    server.reply_next("NONE")

    assert (
        manual.search("backup", mode="text", k=1, strategy="parent_document", compress=True, chat=chat) == []
    )


@pytest.mark.parametrize(
    "failure", ["error", "timeout", "prose", "out_of_range", "zero"], ids=lambda failure: failure
)
def test_compress_falls_back_to_the_embedding_filter_when_the_chat_model_fails(
    manual: rag.Collection,
    server: OpenAICompatibleServer,
    chat: OpenAIChat,
    caplog: pytest.LogCaptureFixture,
    failure: str,
) -> None:
    if failure == "error":
        server.fail_next(5, status=503)
    elif failure == "timeout":
        server.hang_next(5)
    elif failure == "prose":
        server.reply_next("The passage says backups are kept for thirty days.")  # new words: refused
    elif failure == "out_of_range":
        server.reply_next("2, 99")
    else:
        server.reply_next("0")
    query = "retention job thirty days"
    expected = manual.search(query, mode="text", k=1, strategy="parent_document", compress=True)

    with caplog.at_level(logging.WARNING, logger="django_rag.search"):
        found = manual.search(query, mode="text", k=1, strategy="parent_document", compress=True, chat=chat)

    assert [hit.content for hit in found] == [hit.content for hit in expected]
    assert "using the embedding filter" in caplog.text


def test_compress_must_be_a_bool(pets: rag.Collection) -> None:
    with pytest.raises(QueryError, match="compress must be True or False"):
        pets.search("feline", compress="yes")  # type: ignore[arg-type]


# ask


def test_ask_answers_from_the_parents_and_the_variants(
    manual: rag.Collection, server: OpenAICompatibleServer, chat: OpenAIChat
) -> None:
    server.reply_next("backup retention period")  # the variant; the next reply is the answer's

    answer = manual.ask(
        "how long are copies stored?", mode="text", strategy="multi_query", n_queries=1, chat=chat
    )

    assert answer.sources and "kept for thirty days" in " ".join(hit.content for hit in answer.sources)
    assert answer.citations


def test_ask_refuses_a_bad_strategy_before_the_chat_model_is_called(
    manual: rag.Collection, server: OpenAICompatibleServer, chat: OpenAIChat
) -> None:
    with pytest.raises(QueryError, match="unknown retrieval strategy"):
        manual.ask("backups?", strategy="hyde", chat=chat)
    assert server.requests == []
