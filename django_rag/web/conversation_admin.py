"""Conversations in the admin: read-only, and only those of the operator's own scope."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from .admin_base import ModelAdmin, scoped_rows
from .models import Conversation, Turn

__all__ = ["ConversationAdmin"]


class TurnInline(admin.TabularInline[Turn, Conversation]):
    model = Turn
    extra = 0
    fields = ["created_at", "question", "standalone", "answer", "sources"]
    readonly_fields = ["created_at", "question", "standalone", "answer", "sources"]
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The turns are the conversation's content: who may view it reads them.
        return bool(request.user.has_perm("django_rag.view_conversation"))


@admin.register(Conversation)
class ConversationAdmin(ModelAdmin):
    """What users asked and were answered, thread by thread; nothing here can be changed."""

    list_display = ["title", "collection", "user", "tenant", "turn_count", "created_at", "updated_at"]
    list_filter = ["collection", "updated_at"]
    search_fields = ["title", "turns__question"]
    date_hierarchy = "updated_at"
    readonly_fields = [f.name for f in Conversation._meta.fields]
    inlines = [TurnInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        rows: QuerySet[Conversation] = super().get_queryset(request)
        return scoped_rows(request, rows, "collection")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=_("questions"))
    def turn_count(self, obj: Conversation) -> int:
        return obj.turns.count()
