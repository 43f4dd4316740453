"""nDCG@10 of the text and hybrid modes with each BM25 leg, side by side (issue 14).

    .venv/bin/python bench/text_quality.py --modes exact --keep-db
    .venv/bin/python bench/text_quality.py --modes exact,bounded --keep-db

SciFact train (5,183 abstracts, 809 judged claims) and MS MARCO-5k (5,000 passages, 43 judged
queries) from ``../shared/data`` are indexed once each through django-rag's pipeline
(``evaluation.index_dataset``: chunking, embedding, ``upsert_many``) into their own
collection, then ``evaluation.evaluate`` (the code of ``manage.py rag_eval``: top 300
chunks folded into documents by best chunk, nDCG@10 with linear gains) runs for
``mode="text"`` and ``mode="hybrid"`` under ``RAG["BM25"] = {"MODE": m}`` for every ``--modes``
value. The embedder is ``HashingEmbedder`` (384 dims, signed word hashing), not MiniLM:
MiniLM on this 2-core machine embeds ~20 chunks/s, ~10 minutes per corpus; hybrid's
figures are therefore RRF of BM25 with a lexical vector, comparable between BM25 modes, not
with MiniLM hybrid figures. No HNSW index: the vector leg is an exact scan at this size.
The issue's bar: every bounded nDCG@10 within 0.003 of exact.

At this size the default bounded leg reads every posting of almost every query (its budget,
20,000 postings, covers all of a query's terms), so it equals the exhaustive leg. ``--grid``
adds bounded columns under other ``RAG["BM25"]`` settings: a budget scaled down with the
corpus (``BUDGET=2000`` reads about the share of the postings that 20,000 reads at 100k
chunks, ``BUDGET=200`` the share at 1M) shows what the approximation costs in judged quality
where it does cut. Those columns are reported beside the bar, not judged by it::

    .venv/bin/python bench/text_quality.py --modes exact,bounded --grid 'BUDGET=2000;BUDGET=200' --keep-db
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

os.environ.setdefault("BENCH_PGDATA", "/var/tmp/django-rag/bench14-pgdata")

from bm25_corpus import DATA, bm25_mode, check_modes, parse_grid
from common import bench_database, kept_database, machine_line, setup_django

TOLERANCE = 0.003
DATASETS = {"SciFact train": ("scifact-train", "train"), "MS MARCO-5k": ("msmarco-5k", "test")}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--modes", default="exact", help="comma-separated RAG['BM25']['MODE'] values: exact,bounded"
    )
    parser.add_argument(
        "--grid",
        default="",
        help="more bounded columns, ';'-separated RAG['BM25'] settings, e.g. 'BUDGET=2000;BUDGET=200'",
    )
    parser.add_argument("--keep-db", action="store_true", help="keep django_rag_bm25_quality (indexed once)")
    parser.add_argument("--fresh", action="store_true", help="drop the kept database first (index anew)")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    # Extra bounded columns: (label, the other RAG["BM25"] settings).
    extra = [(",".join(f"{k}={v}" for k, v in g.items()), g) for g in parse_grid(args.grid) if g]
    started = time.perf_counter()
    collections = {name: f"eval-{folder}" for name, (folder, _) in DATASETS.items()}
    rag = {
        "EMBEDDERS": {
            "default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 384}
        },
        "COLLECTIONS": {c: {"TEXT_CONFIG": "english"} for c in collections.values()},
    }
    database = (
        kept_database("django_rag_bm25_quality", fresh=args.fresh)
        if args.keep_db
        else bench_database("django_rag_bm25_quality")
    )
    with database as db:
        setup_django(db, rag)
        check_modes(modes)
        import django_rag
        from django_rag.beir import load_beir
        from django_rag.evaluation import evaluate, index_dataset
        from django_rag.models import Document

        print(
            f"nDCG@10 by BM25 mode (issue 14); {db.server}, database {db.name}; {machine_line()}", flush=True
        )
        scores: dict[tuple[str, str, str], float] = {}
        for name, (folder, split) in DATASETS.items():
            dataset = load_beir(DATA / folder, split=split)
            kb = django_rag.collection(collections[name])
            if Document.objects.filter(collection=kb).count() != len(dataset.corpus):
                begin = time.perf_counter()
                synced = index_dataset(kb, dataset)
                print(
                    f"  indexed {name}: {synced.added} chunks in {time.perf_counter() - begin:.0f} s",
                    flush=True,
                )
            for mode in modes:
                with bm25_mode(mode):
                    for report in evaluate(kb, dataset, ["text", "hybrid"]):
                        scores[(name, mode, report.mode)] = report.ndcg10
            for label, options in extra:
                with bm25_mode("bounded", options):
                    for report in evaluate(kb, dataset, ["text", "hybrid"]):
                        scores[(name, label, report.mode)] = report.ndcg10
            print(f"  {name}: {len(dataset.queries)} judged queries evaluated; {machine_line()}", flush=True)
    print()
    columns = modes + [label for label, _ in extra]
    compared = [c for c in columns if c != "exact"] if "exact" in modes else []
    width = max([8, *(len(c) for c in columns)])
    header = f"{'dataset':<14} {'search':<7} " + " ".join(f"{c:>{width}}" for c in columns)
    if compared:
        header += "  " + " ".join(f"{c + '-exact':>{width + 6}}" for c in compared)
    print(header)
    worst = 0.0
    for name in DATASETS:
        for leg in ("text", "hybrid"):
            line = f"{name:<14} {leg:<7} " + " ".join(f"{scores[(name, c, leg)]:{width}.4f}" for c in columns)
            for c in compared:
                delta = scores[(name, c, leg)] - scores[(name, "exact", leg)]
                if c in modes:  # the bar judges the modes' own settings, not the grid's
                    worst = max(worst, abs(delta))
                line += f"  {delta:+{width + 6}.4f}"
            print(line)
    print("(nDCG@10, top 300 chunks folded to documents, as rag_eval; hybrid = BM25 + HashingEmbedder 384)")
    if "exact" in modes and len(modes) > 1:
        verdict = "met" if worst <= TOLERANCE else "MISSED"
        print(f"largest |bounded - exact|: {worst:.4f} (target <= {TOLERANCE}: {verdict})")
    print(f"total {time.perf_counter() - started:.0f} s; {machine_line()}")


if __name__ == "__main__":
    main()
