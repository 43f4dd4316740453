"""The web layer's models, for compatibility: they live in ``django_rag.models.querylog``."""

from ..models import Conversation, QueryLog, Turn

__all__ = ["Conversation", "QueryLog", "Turn"]
