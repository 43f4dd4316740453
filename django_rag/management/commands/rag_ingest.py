"""Ingest files, folders and URLs: ``manage.py rag_ingest PATH|URL ... --collection docs``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_rag.api import collection
from django_rag.exceptions import RagError
from django_rag.ingest.sources import DEFAULT_MAX_BYTES, SourceOutcome, ingest_sources
from django_rag.management.options import add_database_argument


class Command(BaseCommand):
    help = (
        "Load files, folders (recursively) and URLs into a collection; unchanged chunks are not re-embedded."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("sources", nargs="+", metavar="PATH_OR_URL")
        parser.add_argument("--collection", default="docs")
        parser.add_argument("--tags", default="", help="Comma-separated tags for every document.")
        parser.add_argument("--tenant", default="")
        parser.add_argument(
            "--per-page", action="store_true", help="One document per PDF page (ids '#p<n>')."
        )
        parser.add_argument("--batch-size", type=int, default=64, help="Documents per embedding round (64).")
        parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, help="Skip larger files.")
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        verbosity = options["verbosity"]
        bar = _bar(verbosity)

        def progress(outcome: SourceOutcome) -> None:
            if bar is not None:
                bar.update(1)
            if outcome.status != "loaded" and verbosity >= 1:
                line = f"{outcome.status}: {outcome.source}: {outcome.reason}"
                (bar.write if bar is not None else self.stderr.write)(line)

        try:
            kb = collection(options["collection"], using=options["database"])
            report = ingest_sources(
                kb,
                options["sources"],
                tags=[t for t in options["tags"].split(",") if t],
                tenant=options["tenant"],
                per_page=options["per_page"],
                batch_size=options["batch_size"],
                max_bytes=options["max_bytes"],
                progress=progress,
            )
        except RagError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            if bar is not None:
                bar.close()
        sync = report.sync
        self.stdout.write(
            f"{report.count('loaded')} sources loaded into {sync.documents} documents; "
            f"chunks added {sync.added}, removed {sync.removed}, unchanged {sync.unchanged} "
            f"({sync.embedded} embedded); "
            f"{report.count('skipped')} skipped, {report.count('failed')} failed"
        )
        if report.failed:
            raise CommandError(
                f"{len(report.failed)} source(s) failed: "
                + "; ".join(f"{o.source}: {o.reason}" for o in report.failed[:5])
            )


def _bar(verbosity: int) -> Any:
    if verbosity < 1:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(unit="source", desc="ingesting")
