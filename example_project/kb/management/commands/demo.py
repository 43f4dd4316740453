"""Ingest the sample handbook into the "docs" collection and run a few searches."""

from __future__ import annotations

import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

import django_rag as rag
from django_rag.ingest.loaders import load_text

PROJECT_DIR = Path(__file__).resolve().parents[3]  # example_project/
SAMPLE_DIR = PROJECT_DIR / "sample_docs"
QUERIES = [
    "I forgot my password, how do I get back in?",
    "what happens if my card payment fails",
    "how long are nightly snapshots kept",
    "API returns 429 too many requests",
]


class Command(BaseCommand):
    help = "Index the sample documents (example_project/sample_docs) and print search results."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("queries", nargs="*", help="Questions to search for (default: a few examples).")
        parser.add_argument("-k", type=int, default=3)
        parser.add_argument("--mode", default="hybrid", choices=["vector", "text", "hybrid"])

    def handle(self, *args: Any, **options: Any) -> None:
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
        started = time.perf_counter()
        result = kb.index(docs)
        elapsed = time.perf_counter() - started
        self.stdout.write(
            f"Indexed {len(docs)} documents into '{kb.name}' with {kb.space} in {elapsed:.2f}s: "
            f"{result.added} chunks added, {result.removed} removed, {result.unchanged} unchanged, "
            f"{result.embedded} embedded."
        )
        for query in options["queries"] or QUERIES:
            self.stdout.write(self.style.MIGRATE_HEADING(f"\n? {query}  ({options['mode']} search)"))
            for hit in kb.search(query, k=options["k"], mode=options["mode"]):
                text = " ".join(hit.chunk.content.split())
                self.stdout.write(f"  {hit.score:.3f}  {hit.source_id:<20} {text[:90]}...")
