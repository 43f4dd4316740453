"""The pages and JSON endpoints of ``include("django_rag.urls")``: search, ask, sources, feedback.

Real PostgreSQL, the hashing embedder, and the real openai client against a chat server on
loopback. The scope hook is tests/web_support.py: alice is tenant acme, bob tenant globex.
"""

from __future__ import annotations

import html
import json

import pytest
from django.contrib.auth.models import Permission, User
from django.core.files.base import ContentFile
from django.test import Client
from django.urls import reverse

import django_rag as rag
from django_rag.models import Document
from django_rag.web.models import QueryLog
from tests.mediaapp.models import Upload
from tests.web_support import body, login, set_web

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.conftest_web"]

SEARCH = "/kb/"
ASK = "/kb/ask/"
SEARCH_JSON = "/kb/api/search/"
ASK_JSON = "/kb/api/ask/"


def text(response) -> str:
    """The body as a reader sees it (HTML entities decoded)."""
    return html.unescape(body(response))


# The URLs and access


def test_the_url_names_live_in_the_django_rag_namespace(web) -> None:
    assert reverse("django_rag:search") == SEARCH
    assert reverse("django_rag:ask") == ASK
    assert reverse("django_rag:search_json") == SEARCH_JSON
    assert reverse("django_rag:ask_json") == ASK_JSON
    assert reverse("django_rag:source", args=[7]) == "/kb/source/7/"
    assert reverse("django_rag:feedback") == "/kb/feedback/"


def test_pages_send_anonymous_users_to_log_in_and_endpoints_answer_401(web, docs) -> None:
    anonymous = Client()
    response = anonymous.get(SEARCH, {"q": "backups"})
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]
    response = anonymous.get(SEARCH_JSON, {"q": "backups"})
    assert response.status_code == 401
    assert response.json()["error"] == "Log in to use the knowledge base."


def test_login_can_be_turned_off(web, docs, settings) -> None:
    set_web(settings, SCOPE=None, LOGIN_REQUIRED=False)
    response = Client().get(SEARCH_JSON, {"q": "snapshots kept"})
    assert response.status_code == 200
    assert response.json()["count"] >= 1


def test_each_view_needs_the_permission_its_setting_names(web, docs, settings) -> None:
    set_web(settings, PERMISSIONS={"search": "django_rag.view_document"})
    client = login("alice")
    assert client.get(SEARCH, {"q": "backups"}).status_code == 403
    assert client.get(SEARCH_JSON, {"q": "backups"}).json()["error"].startswith("You do not have permission")
    user = User.objects.get(username="alice")
    user.user_permissions.add(Permission.objects.get(codename="view_document"))
    assert login("alice").get(SEARCH, {"q": "backups"}).status_code == 200


def test_a_scope_hook_that_refuses_the_user_is_a_403(web, docs) -> None:
    response = login("mallory").get(SEARCH, {"q": "backups"})
    assert response.status_code == 403
    assert "This account belongs to no tenant." in text(response)


# Search page


def test_the_search_page_without_a_query_shows_the_form(web, alice) -> None:
    response = alice.get(SEARCH)
    assert response.status_code == 200
    assert 'role="search"' in text(response)
    assert "result" not in text(response).split("</form>")[1]


def test_a_search_shows_title_highlighted_snippet_page_and_source_link(web, docs, alice) -> None:
    response = alice.get(SEARCH, {"q": "snapshots kept", "mode": "hybrid"})
    assert response.status_code == 200
    page = text(response)
    document = Document.objects.get(source_id="acme/backups", tenant="acme")
    assert "Acme backups" in page
    assert "<mark>Snapshots</mark>" in page
    assert "Open the source at page 3" in page
    # A hit opens its passage: marked by ?passage=N, scrolled to by #passage-N.
    assert f'href="/kb/source/{document.pk}/?passage=0#passage-0"' in page


def test_a_search_that_finds_nothing_says_so(web, docs, alice) -> None:
    response = alice.get(SEARCH, {"q": "zebra giraffe", "mode": "text"})
    assert response.status_code == 200
    assert "No good matches for “zebra giraffe”" in text(response)
    assert "No passage in the documents you may search is a good match" in text(response)


