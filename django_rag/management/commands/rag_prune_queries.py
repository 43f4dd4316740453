"""Delete old query log entries: ``manage.py rag_prune_queries [--days N]`` (run it daily from cron)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError
from django.utils.translation import gettext as _

from django_rag.management.options import add_database_argument
from django_rag.management.output import RagCommand
from django_rag.retention import log_retention_days, prune_query_log


class Command(RagCommand):
    help = "Delete query log entries older than --days (default: RAG['WEB']['LOG_RETENTION_DAYS'], 90)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--days", type=int, help="Keep entries of the last N days (0 deletes them all).")
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"] if options["days"] is not None else log_retention_days()
        try:
            deleted = prune_query_log(days, using=options["database"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if options["verbosity"]:
            self.stdout.write(
                _("%(count)d query log entries older than %(days)d days deleted.")
                % {"count": deleted, "days": days}
            )
