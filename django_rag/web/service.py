"""What the pages and the JSON endpoints share: access, the scoped search, the scoped question.

Every request goes through ``check_access`` and every search through ``scoped_search`` or
``start_ask``, which pass the request's scope to the library and never a tenant, tag or
collection from the query string. Errors become ``WebError``: a status and a message that is
safe to show (library messages about the request; a generic one for anything else, logged).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.utils.translation import gettext as _

from ..answer import AnswerStream, Prompt, prompt_for
from ..api import KnowledgeBase, collection
from ..exceptions import (
    ChatDeadlineError,
    ChatUnreachableError,
    ConfigurationError,
    QueryError,
    RagError,
)
from ..types import Hit
from .conf import web_settings
from .models import QueryLog
from .querylog import log_query
from .scope import Scope, scope_for, visible_collections

__all__ = [
    "Asking",
    "Searched",
    "WebError",
    "answer_failure",
    "ask_from_search",
    "chat_unavailable",
    "check_access",
    "default_mode",
    "json_response",
    "pick_collection",
    "scoped_search",
    "start_ask",
]

logger = logging.getLogger("django_rag.web")


class WebError(Exception):
    """A request that cannot be served: ``status`` and a message safe to show to its user."""

    def __init__(self, status: int, message: str, *, field: str = "", headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.headers = headers or {}


def json_response(data: Any, status: int = 200) -> JsonResponse:
    """JSON as people read it: non-ASCII text (“quotes”, accents) left as it is."""
    return JsonResponse(data, status=status, json_dumps_params={"ensure_ascii": False})


def check_access(request: HttpRequest, view: str) -> Scope:
    """Login, the view's permission (``RAG["WEB"]["PERMISSIONS"]``) and the scope hook, or a WebError."""
    settings = web_settings()
    if settings["LOGIN_REQUIRED"] and not request.user.is_authenticated:
        raise WebError(401, _("Log in to use the knowledge base."))
    permission = settings["PERMISSIONS"].get(view)
    if permission and not request.user.has_perm(permission):
        raise WebError(403, _("You do not have permission to use this page."))
    try:
        return scope_for(request)
    except PermissionDenied as exc:
        raise WebError(403, str(exc) or _("You may not search the knowledge base.")) from exc


def pick_collection(request: HttpRequest, name: str) -> KnowledgeBase:
    """The collection ``name`` (default: the first one offered) if this request may search it."""
    offered = visible_collections(request)
    if not name:
        if not offered:
            raise WebError(404, _("There is no collection you may search."))
        name = offered[0]
    if name not in offered:
        # One answer for "no such collection" and "not yours": the message must not tell them apart.
        raise WebError(
            404,
            _("Collection “%(name)s” does not exist or you may not search it.") % {"name": name},
            field="collection",
        )
    try:
        return collection(name)
    except RagError as exc:
        logger.exception("django-rag web: collection %r cannot be opened", name)
        raise WebError(503, _("The knowledge base is not available right now.")) from exc


def default_mode(kb: KnowledgeBase, mode: str) -> str:
    return mode or ("hybrid" if kb.text_search else "vector")


@dataclass
class Searched:
    """A scoped search: every hit fetched (``MAX_RESULTS``), for facets and pagination."""

    kb: KnowledgeBase
    query: str
    mode: str
    hits: list[Hit]
    latency_ms: float
    entry: QueryLog | None = None


def _search_errors(exc: Exception) -> WebError:
    if isinstance(exc, QueryError):
        return WebError(400, _("This search cannot run: %(reason)s") % {"reason": exc})
    logger.error("django-rag web: search failed", exc_info=exc)
    return WebError(503, _("Search is not available right now. Please try again later."))


