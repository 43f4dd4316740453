"""Access isolation of the pages, the JSON endpoints and the source view, for any scope the hook returns.

The scope hook of these tests returns whatever the example drew (tenant, tags, collections);
every request also carries query-string parameters that try to widen it (``tenant=``,
``tags=``, another collection). Results, facets, prompts, answers and sources are checked
against the oracle of tests/isolation_corpus.py.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import caches
from django.http import HttpRequest
from django.test import Client
from hypothesis import event, given
from hypothesis import strategies as st

from django_rag.testing import OpenAICompatibleServer
from tests.isolation_corpus import (
    CORPUS,
    NAME,
    Corpus,
    Doc,
    markers_in,
    matching,
    maybe,
    prop,
    queries,
    tag_lists,
    tenants,
    visible,
)
from tests.web_support import body as text_of
from tests.web_support import login

pytestmark = pytest.mark.django_db
# The corpus fixture: indexed once per module.
pytest_plugins = ["tests.conftest_isolation"]


@dataclass(frozen=True)
class WebScope:
    tenant: str | None
    tags: tuple[str, ...] | None
    collections: tuple[str, ...] | None

    def hook_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {}
        if self.tenant is not None:
            value["tenant"] = self.tenant
        if self.tags is not None:
            value["tags"] = list(self.tags)
        if self.collections is not None:
            value["collections"] = list(self.collections)
        return value

    @property
    def reaches_collection(self) -> bool:
        return self.collections is None or NAME in self.collections

    def allows(self, doc: Doc) -> bool:
        if not self.reaches_collection:
            return False
        if self.tenant is not None and doc.tenant != self.tenant:
            return False
        return self.tags is None or bool(set(self.tags) & set(doc.tags))


web_scopes = st.builds(
    WebScope,
    tenant=maybe(tenants),
    tags=maybe(tag_lists),
    collections=maybe(st.sampled_from([(NAME,), (NAME, "notes"), (NAME,), ("notes",), ()])),
)
# What a hostile query string adds: none of it may widen the scope.
widening = st.fixed_dictionaries(
    {},
    optional={
        "tenant": tenants,
        "tags": st.sampled_from(["public", "internal,hr", ""]),
        "tenant__in": st.just("acme,globex"),
        "collections": st.just(f"{NAME},notes"),
    },
)
modes = st.sampled_from(["vector", "text", "hybrid"])
_current: list[WebScope] = []


def scope_hook(request: HttpRequest) -> dict[str, Any]:
    return _current[-1].hook_value()


def use_scope(scope: WebScope) -> None:
    _current[:] = [scope]


@pytest.fixture(scope="module")
def chat_server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(dimensions=64) as server:
        yield server


@pytest.fixture
def client(settings: Any, chat_server: OpenAICompatibleServer, corpus: Corpus) -> Client:
    settings.ROOT_URLCONF = "tests.web_urls"
    web = {"SCOPE": scope_hook, "ASK_RATE": None, "PAGE_SIZE": 50, "COLLECTIONS": [NAME, "notes"]}
    chat = {"BACKEND": "django_rag.answer.chat.OpenAIChat", "BASE_URL": chat_server.base_url, "API_KEY": "t"}
    settings.RAG = {**settings.RAG, "WEB": web, "CHAT": {**chat, "MAX_RETRIES": 0}}
    caches["default"].clear()
    return login("isolation-user")


def expected_docs(scope: WebScope, mode: str, words: list[str]) -> list[Doc]:
    docs = visible(scope.allows)
    return matching(docs, words) if mode == "text" else docs


def forbidden_markers(allowed: list[Doc], words: list[str]) -> set[str]:
    # The query's own words come back in the page (the search box) whatever the scope.
    return {doc.marker for doc in CORPUS} - {doc.marker for doc in allowed} - set(words)


SEARCH_EXAMPLES = 20


@prop(SEARCH_EXAMPLES)
@given(
    scope=web_scopes,
    words=queries,
    mode=modes,
    tag=st.one_of(st.none(), st.none(), st.sampled_from(["public", "internal", "hr", "Public"])),
    extra=widening,
    collection=st.sampled_from([NAME, NAME, NAME, "docs"]),  # docs: declared, but not offered
)
def test_search_page_and_json_show_only_the_scopes_documents_and_facets(
    client: Client,
    corpus: Corpus,
    scope: WebScope,
    words: list[str],
    mode: str,
    tag: str | None,
    extra: dict[str, str],
    collection: str,
) -> None:
    use_scope(scope)
    expected = expected_docs(scope, mode, words)
    shown = [doc for doc in expected if tag is None or tag in doc.tags]
    params = {"q": " ".join(words), "collection": collection, "mode": mode, "k": "50", **extra}
    if tag is not None:
        params["tag"] = tag

    event(f"search: {'some' if shown else 'no'} documents in scope")
    response = client.get("/kb/api/search/", params)
    if not scope.reaches_collection or collection != NAME:
        assert response.status_code == 404
        assert not markers_in(text_of(response))
        return
    assert response.status_code == 200
    data = response.json()
    documents = sorted(corpus.document_ids[doc.number] for doc in shown)
    assert sorted(result["document"] for result in data["results"]) == documents
    assert sorted(r["chunk"] for r in data["results"]) == sorted(corpus.chunks(shown))
    # Facets count every hit of the search (before the tag narrows it): only the scope's documents.
    assert dict(data["facets"]["tags"]) == dict(Counter(t for doc in expected for t in doc.tags))
    assert not markers_in(text_of(response)) & forbidden_markers(shown, words)

    page = html.unescape(text_of(client.get("/kb/", params)))
    assert not markers_in(page) & forbidden_markers(shown, words)
    assert {doc.marker for doc in shown} <= markers_in(page)


ASK_EXAMPLES = 12


@prop(ASK_EXAMPLES)
@given(scope=web_scopes, words=queries, mode=modes, extra=widening)
def test_ask_page_and_json_send_and_show_only_the_scopes_passages(
    client: Client,
    corpus: Corpus,
    chat_server: OpenAICompatibleServer,
    scope: WebScope,
    words: list[str],
    mode: str,
    extra: dict[str, str],
) -> None:
    use_scope(scope)
    expected = expected_docs(scope, mode, words)
    forbidden = forbidden_markers(expected, words)
    body = {"q": " ".join(words), "collection": NAME, "mode": mode, **extra}
    allowed_documents = {corpus.document_ids[doc.number] for doc in expected}
    event(f"ask: {'some' if expected else 'no'} documents in scope")
    for how in ("json", "stream", "page"):
        chat_server.reset()
        if how == "page":
            response = client.post("/kb/ask/", body)
            shown = html.unescape(text_of(response))
        elif how == "stream":
            response = client.post("/kb/api/ask/", {**body, "stream": "1"})
            shown = b"".join(response.streaming_content).decode() if response.status_code == 200 else ""
        else:
            response = client.post("/kb/api/ask/", json.dumps(body), content_type="application/json")
            shown = text_of(response)
        if not scope.reaches_collection:
            assert response.status_code == 404, how
            assert not chat_server.requests, how
            continue
        assert response.status_code == 200, how
        sent = json.dumps([request.body for request in chat_server.requests])
        assert not markers_in(sent) & forbidden, f"{how}: the prompt held passages of another scope"
        assert not markers_in(shown) & forbidden, how
        if how == "json":
            sources = response.json()["sources"]
            assert {source["document"] for source in sources} <= allowed_documents
            assert len(sources) == min(6, len(expected))
        elif how == "stream":
            events = [json.loads(line) for line in shown.splitlines()]
            assert {s["document"] for s in events[0]["sources"]} <= allowed_documents


SOURCE_EXAMPLES = 12


@prop(SOURCE_EXAMPLES)
@given(
    scope=web_scopes,
    docs=st.lists(st.sampled_from(CORPUS), min_size=6, max_size=6, unique_by=lambda doc: doc.number),
    extra=widening,
)
def test_the_source_view_opens_only_the_scopes_documents(
    client: Client, corpus: Corpus, scope: WebScope, docs: list[Doc], extra: dict[str, str]
) -> None:
    use_scope(scope)
    for doc in docs:
        response = client.get(f"/kb/source/{corpus.document_ids[doc.number]}/", extra)
        page = html.unescape(text_of(response))
        event(f"source: {'allowed' if scope.allows(doc) else 'refused'}")
        if scope.allows(doc):
            assert response.status_code == 200
            assert markers_in(page) == {doc.marker}
        else:
            assert response.status_code == 404
            assert not markers_in(page)


@pytest.mark.parametrize(
    "scope",
    [
        WebScope(tenant=None, tags=(), collections=None),  # "allows nothing": an empty tag list
        WebScope(tenant="ACME", tags=None, collections=None),
        WebScope(tenant=None, tags=("public",), collections=(NAME,)),
    ],
    ids=["no-tags", "tenant", "tag"],
)
def test_the_admin_retrieval_test_shows_staff_only_their_scope(
    client: Client, corpus: Corpus, scope: WebScope
) -> None:
    use_scope(scope)
    staff = User.objects.create_user("isolation-staff", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_collection"))
    admin = Client()
    admin.force_login(staff)
    params = {"q": "backup vault snapshot", "mode": "hybrid", "k": 50, "candidates": 50, "tenant": "globex"}
    params |= {"vector_weight": 1, "text_weight": 1, "rrf_k": 60}
    response = admin.get(f"/admin/django_rag/collection/{corpus.kb.pk}/retrieval-test/", params)
    assert response.status_code == 200
    shown = markers_in(html.unescape(text_of(response)))
    assert shown == {doc.marker for doc in visible(scope.allows)}
