"""A chat server that hangs or trickles cannot hold a request, nor a database connection.

The site runs in Django's threaded WSGI server on loopback (its own threads, its own connections
to the test database); the chat model is the loopback OpenAI-compatible server, told to accept a request and
never answer it, or to answer one byte every 2 seconds. Each ask must end within
``RAG["CHAT"]["DEADLINE"]`` + 1 s with a clear message, and while it waits ``pg_stat_activity``
must show no connection that the request opened.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.cache import caches
from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.db import connection

import django_rag as rag
from django_rag.testing import OpenAICompatibleServer
from django_rag.web.models import QueryLog
from tests.conftest_web import ACME
from tests.web_support import login

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE = 3.0
TOO_LONG = "The answer took too long and was stopped."


@pytest.fixture
def stalling() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer() as server:
        yield server


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    """The site on loopback, one thread per request (as runserver serves it)."""
    httpd = ThreadedWSGIServer(("127.0.0.1", 0), _QuietHandler, allow_reuse_address=False)
    httpd.set_app(WSGIHandler())
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def site(settings: Any, stalling: OpenAICompatibleServer, server: str) -> str:
    settings.ROOT_URLCONF = "tests.web_urls"
    settings.RAG = {
        **settings.RAG,
        "WEB": {"SCOPE": "tests.web_support.scope", "ASK_RATE": "100/m"},
        "CHAT": {
            "BACKEND": "django_rag.answer.chat.OpenAIChat",
            "BASE_URL": stalling.base_url,
            "API_KEY": "test",
            # Generous per-attempt timeouts and retries: only the deadline can end these asks.
            "TIMEOUT": 60,
            "MAX_RETRIES": 3,
            "DEADLINE": DEADLINE,
        },
    }
    caches["default"].clear()
    rag.collection("docs").index(ACME, tenant="acme")
    # One answered search first: the timings below measure the deadline, not a cold start
    # (URLconf, templates, the first connection).
    Call(_ask(server, "/kb/?q=snapshots&mode=text", None, method="GET")).join()
    stalling.reset()
    return server


def _cookie() -> str:
    client = login("alice")
    return (
        f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    )


def _backends() -> set[int]:
    """Server processes connected to the test database, other than this test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return {row[0] for row in cursor.fetchall()}


class Call:
    """One HTTP request in a thread: its status, body and how long it took."""

    def __init__(self, request: urllib.request.Request) -> None:
        self.status = 0
        self.body = ""
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, args=(request,), daemon=True)
        self._thread.start()

    def _run(self, request: urllib.request.Request) -> None:
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                self.status, self.body = response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            self.status, self.body = error.code, error.read().decode()
        self.seconds = time.monotonic() - started

    def join(self) -> Call:
        self._thread.join(timeout=30)
        return self


def _while_waiting(server: OpenAICompatibleServer, call: Call, before: set[int]) -> set[int]:
    """Once the chat server holds the request: the connections opened since ``before``."""
    deadline = time.monotonic() + 10
    while not any(r.path == "/v1/chat/completions" for r in server.requests):
        assert time.monotonic() < deadline, "the chat server never received the question"
        time.sleep(0.02)
    time.sleep(0.5)  # well inside the wait, whatever the request does right after its chat call
    opened = _backends() - before
    # The request did use the database before the chat call: it searched and logged the question.
    assert QueryLog.objects.filter(kind="ask", answer="").exists()
    return opened


def _ask(
    site: str, path: str, data: dict[str, str] | None, *, method: str = "POST"
) -> urllib.request.Request:
    encoded = json.dumps(data).encode() if data is not None and method == "POST" else None
    request = urllib.request.Request(f"{site}{path}", data=encoded, method=method)
    request.add_header("Cookie", _cookie())
    if encoded is not None:
        request.add_header("Content-Type", "application/json")
    return request


@pytest.mark.parametrize("stall", ["hang", "trickle"])
def test_a_stalled_chat_server_ends_the_json_ask_within_the_deadline(
    site: str, stalling: OpenAICompatibleServer, stall: str, report: Any
) -> None:
    stalling.hang_next(10) if stall == "hang" else stalling.trickle_next(10, interval=2.0)
    before = _backends()
    call = Call(_ask(site, "/kb/api/ask/", {"q": "how long are snapshots kept?", "mode": "text"}))
    opened = _while_waiting(stalling, call, before)
    call.join()
    assert opened == set(), f"the request held connections {opened} while the chat model was called"
    assert call.status == 504 and json.loads(call.body)["error"].startswith(TOO_LONG)
    assert call.seconds < DEADLINE + 1
    report(f"{stall}, JSON: ended after {call.seconds:.2f} s (deadline {DEADLINE:g} s), 0 connections held")


@pytest.mark.parametrize("stall", ["hang", "trickle"])
def test_a_stalled_chat_server_ends_the_stream_with_an_error_event(
    site: str, stalling: OpenAICompatibleServer, stall: str, report: Any
) -> None:
    stalling.hang_next(10) if stall == "hang" else stalling.trickle_next(10, interval=2.0)
    before = _backends()
    question = {"q": "how long are snapshots kept?", "mode": "text", "stream": "1"}
    call = Call(_ask(site, "/kb/api/ask/", question))
    opened = _while_waiting(stalling, call, before)
    call.join()
    assert opened == set()
    events = [json.loads(line) for line in call.body.splitlines()]
    assert [event["type"] for event in events] == ["sources", "error"]
    assert events[-1]["message"].startswith(TOO_LONG) and events[-1]["status"] == 504
    assert call.seconds < DEADLINE + 1
    report(f"{stall}, NDJSON stream: ended after {call.seconds:.2f} s, 0 connections held")


@pytest.mark.parametrize("stall", ["hang", "trickle"])
def test_a_stalled_chat_server_ends_the_search_page_answer_with_a_message(
    site: str, stalling: OpenAICompatibleServer, stall: str, report: Any
) -> None:
    stalling.hang_next(10) if stall == "hang" else stalling.trickle_next(10, interval=2.0)
    before = _backends()
    call = Call(_ask(site, "/kb/?q=how+long+are+snapshots+kept%3F&mode=text", None, method="GET"))
    opened = _while_waiting(stalling, call, before)
    call.join()
    assert opened == set()
    assert call.status == 200  # the results were sent before the answer began
    assert "Acme backups" in call.body and TOO_LONG in call.body
    assert call.seconds < DEADLINE + 1
    report(f"{stall}, search page: ended after {call.seconds:.2f} s, 0 connections held")


def test_a_hanging_chat_server_ends_the_ask_page_with_a_504(
    site: str, stalling: OpenAICompatibleServer, report: Any
) -> None:
    stalling.hang_next(10)
    before = _backends()
    request = urllib.request.Request(
        f"{site}/kb/ask/", data=b"q=how+long+are+snapshots+kept%3F&mode=text", method="POST"
    )
    request.add_header("Cookie", _cookie())
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    call = Call(request)
    opened = _while_waiting(stalling, call, before)
    call.join()
    assert opened == set()
    assert call.status == 504 and TOO_LONG in call.body
    assert call.seconds < DEADLINE + 1
    report(f"hang, ask page: ended after {call.seconds:.2f} s, 0 connections held")
