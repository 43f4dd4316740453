"""Evaluate retrieval on a BEIR folder: ``manage.py rag_eval DATASET_DIR [--split] [--modes]``."""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from django_rag.api import collection
from django_rag.beir import load_beir
from django_rag.evaluation import evaluate, index_dataset
from django_rag.exceptions import RagError
from django_rag.management.options import add_database_argument
from django_rag.management.output import RagCommand, printable
from django_rag.search import MODES


class Command(RagCommand):
    help = (
        "Index a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) into a scratch collection and "
        "print nDCG@10, recall@100, MRR@10 and query latency for each search mode."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("dataset", type=Path)
        parser.add_argument("--split", default="test")
        parser.add_argument("--modes", default=",".join(MODES), help="Comma-separated: vector,text,hybrid.")
        parser.add_argument("--collection", help="Collection to index into (default: eval-<folder name>).")
        parser.add_argument("--embedder", default="default", help="Embedder alias for a new collection.")
        parser.add_argument("--text-config", default="english")
        parser.add_argument("--batch-size", type=int, default=64)
        parser.add_argument("--chunk-size", type=int, help="Chunk size (tokens) for a new collection.")
        parser.add_argument("--chunk-overlap", type=int, help="Chunk overlap (tokens) for a new collection.")
        parser.add_argument("--limit-queries", type=int, help="Evaluate only the first N judged queries.")
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        modes = [m.strip() for m in options["modes"].split(",") if m.strip()]
        unknown = set(modes) - set(MODES)
        if unknown or not modes:
            raise CommandError(f"unknown mode(s) {sorted(unknown)}; use {', '.join(MODES)}")
        name = options["collection"] or f"eval-{options['dataset'].resolve().name}".lower()[:100]
        try:
            dataset = load_beir(options["dataset"], options["split"])
            if options["limit_queries"]:
                keep = list(dataset.queries)[: options["limit_queries"]]
                dataset.queries = {q: dataset.queries[q] for q in keep}
            kb = collection(
                name,
                create=True,
                embedder=options["embedder"],
                text_config=options["text_config"],
                using=options["database"],
            )
            chunking = {f: options[f] for f in ("chunk_size", "chunk_overlap") if options[f] is not None}
            if chunking:
                for field, value in chunking.items():
                    setattr(kb, field, value)
                kb.save(update_fields=[*chunking, "updated_at"])
            self.stdout.write(
                f"{len(dataset.corpus)} documents, {len(dataset.queries)} judged queries "
                f"({options['split']}); collection '{printable(kb.name)}' ({kb.space}, {kb.text_config})"
            )
            bar = _bar(len(dataset.corpus), options["verbosity"])
            synced = index_dataset(
                kb, dataset, batch_size=options["batch_size"], progress=bar.update if bar else None
            )
            if bar:
                bar.close()
            self.stdout.write(
                f"indexed: {synced.added} chunks added, {synced.unchanged} unchanged, "
                f"{synced.embedded} embedded"
            )
            reports = evaluate(kb, dataset, modes)
        except RagError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"\n{'mode':<8} {'nDCG@10':>8} {'R@100':>7} {'MRR@10':>7} {'p50 ms':>7} {'p95 ms':>7}"
        )
        for report in reports:
            self.stdout.write(
                f"{report.mode:<8} {report.ndcg10:>8.4f} {report.recall100:>7.4f} {report.mrr10:>7.4f} "
                f"{report.p50:>7.1f} {report.p95:>7.1f}"
            )
        self.stdout.write("latency: k=10 searches over up to 100 queries, embedding of the query included")


def _bar(total: int, verbosity: int) -> Any:
    if verbosity < 1:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="doc", desc="indexing")
