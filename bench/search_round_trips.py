"""kb.search(vec, mode="vector") against raw psycopg at 100k chunks, quiet and under a CPU hog.

    cd bench && PYTHONPATH=.. ../.venv/bin/python search_round_trips.py [--chunks 100000] [--queries 200]
    # development: keep the loaded database between runs
    ... search_round_trips.py --keep-db roundtrips_dev

One run, one scratch database on the bench server (``common.bench_database``):

1. Data: ``--chunks`` chunks of 384 dims (seeded random unit vectors; what the vectors mean does
   not change what is timed), 10 per document, in a vector-only collection (TEXT_SEARCH off),
   loaded with ``PgVectorStore.upsert_many``; then the space's HNSW index (``IndexSpec``: m 16,
   ef_construction 64) and ANALYZE.
2. Contenders, k=10, precomputed query vectors (no embedder time), every hit kept
   (``min_score=0``: random vectors are no better than chance, and raw returns 10 rows too):
   - ``kb.search`` on Django's connection as Django opens it (psycopg ``prepare_threshold=None``);
   - raw psycopg, ``prepare_threshold=None``: the same SQL as kb.search sends (``build_sql``, its
     settings inside), one ``execute`` of a plain autocommit connection;
   - the same pair with prepared statements (``prepare_threshold=5`` on both);
   - django-rag's rows alone (``pgsearch.fetch_rows``, no Hit objects), and the same statement
     sent as the store sent it before its settings moved into it: after a ``set_config``
     statement in a psycopg pipeline (one round trip, four writes).
   - raw psycopg, the statement one would write by hand (chunk and document columns, the same
     cast and partial index, one join under ORDER BY ... LIMIT), ef_search 40 and relaxed
     iterative scan set once per session.
   Raw uses one connection for all three, as Django's connection serves every kb.search row.
   Each query round runs every contender once, in an order rotated by one each round.
3. Quiet and loaded in the same run: blocks of queries alternate between no hog and ``--hog``
   processes spinning on the CPU (default 2, one per core here). Every block prints the load average.
4. Round trips and writes per search, on the wire (``tests/wire.py``: a relay that counts the
   client's sends and the times it waited for the server), untimed, 20 searches per contender.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

os.environ.setdefault("BENCH_PGDATA", "/var/tmp/django-rag/bench-pgdata")

import numpy as np
import psycopg
from common import (
    Database,
    Timer,
    bench_database,
    kept_database,
    machine_line,
    random_unit_vectors,
    setup_django,
    sha1,
)

COLLECTION = "bench-round-trips"
DIMS = 384
SPACE = f"hashing:{DIMS}"
K = 10
PER_DOCUMENT = 10
TARGET = 1.3
PIPELINED_SETTINGS = (
    "SELECT set_config('hnsw.ef_search', %(ef)s, true),"
    " set_config('hnsw.iterative_scan', 'relaxed_order', true),"
    " set_config('ivfflat.iterative_scan', 'relaxed_order', true)"
)
RAG = {
    "EMBEDDERS": {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder"}},
    "COLLECTIONS": {COLLECTION: {"EMBEDDER": "default", "TEXT_SEARCH": False}},
}


def load(vectors: np.ndarray, batch_chunks: int) -> float:
    import django_rag as rag
    from django_rag.stores.base import DocumentInfo
    from django_rag.stores.pgvector import PgVectorStore
    from django_rag.types import ChunkData

    store, kb = PgVectorStore(), rag.collection(COLLECTION)
    rows = vectors.tolist()
    items: list[tuple[DocumentInfo, list[ChunkData]]] = []
    with Timer() as timer:
        for start in range(0, len(rows), PER_DOCUMENT):
            d = start // PER_DOCUMENT
            chunks = []
            for i, vector in enumerate(rows[start : start + PER_DOCUMENT]):
                text = f"document {d} chunk {i}: {sha1(str(start + i))}"
                chunks.append(
                    ChunkData(
                        index=i,
                        content=text,
                        content_hash=sha1(text),
                        token_count=len(text) // 4,
                        char_end=len(text),
                        embedding=vector,
                    )
                )
            items.append((DocumentInfo(f"doc/{d}", title=f"Document {d}"), chunks))
            if len(items) * PER_DOCUMENT >= batch_chunks:
                store.upsert_many(kb, items, space=SPACE)
                items = []
        if items:
            store.upsert_many(kb, items, space=SPACE)
    return timer.seconds


def build_index(db: Database) -> float:
    from django_rag.ddl import IndexSpec

    with db.connect(autocommit=True) as conn, Timer() as timer:
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute(IndexSpec(SPACE, DIMS).create_sql())
        conn.execute("VACUUM ANALYZE")
    return timer.seconds


def raw_sql(collection_id: int) -> str:
    """The statement one would write by hand: one SELECT, the space's cast and partial index."""
    from django_rag.models import Chunk, Document

    chunk = [f.column for f in Chunk._meta.concrete_fields if f.attname not in ("embedding", "search_vector")]
    document = [f.column for f in Document._meta.concrete_fields]
    columns = ", ".join([f'c."{c}"' for c in chunk] + [f'd."{c}"' for c in document])
    typed = f"vector({DIMS})"
    return (
        f"SELECT {columns}, 1 - ((c.embedding::{typed}) <=> %(q)s::{typed}) AS score "
        "FROM django_rag_chunk AS c JOIN django_rag_document AS d ON d.id = c.document_id "
        f"WHERE c.collection_id = {collection_id} AND c.space = '{SPACE}' "
        f"ORDER BY (c.embedding::{typed}) <=> %(q)s::{typed} LIMIT {K}"
    )


