"""Two knowledge bases in two databases on one server: every path reads and writes only its own alias.

Each test fills ``default`` with look-alike data first, then works on ``other`` while recording every
query sent to ``default``: the recording must stay empty, and nothing of ``default`` may come back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import django_rag as rag
from django_rag.models import Chunk, Collection, Document
from django_rag.stores import get_store
from django_rag.stores.memory import MemoryStore
from django_rag.testing import OpenAICompatibleServer
from tests.plans import build_space_index

pytestmark = pytest.mark.django_db(databases=["default", "other"])

DEFAULT_DOCS = [rag.RagDocument("manual/backup", "Backups run nightly in the DEFAULT database.")]
OTHER_DOCS = [
    rag.RagDocument("manual/backup", "Backups run hourly in the other database."),
    rag.RagDocument("faq/restore", "Restores take ten minutes in the other database."),
]


@pytest.fixture(autouse=True)
def look_alike() -> None:
    """The same collection name and source ids in ``default``, with text that must never show up."""
    rag.collection("docs").index(DEFAULT_DOCS, tenant="acme")
    rag.collection("notes").index(DEFAULT_DOCS)


@contextmanager
def nothing_on_default() -> Iterator[None]:
    with CaptureQueriesContext(connections["default"]) as seen:
        yield
    assert [q["sql"] for q in seen.captured_queries] == []


def contents(hits: list[rag.Hit]) -> list[str]:
    return [hit.content for hit in hits]


def test_collection_rows_live_in_the_database_they_were_asked_for() -> None:
    with nothing_on_default():
        kb = rag.collection("docs", using="other")
    assert kb.using == "other"
    assert Collection.objects.using("other").filter(name="docs").exists()
    assert kb.pk != rag.collection("docs").pk or Collection.objects.using("other").count() == 1


def test_index_search_and_remove_stay_in_their_database() -> None:
    with nothing_on_default():
        kb = rag.collection("docs", using="other")
        result = kb.index(OTHER_DOCS, tenant="acme")
        vector = contents(kb.search("backups", k=5, tenant="acme"))
        text = contents(kb.search("backups", k=5, mode="text", tenant="acme"))
        hybrid = contents(kb.search("backups", k=5, mode="hybrid", tenant="acme"))
        removed = kb.remove(source_id="faq/restore", tenant="acme")
    assert result.added == 2 and removed == 1
    for found in (vector, text, hybrid):
        assert "Backups run hourly in the other database." in found
        assert not any("DEFAULT" in text for text in found)
    assert Document.objects.using("other").count() == 1
    assert (
        list(Document.objects.using("default").values_list("source_id", flat=True)) == ["manual/backup"] * 2
    )


def test_a_search_may_name_its_database_per_call() -> None:
    other = rag.collection("docs", using="other")
    other.index(OTHER_DOCS, tenant="acme")
    # A row read from default, told to search other: the other database's rows answer.
    with nothing_on_default():
        hits = rag.collection("docs", using="other").search("backups", k=3, tenant="acme", using="other")
    assert "DEFAULT" not in " ".join(contents(hits))


def test_the_orm_querysets_query_their_own_database() -> None:
    kb = rag.collection("docs", using="other")
    kb.index(OTHER_DOCS, tenant="acme")
    with nothing_on_default():
        nearest = [c.content for c in kb.chunks().nearest("backups", k=5)]
        text = [c.content for c in kb.chunks().text_search("backups", k=5)]
        named = list(Chunk.objects.using("other").nearest("backups", k=5, collection="docs"))
        counted = kb.chunks().nearest("backups", k=5).filter(tenant="acme").count()
    assert nearest and text and named and counted == 2
    assert not any("DEFAULT" in content for content in [*nearest, *text])
    assert all(chunk._state.db == "other" for chunk in named)


def test_ask_reads_only_its_database() -> None:
    kb = rag.collection("docs", using="other")
    kb.index(OTHER_DOCS, tenant="acme")
    with OpenAICompatibleServer(dimensions=64) as server:
        chat = rag_chat(server)
        with nothing_on_default():
            answer = kb.ask("how often do backups run?", tenant="acme", chat=chat)
    assert answer.citations and all(hit.document._state.db == "other" for hit in answer.citations)
    assert "DEFAULT" not in " ".join(hit.content for hit in answer.citations)


def rag_chat(server: OpenAICompatibleServer) -> Any:
    from django_rag.answer.chat import OpenAIChat

    return OpenAIChat(base_url=server.base_url, api_key="test", max_retries=0)


def test_rag_database_setting_sends_the_default_paths_to_its_alias() -> None:
    with override_settings(RAG={**settings.RAG, "DATABASE": "other"}), nothing_on_default():
        kb = rag.collection("docs")
        kb.index(OTHER_DOCS)
        hits = kb.search("backups", k=3)
        chunks = list(kb.chunks().nearest("backups", k=3))
    assert kb.using == "other" and hits and chunks
    assert "DEFAULT" not in " ".join([*contents(hits), *(c.content for c in chunks)])


def test_memory_stores_are_separate_per_alias() -> None:
    with override_settings(RAG={**settings.RAG, "STORE": "django_rag.stores.memory.MemoryStore"}):
        assert isinstance(get_store("other"), MemoryStore)
        assert get_store("other") is not get_store("default")
        kb = rag.collection("docs", using="other")
        kb.index(OTHER_DOCS)
        assert contents(kb.search("backups", k=5))
        assert rag.collection("docs").search("backups hourly", k=5) == []


def test_reembedding_moves_only_its_databases_documents() -> None:
    kb = rag.collection("docs", using="other")
    kb.index(OTHER_DOCS)
    moved = {**settings.RAG["EMBEDDERS"], "moved": {**settings.RAG["EMBEDDERS"]["default"], "MODEL": "moved"}}
    collections = {**settings.RAG["COLLECTIONS"], "docs": {"EMBEDDER": "moved"}}
    with override_settings(RAG={**settings.RAG, "EMBEDDERS": moved, "COLLECTIONS": collections}):
        with nothing_on_default():
            out = run("rag_reindex", "docs", "--database", "other", "--drop-old")
        assert "2 documents embedded into moved:64" in out
    assert set(Chunk.objects.using("other").values_list("space", flat=True)) == {"moved:64"}
    assert set(Chunk.objects.using("default").values_list("space", flat=True)) == {"hashing:64"}


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_every_command_works_on_the_database_it_is_given(tmp_path: Path) -> None:
    (tmp_path / "guide.txt").write_text("Backups run hourly in the other database.")
    with nothing_on_default():
        ingest = ("--root", str(tmp_path), "--collection", "docs", "--database", "other")
        run("rag_ingest", str(tmp_path / "guide.txt"), *ingest)
        searched = [
            json.loads(line)
            for line in run(
                "rag_search", "backups", "--collection", "docs", "--json", "--database", "other"
            ).splitlines()
        ]
    assert [hit["content"] for hit in searched] == ["Backups run hourly in the other database."]
    with OpenAICompatibleServer(dimensions=64) as server:
        chat = {"BACKEND": "django_rag.answer.chat.OpenAIChat", "BASE_URL": server.base_url, "API_KEY": "t"}
        with override_settings(RAG={**settings.RAG, "CHAT": chat}), nothing_on_default():
            answer = json.loads(run("rag_ask", "backups?", "-c", "docs", "--json", "--database", "other"))
    assert answer["citations"][0]["source_id"] == "guide.txt"


def test_rag_eval_indexes_into_the_given_database(tmp_path: Path) -> None:
    beir = tmp_path / "tiny"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        "\n".join(
            json.dumps({"_id": f"d{i}", "title": "", "text": f"document {i} about topic {i}"})
            for i in range(5)
        )
    )
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "topic 3"}))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\n")
    with nothing_on_default():
        out = run("rag_eval", str(beir), "--database", "other", "--modes", "vector,text")
    assert "5 documents, 1 judged queries" in out
    assert Document.objects.using("other").filter(collection__name="eval-tiny").count() == 5


def test_rag_migration_check_reads_the_given_database() -> None:
    kb = rag.collection("docs", using="other")
    kb.index(OTHER_DOCS)
    with pytest.raises(Exception, match="no ANN index in 'other'"):
        run("rag_migration", "--check", "--database", "other")
    with connections["other"].cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        from django_rag.ddl import IndexSpec

        cursor.execute(IndexSpec(kb.space, 64).create_sql())
    assert "present in 'other'" in run("rag_migration", "--check", "--database", "other")
    with pytest.raises(Exception, match="no ANN index in 'default'"):
        run("rag_migration", "--check")
    assert build_space_index is not None  # the helper the other plan tests use


def test_ask_by_collection_name_follows_the_rag_database_setting() -> None:
    from django_rag.answer import ask

    with override_settings(RAG={**settings.RAG, "DATABASE": "other"}):
        rag.collection("docs").index(OTHER_DOCS)
        with OpenAICompatibleServer(dimensions=64) as server, nothing_on_default():
            answer = ask("docs", "how often do backups run?", chat=rag_chat(server))
    assert answer.citations and all(hit.document._state.db == "other" for hit in answer.citations)
