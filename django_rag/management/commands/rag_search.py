"""Search a collection from the shell: ``manage.py rag_search "how do I back up?" --collection docs``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError
from django.db import DatabaseError
from django.utils.translation import gettext as _

from django_rag.exceptions import RagError
from django_rag.management.options import (
    add_search_arguments,
    database_failed,
    get_collection,
    one_line,
    search_options,
)
from django_rag.management.output import RagCommand, printable, printable_json
from django_rag.types import Hit


class Command(RagCommand):
    help = (
        "Search a collection and print the best chunks: rank, score, source id, page and a snippet "
        "(-v 2: the whole chunk; --json: one JSON object per line)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("query", help="What to search for.")
        add_search_arguments(parser, default_k=8)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            kb = get_collection(options["collection"], options["database"])
            hits = kb.search(options["query"], **search_options(options))
        except RagError as exc:
            raise CommandError(str(exc)) from exc
        except DatabaseError as exc:
            raise database_failed(exc) from exc
        if options["json"]:
            for rank, hit in enumerate(hits, start=1):
                self.stdout.write(printable_json(hit_json(rank, hit)))
            return
        verbosity = options["verbosity"]
        if verbosity >= 2:
            self.stdout.write(
                _("%(count)d hits for %(query)r in %(collection)s (%(mode)s)")
                % {
                    "count": len(hits),
                    "query": options["query"],
                    "collection": kb.name,
                    "mode": options["mode"],
                }
            )
        if not hits:
            if verbosity >= 1:
                self.stdout.write(_("No results."))
            return
        for rank, hit in enumerate(hits, start=1):
            line = f"{rank:>3}  {hit.score:.4f}  {printable(hit.source_id)}"
            if verbosity >= 1:
                page = f"  p.{hit.page}" if hit.page is not None else ""
                snippet = one_line(hit.snippet, markup=True) if hit.snippet else one_line(hit.content)
                line += f"{page}  {snippet}"
            self.stdout.write(line)
            if verbosity >= 2:
                lines = hit.content.splitlines()
                self.stdout.write("\n".join(f"       {printable(text)}" for text in lines) + "\n")


def hit_json(rank: int, hit: Hit) -> dict[str, Any]:
    document = hit.document
    return {
        "rank": rank,
        "score": hit.score,
        "source_id": hit.source_id,
        "title": document.title if document is not None else "",
        "source": document.source if document is not None else "",
        "page": hit.page,
        "chunk_index": hit.chunk.index,
        "vector_rank": hit.vector_rank,
        "text_rank": hit.text_rank,
        "snippet": hit.snippet,
        "content": hit.content,
    }