def test_facets_count_tags_and_content_types_and_narrow_the_hits(web, alice) -> None:
    kb = rag.collection("docs")
    kb.index(
        [rag.RagDocument("a", "Snapshots kept nightly.", {"content_type": "text/markdown"})],
        tenant="acme",
        tags=["ops"],
    )
    kb.index(
        [rag.RagDocument("b", "Snapshots kept for a month.", {"content_type": "text/plain"})],
        tenant="acme",
        tags=["faq"],
    )
    page = text(alice.get(SEARCH, {"q": "snapshots kept", "mode": "text"}))
    assert "ops (1)" in page and "faq (1)" in page
    assert "text/markdown (1)" in page and "text/plain (1)" in page
    narrowed = alice.get(SEARCH, {"q": "snapshots kept", "mode": "text", "tag": "faq"})
    assert "1 document for" in text(narrowed)
    assert '<a href="/kb/source/' in text(narrowed) and ">b</a>" in text(narrowed)
    data = alice.get(SEARCH_JSON, {"q": "snapshots kept", "mode": "text", "type": "text/markdown"}).json()
    assert [hit["title"] for hit in data["results"]] == ["a"]
    assert dict(map(tuple, data["facets"]["tags"])) == {"ops": 1, "faq": 1}


def test_results_are_paged_and_a_page_past_the_end_is_a_404(web, alice, settings) -> None:
    set_web(settings, PAGE_SIZE=2)
    rag.collection("docs").index(
        [rag.RagDocument(f"n{n}", f"Snapshot number {n} is kept.") for n in range(5)], tenant="acme"
    )
    first = text(alice.get(SEARCH, {"q": "snapshot kept", "mode": "text"}))
    assert "Page 1 of 3" in first and 'rel="next"' in first
    third = alice.get(SEARCH, {"q": "snapshot kept", "mode": "text", "page": 3})
    assert third.status_code == 200
    assert '<ol class="rag-results" start="5">' in text(third)
    past = alice.get(SEARCH, {"q": "snapshot kept", "mode": "text", "page": 9})
    assert past.status_code == 404
    assert "There is no page 9 of these results." in text(past)


# Scope


def test_search_stays_within_the_users_tenant(web, docs, alice, bob) -> None:
    acme = alice.get(SEARCH_JSON, {"q": "snapshots kept"}).json()
    globex = bob.get(SEARCH_JSON, {"q": "snapshots kept"}).json()
    assert {hit["title"] for hit in acme["results"]} <= {"Acme backups", "Acme billing"}
    assert {hit["title"] for hit in globex["results"]} == {"Globex vault backups"}


def test_nothing_in_the_query_string_widens_the_scope(web, docs, alice) -> None:
    sneaky = {"q": "volcano vault", "mode": "text", "tenant": "globex", "tags": "handbook", "scope": "{}"}
    assert alice.get(SEARCH_JSON, sneaky).json()["count"] == 0
    assert "Globex vault backups" not in text(alice.get(SEARCH, sneaky))
    assert "Globex vault backups" not in text(alice.post(ASK, sneaky))
    globex = Document.objects.get(tenant="globex")
    assert alice.get(f"/kb/source/{globex.pk}/?tenant=globex").status_code == 404


def test_a_collection_outside_the_scope_is_a_404_like_an_unknown_one(web, docs) -> None:
    dave = login("dave")  # scope: tenant acme, collection "notes" only
    for name in ("docs", "nope"):
        response = dave.get(SEARCH_JSON, {"q": "backups", "collection": name})
        assert response.status_code == 404
        assert response.json() == {
            "error": f"Collection “{name}” does not exist or you may not search it.",
            "status": 404,
            "field": "collection",
        }
    assert dave.get(SEARCH_JSON, {"q": "backups"}).json()["collection"] == "notes"


def test_a_tag_scope_shows_only_documents_with_those_tags(web) -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("open", "Snapshots are public here.")], tags=["public"])
    kb.index([rag.RagDocument("closed", "Snapshots are private here.")], tags=["internal"])
    found = login("carol").get(SEARCH_JSON, {"q": "snapshots", "mode": "text"}).json()
    assert [hit["title"] for hit in found["results"]] == ["open"]


def test_a_document_whose_tenant_changes_is_out_of_reach_on_the_next_request(web, alice, committed) -> None:
    with committed():
        row = Upload.objects.create(
            file=ContentFile(b"The lighthouse log lists every storm.", name="log.txt"), tenant="acme"
        )
    document = Document.objects.get(source_id=f"mediaapp.upload:{row.pk}")
    assert alice.get(SEARCH_JSON, {"q": "lighthouse storm", "mode": "text"}).json()["count"] == 1
    assert alice.get(f"/kb/source/{document.pk}/").status_code == 200
    row.tenant = "globex"
    with committed():
        row.save()
    assert alice.get(SEARCH_JSON, {"q": "lighthouse storm", "mode": "text"}).json()["count"] == 0
    moved = Document.objects.get(source_id=f"mediaapp.upload:{row.pk}")
    assert alice.get(f"/kb/source/{moved.pk}/").status_code == 404


