"""BEIR datasets and the retrieval metrics: pure Python, usable without Django (benchmarks, notebooks).

A BEIR folder holds ``corpus.jsonl`` (or ``.jsonl.gz``) with ``_id``, ``title``, ``text``;
``queries.jsonl`` with ``_id``, ``text``; and ``qrels/<split>.tsv`` (query-id, corpus-id,
score, with a header line).
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .exceptions import ConfigurationError
from .types import RagDocument

__all__ = ["BeirDataset", "load_beir", "ndcg_at", "recall_at", "reciprocal_rank_at"]


@dataclass
class BeirDataset:
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: grade}

    def documents(self) -> Iterator[RagDocument]:
        for doc_id, (title, text) in self.corpus.items():
            body = f"{title}\n\n{text}" if title else text
            yield RagDocument(doc_id, body, {"title": title or doc_id})


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
