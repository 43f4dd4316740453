"""BM25 by bm25s (with PyStemmer, English stop words) on a BEIR split: the text-leg peer of issue 4.

    .venv/bin/python bench/bm25s_scifact.py ../shared/data/scifact-train --split train

Prints nDCG@10, recall@100 and MRR@10 with the same metric code as ``rag_eval`` and the
per-query latency (the model is built once, not timed per query). Compare with
``manage.py rag_eval ... --modes text``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bm25s
import Stemmer

from django_rag.evaluation import load_beir, ndcg_at, recall_at, reciprocal_rank_at


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--split", default="test")
    args = parser.parse_args()
    dataset = load_beir(args.dataset, args.split)
    ids = list(dataset.corpus)
    texts = [f"{title}\n\n{text}" if title else text for title, text in dataset.corpus.values()]
    stemmer = Stemmer.Stemmer("english")
    started = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    print(f"bm25s index of {len(ids)} documents: {time.perf_counter() - started:.2f}s")
    ndcg = recall = mrr = 0.0
    latencies = []
    for query_id, query in dataset.queries.items():
        started = time.perf_counter()
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, show_progress=False)
        results, _ = retriever.retrieve(tokens, k=100, show_progress=False)
        latencies.append((time.perf_counter() - started) * 1000)
        ranking = [ids[i] for i in results[0]]
        judged = dataset.qrels[query_id]
        ndcg += ndcg_at(ranking, judged)
        recall += recall_at(ranking, judged, 100)
        mrr += reciprocal_rank_at(ranking, judged)
    n = len(dataset.queries)
    print(
        f"bm25s   nDCG@10 {ndcg / n:.4f}  R@100 {recall / n:.4f}  MRR@10 {mrr / n:.4f}  "
        f"p50 {statistics.median(latencies):.2f} ms  ({n} queries, {args.split})"
    )


if __name__ == "__main__":
    main()