# Bad input: a clear message and a 4xx, never a traceback or SQL


BAD_SEARCHES = [
    ({"q": ""}, 400, "Enter a query."),
    ({"q": "   "}, 400, "Enter a query."),
    ({"q": "x" * 1001}, 400, "The query is too long: at most 1000 characters, it has 1001."),
    ({"q": "backups", "mode": "fuzzy"}, 400, "Unknown search mode fuzzy; choose hybrid, vector or text."),
    (
        {"q": "backups", "collection": "nope"},
        404,
        "Collection “nope” does not exist or you may not search it.",
    ),
    ({"q": "backups", "k": "0"}, 400, "k must be between 1 and 50."),
    ({"q": "backups", "k": "51"}, 400, "k must be between 1 and 50."),
    ({"q": "backups", "k": "ten"}, 400, "k must be a whole number."),
    ({"q": "backups", "page": "two"}, 400, "The page must be a whole number."),
]


@pytest.mark.parametrize(("params", "status", "message"), BAD_SEARCHES)
def test_bad_search_input_is_a_clear_4xx(web, docs, alice, params, status, message) -> None:
    for url in (SEARCH, SEARCH_JSON):
        response = alice.get(url, params)
        assert response.status_code == status, (url, params)
        body = text(response)
        assert message in body
        assert "Traceback" not in body and "SELECT" not in body


BAD_QUESTIONS = [
    ({"q": ""}, 400, "Enter a query."),
    ({"q": "x" * 1001}, 400, "The query is too long"),
    ({"q": "backups?", "mode": "fuzzy"}, 400, "Unknown search mode fuzzy"),
    (
        {"q": "backups?", "collection": "nope"},
        404,
        "Collection “nope” does not exist or you may not search it.",
    ),
]


@pytest.mark.parametrize(("params", "status", "message"), BAD_QUESTIONS)
def test_bad_questions_are_a_clear_4xx(web, docs, alice, params, status, message) -> None:
    for url in (ASK, ASK_JSON):
        response = alice.post(url, params)
        assert response.status_code == status, (url, params)
        assert message in text(response)
        assert "Traceback" not in text(response)
    bad_json = alice.post(ASK_JSON, "{not json", content_type="application/json")
    assert bad_json.status_code == 400
    assert bad_json.json()["error"] == "The request body is not valid JSON."


def test_a_mode_the_collection_cannot_run_is_a_400_naming_the_reason(web, alice, settings) -> None:
    settings.RAG = {
        **settings.RAG,
        "COLLECTIONS": {**settings.RAG["COLLECTIONS"], "vectors": {"TEXT_SEARCH": False}},
    }
    rag.collection("vectors").index([rag.RagDocument("v", "Snapshots kept.")], tenant="acme")
    response = alice.get(SEARCH_JSON, {"q": "snapshots", "mode": "text", "collection": "vectors"})
    assert response.status_code == 400
    assert "has TEXT_SEARCH off" in response.json()["error"]
    assert alice.get(SEARCH_JSON, {"q": "snapshots", "collection": "vectors"}).json()["mode"] == "vector"


def test_an_unknown_page_url_or_method_is_not_a_500(web, alice) -> None:
    assert alice.get("/kb/source/999999/").status_code == 404
    assert alice.get("/kb/source/abc/").status_code == 404
    assert alice.get(ASK_JSON).status_code == 405
    assert alice.post(SEARCH_JSON, {"q": "x"}).status_code == 405


# Ask


def test_an_answer_cites_its_sources_with_links(web, docs, alice, chat_server) -> None:
    response = alice.post(ASK, {"q": "how long are snapshots kept?", "mode": "text"})
    assert response.status_code == 200
    page = text(response)
    document = Document.objects.get(source_id="acme/backups", tenant="acme")
    # The passage's anchor in the source view (the source view's contract), not the whole document.
    url = f"/kb/source/{document.pk}/?passage=0#passage-0"
    assert f'<a class="rag-cite" href="{url}"' in page
    assert '<ul class="rag-sources">' in page and "[1] Acme backups, page 3" in page
    assert "Globex" not in page
    assert "volcano" not in json.dumps(chat_server.requests[-1].body)  # the prompt held acme's passages only


def test_without_hits_the_answer_is_not_enough_information_and_no_chat_call(web, alice, chat_server) -> None:
    response = alice.post(ASK, {"q": "what is the capital of Peru?"})
    assert response.status_code == 200
    assert "I don't have enough information" in text(response)
    assert "No passage in the documents you may search matched the question." in text(response)
    assert chat_server.requests == []


