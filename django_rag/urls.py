"""``path("kb/", include("django_rag.urls"))``: the search and ask pages, their JSON endpoints, sources.

URL names (namespace ``django_rag``): ``search``, ``ask``, ``search_json``, ``ask_json``,
``source``, ``feedback``, ``conversations``, ``conversation``, ``conversation_delete``,
``conversations_json``, ``conversation_json``.
"""

from __future__ import annotations

from django.urls import path

from .web.api import AskJsonView, SearchJsonView
from .web.conversation_views import (
    ConversationDeleteView,
    ConversationJsonView,
    ConversationListJsonView,
    ConversationListView,
    ConversationView,
)
from .web.views import AskView, FeedbackView, SearchView, SourceView

app_name = "django_rag"

urlpatterns = [
    path("", SearchView.as_view(), name="search"),
    path("ask/", AskView.as_view(), name="ask"),
    path("api/search/", SearchJsonView.as_view(), name="search_json"),
    path("api/ask/", AskJsonView.as_view(), name="ask_json"),
    path("source/<int:pk>/", SourceView.as_view(), name="source"),
    path("feedback/", FeedbackView.as_view(), name="feedback"),
    path("conversations/", ConversationListView.as_view(), name="conversations"),
    path("conversations/<int:pk>/", ConversationView.as_view(), name="conversation"),
    path("conversations/<int:pk>/delete/", ConversationDeleteView.as_view(), name="conversation_delete"),
    path("api/conversations/", ConversationListJsonView.as_view(), name="conversations_json"),
    path("api/conversations/<int:pk>/", ConversationJsonView.as_view(), name="conversation_json"),
]
