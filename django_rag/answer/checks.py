"""What ``manage.py check`` says about answers: which backend writes them, and whether it can.

- I006 no RAG['CHAT']: answers are quoted from the documents (the extractive backend)
- W005 the chat backend has no API key (from ``missing_key_message``)
- W006 the chat backend's server cannot be reached at its BASE_URL
"""

from __future__ import annotations

import os
import socket
from typing import Any
from urllib.parse import urlsplit

from django.core.checks import CheckMessage, Info, Warning

from ..exceptions import RagError
from .chat import get_chat

__all__ = ["chat_messages", "extractive_info"]

# A check that waits longer would slow every runserver start on a machine without the network.
_CONNECT_TIMEOUT = 2.0


def extractive_info(user: dict[str, Any]) -> list[CheckMessage]:
    """I006 when the site sets no ``RAG["CHAT"]`` (``user`` is the site's own RAG dict)."""
    if "CHAT" not in user:
        return [
            Info(
                "RAG['CHAT'] is not set: answers quote sentences from the documents, with citations "
                "(django_rag.answer.extractive.ExtractiveChat); no language model writes them",
                hint="For written answers, set RAG['CHAT'] to a model, e.g. "
                "{'BACKEND': 'django_rag.answer.chat.OpenAIChat', 'MODEL': 'gpt-4o-mini'}.",
                id="django_rag.I006",
            )
        ]
    return []


def chat_messages(user: dict[str, Any]) -> list[CheckMessage]:
    """W005 and W006 about a configured ``RAG["CHAT"]`` (``user`` is the site's own RAG dict)."""
    if "CHAT" not in user:
        return []
    try:
        backend = get_chat()
    except RagError:  # a backend that cannot be built is reported when an answer is asked for
        return []
    message = getattr(backend, "missing_key_message", None)
    if message is not None and not getattr(backend, "api_key", True):
        # A warning: `migrate` and `collectstatic` must run on machines that hold no secrets.
        return [
            Warning(
                message,
                hint="Set API_KEY in RAG['CHAT'] or OPENAI_API_KEY. Until then, questions get "
                "'Answers are not set up here.' (staff see this cause).",
                id="django_rag.W005",
            )
        ]
    return _reachability(backend)


def _reachability(backend: Any) -> list[CheckMessage]:
    if not hasattr(backend, "base_url"):
        return []
    url = backend.base_url or os.environ.get("OPENAI_BASE_URL") or ""
    if not url:
        return []  # the public API: its reachability is the network's business, not a setting's
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=_CONNECT_TIMEOUT):
            return []
    except OSError as exc:
        setting = "RAG['CHAT']['BASE_URL']" if backend.base_url else "OPENAI_BASE_URL"
        return [
            Warning(
                f"the chat server at {url} ({setting}) cannot be reached: {exc}",
                hint=f"Start the server or correct {setting}. Until then, questions get "
                "'Answers are not set up here.' (staff see this cause).",
                id="django_rag.W006",
            )
        ]