def test_a_chat_backend_that_is_down_gives_a_message_and_a_503(web, docs, alice, chat_server) -> None:
    # A server that fails (500 after its retries) may come back: "try again in a moment".
    chat_server.fail_next(1, status=500)
    page = alice.post(ASK, {"q": "how long are snapshots kept?", "mode": "text"})
    assert page.status_code == 503
    assert "The answer service is not available right now." in text(page)
    chat_server.fail_next(1, status=500)
    endpoint = alice.post(ASK_JSON, {"q": "how long are snapshots kept?", "mode": "text"})
    assert endpoint.status_code == 503
    chat_server.fail_next(1, status=500)
    streamed = alice.post(ASK_JSON, {"q": "how long are snapshots kept?", "mode": "text", "stream": "1"})
    events = [json.loads(line) for line in b"".join(streamed.streaming_content).splitlines()]
    assert [event["type"] for event in events] == ["sources", "error"]
    assert events[-1]["message"].startswith("The answer service is not available right now.")


def test_an_unreachable_chat_server_is_not_set_up_and_staff_see_the_cause(web, docs, alice, settings) -> None:
    settings.RAG = {**settings.RAG, "CHAT": {**settings.RAG["CHAT"], "BASE_URL": "http://127.0.0.1:1/v1"}}
    question = {"q": "how long are snapshots kept?", "mode": "text"}
    page = alice.post(ASK, question)
    assert page.status_code == 503
    assert "Answers are not set up here." in text(page)
    assert "127.0.0.1:1" not in text(page)  # the cause is for staff, not for every user
    endpoint = alice.post(ASK_JSON, question).json()
    assert endpoint["error"] == "Answers are not set up here."
    searched = text(alice.get(SEARCH, question))
    assert "Answers are not set up here." in searched and "Acme backups" in searched  # results still there
    User.objects.filter(username="alice").update(is_staff=True)
    staff = text(alice.post(ASK, question))
    assert "Answers are not set up here." in staff
    assert "cannot be reached" in staff and "RAG[&#x27;CHAT&#x27;][&#x27;BASE_URL&#x27;]" not in staff
    assert "RAG['CHAT']['BASE_URL']" in staff


def test_a_missing_key_is_not_set_up_here(web, docs, alice, settings, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings.RAG = {**settings.RAG, "CHAT": {**settings.RAG["CHAT"], "API_KEY": None}}
    page = alice.post(ASK, {"q": "how long are snapshots kept?", "mode": "text"})
    assert page.status_code == 503
    assert "Answers are not set up here." in text(page) and "try again in a moment" not in text(page)


def test_ask_needs_a_csrf_token(web, docs, settings) -> None:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.csrf.CsrfViewMiddleware"]
    User.objects.create_user("alice")
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.get(username="alice"))
    assert client.post(ASK, {"q": "snapshots?"}).status_code == 403
    assert client.post(ASK_JSON, {"q": "snapshots?"}).status_code == 403
    form = client.get(ASK)
    token = form.cookies["csrftoken"].value
    assert client.post(ASK, {"q": "snapshots?", "csrfmiddlewaretoken": token}).status_code == 200


def test_ask_json_streams_sources_then_deltas_then_the_rendered_answer(web, docs, alice) -> None:
    response = alice.post(ASK_JSON, {"q": "how long are snapshots kept?", "mode": "text", "stream": "1"})
    assert response["Content-Type"] == "application/x-ndjson"
    events = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    kinds = [event["type"] for event in events]
    assert kinds[0] == "sources" and kinds[-1] == "done" and kinds.count("delta") > 1
    assert events[0]["sources"][0]["title"] == "Acme backups"
    done = events[-1]
    assert "".join(e["text"] for e in events if e["type"] == "delta") == done["answer"]
    assert done["citations"] == [1]
    assert 'class="rag-cite"' in done["html"] and 'name="helpful"' in done["html"]
    assert QueryLog.objects.get(pk=done["entry"]).answer == done["answer"]


def test_ask_json_answers_in_one_object_and_takes_a_json_body(web, docs, alice) -> None:
    body = json.dumps({"q": "how long are snapshots kept?", "mode": "text"})
    data = alice.post(ASK_JSON, body, content_type="application/json").json()
    assert data["citations"] == [1]
    assert data["sources"][0]["url"].endswith("?passage=0#passage-0") and data["sources"][0]["page"] == 3
    assert data["answer"].endswith("[1]")


