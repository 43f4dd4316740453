"""Retrieval evaluation on BEIR-format datasets: nDCG@10, recall@100, MRR@10 and latency per mode.

A BEIR folder holds ``corpus.jsonl`` (or ``.jsonl.gz``) with ``_id``, ``title``, ``text``;
``queries.jsonl`` with ``_id``, ``text``; and ``qrels/<split>.tsv`` (query-id, corpus-id,
score, with a header line). Documents are indexed into a collection (chunked as usual);
chunk hits are folded into document rankings by best rank.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .beir import BeirDataset, ndcg_at, recall_at, reciprocal_rank_at
from .ingest.pipeline import index_documents
from .models import Collection
from .search import search
from .types import RagDocument, SyncResult

__all__ = ["ModeReport", "evaluate", "index_dataset"]


@dataclass
class ModeReport:
    mode: str
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


def index_dataset(
    collection: Collection,
    dataset: BeirDataset,
    *,
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> SyncResult:
    total = SyncResult()
    batch: list[RagDocument] = []
    for doc in dataset.documents():
        batch.append(doc)
        if len(batch) == batch_size * 4:
            total += index_documents(collection, batch, batch_size=batch_size)
            if progress:
                progress(len(batch))
            batch = []
    if batch:
        total += index_documents(collection, batch, batch_size=batch_size)
        if progress:
            progress(len(batch))
    return total


def evaluate(
    collection: Collection, dataset: BeirDataset, modes: list[str], *, depth: int = 100, **search_options: Any
) -> list[ModeReport]:
    """Run every judged query in every mode; document rank = rank of its best chunk."""
    reports = []
    # Chunked documents take several chunk slots: ask for more chunks than documents needed.
    chunk_k = min(1000, depth * 3)
    for mode in modes:
        report = ModeReport(mode, 0.0, 0.0, 0.0)
        for query_id, text in dataset.queries.items():
            started = time.perf_counter()
            hits = search(collection, text, k=chunk_k, mode=mode, snippets=False, **search_options)
            report.deep_latencies_ms.append((time.perf_counter() - started) * 1000)
            ranking: list[str] = []
            for hit in hits:
                if hit.source_id not in ranking:
                    ranking.append(hit.source_id)
            judged = dataset.qrels[query_id]
            report.ndcg10 += ndcg_at(ranking, judged)
            report.recall100 += recall_at(ranking, judged, depth)
            report.mrr10 += reciprocal_rank_at(ranking, judged)
        # Latency as a site sees it: k=10, on up to 100 queries.
        for text in list(dataset.queries.values())[:100]:
            started = time.perf_counter()
            search(collection, text, k=10, mode=mode, **search_options)
            report.latencies_ms.append((time.perf_counter() - started) * 1000)
        count = max(len(dataset.queries), 1)
        report.ndcg10, report.recall100, report.mrr10 = (
            report.ndcg10 / count,
            report.recall100 / count,
            report.mrr10 / count,
        )
        reports.append(report)
    return reports