def scoped_search(
    request: HttpRequest,
    scope: Scope,
    kb: KnowledgeBase,
    query: str,
    mode: str,
    *,
    k: int,
    log: bool = True,
    strategy: dict[str, Any] | None = None,
) -> Searched:
    """``kb.search`` confined to ``scope``; logged unless ``log`` is False (later pages of one search).
    ``strategy``: the strategy options of the request (``forms.strategy_options``)."""
    mode = default_mode(kb, mode)
    started = time.perf_counter()
    hits: list[Hit] = []
    if not scope.empty:
        try:
            hits = kb.search(query, k=k, mode=mode, **scope.search_options(), **(strategy or {}))
        except (RagError, DatabaseError) as exc:
            raise _search_errors(exc) from exc
    latency = (time.perf_counter() - started) * 1000
    searched = Searched(kb=kb, query=query, mode=mode, hits=hits, latency_ms=latency)
    if log:
        searched.entry = log_query(
            request,
            kind=QueryLog.Kind.SEARCH,
            query=query,
            mode=mode,
            collection=kb.name,
            scope=scope,
            hit_count=len(hits),
            latency_ms=latency,
        )
    return searched


@dataclass
class Asking:
    """A question whose passages are found; iterate ``stream`` for the answer (the chat call)."""

    kb: KnowledgeBase
    question: str
    mode: str
    stream: AnswerStream
    started: float
    entry: QueryLog | None = None

    @property
    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000


def start_ask(
    request: HttpRequest,
    scope: Scope,
    kb: KnowledgeBase,
    question: str,
    mode: str,
    *,
    search_for: str | None = None,
    strategy: dict[str, Any] | None = None,
) -> Asking:
    """Search for ``search_for`` (default ``question``: a follow-up's standalone form) within
    ``scope`` and log ``question``; the chat model is called on iteration."""
    mode = default_mode(kb, mode)
    search_for = search_for or question
    started = time.perf_counter()
    if scope.empty:
        stream = AnswerStream(Prompt(question=question, sources=[]))
    else:
        try:
            stream = kb.ask(
                search_for,
                stream=True,
                k=web_settings()["ASK_K"],
                mode=mode,
                **scope.search_options(),
                **(strategy or {}),
            )
        except (RagError, DatabaseError) as exc:
            raise _search_errors(exc) from exc
    asking = Asking(kb=kb, question=question, mode=mode, stream=stream, started=started)
    asking.entry = log_query(
        request,
        kind=QueryLog.Kind.ASK,
        query=question,
        mode=mode,
        collection=kb.name,
        scope=scope,
        hit_count=len(stream.sources),
        latency_ms=asking.elapsed_ms,
    )
    return asking


def ask_from_search(request: HttpRequest, scope: Scope, searched: Searched, question: str, k: int) -> Asking:
    """An answer from the first ``k`` hits of a search already made (the search page's), logged as
    an ask of ``question``; the chat model is called on iteration."""
    started = time.perf_counter() - searched.latency_ms / 1000
    hits = searched.hits[:k]
    try:
        embedder = searched.kb.get_embedder()
    except RagError:  # no usable space: the quoting backend scores by terms alone
        embedder = None
    stream = AnswerStream(prompt_for(searched.query, hits, embedder=embedder))
    asking = Asking(kb=searched.kb, question=question, mode=searched.mode, stream=stream, started=started)
    asking.entry = log_query(
        request,
        kind=QueryLog.Kind.ASK,
        query=question,
        mode=searched.mode,
        collection=searched.kb.name,
        scope=scope,
        hit_count=len(hits),
        latency_ms=asking.elapsed_ms,
    )
    return asking


def chat_unavailable(exc: Exception) -> str:
    """Log a failed chat call; the message its user sees."""
    logger.error("django-rag web: the chat backend failed", exc_info=exc)
    return _("The answer service is not available right now. Please try again in a moment.")


def answer_failure(request: HttpRequest, exc: Exception) -> WebError:
    """A failed answer as its user should read it: the status and a message; staff also see the cause.

    A missing key or an unreachable server is a misconfiguration ("not set up here"), which
    trying again will not fix; a deadline is a slow model; anything else may pass.
    """
    if isinstance(exc, ChatDeadlineError):
        logger.warning("django-rag web: %s", exc)
        status, message = 504, _("The answer took too long and was stopped. Please try again later.")
    elif isinstance(exc, ConfigurationError | ChatUnreachableError):
        logger.error("django-rag web: answers are not set up: %s", exc)
        status, message = 503, _("Answers are not set up here.")
    else:
        status, message = 503, chat_unavailable(exc)
    if getattr(request.user, "is_staff", False):
        message = _("%(message)s Cause (shown to staff only): %(cause)s") % {"message": message, "cause": exc}
    return WebError(status, message)
