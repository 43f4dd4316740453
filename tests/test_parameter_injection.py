"""User values are only ever bound, never formatted into SQL, and database errors never reach users.

Hostile text (SQL, quotes, backslashes, NUL, tsquery operators, LIKE wildcards) searches like
any other text in every mode and syntax; the statements the store and the ORM send never hold
it; metadata filters mean equality for every JSON value, nested or not, in both stores; and a
failing statement shows users a generic message while the database's text goes to the log.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from io import StringIO
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection
from django.test import Client, override_settings

from django_rag.api import KnowledgeBase
from django_rag.models import Chunk, Document
from django_rag.search import MODES, SYNTAXES
from django_rag.stores.base import QueryScope, SearchRequest
from django_rag.stores.pgsearch import build_sql
from tests.parameter_support import CORPUS, assert_no_leak
from tests.web_support import body

pytest_plugins = ["tests.conftest_parameters"]

MARK = "zq'; DROP TABLE django_rag_chunk; --"
HOSTILE = [
    "backups' OR '1'='1",
    "'; DELETE FROM django_rag_chunk; --",
    "backups\\",
    "\\'backups\\'",
    'backups" OR ""="',
    "back\x00ups",
    "backups:*",
    "backups & !invoices | (restore",
    "<-> <2> !! && ||",
    "$$backups$$",
    "%backups_",
    '-backups or "invoices',
    "backups /* comment */ ; SELECT 1",
    "(" * 500 + "backups",
    "a:* & " * 3000,  # about 20,000 characters of operators
]


def searches_like_text(kb: KnowledgeBase, query: str) -> None:
    for mode in ("text", "hybrid"):
        for syntax in SYNTAXES:
            hits = kb.search(query, mode=mode, syntax=syntax, k=5)
            assert all(hit.document.collection_id == kb.pk for hit in hits)
    assert len(kb.search(query, mode="vector", k=5)) == len(CORPUS)
    for syntax in SYNTAXES:
        assert len(list(kb.chunks().text_search(query, k=5, syntax=syntax))) <= len(CORPUS)
    assert len(list(kb.chunks().nearest(query, k=5))) == len(CORPUS)


@pytest.mark.django_db
@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_query_text_searches_as_text_in_every_mode_and_syntax(kb: KnowledgeBase, query: str) -> None:
    searches_like_text(kb, query)
    assert Chunk.objects.filter(collection=kb).count() == len(CORPUS)


@pytest.mark.django_db
def test_sql_in_a_query_is_words_that_bm25_ranks(kb: KnowledgeBase) -> None:
    hits = kb.search("backups' OR '1'='1", mode="text", k=5)
    assert sorted(hit.source_id for hit in hits) == ["ops/backups", "ops/restore"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("syntax", SYNTAXES)
def test_the_store_statement_holds_no_user_value_only_its_parameters(
    kb: KnowledgeBase, mode: str, syntax: str
) -> None:
    request = SearchRequest(
        mode=mode,
        k=5,
        space=kb.space,
        text=MARK,
        vector=kb.get_embedder().embed_query(MARK),
        scope=QueryScope(
            tenant=MARK,
            tags=[MARK],
            filters={MARK: MARK, "nested": {MARK: [MARK]}},
            source_prefix=MARK,
            min_score=0.1,
        ),
        syntax=syntax,
    )
    sql, params = build_sql(kb, request)
    assert "zq" not in sql
    assert MARK in repr(params)


@pytest.mark.django_db
def test_the_querysets_send_user_text_as_parameters(kb: KnowledgeBase) -> None:
    statements: list[tuple[str, Any]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        list(kb.chunks().nearest(MARK, k=3).filter(tenant=MARK))
        for syntax in SYNTAXES:
            list(kb.chunks().text_search(MARK, k=3, syntax=syntax))
    assert len(statements) >= 4
    assert all("zq" not in sql for sql, _ in statements)
    assert all(MARK in repr(params) for sql, params in statements if "to_tsvector" in sql)


SCOPE_VALUES = ["%", "_", "\\", "*", "acme' OR '1'='1", "' OR 1=1 --", "acme%", "ops/%", "op_"]


@pytest.mark.django_db
@pytest.mark.parametrize("value", SCOPE_VALUES)
def test_a_hostile_tenant_tag_prefix_or_filter_key_matches_nothing(kb: KnowledgeBase, value: str) -> None:
    for mode in MODES:
        assert kb.search("backups", mode=mode, tenant=value) == []
        assert kb.search("backups", mode=mode, tags=[value]) == []
        assert kb.search("backups", mode=mode, source_prefix=value) == []
        assert kb.search("backups", mode=mode, filters={value: "ops"}) == []


@pytest.mark.django_db
def test_a_source_prefix_still_matches_whole_segments(kb: KnowledgeBase) -> None:
    for mode in MODES:
        hits = kb.search("backups invoices", mode=mode, source_prefix="ops", k=5)
        assert sorted(hit.source_id for hit in hits) == ["ops/backups", "ops/restore"]


# Metadata filters: equality for every JSON value, in both stores

FILTER_CASES = [
    ({"section": "ops"}, ["ops/backups", "ops/restore"]),
    ({"year": 2024}, ["billing/invoices", "ops/backups"]),
    ({"year": 2024.0}, ["billing/invoices", "ops/backups"]),
    ({"year": "2024"}, []),
    ({"flag": True}, ["billing/invoices"]),  # true is not 1 in JSON
    ({"flag": 1}, ["ops/backups"]),
    ({"nullable": None}, ["ops/backups"]),  # null matches a null value, not a missing key
    ({"missing": None}, []),
    ({"owner": {"team": "sre", "oncall": True}}, ["ops/backups"]),
    ({"owner": {"team": "sre"}}, ["ops/restore"]),  # equality, not containment
    ({"labels": ["db", "backup"]}, ["ops/backups"]),
    ({"labels": ("db", "backup")}, ["ops/backups"]),  # a tuple is a JSON array
    ({"labels": ["db"]}, ["ops/restore"]),
    ({"labels": ["backup", "db"]}, []),  # arrays compare in order
    ({"labels": "db"}, []),
    ({"section": "ops", "year": 2023}, ["ops/restore"]),
    ({}, ["billing/invoices", "ops/backups", "ops/restore"]),
]


def filtered(kb: KnowledgeBase, filters: dict[str, Any], mode: str) -> list[str]:
    return sorted(hit.source_id for hit in kb.search("backups invoices", mode=mode, filters=filters, k=10))


@pytest.mark.django_db
@pytest.mark.parametrize(("filters", "expected"), FILTER_CASES, ids=range(len(FILTER_CASES)))
def test_metadata_filters_mean_equality_in_the_postgres_store(
    kb: KnowledgeBase, filters: dict[str, Any], expected: list[str]
) -> None:
    for mode in MODES:
        assert filtered(kb, filters, mode) == expected, mode


@pytest.fixture
def memory_kb(kb: KnowledgeBase) -> Iterator[KnowledgeBase]:
    with override_settings(RAG={**settings.RAG, "STORE": "django_rag.stores.memory.MemoryStore"}):
        kb.index(CORPUS, tenant="acme")
        yield kb


@pytest.mark.django_db
def test_metadata_filters_mean_the_same_in_the_memory_store(memory_kb: KnowledgeBase) -> None:
    for filters, expected in FILTER_CASES:
        assert filtered(memory_kb, filters, "vector") == expected, filters


# A failing statement: users see a generic message, the log gets the database's text


@pytest.fixture
def chunks_locked(kb: KnowledgeBase) -> Iterator[None]:
    """Another session holds the chunk table; this test's statements give up after 50 ms."""
    other = psycopg.connect(**connection.get_connection_params())
    try:
        other.execute("LOCK TABLE django_rag_chunk IN ACCESS EXCLUSIVE MODE")
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '50ms'")
        yield
    finally:
        other.rollback()
        other.close()


