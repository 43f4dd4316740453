"""Fixtures of the web tests (imported by tests/test_web_*.py): settings, users, documents, chat."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import caches
from django.test import Client

import django_rag as rag
from django_rag.api import KnowledgeBase
from django_rag.testing import OpenAICompatibleServer
from tests.web_support import login

ACME = [
    rag.RagDocument(
        "acme/backups",
        "Backups run every night at two. Snapshots are kept for thirty days.\n\n"
        "Restores are requested from the support desk and take about an hour.",
        {"title": "Acme backups", "page": 3},
    ),
    rag.RagDocument(
        "acme/billing",
        "Invoices are sent on the first day of each month by email. Card payments retry twice.",
        {"title": "Acme billing"},
    ),
]
GLOBEX = [
    rag.RagDocument(
        "globex/backups",
        "Globex snapshots are kept for ninety days in the vault of the volcano lair.",
        {"title": "Globex vault backups"},
    ),
]


@pytest.fixture(scope="module")
def chat_server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer() as server:
        yield server


@pytest.fixture
def web(settings: Any, chat_server: OpenAICompatibleServer) -> dict[str, Any]:
    """Settings of a site using the pages: the test URLs, a scope hook, a chat model on loopback."""
    chat_server.reset()
    settings.ROOT_URLCONF = "tests.web_urls"
    web = {"SCOPE": "tests.web_support.scope", "ASK_RATE": None, "PAGE_SIZE": 10}
    settings.RAG = {
        **settings.RAG,
        "WEB": web,
        "CHAT": {
            "BACKEND": "django_rag.answer.chat.OpenAIChat",
            "MODEL": "gpt-4o-mini",
            "BASE_URL": chat_server.base_url,
            "API_KEY": "test",
            "MAX_RETRIES": 0,
        },
    }
    caches["default"].clear()  # the rate limit counts in it
    return web


@pytest.fixture
def docs(web: dict[str, Any]) -> KnowledgeBase:
    kb = rag.collection("docs")
    kb.index(ACME, tenant="acme", tags=["handbook"])
    kb.index(GLOBEX, tenant="globex", tags=["handbook"])
    return kb


@pytest.fixture
def alice() -> Client:
    return login("alice")


@pytest.fixture
def bob() -> Client:
    return login("bob")
