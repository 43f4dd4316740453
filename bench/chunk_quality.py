"""Retrieval quality of the chunker's changes, each measured on its own (issue 21).

    .venv/bin/python bench/chunk_quality.py                       # every variant, both datasets
    .venv/bin/python bench/chunk_quality.py --variants main --datasets scifact
    .venv/bin/python bench/chunk_quality.py --table               # print the saved results only

Variants, each indexed into a collection of its own and evaluated in the three modes:

- ``main``: the chunker of ``--main-rev`` (default: the commit this branch started from), read
  from git and put in the pipeline's place, without contextual headers: what main ships.
- ``sentences``: this branch's chunker (sentence and heading boundaries, whole-sentence
  overlap), ``CONTEXT_HEADERS`` off: the sentence-aligned chunks alone.
- ``headers``: this branch's chunker with ``CONTEXT_HEADERS`` on (the default): the title and
  heading path embedded and matched with every chunk.

SciFact train (5,183 abstracts, 809 judged claims) and MS MARCO-5k (5,000 passages, 43 judged
queries) from ``../shared/data``, indexed through django-rag's pipeline
(``evaluation.index_dataset``) with the collection defaults (CHUNK_SIZE 256, CHUNK_OVERLAP
32, TEXT_CONFIG english) and the local MiniLM embedder (``embedders.local.LocalEmbedder``),
whose vectors are cached on disk by SHA-1 of the embedded text (``bench/embcache.py``), so a
variant embeds only the texts no earlier run embedded. Then ``evaluation.evaluate`` (the
code of ``manage.py rag_eval``): top 300 chunks folded into documents by best chunk, nDCG@10
and recall@100, exact vector scan (no ANN index at this size). Each (dataset, variant) result
is measured twice from the same search (``min_score=0``): every hit, and (the ``+cutoff`` row)
only the hits at or above the default ``RAG["MIN_SCORE"]``, what ``search`` returns by default;
the cutoff only removes hits, so that row shows what it costs. Each result is saved as JSON
under ``$BENCH_RESULTS`` (default ``/var/tmp/django-rag/chunk-quality``), and
the table is printed from every saved result.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

os.environ.setdefault("BENCH_PGDATA", "/var/tmp/django-rag/chunker-pgdata")

from common import ROOT, bench_database, machine_line, setup_django

DATA = ROOT.parent / "shared" / "data"
if not DATA.is_dir():
    DATA = Path("/work/shared/data")
DATASETS = {
    "scifact": ("SciFact train", "scifact-train", "train"),
    "msmarco": ("MS MARCO-5k", "msmarco-5k", "test"),
}
VARIANTS = ("main", "sentences", "headers")
MODES = ("vector", "text", "hybrid")
RESULTS = Path(os.environ.get("BENCH_RESULTS", "/var/tmp/django-rag/chunk-quality"))
MAIN_REV = "c1a1b22"


def legacy_chunking(rev: str) -> ModuleType:
    """``django_rag/ingest/chunking.py`` as it is at ``rev``, imported as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{rev}:django_rag/ingest/chunking.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    source = source.replace("from ..", "from django_rag.")
    spec = importlib.util.spec_from_loader(f"legacy_chunking_{rev}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    exec(compile(source, f"{rev}:chunking.py", "exec"), module.__dict__)
    return module


@contextmanager
def chunker_of(variant: str, rev: str) -> Iterator[None]:
    """The pipeline chunks with main's chunker for ``main``, with this branch's otherwise."""
    from django_rag.ingest import pipeline

    if variant != "main":
        yield
        return
    legacy = legacy_chunking(rev)
    # The pipeline's own name for the chunker (imported there, not part of its public API).
    original = getattr(pipeline, "chunk_document")  # noqa: B009

    def chunk_document(doc: Any, **options: Any) -> Any:
        # Main's chunker knows nothing of headers: it takes the sizes and the counters only.
        known = ("chunk_size", "chunk_overlap", "token_counter", "batch_counter", "additive")
        return legacy.chunk_document(doc, **{k: v for k, v in options.items() if k in known})

    setattr(pipeline, "chunk_document", chunk_document)  # noqa: B010
    try:
        yield
    finally:
        setattr(pipeline, "chunk_document", original)  # noqa: B010


EMBEDDERS = {
    "minilm": {"BACKEND": "embcache.CachedLocalEmbedder"},
    # Fast, meaningless vectors: for the text leg (BM25 does not depend on the embedder) on whole sets.
    "hashing": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 384},
}


def subset(dataset: Any, docs: int, queries: int = 0) -> Any:
    """Every judged document and the first ones in corpus order up to ``docs`` (0: all); the
    first ``queries`` judged queries in id order (0: all)."""
    if queries:
        kept = sorted(dataset.queries)[:queries]
        dataset.queries = {q: dataset.queries[q] for q in kept}
        dataset.qrels = {q: dataset.qrels[q] for q in kept}
    if not docs:
        return dataset
    judged = {doc for grades in dataset.qrels.values() for doc in grades}
    keep = [doc_id for doc_id in dataset.corpus if doc_id in judged]
    keep += [doc_id for doc_id in dataset.corpus if doc_id not in judged][: max(0, docs - len(keep))]
    chosen = set(keep)
    dataset.corpus = {doc_id: value for doc_id, value in dataset.corpus.items() if doc_id in chosen}
    return dataset


