"""The query log: one row per search or question asked through the pages and JSON endpoints.

A model of the ``django_rag`` app (migration 0007), defined here beside the views that write it;
``DjangoRagConfig.ready()`` imports this module, as it does for the ``KnowledgeBase`` proxy.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

__all__ = ["QueryLog"]


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

    class Meta:
        app_label = "django_rag"
        verbose_name = _("query log entry")
        verbose_name_plural = _("query log")
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["collection", "created_at"], name="django_rag_qlog_coll")]

    def __str__(self) -> str:
        return self.query[:80]
