"""The admin of the knowledge base (autodiscovered by ``django.contrib.admin``).

The ModelAdmins live in ``django_rag.web.admin``; importing them here registers them.
``reindex_selected`` is an admin action that also works on a site's registered models:
``actions = [reindex_selected]`` in the site's ModelAdmin.
"""

from __future__ import annotations

from .web.actions import reindex_collections, reindex_selected, remove_from_index, retry_failed
from .web.admin import ChunkAdmin, CollectionAdmin, DocumentAdmin, IngestJobAdmin, ModelAdmin, QueryLogAdmin
from .web.conversation_admin import ConversationAdmin

__all__ = [
    "ChunkAdmin",
    "CollectionAdmin",
    "ConversationAdmin",
    "DocumentAdmin",
    "IngestJobAdmin",
    "ModelAdmin",
    "QueryLogAdmin",
    "reindex_collections",
    "reindex_selected",
    "remove_from_index",
    "retry_failed",
]