def raw_connection(url_or_kwargs: dict[str, Any], prepare_threshold: int | None) -> psycopg.Connection[Any]:
    from pgvector.psycopg import register_vector

    conn = psycopg.connect(**url_or_kwargs, autocommit=True, prepare_threshold=prepare_threshold)
    register_vector(conn)
    conn.execute(
        "SELECT set_config('hnsw.ef_search', '40', false),"
        " set_config('hnsw.iterative_scan', 'relaxed_order', false)"
    )
    return conn


def spin() -> None:
    while True:
        pass


@contextmanager
def hog(processes: int) -> Iterator[None]:
    """``processes`` processes spinning on the CPU for the block (none: a no-op)."""
    workers = [multiprocessing.Process(target=spin, daemon=True) for _ in range(processes)]
    for w in workers:
        w.start()
    try:
        time.sleep(1.0 if workers else 0.0)  # let the scheduler see them
        yield
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.join()


def load_line() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200, help="query vectors, each run once per block")
    parser.add_argument(
        "--blocks", type=int, default=4, help="blocks per condition (quiet, loaded), alternating"
    )
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--hog", type=int, default=2, help="spinning processes in the loaded blocks")
    parser.add_argument("--batch-chunks", type=int, default=2000)
    parser.add_argument("--keep-db", default="", help="development: reuse/keep this database (loads once)")
    args = parser.parse_args(argv)
    print(f"# {machine_line()}")
    database = kept_database(args.keep_db) if args.keep_db else bench_database("rag_round_trips")
    with database as db:
        setup_django(db, RAG)
        run(db, args)


