"""Re-embed collections whose EMBEDDER changed: ``manage.py rag_reindex [COLLECTION ...]``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_rag.api import collection
from django_rag.conf import rag_settings
from django_rag.exceptions import RagError
from django_rag.indexing import DEFAULT_BATCH_SIZE, reembed
from django_rag.models import Collection, Document


class Command(BaseCommand):
    help = (
        "Bring every document of the given collections (default: all) into the embedding space "
        "of the collection's current embedder; chunks of other spaces are replaced."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("collections", nargs="*", metavar="COLLECTION")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            help=f"Documents per embedding round and transaction (default {DEFAULT_BATCH_SIZE}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        names = options["collections"] or sorted(
            {
                *rag_settings.COLLECTIONS,
                *Collection.objects.using(rag_settings.DATABASE).values_list("name", flat=True),
            }
        )
        failed = False
        for name in names:
            try:
                kb = collection(name)
                total = Document.objects.using(rag_settings.DATABASE).filter(collection=kb).count()
                with _progress(total, name, options["verbosity"]) as bar:
                    result = reembed(kb, batch_size=options["batch_size"], progress=bar)
            except RagError as exc:
                self.stderr.write(self.style.ERROR(f"{name}: {exc}"))
                failed = True
                continue
            if options["verbosity"]:
                self.stdout.write(
                    f"{name}: {result.documents} documents moved to {kb.space}; chunks added "
                    f"{result.added}, unchanged {result.unchanged}, texts embedded {result.embedded}"
                )
        if failed:
            raise CommandError("some collections could not be re-indexed")


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
