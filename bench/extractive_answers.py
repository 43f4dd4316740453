"""Extractive answers (no language model): do the sentences they quote come from a relevant document?

    python bench/extractive_answers.py [--sample 200] [--latency 40] [--k 6]

For SciFact train (809 claims) and MS MARCO-5k (43 judged queries), in ``../shared/data``:

1. retrieval: BM25 (k1 0.9, b 0.4) over every document (title + text), top ``--k`` as the
   passages of the answer, numbered in rank order (BM25 and not the site's hybrid search: on
   this shared 2-core machine, embedding the 10k documents of both sets takes over an hour);
2. the extractive answer (``ExtractiveChat.choose``, the default ``RAG["CHAT"]``) over them,
   with the local MiniLM embedder (``all-MiniLM-L6-v2``) scoring the shortlisted sentences;
3. judged against the qrels: the share of questions whose **first quoted sentence** comes from a
   relevant document, the share whose **every quoted sentence** does, against the share for
   "the first sentence of the top hit" (relevant when the top hit is); a "not enough
   information" answer counts as not relevant. Also with term overlap alone (no embedder).

Latency: ``quote()`` alone (sentence split, scoring, embedding the shortlisted sentences with
the uncached model, formatting) over ``--latency`` questions, p50 and p95. Vectors of the
quality runs are cached on disk by SHA-1 of the text under ``$BENCH_EMBCACHE``
(``/var/tmp/django-rag/embcache``, the layout of the chunker branch's ``bench/embcache.py``).
The documents are whole (SciFact abstracts, MS MARCO passages), not the site's chunks.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import django  # noqa: E402
from django.conf import settings  # noqa: E402

settings.configure(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_rag"])
django.setup()

from bench.common import machine_line, percentiles  # noqa: E402
from bench.embcache import CachedLocalEmbedder  # noqa: E402
from django_rag.answer.extractive import ExtractiveChat  # noqa: E402
from django_rag.embedders.local import LocalEmbedder  # noqa: E402

# ../shared/data from the main checkout; a worktree sits one level deeper.
_SHARED = next((p / "shared/data" for p in ROOT.parents if (p / "shared/data").is_dir()), ROOT / "data")
DATA = Path(os.environ.get("BENCH_DATA", _SHARED))
_WORD = re.compile(r"\w+")


def _lines(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


class BM25:
    """Okapi BM25 over lower-cased word tokens: the retrieval of this benchmark."""

    def __init__(self, texts: list[str], k1: float = 0.9, b: float = 0.4) -> None:
        self.docs = [Counter(_WORD.findall(text.lower())) for text in texts]
        self.lengths = np.array([sum(doc.values()) for doc in self.docs], dtype=np.float64)
        self.average = float(self.lengths.mean())
        frequency: Counter[str] = Counter(term for doc in self.docs for term in doc)
        n = len(self.docs)
        self.idf = {term: math.log(1 + (n - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}
        self.postings: dict[str, list[int]] = {}
        for i, doc in enumerate(self.docs):
            for term in doc:
                self.postings.setdefault(term, []).append(i)
        self.k1, self.b = k1, b

    def top(self, query: str, k: int) -> list[int]:
        scores = np.zeros(len(self.docs))
        for term in set(_WORD.findall(query.lower())):
            for i in self.postings.get(term, ()):
                tf = self.docs[i][term]
                norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / self.average)
                scores[i] += self.idf[term] * tf * (self.k1 + 1) / (tf + norm)
        return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


def load(name: str) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, set[str]]]:
    folder = DATA / name
    corpus_path = (
        folder / "corpus.jsonl.gz" if (folder / "corpus.jsonl.gz").exists() else folder / "corpus.jsonl"
    )
    corpus = _lines(corpus_path)
    queries = {row["_id"]: row["text"] for row in _lines(folder / "queries.jsonl")}
    qrels: dict[str, set[str]] = {}
    for path in sorted((folder / "qrels").glob("*.tsv")):
        for line in path.read_text().splitlines()[1:]:
            query, doc, score = line.split("\t")[:3]
            if int(score) > 0:
                qrels.setdefault(query, set()).add(doc)
    return corpus, queries, qrels


def run(name: str, sample: int, k: int, latency: int, embedder: CachedLocalEmbedder) -> dict[str, Any]:
    corpus, queries, qrels = load(name)
    judged = [q for q in sorted(qrels) if q in queries]
    random.Random(7).shuffle(judged)
    judged = judged[:sample] if sample else judged
    print(f"{name}: {len(corpus)} documents, {len(judged)} judged questions", flush=True)
    bm25 = BM25([f"{doc.get('title', '')} {doc['text']}" for doc in corpus])
    ids = [doc["_id"] for doc in corpus]
    chat = ExtractiveChat()
    counts = {
        "first": 0,
        "all": 0,
        "first_terms": 0,
        "baseline": 0,
        "not_enough": 0,
        "any_relevant": 0,
    }
    timed: list[float] = []
    plain = LocalEmbedder()
    for number, query_id in enumerate(judged):
        question = queries[query_id]
        top = bm25.top(question, k)
        relevant = qrels[query_id]
        passages = [(n, corpus[i]["text"], corpus[i].get("title", ""), "") for n, i in enumerate(top, 1)]
        number_to_id = {n: ids[i] for n, i in enumerate(top, 1)}
        counts["baseline"] += number_to_id[1] in relevant
        counts["any_relevant"] += any(doc in relevant for doc in number_to_id.values())
        chosen = chat.choose(question, passages, embedder)
        if not chosen:
            counts["not_enough"] += 1
        else:
            counts["first"] += number_to_id[chosen[0].number] in relevant
            counts["all"] += all(number_to_id[s.number] in relevant for s in chosen)
        terms_only = chat.choose(question, passages, None)
        counts["first_terms"] += bool(terms_only) and number_to_id[terms_only[0].number] in relevant
        if number < latency:
            tick = time.perf_counter()
            chat.quote(question, passages, plain)
            timed.append(time.perf_counter() - tick)
    n = len(judged)
    p50, p95 = percentiles(timed)
    result = {
        "set": name,
        "questions": n,
        "first quoted sentence from a relevant doc": counts["first"] / n,
        "every quoted sentence from a relevant doc": counts["all"] / n,
        "first quoted sentence, terms only (no embedder)": counts["first_terms"] / n,
        "first sentence of the top hit (baseline)": counts["baseline"] / n,
        "a relevant doc among the passages (ceiling)": counts["any_relevant"] / n,
        "not enough information": counts["not_enough"] / n,
        "latency questions": len(timed),
        "latency p50 ms": p50,
        "latency p95 ms": p95,
    }
    for key, value in result.items():
        print(f"  {key}: {value:.3f}" if isinstance(value, float) else f"  {key}: {value}", flush=True)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sample", type=int, default=200, help="Judged questions per set (0: all).")
    parser.add_argument("--k", type=int, default=6, help="Passages per answer (RAG['WEB']['ASK_K']).")
    parser.add_argument("--latency", type=int, default=40, help="Questions timed per set.")
    parser.add_argument("--sets", nargs="*", default=["scifact-train", "msmarco-5k"])
    args = parser.parse_args(argv)
    print(machine_line(), flush=True)
    embedder = CachedLocalEmbedder()
    results = [run(name, args.sample, args.k, args.latency, embedder) for name in args.sets]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
