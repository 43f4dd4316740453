"""The relevance cutoff (issue 21): real queries keep their first relevant hit, nonsense finds nothing.

    .venv/bin/python bench/relevance_cutoff.py                   # both sets, vector and hybrid
    .venv/bin/python bench/relevance_cutoff.py --scifact-docs 2000 --dump /tmp/relevance.json

Two collections, indexed through django-rag's pipeline with the local MiniLM embedder
(``django_rag.embedders.local.LocalEmbedder``; vectors cached on disk by ``bench/embcache.py``):

- **handbook**: the demo's sample documents (``example_project/sample_docs/*.md``, chunked as
  the demo's ``docs`` collection: 128 tokens, 16 overlap), with 37 judged questions written for
  this benchmark (``bench/data/handbook_queries.json``).
- **SciFact train**: ``../shared/data/scifact-train`` (5,183 abstracts, 809 judged claims;
  ``--scifact-docs N`` indexes the judged abstracts and the first others up to N in all).

Real queries: the judged ones. A query *keeps its first relevant hit* when the best-ranked
relevant chunk among its top 10 (searched with ``min_score=0``) has a relevance at or above the
cutoff; queries with no relevant hit in their top 10 have nothing to keep and are counted apart.
Nonsense queries: 100 strings of 3 to 6 words drawn (seeded) from the embedder's own
vocabulary (whole words of 4+ letters), the 50 everyday questions of
``bench/data/unrelated_questions.json``, and 50 of the other set's real queries (SciFact claims
against the handbook, handbook questions against SciFact). A nonsense query *gets zero results*
when none of its top 10 reaches the cutoff, which is what ``search`` then returns.

Targets: at least 98% kept and at least 90% zero, for vector and hybrid, on both sets, at the
default ``RAG["MIN_SCORE"]``. The table also shows a few other cutoffs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("BENCH_PGDATA", "/var/tmp/django-rag/bench-pgdata")

from common import ROOT, kept_database, machine_line, setup_django

DATA = ROOT / "bench" / "data"
SHARED = ROOT.parent / "shared" / "data"
if not SHARED.is_dir():  # a worktree under /work/wt: the data stay in /work/shared
    SHARED = Path("/work/shared/data")
SCIFACT_DIR = Path(os.environ.get("BENCH_SCIFACT_DIR", SHARED / "scifact-train"))
SAMPLE_DIR = ROOT / "example_project" / "sample_docs"
MODES = ("vector", "hybrid")
K = 10
SWEEP = (0.3, 0.4, 0.5, 0.6, 0.7)


def random_word_queries(vocabulary: Sequence[str], count: int = 100, seed: int = 21) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(vocabulary, rng.randint(3, 6))) for _ in range(count)]


def vocabulary(embedder: Any) -> list[str]:
    with open(embedder.tokenizer_file, encoding="utf-8") as handle:
        vocab = json.load(handle)["model"]["vocab"]
    return sorted(word for word in vocab if word.isalpha() and word.isascii() and len(word) >= 4)


def index_handbook(kb: Any) -> list[tuple[str, set[str]]]:
    from django_rag.ingest.loaders import load_text

    docs = []
    for path in sorted(SAMPLE_DIR.glob("*.md")):
        if path.name != "README.md":
            docs += load_text(path.read_text(), source_id=f"handbook/{path.stem}", tags=["handbook"])
    kb.index(docs)
    queries = json.loads((DATA / "handbook_queries.json").read_text())["queries"]
    return [(text, {source}) for text, source in queries]


def index_scifact(kb: Any, limit: int | None) -> list[tuple[str, set[str]]]:
    from django_rag.beir import load_beir
    from django_rag.evaluation import index_dataset

    dataset = load_beir(SCIFACT_DIR, "train")
    judged = {doc for rels in dataset.qrels.values() for doc in rels}
    # Judged abstracts first, so that a partial corpus (--scifact-docs) still holds every answer.
    ordered = sorted(dataset.corpus.items(), key=lambda item: item[0] not in judged)
    dataset.corpus = dict(ordered[:limit] if limit else ordered)
    started = time.perf_counter()
    result = index_dataset(kb, dataset)
    print(
        f"  SciFact: {len(dataset.corpus)} abstracts, {result.added} chunks added, "
        f"{result.unchanged} unchanged, {result.embedded} embedded in {time.perf_counter() - started:.0f}s"
    )
    return [
        (text, {d for d, grade in dataset.qrels[q].items() if grade > 0})
        for q, text in dataset.queries.items()
    ]


def first_relevant(kb: Any, text: str, relevant: set[str], mode: str) -> float | None:
    for hit in kb.search(text, k=K, mode=mode, min_score=0, snippets=False):
        if hit.source_id in relevant:
            return float(hit.relevance)
    return None


def best(kb: Any, text: str, mode: str) -> float:
    hits = kb.search(text, k=K, mode=mode, min_score=0, snippets=False)
    return max((float(hit.relevance) for hit in hits), default=0.0)


def share(values: Sequence[bool]) -> str:
    return f"{100 * sum(values) / len(values):5.1f}%" if values else "   n/a"


def measure(
    name: str, kb: Any, real: list[tuple[str, set[str]]], nonsense: dict[str, list[str]], cutoff: float
) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for mode in MODES:
        started = time.perf_counter()
        firsts = [first_relevant(kb, text, relevant, mode) for text, relevant in real]
        found = [f for f in firsts if f is not None]
        tops = {kind: [best(kb, q, mode) for q in queries] for kind, queries in nonsense.items()}
        every = [t for values in tops.values() for t in values]
        seconds = time.perf_counter() - started
        report[mode] = {"first_relevant": firsts, "nonsense_best": tops}
        print(
            f"\n{name}, {mode}: {len(real)} real queries "
            f"({len(found)} with a relevant hit in their top {K}), "
            f"{len(every)} nonsense ({', '.join(f'{len(v)} {k}' for k, v in tops.items())}); {seconds:.0f}s"
        )
        header = f"  {'cutoff':>7}  {'kept':>6}  {'zero':>6}  " + "  ".join(f"{k[:14]:>14}" for k in tops)
        print(header)
        for value in sorted({*SWEEP, cutoff}):
            mark = "  <- default" if value == cutoff else ""
            row = (
                f"  {value:7.2f}  {share([f >= value for f in found])}  {share([t < value for t in every])}  "
            )
            row += "  ".join(f"{share([t < value for t in v]):>14}" for v in tops.values())
            print(row + mark)
    # Hybrid finds a relevant hit in its top 10 for more queries than vector does (the words
    # rescue claims whose meaning ranks the answer beyond 10): the hard queries join its
    # denominator only. On the queries both modes found, the two are compared like for like.
    both = [
        i
        for i, (v, h) in enumerate(
            zip(report["vector"]["first_relevant"], report["hybrid"]["first_relevant"], strict=True)
        )
        if v is not None and h is not None
    ]
    print(f"\n{name}: {len(both)} queries with a relevant hit in both modes' top {K}, kept at {cutoff}:")
    for mode in MODES:
        firsts = report[mode]["first_relevant"]
        print(f"  {mode:>7}  {share([firsts[i] >= cutoff for i in both])}")
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scifact-docs", type=int, default=None, help="index only this many abstracts")
    parser.add_argument("--fresh", action="store_true", help="drop the kept database first")
    parser.add_argument("--dump", help="write every measured relevance to this JSON file")
    args = parser.parse_args(argv)
    rag = {
        "EMBEDDERS": {"default": {"BACKEND": "embcache.CachedLocalEmbedder"}},
        "COLLECTIONS": {
            "handbook": {"TEXT_CONFIG": "english", "CHUNK_SIZE": 128, "CHUNK_OVERLAP": 16},
            "scifact": {"TEXT_CONFIG": "english"},
        },
    }
    with kept_database("django_rag_relevance", fresh=args.fresh) as db:
        setup_django(db, rag)
        import django_rag
        from django_rag.search.relevance import default_min_score

        print(machine_line())
        print(f"database: {db.server}")
        handbook, scifact = django_rag.collection("handbook"), django_rag.collection("scifact")
        handbook_real = index_handbook(handbook)
        scifact_real = index_scifact(scifact, args.scifact_docs)
        words = random_word_queries(vocabulary(handbook.get_embedder()))
        unrelated = json.loads((DATA / "unrelated_questions.json").read_text())["questions"]
        rng = random.Random(21)
        cutoff = default_min_score()
        print(f"default cutoff RAG['MIN_SCORE'] = {cutoff}")
        dump = {
            "handbook": measure(
                "Demo handbook",
                handbook,
                handbook_real,
                {
                    "random words": words,
                    "everyday": unrelated,
                    "SciFact claims": [t for t, _ in rng.sample(scifact_real, 50)],
                },
                cutoff,
            ),
            "scifact": measure(
                "SciFact train",
                scifact,
                scifact_real,
                {"random words": words, "everyday": unrelated, "handbook": [t for t, _ in handbook_real]},
                cutoff,
            ),
        }
        if args.dump:
            Path(args.dump).write_text(json.dumps(dump))


if __name__ == "__main__":
    main()