@pytest.mark.django_db
def test_a_database_error_is_a_generic_503_on_the_json_endpoint(site: None, chunks_locked: None) -> None:
    response = Client().get("/kb/api/search/", {"q": "backups", "mode": "text"})
    assert response.status_code == 503
    assert response.json()["error"] == "Search is not available right now. Please try again later."
    assert_no_leak(response.content.decode())
    assert "lock" not in response.content.decode()


@pytest.mark.django_db
def test_a_database_error_is_a_generic_503_on_the_search_page(site: None, chunks_locked: None) -> None:
    response = Client().get("/kb/", {"q": "backups", "mode": "hybrid"})
    assert response.status_code == 503
    page = html.unescape(response.content.decode())
    assert "Search is not available right now." in page
    assert_no_leak(page)
    assert "lock timeout" not in page


@pytest.mark.django_db
def test_a_database_error_in_the_admin_retrieval_test_keeps_its_text_in_the_log(
    kb: KnowledgeBase, admin_client: Client, chunks_locked: None, caplog: pytest.LogCaptureFixture
) -> None:
    params = {
        "q": "backups",
        "mode": "hybrid",
        "k": "5",
        "vector_weight": "1",
        "text_weight": "1",
        "rrf_k": "60",
    }
    response = admin_client.get(f"/admin/django_rag/collection/{kb.pk}/retrieval-test/", params)
    assert response.status_code == 503
    page = html.unescape(response.content.decode())
    assert "The search failed in the database; the server log has the details." in page
    assert "lock timeout" not in page
    assert_no_leak(page)
    assert "lock timeout" in caplog.text


