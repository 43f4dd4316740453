"""The query log (one row per search or question asked through the pages and JSON endpoints) and
the conversations those questions form.

Rows the web layer writes (``django_rag.web.querylog``, ``django_rag.web.conversations``), defined
here, below the web layer, so that the pruning commands reach them without importing it
(migrations 0007, 0012, 0013).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

__all__ = ["Conversation", "QueryLog", "Turn"]


class Conversation(models.Model):
    """A thread of questions and answers, owned by one user (or anonymous session) in one scope.

    Only its owner, asking from the same scope (tenant, tags, collections), ever reaches it;
    operators read it in the admin within their own scope. Pruned after
    ``RAG["WEB"]["CONVERSATION_RETENTION_DAYS"]``.
    """

    created_at = models.DateTimeField(_("started"), auto_now_add=True)
    updated_at = models.DateTimeField(_("last question"), auto_now=True, db_index=True)
    title = models.CharField(_("title"), max_length=200)
    collection = models.CharField(_("collection"), max_length=100)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("user"),
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
    )
    session_key = models.CharField(max_length=40, blank=True, default="")
    tenant = models.CharField(_("tenant"), max_length=200, null=True, blank=True, db_index=True)
    scope = models.JSONField(_("scope"), default=dict, blank=True)

    class Meta:
        app_label = "django_rag"
        verbose_name = _("conversation")
        verbose_name_plural = _("conversations")
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.title


class Turn(models.Model):
    """One question of a conversation: as asked, as searched (standalone), and its answer."""

    conversation = models.ForeignKey(
        Conversation, verbose_name=_("conversation"), on_delete=models.CASCADE, related_name="turns"
    )
    created_at = models.DateTimeField(_("when"), auto_now_add=True)
    question = models.TextField(_("question"))
    standalone = models.TextField(_("searched for"), blank=True, default="")
    answer = models.TextField(_("answer"), blank=True, default="")
    # The cited sources as shown: [{"number", "title", "url", "document", "chunk"}, ...].
    sources = models.JSONField(_("sources"), default=list, blank=True)

    class Meta:
        app_label = "django_rag"
        verbose_name = _("turn")
        verbose_name_plural = _("turns")
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.question[:80]


class QueryLog(models.Model):
    """A search or an ask: what was asked, in which scope, what came back, and the user's verdict."""

    class Kind(models.TextChoices):
        SEARCH = "search", _("search")
        ASK = "ask", _("ask")

    class Feedback(models.IntegerChoices):
        UP = 1, _("helpful")
        DOWN = -1, _("not helpful")

    created_at = models.DateTimeField(_("when"), auto_now_add=True, db_index=True)
    kind = models.CharField(_("kind"), max_length=10, choices=Kind.choices)
    query = models.TextField(_("query"))
    mode = models.CharField(_("mode"), max_length=10)
    collection = models.CharField(_("collection"), max_length=100)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("user"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # The anonymous asker's session, so that only they can rate their own answer.
    session_key = models.CharField(max_length=40, blank=True, default="")
    tenant = models.CharField(_("tenant"), max_length=200, null=True, blank=True, db_index=True)
    scope = models.JSONField(_("scope"), default=dict, blank=True)
    hit_count = models.PositiveIntegerField(_("hits"), default=0)
    latency_ms = models.FloatField(_("latency (ms)"), default=0.0)
    answer = models.TextField(_("answer"), blank=True, default="")
    feedback = models.SmallIntegerField(_("feedback"), choices=Feedback.choices, null=True, blank=True)
    feedback_comment = models.TextField(_("feedback comment"), blank=True, default="")
    feedback_at = models.DateTimeField(_("feedback given"), null=True, blank=True)
    # The conversation this ask was a turn of (kept when the conversation is deleted or pruned).
    conversation = models.ForeignKey(
        Conversation,
        verbose_name=_("conversation"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="log_entries",
    )

    class Meta:
        app_label = "django_rag"
        verbose_name = _("query log entry")
        verbose_name_plural = _("query log")
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["collection", "created_at"], name="django_rag_qlog_coll")]

    def __str__(self) -> str:
        return self.query[:80]
