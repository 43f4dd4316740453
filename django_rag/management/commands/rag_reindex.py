"""Re-index collections or registered models: ``manage.py rag_reindex [COLLECTION | APP.MODEL ...]``.

A collection is re-embedded into its current embedder's space (after its EMBEDDER changed);
changed TEXT_CONFIG / TEXT_SEARCH settings are applied to its stored chunks first (the text
index is rebuilt, nothing is embedded), which is the moment to pay for it rather than the
first request after a deploy.
A registered model (``kb.Attachment``) has every row ingested again, here or with ``--async``
on the Celery workers; documents of rows that no longer exist are removed.
"""

from __future__ import annotations

from argparse import ArgumentParser
from collections import Counter
from itertools import islice
from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError

from django_rag.api import collection
from django_rag.conf import rag_settings
from django_rag.exceptions import RagError
from django_rag.ingest.pipeline import DEFAULT_BATCH_SIZE, reembed
from django_rag.ingest.registration import Registration, get_registration
from django_rag.ingest.rows import ingest_row, is_up_to_date, prune_orphans
from django_rag.management.options import add_database_argument
from django_rag.models import Collection, Document
from django_rag.stores import get_store
from django_rag.tasks import enqueue, uses_celery


class Command(BaseCommand):
    help = (
        "Re-index the given collections (default: all) by moving their documents into the embedding "
        "space of the collection's current embedder, or the given registered models (APP.MODEL) by "
        "ingesting their rows again."
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
            help="APP.MODEL: enqueue one Celery task per row instead of ingesting here (needs a broker).",
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
            raise CommandError(f"some targets could not be re-indexed: {', '.join(failed)}")

    def _collection(self, name: str, options: dict[str, Any]) -> bool:
        try:
            kb = collection(name, using=options["database"])
            total = Document.objects.using(kb.using).filter(collection=kb).count()
            with _progress(total, name, options["verbosity"]) as bar:
                result = reembed(kb, batch_size=options["batch_size"], progress=bar)
        except RagError as exc:
            self.stderr.write(self.style.ERROR(f"{name}: {exc}"))
            return False
        if options["verbosity"]:
            self.stdout.write(
                f"{name}: {result.documents} documents moved to {kb.space}; chunks added "
                f"{result.added}, unchanged {result.unchanged}, texts embedded {result.embedded}"
            )
        return True

    def _model(self, label: str, options: dict[str, Any]) -> bool:
        try:
            registration = get_registration(apps.get_model(label))
        except (LookupError, ValueError) as exc:
            raise CommandError(f"{label}: no such model ({exc})") from exc
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
            self.stderr.write(self.style.ERROR(f"{label}: {exc}"))
            return False
        if options["verbosity"]:
            summary = ", ".join(f"{count} {what}" for what, count in sorted(counts.items()))
            self.stdout.write(f"{label}: {summary or 'no rows'}")
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
                    self.stderr.write(self.style.ERROR(f"{registration.source_id(row.pk)}: {result.error}"))


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
