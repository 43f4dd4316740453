"""Files, folders and URLs into a collection, every outcome recorded: the layer under ``rag_ingest``.

Each source is loaded (a loader picked by content type) and what it gives is synced through the
one pipeline, batch by batch. What cannot be indexed gets a Document row saying why, visible in
the admin: ``skipped`` (``unsupported-type``, ``too-large``, ``empty-text``, ``binary-content``,
``symlink-loop``, ``symlink-outside``; its old chunks go) or ``failed`` (``unreadable``,
``extraction-failed``, ``outbound-refused``, with the error; its old chunks stay searchable).

With ``prune`` a folder is mirrored: documents that came from files under it (their recorded
``source`` is a path in it) and that this run did not see are removed. ``dry_run`` reads and
extracts every source and reports what would change, writing nothing.

The run's values live in ``source_values`` and the reading of one source in ``source_loading``;
both are re-exported here.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator

from ..models import Collection
from ..stores import DocumentInfo, Record, get_store
from ..types import (
    SYMLINK_OUTSIDE,
    UNREADABLE,
    RagDocument,
)
from .pipeline import index_documents, reserved_prefixes
from .source_loading import is_url, load_source
from .source_values import (
    DEFAULT_MAX_BYTES,
    RESERVED_ID,
    IngestOptions,
    IngestReport,
    SourceOutcome,
    SourcesProgress,
)
from .walk import Found, escapes, source_id_for, walk

__all__ = [
    "DEFAULT_MAX_BYTES",
    "IngestOptions",
    "IngestReport",
    "SourceOutcome",
    "SourcesProgress",
    "count_sources",
    "ingest_sources",
    "ingest_targets",
    "is_url",
    "load_source",
    "targets",
]


_RECORD_BATCH = 500  # skip and failure records written per statement


def count_sources(sources: Iterable[str], options: IngestOptions) -> int:
    """How many sources ``ingest_sources`` will read (a walk of the folders, nothing loaded)."""
    total = 0
    for source in sources:
        if not is_url(source) and os.path.isdir(source):
            total += sum(1 for _ in _walk(source, options))
        else:
            total += 1
    return total


def ingest_sources(
    collection: Collection,
    sources: Iterable[str],
    options: IngestOptions | None = None,
    *,
    progress: SourcesProgress | None = None,
    stop: Callable[[], bool] | None = None,
    using: str | None = None,
) -> IngestReport:
    """Load every source (files, folders, URLs) and sync what loaded into ``collection`` in batches.

    ``stop`` is asked before each source and each batch: once it returns True the run ends after
    the batch in hand (``report.interrupted``), and nothing is pruned.
    """
    options = options or IngestOptions()
    sources = list(sources)
    run = _Run(collection, options, progress or SourcesProgress(), stop, using)
    run.check_targets(sources)
    run.ingest(run.documents(sources))
    if options.prune:
        run.prune(sources)
    return run.report


def targets(sources: Iterable[str], options: IngestOptions) -> Iterator[Found]:
    """Every file (and URL) ``ingest_sources`` would read, with its source id, folders walked.

    Paths outside ``options.root`` raise ConfigurationError before anything is yielded.
    """
    sources = list(sources)
    for source in sources:
        if not is_url(source):
            source_id_for(source, options.root)
    for source in sources:
        yield from _targets_of(source, options)


def ingest_targets(
    collection: Collection,
    found: Iterable[Found],
    options: IngestOptions | None = None,
    *,
    progress: SourcesProgress | None = None,
    using: str | None = None,
) -> IngestReport:
    """``ingest_sources`` for targets already walked (``targets``): a batch of ``rag_ingest --async``.

    Loads, records and syncs exactly as ``ingest_sources`` does, so a file gets the same source
    id, Document row and chunks whichever path ingested it. Never prunes.
    """
    options = options or IngestOptions()
    run = _Run(collection, options, progress or SourcesProgress(), None, using)
    run.ingest(run.load_all(found))
    return run.report


def _walk(folder: str, options: IngestOptions) -> Iterator[Found]:
    return walk(folder, options.root, options.excludes, follow_links=options.follow_links)


def _targets_of(source: str, options: IngestOptions) -> Iterator[Found]:
    if is_url(source):
        yield Found(source, source)
    elif os.path.isdir(source):
        yield from _walk(source, options)
    elif os.path.lexists(source):
        path, sid = os.path.abspath(source), source_id_for(source, options.root)
        outside = "" if options.follow_links else escapes(path, options.root)
        yield Found(path, sid, SYMLINK_OUTSIDE, outside) if outside else Found(path, sid)
    else:
        sid = source_id_for(source, options.root)
        yield Found(os.path.abspath(source), sid, UNREADABLE, "no such file or folder")


class _Run:
    """The state of one ``ingest_sources`` call."""

    def __init__(
        self,
        collection: Collection,
        options: IngestOptions,
        progress: SourcesProgress,
        stop: Callable[[], bool] | None,
        using: str | None,
    ) -> None:
        self.collection = collection
        self.options = options
        self.progress = progress
        self.stop = stop
        self.using = using
        self.store = get_store(using or collection.using)
        self.reserved = reserved_prefixes(collection)
        self.report = IngestReport()
        self.records: list[Record] = []
        self.seen: set[str] = set()  # source ids this run produced or recorded
        self.parted: list[tuple[str, set[str]]] = []  # PDFs: id -> the ids of their documents
        self.aborted = False
        self.stored: dict[str, tuple[str, str]] | None = None  # dry runs: id -> (content hash, status)

    def stopped(self) -> bool:
        if not self.aborted and self.stop is not None and self.stop():
            self.aborted = True
        if self.aborted:
            self.report.interrupted = True
        return self.aborted

    def check_targets(self, sources: list[str]) -> None:
        # Before anything is read: a path outside --root is a usage error, not a bad file.
        for source in sources:
            if not is_url(source):
                source_id_for(source, self.options.root)

    def ingest(self, docs: Iterator[RagDocument]) -> None:
        """Sync ``docs`` through the pipeline (read them only, in a dry run), then write the records."""
        options = self.options
        if options.dry_run:
            for _ in docs:
                pass
            return
        self.report.sync = index_documents(
            self.collection,
            docs,
            tags=list(options.tags),
            tenant=options.tenant,
            batch_size=options.batch_size,
            using=self.using,
            progress=self.progress,
            stop=self.stopped,
        )
        self.flush()
        self.drop_stale_parts()

    def documents(self, sources: list[str]) -> Iterator[RagDocument]:
        """The documents of every source, read lazily as the pipeline asks for them."""
        for source in sources:
            yield from self.load_all(_targets_of(source, self.options))

    def load_all(self, found: Iterable[Found]) -> Iterator[RagDocument]:
        """The documents of ``found``, each target loaded, counted and recorded as it is reached."""
        for target in found:
            if self.stopped():
                return
            outcome = self._load(target)
            self._count(outcome)
            if outcome.status != "loaded":
                self._record(outcome)
            elif not self.options.dry_run:
                yield from outcome.documents
            outcome.documents = []
            if outcome.status == "failed" and self.options.fail_fast:
                self.aborted = True

    def _load(self, target: Found) -> SourceOutcome:
        if target.reason:
            status = "failed" if target.reason == UNREADABLE else "skipped"
            return SourceOutcome(target.path, target.source_id, status, target.reason, target.error)
        if self.reserved and target.source_id.startswith(self.reserved):
            # Only a registered row's ingestion may write under its id (see reserved_prefixes); the
            # file fails alone, and leaves no record there either.
            error = (
                f"source id {target.source_id!r} is reserved for the rows of a model registered in "
                f"collection {self.collection.name!r}; rename the file or pass another --root"
            )
            return SourceOutcome(target.path, target.source_id, "failed", RESERVED_ID, error)
        follow = self.options.follow_links or is_url(target.path)
        outside = "" if follow else escapes(target.path, self.options.root)
        if outside:
            # Checked again as the file is read: a link planted since the walk (or on a worker's
            # storage, ``--async``) leads nowhere either.
            return SourceOutcome(target.path, target.source_id, "skipped", SYMLINK_OUTSIDE, outside)
        outcome = load_source(
            target.path,
            source_id=target.source_id,
            per_page=self.options.per_page,
            max_bytes=self.options.max_bytes,
            policy=self.options.policy,
            password=self.options.password_for(target.source_id),
        )
        if outcome.status == "loaded" and (
            outcome.content_type == "application/pdf" or len(outcome.documents) > 1
        ):
            self.parted.append((outcome.source_id, {doc.source_id for doc in outcome.documents}))
        return outcome

    def _count(self, outcome: SourceOutcome) -> None:
        report = self.report
        report.counts[outcome.status] += 1
        self.seen.add(outcome.source_id)
        self.seen.update(doc.source_id for doc in outcome.documents)
        if outcome.status == "loaded":
            report.documents += len(outcome.documents)
            if self.options.dry_run:
                outcome.change = self._change(outcome)
                report.changes[outcome.change] += 1
        else:
            report.reasons[outcome.reason] += 1
            report.problems.append(
                SourceOutcome(
                    outcome.source, outcome.source_id, outcome.status, outcome.reason, outcome.error
                )
            )
        self.progress.source(outcome)

    def _change(self, outcome: SourceOutcome) -> str:
        if self.stored is None:
            self.stored = {
                s.source_id: (s.content_hash, s.status)
                for s in self.store.sources(self.collection, tenant=self.options.tenant)
            }
        changes = set()
        for doc in outcome.documents:
            stored = self.stored.get(doc.source_id)
            digest = hashlib.sha1(doc.text.encode()).hexdigest()
            changes.add(
                "add" if stored is None else "unchanged" if stored == (digest, "indexed") else "update"
            )
        return "update" if len(changes) > 1 else changes.pop()

    def _record(self, outcome: SourceOutcome) -> None:
        if self.options.dry_run or outcome.reason == RESERVED_ID:
            return
        info = DocumentInfo(
            source_id=outcome.source_id,
            title=os.path.basename(outcome.source.rstrip("/")) or outcome.source_id,
            source=outcome.source,
            content_type=outcome.content_type,
            tags=sorted(set(self.options.tags)),
            tenant=self.options.tenant,
        )
        self.records.append(Record(info, outcome.status, outcome.reason, outcome.error))
        if len(self.records) >= _RECORD_BATCH:
            self.flush()

    def flush(self) -> None:
        if self.records:
            self.store.record_many(self.collection, self.records)
            self.records = []

    def drop_stale_parts(self) -> None:
        """A PDF's documents of an earlier run that this one did not make (pages it lost, or the
        whole-file document after switching to ``per_page``)."""
        tenant = self.options.tenant
        for source_id, made in self.parted:
            self.store.delete(
                self.collection, prefix=source_id, tenant=tenant, keep={(tenant, s) for s in made}
            )

    def prune(self, sources: list[str]) -> None:
        report = self.report
        if report.interrupted:
            report.prune_skipped = "the run did not read every source"
            return
        stale: set[str] = set()  # folders given may overlap
        for source in sources:
            if is_url(source) or not os.path.isdir(source):
                continue
            folder = os.path.abspath(source)
            prefix = source_id_for(folder, self.options.root) or None
            for state in self.store.sources(self.collection, tenant=self.options.tenant, prefix=prefix):
                inside = state.source.startswith(folder + os.sep)
                if inside and state.source_id not in self.seen and state.source_id not in stale:
                    stale.add(state.source_id)
                    report.pruned.append(state.source_id)
        if report.pruned and not self.options.dry_run:
            # In committed batches, however many files went (one lock per document at a time).
            self.progress.pruning(len(report.pruned))
            self.store.delete_many(
                self.collection, report.pruned, tenant=self.options.tenant, progress=self.progress.pruned
            )
