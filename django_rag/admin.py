"""The admin of the knowledge base (autodiscovered by ``django.contrib.admin``).

The ModelAdmins live in ``django_rag.web.admin``; importing them here registers them.
``reindex_selected`` is an admin action that also works on a site's registered models:
``actions = [reindex_selected]`` in the site's ModelAdmin. ``ScopedAdminMixin`` scopes a site's
admin of a registered model like the library's own: rows, tenant and owner (docs/security/admin.md).
"""

from __future__ import annotations

from .web.actions import reindex_collections, reindex_selected, remove_from_index, retry_failed
from .web.admin import ChunkAdmin, CollectionAdmin, DocumentAdmin, IngestJobAdmin, ModelAdmin, QueryLogAdmin
from .web.adminscope import ScopedAdminMixin
from .web.conversation_admin import ConversationAdmin

__all__ = [
    "ChunkAdmin",
    "CollectionAdmin",
    "ConversationAdmin",
    "DocumentAdmin",
    "IngestJobAdmin",
    "ModelAdmin",
    "QueryLogAdmin",
    "ScopedAdminMixin",
    "reindex_collections",
    "reindex_selected",
    "remove_from_index",
    "retry_failed",
]
