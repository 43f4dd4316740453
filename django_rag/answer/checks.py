"""What ``manage.py check`` says about answers: which backend writes them, and whether it can.

- I006 no RAG['CHAT']: answers are quoted from the documents (the extractive backend)
- W005 the chat backend has no API key (from ``missing_key_message``)
- W006 the chat backend's server cannot be reached at its BASE_URL
"""

from __future__ import annotations

import inspect
import os
import socket
from typing import Any
from urllib.parse import urlsplit

from django.core.checks import CheckMessage, Info, Warning

from ..backends import backend_class, backend_options, option_problems
from ..conf import rag_settings
from ..exceptions import RagError

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
    """W005 and W006 about a configured ``RAG["CHAT"]`` (``user`` is the site's own RAG dict).

    The backend is not built: its class checks its own options (``check_options``,
    ``missing_key``), so a check needs no secret and opens no client.
    """
    if "CHAT" not in user:
        return []
    config = rag_settings.CHAT
    try:
        cls = backend_class(config, "chat backend")
        if option_problems(config, "chat backend"):
            return []  # a backend that cannot be built is reported when an answer is asked for
    except (RagError, TypeError):
        return []
    options = backend_options(config)
    missing_key = getattr(cls, "missing_key", None)
    message = missing_key(options) if missing_key is not None else None
    if message is not None:
        # A warning: `migrate` and `collectstatic` must run on machines that hold no secrets.
        return [
            Warning(
                message,
                hint="Set API_KEY in RAG['CHAT'] or OPENAI_API_KEY. Until then, questions get "
                "'Answers are not set up here.' (staff see this cause).",
                id="django_rag.W005",
            )
        ]
    if "base_url" not in inspect.signature(cls).parameters:
        return []  # not an OpenAI-compatible server
    return _reachability(options.get("base_url"))


def _reachability(base_url: str | None) -> list[CheckMessage]:
    url = base_url or os.environ.get("OPENAI_BASE_URL") or ""
    if not url:
        return []  # the public API: its reachability is the network's business, not a setting's
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=_CONNECT_TIMEOUT):
            return []
    except OSError as exc:
        setting = "RAG['CHAT']['BASE_URL']" if base_url else "OPENAI_BASE_URL"
        return [
            Warning(
                f"the chat server at {url} ({setting}) cannot be reached: {exc}",
                hint=f"Start the server or correct {setting}. Until then, questions get "
                "'Answers are not set up here.' (staff see this cause).",
                id="django_rag.W006",
            )
        ]
