"""Conversations as the pages see them: whose they are, how a question joins one, pruning.

A conversation belongs to one user (or, with LOGIN_REQUIRED off, one anonymous session) and to
the scope it was started in. ``owned_conversation`` is the only way a request reaches one: a
conversation of another user, another tenant or a scope that has changed since is a 404 with
the same message as one that does not exist.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from ..answer import Exchange, get_chat, standalone_question
from ..answer.chat import ChatBackend
from ..conf import rag_settings
from ..exceptions import RagError
from ..models import Conversation, QueryLog, Turn
from ..retention import prune_conversations
from .scope import Scope

__all__ = [
    "NOT_YOURS",
    "begin_turn",
    "conversation_json",
    "owned_conversation",
    "owned_conversations",
    "prune_conversations",
    "record_turn",
]


NOT_YOURS = _("This conversation does not exist or is not yours.")


def _owner(request: HttpRequest) -> dict[str, Any] | None:
    """The filter that picks ``request``'s own rows; None when the request has no identity."""
    if request.user.is_authenticated:
        return {"user": request.user}
    session = getattr(request, "session", None)
    key = session.session_key if session is not None else None
    return {"user": None, "session_key": key} if key else None


def owned_conversations(request: HttpRequest, scope: Scope) -> QuerySet[Conversation]:
    """``request``'s conversations started in this very scope, most recent first."""
    rows = Conversation.objects.using(rag_settings.DATABASE)
    owner = _owner(request)
    if owner is None:
        return rows.none()
    return rows.filter(**owner, tenant=scope.tenant, scope=scope.as_dict())


def owned_conversation(request: HttpRequest, scope: Scope, pk: Any) -> Conversation | None:
    """Conversation ``pk`` if it is ``request``'s own, in this scope; None otherwise."""
    if pk is None:
        return None
    try:
        number = int(pk)
    except (TypeError, ValueError):
        return None
    return owned_conversations(request, scope).filter(pk=number).first()


def begin_turn(question: str, conversation: Conversation | None) -> str:
    """What to search for: ``question``, rewritten as a standalone one with the earlier turns."""
    if conversation is None:
        return question
    earlier = [
        Exchange(turn.standalone or turn.question, turn.answer)
        for turn in conversation.turns.using(rag_settings.DATABASE).all()
    ]
    chat: ChatBackend | None
    try:
        chat = get_chat()
    except RagError:  # a chat backend that cannot be built: the key terms still carry over
        chat = None
    return standalone_question(question, earlier, chat)


def record_turn(
    request: HttpRequest,
    scope: Scope,
    *,
    collection: str,
    conversation: Conversation | None,
    question: str,
    standalone: str,
    answer: str,
    sources: list[dict[str, Any]],
    entry: QueryLog | None,
) -> Conversation | None:
    """Add the answered question to ``conversation`` (started here if None); link the log entry."""
    owner = _owner(request)
    if owner is None:
        session = getattr(request, "session", None)
        if session is None:
            return None
        session.save()  # an anonymous asker needs a key for the conversation to be theirs
        owner = {"user": None, "session_key": session.session_key}
    using = rag_settings.DATABASE
    with transaction.atomic(using=using):
        if conversation is None:
            conversation = Conversation.objects.using(using).create(
                title=question[:200],
                collection=collection,
                tenant=scope.tenant,
                scope=scope.as_dict(),
                **owner,
            )
        else:
            conversation.save(using=using, update_fields=["updated_at"])
        Turn.objects.using(using).create(
            conversation=conversation,
            question=question,
            standalone=standalone if standalone != question else "",
            answer=answer,
            sources=sources,
        )
        if entry is not None:
            entry.conversation = conversation
            entry.save(using=using, update_fields=["conversation"])
    return conversation


def conversation_json(conversation: Conversation) -> dict[str, Any]:
    turns = conversation.turns.using(rag_settings.DATABASE).all()
    return {
        "id": conversation.pk,
        "title": conversation.title,
        "collection": conversation.collection,
        "started": conversation.created_at.isoformat(),
        "updated": conversation.updated_at.isoformat(),
        "turns": [
            {
                "question": turn.question,
                "searched_for": turn.standalone or turn.question,
                "answer": turn.answer,
                "sources": turn.sources,
                "asked": turn.created_at.isoformat(),
            }
            for turn in turns
        ],
    }
