"""The bounded leg's p50/p95 on one kept corpus, in one process: for comparing two checkouts.

    .venv/bin/python bench/text_timing.py --chunks 1000000 --mode text

Run it from each checkout in turn (alternating, two rounds or more) against the same kept
database of ``bm25_corpus.py``: the machine's speed moves between runs, so only alternating
runs compare. 20 untimed queries first, then the 400 queries of ``text_latency.py``, k 10,
snippets off, the app's ``RAG["BM25"]`` defaults in bounded mode, with the database's files
read into the page cache first (``common.read_into_page_cache``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from bm25_corpus import COLLECTION, corpus_database, msmarco_queries, scifact_queries
from common import machine_line, percentiles, read_into_page_cache


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=1_000_000, help="a kept corpus size")
    parser.add_argument("--mode", choices=("text", "hybrid"), default="text")
    args = parser.parse_args(argv)
    texts = scifact_queries(200).texts + msmarco_queries(200).texts
    with corpus_database(args.chunks, keep=True) as (db, _, _):
        cached = read_into_page_cache(db)
        import django_rag as rag

        kb = rag.collection(COLLECTION)
        for text in texts[:20]:
            kb.search(text, mode=args.mode, k=10, snippets=False)
        seconds = []
        for text in texts:
            started = time.perf_counter()
            kb.search(text, mode=args.mode, k=10, snippets=False)
            seconds.append(time.perf_counter() - started)
    p50, p95 = percentiles(seconds)
    print(
        f"{args.chunks:,} chunks, {args.mode}: p50 {p50:.2f} ms, p95 {p95:.2f} ms; {cached}; {machine_line()}"
    )


if __name__ == "__main__":
    main()
