"""One's conversations: list, reopen, delete (pages), and the same as JSON.

Every view reaches a conversation through ``owned_conversation``: another user's, another
tenant's, or one started in another scope is a 404 with the message of a missing one.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse

from .conversations import NOT_YOURS, conversation_json, owned_conversation, owned_conversations
from .models import Conversation
from .results import render_answer
from .service import WebError, json_response
from .views import RagView

__all__ = [
    "ConversationDeleteView",
    "ConversationJsonView",
    "ConversationListJsonView",
    "ConversationListView",
    "ConversationView",
]

_LIST_SIZE = 100


class _Source:
    """A stored citation, in the shape ``render_answer`` links."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.number = int(data.get("number") or 0)
        self.url = str(data.get("url") or "")
        self.title = str(data.get("title") or "")
        self.page: int | None = None


class _Owned(RagView):
    permission = "ask"

    def conversation(self, request: HttpRequest, pk: int) -> Conversation:
        conversation = owned_conversation(request, self.scope, pk)
        if conversation is None:
            raise WebError(404, str(NOT_YOURS))
        return conversation


class ConversationListView(_Owned):
    template_name = "django_rag/conversations.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        conversations = list(owned_conversations(request, self.scope)[:_LIST_SIZE])
        return render(request, self.template_name, self.base_context({"conversations": conversations}))


class ConversationView(_Owned):
    """The turns of one conversation, each answer with its citations, and a follow-up form."""

    template_name = "django_rag/conversation.html"

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        conversation = self.conversation(request, pk)
        turns = [
            {
                "turn": turn,
                "answer_html": render_answer(turn.answer, [_Source(s) for s in turn.sources]),
                "sources": turn.sources,
            }
            for turn in conversation.turns.all()
        ]
        context = {"conversation": conversation, "turns": turns}
        return render(request, self.template_name, self.base_context(context))


class ConversationDeleteView(_Owned):
    """POST (CSRF): delete one's conversation, then back to the list."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        self.conversation(request, pk).delete()
        return HttpResponseRedirect(reverse("django_rag:conversations"))


class ConversationListJsonView(_Owned):
    json: ClassVar[bool] = True

    def get(self, request: HttpRequest) -> HttpResponse:
        rows = owned_conversations(request, self.scope)[:_LIST_SIZE]
        return json_response(
            {
                "conversations": [
                    {
                        "id": row.pk,
                        "title": row.title,
                        "collection": row.collection,
                        "updated": row.updated_at.isoformat(),
                    }
                    for row in rows
                ]
            }
        )


class ConversationJsonView(_Owned):
    """GET: the conversation and its turns; DELETE (CSRF): delete it."""

    json: ClassVar[bool] = True

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return json_response(conversation_json(self.conversation(request, pk)))

    def delete(self, request: HttpRequest, pk: int) -> HttpResponse:
        conversation = self.conversation(request, pk)
        conversation.delete()
        return json_response({"deleted": pk})