def run(db: Database, args: argparse.Namespace) -> None:
    from django.db import connection

    import django_rag as rag
    from django_rag.models import Chunk
    from django_rag.stores.adapters import PackedVector, packed_dumper, vector_type
    from django_rag.stores.base import QueryScope, SearchRequest
    from django_rag.stores.pgsearch import build_sql, fetch_rows

    kb = rag.collection(COLLECTION)
    have = Chunk.objects.filter(collection=kb).count()
    if have != args.chunks:
        if have:
            raise SystemExit(f"the kept database holds {have} chunks, not {args.chunks}: drop it first")
        seconds = load(random_unit_vectors(args.chunks, DIMS, seed=0), args.batch_chunks)
        print(f"# loaded {args.chunks} chunks in {seconds:.1f} s; HNSW index in {build_index(db):.1f} s")
    queries = random_unit_vectors(args.queries, DIMS, seed=1)
    as_lists = queries.tolist()
    settings = connection.settings_dict
    conninfo = {
        "dbname": settings["NAME"],
        "host": settings["HOST"],
        "port": settings["PORT"] or None,
        "user": settings["USER"] or None,
        "password": settings["PASSWORD"] or None,
    }
    raw_conn = raw_connection(conninfo, None)
    # "raw": django-rag's own statement (the same SQL, its settings inside), one execute; and the
    # statement one would write by hand (a join under ORDER BY ... LIMIT, settings per session).
    first = SearchRequest(mode="vector", space=SPACE, k=K, vector=as_lists[0], scope=QueryScope())
    same_sql, hand_sql = build_sql(kb, first)[0], raw_sql(kb.pk)
    for statement, name in ((same_sql, "vector"), (hand_sql, "q")):
        plan = "\n".join(r[0] for r in raw_conn.execute("EXPLAIN " + statement, {name: queries[0]}))
        if "Index Scan using rag_hnsw" not in plan:
            raise SystemExit(f"the raw statement does not use the HNSW index:\n{plan}")

    def django_threshold(threshold: int | None, call: Callable[[int], Any]) -> Callable[[int], Any]:
        def run(i: int) -> Any:
            connection.ensure_connection()
            connection.connection.prepare_threshold = threshold
            return call(i)

        return run

    def search(i: int) -> int:
        return len(kb.search(as_lists[i], k=K, min_score=0))

    def raw_on(
        conn: psycopg.Connection[Any], threshold: int | None, hand: bool = False
    ) -> Callable[[int], int]:
        statement, name = (hand_sql, "q") if hand else (same_sql, "vector")

        def call(i: int) -> int:
            conn.prepare_threshold = threshold  # one connection for all, as Django's serves kb.search
            return len(conn.execute(statement, {name: queries[i]}).fetchall())

        return call

    registered: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()

    def rows_pipelined(i: int) -> int:
        """django-rag's statement sent as before this change: after a settings statement, in a
        pipeline (psycopg writes each statement, the Sync and a Flush separately)."""
        request = SearchRequest(mode="vector", space=SPACE, k=K, vector=as_lists[i], scope=QueryScope())
        statement, params = build_sql(kb, request)
        pg = connection.connection
        if pg not in registered:
            pg.adapters.register_dumper(PackedVector, packed_dumper(vector_type(pg).oid))
            registered.add(pg)
        with psycopg.Cursor(pg) as setup, psycopg.Cursor(pg) as cur:
            with pg.pipeline():
                setup.execute(PIPELINED_SETTINGS, {"ef": "40"}, prepare=True)
                cur.execute(statement, params)
            return len(cur.fetchall())

    def rows_only(i: int) -> int:
        request = SearchRequest(mode="vector", space=SPACE, k=K, vector=as_lists[i], scope=QueryScope())
        return len(fetch_rows(kb, request, "default"))

    contenders: dict[str, Callable[[int], Any]] = {
        "kb.search, Django's connection as opened": django_threshold(None, search),
        "raw psycopg, prepare_threshold=None": raw_on(raw_conn, None),
        "kb.search, prepare_threshold=5": django_threshold(5, search),
        "raw psycopg, prepare_threshold=5 (psycopg's default)": raw_on(raw_conn, 5),
        "django-rag's rows alone (fetch_rows), unprepared": django_threshold(None, rows_only),
        "  the same rows sent as before (settings statement + search in a pipeline)": django_threshold(
            None, rows_pipelined
        ),
        "raw psycopg, hand-written join, prepare_threshold=None": raw_on(raw_conn, None, hand=True),
    }
    names = list(contenders)
    for name in names:
        for i in range(args.warmup):
            assert contenders[name](i % args.queries) == K, name
    times: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}  # this process's CPU time per search
    loads: dict[str, list[str]] = {"quiet": [], "loaded": []}
    turn = 0
    for block in range(2 * args.blocks):
        condition = "quiet" if block % 2 == 0 else "loaded"
        with hog(args.hog if condition == "loaded" else 0):
            loads[condition].append(load_line())
            for i in range(args.queries):
                order = names[turn % len(names) :] + names[: turn % len(names)]
                turn += 1
                for name in order:
                    cpu, started = time.process_time(), time.perf_counter()
                    contenders[name](i)
                    times.setdefault((condition, name), []).append(time.perf_counter() - started)
                    cpus.setdefault((condition, name), []).append(time.process_time() - cpu)
            loads[condition][-1] += f" -> {load_line()}"
    connection.connection.prepare_threshold = None

    trips = wire_counts(contenders, raw_on, conninfo)
    print(
        f"\n== kb.search(vec, mode='vector', k={K}) vs raw psycopg, {args.chunks} chunks x {DIMS} dims, "
        f"{args.queries} queries x {args.blocks} blocks per condition, rotating order; {machine_line()}"
    )
    for condition in ("quiet", "loaded"):
        hogs = f"{args.hog} spinning processes" if condition == "loaded" else "no hog"
        print(f"\n-- {condition} ({hogs}); load average per block: {' | '.join(loads[condition])}")
        print(
            "| contender | p50 ms | p95 ms | p50 ÷ raw | p95 ÷ raw | client CPU ms (mean) "
            "| round trips / writes per search |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name in names:
            peer = (
                "raw psycopg, prepare_threshold=5 (psycopg's default)"
                if "=5" in name
                else ("raw psycopg, prepare_threshold=None")
            )
            ms = np.array(times[(condition, name)]) * 1000
            base = np.array(times[(condition, peer)]) * 1000
            p50, p95 = np.percentile(ms, 50), np.percentile(ms, 95)
            b50, b95 = np.percentile(base, 50), np.percentile(base, 95)
            cpu = np.mean(cpus[(condition, name)]) * 1000
            print(
                f"| {name} | {p50:.2f} | {p95:.2f} | {p50 / b50:.2f}x | {p95 / b95:.2f}x | "
                f"{cpu:.2f} | {trips[name][0]:.1f} / {trips[name][1]:.1f} |"
            )
        for name, peer in (
            ("kb.search, Django's connection as opened", "raw psycopg, prepare_threshold=None"),
            ("kb.search, prepare_threshold=5", "raw psycopg, prepare_threshold=5 (psycopg's default)"),
        ):
            ratio = np.percentile(times[(condition, name)], 50) / np.percentile(times[(condition, peer)], 50)
            verdict = "met" if ratio <= TARGET else "MISSED"
            print(f"{condition}: {name} / {peer}: p50 {ratio:.2f}x (target <= {TARGET}: {verdict})")
        now, before = names[4], names[5]
        ratio = np.percentile(times[(condition, now)], 50) / np.percentile(times[(condition, before)], 50)
        print(f"{condition}: rows in one write / rows as before (pipeline): p50 {ratio:.2f}x")
    raw_conn.close()


def wire_counts(
    contenders: dict[str, Callable[[int], Any]],
    raw_on: Callable[[psycopg.Connection[Any], int | None], Callable[[int], Any]],
    conninfo: dict[str, Any],
) -> dict[str, tuple[float, float]]:
    """Round trips and writes per search of each contender, through the counting relay (untimed)."""
    from django.db import connection

    from tests.wire import WireCounter, counted, upstream_of

    out: dict[str, tuple[float, float]] = {}
    n = 20
    upstream, port = upstream_of(connection.settings_dict)
    for name, call in contenders.items():
        if name.startswith("raw"):
            wire = WireCounter(upstream, port)
            threshold = 5 if "=5" in name else None
            conn = raw_connection({**conninfo, "host": wire.directory, "port": port}, threshold)
            call = raw_on(conn, threshold, hand="hand-written" in name)
            for i in range(10):
                call(i)
            wire.reset()
            for i in range(n):
                call(i)
            counts = wire.snapshot()
            conn.close()
            wire.close()
        else:
            with counted() as wire:
                for i in range(10):
                    call(i)
                wire.reset()
                for i in range(n):
                    call(i)
                counts = wire.snapshot()
        out[name] = (counts.round_trips / n, counts.writes / n)
    return out


if __name__ == "__main__":
    main()