@pytest.mark.django_db
def test_a_database_error_reaches_python_callers_as_a_database_error(
    kb: KnowledgeBase, chunks_locked: None
) -> None:
    # Not a QueryError: the request was fine, the database failed. Django's error class, as an
    # ORM query would raise it, though the store runs its statements on a raw psycopg cursor.
    with pytest.raises(OperationalError, match="lock timeout"):
        kb.search("backups", mode="text")


@pytest.mark.django_db
@pytest.mark.parametrize("command", ["rag_search", "rag_ask"])
def test_a_database_error_is_one_line_from_the_commands_without_sql(
    kb: KnowledgeBase, chunks_locked: None, command: str
) -> None:
    with pytest.raises(CommandError) as caught:
        call_command(command, "backups", "--collection", "docs", "--mode", "text", stdout=StringIO())
    assert str(caught.value) == "the database failed: canceling statement due to lock timeout"


@pytest.mark.django_db
def test_commands_print_hostile_text_results_without_error(kb: KnowledgeBase) -> None:
    for query in HOSTILE[:6]:
        out = StringIO()
        call_command("rag_search", query, "--collection", "docs", "--mode", "hybrid", stdout=out)
        assert out.getvalue()
    assert Document.objects.filter(collection=kb).count() == len(CORPUS)


def echo_removed(text: str, query: str) -> str:
    """``text`` without the query it echoes (as typed, and URL-encoded in links)."""
    return html.unescape(text).replace(query, "").replace(urlencode({"q": query})[2:], "")


@pytest.mark.django_db
@pytest.mark.parametrize("query", HOSTILE[:8], ids=range(8))
def test_hostile_query_text_is_served_by_the_pages_endpoints_and_retrieval_test(
    kb: KnowledgeBase, admin_client: Client, query: str
) -> None:
    query = query.replace("\x00", "")  # the forms refuse NUL with a message (test_parameter_types)
    for mode in MODES:
        found = Client().get("/kb/api/search/", {"q": query, "mode": mode})
        assert found.status_code == 200
        assert found.json()["query"] == query
        assert_no_leak(json.dumps({**found.json(), "query": ""}))
        page = Client().get("/kb/", {"q": query, "mode": mode})
        assert page.status_code == 200
        assert_no_leak(echo_removed(body(page), query))
    params = {"q": query, "mode": "hybrid", "k": "5", "vector_weight": "1", "text_weight": "1", "rrf_k": "60"}
    explained = admin_client.get(f"/admin/django_rag/collection/{kb.pk}/retrieval-test/", params)
    assert explained.status_code == 200
    assert_no_leak(echo_removed(explained.content.decode(), query))
