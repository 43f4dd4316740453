"""Evaluate retrieval on a BEIR folder: ``manage.py rag_eval DATASET_DIR [--split] [--modes]``."""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from django_rag.api import KnowledgeBase, collection
from django_rag.beir import load_beir
from django_rag.evaluation import (
    INDEX_KEYS,
    SEARCH_KEYS,
    Configuration,
    evaluate_configuration,
    parse_configuration,
    timed_index,
)
from django_rag.exceptions import RagError
from django_rag.management.options import add_database_argument
from django_rag.management.output import RagCommand, printable
from django_rag.search import MODES


class Command(RagCommand):
    help = (
        "Index a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) into a scratch collection and "
        "print nDCG@10, recall@100, MRR@10 and query latency for each search mode or --config, as one table."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("dataset", type=Path)
        parser.add_argument("--split", default="test")
        parser.add_argument("--modes", default=",".join(MODES), help="Comma-separated: vector,text,hybrid.")
        parser.add_argument(
            "--config",
            action="append",
            default=[],
            metavar="NAME:KEY=VALUE,...",
            help=(
                "A configuration to compare (repeatable; replaces --modes): search keys "
                f"{', '.join(SEARCH_KEYS)}; index keys {', '.join(INDEX_KEYS)} (each distinct set of "
                "index keys is indexed into a collection of its own). "
                "E.g. --config base:mode=hybrid --config parents:mode=hybrid,strategy=parent_document"
            ),
        )
        parser.add_argument("--collection", help="Collection to index into (default: eval-<folder name>).")
        parser.add_argument("--embedder", default="default", help="Embedder alias for a new collection.")
        parser.add_argument("--text-config", default="english")
        parser.add_argument("--batch-size", type=int, default=64)
        parser.add_argument("--chunk-size", type=int, help="Chunk size (tokens) for a new collection.")
        parser.add_argument("--chunk-overlap", type=int, help="Chunk overlap (tokens) for a new collection.")
        parser.add_argument("--limit-queries", type=int, help="Evaluate only the first N judged queries.")
        parser.add_argument(
            "--keep-identical-ids",
            action="store_true",
            help="Count a hit whose document id is the query's id (BEIR drops them by default).",
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            configs = [parse_configuration(text) for text in options["config"]]
        except RagError as exc:
            raise CommandError(str(exc)) from exc
        if not configs:
            modes = [m.strip() for m in options["modes"].split(",") if m.strip()]
            unknown = set(modes) - set(MODES)
            if unknown or not modes:
                raise CommandError(f"unknown mode(s) {sorted(unknown)}; use {', '.join(MODES)}")
            configs = [Configuration(mode, {"mode": mode}) for mode in modes]
        base = options["collection"] or f"eval-{options['dataset'].resolve().name}".lower()[:90]
        reports = []
        try:
            dataset = load_beir(options["dataset"], options["split"])
            if options["limit_queries"]:
                keep = list(dataset.queries)[: options["limit_queries"]]
                dataset.queries = {q: dataset.queries[q] for q in keep}
            self.stdout.write(
                f"{len(dataset.corpus)} documents, {len(dataset.queries)} judged queries ({options['split']})"
            )
            indexed: dict[tuple[tuple[str, Any], ...], KnowledgeBase] = {}
            for config in configs:
                key = tuple(sorted(config.index.items()))
                if key not in indexed:
                    indexed[key] = self._index(base, dataset, config.index, options)
                reports.append(
                    evaluate_configuration(
                        indexed[key],
                        dataset,
                        config,
                        ignore_identical_ids=not options["keep_identical_ids"],
                    )
                )
        except RagError as exc:
            raise CommandError(str(exc)) from exc
        width = max(8, *(len(report.mode) for report in reports))
        self.stdout.write(
            f"\n{'config':<{width}} {'nDCG@10':>8} {'R@100':>7} {'MRR@10':>7} {'p50 ms':>7} {'p95 ms':>7}"
        )
        for report in reports:
            self.stdout.write(
                f"{printable(report.mode):<{width}} {report.ndcg10:>8.4f} {report.recall100:>7.4f} "
                f"{report.mrr10:>7.4f} {report.p50:>7.1f} {report.p95:>7.1f}"
            )
        self.stdout.write("latency: k=10 searches over up to 100 queries, embedding of the query included")

    def _index(
        self, base: str, dataset: Any, index: dict[str, Any], options: dict[str, Any]
    ) -> KnowledgeBase:
        suffix = "-".join(f"{key}-{value}" for key, value in sorted(index.items()))
        name = f"{base}-{suffix}"[:100] if suffix else base
        kb = collection(
            name,
            create=True,
            embedder=index.get("embedder", options["embedder"]),
            text_config=options["text_config"],
            using=options["database"],
        )
        sizes = {f: index.get(f, options[f]) for f in ("chunk_size", "chunk_overlap")}
        chunking = {field: value for field, value in sizes.items() if value is not None}
        if chunking:
            for field, value in chunking.items():
                setattr(kb, field, value)
            kb.save(update_fields=[*chunking, "updated_at"])
        self.stdout.write(f"collection '{printable(kb.name)}' ({kb.space}, {kb.text_config})")
        bar = _bar(len(dataset.corpus), options["verbosity"])
        chunker = {key: index[key] for key in ("chunker", "semantic_threshold") if key in index}
        report = timed_index(
            kb,
            dataset,
            batch_size=options["batch_size"],
            progress=bar.update if bar else None,
            chunking=chunker or None,
        )
        if bar:
            bar.close()
        synced = report.sync
        self.stdout.write(
            f"indexed: {synced.added} chunks added, {synced.unchanged} unchanged, {synced.embedded} embedded "
            f"in {report.seconds:.1f} s ({report.chunks_per_second:.1f} chunks/s)"
        )
        return kb


def _bar(total: int, verbosity: int) -> Any:
    if verbosity < 1:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="doc", desc="indexing")
