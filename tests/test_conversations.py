"""Conversations: follow-ups continue a thread, and nobody but its owner in its scope reaches one.

The site quotes its answers (no RAG["CHAT"], the extractive backend) unless a test says otherwise.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import caches
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

import django_rag as rag
from django_rag.answer import Exchange, carry_terms, standalone_question
from django_rag.answer.chat import OpenAIChat
from django_rag.testing import OpenAICompatibleServer
from django_rag.web.models import Conversation, QueryLog, Turn
from tests.web_support import body, login, set_web

pytestmark = pytest.mark.django_db

DOCS = [
    rag.RagDocument(
        "handbook/backups",
        "# Backups and restores\n\nLumen takes a snapshot of every workspace each night and keeps it "
        "for 35 days.\n\nTo restore a workspace, an owner opens Settings, then Backups, and chooses "
        '"Restore to a new workspace".',
        {"title": "Backups and restores"},
    ),
    rag.RagDocument(
        "handbook/billing",
        "# Billing\n\nInvoices are issued on the first day of each month. You can pay by card.",
        {"title": "Billing"},
    ),
]
QUESTION = "How long are backups kept?"
FOLLOW_UP = "Can I restore one to a new workspace?"


@pytest.fixture
def site(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.web_urls"
    settings.RAG = {
        **{key: value for key, value in settings.RAG.items() if key != "CHAT"},
        "WEB": {"SCOPE": "tests.web_support.scope", "ASK_RATE": None},
    }
    caches["default"].clear()
    kb = rag.collection("docs")
    kb.index(DOCS, tenant="acme")
    kb.index(DOCS, tenant="globex")


def _ask(client: Client, question: str, conversation: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"q": question, "mode": "hybrid"}
    if conversation is not None:
        data["conversation"] = conversation
    response = client.post("/kb/api/ask/", json.dumps(data), content_type="application/json")
    assert response.status_code == 200, response.content
    result: dict[str, Any] = response.json()
    return result


def test_without_a_chat_model_a_follow_up_carries_the_earlier_questions_key_terms() -> None:
    standalone = carry_terms(FOLLOW_UP, [Exchange(QUESTION)])
    assert standalone == "Can I restore one to a new workspace? backups kept"
    assert standalone_question(QUESTION, [], None) == QUESTION  # a first question stands alone


def test_a_chat_model_rewrites_the_follow_up() -> None:
    with OpenAICompatibleServer() as server:
        server.chat_reply = "Can I restore a backup to a new workspace?"
        chat = OpenAIChat(base_url=server.base_url, api_key="test", max_retries=0)
        rewritten = standalone_question(FOLLOW_UP, [Exchange(QUESTION, "Kept for 35 days [1]")], chat)
        assert rewritten == "Can I restore a backup to a new workspace?"
        [request] = server.requests
        conversation = request.body["messages"][1]["content"]
        assert QUESTION in conversation and FOLLOW_UP in conversation


def test_a_chat_model_that_fails_to_rewrite_falls_back_to_carried_terms() -> None:
    with OpenAICompatibleServer() as server:
        server.fail_next(1, status=400)
        chat = OpenAIChat(base_url=server.base_url, api_key="test", max_retries=0)
        assert standalone_question(FOLLOW_UP, [Exchange(QUESTION)], chat).endswith("backups kept")


def test_a_follow_up_continues_the_thread_and_the_query_log_links_its_turns(site: None) -> None:
    alice = login("alice")
    first = _ask(alice, QUESTION)
    assert "35 days" in first["answer"] and first["conversation"] is not None
    second = _ask(alice, FOLLOW_UP, first["conversation"])
    assert second["conversation"] == first["conversation"]
    assert second["searched_for"] == "Can I restore one to a new workspace? backups kept"
    assert "Restore to a new workspace" in second["answer"]
    assert second["sources"][second["citations"][0] - 1]["title"] == "Backups and restores"
    conversation = Conversation.objects.get(pk=first["conversation"])
    assert [turn.question for turn in conversation.turns.all()] == [QUESTION, FOLLOW_UP]
    logged = QueryLog.objects.filter(kind="ask").order_by("created_at")
    assert [entry.conversation_id for entry in logged] == [conversation.pk, conversation.pk]


def test_users_list_reopen_and_delete_their_conversations(site: None) -> None:
    alice = login("alice")
    number = _ask(alice, QUESTION)["conversation"]
    listed = body(alice.get("/kb/conversations/"))
    assert f'href="/kb/conversations/{number}/"' in listed and QUESTION in listed
    assert alice.get("/kb/api/conversations/").json()["conversations"][0]["id"] == number
    page = body(alice.get(f"/kb/conversations/{number}/"))
    assert QUESTION in page and "35 days" in page
    assert alice.get(f"/kb/api/conversations/{number}/").json()["turns"][0]["question"] == QUESTION
    response = alice.post(f"/kb/conversations/{number}/delete/")
    assert response.status_code == 302 and response["Location"] == "/kb/conversations/"
    assert not Conversation.objects.filter(pk=number).exists()
    assert not Turn.objects.exists()
    assert QueryLog.objects.filter(kind="ask").count() == 1  # the log keeps the question, unlinked
    number = _ask(alice, QUESTION)["conversation"]
    assert alice.delete(f"/kb/api/conversations/{number}/").json() == {"deleted": number}
    assert not Conversation.objects.exists()


@pytest.mark.parametrize("intruder", ["bob", "carol", "alice-in-another-scope", "anonymous"])
def test_no_other_user_or_tenant_reaches_a_conversation(site: None, settings: Any, intruder: str) -> None:
    alice = login("alice")
    number = _ask(alice, QUESTION)["conversation"]
    if intruder == "anonymous":
        set_web(settings, LOGIN_REQUIRED=False)
        client = Client()
    elif intruder == "alice-in-another-scope":
        # The same user whose scope has changed since (moved to another tenant): not reachable.
        settings.RAG = {
            **settings.RAG,
            "WEB": {**settings.RAG["WEB"], "SCOPE": "tests.test_conversations.moved"},
        }
        client = alice
    else:
        client = login(intruder)
    message = "This conversation does not exist or is not yours."
    # 404 with the message of a missing conversation; 403 where the scope hook refuses the request.
    refused = 403 if intruder == "anonymous" else 404

    def is_refused(response: Any) -> bool:
        return response.status_code == refused and (refused == 403 or message in body(response))

    for url in (f"/kb/conversations/{number}/", f"/kb/api/conversations/{number}/"):
        assert is_refused(client.get(url))
    assert client.post(f"/kb/conversations/{number}/delete/").status_code == refused
    assert client.delete(f"/kb/api/conversations/{number}/").status_code == refused
    asked = client.post(
        "/kb/api/ask/", json.dumps({"q": FOLLOW_UP, "conversation": number}), content_type="application/json"
    )
    assert asked.status_code == refused
    assert refused == 403 or asked.json()["field"] == "conversation"
    assert is_refused(client.get("/kb/", {"q": FOLLOW_UP, "conversation": number}))
    listed = client.get("/kb/api/conversations/")
    assert listed.status_code == refused or listed.json()["conversations"] == []
    assert Conversation.objects.get(pk=number).turns.count() == 1  # nothing was added or deleted


def moved(request: Any) -> dict[str, Any]:
    return {"tenant": "globex"}


def test_the_admin_shows_conversations_read_only_within_the_operators_scope(site: None) -> None:
    acme = _ask(login("alice"), QUESTION)["conversation"]
    globex = _ask(login("bob"), QUESTION)["conversation"]
    # alice, an operator of tenant acme (the scope hook gives her acme), may view conversations.
    operator = User.objects.get(username="alice")
    operator.is_staff = True
    operator.save()
    operator.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["view_conversation", "change_conversation", "delete_conversation"]
        )
    )
    client = Client()
    client.force_login(operator)
    listed = body(client.get("/admin/django_rag/conversation/"))
    assert f"/admin/django_rag/conversation/{acme}/change/" in listed
    assert f"/admin/django_rag/conversation/{globex}/change/" not in listed
    page = client.get(f"/admin/django_rag/conversation/{acme}/change/")
    assert page.status_code == 200 and "35 days" in body(page) and 'name="_save"' not in body(page)
    assert client.get(f"/admin/django_rag/conversation/{globex}/change/").status_code == 302  # "not found"
    assert client.post(f"/admin/django_rag/conversation/{acme}/delete/").status_code == 403
    assert client.get("/admin/django_rag/conversation/add/").status_code == 403
    assert Conversation.objects.count() == 2


def test_pruning_deletes_idle_conversations_only(site: None) -> None:
    alice = login("alice")
    old = _ask(alice, QUESTION)["conversation"]
    recent = _ask(alice, "How do I pay?")["conversation"]
    Conversation.objects.filter(pk=old).update(updated_at=timezone.now() - datetime.timedelta(days=31))
    call_command("rag_prune_conversations", verbosity=0)
    assert list(Conversation.objects.values_list("pk", flat=True)) == [recent]
    call_command("rag_prune_conversations", "--days", "0", verbosity=0)
    assert not Conversation.objects.exists()
