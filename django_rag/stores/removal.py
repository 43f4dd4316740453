"""Removing documents at any size: committed batches, each under its documents' locks.

One transaction for a whole prefix took one advisory lock per document, and PostgreSQL's lock
table holds ``max_locks_per_transaction * max_connections`` (6,400 by default) for every session
together: 200,000 documents failed with "out of shared memory". Here documents go in batches of
``batch_size`` (a few hundred locks at a time), in id order, each batch committed on its own.

Against concurrent writers of the same documents, a removal is atomic per document, not for the
whole set: each batch locks its documents (the key every writer takes, see ``lock_documents``)
and re-reads them under the lock, so a document is deleted with exactly the chunks committed
before it (a concurrent re-index either commits first and its chunks go with the document, or
waits and writes the document afresh after it), and one moved out of the removal's scope
meanwhile (another tenant, another id) stays. The removal covers the documents that exist when it
starts (their ids are read first, 8 bytes each): a document first created while it runs is a
write that came after it, and stays.

Inside a caller's transaction the batches are savepoints of it, and every lock is held until
it ends: remove large sets outside one.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Collection as Container
from itertools import islice

from django.db import connections, transaction
from django.db.models import QuerySet

from ..models import Document
from .locks import lock_documents

__all__ = ["DEFAULT_REMOVE_BATCH", "Progress", "remove_batched", "remove_keys"]

# Documents per transaction: locks held at once, and the chunks one trigger run rewrites postings for.
DEFAULT_REMOVE_BATCH = 500
_READ = 10_000  # ids read per round trip: 8 bytes each in memory, 8 MB per million documents

Progress = Callable[[int], None]  # called after each committed batch with the documents it removed


def remove_batched(
    documents: QuerySet[Document],
    collection_id: int,
    *,
    keep: Container[tuple[str, str]] = (),
    progress: Progress | None = None,
    batch_size: int = DEFAULT_REMOVE_BATCH,
) -> int:
    """Delete the ``documents`` (one collection's) and their chunks, ``batch_size`` per transaction."""
    ids = array("q", documents.order_by("pk").values_list("pk", flat=True).iterator(chunk_size=_READ))
    return _remove_ids(documents, collection_id, ids, keep, progress, batch_size)


def remove_keys(
    documents: QuerySet[Document],
    collection_id: int,
    source_ids: Iterable[str],
    *,
    progress: Progress | None = None,
    batch_size: int = DEFAULT_REMOVE_BATCH,
) -> int:
    """Delete the ``documents`` whose source id is in ``source_ids``, ``batch_size`` per transaction."""
    ids = array("q")
    for chunk in _batches(source_ids, _READ):
        ids.extend(documents.filter(source_id__in=chunk).values_list("pk", flat=True))
    return _remove_ids(documents, collection_id, array("q", sorted(ids)), (), progress, batch_size)


def _remove_ids(
    documents: QuerySet[Document],
    collection_id: int,
    ids: array[int],
    keep: Container[tuple[str, str]],
    progress: Progress | None,
    batch_size: int,
) -> int:
    # ``ids`` in ascending order: a document's chunks were written with it, so consecutive
    # documents hold consecutive chunk ids, and a batch rewrites few posting blocks (they group
    # chunk ids). In the order of the source ids, every batch rewrote blocks all over the collection.
    removed = 0
    for start in range(0, len(ids), batch_size):
        batch = ids[start : start + batch_size].tolist()
        with transaction.atomic(using=documents.db):
            rows = [
                row
                for row in documents.filter(pk__in=batch).values_list("pk", "tenant", "source_id")
                if (row[1], row[2]) not in keep
            ]
            count = _remove(documents, collection_id, rows, keep) if rows else 0
        removed += count
        if progress is not None and count:
            progress(count)
    return removed


def _remove(
    documents: QuerySet[Document],
    collection_id: int,
    rows: list[tuple[int, str, str]],
    keep: Container[tuple[str, str]],
) -> int:
    using = documents.db
    pks = [pk for pk, _, _ in rows]
    locked: set[tuple[str, str]] = set()
    while True:
        keys = {(tenant, source_id) for _, tenant, source_id in rows} - locked
        if not keys:
            break
        with connections[using].cursor() as cursor:
            lock_documents(cursor, collection_id, sorted(keys))
        locked |= keys
        # Read again under the locks: what a writer committed before them is what is removed. A
        # document moved to another key meanwhile (another tenant) that is still in scope is
        # locked under its new key too, then read once more.
        rows = list(documents.filter(pk__in=pks).values_list("pk", "tenant", "source_id"))
    ids = [pk for pk, tenant, source_id in rows if (tenant, source_id) not in keep]
    if not ids:
        return 0
    # Plain statements, chunks first: the ORM's cascade would read every row back to send
    # post_delete signals for it (any receiver, even one for other models, turns its fast path
    # off) and delete the chunks 100 at a time, each a run of the text index trigger.
    with connections[using].cursor() as cursor:
        cursor.execute("DELETE FROM django_rag_chunk WHERE document_id = ANY(%s)", [ids])
        cursor.execute("DELETE FROM django_rag_document WHERE id = ANY(%s)", [ids])
        return int(cursor.rowcount)


def _batches(values: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(values)
    while batch := list(islice(iterator, size)):
        yield batch
