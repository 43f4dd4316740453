"""The advisory lock every writer of a document takes: one key per ``(collection, tenant, source_id)``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["lock_documents"]

_LOCK = """
SELECT count(pg_advisory_xact_lock(hashtextextended(s, %s::bigint)))
FROM (SELECT s FROM unnest(%s::text[]) AS s ORDER BY s) AS ordered
"""


def lock_documents(cursor: Any, collection_id: int, keys: Sequence[tuple[str, str]]) -> None:
    """Take the transaction-scoped advisory locks that serialize writes to these documents.

    Every writer of a document (a sync, a skip or failure record, a removal) takes this one key
    per ``(tenant, source_id)``; locks are taken in sorted order so two batches never deadlock.
    A transaction holds each until it ends, so a writer of many documents takes them in batches
    (see ``removal``): PostgreSQL's lock table is shared and small.
    """
    # The tenant's length first, so that no two (tenant, source_id) pairs make the same key text.
    names = sorted({f"{len(tenant)}:{tenant}:{source_id}" for tenant, source_id in keys})
    cursor.execute(_LOCK, [collection_id, names])
