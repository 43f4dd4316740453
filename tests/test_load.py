"""Load: the search page, the JSON search endpoint and ask (JSON) under concurrent clients.

The site is served for real over HTTP on 127.0.0.1 (Django's threaded WSGI server, as
``runserver`` and ``LiveServerTestCase`` run it, one thread per request), with the web tests'
scope hook (alice is tenant acme, bob tenant globex) and the real openai client against the
loopback chat server. Bounded in count (8 clients x 6 requests) and in time (a hard deadline).
Every response is checked for the caller's scope too. The longer, parametrised run is
bench/load.py; the figures and what they guarantee are in docs/security/load.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client

import django_rag as rag
from django_rag.answer.chat import ChatStream, get_chat
from django_rag.backends import one_per_process
from django_rag.embedders.base import get_embedder
from django_rag.embedders.hashing import HashingEmbedder
from tests.load_support import Call, endpoint_calls, run_load, serve

pytest_plugins = ["tests.conftest_web"]

CLIENTS = 8
ROUNDS = 2  # each client: ROUNDS x (search page, search JSON, ask JSON)
SECONDS = 20.0  # hard cap on the load itself
# Each request thread holds at most one connection and closes it as its response ends; a client's
# next request may open its own just before that, so at most two per client, plus this test's
# own connection and the sampler's.
CONNECTION_BOUND = 2 * CLIENTS + 2
QUESTIONS = ["how long are snapshots kept?", "when are invoices sent?", "who restores backups?"]
TENANTS = {"alice": "acme", "bob": "globex"}


def _documents(tenant: str) -> list[rag.RagDocument]:
    topics = [
        "Snapshots are kept for {n} days and restores take about an hour.",
        "Invoices are sent on day {n} of each month; card payments retry twice.",
        "The support desk restores backups on request within {n} hours.",
    ]
    return [
        rag.RagDocument(f"{tenant}/{n}", topics[n % 3].format(n=n + 1), {"title": f"{tenant} doc {n}"})
        for n in range(30)
    ]


def _plan(client: int, session: str, tenant: str) -> list[Call]:
    other = next(t for t in TENANTS.values() if t != tenant)
    calls = []
    for round_ in range(ROUNDS):
        question = QUESTIONS[(client + round_) % len(QUESTIONS)]
        calls += endpoint_calls(question, session, mine=f"{tenant} doc", theirs=f"{other} doc")
    return calls


def _warm_up(port: int, plans: list[list[Call]]) -> None:
    """One call per endpoint first: a process's first question imports openai and builds the
    client (seconds on a busy machine), which is start-up cost, not load."""
    warm = run_load(port, [plans[0][:3]], seconds=60.0, timeout=60.0)
    assert warm.errors == []


@pytest.fixture
def sessions(web: dict[str, Any]) -> dict[str, str]:
    """Session cookies of alice and bob, and their tenants' documents."""
    kb = rag.collection("docs")
    cookies = {}
    for username, tenant in TENANTS.items():
        kb.index(_documents(tenant), tenant=tenant)
        client = Client()
        client.force_login(User.objects.create_user(username))
        cookies[username] = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    return cookies


# Committed data: the server's request threads read it on connections of their own.
@pytest.mark.django_db(transaction=True)
def test_concurrent_clients_get_no_error_within_the_bounds(sessions, chat_server, report) -> None:
    users = list(TENANTS)
    plans = [_plan(n, sessions[users[n % 2]], TENANTS[users[n % 2]]) for n in range(CLIENTS)]

    with serve() as port:
        _warm_up(port, plans)
        chat_server.reset()
        result = run_load(port, plans, seconds=SECONDS)

    for line in result.lines():
        report(f"load (tests/test_load.py): {line}")
    assert result.errors == []
    assert result.not_sent == 0 and result.sent == CLIENTS * ROUNDS * 3
    # Every ask, and every search page's answer above its results (SEARCH_ANSWERS), reached the
    # chat model once.
    assert len(chat_server.requests) == CLIENTS * ROUNDS * 2
    assert 2 <= result.max_connections <= CONNECTION_BOUND
    assert result.connections_after <= 1  # this test's own: no request left one open


# Concurrent first requests: one backend per process


class SlowChat:
    """A chat backend that takes a while to build, as OpenAIChat does on its first import."""

    built = 0
    model = "slow"

    def __init__(self, **options: Any) -> None:
        time.sleep(0.2)
        SlowChat.built += 1

    def complete(self, messages: Any) -> tuple[str, dict[str, int]]:
        return "", {}

    def stream(self, messages: Any) -> ChatStream:
        return ChatStream(iter([]))


class SlowEmbedder(HashingEmbedder):
    built = 0

    def __init__(self, **options: Any) -> None:
        time.sleep(0.2)
        SlowEmbedder.built += 1
        super().__init__(**options)


def _at_once(function: Callable[[], object], threads: int = 8) -> set[int]:
    results: list[object] = []
    start = threading.Barrier(threads)

    def call() -> None:
        start.wait()
        results.append(function())

    workers = [threading.Thread(target=call) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    return {id(result) for result in results}


def test_concurrent_first_questions_build_one_chat_backend(settings) -> None:
    settings.RAG = {**settings.RAG, "CHAT": {"BACKEND": "tests.test_load.SlowChat"}}
    SlowChat.built = 0

    identities = _at_once(get_chat)

    assert len(identities) == 1 and SlowChat.built == 1


def test_concurrent_first_searches_build_one_embedder(settings) -> None:
    slow = {"BACKEND": "tests.test_load.SlowEmbedder", "DIMENSIONS": 64}
    settings.RAG = {**settings.RAG, "EMBEDDERS": {**settings.RAG["EMBEDDERS"], "slow": slow}}
    SlowEmbedder.built = 0

    identities = _at_once(lambda: get_embedder("slow"))

    assert len(identities) == 1 and SlowEmbedder.built == 1


def test_a_build_may_ask_its_own_cache_for_another_value() -> None:
    @one_per_process
    def depth(n: int) -> int:
        return 0 if n == 0 else depth(n - 1) + 1

    results: list[int] = []
    worker = threading.Thread(target=lambda: results.append(depth(3)), daemon=True)
    worker.start()
    worker.join(5)

    assert results == [3]  # a plain lock would hang here
