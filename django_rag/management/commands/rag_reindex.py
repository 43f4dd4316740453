"""Re-index collections or registered models: ``manage.py rag_reindex [COLLECTION | APP.MODEL ...]``.

A collection whose EMBEDDER changed is switched with no downtime (see
``django_rag.ingest.switch``): its documents are embedded into the new space in resumable
batches while searches keep using the old, complete one; then the new space's ANN index is
checked (``--build-index`` builds it) and the collection flips atomically. ``--no-flip`` stops
before the flip, ``--abort`` rolls a switch back, ``--drop-old`` deletes the old space's chunks
(now, or later on its own), ``--async`` hands the batches to Celery workers. Changed
TEXT_CONFIG / TEXT_SEARCH settings are applied to its stored chunks first (the text index is
rebuilt, nothing is embedded), which is the moment to pay for it rather than the first request
after a deploy.
A registered model (``kb.Attachment``) has every row ingested again, here or with ``--async``
on the Celery workers; documents of rows that no longer exist are removed.
"""

from __future__ import annotations

from argparse import ArgumentParser
from collections import Counter
from itertools import islice
from typing import Any

from django.apps import apps
from django.core.management.base import CommandError

from django_rag.api import collection
from django_rag.conf import rag_settings
from django_rag.embedders import Embedder
from django_rag.exceptions import RagError
from django_rag.ingest import switch
from django_rag.ingest.pipeline import DEFAULT_BATCH_SIZE
from django_rag.ingest.registration import Registration, get_registration
from django_rag.ingest.rows import ingest_row, is_up_to_date, prune_orphans
from django_rag.management.options import add_database_argument
from django_rag.management.output import RagCommand, printable
from django_rag.models import Collection, Document
from django_rag.stores import get_store
from django_rag.tasks import enqueue, enqueue_switch, uses_celery


