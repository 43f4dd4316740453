"""Ingest files, folders and URLs: ``manage.py rag_ingest PATH|URL ... --collection docs``.

Made to run unattended (a nightly job): ids are paths relative to ``--root``, ``--prune`` mirrors
a folder, every skip and failure is recorded on a Document row, one bad file does not stop the
run (``--fail-fast`` makes it), batches are committed as they go, Ctrl-C stops after the batch
in hand, and the exit status is non-zero only when a source failed (or the run was stopped).
"""

from __future__ import annotations

import time
import uuid
from argparse import ArgumentParser, RawDescriptionHelpFormatter
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from django_rag.api import collection
from django_rag.conf import rag_settings
from django_rag.exceptions import RagError
from django_rag.ingest.jobs import create_job, plan_batches, queue_for
from django_rag.ingest.sources import (
    DEFAULT_MAX_BYTES,
    IngestOptions,
    IngestReport,
    count_sources,
    ingest_sources,
    targets,
)
from django_rag.management.ingest_progress import Progress, Stopper, job_summary, password_map, summary
from django_rag.management.options import add_database_argument
from django_rag.management.output import RagCommand, printable, printable_json
from django_rag.models import Document, IngestJob
from django_rag.tasks import check_broker, enqueue_batches

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover - tqdm is a dependency; a broken install still ingests
    tqdm = None


EPILOG = f"""
size limits:
  --max-bytes            files read by this command (default {DEFAULT_MAX_BYTES} bytes, 50 MiB)
  RAG["OUTBOUND"]["MAX_BYTES"]  URLs, here and everywhere (default 10 MiB)
  RAG["MEDIA"]["MAX_BYTES"]     files and text of registered model rows (default 20 MiB)

exit status: 0 when nothing failed (skips are not failures), 1 when a source failed or the
command was misused, 130 when stopped by Ctrl-C (after the batch in hand was committed).

examples:
  manage.py rag_ingest docs/ --prune              # docs/ mirrored: ids docs/..., gone files removed
  manage.py rag_ingest /srv/kb --root /srv/kb --exclude '*.tmp' --exclude 'drafts'
  manage.py rag_ingest manuals/ --password-map passwords.json --json > run.json
  manage.py rag_ingest /srv/kb --root /srv/kb --async --batch-size 32   # on workers: -Q django_rag.docs

--async: batches of --batch-size files go to the collection's Celery queue (RAG["BULK"]["QUEUE"],
default django_rag.<collection>); workers read the files at <root>/<source id>, so they need the
files on shared storage at the same path (or RAG["BULK"]["ROOT"] on the worker).
"""


