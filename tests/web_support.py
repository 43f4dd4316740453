"""The scope hook of the web tests: alice is tenant acme, bob tenant globex, carol sees tag "public"."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.test import Client

SCOPES: dict[str, dict[str, Any]] = {
    "alice": {"tenant": "acme"},
    "bob": {"tenant": "globex"},
    "carol": {"tags": ["public"]},
    "dave": {"tenant": "acme", "collections": ["notes"]},
}


def scope(request: Any) -> dict[str, Any]:
    user = request.user
    if user.is_superuser:
        return {}
    found = SCOPES.get(user.get_username())
    if found is None:
        raise PermissionDenied("This account belongs to no tenant.")
    return found


def set_web(settings: Any, **values: Any) -> None:
    """Change RAG["WEB"] keys for one test (and reload the settings)."""
    settings.RAG = {**settings.RAG, "WEB": {**settings.RAG.get("WEB", {}), **values}}


def login(username: str, **extra: Any) -> Client:
    user = User.objects.filter(username=username).first() or User.objects.create_user(username, **extra)
    client = Client()
    client.force_login(user)
    return client


def body(response: Any) -> str:
    """A response's text, whole: the search page streams its answer into the page."""
    if getattr(response, "streaming", False):
        if not hasattr(response, "streamed_text"):  # a stream is read once; keep it for later reads
            response.streamed_text = b"".join(response.streaming_content).decode()
        return str(response.streamed_text)
    return str(response.content.decode())