class Command(RagCommand):
    help = (
        "Re-index the given collections (default: all): switch a collection whose EMBEDDER changed to "
        "its new embedding space with no downtime (fill, index, flip; --abort, --drop-old), or "
        "re-ingest the rows of the given registered models (APP.MODEL)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("targets", nargs="*", metavar="COLLECTION|APP.MODEL")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            help=f"Documents (or rows) per round and transaction (default {DEFAULT_BATCH_SIZE}).",
        )
        parser.add_argument(
            "--changed-only",
            action="store_true",
            help="APP.MODEL: skip rows whose document is up to date (same text; or same file name, not "
            "modified since). Collections always move only what is stale.",
        )
        parser.add_argument(
            "--async",
            dest="run_async",
            action="store_true",
            help="APP.MODEL: enqueue one Celery task per row instead of ingesting here; COLLECTION: enqueue "
            "the switch's batches and its flip (needs a broker).",
        )
        switching = parser.add_argument_group("embedder switch (collections)")
        switching.add_argument(
            "--build-index",
            action="store_true",
            help="Build the new space's ANN index here (CREATE INDEX CONCURRENTLY) before the flip, "
            "instead of emitting it with rag_migration.",
        )
        switching.add_argument(
            "--no-flip", action="store_true", help="Fill the new space but keep searching the old one."
        )
        switching.add_argument(
            "--drop-old",
            action="store_true",
            help="After the flip, or later on its own: delete the chunks of all spaces but the active one.",
        )
        switching.add_argument(
            "--abort",
            action="store_true",
            help="Roll back a switch before its flip: delete the new space's chunks, keep the active one.",
        )
        switching.add_argument(
            "--wait",
            action="store_true",
            help="If another rag_reindex is filling the collection, wait for it instead of exiting.",
        )
        switching.add_argument(
            "--pause",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="Sleep between batches, to spare the database or the embedding API (default 0).",
        )
        switching.add_argument(
            "--queue",
            help="--async: the Celery queue of the batches (default 'django_rag.reindex.<collection>').",
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        using = options["database"] or rag_settings.DATABASE
        options["database"] = using
        targets = options["targets"] or sorted(
            {*rag_settings.COLLECTIONS, *Collection.objects.using(using).values_list("name", flat=True)}
        )
        failed = []
        for target in targets:
            # Collection names are slugs; a dot means app_label.ModelName.
            done = self._model(target, options) if "." in target else self._collection(target, options)
            if not done:
                failed.append(target)
        if failed:
            raise CommandError(f"some targets could not be re-indexed: {printable(', '.join(failed))}")

    def _collection(self, name: str, options: dict[str, Any]) -> bool:
        using = options["database"]
        try:
            if options["abort"]:
                return self._abort(name, using)
            kb = collection(name, using=using)
            pending = switch.get_switch(kb)
            if pending is None:
                return self._settled(kb, options)
            switch.check_switch(kb, pending)
            embedder = switch.target_embedder(pending, kb)
            if options["build_index"]:
                built = switch.build_index(pending.space, embedder.dimensions, using=kb.using)
                if built is not None and options["verbosity"]:
                    self.stdout.write(f"{printable(name)}: ANN index {built.name} on {pending.space} built")
            if options["run_async"]:
                return self._enqueue(kb, pending, options)
            with switch.reindex_lock(kb, using=kb.using, wait=options["wait"]):
                switch.start_run(kb, using=kb.using)
                filled = self._fill(kb, pending.space, embedder, options)
                if options["verbosity"]:
                    self.stdout.write(
                        f"{printable(name)}: {filled.documents} documents embedded into {pending.space} "
                        f"({filled.embedded} texts embedded, {filled.batches} batches)"
                    )
                if options["no_flip"]:
                    self.stdout.write(
                        f"{printable(name)}: {pending.space} is complete; searches keep using {kb.space} "
                        "until "
                        f"`manage.py rag_reindex {printable(name)}` flips"
                    )
                    return True
                problem = switch.index_problem(kb, pending.space)
                if problem:
                    self.stderr.write(self.style.WARNING(f"{printable(name)}: not flipped: {problem}"))
                    return False
                old = kb.space
                if not switch.flip(kb):
                    self.stderr.write(
                        self.style.ERROR(
                            f"{printable(name)}: documents are still missing from {pending.space}; run again"
                        )
                    )
                    return False
            self.stdout.write(f"{printable(name)}: switched from {old} to {kb.space}; searches use it now")
            self._drop_old(kb, options)
        except RagError as exc:
            self.stderr.write(self.style.ERROR(f"{printable(name)}: {printable(exc)}"))
            return False
        return True

    def _fill(self, kb: Any, space: str, embedder: Embedder, options: dict[str, Any]) -> switch.FillResult:
        """``switch.fill`` of ``space`` with the command's batch size and pause, behind a progress bar."""
        total = Document.objects.using(kb.using).filter(collection=kb).count()
        with _progress(total, kb.name, options["verbosity"]) as bar:
            return switch.fill(
                kb, space, embedder, batch_size=options["batch_size"], progress=bar, pause=options["pause"]
            )

    def _settled(self, kb: Any, options: dict[str, Any]) -> bool:
        """No switch open: documents stored only in other spaces are moved into the active one."""
        with switch.reindex_lock(kb, using=kb.using, wait=options["wait"]):
            filled = self._fill(kb, kb.space, kb.get_embedder(), options)
        if options["verbosity"]:
            self.stdout.write(
                f"{printable(kb.name)}: {filled.documents} documents moved to {kb.space}; "
                f"texts embedded {filled.embedded}"
            )
        self._drop_old(kb, options)
        return True

    def _drop_old(self, kb: Any, options: dict[str, Any]) -> None:
        if options["drop_old"]:
            dropped = switch.drop_old(kb)
            for space, chunks in dropped.items():
                self.stdout.write(f"{printable(kb.name)}: {chunks} chunks of {space} deleted")
        elif options["verbosity"]:
            old = [space for space in get_store(kb.using).space_counts(kb) if space != kb.space]
            if old and not switch.get_switch(kb):
                self.stdout.write(
                    f"{printable(kb.name)}: chunks of {printable(', '.join(old))} are kept; "
                    f"`manage.py rag_reindex {printable(kb.name)} --drop-old` deletes them"
                )

    def _abort(self, name: str, using: str) -> bool:
        row = Collection.objects.using(using).filter(name=name).first()
        if row is None:
            raise RagError(f"no collection {name!r} in database {using!r}")
        pending = switch.get_switch(row)
        dropped = switch.abort(row)
        self.stdout.write(
            f"{printable(name)}: switch to {pending.space if pending else '?'} aborted, "
            f"{dropped} of its chunks deleted; "
            f"searches keep using {row.space}. Set EMBEDDER back to {row.active_embedder!r} in "
            "RAG['COLLECTIONS'] (or to another embedder), or the next use opens the switch again"
        )
        return True

    def _enqueue(self, kb: Any, pending: Any, options: dict[str, Any]) -> bool:
        if not uses_celery():
            raise CommandError(
                "--async needs Celery with a broker (e.g. CELERY_BROKER_URL) and RAG['ASYNC'] on; "
                "run without --async to switch here"
            )
        queue = options["queue"] or f"django_rag.reindex.{kb.name}"
        batches = enqueue_switch(
            kb,
            pending.space,
            batch_size=options["batch_size"],
            queue=queue,
            flip=not options["no_flip"],
            drop_old=options["drop_old"],
        )
        self.stdout.write(
            f"{printable(kb.name)}: {batches} batches for {pending.space} enqueued on queue {queue!r}"
            + ("" if options["no_flip"] else ", and the flip once they are done")
            + f"; workers need `-Q {queue}`. Watch them with `manage.py rag_status {kb.name}`"
        )
        return True

    def _model(self, label: str, options: dict[str, Any]) -> bool:
        try:
            registration = get_registration(apps.get_model(label))
        except (LookupError, ValueError) as exc:
            raise CommandError(f"{printable(label)}: no such model ({printable(exc)})") from exc
        except RagError as exc:
            raise CommandError(str(exc)) from exc
        if options["run_async"] and not uses_celery():
            raise CommandError(
                "--async needs Celery with a broker (e.g. CELERY_BROKER_URL) and RAG['ASYNC'] on; "
                "run without --async to ingest here"
            )
        counts: Counter[str] = Counter()
        rows = registration.model._default_manager.order_by("pk")
        try:
            with _progress(rows.count(), label, options["verbosity"]) as bar:
                iterator = rows.iterator(chunk_size=options["batch_size"])
                while batch := list(islice(iterator, options["batch_size"])):
                    self._batch(registration, batch, options, counts)
                    bar(len(batch))
            counts["orphans removed"] = prune_orphans(registration, using=options["database"])
        except RagError as exc:
            self.stderr.write(self.style.ERROR(f"{printable(label)}: {printable(exc)}"))
            return False
        if options["verbosity"]:
            summary = ", ".join(f"{count} {what}" for what, count in sorted(counts.items()))
            self.stdout.write(f"{printable(label)}: {summary or 'no rows'}")
        return not counts[Document.Status.FAILED]

    def _batch(
        self, registration: Registration, batch: list[Any], options: dict[str, Any], counts: Counter[str]
    ) -> None:
        documents: dict[str, Document | None] = {}
        if options["changed_only"]:
            kb = collection(registration.collection, using=options["database"])
            store = get_store(kb.using)
            documents = {
                registration.source_id(row.pk): store.document(kb, registration.source_id(row.pk))
                for row in batch
            }
        for row in batch:
            if options["changed_only"] and is_up_to_date(
                registration, row, documents.get(registration.source_id(row.pk))
            ):
                counts["up to date"] += 1
            elif options["run_async"]:
                enqueue("ingest", registration.model, row.pk, using=options["database"])
                counts["enqueued"] += 1
            else:
                result = ingest_row(registration, row.pk, using=options["database"])
                counts[result.status] += 1
                if result.status == Document.Status.FAILED and options["verbosity"]:
                    self.stderr.write(
                        self.style.ERROR(
                            f"{printable(registration.source_id(row.pk))}: {printable(result.error)}"
                        )
                    )


class _progress:
    """A tqdm bar on stderr when tqdm is installed and verbosity allows; otherwise nothing."""

    def __init__(self, total: int, name: str, verbosity: int) -> None:
        self.bar: Any = None
        if verbosity >= 1 and total:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=total, desc=name, unit="doc", leave=False)

    def __enter__(self) -> _progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def __call__(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(done)
