"""Switching a collection to another embedder with no downtime: fill, index, flip, drop.

When a collection's EMBEDDER changes while its active space holds vectors, the collection row
keeps its *active* space (what searches, ``ask`` and ``kb.chunks()`` use, with queries embedded
by the old embedder) and gets an ``EmbeddingSwitch`` row naming the *target* space. Then:

1. ``fill`` embeds every document into the target, in batches committed one by one. The work
   left is read from the target space itself (documents holding chunks, but none there), so a
   killed run resumes where it stopped and embeds nothing it had committed; texts the target
   already holds for a tenant are reused by chunk hash. Meanwhile the ingest pipeline writes
   every new or changed document into both spaces (``index_documents``), and removals delete
   both, so the target is never behind once filled.
2. The target's ANN index comes from ``rag_migration`` (or ``build_index`` where allowed).
3. ``flip`` makes the target active in one transaction holding the collection row's lock,
   and only when no document is missing from it.
4. ``drop_old`` deletes the chunks of every other space; ``abort`` (before the flip) deletes the
   switch and the target's partial chunks, keeping the active space.

Writers hold a share lock on the collection row while they commit (``Collection.space_state``),
so a switch cannot begin, flip or abort between a writer's read of the spaces and its commit.

Where a switch stands (``status``, ``index_problem``, ``build_index``, ``target_embedder``) lives
in ``switch_status`` and is re-exported here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.db.models import F
from django.utils import timezone

from ..embedders import Embedder
from ..exceptions import ConfigurationError, RagError
from ..models import Collection, EmbeddingSwitch
from ..stores import DocumentInfo, StoredDocument, VectorStore, get_store
from ..types import ChunkData, SyncResult
from .pipeline import DEFAULT_BATCH_SIZE, embed_missing
from .switch_status import (
    SwitchStatus,
    build_index,
    check_switch,
    get_switch,
    has_index,
    index_problem,
    status,
    target_embedder,
)

__all__ = [
    "FillResult",
    "SwitchAborted",
    "SwitchStatus",
    "abort",
    "build_index",
    "check_switch",
    "drop_old",
    "fill",
    "flip",
    "get_switch",
    "has_index",
    "index_problem",
    "reembed",
    "reindex_lock",
    "start_run",
    "status",
    "target_embedder",
]


logger = logging.getLogger("django_rag.ingest")


class SwitchAborted(RagError):
    """The switch being filled was aborted, flipped or replaced by another process."""


@dataclass
class FillResult:
    """What ``fill`` did: documents written into the space, texts embedded, batches committed."""

    documents: int = 0
    embedded: int = 0
    batches: int = 0
    complete: bool = False


def fill(
    collection: Collection,
    space: str,
    embedder: Embedder,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    using: str | None = None,
    after: Any = None,
    until: Any = None,
    progress: Callable[[int], None] | None = None,
    pause: float = 0.0,
    max_batches: int | None = None,
) -> FillResult:
    """Embed into ``space`` every document that holds chunks but none there, a batch per transaction.

    Chunk texts are reused as stored (no loader runs again), taken from the active space.
    Each batch is written under its documents' locks and the collection row's share lock, and
    only for documents that still hold nothing in ``space`` (a writer may have dual-written one
    meanwhile): running it twice, or on several workers, writes each document once.
    ``after``/``until`` bound the document keys (a Celery batch); ``pause`` sleeps between
    batches (to spare a production database or an embedding API); ``progress`` hears of the
    documents of each batch. ``complete`` is True when nothing was left to do.
    """
    if embedder.space != space:
        raise ConfigurationError(f"embedder {embedder!r} does not make space {space!r}")
    store = get_store(using or collection.using)
    source = collection.space_state(using=store.using).active_space
    result = FillResult()
    cursor = after
    while max_batches is None or result.batches < max_batches:
        batch = store.missing_from_space(collection, space, source, after=cursor, limit=batch_size)
        if until is not None:
            batch = [doc for doc in batch if doc.key <= until]
        if not batch:
            break
        cursor = batch[-1].key
        written, embedded = _fill_batch(store, collection, space, embedder, batch)
        result.documents += written
        result.embedded += embedded
        result.batches += 1
        if progress:
            progress(len(batch))
        if pause:
            time.sleep(pause)
    result.complete = not store.missing_from_space(collection, space, source, limit=1)
    return result


def _fill_batch(
    store: VectorStore, collection: Collection, space: str, embedder: Embedder, batch: list[StoredDocument]
) -> tuple[int, int]:
    by_tenant: dict[str, list[tuple[DocumentInfo, list[ChunkData]]]] = {}
    for stored in batch:
        by_tenant.setdefault(stored.info.tenant, []).append((stored.info, stored.chunks))
    embedded = 0
    for tenant, items in by_tenant.items():
        # Embedding happens before the transaction: a slow embedder holds no lock.
        embedded += embed_missing(embedder, store, collection, tenant, [c for _, cs in items for c in cs])
    keys = [(stored.info.tenant, stored.info.source_id) for stored in batch]
    with store.locked(collection, keys):
        state = collection.space_state(lock=True, using=store.using)
        if space not in (state.active_space, state.target_space):
            raise SwitchAborted(
                f"collection {collection.name!r} no longer writes space {space!r} (the switch was "
                "aborted or replaced); nothing more was written"
            )
        held = store.holding_space(collection, keys, space)
        written = 0
        for items in by_tenant.values():
            todo = [(info, chunks) for info, chunks in items if (info.tenant, info.source_id) not in held]
            if todo:
                store.upsert_many(collection, todo, space=space)
                written += len(todo)
        # Progress commits with the batch it counts: rag_status never runs ahead of the data.
        EmbeddingSwitch.objects.using(store.using).filter(collection_id=collection.pk, space=space).update(
            run_documents=F("run_documents") + written,
            texts_embedded=F("texts_embedded") + embedded,
            progress_at=timezone.now(),
        )
    return written, embedded


def flip(collection: Collection, *, using: str | None = None) -> bool:
    """Make the switch's target the active space, atomically, if no document is missing from it.

    One transaction holding the collection row's exclusive lock: writers (who hold it shared
    while they commit) finish first, and later ones see the new active space. Returns False,
    changing nothing, when the target is incomplete or there is no switch.
    """
    using = using or collection.using
    store = get_store(using)
    with transaction.atomic(using=using):
        row = Collection.objects.using(using).select_for_update().get(pk=collection.pk)
        switch = EmbeddingSwitch.objects.using(using).filter(collection=row).first()
        if switch is None:
            return False
        if store.missing_from_space(row, switch.space, row.active_space, limit=1):
            return False
        previous = row.active_space
        row.active_embedder, row.active_space = switch.embedder, switch.space
        row.save(using=using, update_fields=["active_embedder", "active_space", "updated_at"])
        switch.delete(using=using)
    collection.active_embedder, collection.active_space = row.active_embedder, row.active_space
    logger.info("collection %r: switched from %s to %s", collection.name, previous, row.active_space)
    return True


def abort(collection: Collection, *, using: str | None = None) -> int:
    """End a switch before its flip: the active space stays, the target's chunks are deleted.

    Returns the number of chunks deleted. The settings still name the new EMBEDDER: set it back
    (or to another one) before the next ``collection()`` call, which would open a switch again.
    """
    using = using or collection.using
    with transaction.atomic(using=using):
        row = Collection.objects.using(using).select_for_update().get(pk=collection.pk)
        switch = EmbeddingSwitch.objects.using(using).filter(collection=row).first()
        if switch is None:
            raise ConfigurationError(f"collection {collection.name!r} has no switch in progress to abort")
        target = switch.space
        switch.delete(using=using)
    if target == row.active_space:
        return 0
    return get_store(using).drop_space(row, target)


def drop_old(collection: Collection, *, using: str | None = None) -> dict[str, int]:
    """Delete the chunks of every space but the active one (and a switch's target). ``{space: chunks}``."""
    using = using or collection.using
    store = get_store(using)
    state = collection.space_state(using=using)
    keep = {state.active_space, state.target_space}
    return {
        space: store.drop_space(collection, space)
        for space in store.space_counts(collection)
        if space not in keep
    }


class reindex_lock:
    """A session advisory lock per collection: one ``rag_reindex`` fills a collection at a time.

    ``wait``: block until the holder ends; otherwise raise a ``ConfigurationError`` at once.
    """

    def __init__(self, collection: Collection, *, using: str, wait: bool = False) -> None:
        self.collection = collection
        self.using = using
        self.wait = wait
        self.key = f"django_rag.reindex:{collection.pk}"

    def __enter__(self) -> reindex_lock:
        with connections[self.using].cursor() as cursor:
            if self.wait:
                cursor.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [self.key])
                return self
            cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [self.key])
            row = cursor.fetchone()
        if not (row and row[0]):
            raise ConfigurationError(
                f"another `rag_reindex {self.collection.name}` is running on this collection; wait for it "
                "(or pass --wait to queue behind it). A killed run releases the lock with its connection"
            )
        return self

    def __exit__(self, *exc: object) -> None:
        with connections[self.using].cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [self.key])


