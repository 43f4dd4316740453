"""System checks and the errors a misconfigured site sees: each names the fix."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

import django_rag as rag
from django_rag.checks import check_answers, check_database, check_settings
from django_rag.ddl import IndexSpec

HASHING = "django_rag.embedders.hashing.HashingEmbedder"


def ids(messages: list) -> list[str]:
    return [message.id for message in messages]


def test_the_test_settings_pass_the_settings_checks() -> None:
    assert check_settings() == []
    call_command("check", "django_rag")


def test_an_unknown_database_alias_is_reported() -> None:
    with override_settings(RAG={"DATABASE": "nope"}):
        assert "django_rag.E002" in ids(check_settings())


def test_an_embedder_that_cannot_be_built_is_reported_with_its_name() -> None:
    with override_settings(RAG={"EMBEDDERS": {"default": {"BACKEND": "no.such.Backend"}}}):
        messages = check_settings()
    assert ids(messages) == ["django_rag.E004"]
    assert "'default'" in messages[0].msg and "no.such.Backend" in messages[0].msg


def test_a_collection_naming_an_undefined_embedder_is_reported() -> None:
    with override_settings(
        RAG={"EMBEDDERS": {"default": {"BACKEND": HASHING}}, "COLLECTIONS": {"docs": {"EMBEDDER": "big"}}}
    ):
        messages = check_settings()
    assert "django_rag.E005" in ids(messages)


def test_a_text_search_option_that_is_not_a_bool_is_reported() -> None:
    with override_settings(
        RAG={"EMBEDDERS": {"default": {"BACKEND": HASHING}}, "COLLECTIONS": {"docs": {"TEXT_SEARCH": "no"}}}
    ):
        messages = check_settings()
    assert ids(messages) == ["django_rag.E006"]
    assert "'docs'" in messages[0].msg and "'no'" in messages[0].msg


def test_the_unused_builtin_openai_default_is_not_checked() -> None:
    # A site that only declares a local embedder must not be told to set OPENAI_API_KEY.
    with override_settings(
        RAG={"EMBEDDERS": {"local": {"BACKEND": HASHING}}, "COLLECTIONS": {"docs": {"EMBEDDER": "local"}}}
    ):
        assert check_settings() == []


@pytest.mark.django_db
def test_a_space_without_an_ann_index_gets_a_warning_that_names_rag_migration() -> None:
    messages = check_database(databases=["default"])
    assert ids(messages) == ["django_rag.W001"]
    assert "rag_migration" in messages[0].hint
    with connection.cursor() as cursor:
        cursor.execute(IndexSpec("hashing:64", 64).create_sql())
    assert check_database(databases=["default"]) == []


@pytest.mark.django_db
def test_stored_vectors_of_another_dimension_are_reported_naming_rag_reindex() -> None:
    rag.collection("docs").index([rag.RagDocument("a", "some text")])
    bigger = {"default": {"BACKEND": HASHING, "MODEL": "bigger", "DIMENSIONS": 128}}
    with override_settings(RAG={"EMBEDDERS": bigger, "COLLECTIONS": {"docs": {}}}):
        messages = [m for m in check_database(databases=["default"]) if m.id == "django_rag.W003"]
    assert len(messages) == 1
    assert "128 dims" in messages[0].msg and "hashing:64 (64 dims)" in messages[0].msg
    assert "rag_reindex docs" in messages[0].hint


@pytest.mark.django_db
def test_a_missing_pgvector_extension_is_reported_and_searches_name_the_fix() -> None:
    kb = rag.collection("docs")
    with connection.cursor() as cursor:
        cursor.execute("DROP EXTENSION vector CASCADE")  # rolled back with the test's transaction
    assert ids(check_database(databases=["default"])) == ["django_rag.E012"]
    with pytest.raises(rag.ConfigurationError, match="pgvector extension"):
        kb.search("anything")


def test_an_unreachable_database_is_one_clear_error(django_db_blocker: pytest.FixtureRequest) -> None:
    with django_db_blocker.unblock(), override_settings(RAG={"DATABASE": "unreachable"}):
        messages = check_database(databases=["unreachable"])
        assert ids(messages) == ["django_rag.E010"]
        assert "DATABASE_URL" in messages[0].hint
        with pytest.raises(
            rag.ConfigurationError, match=r"cannot reach the database 'unreachable'.*DATABASE_URL"
        ):
            rag.collection("docs")


def test_an_unknown_rag_key_is_reported_with_the_closest_known_key() -> None:
    with override_settings(RAG={"EMBEDDERS": {"default": {"BACKEND": HASHING}}, "COLECTIONS": {}}):
        [message] = check_settings()
    assert (message.id, message.hint) == ("django_rag.E007", "Did you mean 'COLLECTIONS'?")


def test_an_unknown_collection_option_is_reported_with_the_closest_known_option() -> None:
    rag_settings = {
        "EMBEDDERS": {"default": {"BACKEND": HASHING}},
        "COLLECTIONS": {"docs": {"CHUNK_SIZ": 100}},
    }
    with override_settings(RAG=rag_settings):
        [message] = check_settings()
    assert message.id == "django_rag.E008"
    assert "RAG['COLLECTIONS']['docs']" in message.msg and message.hint == "Did you mean 'CHUNK_SIZE'?"


def test_an_openai_embedder_without_a_key_is_a_warning_that_does_not_block_migrate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    openai = {"BACKEND": "django_rag.embedders.openai.OpenAIEmbedder", "MODEL": "text-embedding-3-small"}
    collections = {"docs": {}, "notes": {}}
    with override_settings(RAG={"EMBEDDERS": {"default": openai}, "COLLECTIONS": collections}):
        messages = check_settings()
        assert ids(messages) == ["django_rag.W005"]
        assert not messages[0].is_serious()  # a Warning: `migrate` and `check` still pass
        call_command("check", "django_rag")


@pytest.mark.django_db
def test_a_routing_that_reads_the_models_elsewhere_is_reported() -> None:
    other = {**settings.RAG, "DATABASE": "other"}
    with override_settings(RAG=other):
        assert ids(check_settings()) == ["django_rag.W004"]
    with override_settings(RAG=other, DATABASE_ROUTERS=["django_rag.routers.RagRouter"]):
        assert check_settings() == []


def test_dir_lists_the_lazy_public_names() -> None:
    names = dir(rag)
    assert {"collection", "KnowledgeBase", "Collection", "load_pdf", "register", "RagDocument"} <= set(names)
    assert set(rag.__all__) <= set(names)


@pytest.fixture
def plain_role_database() -> Iterator[psycopg.Connection]:
    """A database without pgvector, and a connection to it as a role that is not a superuser."""
    server = settings.DATABASES["default"]
    name, role = f"{server['TEST']['NAME']}_noext", f"{server['TEST']['NAME']}_plain"
    admin = psycopg.connect(host=server["HOST"], dbname="postgres", user=server["USER"], autocommit=True)
    admin.execute(f'CREATE ROLE "{role}" LOGIN')
    admin.execute(f'CREATE DATABASE "{name}" OWNER "{role}"')
    try:
        with psycopg.connect(host=server["HOST"], dbname=name, user=role) as plain:
            yield plain
    finally:
        admin.execute(f'DROP DATABASE "{name}"')
        admin.execute(f'DROP ROLE "{role}"')
        admin.close()


def test_a_role_that_may_not_create_the_extension_is_told_how_before_migrate(
    plain_role_database: psycopg.Connection,
) -> None:
    from django_rag.checks.database import _database_messages

    with plain_role_database.cursor() as cursor:
        trusted = cursor.execute(
            "SELECT bool_or(trusted) FROM pg_available_extension_versions WHERE name = 'vector'"
        ).fetchone()[0]
        [message] = _database_messages(cursor, "default")
    assert not trusted  # pgvector is not a trusted extension: only a superuser may create it
    assert message.id == "django_rag.E013"
    assert (
        "CREATE EXTENSION IF NOT EXISTS vector" in message.hint
        and "then run `manage.py migrate`" in message.hint
    )


def test_a_read_database_missing_from_databases_is_reported() -> None:
    with override_settings(RAG={**settings.RAG, "READ_DATABASE": "replica"}):
        messages = check_settings()
    assert ids(messages) == ["django_rag.E014"]
    assert "'replica'" in messages[0].msg and "RAG['READ_DATABASE']" in messages[0].msg


def test_a_read_fallback_that_is_not_a_bool_is_reported() -> None:
    with override_settings(RAG={**settings.RAG, "READ_FALLBACK": "yes"}):
        assert ids(check_settings()) == ["django_rag.E015"]


def test_a_router_reading_from_the_read_database_is_not_a_routing_mistake() -> None:
    replica = {**settings.RAG, "READ_DATABASE": "other"}
    with override_settings(RAG=replica, DATABASE_ROUTERS=["django_rag.routers.RagRouter"]):
        assert check_settings() == []


def test_without_a_chat_setting_check_says_answers_are_quoted() -> None:
    [info] = check_answers()
    assert info.id == "django_rag.I006" and "answers quote sentences from the documents" in info.msg
    with override_settings(
        RAG={**settings.RAG, "CHAT": {"BACKEND": "django_rag.answer.extractive.ExtractiveChat"}}
    ):
        assert check_answers() == []


def test_a_chat_model_without_a_key_is_a_warning_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    chat = {"BACKEND": "django_rag.answer.chat.OpenAIChat", "MODEL": "gpt-4o-mini"}
    with override_settings(RAG={**settings.RAG, "CHAT": chat}):
        [warning] = check_settings()
    assert warning.id == "django_rag.W005"
    assert warning.msg.startswith("OpenAIChat (gpt-4o-mini) has no API key: set RAG['CHAT']['API_KEY']")


def test_a_chat_server_that_cannot_be_reached_is_a_warning_naming_base_url() -> None:
    chat = {
        "BACKEND": "django_rag.answer.chat.OpenAIChat",
        "API_KEY": "k",
        "BASE_URL": "http://127.0.0.1:9/v1",
    }
    with override_settings(RAG={**settings.RAG, "CHAT": chat}):
        [warning] = check_settings()
    assert warning.id == "django_rag.W006"
    assert warning.msg.startswith(
        "the chat server at http://127.0.0.1:9/v1 (RAG['CHAT']['BASE_URL']) cannot be reached"
    )
