"""Retrieval evaluation on BEIR-format datasets: nDCG@10, recall@100, MRR@10 and latency per configuration.

A BEIR folder holds ``corpus.jsonl`` (or ``.jsonl.gz``) with ``_id``, ``title``, ``text``;
``queries.jsonl`` with ``_id``, ``text``; and ``qrels/<split>.tsv`` (query-id, corpus-id,
score, with a header line). Documents are indexed into a collection (chunked as usual);
chunk hits are folded into document rankings by best rank.

It sits above both ingest and search (it indexes a dataset, then searches it), so that search
itself never imports the ingest pipeline. A ``Configuration`` is generic: its search keys go to
``search()`` as they are (mode, strategy, compress, rerank, min_score...), its index keys
(chunker, chunk size, embedder...) choose the collection it is indexed into.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .api import strategy_chat
from .beir import BeirDataset, ndcg_at, recall_at, reciprocal_rank_at
from .exceptions import QueryError
from .ingest.pipeline import index_documents
from .models import Collection
from .search import search
from .types import RagDocument, SyncResult

__all__ = [
    "INDEX_KEYS",
    "SEARCH_KEYS",
    "Configuration",
    "IndexReport",
    "ModeReport",
    "evaluate",
    "evaluate_configuration",
    "index_dataset",
    "parse_configuration",
    "timed_index",
]

# Keys that change what is indexed (one collection per distinct set) and keys that change a search.
INDEX_KEYS = ("chunker", "semantic_threshold", "chunk_size", "chunk_overlap", "embedder")
SEARCH_KEYS = (
    "mode",
    "strategy",
    "n_queries",
    "compress",
    "parent_chunk_size",
    "rerank",
    "min_score",
    "candidates",
    "mmr",
    "mmr_lambda",
    "rrf_k",
    "syntax",
)


@dataclass
class ModeReport:
    mode: str  # the mode, or the configuration's name
    ndcg10: float
    recall100: float
    mrr10: float
    latencies_ms: list[float] = field(default_factory=list)  # k=10
    deep_latencies_ms: list[float] = field(default_factory=list)  # at evaluation depth

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else 0.0

    @property
    def p95(self) -> float:
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


@dataclass
class IndexReport:
    """What indexing a dataset cost: chunks stored, seconds, and so chunks per second."""

    sync: SyncResult
    seconds: float

    @property
    def chunks(self) -> int:
        return self.sync.added + self.sync.unchanged

    @property
    def chunks_per_second(self) -> float:
        return self.chunks / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Configuration:
    """One row of a comparison: a name, the search options, and the index options it needs."""

    name: str
    search: dict[str, Any] = field(default_factory=dict)
    index: dict[str, Any] = field(default_factory=dict)

    @property
    def mode(self) -> str:
        return str(self.search.get("mode", "hybrid"))


def parse_configuration(text: str) -> Configuration:
    """``"name:key=value,key=value"`` (e.g. ``"parents:strategy=parent_document,parent_chunk_size=512"``).

    Values read as JSON-ish scalars: integers, decimals, true/false, none; anything else is a string.
    """
    name, _, options = text.partition(":")
    name = name.strip()
    if not name:
        raise QueryError(f"configuration {text!r} has no name; write NAME:key=value,...")
    config = Configuration(name)
    for item in filter(None, (part.strip() for part in options.split(","))):
        key, sep, raw = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not sep:
            raise QueryError(f"configuration {name!r}: {item!r} is not key=value")
        if key in INDEX_KEYS:
            config.index[key] = _scalar(raw.strip())
        elif key in SEARCH_KEYS:
            config.search[key] = _scalar(raw.strip())
        else:
            raise QueryError(
                f"configuration {name!r}: unknown key {key!r}; use {', '.join(SEARCH_KEYS + INDEX_KEYS)}"
            )
    return config


def _scalar(raw: str) -> Any:
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def index_dataset(
    collection: Collection,
    dataset: BeirDataset,
    *,
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
    chunking: dict[str, Any] | None = None,
) -> SyncResult:
    total = SyncResult()
    batch: list[RagDocument] = []
    for doc in dataset.documents():
        batch.append(doc)
        if len(batch) == batch_size * 4:
            total += index_documents(collection, batch, batch_size=batch_size, chunking=chunking)
            if progress:
                progress(len(batch))
            batch = []
    if batch:
        total += index_documents(collection, batch, batch_size=batch_size, chunking=chunking)
        if progress:
            progress(len(batch))
    return total


def timed_index(collection: Collection, dataset: BeirDataset, **options: Any) -> IndexReport:
    started = time.perf_counter()
    synced = index_dataset(collection, dataset, **options)
    return IndexReport(synced, time.perf_counter() - started)


def evaluate(
    collection: Collection,
    dataset: BeirDataset,
    modes: list[str],
    *,
    depth: int = 100,
    ignore_identical_ids: bool = True,
    **search_options: Any,
) -> list[ModeReport]:
    """Run every judged query in every mode; document rank = rank of its best chunk."""
    return [
        evaluate_configuration(
            collection,
            dataset,
            Configuration(mode, {**search_options, "mode": mode}),
            depth=depth,
            ignore_identical_ids=ignore_identical_ids,
        )
        for mode in modes
    ]


def evaluate_configuration(
    collection: Collection,
    dataset: BeirDataset,
    config: Configuration,
    *,
    depth: int = 100,
    ignore_identical_ids: bool = True,
) -> ModeReport:
    """Every judged query searched with ``config``'s options. ``ignore_identical_ids`` drops a hit
    whose document id is the query's id (BEIR's option: in sets such as ArguAna a query is itself
    a corpus document, which would otherwise rank first and count as a miss)."""
    options = dict(config.search)
    options.setdefault("mode", "hybrid")
    options["rewriter"] = strategy_chat(None, options.get("strategy"), options.get("compress") is True)
    # Chunked documents take several chunk slots: ask for more chunks than documents needed.
    chunk_k = min(1000, depth * 3)
    report = ModeReport(config.name, 0.0, 0.0, 0.0)
    for query_id, text in dataset.queries.items():
        started = time.perf_counter()
        hits = search(collection, text, k=chunk_k, snippets=False, **options)
        report.deep_latencies_ms.append((time.perf_counter() - started) * 1000)
        ranking: list[str] = []
        for hit in hits:
            if ignore_identical_ids and hit.source_id == query_id:
                continue
            if hit.source_id not in ranking:
                ranking.append(hit.source_id)
        judged = dataset.qrels[query_id]
        report.ndcg10 += ndcg_at(ranking, judged)
        report.recall100 += recall_at(ranking, judged, depth)
        report.mrr10 += reciprocal_rank_at(ranking, judged)
    # Latency as a site sees it: k=10, on up to 100 queries.
    for text in list(dataset.queries.values())[:100]:
        started = time.perf_counter()
        search(collection, text, k=10, **options)
        report.latencies_ms.append((time.perf_counter() - started) * 1000)
    count = max(len(dataset.queries), 1)
    report.ndcg10, report.recall100, report.mrr10 = (
        report.ndcg10 / count,
        report.recall100 / count,
        report.mrr10 / count,
    )
    return report