class Command(RagCommand):
    help = (
        "Load files, folders (recursively) and URLs into a collection; unchanged chunks are not "
        "re-embedded. Skipped and failed sources are recorded as Document rows with the reason."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.formatter_class = RawDescriptionHelpFormatter
        parser.epilog = EPILOG
        return parser

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("sources", nargs="*", metavar="PATH_OR_URL")
        parser.add_argument("--collection", default="docs", help="Collection name (default docs).")
        parser.add_argument(
            "--root",
            default=".",
            help="Source ids are file paths relative to this folder (default: the current directory), "
            "however a path is written on the command line. Every path must be under it.",
        )
        parser.add_argument("--tags", default="", help="Comma-separated tags for every document.")
        parser.add_argument("--tenant", default="", help="Tenant of every document (default none).")
        parser.add_argument(
            "--per-page", action="store_true", help="One document per PDF page (ids '<file>#p<n>')."
        )
        parser.add_argument(
            "--prune",
            action="store_true",
            help="Mirror each FOLDER given: remove the documents of files under it that are gone "
            "(or now excluded). Not done when the run stops early.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Read and extract everything and print what would be added, updated, recorded and "
            "pruned; write nothing, embed nothing.",
        )
        parser.add_argument(
            "--exclude",
            action="append",
            default=[],
            metavar="GLOB",
            help="Skip files and folders whose id (path relative to --root) or name matches; repeatable.",
        )
        parser.add_argument(
            "--follow-links",
            action="store_true",
            help="Read files through symbolic links that lead out of the folder given (or out of "
            "--root). By default such a link is skipped and recorded as symlink-outside.",
        )
        secrets = parser.add_mutually_exclusive_group()
        secrets.add_argument(
            "--password",
            help="Password of encrypted PDFs (visible in the process list: prefer --password-map).",
        )
        secrets.add_argument(
            "--password-map",
            metavar="FILE",
            help='A JSON file of {"GLOB": "password"}; the first glob matching a file\'s id wins.',
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=64,
            help="Documents per embedding round and transaction (default 64).",
        )
        parser.add_argument(
            "--max-bytes",
            type=int,
            default=DEFAULT_MAX_BYTES,
            help=f"Files larger than this are skipped as too-large (default {DEFAULT_MAX_BYTES}, 50 MiB).",
        )
        going = parser.add_mutually_exclusive_group()
        going.add_argument(
            "--keep-going",
            dest="fail_fast",
            action="store_false",
            help="Read every source even when some fail (the default).",
        )
        going.add_argument(
            "--fail-fast", dest="fail_fast", action="store_true", help="Stop at the first failed source (CI)."
        )
        parser.set_defaults(fail_fast=False)
        parser.add_argument(
            "--json", action="store_true", help="Print a JSON summary on stdout instead of the table."
        )
        parser.add_argument(
            "--async",
            dest="run_async",
            action="store_true",
            help="Send batches of --batch-size files to Celery workers on the collection's queue "
            "(django_rag.<collection>) instead of ingesting here; needs a broker and shared storage.",
        )
        parser.add_argument(
            "--no-wait",
            dest="wait",
            action="store_false",
            help="With --async: print the job id and return once the batches are queued "
            "(watch it later with --watch JOB, or in the admin).",
        )
        parser.add_argument(
            "--watch",
            metavar="JOB",
            help="Watch a job queued earlier (--async --no-wait) until it is done, instead of ingesting.",
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["watch"]:
            if options["sources"]:
                raise CommandError("--watch JOB takes no PATH_OR_URL: it watches a job already queued")
            self._finish_job(self._job(options["watch"], options["database"]), options)
            return
        if not options["sources"]:
            raise CommandError("give at least one PATH_OR_URL (or --watch JOB)")
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        if options["max_bytes"] < 1:
            raise CommandError("--max-bytes must be at least 1")
        ingest_options = IngestOptions(
            root=options["root"],
            tags=tuple(t.strip() for t in options["tags"].split(",") if t.strip()),
            tenant=options["tenant"],
            per_page=options["per_page"],
            batch_size=options["batch_size"],
            max_bytes=options["max_bytes"],
            excludes=tuple(options["exclude"]),
            follow_links=options["follow_links"],
            password=options["password"],
            passwords=password_map(options["password_map"]),
            prune=options["prune"],
            dry_run=options["dry_run"],
            fail_fast=options["fail_fast"],
        )
        if not Path(ingest_options.root).is_dir():
            raise CommandError(f"--root {ingest_options.root} is not a folder")
        if options["run_async"]:
            self._handle_async(ingest_options, options)
            return
        if not options["wait"]:
            raise CommandError("--no-wait goes with --async")
        verbosity = options["verbosity"]
        stopper = Stopper()
        progress = Progress(self, verbosity if not options["json"] else min(verbosity, 1))
        try:
            kb = collection(options["collection"], using=options["database"])
            if verbosity >= 1:
                progress.start(count_sources(options["sources"], ingest_options))
            with stopper:
                report = ingest_sources(
                    kb, options["sources"], ingest_options, progress=progress, stop=stopper.stopped
                )
        except RagError as exc:
            raise CommandError(str(exc)) from exc
        except DatabaseError as exc:
            # A trigger, a constraint or a server limit refused a write: that batch was rolled back whole.
            alias = options["database"] or rag_settings.DATABASE
            first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            raise CommandError(
                f"the database {alias!r} refused a write ({first}); the batch in progress was rolled back "
                "and the batches before it stay committed: fix the cause and run the same command again"
            ) from exc
        finally:
            progress.close()
        if options["json"]:
            self.stdout.write(printable_json(summary(report, ingest_options, stopper.signalled), indent=2))
        else:
            self._table(report, ingest_options, verbosity)
        if stopper.signalled:
            raise CommandError(
                "interrupted: the batch in hand was committed; run the same command again to go on "
                "(nothing stored is embedded again)",
                returncode=130,
            )
        if report.failed:
            shown = "; ".join(f"{printable(o.source_id)}: {printable(o.error)}" for o in report.failed[:5])
            more = f" (and {len(report.failed) - 5} more)" if len(report.failed) > 5 else ""
            raise CommandError(f"{len(report.failed)} source(s) failed: {shown}{more}")

    def _handle_async(self, ingest_options: IngestOptions, options: dict[str, Any]) -> None:
        """``--async``: walk here, record a job, queue its batches, then (by default) watch it."""
        refused = [
            flag
            for flag, given in (
                ("--dry-run", ingest_options.dry_run),
                ("--prune", ingest_options.prune),
                ("--fail-fast", ingest_options.fail_fast),
                ("--password/--password-map", bool(ingest_options.password or ingest_options.passwords)),
            )
            if given
        ]
        if refused:
            raise CommandError(
                f"{', '.join(refused)} cannot go with --async (passwords would travel through the "
                "broker; pruning and stopping early need the whole run in one process): run without --async"
            )
        verbosity = options["verbosity"]
        try:
            check_broker()  # before anything is written or sent
            kb = collection(options["collection"], using=options["database"])
            batches = plan_batches(targets(options["sources"], ingest_options), ingest_options.batch_size)
            job = create_job(kb, ingest_options, batches, using=kb.using)
            enqueue_batches(str(job.pk), job.queue, batches, using=options["database"])
        except RagError as exc:
            raise CommandError(str(exc)) from exc
        if not options["wait"]:
            if options["json"]:
                self.stdout.write(
                    printable_json({"job": str(job.pk), "queue": job.queue, "batches": len(batches)})
                )
            else:
                self.stdout.write(
                    f"job {job.pk}: {job.total} sources in {len(batches)} batches queued on "
                    f"{job.queue!r}; watch it with `rag_ingest --watch {job.pk}` or in the admin"
                )
            return
        if verbosity >= 1 and not options["json"]:
            self.stderr.write(
                f"job {job.pk}: {job.total} sources in {len(batches)} batches queued on {job.queue!r} "
                f"(workers: celery -A <project> worker -Q {queue_for(kb.name)})"
            )
        self._finish_job(job, options)

    def _job(self, job_id: str, using: str | None) -> IngestJob:
        jobs = IngestJob.objects.using(using or rag_settings.DATABASE)
        try:
            return jobs.get(pk=uuid.UUID(job_id))
        except (ValueError, IngestJob.DoesNotExist):
            raise CommandError(
                f"--watch {job_id}: no such ingest job (the id `rag_ingest --async --no-wait` printed; "
                "the admin lists them under ingest jobs)"
            ) from None

    def _finish_job(self, job: IngestJob, options: dict[str, Any]) -> None:
        """Watch ``job`` to its end, print its counts, and fail (exit 1) when a source failed."""
        verbosity = options["verbosity"]
        job = self._watch(job, verbosity if not options["json"] else 0)
        kb = job.collection
        if options["json"]:
            self.stdout.write(printable_json(job_summary(job), indent=2))
        else:
            self._job_table(job, verbosity)
        if job.failed:
            failed = Document.objects.using(kb.using).filter(
                collection=kb,
                tenant=job.tenant,
                status=Document.Status.FAILED,
                updated_at__gte=job.created_at,
            )
            shown = "; ".join(f"{printable(d.source_id)}: {printable(d.error)}" for d in failed[:5])
            errors = f"; last batch error: {printable(job.error)}" if job.error else ""
            raise CommandError(f"{job.failed} source(s) failed: {shown or 'see the admin'}{errors}")

    def _watch(self, job: IngestJob, verbosity: int) -> IngestJob:
        """Poll the job row until every batch is counted, with a bar of sources done (rate, ETA)."""
        bar: Any = None
        if tqdm is not None and verbosity >= 1:
            bar = tqdm(total=job.total, unit="source", desc="workers", dynamic_ncols=True, disable=None)
        stopper = Stopper(waiting=True)
        try:
            with stopper:
                while True:
                    job.refresh_from_db()
                    if bar is not None and job.done > bar.n:
                        bar.update(job.done - bar.n)
                    if job.complete:
                        return job
                    if stopper.signalled:
                        raise CommandError(
                            f"stopped watching: job {job.pk} goes on on the workers; follow it in the admin",
                            returncode=130,
                        )
                    time.sleep(0.5)
        finally:
            if bar is not None:
                bar.close()

    def _job_table(self, job: IngestJob, verbosity: int) -> None:
        write = self.stdout.write
        elapsed = ((job.finished_at or job.updated_at) - job.created_at).total_seconds()
        write(
            f"job {job.pk}: {job.loaded} sources loaded, {job.skipped} skipped, {job.failed} failed "
            f"in {job.batches} batches on {job.queue!r} ({elapsed:.1f}s); chunks added {job.chunks_added}, "
            f"removed {job.chunks_removed}, unchanged {job.chunks_unchanged} ({job.embedded} embedded)"
        )
        if verbosity >= 1 and job.error:
            write(f"last batch error: {printable(job.error)}")

    def _table(self, report: IngestReport, options: IngestOptions, verbosity: int) -> None:
        write = self.stdout.write
        sync = report.sync
        dry = " (dry run: nothing written)" if options.dry_run else ""
        if verbosity >= 1 and report.problems:
            for outcome in report.problems[:50]:
                sid, error = printable(outcome.source_id), printable(outcome.error)
                write(f"{outcome.status:<8} {outcome.reason:<18} {sid}: {error}")
            if len(report.problems) > 50:
                write(f"... and {len(report.problems) - 50} more (see the admin, or --json)")
        if options.dry_run:
            changes = ", ".join(f"{n} {change}" for change, n in sorted(report.changes.items())) or "none"
            write(
                f"{report.count('loaded')} sources loaded into {report.documents} documents: {changes}{dry}"
            )
        else:
            write(
                f"{report.count('loaded')} sources loaded into {report.documents} documents; "
                f"chunks added {sync.added}, removed {sync.removed}, unchanged {sync.unchanged} "
                f"({sync.embedded} embedded); "
                f"{report.count('skipped')} skipped, {report.count('failed')} failed"
            )
        rows = [("loaded", report.count("loaded"), "")]
        for status in ("skipped", "failed"):
            reasons = ", ".join(
                f"{reason} {n}"
                for reason, n in sorted(report.reasons.items())
                if any(p.reason == reason and p.status == status for p in report.problems)
            )
            rows.append((status, report.count(status), reasons))
        rows.append(
            ("pruned", len(report.pruned), report.prune_skipped and f"not run: {report.prune_skipped}")
        )
        write(f"\n{'sources':<10}{'count':>8}  reasons")
        for name, count, detail in rows:
            write(f"{name:<10}{count:>8}  {detail}".rstrip())
        write(f"{'chunks':<10}{sync.added + sync.unchanged:>8}  added {sync.added}, removed {sync.removed}")
        write(f"{'embedded':<10}{sync.embedded:>8}  texts sent to the embedder{dry}")
        if report.pruned and verbosity >= 1:
            for source_id in report.pruned[:50]:
                write(f"{'would prune' if options.dry_run else 'pruned'}: {printable(source_id)}")
