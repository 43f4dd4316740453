"""Real MiniLM vectors for the retrieval benchmarks (issue 4), cached under ``$BENCH_CACHE``.

    .venv/bin/python bench/search_data.py [--queries 200] [--wait 3600]

Three steps, each skipped when its cache files exist:

1. Chunks: the SciFact corpus as a ``rag_eval`` run indexed it with the local MiniLM embedder
   (all-MiniLM-L6-v2, 384 dims, 9,902 chunks of 5,183 abstracts) in the embedded PostgreSQL of
   ``$BENCH_EVAL_URL`` (read only: this script only SELECTs). It waits until the run has indexed
   every document (or no ``rag_eval`` process is left), then writes
   ``scifact-minilm-chunks.npy`` (float32, one row per chunk) and ``scifact-minilm-chunks.json``
   (SciFact document id, chunk index and text per row, same order).
2. Queries: the first ``--queries`` judged SciFact train queries, embedded once with
   ``django_rag.embedders.local.LocalEmbedder()`` (the same model), written to
   ``scifact-minilm-queries.npy`` + ``.json`` (ids, texts) with their qrels.
3. ``build_corpus(n)``: the real chunks plus perturbed copies up to ``n`` rows, in memory
   (deterministic; see its docstring).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from common import ROOT, LookupEmbedder

from django_rag.embedders.base import Vector

__all__ = ["Corpus", "MiniLMLookup", "Queries", "build_corpus", "load_chunks", "load_queries"]

CACHE = Path(os.environ.get("BENCH_CACHE", "/var/tmp/django-rag/bench-cache"))
EVAL_URL = os.environ.get(
    "BENCH_EVAL_URL", "postgresql://postgres:@/postgres?host=/var/tmp/django-rag/eval-pgdata"
)
EVAL_COLLECTION = "eval-scifact-train"
SPACE = "all-MiniLM-L6-v2:384"
SCIFACT_DIR = Path(os.environ.get("BENCH_SCIFACT_DIR", ROOT.parent / "shared/data/scifact-train"))
CORPUS_DOCS = 5183
SMALL_TENANT = "tenant-1pct"


class MiniLMLookup(LookupEmbedder):
    """Bench-only: the MiniLM space, with query vectors looked up by text (no model time)."""

    model = "all-MiniLM-L6-v2"
    dimensions = 384
    TABLE: ClassVar[dict[str, Vector]] = {}


# -- 1. chunks exported from the rag_eval database -----------------------------------------------


def _rag_eval_running() -> bool:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=False).stdout
    return any("rag_eval" in line and "search_data" not in line for line in out.splitlines())


def wait_for_eval(timeout: float) -> int:
    """Poll the rag_eval database until all SciFact documents have chunks; return that count."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(EVAL_URL) as conn:
            row = conn.execute(
                "SELECT count(DISTINCT c.document_id) FROM django_rag_chunk AS c "
                "JOIN django_rag_collection AS k ON k.id = c.collection_id "
                "WHERE k.name = %s AND c.space = %s",
                [EVAL_COLLECTION, SPACE],
            ).fetchone()
        docs = int(row[0]) if row else 0
        if docs >= CORPUS_DOCS:
            return docs
        if not _rag_eval_running():
            print(f"no rag_eval process left; exporting the {docs} documents indexed")
            return docs
        if time.monotonic() > deadline:
            raise SystemExit(f"rag_eval still running after {timeout:.0f} s ({docs}/{CORPUS_DOCS} documents)")
        print(f"  waiting for rag_eval: {docs}/{CORPUS_DOCS} documents indexed", flush=True)
        time.sleep(30)


def export_chunks() -> None:
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(EVAL_URL) as conn:
        conn.read_only = True
        register_vector(conn)
        rows = conn.execute(
            'SELECT d.source_id, c."index", c.content, c.embedding FROM django_rag_chunk AS c '
            "JOIN django_rag_document AS d ON d.id = c.document_id "
            "JOIN django_rag_collection AS k ON k.id = c.collection_id "
            'WHERE k.name = %s AND c.space = %s ORDER BY d.source_id, c."index"',
            [EVAL_COLLECTION, SPACE],
            binary=True,
        ).fetchall()
    vectors = np.array([row[3].to_numpy() for row in rows], dtype=np.float32)
    meta = [{"doc": row[0], "index": row[1], "content": row[2]} for row in rows]
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(CACHE / "scifact-minilm-chunks.npy", vectors)
    (CACHE / "scifact-minilm-chunks.json").write_text(json.dumps(meta))
    print(f"exported {len(rows)} chunks of {len({m['doc'] for m in meta})} documents to {CACHE}")


@dataclass
class Chunks:
    docs: list[str]
    indexes: list[int]
    texts: list[str]
    vectors: np.ndarray


def load_chunks() -> Chunks:
    path = CACHE / "scifact-minilm-chunks.npy"
    if not path.exists():
        raise SystemExit(f"{path} missing: run bench/search_data.py first")
    meta = json.loads((CACHE / "scifact-minilm-chunks.json").read_text())
    return Chunks(
        docs=[m["doc"] for m in meta],
        indexes=[m["index"] for m in meta],
        texts=[m["content"] for m in meta],
        vectors=np.load(path),
    )


# -- 2. query vectors ------------------------------------------------------------------------------


@dataclass
class Queries:
    ids: list[str]
    texts: list[str]
    vectors: np.ndarray
    qrels: dict[str, dict[str, int]]