def start_run(collection: Collection, *, using: str) -> None:
    """Reset the per-run progress counters (rate and ETA describe this run, not a killed one)."""
    EmbeddingSwitch.objects.using(using).filter(collection_id=collection.pk).update(
        run_started_at=timezone.now(), run_documents=0, progress_at=None
    )


def reembed(
    collection: Collection,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
    using: str | None = None,
) -> SyncResult:
    """Finish the collection's embedder switch here and now: fill the target, flip, drop old spaces.

    The one-call form of ``rag_reindex NAME --drop-old`` (no index build, no advisory lock):
    for scripts, tests and the admin action. With no switch open it fills the active space with
    any document stored only in other spaces. ``progress`` hears of the documents of each batch.
    """
    using = using or collection.using
    switch = get_switch(collection, using=using)
    if switch is not None:
        check_switch(collection, switch)
        space, embedder = switch.space, target_embedder(switch, collection)
    else:
        space, embedder = collection.space, collection.get_embedder()
    filled = fill(collection, space, embedder, batch_size=batch_size, using=using, progress=progress)
    if switch is not None and not flip(collection, using=using):
        raise SwitchAborted(f"collection {collection.name!r}: documents are still missing from {space}")
    drop_old(collection, using=using)
    return SyncResult(documents=filled.documents, embedded=filled.embedded)
