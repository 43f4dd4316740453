"""Retrieval strategies and the semantic chunker against today's default, in one ``rag_eval`` run per set.

    cd bench && PYTHONPATH=.. python strategies_eval.py --docs 1000 --queries 100

For each dataset, a BEIR folder holding a subset (the first ``--queries`` judged queries, every
document judged for them, then the corpus's first documents up to ``--docs``) is written to a
temporary folder, and ``manage.py rag_eval`` compares, as one table:

- ``default``: hybrid search as ``kb.search`` runs it today (RAG["MIN_SCORE"] cutoff 0.5);
- ``parents``: ``strategy="parent_document"`` (PARENT_CHUNK_SIZE 1024 over the default chunks);
- ``compress``: ``compress=True`` without a chat model (the embedding sentence filter);
- ``semantic``: the semantic chunker (SEMANTIC_THRESHOLD ``--threshold``), hybrid search;
- ``nocut``: hybrid with ``min_score=0`` (no relevance cutoff), for reference.

multi_query and the chat-based compress need a language model, which this machine has not: they
are tested for correctness against the loopback server only. Embeddings: the local MiniLM
(int8 ONNX), cached on disk by ``bench/embcache.py``. The subset is not the published set: compare
rows of one table, not with published figures.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import tempfile
import time
from pathlib import Path

from common import ROOT, bench_database, machine_line, setup_django

DATA = ROOT.parent / "shared" / "data"
if not DATA.is_dir():
    DATA = Path("/work/shared/data")
DATASETS = {"scifact": ("scifact-train", "train"), "msmarco": ("msmarco-5k", "test")}


def subset(folder: Path, split: str, queries: int, docs: int, out: Path) -> tuple[int, int]:
    qrels_lines = (folder / "qrels" / f"{split}.tsv").read_text().splitlines()
    header, rows = qrels_lines[0], [line.split("\t") for line in qrels_lines[1:] if line.strip()]
    keep_queries: list[str] = []
    for row in rows:
        if row[0] not in keep_queries:
            keep_queries.append(row[0])
    keep_queries = keep_queries[:queries]
    judged = {row[1] for row in rows if row[0] in keep_queries}
    corpus_path = folder / "corpus.jsonl"
    opener = open if corpus_path.exists() else gzip.open
    corpus_path = corpus_path if corpus_path.exists() else folder / "corpus.jsonl.gz"
    kept: list[str] = []
    extra = 0
    with opener(corpus_path, "rt", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if str(row["_id"]) in judged:
                kept.append(line.rstrip("\n"))
            elif len(judged) + extra < docs:
                kept.append(line.rstrip("\n"))
                extra += 1
    (out / "qrels").mkdir(parents=True)
    (out / "corpus.jsonl").write_text("\n".join(kept) + "\n")
    selected = set(keep_queries)
    lines = [line for line in (folder / "queries.jsonl").read_text().splitlines() if line.strip()]
    (out / "queries.jsonl").write_text(
        "\n".join(line for line in lines if str(json.loads(line)["_id"]) in selected) + "\n"
    )
    (out / "qrels" / f"{split}.tsv").write_text(
        "\n".join([header, *("\t".join(row) for row in rows if row[0] in selected)]) + "\n"
    )
    return len(kept), len(keep_queries)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", default="scifact,msmarco")
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--configs", default="default,parents,compress,semantic,nocut")
    args = parser.parse_args()
    configs = {
        "default": "default:mode=hybrid",
        "parents": "parents:mode=hybrid,strategy=parent_document",
        "compress": "compress:mode=hybrid,compress=true",
        "semantic": f"semantic:mode=hybrid,chunker=semantic,semantic_threshold={args.threshold}",
        "nocut": "nocut:mode=hybrid,min_score=0",
    }
    chosen = [configs[name] for name in args.configs.split(",")]
    rag = {
        "EMBEDDERS": {"default": {"BACKEND": "embcache.CachedLocalEmbedder"}},
        "COLLECTIONS": {},
    }
    print(machine_line())
    with bench_database("django_rag_strategies") as db:
        setup_django(db, rag)
        from django.core.management import call_command

        for key in args.datasets.split(","):
            name, split = DATASETS[key]
            with tempfile.TemporaryDirectory() as scratch:
                folder = Path(scratch) / f"{key}-subset"
                docs, queries = subset(DATA / name, split, args.queries, args.docs, folder)
                print(f"\n== {name}: subset of {docs} documents, {queries} judged queries; {machine_line()}")
                out = io.StringIO()
                started = time.perf_counter()
                argv = [str(folder), "--split", split, "--collection", f"eval-{key}", "--verbosity", "0"]
                for config in chosen:
                    argv += ["--config", config]
                call_command("rag_eval", *argv, stdout=out)
                print(out.getvalue())
                print(f"({time.perf_counter() - started:.0f} s; load {os.getloadavg()})", flush=True)


if __name__ == "__main__":
    main()