def embed_queries(n: int) -> None:
    from django_rag.beir import load_beir
    from django_rag.embedders.local import LocalEmbedder

    dataset = load_beir(SCIFACT_DIR, split="train")
    ids = list(dataset.queries)[:n]
    texts = [dataset.queries[i] for i in ids]
    embedder = LocalEmbedder()
    started = time.perf_counter()
    vectors = np.array([embedder.embed_query(t) for t in texts], dtype=np.float32)
    print(f"embedded {len(texts)} queries in {time.perf_counter() - started:.1f} s ({embedder.space})")
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(CACHE / "scifact-minilm-queries.npy", vectors)
    qrels = {i: dataset.qrels[i] for i in ids}
    payload = {"space": embedder.space, "ids": ids, "texts": texts, "qrels": qrels}
    (CACHE / "scifact-minilm-queries.json").write_text(json.dumps(payload))


def load_queries() -> Queries:
    path = CACHE / "scifact-minilm-queries.npy"
    if not path.exists():
        raise SystemExit(f"{path} missing: run bench/search_data.py first")
    meta = json.loads((CACHE / "scifact-minilm-queries.json").read_text())
    return Queries(meta["ids"], meta["texts"], np.load(path), meta["qrels"])


# -- 3. the 100k corpus ----------------------------------------------------------------------------


@dataclass
class Corpus:
    """``n`` rows grouped in documents; row ``i`` belongs to ``documents[doc_of[i]]``."""

    source_ids: list[str]  # per document: "<scifact id>" for originals, "<scifact id>~<copy>" for copies
    origins: list[str]  # per document: the SciFact document it comes from (qrels are judged on these)
    tenants: list[str]  # per document
    rows: list[list[int]]  # per document: its row numbers, in chunk order
    texts: list[str]  # per row
    vectors: np.ndarray  # per row, float32, unit length
    real: int  # rows 0..real-1 are the exported chunks, the rest are copies
    copy_cosines: np.ndarray  # cosine of each copy with its source chunk

    @property
    def n(self) -> int:
        return len(self.texts)

    def row_origins(self) -> list[str]:
        """The SciFact document of every row."""
        origin = [""] * self.n
        for d, rows in enumerate(self.rows):
            for r in rows:
                origin[r] = self.origins[d]
        return origin

    def tenant_rows(self, tenant: str) -> int:
        return sum(len(r) for r, t in zip(self.rows, self.tenants, strict=True) if t == tenant)


def build_corpus(n: int, *, seed: int = 4, small_share: float = 0.01, other_tenants: int = 9) -> Corpus:
    """The real chunks, then copy rounds of every document until ``n`` rows (the last round partial).

    A copy of a chunk is its vector plus Gaussian noise, renormalised, with a noise level drawn per
    copied document so that its cosine with the source spreads over ~0.75-0.95 (the real chunks'
    nearest other-document neighbours sit around there, so copies land among related chunks,
    not on top of their source). Its text is the source text plus `` (copyNN)``, so every text is
    distinct and the text leg sees realistic postings (the source's terms, ~10x each); the
    suffix is one lexeme (``copy03``) that no query contains (``copy 3`` would add postings of
    ``3`` that queries with numbers would have to read).
    Tenants are per document: whole documents go to ``SMALL_TENANT`` at random until it holds
    ``small_share`` of the rows; the others are spread over ``other_tenants`` tenants.
    """
    chunks = load_chunks()
    rng = np.random.default_rng(seed)
    by_doc: dict[str, list[int]] = {}
    for i, doc in enumerate(chunks.docs):
        by_doc.setdefault(doc, []).append(i)
    order = list(by_doc)
    source_ids: list[str] = []
    origins: list[str] = []
    rows: list[list[int]] = []
    texts: list[str] = []
    parts: list[np.ndarray] = []
    cosines: list[np.ndarray] = []
    dims = chunks.vectors.shape[1]
    copy = 0
    while len(texts) < n:
        for doc in order:
            if len(texts) >= n:
                break
            members = by_doc[doc][: n - len(texts)]
            source = chunks.vectors[members]
            if copy == 0:
                vectors = source
                source_ids.append(doc)
                texts.extend(chunks.texts[i] for i in members)
            else:
                cosine = rng.uniform(0.75, 0.95)
                sigma = np.sqrt((1 / cosine**2 - 1) / dims)
                vectors = source + rng.normal(0.0, sigma, size=source.shape).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                cosines.append(np.sum(vectors * source, axis=1))
                source_ids.append(f"{doc}~{copy}")
                texts.extend(f"{chunks.texts[i]} (copy{copy:02d})" for i in members)
            origins.append(doc)
            rows.append(list(range(len(texts) - len(members), len(texts))))
            parts.append(vectors.astype(np.float32))
        copy += 1
    # Tenants: documents in random order fill the small tenant first.
    tenants = [""] * len(rows)
    small, target = 0, round(small_share * n)
    for d in rng.permutation(len(rows)):
        if small < target and small + len(rows[d]) <= target + 1:
            tenants[d] = SMALL_TENANT
            small += len(rows[d])
        else:
            tenants[d] = f"tenant-{d % other_tenants}"
    return Corpus(
        source_ids=source_ids,
        origins=origins,
        tenants=tenants,
        rows=rows,
        texts=texts,
        vectors=np.concatenate(parts),
        real=len(chunks.texts),
        copy_cosines=np.concatenate(cosines) if cosines else np.zeros(0, dtype=np.float32),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--wait", type=float, default=3600, help="seconds to wait for rag_eval to finish")
    args = parser.parse_args()
    if not (CACHE / "scifact-minilm-queries.npy").exists():
        embed_queries(args.queries)
    if not (CACHE / "scifact-minilm-chunks.npy").exists():
        docs = wait_for_eval(args.wait)
        print(f"rag_eval database: {docs} documents indexed")
        export_chunks()
    chunks, queries = load_chunks(), load_queries()
    print(f"cache {CACHE}: {len(chunks.texts)} chunks, {len(queries.ids)} queries")


if __name__ == "__main__":
    main()
