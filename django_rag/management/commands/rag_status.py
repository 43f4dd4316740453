"""Show each collection's embedding spaces and switch progress: ``manage.py rag_status [COLLECTION ...]``.

Per collection: the active space (what searches use), every space's chunks and documents and
whether it has an ANN index, and during an embedder switch the documents done out of the total,
the current ``rag_reindex`` run's rate and the ETA at that rate. ``--json`` for monitoring.
"""

from __future__ import annotations

from argparse import ArgumentParser
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError
from django.core.serializers.json import DjangoJSONEncoder

from django_rag.api import collection
from django_rag.conf import rag_settings
from django_rag.exceptions import RagError
from django_rag.ingest.switch import SwitchStatus, status
from django_rag.management.options import add_database_argument
from django_rag.management.output import RagCommand, printable, printable_json
from django_rag.models import Collection


class Command(RagCommand):
    help = "Show the embedding spaces of the given collections (default: all) and any switch's progress."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("names", nargs="*", metavar="COLLECTION")
        parser.add_argument("--json", action="store_true", help="One JSON array, for monitoring.")
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        using = options["database"] or rag_settings.DATABASE
        rows = Collection.objects.using(using)
        names = options["names"] or sorted({*rag_settings.COLLECTIONS, *rows.values_list("name", flat=True)})
        reports = []
        for name in names:
            problem = ""
            try:
                # In step with the settings: a changed EMBEDDER shows as a switch at 0%.
                row: Collection = collection(name, using=using)
            except RagError as exc:
                found = rows.filter(name=name).first()
                if found is None:
                    raise CommandError(f"{name}: {exc}") from exc
                row, problem = found, str(exc)
            report = status(row, using=using)
            report.problem = report.problem or problem
            reports.append(report)
        if options["json"]:
            self.stdout.write(
                printable_json([{**asdict(r), "percent": r.percent} for r in reports], cls=DjangoJSONEncoder)
            )
            return
        for report in reports:
            self.stdout.write(_describe(report))


def _describe(report: SwitchStatus) -> str:
    # Names and spaces come from rows anyone with database access may have written: escaped.
    name, problem = printable(report.name), printable(report.problem)
    active, active_embedder = printable(report.active_space), printable(report.active_embedder)
    target, target_embedder = printable(report.target_space), printable(report.target_embedder)
    lines = []
    if report.target_space:
        lines.append(f"{name}: switching from {active} ({active_embedder}) to {target} ({target_embedder})")
        progress = f"  {report.documents_done}/{report.documents_total} documents ({report.percent:.1f}%)"
        if report.rate:
            progress += f", rate {report.rate:.1f} documents/s"
            if report.eta_seconds is not None:
                progress += f", ETA {timedelta(seconds=round(report.eta_seconds))}"
        else:
            progress += ", rate - (no rag_reindex run has committed a batch), ETA -"
        lines.append(progress)
        lines.append(
            f"  started {report.started_at:%Y-%m-%d %H:%M:%S}"
            + (f", last batch {report.progress_at:%Y-%m-%d %H:%M:%S}" if report.progress_at else "")
        )
    else:
        lines.append(f"{name}: active {active} ({active_embedder}), no switch in progress")
    for space in report.spaces:
        role = "active" if space.active else "target" if space.target else "old"
        lines.append(
            f"  {printable(space.space):<32} {role:<6} {space.chunks} chunks, {space.documents} documents, "
            f"ANN index {'yes' if space.indexed else 'no'}"
        )
    if report.problem:
        lines.append(f"  problem: {problem}")
    return "\n".join(lines)
