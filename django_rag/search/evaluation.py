"""Retrieval evaluation on BEIR-format datasets: nDCG@10, recall@100, MRR@10 and latency per mode.

A BEIR folder holds ``corpus.jsonl`` (or ``.jsonl.gz``) with ``_id``, ``title``, ``text``;
``queries.jsonl`` with ``_id``, ``text``; and ``qrels/<split>.tsv`` (query-id, corpus-id,
score, with a header line). Documents are indexed into a collection (chunked as usual);
chunk hits are folded into document rankings by best rank.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..exceptions import ConfigurationError
from ..ingest.pipeline import index_documents
from ..models import Collection
from ..types import RagDocument, SyncResult
from .query import search

__all__ = ["BeirDataset", "ModeReport", "evaluate", "load_beir", "ndcg_at", "recall_at", "reciprocal_rank_at"]


@dataclass
class BeirDataset:
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: grade}

    def documents(self) -> Iterator[RagDocument]:
        for doc_id, (title, text) in self.corpus.items():
            body = f"{title}\n\n{text}" if title else text
            yield RagDocument(doc_id, body, {"title": title or doc_id})


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


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def _find(folder: Path, name: str) -> Path:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.exists():
            return candidate
    raise ConfigurationError(f"{folder} is not a BEIR folder: {name} (or {name}.gz) is missing")


def load_beir(folder: str | Path, split: str = "test") -> BeirDataset:
    """Read a BEIR folder; only queries with judgements in ``qrels/<split>.tsv`` are kept."""
    folder = Path(folder)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.exists():
        available = (
            sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        )
        raise ConfigurationError(f"no qrels for split {split!r} in {folder} (available: {available})")
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            parts = line.rstrip("\n").split("\t")
            if number == 0 and not parts[-1].lstrip("-").isdigit():
                continue  # header
            if len(parts) >= 3:
                qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    corpus = {
        str(row["_id"]): (row.get("title") or "", row.get("text") or "")
        for row in _jsonl(_find(folder, "corpus.jsonl"))
    }
    queries = {
        str(row["_id"]): row["text"]
        for row in _jsonl(_find(folder, "queries.jsonl"))
        if str(row["_id"]) in qrels
    }
    return BeirDataset(corpus=corpus, queries=queries, qrels={q: r for q, r in qrels.items() if q in queries})


def ndcg_at(ranking: list[str], judged: dict[str, int], k: int = 10) -> float:
    """nDCG with linear gains, as trec_eval (and so BEIR) computes it."""
    dcg = sum(judged.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k]))
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranking: list[str], judged: dict[str, int], k: int = 100) -> float:
    relevant = {doc for doc, grade in judged.items() if grade > 0}
    return len(relevant & set(ranking[:k])) / len(relevant) if relevant else 0.0


def reciprocal_rank_at(ranking: list[str], judged: dict[str, int], k: int = 10) -> float:
    for i, doc in enumerate(ranking[:k]):
        if judged.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


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
