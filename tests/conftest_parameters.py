"""Fixtures of the parameter tests (tests/test_parameter_*.py): one small corpus, indexed once per module.

Every test of those modules only reads, so the corpus is committed once (module scope) instead of
being indexed again inside each test's transaction; it is deleted when the module ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import Client, override_settings

import django_rag as rag
from django_rag.api import KnowledgeBase
from django_rag.models import Document
from django_rag.testing import OpenAICompatibleServer
from tests.parameter_support import CORPUS


@pytest.fixture(scope="module")
def kb(django_db_setup: None, django_db_blocker: Any) -> Iterator[KnowledgeBase]:
    with django_db_blocker.unblock():
        collection = rag.collection("docs")
        collection.index(CORPUS, tenant="acme")
        yield collection
        Document.objects.filter(collection=collection).delete()


@pytest.fixture(scope="module")
def chat_server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer() as server:
        yield server


@pytest.fixture(scope="module")
def site(kb: KnowledgeBase, chat_server: OpenAICompatibleServer) -> Iterator[None]:
    """The pages under /kb/ and the admin, open to anonymous users, with a chat model on loopback."""
    chat = {
        "BACKEND": "django_rag.answer.chat.OpenAIChat",
        "BASE_URL": chat_server.base_url,
        "API_KEY": "test",
        "MAX_RETRIES": 0,
    }
    web = {"SCOPE": None, "LOGIN_REQUIRED": False, "ASK_RATE": None, "LOG_QUERIES": False}
    with override_settings(ROOT_URLCONF="tests.web_urls", RAG={**settings.RAG, "WEB": web, "CHAT": chat}):
        yield


@pytest.fixture(scope="module")
def admin_client(site: None, django_db_blocker: Any) -> Iterator[Client]:
    with django_db_blocker.unblock():
        user = User.objects.create(username="parameters-root", is_staff=True, is_superuser=True)
        client = Client()
        client.force_login(user)
        yield client
        Session.objects.filter(session_key=client.session.session_key).delete()
        user.delete()
