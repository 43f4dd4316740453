"""How often the bounded BM25 leg returns the exhaustive leg's top 10 (issue 14), as the corpus grows.

    .venv/bin/python bench/text_agreement.py --chunks 10000,100000,1000000
    .venv/bin/python bench/text_agreement.py --chunks 1000000 --grid 'TOP=500;TOP=1000;BUDGET=10000,TOP=2000'

The synthetic corpora of ``bm25_corpus.py`` have no relevance judgements, so nDCG can only be
measured on SciFact and MS MARCO-5k (``text_quality.py``), where every query's terms fit the
budget. Here, on the kept databases ``text_latency.py --keep-db`` loaded, each of the 400
queries is searched in both modes (``mode="text"``, k 10) and compared: the share of queries
with the same ten chunks in the same order, and the mean overlap of the two top-10 sets. Scores
of the chunks both return are the same bits (the bounded leg scores exactly); only membership
can differ. One process per size, as in ``text_latency.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bm25_corpus import (
    COLLECTION,
    bm25_mode,
    corpus_database,
    msmarco_queries,
    parse_grid,
    scifact_queries,
)
from common import machine_line

K = 10


def run_size(n: int, queries: int, grid: list[dict[str, int]]) -> list[dict[str, Any]]:
    """One exhaustive pass, then the bounded leg under each setting of ``grid``."""
    sets = [scifact_queries(queries), msmarco_queries(queries)]
    texts = [text for s in sets for text in s.texts]
    rows = []
    with corpus_database(n, keep=True):
        import django_rag as rag

        exact: list[list[int]] = []
        with bm25_mode("exact"):
            kb = rag.collection(COLLECTION)
            exact = [[hit.chunk.pk for hit in kb.search(t, mode="text", k=K, snippets=False)] for t in texts]
        for bm25 in grid:
            bounded: list[list[int]] = []
            seconds: list[float] = []
            with bm25_mode("bounded", bm25):
                kb = rag.collection(COLLECTION)
                for text in texts:
                    started = time.perf_counter()
                    hits = kb.search(text, mode="text", k=K, snippets=False)
                    bounded.append([hit.chunk.pk for hit in hits])
                    seconds.append(time.perf_counter() - started)
            pairs = list(zip(exact, bounded, strict=True))
            rows.append(
                {
                    "n": n,
                    "bm25": bm25,
                    "queries": len(pairs),
                    "identical": sum(a == b for a, b in pairs) / len(pairs),
                    "overlap": sum(len(set(a) & set(b)) / max(len(a), 1) for a, b in pairs) / len(pairs),
                    "p50": statistics.median(seconds) * 1000,
                }
            )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", default="10000,100000", help="comma-separated sizes (kept databases)")
    parser.add_argument("--queries", type=int, default=200, help="per query set")
    parser.add_argument(
        "--grid",
        default="",
        help="RAG['BM25'] settings to compare, ';'-separated, e.g. 'TOP=500;TOP=1000,BUDGET=10000' "
        "(default: the app's)",
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    grid = parse_grid(args.grid)
    if args.one:
        print(json.dumps(run_size(args.one, args.queries, grid)))
        return
    print(f"bounded vs exhaustive BM25, top {K} (issue 14);", machine_line())
    print(
        "chunks      queries  same top 10  mean overlap@10  bounded p50 ms (one process, text)  RAG['BM25']",
        flush=True,
    )
    for n in (int(x) for x in args.chunks.split(",")):
        command = [sys.executable, str(Path(__file__)), "--one", str(n), "--queries", str(args.queries)]
        command += ["--grid", args.grid]
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        for row in json.loads(out.stdout.strip().splitlines()[-1]):
            print(
                f"{n:>9,}  {row['queries']:>8}  {row['identical']:>10.1%}  {row['overlap']:>14.3f}"
                f"  {row['p50']:>10.2f}  {row['bm25'] or 'defaults'}",
                flush=True,
            )
    print(machine_line())


if __name__ == "__main__":
    main()