def test_asking_is_rate_limited_per_user_with_a_429_page_and_json(web, docs, alice, bob, settings) -> None:
    set_web(settings, ASK_RATE="2/m")
    question = {"q": "how long are snapshots kept?", "mode": "text"}
    assert alice.post(ASK, question).status_code == 200
    assert alice.post(ASK_JSON, question).status_code == 200
    page = alice.post(ASK, question)
    assert page.status_code == 429
    assert "You have asked too many questions." in text(page)
    assert 1 <= int(page["Retry-After"]) <= 60
    endpoint = alice.post(ASK_JSON, question)
    assert endpoint.status_code == 429
    assert endpoint.json()["error"].startswith("You have asked too many questions.")
    assert bob.post(ASK_JSON, question).status_code == 200  # each user has a counter of their own


# Query log and feedback


def test_searches_and_questions_are_logged_with_scope_hits_and_latency(web, docs, alice) -> None:
    alice.get(SEARCH, {"q": "snapshots kept", "mode": "text"})
    alice.get(SEARCH, {"q": "snapshots kept", "mode": "text", "page": 1, "tag": "handbook"})  # a refinement
    alice.post(ASK, {"q": "zebra?", "mode": "text"})
    # The search page's answer is logged as an ask of the same query.
    search, answered, ask = QueryLog.objects.order_by("created_at", "id")
    assert (answered.kind, answered.query, answered.hit_count) == ("ask", "snapshots kept", search.hit_count)
    assert (search.kind, search.query, search.mode, search.collection) == (
        "search",
        "snapshots kept",
        "text",
        "docs",
    )
    assert (search.user.username, search.tenant, search.scope) == ("alice", "acme", {"tenant": "acme"})
    assert search.hit_count >= 1 and search.latency_ms > 0
    assert (ask.kind, ask.hit_count) == ("ask", 0)


def test_the_query_log_can_be_turned_off(web, docs, alice, settings) -> None:
    set_web(settings, LOG_QUERIES=False)
    alice.get(SEARCH, {"q": "snapshots kept"})
    alice.post(ASK, {"q": "snapshots?"})
    assert not QueryLog.objects.exists()


def test_feedback_is_recorded_on_ones_own_answer_only(web, docs, alice, bob) -> None:
    answer = alice.post(ASK_JSON, {"q": "how long are snapshots kept?", "mode": "text"}).json()
    assert bob.post("/kb/feedback/", {"entry": answer["entry"], "helpful": "1"}).status_code == 404
    response = alice.post("/kb/feedback/", {"entry": answer["entry"], "helpful": "0", "comment": "too short"})
    assert response.status_code == 200
    assert "Thank you for your feedback" in text(response)
    entry = QueryLog.objects.get(pk=answer["entry"])
    assert (entry.feedback, entry.feedback_comment) == (QueryLog.Feedback.DOWN, "too short")
    assert alice.post("/kb/feedback/", {"entry": answer["entry"]}).status_code == 400


# Sources


def test_an_uploaded_file_is_served_through_its_storage(web, alice, bob, committed) -> None:
    with committed():
        row = Upload.objects.create(
            file=ContentFile(b"Storm log of the lighthouse.", name="storm.txt"), tenant="acme"
        )
    hit = alice.get(SEARCH_JSON, {"q": "lighthouse storm", "mode": "text"}).json()["results"][0]
    response = alice.get(hit["url"])
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"Storm log of the lighthouse."
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert 'inline; filename="storm' in response["Content-Disposition"]
    assert bob.get(hit["url"]).status_code == 404
    row.file.delete(save=False)


def test_a_web_page_source_redirects_to_its_url(web, alice) -> None:
    rag.collection("docs").index(
        [rag.RagDocument("web", "Snapshots policy online.", {"source": "https://docs.example.com/snap"})],
        tenant="acme",
    )
    document = Document.objects.get(source_id="web")
    response = alice.get(f"/kb/source/{document.pk}/")
    assert (response.status_code, response["Location"]) == (302, "https://docs.example.com/snap")


def test_a_document_without_a_file_or_url_shows_its_stored_text_by_page(web, alice) -> None:
    pages = "First page about backups.\fSecond page about restores.\fThird page about snapshots."
    rag.collection("docs").index([rag.RagDocument("manual", pages, {"source": "manual.pdf"})], tenant="acme")
    document = Document.objects.get(source_id="manual")
    page = text(alice.get(f"/kb/source/{document.pk}/"))
    assert '<section class="rag-document-page" id="page=3"' in page
    assert "Third page about snapshots." in page.split('id="page=3"')[1]
