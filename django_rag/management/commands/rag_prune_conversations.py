"""Delete idle conversations: ``manage.py rag_prune_conversations [--days N]`` (run it daily from cron)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils.translation import gettext as _

from django_rag.management.options import add_database_argument
from django_rag.retention import conversation_retention_days, prune_conversations


class Command(BaseCommand):
    help = (
        "Delete conversations whose last question is older than --days "
        "(default: RAG['WEB']['CONVERSATION_RETENTION_DAYS'], 30). Their query log entries stay."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--days", type=int, help="Keep conversations active in the last N days (0 deletes them all)."
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"]
        if days is None:
            days = conversation_retention_days()
        try:
            deleted = prune_conversations(days, using=options["database"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if options["verbosity"]:
            self.stdout.write(
                _("%(count)d conversations idle for more than %(days)d days deleted.")
                % {"count": deleted, "days": days}
            )