def evaluate_modes(collection: Any, dataset: Any, modes: Sequence[str]) -> dict[str, dict[str, float]]:
    """``rag_eval``'s measure without its latency passes: the top 300 chunks of every judged
    query (``min_score=0``: no cutoff) folded into documents by best chunk, nDCG@10 and
    recall@100 per mode; and ``<mode>+cutoff``: the same ranking with only the hits whose
    relevance reaches the default ``RAG["MIN_SCORE"]``, which is what ``search`` returns by
    default (the cutoff only removes hits, so it can only lower recall)."""
    from django_rag.beir import ndcg_at, recall_at
    from django_rag.search.query import search
    from django_rag.search.relevance import default_min_score

    cutoff = default_min_score() or 0.0
    scores = {}
    for mode in modes:
        sums = {"": [0.0, 0.0], "+cutoff": [0.0, 0.0]}
        for query_id, text in dataset.queries.items():
            hits = search(collection, text, k=300, mode=mode, min_score=0, snippets=False)
            for suffix, kept in (
                ("", hits),
                ("+cutoff", [h for h in hits if (h.relevance or 0.0) >= cutoff]),
            ):
                ranking: list[str] = []
                for hit in kept:
                    if hit.source_id not in ranking:
                        ranking.append(hit.source_id)
                sums[suffix][0] += ndcg_at(ranking, dataset.qrels[query_id])
                sums[suffix][1] += recall_at(ranking, dataset.qrels[query_id], 100)
        count = max(1, len(dataset.queries))
        for suffix, (ndcg, recall) in sums.items():
            scores[mode + suffix] = {"ndcg10": ndcg / count, "recall100": recall / count}
    return scores


def run(
    variants: Sequence[str], datasets: Sequence[str], rev: str, embedder: str, docs: int, queries: int
) -> None:
    collections = {(d, v): f"cq-{d}-{v}" for d in datasets for v in variants}
    rag = {
        "EMBEDDERS": {"default": EMBEDDERS[embedder]},
        "COLLECTIONS": {
            name: {"TEXT_CONFIG": "english", "CONTEXT_HEADERS": variant == "headers"}
            for (_, variant), name in collections.items()
        },
    }
    with bench_database("django_rag_chunk_quality") as db:
        setup_django(db, rag)
        import django_rag
        from django_rag.beir import load_beir
        from django_rag.evaluation import index_dataset
        from django_rag.models import Chunk

        print(f"{db.server}; {machine_line()}", flush=True)
        for key in datasets:
            label, folder, split = DATASETS[key]
            dataset = subset(load_beir(DATA / folder, split=split), docs, queries)
            for variant in variants:
                kb = django_rag.collection(collections[(key, variant)])
                begin = time.perf_counter()
                with chunker_of(variant, rev):
                    synced = index_dataset(kb, dataset)
                indexed = time.perf_counter() - begin
                chunks = Chunk.objects.filter(collection=kb).count()
                print(
                    f"  {label} / {variant}: {chunks} chunks, {synced.embedded} embedded now, "
                    f"in {indexed:.0f} s; {machine_line()}",
                    flush=True,
                )
                modes = MODES if embedder == "minilm" else ("text",)
                scores = evaluate_modes(kb, dataset, modes)
                result = {
                    "dataset": label + (f" ({len(dataset.corpus)} docs)" if docs else ""),
                    "embedder": embedder,
                    "variant": variant,
                    "chunks": chunks,
                    "queries": len(dataset.queries),
                    "rev": rev if variant == "main" else "this branch",
                    "machine": machine_line(),
                    "modes": scores,
                }
                RESULTS.mkdir(parents=True, exist_ok=True)
                (RESULTS / f"{key}-{variant}-{embedder}-{docs}-{queries}.json").write_text(
                    json.dumps(result, indent=1)
                )
                print("   ", json.dumps(result["modes"]), flush=True)


def table() -> None:
    """One row per saved (dataset, variant), and below it the same with the default cutoff."""
    head = f"{'dataset':<26} {'embedder':<8} {'variant':<18} {'chunks':>6}  "
    print(head + "  ".join(f"{m + ' nDCG@10':>14} {'R@100':>6}" for m in MODES))
    for path in sorted(RESULTS.glob("*.json")):
        r = json.loads(path.read_text())
        shown = MODES if r.get("embedder", "minilm") == "minilm" else ("text",)
        for suffix in ("", "+cutoff"):
            if not all(m + suffix in r["modes"] for m in shown):
                continue
            cells = "  ".join(
                f"{r['modes'][m + suffix]['ndcg10']:>14.4f} {r['modes'][m + suffix]['recall100']:>6.4f}"
                if m in shown
                else f"{'-':>14} {'-':>6}"
                for m in MODES
            )
            print(
                f"{r['dataset']:<26} {r.get('embedder', 'minilm'):<8} {r['variant'] + suffix:<18} "
                f"{r['chunks']:>6}  " + cells
            )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated: {', '.join(VARIANTS)}"
    )
    parser.add_argument(
        "--datasets", default=",".join(DATASETS), help=f"comma-separated: {', '.join(DATASETS)}"
    )
    parser.add_argument(
        "--main-rev", default=MAIN_REV, help=f"git revision of main's chunker (default {MAIN_REV})"
    )
    parser.add_argument("--table", action="store_true", help="only print the table of the saved results")
    parser.add_argument(
        "--embedder", default="minilm", choices=sorted(EMBEDDERS), help="hashing: text leg only (fast)"
    )
    parser.add_argument("--docs", type=int, default=0, help="judged documents plus the first ones, N in all")
    parser.add_argument("--queries", type=int, default=0, help="the first N judged queries (default: all)")
    args = parser.parse_args(argv)
    if not args.table:
        variants = [v for v in args.variants.split(",") if v]
        datasets = [d for d in args.datasets.split(",") if d]
        unknown = sorted({*variants} - set(VARIANTS) | {*datasets} - set(DATASETS))
        if unknown:
            parser.error(f"unknown variants or datasets: {unknown}")
        run(variants, datasets, args.main_rev, args.embedder, args.docs, args.queries)
    table()


if __name__ == "__main__":
    main()
