"""BM25 by bm25s (with PyStemmer, English stop words) on a BEIR split: the text-leg peer of issue 4.

    .venv/bin/python bench/bm25s_scifact.py ../shared/data/scifact-train --split train
    .venv/bin/python bench/bm25s_scifact.py ../shared/data/scifact-train --split train --chunk-size 256
    .venv/bin/python bench/bm25s_scifact.py ... --k1 1.2     # django-rag's k1 (bm25s defaults to 1.5)

Prints nDCG@10, recall@100 and MRR@10 with the same metric code as ``rag_eval`` and the
per-query latency (the model is built once, not timed per query). Compare with
``manage.py rag_eval ... --modes text``. By default bm25s ranks whole documents; with
``--chunk-size`` it ranks the very chunks ``rag_eval`` indexes (django-rag's chunker, counting
tokens with the local MiniLM tokenizer, ``--chunk-overlap`` 32 by default) and folds them into
documents by best rank as ``rag_eval`` does: the same units for both rankers.
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

from django_rag.beir import BeirDataset, load_beir, ndcg_at, recall_at, reciprocal_rank_at


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--chunk-size", type=int, help="rank rag_eval's chunks of this many tokens")
    parser.add_argument("--chunk-overlap", type=int, default=32)
    # bm25s defaults to k1 1.5; django-rag ranks with Lucene's 1.2 (b 0.75 for both).
    parser.add_argument("--k1", type=float, default=1.5, help="BM25 k1 (django-rag: 1.2)")
    parser.add_argument("--b", type=float, default=0.75, help="BM25 b (django-rag: 0.75)")
    args = parser.parse_args()
    dataset = load_beir(args.dataset, args.split)
    if args.chunk_size:
        ids, texts = chunked(dataset, args.chunk_size, args.chunk_overlap)
    else:
        ids = list(dataset.corpus)
        texts = [f"{title}\n\n{text}" if title else text for title, text in dataset.corpus.values()]
    stemmer = Stemmer.Stemmer("english")
    started = time.perf_counter()
    retriever = bm25s.BM25(k1=args.k1, b=args.b)
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    print(f"bm25s index of {len(ids)} documents: {time.perf_counter() - started:.2f}s")
    ndcg = recall = mrr = 0.0
    latencies = []
    for query_id, query in dataset.queries.items():
        started = time.perf_counter()
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, show_progress=False)
        results, _ = retriever.retrieve(tokens, k=min(300, len(ids)), show_progress=False)
        latencies.append((time.perf_counter() - started) * 1000)
        ranking: list[str] = []
        for i in results[0]:
            if ids[i] not in ranking:  # a chunk's document, at its best chunk's rank
                ranking.append(ids[i])
        judged = dataset.qrels[query_id]
        ndcg += ndcg_at(ranking, judged)
        recall += recall_at(ranking, judged, 100)
        mrr += reciprocal_rank_at(ranking, judged)
    n = len(dataset.queries)
    print(
        f"bm25s   nDCG@10 {ndcg / n:.4f}  R@100 {recall / n:.4f}  MRR@10 {mrr / n:.4f}  "
        f"p50 {statistics.median(latencies):.2f} ms  ({n} queries, {args.split}, k1 {args.k1}, b {args.b})"
    )


def chunked(dataset: BeirDataset, size: int, overlap: int) -> tuple[list[str], list[str]]:
    """(document id per chunk, chunk text) as ``rag_eval`` chunks the corpus with the local embedder."""
    from django_rag.embedders.local import LocalEmbedder
    from django_rag.ingest.chunking import chunk_document

    count_tokens = LocalEmbedder().count_tokens
    ids, texts = [], []
    for doc in dataset.documents():
        for chunk in chunk_document(doc, chunk_size=size, chunk_overlap=overlap, token_counter=count_tokens):
            ids.append(doc.source_id)
            texts.append(chunk.content)
    print(f"{len(texts)} chunks of <= {size} tokens (overlap {overlap}) from {len(dataset.corpus)} documents")
    return ids, texts


if __name__ == "__main__":
    main()
