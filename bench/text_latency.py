"""Text-leg and hybrid latency as the corpus grows (issue 14): django-rag's BM25 legs beside bm25s.

    .venv/bin/python bench/text_latency.py --chunks 10000,100000 --modes exact --keep-db
    .venv/bin/python bench/text_latency.py --chunks 10000,100000,1000000 --modes exact,bounded --keep-db

For each ``--chunks`` size, in a process of its own (Django is set up once per process), on the
synthetic corpus of ``bm25_corpus.py`` loaded through ``upsert_many`` (database
``django_rag_bm25_<n>_14``, loaded on first use, kept with ``--keep-db``):

- ``kb.search(q, mode="text", k=10, snippets=False)`` and ``mode="hybrid"`` (RRF of the BM25 leg
  and the HNSW leg over 64-dim hashing vectors, the query embedded by the collection's
  ``HashingEmbedder``) for every ``--modes`` value, set as ``RAG["BM25"] = {"MODE": m}`` with
  ``override_settings`` (without that setting, before the bounded leg lands, only ``exact``
  runs: today's exhaustive leg). Modes alternate in shuffled order by blocks of 20 queries
  (each block entered with one untimed search per leg, as ``override_settings`` clears
  django-rag's caches), both legs on each query in shuffled order, so all share the machine's
  load; ``--warmup`` queries per mode and leg first, untimed. With ``--separate``, each mode is
  timed in a pass of its own instead, after 100 untimed SciFact claims that are not among the
  timed queries. Interleaved, the exhaustive leg's reads (every posting of every query term:
  1.6 GB of blocks per pass at 1M) evict what the bounded leg reads from PostgreSQL's buffer
  cache before each of its blocks, which a site running only the bounded leg never sees.
- Before timing, the database's files are read once so that the page cache holds them
  (``common.read_into_page_cache``; ``--no-page-cache`` skips it): right after a load, part of
  a large database may be on disk only.
- Queries: 200 real SciFact train claims and 200 MS MARCO-style queries (the 50 real MS MARCO-5k
  queries and 150 made from its passages: ``bm25_corpus.msmarco_queries``).
- bm25s (``BM25(k1=1.2, b=0.75)``, django-rag's parameters; PyStemmer English, English stop
  words) on the same chunk texts in the same process: index build time and query p50/p95
  (tokenising the query included), top 10.
- The postings on disk: every table named ``django_rag_post*`` / ``django_rag_term*``,
  ``pg_total_relation_size`` summed, over the chunk count.

Then the table of all sizes, with bounded/exact p50 and the growth p50(largest)/p50(previous size).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("BENCH_PGDATA", "/var/tmp/django-rag/bench14-pgdata")

import numpy as np
from bm25_corpus import (
    COLLECTION,
    SPACE,
    QuerySet,
    bm25_mode,
    check_modes,
    corpus_database,
    msmarco_queries,
    postings_bytes,
    scifact_queries,
)
from common import machine_line, percentiles, read_into_page_cache

K = 10
TARGET_TEXT_MS, TARGET_HYBRID_MS, TARGET_GROWTH = 15.0, 20.0, 1.5


def postings_read(collection_id: int, texts: Sequence[str]) -> str:
    """Postings the exhaustive leg reads per query (sum of its lexemes' df, the blocks' sizes)."""
    from django.db import connection

    try:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT sum(chunks) FROM django_rag_textstats WHERE collection_id = %s", [collection_id]
            )
            n = float(cur.fetchone()[0] or 0)
            totals, common = [], []
            for text in texts:
                cur.execute(
                    "SELECT sum(n) FROM django_rag_postblock WHERE collection_id = %s AND space = %s "
                    "AND term = ANY(SELECT DISTINCT lexeme FROM "
                    "unnest(to_tsvector('english'::regconfig, %s))) GROUP BY term",
                    [collection_id, SPACE, text],
                )
                dfs = [float(r[0]) for r in cur.fetchall()]
                totals.append(sum(dfs))
                common.append(sum(df for df in dfs if df > 0.05 * n))
    except Exception as exc:  # the statistics layout changed: say so, do not fail the run
        return f"n/a ({type(exc).__name__})"
    share = sum(common) / max(sum(totals), 1)
    return (
        f"median {np.median(totals):,.0f}, p95 {np.percentile(totals, 95):,.0f}; "
        f"{share:.0%} from terms in >5% of chunks"
    )


WARM_FROM = 600  # the warm-up claims' first index: --queries may not reach it


def warm_texts() -> list[str]:
    """100 SciFact train claims that are not among the timed ones (the first ``--queries``)."""
    return scifact_queries(809).texts[WARM_FROM : WARM_FROM + 100]


def run_size(n: int, modes: list[str], sets: list[QuerySet], args: argparse.Namespace) -> dict[str, Any]:
    """Everything measured at one size (this process's Django talks to that size's database)."""
    out: dict[str, Any] = {
        "n": n,
        "modes": modes,
        "sets": [s.name for s in sets],
        "notes": [s.note for s in sets],
    }
    started = time.perf_counter()
    with corpus_database(n, keep=args.keep_db, fresh=args.fresh) as (db, corpus, facts):
        import django_rag as rag

        kb = rag.collection(COLLECTION)
        out["server"] = db.server
        if facts.loaded:
            loaded = n - facts.start
            out["load"] = {
                "chunks": loaded,
                "seconds": facts.seconds,
                "rate": loaded / facts.seconds,
                "hnsw": facts.index_seconds,
            }
        out["page_cache"] = read_into_page_cache(db) if args.page_cache else "page cache left as it was"
        total, tables = postings_bytes()
        out["postings_bytes"] = total
        out["postings_tables"] = tables
        out["setup_seconds"] = time.perf_counter() - started
        print(
            f"[{n:,}] {db.name} ready in {out['setup_seconds']:.0f} s; postings {total / n:,.0f} B/chunk; "
            f"{out['page_cache']}",
            flush=True,
        )

        queries = [(s.name, t) for s in sets for t in s.texts]
        pairs = [(m, leg) for m in modes for leg in ("text", "hybrid")]
        seconds: dict[tuple[str, str], dict[str, list[float]]] = {
            p: {s.name: [] for s in sets} for p in pairs
        }

        def call(leg: str, text: str) -> float:
            begin = time.perf_counter()
            kb.search(text, mode=leg, k=K, snippets=False)
            return time.perf_counter() - begin

        shuffle = random.Random(14).shuffle

        def timed(mode: str, batch: list[tuple[str, str]]) -> None:
            for name, text in batch:
                legs = ["text", "hybrid"]
                shuffle(legs)
                for leg in legs:
                    seconds[(mode, leg)][name].append(call(leg, text))

        if args.separate:
            # One mode at a time, each after untimed queries that are not among the timed ones
            # (a query run twice finds its own pages in PostgreSQL's buffer cache: 13 against
            # 15 ms at 1M), so the server's buffer cache holds what that mode reads in general,
            # as on a site that runs only it.
            for mode in modes:
                with bm25_mode(mode):
                    for text in warm_texts():
                        for leg in ("text", "hybrid"):
                            call(leg, text)
                    timed(mode, queries)
        else:
            # Modes alternate by blocks of queries, not per query: entering override_settings
            # clears django-rag's settings-dependent caches, which the first search after it would
            # pay for. Each block starts with untimed calls, so every timed call runs with warm
            # caches.
            for mode in modes:
                with bm25_mode(mode):
                    for leg in ("text", "hybrid"):
                        for _, text in queries[: args.warmup]:
                            call(leg, text)
            block = 20
            for start in range(0, len(queries), block):
                turn_modes = list(modes)
                shuffle(turn_modes)
                for mode in turn_modes:
                    with bm25_mode(mode):
                        for leg in ("text", "hybrid"):
                            call(leg, queries[start][1])
                        timed(mode, queries[start : start + block])
        out["django"] = {
            f"{m}|{leg}": {name: percentiles(v) for name, v in per_set.items()}
            | {"all": percentiles([x for v in per_set.values() for x in v])}
            for (m, leg), per_set in seconds.items()
        }
        out["postings_read"] = postings_read(kb.pk, [t for _, t in queries])
        out["uptime"] = machine_line()
        print(
            f"[{n:,}] django-rag timed in {time.perf_counter() - started:.0f} s; {out['uptime']}", flush=True
        )
        out["bm25s"] = run_bm25s(corpus.texts(), sets, args.warmup)
        print(f"[{n:,}] bm25s done; {machine_line()}", flush=True)
    return out


def run_bm25s(texts: list[str], sets: list[QuerySet], warmup: int) -> dict[str, Any]:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    begin = time.perf_counter()
    retriever = bm25s.BM25(k1=1.2, b=0.75)
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    build = time.perf_counter() - begin
    del texts

    def query(text: str) -> float:
        begin = time.perf_counter()
        tokens = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False)
        if tokens.ids[0]:  # bm25s raises on a query with no known token
            retriever.retrieve(tokens, k=K, show_progress=False)
        return time.perf_counter() - begin

    everything = [t for s in sets for t in s.texts]
    for text in everything[:warmup]:
        query(text)
    per_set = {s.name: [query(t) for t in s.texts] for s in sets}
    result: dict[str, Any] = {name: percentiles(v) for name, v in per_set.items()}
    result["all"] = percentiles([x for v in per_set.values() for x in v])
    result["build"] = build
    return result


# -- the driver ----------------------------------------------------------------------------------


def fmt(p: tuple[float, float]) -> str:
    return f"{p[0]:.2f} / {p[1]:.2f}"


def report(results: list[dict[str, Any]]) -> None:
    sets = results[0]["sets"]
    print()
    print("== text-leg and hybrid latency, ms p50 / p95, k=10, snippets off (issue 14)")
    for note in results[0]["notes"]:
        print(f"   queries: {note}")
    header = ["chunks", "contender", *[f"{s} p50/p95" for s in sets], "all p50/p95"]
    rows = []
    for r in results:
        for key, per in r["django"].items():
            mode, leg = key.split("|")
            rows.append(
                [
                    f"{r['n']:,}",
                    f"kb.search mode={leg!r}, BM25 {mode}",
                    *[fmt(per[s]) for s in sets],
                    fmt(per["all"]),
                ]
            )
        b = r["bm25s"]
        rows.append(
            [
                f"{r['n']:,}",
                f"bm25s (index built in {b['build']:.1f} s)",
                *[fmt(b[s]) for s in sets],
                fmt(b["all"]),
            ]
        )
    table(header, rows)
    print()
    print("postings on disk (tables django_rag_post* + django_rag_term*, pg_total_relation_size):")
    for r in results:
        parts = ", ".join(f"{name} {size / 2**20:,.1f} MB" for name, size in r["postings_tables"])
        print(f"  {r['n']:,} chunks: {r['postings_bytes'] / r['n']:,.0f} B/chunk ({parts})")
    print("postings the exhaustive leg reads per query (sum of df of the query's lexemes):")
    for r in results:
        print(f"  {r['n']:,} chunks: {r['postings_read']}")
    for r in results:
        if "load" in r:
            load = r["load"]
            print(
                f"load {load['chunks']:,} of {r['n']:,} chunks: upsert_many {load['seconds']:.0f} s "
                f"({load['rate']:,.0f} chunks/s), "
                f"HNSW {load['hnsw']:.0f} s"
            )
    print()
    print("ratios (p50 over all queries):")
    modes = results[0]["modes"]
    for r in results:
        for leg in ("text", "hybrid"):
            line = f"  {r['n']:,} {leg}:"
            if "exact" in modes and "bounded" in modes:
                bounded, exact = (
                    r["django"][f"bounded|{leg}"]["all"][0],
                    r["django"][f"exact|{leg}"]["all"][0],
                )
                line += f" bounded/exact {bounded / exact:.2f}x;"
            for m in modes:
                line += f" {m}/bm25s {r['django'][f'{m}|{leg}']['all'][0] / r['bm25s']['all'][0]:.1f}x;"
            print(line.rstrip(";"))
    for prev, last in itertools.pairwise(results):
        for m in modes:
            for leg in ("text", "hybrid"):
                a, b = prev["django"][f"{m}|{leg}"]["all"][0], last["django"][f"{m}|{leg}"]["all"][0]
                target = (
                    f" (target <= {TARGET_GROWTH}x at 1M/100k)"
                    if (prev["n"], last["n"]) == (100_000, 1_000_000)
                    else ""
                )
                print(f"  {m} {leg}: p50 at {last['n']:,} / p50 at {prev['n']:,} = {b / a:.2f}x{target}")
        b0, b1 = prev["bm25s"]["all"][0], last["bm25s"]["all"][0]
        print(f"  bm25s: p50 at {last['n']:,} / p50 at {prev['n']:,} = {b1 / b0:.2f}x")
    big = results[-1]
    if big["n"] == 1_000_000:
        for m in modes:
            text, hybrid = big["django"][f"{m}|text"]["all"][0], big["django"][f"{m}|hybrid"]["all"][0]
            print(
                f"  targets at 1M, {m}: text p50 {text:.1f} ms (<= {TARGET_TEXT_MS:g}: "
                f"{'met' if text <= TARGET_TEXT_MS else 'MISSED'}), hybrid p50 {hybrid:.1f} ms "
                f"(<= {TARGET_HYBRID_MS:g}: "
                f"{'met' if hybrid <= TARGET_HYBRID_MS else 'MISSED'})"
            )
    for r in results:
        print(f"  machine while timing {r['n']:,}: {r['uptime']}; {r.get('page_cache', '')}")


def table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    for row in [header, *rows]:
        print(
            "  ".join(
                x.ljust(w) if j < 2 else x.rjust(w) for j, (x, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chunks", default="10000,100000", help="comma-separated corpus sizes, ascending")
    parser.add_argument(
        "--modes", default="exact", help="comma-separated RAG['BM25']['MODE'] values: exact,bounded"
    )
    parser.add_argument("--queries", type=int, default=200, help="per query set")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--no-page-cache",
        dest="page_cache",
        action="store_false",
        help="do not read the database's files into the page cache before timing",
    )
    parser.add_argument(
        "--separate",
        action="store_true",
        help="time each mode in a pass of its own, after 100 untimed queries not among the timed ones",
    )
    parser.add_argument(
        "--keep-db", action="store_true", help="keep each size's database (the next run skips loading)"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="drop kept databases first (after a postings layout change)"
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # worker: one size
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    check_modes(modes)
    if args.separate and args.queries > WARM_FROM:
        parser.error(f"--separate warms up with SciFact claims {WARM_FROM} on: use --queries <= {WARM_FROM}")
    if args.one:
        sets = [scifact_queries(args.queries), msmarco_queries(args.queries)]
        result = run_size(args.one, modes, sets, args)
        args.out.write_text(json.dumps(result))
        return
    print(f"text latency (issue 14): sizes {args.chunks}, modes {args.modes}; {machine_line()}", flush=True)
    results = []
    sizes = [int(x) for x in args.chunks.split(",")]
    for n in sizes:
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            command = [sys.executable, __file__, "--one", str(n), "--out", tmp.name, "--modes", args.modes]
            command += ["--queries", str(args.queries), "--warmup", str(args.warmup)]
            command += ["--keep-db"] if args.keep_db else []
            command += ["--fresh"] if args.fresh else []
            command += ["--separate"] if args.separate else []
            command += [] if args.page_cache else ["--no-page-cache"]
            subprocess.run(command, check=True)
            results.append(json.loads(Path(tmp.name).read_text()))
        if n != sizes[-1]:
            report(results)  # so far: a later size that fails or is stopped does not take these along
    report(results)


if __name__ == "__main__":
    main()
