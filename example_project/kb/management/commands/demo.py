"""Set up the demo site: two tenants with a user each, the sample handbook in both, a few searches.

Prints the URL to open; with ``--serve`` (what ``make demo`` runs) it then serves the site on that
URL with ``runserver`` (static files included, with DEBUG on or off) and a ``db_worker`` beside it
(uploads are queued in the database and ingested by the worker), until Ctrl-C.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.core.management.base import BaseCommand

import django_rag as rag
from django_rag.ingest.loaders import load_text
from django_rag.web.results import grouped_results

from ...scope import TENANT_GROUP_PREFIX, TENANTS

PROJECT_DIR = Path(__file__).resolve().parents[3]  # example_project/
SAMPLE_DIR = PROJECT_DIR / "sample_docs"
QUERIES = [
    "I forgot my password, how do I get back in?",
    "what happens if my card payment fails",
    "how long are nightly snapshots kept",
    "API returns 429 too many requests",
]
# Demo accounts (not for production): a superuser, and one staff user per tenant.
USERS = {"admin": None, "alice": "acme", "bob": "globex"}
PASSWORD = "demo-password"
STAFF_PERMISSIONS = [
    ("kb", "add_attachment"),
    ("kb", "change_attachment"),
    ("kb", "view_attachment"),
    ("kb", "delete_attachment"),
    ("django_rag", "view_collection"),
    ("django_rag", "view_document"),
    # Re-index and retry (admin actions that change data need it); the page stays read-only.
    ("django_rag", "change_document"),
    ("django_rag", "view_chunk"),
    ("django_rag", "view_querylog"),
]


class Command(BaseCommand):
    help = (
        "Create the demo tenants and users, index the sample documents for each tenant, run a few "
        "searches and print the URL to open."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("queries", nargs="*", help="Questions to search for (default: a few examples).")
        parser.add_argument("-k", type=int, default=3)
        parser.add_argument("--mode", default="hybrid", choices=["vector", "text", "hybrid"])
        parser.add_argument("--no-search", action="store_true", help="Set up and index only.")
        parser.add_argument("--port", type=int, default=8000, help="The runserver port the URL names.")
        parser.add_argument(
            "--serve", action="store_true", help="Then serve the site (runserver + db_worker) until Ctrl-C."
        )

    def _show(self, kb: rag.Collection, query: str, k: int, mode: str) -> None:
        """What the search page shows: one entry per document, its title, the relevance of its
        displayed passage and that passage's whole sentences (chosen as the page chooses them)."""
        hits = kb.search(query, k=k * 4, mode=mode, tenant=TENANTS[0])
        results = grouped_results(hits, query, collection=kb, k=k)
        if not results:
            self.stdout.write("  No good matches.")
        for result in results:
            more = f"  (+{len(result.more)} more from this document)" if result.more else ""
            relevance = result.passage.relevance or 0.0
            self.stdout.write(f"  {result.number}. {result.title}  relevance {relevance:.2f}{more}")
            self.stdout.write(
                textwrap.fill(
                    result.passage.snippet.text, 96, initial_indent="     ", subsequent_indent="     "
                )
            )

    def handle(self, *args: Any, **options: Any) -> None:
        self._users()
        kb = rag.collection("docs")
        docs = []
        for path in sorted(SAMPLE_DIR.glob("*.md")):
            if path.name != "README.md":
                docs += load_text(
                    path.read_text(),
                    source_id=f"handbook/{path.stem}",
                    metadata={"source": str(path.relative_to(PROJECT_DIR.parent))},
                    tags=["handbook"],
                )
        articles = [
            doc
            for path in sorted((SAMPLE_DIR / "pt").glob("*.md"))
            for doc in load_text(
                path.read_text(),
                source_id=f"artigos/{path.stem}",
                metadata={"source": str(path.relative_to(PROJECT_DIR.parent))},
                tags=["artigo"],
            )
        ]
        started = time.perf_counter()
        for tenant in TENANTS:
            result = kb.index(docs, tenant=tenant)
            rag.collection("artigos").index(articles, tenant=tenant)
        elapsed = time.perf_counter() - started
        self.stdout.write(
            f"Indexed {len(docs)} documents for tenants {', '.join(TENANTS)} into '{kb.name}' with "
            f"{kb.space} in {elapsed:.2f}s: {result.added} chunks added, {result.removed} removed, "
            f"{result.unchanged} unchanged, {result.embedded} embedded (last tenant)."
        )
        if not options["no_search"]:
            for query in options["queries"] or QUERIES:
                self.stdout.write(self.style.MIGRATE_HEADING(f"\n? {query}  ({options['mode']} search)"))
                self._show(kb, query, options["k"], options["mode"])
        url = f"http://127.0.0.1:{options['port']}/kb/"
        start = "Serving the site: open " if options["serve"] else "Start the site with `make demo` and open "
        self.stdout.write(
            "\n"
            + start
            + self.style.SUCCESS(url)
            + f"\nLog in as alice (tenant acme) or bob (tenant globex), password {PASSWORD!r}; "
            f"the admin is at http://127.0.0.1:{options['port']}/admin/ (user admin, same password)."
        )
        if options["serve"]:
            self._serve(options["port"])

    def _serve(self, port: int) -> None:
        manage = Path(sys.argv[0]).resolve()
        worker = subprocess.Popen(
            [sys.executable, str(manage), "db_worker", "--interval", "0.5", "--no-reload"]
        )
        try:
            # runserver serves static files itself only under DEBUG; the demo runs with DEBUG off
            # (EXAMPLE_DEBUG=1 turns it on), so it asks for them either way (--insecure).
            call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, insecure_serving=True)
        finally:
            worker.terminate()
            worker.wait(timeout=30)

    def _users(self) -> None:
        users = get_user_model()
        permissions = [
            Permission.objects.get(content_type__app_label=app, codename=codename)
            for app, codename in STAFF_PERMISSIONS
        ]
        for username, tenant in USERS.items():
            user = users.objects.filter(username=username).first()
            if user is None:
                user = users.objects.create_user(username=username, password=PASSWORD)
            user.is_staff = True
            user.is_superuser = tenant is None
            user.save()
            if tenant is not None:
                group, _ = Group.objects.get_or_create(name=f"{TENANT_GROUP_PREFIX}{tenant}")
                user.groups.add(group)
                user.user_permissions.add(*permissions)
