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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.db.models import F
from django.utils import timezone

from ..ddl import IndexSpec
from ..embedders import Embedder
from ..exceptions import ConfigurationError, RagError
from ..models import Collection, EmbeddingSwitch, embedder_for_space
from ..stores import DocumentInfo, StoredDocument, VectorStore, get_store
from ..types import ChunkData, SyncResult
from .pipeline import DEFAULT_BATCH_SIZE, embed_missing

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


@dataclass
class SpaceStatus:
    space: str
    chunks: int
    documents: int
    active: bool = False
    target: bool = False
    indexed: bool = False


@dataclass
class SwitchStatus:
    """A collection's spaces and, during a switch, its progress: ``rag_status`` and the admin show it."""

    name: str
    declared_embedder: str
    active_embedder: str
    active_space: str
    spaces: list[SpaceStatus] = field(default_factory=list)
    target_embedder: str | None = None
    target_space: str | None = None
    documents_total: int = 0
    documents_done: int = 0
    started_at: datetime | None = None
    progress_at: datetime | None = None
    rate: float | None = None  # documents per second of the current (or last) run
    eta_seconds: float | None = None
    problem: str = ""

    @property
    def percent(self) -> float:
        return 100.0 * self.documents_done / self.documents_total if self.documents_total else 100.0


def target_embedder(switch: EmbeddingSwitch, collection: Collection) -> Embedder:
    """The switch's embedder: its alias if it still makes the target space, else any that does."""
    try:
        return embedder_for_space(switch.space, (switch.embedder,), collection.name)
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"collection {collection.name!r} is switching to space {switch.space!r} but no embedder in "
            "RAG['EMBEDDERS'] produces it; restore that embedder, or run "
            f"`manage.py rag_reindex {collection.name} --abort`"
        ) from exc


def check_switch(collection: Collection, switch: EmbeddingSwitch) -> None:
    """Refuse to go on with a switch the settings no longer ask for (a second switch at once)."""
    declared = collection.embedder_space()
    if switch.space != declared:
        raise ConfigurationError(
            f"collection {collection.name!r} is switching from {switch.source_space} to {switch.space} "
            f"(EMBEDDER {switch.embedder!r}), but its EMBEDDER is now {collection.embedder!r} "
            f"({declared}); one switch at a time: run `manage.py rag_reindex {collection.name} --abort` "
            "to drop the unfinished space, then `manage.py rag_reindex "
            f"{collection.name}` to switch to the new EMBEDDER (or set EMBEDDER back to "
            f"{switch.embedder!r} to finish the first switch)"
        )


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


def has_index(space: str, using: str) -> bool:
    """Whether a partial ANN index covers ``space`` (found by its definition, whatever its name)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_indexes WHERE tablename = 'django_rag_chunk' "
            "AND (indexdef ILIKE '%%USING hnsw%%' OR indexdef ILIKE '%%USING ivfflat%%') "
            "AND position(%s IN indexdef) > 0",
            [f"'{space}'"],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def build_index(space: str, dimensions: int, *, using: str) -> IndexSpec | None:
    """Build ``space``'s HNSW index now, concurrently (no table lock); None when too wide to index.

    For sites that let a command run DDL; the others emit it with ``rag_migration``.
    """
    spec = IndexSpec(space, dimensions)
    if not spec.indexable:
        return None
    connection = connections[using]
    if connection.in_atomic_block:
        raise ConfigurationError("build_index runs CREATE INDEX CONCURRENTLY: call it outside a transaction")
    with connection.cursor() as cursor:
        cursor.execute(spec.create_sql(concurrently=True))
    return spec


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


def status(collection: Collection, *, using: str | None = None) -> SwitchStatus:
    """Each space's chunks and documents, and a switch's progress, rate and ETA."""
    using = using or collection.using
    store = get_store(using)
    row = Collection.objects.using(using).get(pk=collection.pk)
    switch = EmbeddingSwitch.objects.using(using).filter(collection=row).first()
    counts = store.space_counts(row)
    active_space = row.active_space
    if not active_space:
        try:
            active_space = row.embedder_space()
        except RagError as exc:
            active_space = f"({exc})"
    report = SwitchStatus(
        name=row.name,
        declared_embedder=row.embedder,
        active_embedder=row.active_embedder or row.embedder,
        active_space=active_space,
    )
    spaces = set(counts) | {active_space} | ({switch.space} if switch else set())
    for space in sorted(spaces):
        chunks, documents = counts.get(space, (0, 0))
        report.spaces.append(
            SpaceStatus(
                space,
                chunks,
                documents,
                active=space == active_space,
                target=switch is not None and space == switch.space,
                indexed=_indexed(space, using),
            )
        )
    if switch is not None:
        report.target_embedder, report.target_space = switch.embedder, switch.space
        report.documents_done = counts.get(switch.space, (0, 0))[1]
        report.documents_total = max(counts.get(active_space, (0, 0))[1], report.documents_done)
        report.started_at, report.progress_at = switch.started_at, switch.progress_at
        if switch.run_started_at and switch.progress_at and switch.run_documents:
            elapsed = (switch.progress_at - switch.run_started_at).total_seconds()
            if elapsed > 0:
                report.rate = switch.run_documents / elapsed
                report.eta_seconds = (report.documents_total - report.documents_done) / report.rate
        try:
            check_switch(row, switch)
            target_embedder(switch, row)
        except RagError as exc:
            report.problem = str(exc)
    return report


def _indexed(space: str, using: str) -> bool:
    try:
        return has_index(space, using)
    except Exception:  # a store without the chunk table (memory) has no index to report
        return False


def get_switch(collection: Collection, *, using: str | None = None) -> EmbeddingSwitch | None:
    """The collection's switch in progress, if any."""
    return (
        EmbeddingSwitch.objects.using(using or collection.using).filter(collection_id=collection.pk).first()
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


def index_problem(collection: Collection, space: str, *, using: str | None = None) -> str:
    """Why ``space`` should not become active yet ("" when it may): it lacks the ANN index the
    active space has, so the flip would turn indexed searches into sequential scans."""
    using = using or collection.using
    dims = space.rpartition(":")[2]
    if not dims.isdigit() or not IndexSpec(space, int(dims)).indexable:
        return ""  # too wide for an ANN index: searches in it are exact anyway
    active = collection.space_state(using=using).active_space
    if has_index(space, using) or not has_index(active, using):
        return ""
    return (
        f"space {space} has no ANN index while {active} has one, so searches after the flip would scan "
        "every chunk; run `manage.py rag_migration --app <your_app>` then `manage.py migrate` (or pass "
        f"--build-index), then `manage.py rag_reindex {collection.name}` again to flip"
    )
