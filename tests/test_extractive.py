"""Answers without a language model: the default backend quotes the passages' sentences, cited.

The test settings set no RAG["CHAT"], so ``ask()`` uses ``ExtractiveChat`` with the collection's
(hashing) embedder; the ask contract of the seed (text, sources, completion with usage, a custom
prompt, extra system instructions) is checked here too, against the loopback OpenAI server.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import django_rag as rag
from django_rag.answer import NOT_ENOUGH_INFORMATION, ExtractiveChat, ask, build_messages, get_chat
from django_rag.answer.chat import OpenAIChat
from django_rag.answer.extractive import key_terms, sentences
from django_rag.exceptions import QueryError
from django_rag.testing import OpenAICompatibleServer

pytestmark = pytest.mark.django_db

DOCS = [
    rag.RagDocument(
        "handbook/backups",
        "# Backups and restores\n\nLumen takes a full snapshot of every workspace each night at 02:00 UTC "
        "and keeps it for 35 days. Snapshots are encrypted at rest.\n\nTo restore a workspace, an owner "
        'opens Settings, then Backups, and chooses "Restore to a new workspace".',
        {"title": "Backups and restores"},
    ),
    rag.RagDocument(
        "handbook/billing",
        "# Billing\n\nInvoices are issued on the first day of each month. You can pay by card or by "
        "bank transfer on annual plans.",
        {"title": "Billing"},
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
        yield running


def test_the_default_chat_backend_is_extractive() -> None:
    assert isinstance(get_chat(), ExtractiveChat)


def test_an_answer_quotes_the_sentence_that_answers_and_cites_it(kb: rag.Collection) -> None:
    answer = ask(kb, "How long are backups kept?", mode="text")
    assert answer.text.startswith("Quoted from the documents (no language model wrote this answer):")
    assert (
        "“Lumen takes a full snapshot of every workspace each night at 02:00 UTC and keeps it for 35 days.” ["
        in (answer.text)
    )
    assert answer.citations[0].document.title == "Backups and restores"
    assert answer.completion is not None and answer.completion.model == "extractive"
    assert answer.usage == {} and answer.sources[: len(answer.citations)] != []


def test_every_quoted_word_is_in_a_cited_passage(kb: rag.Collection) -> None:
    answer = ask(kb, "How do I pay an invoice?", mode="hybrid")
    quoted = answer.text.split("\n\n")[1:]
    assert quoted
    for line in quoted:
        sentence, citation = line.rsplit(" [", 1)
        passage = answer.sources[int(citation.rstrip("]")) - 1]
        assert sentence.strip("“”") in passage.content


def test_no_hit_gives_not_enough_information(kb: rag.Collection) -> None:
    answer = ask(kb, "zebra giraffe", mode="text")
    assert answer.text == str(NOT_ENOUGH_INFORMATION)
    assert answer.completion is None and answer.citations == []


def test_a_passage_sharing_nothing_with_the_question_is_not_quoted() -> None:
    chat = ExtractiveChat()
    assert chat.quote(
        "volcano lair", [(1, "Invoices are issued on the first day of each month.", "", "")], None
    ) == str(NOT_ENOUGH_INFORMATION)


def test_a_streamed_extractive_answer_is_the_same_answer(kb: rag.Collection) -> None:
    stream = ask(kb, "How long are backups kept?", mode="text", stream=True)
    assert "".join(stream) == stream.answer.text == ask(kb, "How long are backups kept?", mode="text").text


def test_as_a_plain_chat_backend_it_reads_the_numbered_context(kb: rag.Collection) -> None:
    found = kb.search("restore a workspace", mode="text", k=2)
    text, usage = ExtractiveChat().complete(build_messages("How do I restore a workspace?", found))
    assert "Restore to a new workspace" in text and usage == {}


def test_sentences_drop_headings_and_a_fragment_cut_by_the_chunk_boundary() -> None:
    text = "days. If you need a copy, use the export.\n\n# Exporting\n\nExports are ZIP archives of notes."
    assert sentences(text) == ["If you need a copy, use the export.", "Exports are ZIP archives of notes."]
    assert key_terms("How long are backups kept?") == ["backup", "keep"]


def test_a_custom_prompt_and_extra_system_instructions_reach_the_model(
    kb: rag.Collection, server: OpenAICompatibleServer
) -> None:
    chat = OpenAIChat(base_url=server.base_url, api_key="test", max_retries=0)
    answer = kb.ask(
        "How long are backups kept?",
        mode="text",
        chat=chat,
        prompt="Passages:\n{context}\n\nAnswer this: {question}",
        system="Answer in one sentence.",
    )
    [request] = [r for r in server.requests if r.path == "/v1/chat/completions"]
    system, user = request.body["messages"]
    assert system["content"].endswith("Answer in one sentence.") and "untrusted data" in system["content"]
    assert user["content"].startswith("Passages:\n<context>\n[1] (Backups and restores)")
    assert user["content"].endswith("Answer this: <question>\nHow long are backups kept?\n</question>")
    assert answer.completion is not None and answer.completion.model == "gpt-4o-mini"
    assert answer.completion.usage == answer.usage and answer.usage["total_tokens"] > 0
    assert answer.sources and answer.citations == answer.sources[:1]


def test_a_custom_prompt_must_place_context_and_question(kb: rag.Collection) -> None:
    with pytest.raises(QueryError, match=r"prompt must contain \{question\}"):
        kb.ask("How long are backups kept?", prompt="Only {context}")
